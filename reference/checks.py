"""Up-front argument checks shared by the references (``reference/<op>.py``) and the Triton adapters
(``reference/mamba_triton.py``).

Each raises one clear error naming the offending argument before any work: ValueError for a bad shape or
size, TypeError for a bad dtype. mamba-ssm's own wrappers check with bare ``assert`` (an AssertionError
naming nothing) or not at all (a ZeroDivisionError, an unpacking error or a kernel reading out of bounds);
the adapters run these checks first, so that the reference, the original kernel and the Helion port
(``kernels/<op>.py``, with messages in the same words) reject an invalid call alike. The invalid calls each
op declares are its ``OpSpec.error_inputs`` (``tests/test_error_inputs.py``).
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


def chunk_size(value: int) -> None:
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
