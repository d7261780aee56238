"""Reference of mamba-ssm's ``_chunk_state_fwd`` (the state each chunk builds from zero) and
``chunk_state_varlen`` (the state at the end of each packed sequence)."""

from __future__ import annotations

import itertools

import torch

from contract.checks import check_chunk_state
from reference.common import compute_dtype, per_chunk


def _decay_to_last(dA_cumsum: torch.Tensor, last: torch.Tensor) -> torch.Tensor:
    """exp(dA_cumsum[last] - dA_cumsum) clamped to <= 1, as the kernels do (exp(min(., 0)))."""
    return torch.exp(torch.clamp(last - dA_cumsum, max=0.0))


def chunk_state_fwd(
    B: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    dA_cumsum: torch.Tensor,
    seq_idx: torch.Tensor | None = None,
    states_in_fp32: bool = True,
) -> torch.Tensor:
    """B (b, l, g, n), x (b, l, h, p), dt and dA_cumsum (b, h, c, cs) -> states (b, c, h, p, n):
    states[c] = sum_k exp(dA_cs[last] - dA_cs[k]) * dt[k] * x[k] B[k]^T over the positions of chunk c,
    with "last" the chunk's final slot (index cs - 1). With seq_idx only positions whose seq_idx equals
    that of the chunk's last real position contribute (none when that seq_idx is negative).
    dtype: fp32 (fp64 for fp64 input) when states_in_fp32, else B.dtype."""
    check_chunk_state(B, x, dt, dA_cumsum, seq_idx)
    _, seqlen, nheads = x.shape[:3]
    _, _, nchunks, chunk_size = dt.shape
    ngroups = B.shape[2]
    dtype = compute_dtype(B, x, dt, dA_cumsum)
    Bc = per_chunk(B.to(dtype), chunk_size).repeat_interleave(nheads // ngroups, dim=3)
    xc = per_chunk(x.to(dtype), chunk_size)
    dA = dA_cumsum.to(dtype)
    scale = _decay_to_last(dA, dA[..., -1:]) * dt.to(dtype)  # (b, h, c, cs)
    if seq_idx is not None:
        ends = [min((c + 1) * chunk_size, seqlen) - 1 for c in range(nchunks)]
        seq_last = seq_idx[:, ends]  # (b, c)
        seq = per_chunk(seq_idx, chunk_size, value=-1)  # (b, c, cs); -1 past seqlen as in the kernel
        keep = (seq == seq_last[:, :, None]) & (seq_last[:, :, None] >= 0)
        scale = torch.where(keep[:, None], scale, 0.0)
    states = torch.einsum("bclhn,bhcl,bclhp->bchpn", Bc, scale, xc)
    return states if states_in_fp32 else states.to(B.dtype)


def chunk_state_varlen(
    B: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    dA_cumsum: torch.Tensor,
    cu_seqlens: torch.Tensor,
    chunk_states: torch.Tensor,
) -> torch.Tensor:
    """B (t, g, n), x (t, h, p), dt and dA_cumsum (h, c, cs), cu_seqlens (nseq + 1,), chunk_states
    (c, h, p, n), the states entering each chunk -> states (nseq, h, p, n) in chunk_states.dtype: the
    state after each sequence's last token. Inside the chunk c holding that token it sums the sequence's
    own positions up to it; it adds exp(dA_cs[end]) * chunk_states[c] only when the sequence began before
    chunk c (so a first sequence that ends in chunk 0 never sees the initial state)."""
    _, nheads, headdim = x.shape
    ngroups = B.shape[1]
    chunk_size = dt.shape[-1]
    dtype = compute_dtype(B, x, dt, dA_cumsum, chunk_states)
    Bc = per_chunk(B.to(dtype)[None], chunk_size)[0].repeat_interleave(nheads // ngroups, dim=2)
    xc = per_chunk(x.to(dtype)[None], chunk_size)[0]  # (c, cs, h, p)
    dA, dtc, prev = dA_cumsum.to(dtype), dt.to(dtype), chunk_states.to(dtype)
    positions = torch.arange(chunk_size, device=x.device)
    bounds = cu_seqlens.tolist()
    out = []
    for start, end in itertools.pairwise(bounds):
        if end <= start:
            out.append(prev.new_zeros(nheads, headdim, B.shape[-1]))
            continue
        c = (end - 1) // chunk_size
        last = end - 1 - c * chunk_size
        lo = max(start - c * chunk_size, 0)
        inside = (positions >= lo) & (positions <= last)
        scale = torch.where(inside, _decay_to_last(dA[:, c], dA[:, c, last : last + 1]) * dtc[:, c], 0.0)
        state = torch.einsum("lhn,hl,lhp->hpn", Bc[c], scale, xc[c])
        if start < c * chunk_size:
            state = state + torch.exp(dA[:, c, last])[:, None, None] * prev[c]
        out.append(state)
    return torch.stack(out).to(chunk_states.dtype)
