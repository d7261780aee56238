"""Reference of mamba-ssm's ``_chunk_scan_fwd``: the SSD output of each chunk from the state entering it
(inter-chunk term) and the causal, decayed CB-weighted sum of the chunk's own inputs (intra-chunk term),
plus the D skip connection and the optional silu(z) gate."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from contract.checks import check_chunk_scan
from reference.common import compute_dtype, per_chunk


def chunk_scan_fwd(
    cb: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    dA_cumsum: torch.Tensor,
    C: torch.Tensor,
    states: torch.Tensor,
    D: torch.Tensor | None = None,
    z: torch.Tensor | None = None,
    seq_idx: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """cb (b, c, g, cs, cs), x (b, l, h, p), dt and dA_cumsum (b, h, c, cs), C (b, l, g, n), states
    (b, c, h, p, n) entering each chunk, D (h,) or (h, p), z like x -> (out, out_x), both x.dtype:

        y[m] = exp(dA_cs[m]) * C[m] . states[c] + sum_{k <= m} cb[m, k] exp(dA_cs[m] - dA_cs[k]) dt[k] x[k]
               + D x[m]

    out_x = y and out = y * silu(z) with z; out = y and out_x = None without. The exponent of the
    intra-chunk decay is clamped to <= 0 as in the kernel. seq_idx zeroes the inter-chunk term at
    positions whose seq_idx differs from that of the previous chunk's last position (0 before chunk 0).
    cb must already be zero across sequences (mamba-ssm's bmm_chunk makes it so and its chunk_scan kernel
    relies on it); the reference masks it again, which changes no output on such inputs and gives cb the
    gradient mamba-ssm's dcb kernel computes (zero across sequences)."""
    check_chunk_scan(cb, x, dt, dA_cumsum, C, states, D, z, seq_idx)
    batch, seqlen, nheads, headdim = x.shape
    _, _, nchunks, chunk_size = dt.shape
    ngroups = C.shape[2]
    ratio = nheads // ngroups
    dtype = compute_dtype(cb, x, dt, dA_cumsum, C, states, D, z)
    xc = per_chunk(x.to(dtype), chunk_size)  # (b, c, l, h, p)
    Cc = per_chunk(C.to(dtype), chunk_size).repeat_interleave(ratio, dim=3)  # (b, c, l, h, n)
    dA = dA_cumsum.to(dtype)

    inter_scale = torch.exp(dA)  # (b, h, c, l)
    if seq_idx is not None:
        seq = per_chunk(seq_idx, chunk_size)  # (b, c, l)
        ends = [c * chunk_size - 1 for c in range(1, nchunks)]
        prev = torch.cat([torch.zeros_like(seq_idx[:, :1]), seq_idx[:, ends]], dim=1)  # (b, c), 0 before chunk 0
        inter_scale = torch.where((seq == prev[:, :, None])[:, None], inter_scale, 0.0)
    y = torch.einsum("bclhn,bchpn,bhcl->bclhp", Cc, states.to(dtype), inter_scale)

    decay = torch.exp(torch.clamp(dA[..., :, None] - dA[..., None, :], max=0.0))  # (b, h, c, m, k)
    causal = torch.ones(chunk_size, chunk_size, dtype=torch.bool, device=x.device).tril()
    weights = cb.to(dtype).repeat_interleave(ratio, dim=2).transpose(1, 2) * decay * dt.to(dtype)[..., None, :]
    if seq_idx is not None:
        causal = causal & (seq[:, :, :, None] == seq[:, :, None, :])[:, None]  # (b, 1, c, m, k)
    weights = torch.where(causal, weights, 0.0)
    y = y + torch.einsum("bhcmk,bckhp->bcmhp", weights, xc)

    y = y.reshape(batch, nchunks * chunk_size, nheads, headdim)[:, :seqlen]
    if D is not None:
        y = y + x.to(dtype) * (D.to(dtype)[:, None] if D.dim() == 1 else D.to(dtype))
    if z is None:
        return y.to(x.dtype), None
    return (y * F.silu(z.to(dtype))).to(x.dtype), y.to(x.dtype)
