"""Helion port of mamba-ssm's ``_chunk_scan_fwd``: the SSD output of each chunk, the state entering it seen
through C (inter-chunk term) plus the causal, decayed, CB-weighted sum of the chunk's own inputs
(intra-chunk term), with the optional D skip connection and silu(z) gate."""

from __future__ import annotations

from typing import Any

import helion
import helion.language as hl
import torch

from contract.checks import check_chunk_scan
from kernels.launch import ConfigLike, launch


@helion.kernel(
    static_shapes=False, dot_precision="ieee", ignore_warnings=[helion.exc.TensorOperationInWrapper]
)  # out_x is allocated only with z
def chunk_scan_kernel(
    cb: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    dA_cumsum: torch.Tensor,
    C: torch.Tensor,
    states: torch.Tensor,
    D: torch.Tensor | None,
    z: torch.Tensor | None,
    seq_idx: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(out, out_x), both x.dtype (batch, seqlen, nheads, headdim); out_x (the output before the gate) only
    with z, else None.

    One program per (batch, chunk, head, block of chunk rows m, block of headdim), as in mamba-ssm:
      acc = exp(dA[m]) * (C[m] . states[c])            (C's dtype, the state rounded to it)
          + sum_{k <= m} (cb[m, k] exp(min(dA[m] - dA[k], 0)) dt[k]) . x[k]   (weights rounded to x's dtype)
          + D x[m],
    products accumulated in fp32 (true fp32, not TF32, for fp32 inputs). The loop over k stops at the row
    block's end (causal). Positions past seqlen are masked explicitly (hl.tile masks only against
    chunk_size). seq_idx zeroes the state term at rows whose sequence differs from the one at the previous
    chunk's last position (sequence 0 before the first chunk); cb is used as given (the bmm zeroes it across
    sequences), as mamba-ssm does."""
    batch, seqlen, nheads, headdim = x.shape
    ngroups, dstate = C.shape[2], C.shape[3]
    nchunks, chunk_size = dt.shape[2], dt.shape[3]
    heads_per_group = nheads // ngroups
    out = torch.empty([batch, seqlen, nheads, headdim], dtype=x.dtype, device=x.device)
    if z is not None:
        out_x = torch.empty([batch, seqlen, nheads, headdim], dtype=x.dtype, device=x.device)
    else:
        out_x = None
    for tile_b, tile_c, tile_h, tile_m, tile_p in hl.tile(
        [batch, nchunks, nheads, chunk_size, headdim], block_size=[1, 1, 1, None, None]
    ):
        group = tile_h.begin // heads_per_group
        start = tile_c.begin * chunk_size
        pos_m = start + tile_m.index
        valid_m = pos_m < seqlen
        dA_m = dA_cumsum[tile_b.begin, tile_h.begin, tile_c.begin, tile_m]
        scale_m = torch.exp(dA_m)
        if seq_idx is not None:
            seq_m = hl.load(seq_idx, [tile_b.begin, pos_m], extra_mask=valid_m)
            # The previous chunk's last position, broadcast over the rows (sequence 0 before chunk 0).
            prev_pos = pos_m - tile_m.index - 1
            seq_prev = hl.load(seq_idx, [tile_b.begin, prev_pos], extra_mask=prev_pos >= 0)
            scale_m = torch.where(seq_m == seq_prev, scale_m, 0.0)
        from_state = hl.zeros([tile_m, tile_p], dtype=torch.float32)
        for tile_n in hl.tile(dstate):
            cs = hl.load(C, [tile_b.begin, pos_m, group, tile_n], extra_mask=valid_m[:, None])
            prev = states[tile_b.begin, tile_c.begin, tile_h.begin, tile_p, tile_n].to(cs.dtype)
            from_state = hl.dot(cs, prev.T, acc=from_state)
        acc = from_state * scale_m[:, None]
        for tile_k in hl.tile(0, tile_m.end):
            pos_k = start + tile_k.index
            valid_k = pos_k < seqlen
            weights = cb[tile_b.begin, tile_c.begin, group, tile_m, tile_k].to(torch.float32)
            dA_k = dA_cumsum[tile_b.begin, tile_h.begin, tile_c.begin, tile_k]
            dt_k = dt[tile_b.begin, tile_h.begin, tile_c.begin, tile_k]
            weights = weights * torch.exp(torch.clamp(dA_m[:, None] - dA_k[None, :], max=0.0)) * dt_k[None, :]
            keep = (tile_m.index[:, None] >= tile_k.index[None, :]) & valid_k[None, :]
            weights = torch.where(keep, weights, 0.0)
            xs = hl.load(x, [tile_b.begin, pos_k, tile_h.begin, tile_p], extra_mask=valid_k[:, None])
            acc = hl.dot(weights.to(xs.dtype), xs, acc=acc)
        if D is not None:
            x_m = hl.load(x, [tile_b.begin, pos_m, tile_h.begin, tile_p], extra_mask=valid_m[:, None])
            if D.ndim == 2:
                skip = D[tile_h.begin, tile_p].to(torch.float32)[None, :]
            else:
                skip = D[tile_h.begin].to(torch.float32)
            acc = acc + x_m.to(torch.float32) * skip
        if z is not None:
            hl.store(
                out_x, [tile_b.begin, pos_m, tile_h.begin, tile_p], acc.to(out_x.dtype), extra_mask=valid_m[:, None]
            )
            gate = hl.load(z, [tile_b.begin, pos_m, tile_h.begin, tile_p], extra_mask=valid_m[:, None])
            gate = gate.to(torch.float32)
            acc = acc * gate * torch.sigmoid(gate)
        hl.store(out, [tile_b.begin, pos_m, tile_h.begin, tile_p], acc.to(out.dtype), extra_mask=valid_m[:, None])
    return out, out_x


CONFIGS: list[dict[str, Any]] = [
    {"block_sizes": [32, 16, 16, 16], "num_warps": 4, "num_stages": 2},
    {"block_sizes": [16, 32, 32, 32], "num_warps": 8, "num_stages": 3},
]
"""Explicit configs for the CPU parity tests: block_sizes = [chunk rows, headdim, dstate, chunk columns]
(Helion raises every dot dimension below 16 to 16). At the CI shapes (chunk 16/32, headdim 8/16, dstate 16)
they cover several column blocks per row block, a column block wider than the row block (the causal loop
clipped at the row block's end), and blocks wider than the chunk, headdim and dstate."""


def chunk_scan_args(
    cb: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    dA_cumsum: torch.Tensor,
    C: torch.Tensor,
    states: torch.Tensor,
    D: torch.Tensor | None = None,
    z: torch.Tensor | None = None,
    seq_idx: torch.Tensor | None = None,
) -> tuple[Any, ...]:
    """Validate the wrapper's arguments and return the arguments of :data:`chunk_scan_kernel` (what a tuner
    passes to ``chunk_scan_kernel.autotune``)."""
    check_chunk_scan(cb, x, dt, dA_cumsum, C, states, D, z, seq_idx)
    return (cb, x, dt, dA_cumsum, C, states, D, z, seq_idx)


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
    *,
    config: ConfigLike = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """cb (fp32, batch, nchunks, ngroups, chunk_size, chunk_size), x (batch, seqlen, nheads, headdim), dt and
    dA_cumsum (fp32, batch, nheads, nchunks, chunk_size), C (batch, seqlen, ngroups, dstate), states (batch,
    nchunks, nheads, headdim, dstate) entering each chunk, D (nheads,) or (nheads, headdim), z like x ->
    (out, out_x) in x.dtype: out = y * silu(z) and out_x = y with z, out = y and out_x = None without."""
    return launch(chunk_scan_kernel, chunk_scan_args(cb, x, dt, dA_cumsum, C, states, D, z, seq_idx), config)


HAS_BACKWARD = False
"""Forward only: the parity engine judges this port's outputs, not its gradients (no Helion backward yet)."""
