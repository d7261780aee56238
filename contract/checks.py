"""The argument contract of every op: up-front checks that the references (``reference/<op>.py``), the Triton
adapters (``reference/mamba_triton.py``) and the Helion ports (``kernels/<op>.py``) all run first. It imports
only torch, so a training process that uses the kernels loads it without anything of the harness.

Each check raises one clear error naming the offending argument before any work: ValueError for a bad shape
or size, TypeError for a bad dtype. mamba-ssm's own wrappers check with bare ``assert`` (an AssertionError
naming nothing) or not at all (a ZeroDivisionError, an unpacking error or a kernel reading out of bounds);
running the same checks first, the reference, the original kernel and the Helion port reject an invalid call
alike. The invalid calls each op declares are its ``OpSpec.error_inputs`` (``tests/test_error_inputs.py``).
"""

from __future__ import annotations

import torch


def sizes(name: str, t: torch.Tensor, layout: str, ndim: int) -> tuple[int, ...]:
    """``t.shape`` if ``t`` is a non-empty tensor of ``ndim`` dimensions (``layout`` names them, e.g.
    ``"(batch, seqlen, nheads)"``); ValueError naming ``name`` otherwise."""
    if t.dim() != ndim or t.numel() == 0:
        raise ValueError(f"{name} must be a non-empty {layout}, got shape {tuple(t.shape)}")
    return tuple(t.shape)


def shape(name: str, t: torch.Tensor | None, expected: tuple[int, ...]) -> None:
    """ValueError naming ``name`` unless ``t`` is None or has shape ``expected``."""
    if t is not None and tuple(t.shape) != tuple(expected):
        raise ValueError(f"{name} must have shape {tuple(expected)}, got {tuple(t.shape)}")


def positive_chunk_size(value: int) -> None:
    """ValueError unless ``value`` is a positive integer."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"chunk_size must be a positive integer, got {value!r}")


def groups(name: str, ngroups: int, nheads: int) -> None:
    """ValueError unless ``ngroups`` (the group dimension of ``name``) divides ``nheads``."""
    if nheads % ngroups:
        raise ValueError(f"nheads {nheads} is not a multiple of ngroups {ngroups} ({name}'s group dimension)")


def covers(name: str, t: torch.Tensor, batch: int, nheads: int, seqlen: int) -> tuple[int, int]:
    """(nchunks, chunk_size) of a chunked ``t`` (batch, nheads, nchunks, chunk_size) whose chunks cover
    exactly ``seqlen`` positions; ValueError naming ``name`` otherwise."""
    if (
        t.dim() != 4
        or tuple(t.shape[:2]) != (batch, nheads)
        or t.shape[3] < 1
        or t.shape[2] != -(-seqlen // t.shape[3])
    ):
        raise ValueError(
            f"{name} must be (batch={batch}, nheads={nheads}, nchunks, chunk_size) covering seqlen {seqlen}, "
            f"got {tuple(t.shape)}"
        )
    return t.shape[2], t.shape[3]


def integer_tensor(name: str, t: torch.Tensor | None) -> None:
    """TypeError naming ``name`` unless ``t`` is None or holds integers (sequence indices, offsets)."""
    if t is not None and (t.is_floating_point() or t.is_complex() or t.dtype == torch.bool):
        raise TypeError(f"{name} must be an integer tensor, got {t.dtype}")


def floating_tensor(name: str, t: torch.Tensor | None) -> None:
    """TypeError naming ``name`` unless ``t`` is None or a floating-point tensor."""
    if t is not None and not t.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got {t.dtype}")


# ---------------------------------------------------------------------------------------------
# One check per op, with the op's signature (the arguments it validates)


def check_chunk_cumsum(dt: torch.Tensor, A: torch.Tensor, chunk_size: int, dt_bias: torch.Tensor | None = None) -> None:
    """Reject an invalid call of ``chunk_cumsum_fwd`` (every implementation runs this first)."""
    _, _, nheads = sizes("dt", dt, "(batch, seqlen, nheads)", 3)
    floating_tensor("dt", dt)
    shape("A", A, (nheads,))
    shape("dt_bias", dt_bias, (nheads,))
    positive_chunk_size(chunk_size)


def check_chunk_state(
    B: torch.Tensor, x: torch.Tensor, dt: torch.Tensor, dA_cumsum: torch.Tensor, seq_idx: torch.Tensor | None = None
) -> None:
    """Reject an invalid call of ``chunk_state_fwd`` (every implementation runs this first)."""
    batch, seqlen, nheads, _ = sizes("x", x, "(batch, seqlen, nheads, headdim)", 4)
    if B.dim() != 4 or tuple(B.shape[:2]) != (batch, seqlen) or B.numel() == 0:
        raise ValueError(f"B must be (batch={batch}, seqlen={seqlen}, ngroups, dstate), got {tuple(B.shape)}")
    groups("B", B.shape[2], nheads)
    covers("dt", dt, batch, nheads, seqlen)
    shape("dA_cumsum", dA_cumsum, tuple(dt.shape))
    shape("seq_idx", seq_idx, (batch, seqlen))
    integer_tensor("seq_idx", seq_idx)


def check_state_passing(
    states: torch.Tensor,
    dA_chunk_cumsum: torch.Tensor,
    initial_states: torch.Tensor | None = None,
    seq_idx: torch.Tensor | None = None,
    chunk_size: int | None = None,
) -> None:
    """Reject an invalid call of ``state_passing_fwd`` (every implementation runs this first)."""
    batch, nchunks, nheads, dim = sizes("states", states, "(batch, nchunks, nheads, dim)", 4)
    shape("dA_chunk_cumsum", dA_chunk_cumsum, (batch, nheads, nchunks))
    shape("initial_states", initial_states, (batch, nheads, dim))
    if seq_idx is None:
        return
    if chunk_size is None:
        raise ValueError("chunk_size is required with seq_idx")
    positive_chunk_size(chunk_size)
    if seq_idx.dim() != 2 or seq_idx.shape[0] != batch:
        raise ValueError(f"seq_idx must be (batch={batch}, seqlen), got shape {tuple(seq_idx.shape)}")
    if -(-seq_idx.shape[1] // chunk_size) != nchunks:
        raise ValueError(
            f"seq_idx of length {seq_idx.shape[1]} with chunk_size {chunk_size} does not give {nchunks} chunks"
        )
    integer_tensor("seq_idx", seq_idx)


def check_bmm_chunk(a: torch.Tensor, b: torch.Tensor, chunk_size: int, seq_idx: torch.Tensor | None = None) -> None:
    """Reject an invalid call of ``bmm_chunk_fwd`` (every implementation runs this first)."""
    if a.dim() not in (3, 4) or a.numel() == 0:
        raise ValueError(
            f"a must be a non-empty (batch, seqlen, k) or (batch, seqlen, ngroups, k), got shape {tuple(a.shape)}"
        )
    shape("b", b, tuple(a.shape))
    positive_chunk_size(chunk_size)
    shape("seq_idx", seq_idx, tuple(a.shape[:2]))
    integer_tensor("seq_idx", seq_idx)


def check_chunk_scan(
    cb: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    dA_cumsum: torch.Tensor,
    C: torch.Tensor,
    states: torch.Tensor,
    D: torch.Tensor | None = None,
    z: torch.Tensor | None = None,
    seq_idx: torch.Tensor | None = None,
) -> None:
    """Reject an invalid call of ``chunk_scan_fwd`` (every implementation runs this first)."""
    batch, seqlen, nheads, headdim = sizes("x", x, "(batch, seqlen, nheads, headdim)", 4)
    if C.dim() != 4 or tuple(C.shape[:2]) != (batch, seqlen) or C.numel() == 0:
        raise ValueError(f"C must be (batch={batch}, seqlen={seqlen}, ngroups, dstate), got {tuple(C.shape)}")
    ngroups, dstate = C.shape[2:]
    groups("C", ngroups, nheads)
    nchunks, chunk_size = covers("dt", dt, batch, nheads, seqlen)
    shape("dA_cumsum", dA_cumsum, tuple(dt.shape))
    shape("cb", cb, (batch, nchunks, ngroups, chunk_size, chunk_size))
    shape("states", states, (batch, nchunks, nheads, headdim, dstate))
    if D is not None and tuple(D.shape) not in ((nheads,), (nheads, headdim)):
        raise ValueError(f"D must have shape ({nheads},) or ({nheads}, {headdim}), got {tuple(D.shape)}")
    shape("z", z, tuple(x.shape))
    shape("seq_idx", seq_idx, (batch, seqlen))
    integer_tensor("seq_idx", seq_idx)


def check_combined(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    chunk_size: int,
    D: torch.Tensor | None = None,
    z: torch.Tensor | None = None,
    dt_bias: torch.Tensor | None = None,
    initial_states: torch.Tensor | None = None,
    seq_idx: torch.Tensor | None = None,
    cu_seqlens: torch.Tensor | None = None,
    return_varlen_states: bool = False,
) -> None:
    """Reject an invalid call of ``mamba_chunk_scan_combined`` (every implementation runs this first)."""
    batch, seqlen, nheads, headdim = sizes("x", x, "(batch, seqlen, nheads, headdim)", 4)
    positive_chunk_size(chunk_size)
    shape("dt", dt, (batch, seqlen, nheads))
    floating_tensor("dt", dt)
    shape("A", A, (nheads,))
    if B.dim() != 4 or tuple(B.shape[:2]) != (batch, seqlen) or B.numel() == 0:
        raise ValueError(f"B must be (batch={batch}, seqlen={seqlen}, ngroups, dstate), got {tuple(B.shape)}")
    groups("B", B.shape[2], nheads)
    shape("C", C, tuple(B.shape))
    if D is not None and tuple(D.shape) not in ((nheads,), (nheads, headdim)):
        raise ValueError(f"D must have shape ({nheads},) or ({nheads}, {headdim}), got {tuple(D.shape)}")
    shape("z", z, tuple(x.shape))
    shape("dt_bias", dt_bias, (nheads,))
    shape("initial_states", initial_states, (batch, nheads, headdim, B.shape[3]))
    shape("seq_idx", seq_idx, (batch, seqlen))
    integer_tensor("seq_idx", seq_idx)
    if return_varlen_states:
        if cu_seqlens is None:
            raise ValueError("cu_seqlens must be provided if return_varlen_states is True")
        if batch != 1:
            raise ValueError(f"cu_seqlens (varlen states) is only supported with batch 1, got batch {batch}")
        if cu_seqlens.dim() != 1 or cu_seqlens.numel() < 2:
            raise ValueError(f"cu_seqlens must be (nseq + 1,) with nseq >= 1, got shape {tuple(cu_seqlens.shape)}")
        integer_tensor("cu_seqlens", cu_seqlens)


def check_layernorm(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    z: torch.Tensor | None = None,
    group_size: int | None = None,
) -> int:
    """Reject an invalid call of ``layernorm_fn`` (every implementation runs this first), and return the group size."""
    if x.dim() < 1 or x.numel() == 0:
        raise ValueError(f"x must be a non-empty (..., N), got shape {tuple(x.shape)}")
    floating_tensor("x", x)
    n = x.shape[-1]
    group_size = n if group_size is None else group_size
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1 or n % group_size:
        raise ValueError(f"group_size must be a positive divisor of the last dimension {n} of x, got {group_size!r}")
    shape("weight", weight, (n,))
    shape("bias", bias, (n,))
    shape("z", z, tuple(x.shape))
    return group_size
