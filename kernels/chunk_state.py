"""Helion port of mamba-ssm's ``_chunk_state_fwd``: the state each chunk builds from zero,
states[c] = sum over the chunk's positions l of x[l] B[l]^T * exp(dA_cumsum[last] - dA_cumsum[l]) * dt[l]."""

from __future__ import annotations

from typing import Any

import helion
import helion.language as hl
import torch

from contract.checks import check_chunk_state
from kernels.launch import ConfigLike, launch
from kernels.precision import acc_dtype, fp64_dot


@helion.kernel(static_shapes=False, dot_precision="ieee")
def chunk_state_kernel(
    B: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    dA_cumsum: torch.Tensor,
    seq_idx: torch.Tensor | None,
    states_dtype: torch.dtype,
) -> torch.Tensor:
    """B (batch, seqlen, ngroups, dstate), x (batch, seqlen, nheads, headdim), dt and dA_cumsum (batch, nheads,
    nchunks, chunk_size) -> states (batch, nchunks, nheads, headdim, dstate) in states_dtype.

    One program per (batch, chunk, head, headdim block, dstate block), looping over the chunk's positions. As in
    mamba-ssm, B is scaled in fp32, rounded to x's dtype and multiplied with x in that dtype with fp32 accumulation
    (true fp32, not TF32, for fp32 inputs; fp64 inputs compute in fp64). Positions past seqlen are masked explicitly
    (hl.tile masks only against chunk_size); "last" is the chunk's final slot, where dA_cumsum stays flat past seqlen.
    With seq_idx only positions of the sequence of the chunk's last real position contribute."""
    batch, seqlen, nheads, headdim = x.shape
    ngroups, dstate = B.shape[2], B.shape[3]
    nchunks, chunk_size = dt.shape[2], dt.shape[3]
    heads_per_group = nheads // ngroups
    wide = acc_dtype(x.dtype)
    states = torch.empty([batch, nchunks, nheads, headdim, dstate], dtype=states_dtype, device=x.device)
    for tile_b, tile_c, tile_h, tile_p, tile_n in hl.tile(
        [batch, nchunks, nheads, headdim, dstate], block_size=[1, 1, 1, None, None]
    ):
        group = tile_h.begin // heads_per_group
        start = tile_c.begin * chunk_size
        dA_last = dA_cumsum[tile_b.begin, tile_h.begin, tile_c.begin, chunk_size - 1]
        if seq_idx is not None:
            last_pos = min(start + chunk_size, seqlen) - 1
            seq_last = seq_idx[tile_b.begin, last_pos]
        acc = hl.zeros([tile_p, tile_n], dtype=wide)
        for tile_k in hl.tile(chunk_size):
            pos = start + tile_k.index
            valid = pos < seqlen
            xs = hl.load(x, [tile_b.begin, pos, tile_h.begin, tile_p], extra_mask=valid[:, None])
            bs = hl.load(B, [tile_b.begin, pos, group, tile_n], extra_mask=valid[:, None]).to(wide)
            dA_k = dA_cumsum[tile_b.begin, tile_h.begin, tile_c.begin, tile_k]
            dt_k = dt[tile_b.begin, tile_h.begin, tile_c.begin, tile_k]
            scale = torch.exp(torch.clamp(dA_last - dA_k, max=0.0)) * dt_k
            keep = valid
            if seq_idx is not None:
                seq_k = hl.load(seq_idx, [tile_b.begin, pos], extra_mask=valid)
                keep = valid & (seq_k == seq_last) & (seq_last >= 0)
            scale = torch.where(keep, scale, 0.0)
            lhs, rhs = xs.T, (bs * scale[:, None]).to(xs.dtype)
            acc = fp64_dot(lhs, rhs, acc) if wide == torch.float64 else hl.dot(lhs, rhs, acc=acc)
        states[tile_b.begin, tile_c.begin, tile_h.begin, tile_p, tile_n] = acc.to(states_dtype)
    return states


@helion.kernel(static_shapes=False, dot_precision="ieee")
def chunk_state_varlen_kernel(
    B: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    dA_cumsum: torch.Tensor,
    cu_seqlens: torch.Tensor,
    chunk_states: torch.Tensor,
    chunk_size: int,
) -> torch.Tensor:
    """B (total, ngroups, dstate), x (total, nheads, headdim), dt and dA_cumsum (nheads, nchunks * chunk_size),
    cu_seqlens (nseq + 1,), chunk_states (nchunks, nheads, headdim, dstate) entering each chunk -> states
    (nseq, nheads, headdim, dstate) in chunk_states.dtype, the state after each sequence's last token.

    One program per (sequence, head, headdim block, dstate block). The chunk c holding the sequence's last
    token is read from cu_seqlens; its positions from the sequence's start (or the chunk's) to that token
    are summed as in :data:`chunk_state_kernel`, decayed to that token, and exp(dA_cumsum at that token) *
    chunk_states[c] is added when the sequence began before chunk c. An empty sequence gets zeros.
    dt and dA_cumsum come flattened over (chunk, position), so that every data-dependent index is a single
    tensor (Helion 1.5 fails to lower a load indexed by two 0-dim tensors)."""
    nheads, headdim = x.shape[1], x.shape[2]
    ngroups, dstate = B.shape[1], B.shape[2]
    chunk_size = hl.specialize(chunk_size)
    nseq = cu_seqlens.size(0) - 1
    heads_per_group = nheads // ngroups
    wide = acc_dtype(x.dtype)
    states = torch.empty([nseq, nheads, headdim, dstate], dtype=chunk_states.dtype, device=x.device)
    for tile_s, tile_h, tile_p, tile_n in hl.tile([nseq, nheads, headdim, dstate], block_size=[1, 1, None, None]):
        group = tile_h.begin // heads_per_group
        seq_start = cu_seqlens[tile_s.begin]
        seq_end = cu_seqlens[tile_s.begin + 1]
        nonempty = seq_end > seq_start
        last = torch.clamp(seq_end - 1, min=0)  # the sequence's last token (0 for an empty sequence)
        chunk = last // chunk_size
        chunk_start = chunk * chunk_size
        dA_last = dA_cumsum[tile_h.begin, last]
        acc = hl.zeros([tile_p, tile_n], dtype=wide)
        for tile_k in hl.tile(chunk_size):
            pos = chunk_start + tile_k.index
            valid = (pos >= seq_start) & (pos <= last) & nonempty
            xs = hl.load(x, [pos, tile_h.begin, tile_p], extra_mask=valid[:, None])
            bs = hl.load(B, [pos, group, tile_n], extra_mask=valid[:, None]).to(wide)
            dA_k = hl.load(dA_cumsum, [tile_h.begin, pos])
            dt_k = hl.load(dt, [tile_h.begin, pos])
            scale = torch.where(valid, torch.exp(torch.clamp(dA_last - dA_k, max=0.0)) * dt_k, 0.0)
            lhs, rhs = xs.T, (bs * scale[:, None]).to(xs.dtype)
            acc = fp64_dot(lhs, rhs, acc) if wide == torch.float64 else hl.dot(lhs, rhs, acc=acc)
        carried = chunk_states[chunk, tile_h.begin, tile_p, tile_n].to(wide)
        acc = acc + torch.where(nonempty & (seq_start < chunk_start), torch.exp(dA_last), 0.0) * carried
        states[tile_s.begin, tile_h.begin, tile_p, tile_n] = acc.to(states.dtype)
    return states


CONFIGS: list[dict[str, Any]] = [
    {"block_sizes": [16, 32, 32], "num_warps": 4, "num_stages": 2},
    {"block_sizes": [32, 16, 16], "num_warps": 8, "num_stages": 3},
]
"""Explicit configs for the CPU parity tests: block_sizes = [headdim, dstate, chunk positions] (Helion raises
every dot dimension below 16 to 16). At the CI shapes (chunk 16/32, headdim 8/16, dstate 16) they cover one
and two position blocks per chunk and blocks wider than headdim, dstate and the chunk."""


def chunk_state_args(
    B: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    dA_cumsum: torch.Tensor,
    seq_idx: torch.Tensor | None = None,
    states_in_fp32: bool = True,
) -> tuple[Any, ...]:
    """Validate the wrapper's arguments and return the arguments of :data:`chunk_state_kernel` (what a tuner
    passes to ``chunk_state_kernel.autotune``)."""
    check_chunk_state(B, x, dt, dA_cumsum, seq_idx)
    return (B, x, dt, dA_cumsum, seq_idx, acc_dtype(x.dtype) if states_in_fp32 else B.dtype)


def chunk_state_fwd(
    B: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    dA_cumsum: torch.Tensor,
    seq_idx: torch.Tensor | None = None,
    states_in_fp32: bool = True,
    *,
    config: ConfigLike = None,
) -> torch.Tensor:
    """B (batch, seqlen, ngroups, dstate), x (batch, seqlen, nheads, headdim), dt and dA_cumsum (fp32, batch,
    nheads, nchunks, chunk_size) -> states (batch, nchunks, nheads, headdim, dstate), fp32 (fp64 for
    fp64 x) when states_in_fp32 else B.dtype. Head h reads group h // (nheads // ngroups)."""
    return launch(chunk_state_kernel, chunk_state_args(B, x, dt, dA_cumsum, seq_idx, states_in_fp32), config)


VARLEN_CONFIGS: list[dict[str, Any]] = [
    {"block_sizes": [16, 16, 16], "num_warps": 4, "num_stages": 2},
    {"block_sizes": [32, 16, 32], "num_warps": 4, "num_stages": 3},
]
"""Explicit configs of :data:`chunk_state_varlen_kernel`: block_sizes = [headdim, dstate, chunk positions]."""


def chunk_state_varlen_args(
    B: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    dA_cumsum: torch.Tensor,
    cu_seqlens: torch.Tensor,
    chunk_states: torch.Tensor,
) -> tuple[Any, ...]:
    """Validate the wrapper's arguments and return the arguments of :data:`chunk_state_varlen_kernel`."""
    if x.dim() != 3 or min(x.shape) < 1:
        raise ValueError(f"x must be a non-empty (total_seqlen, nheads, headdim), got shape {tuple(x.shape)}")
    total, nheads, headdim = x.shape
    if B.dim() != 3 or B.shape[0] != total or nheads % B.shape[1]:
        raise ValueError(f"B must be (total_seqlen={total}, ngroups dividing {nheads}, dstate), got {tuple(B.shape)}")
    if dt.dim() != 3 or dt.shape[0] != nheads or dt.shape[1] != -(-total // dt.shape[2]):
        raise ValueError(
            f"dt must be (nheads={nheads}, nchunks, chunk_size) covering {total} tokens, got {tuple(dt.shape)}"
        )
    if dA_cumsum.shape != dt.shape:
        raise ValueError(f"dA_cumsum must have the shape of dt {tuple(dt.shape)}, got {tuple(dA_cumsum.shape)}")
    if cu_seqlens.dim() != 1 or cu_seqlens.numel() < 2:
        raise ValueError(f"cu_seqlens must be (nseq + 1,) with nseq >= 1, got shape {tuple(cu_seqlens.shape)}")
    if chunk_states.shape != (dt.shape[1], nheads, headdim, B.shape[2]):
        raise ValueError(
            f"chunk_states must have shape {(dt.shape[1], nheads, headdim, B.shape[2])}, "
            f"got {tuple(chunk_states.shape)}"
        )
    nchunks, chunk_size = dt.shape[1:]
    return (
        B,
        x,
        dt.reshape(nheads, nchunks * chunk_size),
        dA_cumsum.reshape(nheads, nchunks * chunk_size),
        cu_seqlens,
        chunk_states,
        chunk_size,
    )


def chunk_state_varlen(
    B: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    dA_cumsum: torch.Tensor,
    cu_seqlens: torch.Tensor,
    chunk_states: torch.Tensor,
    *,
    config: ConfigLike = None,
) -> torch.Tensor:
    """The state after each packed sequence's last token (mamba-ssm's ``chunk_state_varlen``): B (total,
    ngroups, dstate), x (total, nheads, headdim), dt and dA_cumsum (fp32, nheads, nchunks, chunk_size),
    cu_seqlens (nseq + 1,) nondecreasing in [0, total], chunk_states (nchunks, nheads, headdim, dstate) entering
    each chunk -> (nseq, nheads, headdim, dstate) in chunk_states.dtype; zeros for an empty sequence (where
    mamba-ssm reads out of bounds)."""
    args = chunk_state_varlen_args(B, x, dt, dA_cumsum, cu_seqlens, chunk_states)
    return launch(chunk_state_varlen_kernel, args, config)


HAS_BACKWARD = False
"""Forward only: the parity engine judges this port's outputs, not its gradients (no Helion backward yet)."""
