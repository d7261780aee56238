"""Helion backward of the Mamba-2 chunked SSD (mamba-ssm's ``_mamba_chunk_scan_combined_bwd``), reorganised
into six kernels and two PyTorch sums over per-chunk partials (grad A with grad dt_bias, and grad D).

Notation per (batch b, chunk c, head h; group g of h), positions l, s of the chunk, a = dA_cumsum, dt the
processed dt, H_c the state entering chunk c, S_c the chunk's own state, dy the gradient of the pre-gate
output y. The forward is
    S_c = sum_s exp(a_last - a_s) dt_s x_s B_s^T          H_{c+1} = f_c exp(a_last) H_c + S_c
    y_l = exp(a_l) m_l C_l H_c + sum_{s <= l} CB[l, s] exp(a_l - a_s) dt_s x_s + D x_l
(f_c, m_l: the seq_idx masks). The gradient of a decay step dA_k = dt_k A (a_l = sum_{k <= l} dA_k) is summed
from the terms that contain it only: a_l - a_s spans the steps s < k <= l, so no term is ever taken as the
difference of two larger sums (a row sum minus a column sum, or a total minus a suffix, loses the small
result to fp32 rounding once the decay inside a chunk is strong: with dt up to a few units, grad.A and
grad.dt_bias were 18x and 25x mamba-ssm's error). The kernels, in order:
  states        reverse over the chunks, G_nchunks = dfinal: dS_c = G_{c+1}, a_last's gradient from the chunk
                decay f_c exp(a_last) dS_c . H_c, dH_c = sum_l exp(a_l) m_l dy_l^T C_l (grad of y wrt H_c),
                G_c = f_c exp(a_last) G_{c+1} + dH_c; dinitial = G_0
  dx            dx_s = dt_s (exp(a_last - a_s) B_s dS_c + sum_{l >= s} CB[l, s] exp(a_l - a_s) dy_l) + D dy_s,
                ddt_s = x_s . (that bracket), dD, and the chunk-state path's V_s = dt_s x_s . (first term),
                which reaches every step k > s
  dcb           dCB[l, s] = sum_{h in g} dt_s exp(a_l - a_s) dy_l . x_s (causal, same sequence); with
                W = dCB_h * CB, step k's intra-chunk gradient sum_{l >= k} sum_{s < k} W[l, s]
  dc            dC_l = sum_{h in g} exp(a_l) m_l dy_l H_c + sum_s dCB[l, s] B_s; a_l's gradient C_l . (first term)
  db            dB_s = sum_{h in g} exp(a_last - a_s) dt_s x_s dS_c + sum_l dCB[l, s] C_l
  ddt           the steps' gradients, per chunk: the a_l terms (C path, chunk decay) reverse-summed over l >= k,
                the prefix terms (V_s, and dcb's, already per step) summed over s < k; -> ddt, and per chunk
                grad A's part; dt's softplus/clamp -> grad dt, and per chunk grad dt_bias's part
Products are taken in the inputs' dtype with fp32 accumulation, as in the forward kernels; fp64 inputs (the autograd
function's upcast of fp32 inputs) compute in fp64 throughout (:mod:`kernels.precision`). The decay-step, ddt and dD sums
are taken per tile in the accumulation dtype, then across programs by fp64 atomics into fp64 (batch, nheads, nchunks,
chunk_size) buffers, which the ddt kernel reads; grad A, dt_bias and D are summed over the batch and the chunks from
fp64 per-chunk partials by PyTorch (a fixed order: deterministic)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import helion
import helion.language as hl
import torch
import triton

from kernels.launch import ConfigLike, launch
from kernels.precision import acc_dtype, fp64_dot
from kernels.state_passing import chunk_end_sequences

_DOT = {"static_shapes": False, "dot_precision": "ieee"}


@helion.kernel(**_DOT)
def states_bwd_kernel(
    dy: torch.Tensor,
    C: torch.Tensor,
    dA_cumsum: torch.Tensor,
    states: torch.Tensor,
    dfinal_states: torch.Tensor | None,
    seq_idx: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The state gradients in one pass, dH_c never written (mamba-ssm takes two kernels): (dS (batch, nchunks, nheads,
    headdim, dstate), dinitial (batch, nheads, headdim, dstate), both in the accumulation dtype, and the gradient of
    each chunk's decay f_c exp(a_last) dS_c . H_c per (headdim, dstate) block: (batch, nheads, nchunks, blocks), fp64,
    summed by the caller in a fixed order). ``states``: the forward's states entering each chunk (batch, nchunks,
    nheads, headdim, dstate).

    One program per (batch, head, headdim block, dstate block) walks the chunks from the last to the first, carrying
    G_{c+1} (dfinal for the last chunk): dS_c = G_{c+1}, then dH_c = sum_l exp(a_l) m_l dy_l^T C_l over the chunk's
    rows and G_c = f_c exp(a_last) G_{c+1} + dH_c; dinitial = G_0."""
    batch, seqlen, nheads, headdim = dy.shape
    ngroups, dstate = C.shape[2], C.shape[3]
    nchunks, chunk_size = dA_cumsum.shape[2], dA_cumsum.shape[3]
    heads_per_group = nheads // ngroups
    wide = acc_dtype(dy.dtype)
    dS = torch.empty([batch, nchunks, nheads, headdim, dstate], dtype=wide, device=dy.device)
    dinitial = torch.empty([batch, nheads, headdim, dstate], dtype=wide, device=dy.device)
    block_p = hl.register_block_size(headdim)
    block_n = hl.register_block_size(dstate)
    blocks_n = (dstate + block_n - 1) // block_n
    blocks = (headdim + block_p - 1) // block_p * blocks_n
    ddA_last = torch.empty([batch, nheads, nchunks, blocks], dtype=torch.float64, device=dy.device)
    for tile_b, tile_h, tile_p, tile_n in hl.tile(
        [batch, nheads, headdim, dstate], block_size=[1, 1, block_p, block_n]
    ):
        group = tile_h.begin // heads_per_group
        block = tile_p.id * blocks_n + tile_n.id
        if dfinal_states is not None:
            carry = dfinal_states[tile_b.begin, tile_h.begin, tile_p, tile_n].to(wide)
        else:
            carry = hl.zeros([tile_p, tile_n], dtype=wide)
        for tile_k in hl.tile(nchunks, block_size=1):
            chunk = nchunks - 1 - tile_k.begin
            along = nchunks - 1 - tile_k.index  # the same chunk as a vector of one, for the per-chunk scalars
            start = chunk * chunk_size
            dS[tile_b.begin, chunk, tile_h.begin, tile_p, tile_n] = carry
            decay = torch.exp(dA_cumsum[tile_b.begin, tile_h.begin, along, chunk_size - 1])
            if seq_idx is not None:
                seq_end, seq_before = chunk_end_sequences(seq_idx, tile_b.begin, along, chunk_size, along >= 0)
                decay = torch.where(seq_end == seq_before, decay, 0.0)
            entering = states[tile_b.begin, chunk, tile_h.begin, tile_p, tile_n].to(wide)
            dot = torch.sum(torch.sum(carry * entering, dim=1), dim=0)
            hl.store(ddA_last, [tile_b.begin, tile_h.begin, along, block], (dot * decay).to(torch.float64))
            acc = hl.zeros([tile_p, tile_n], dtype=wide)
            for tile_l in hl.tile(chunk_size):
                pos = start + tile_l.index
                valid = pos < seqlen
                dys = hl.load(dy, [tile_b.begin, pos, tile_h.begin, tile_p], extra_mask=valid[:, None])
                cs = hl.load(C, [tile_b.begin, pos, group, tile_n], extra_mask=valid[:, None]).to(wide)
                scale = torch.exp(dA_cumsum[tile_b.begin, tile_h.begin, chunk, tile_l])
                if seq_idx is not None:
                    seq_l = hl.load(seq_idx, [tile_b.begin, pos], extra_mask=valid)
                    prev_pos = pos - tile_l.index - 1  # the previous chunk's last position, broadcast
                    seq_prev = hl.load(seq_idx, [tile_b.begin, prev_pos], extra_mask=prev_pos >= 0)
                    scale = torch.where(seq_l == seq_prev, scale, 0.0)
                scale = torch.where(valid, scale, 0.0)
                lhs, rhs = dys.T, (cs * scale[:, None]).to(dys.dtype)
                acc = fp64_dot(lhs, rhs, acc) if wide == torch.float64 else hl.dot(lhs, rhs, acc=acc)
            carry = acc + torch.sum(decay) * carry  # the chunk's one decay, as a scalar
        dinitial[tile_b.begin, tile_h.begin, tile_p, tile_n] = carry
    return dS, dinitial, ddA_last


@helion.kernel(**_DOT)
def dx_kernel(
    x: torch.Tensor,
    dy: torch.Tensor,
    dt: torch.Tensor,
    dA_cumsum: torch.Tensor,
    B: torch.Tensor,
    cb: torch.Tensor,
    dS: torch.Tensor,
    D: torch.Tensor | None,
    seq_idx: torch.Tensor | None,
    ddt: torch.Tensor,
    ddA_state: torch.Tensor,
    dD: torch.Tensor,
) -> torch.Tensor:
    """dx (x.dtype, like x); adds x_s . bracket into ddt (batch, nheads, nchunks, chunk_size), the chunk-state
    path's V_s = dt_s x_s . (first term) into ddA_state (same shape) and dy . x into dD (batch, nchunks, nheads,
    headdim: per chunk, so only a chunk's row blocks add into one entry; the caller sums the chunks), all
    fp64, zeroed. One program per (batch, chunk, head, row block s, headdim block), looping over dstate (the
    chunk-state path) and over the rows l >= s (the intra-chunk path)."""
    batch, seqlen, nheads, headdim = x.shape
    ngroups, dstate = B.shape[2], B.shape[3]
    nchunks, chunk_size = dt.shape[2], dt.shape[3]
    heads_per_group = nheads // ngroups
    wide = acc_dtype(x.dtype)
    dx = torch.empty_like(x)
    for tile_b, tile_c, tile_h, tile_s, tile_p in hl.tile(
        [batch, nchunks, nheads, chunk_size, headdim], block_size=[1, 1, 1, None, None]
    ):
        group = tile_h.begin // heads_per_group
        start = tile_c.begin * chunk_size
        pos_s = start + tile_s.index
        valid_s = pos_s < seqlen
        dA_s = dA_cumsum[tile_b.begin, tile_h.begin, tile_c.begin, tile_s]
        dt_s = dt[tile_b.begin, tile_h.begin, tile_c.begin, tile_s]
        dA_last = dA_cumsum[tile_b.begin, tile_h.begin, tile_c.begin, chunk_size - 1]
        keep_s = valid_s
        if seq_idx is not None:
            seq_last = seq_idx[tile_b.begin, min(start + chunk_size, seqlen) - 1]
            seq_s = hl.load(seq_idx, [tile_b.begin, pos_s], extra_mask=valid_s)
            keep_s = valid_s & (seq_s == seq_last) & (seq_last >= 0)
        acc = hl.zeros([tile_s, tile_p], dtype=wide)
        for tile_n in hl.tile(dstate):
            bs = hl.load(B, [tile_b.begin, pos_s, group, tile_n], extra_mask=valid_s[:, None])
            ds = dS[tile_b.begin, tile_c.begin, tile_h.begin, tile_p, tile_n].to(bs.dtype)
            acc = fp64_dot(bs, ds.T, acc) if wide == torch.float64 else hl.dot(bs, ds.T, acc=acc)
        acc = acc * torch.where(keep_s, torch.exp(torch.clamp(dA_last - dA_s, max=0.0)), 0.0)[:, None]
        xs = hl.load(x, [tile_b.begin, pos_s, tile_h.begin, tile_p], extra_mask=valid_s[:, None]).to(wide)
        hl.atomic_add(
            ddA_state,
            [tile_b.begin, tile_h.begin, tile_c.begin, tile_s],
            (torch.sum(acc * xs, dim=1) * dt_s.to(wide)).to(torch.float64),
        )
        for tile_l in hl.tile(tile_s.begin, chunk_size):
            pos_l = start + tile_l.index
            valid_l = pos_l < seqlen
            weights = cb[tile_b.begin, tile_c.begin, group, tile_l, tile_s].to(wide)
            dA_l = dA_cumsum[tile_b.begin, tile_h.begin, tile_c.begin, tile_l]
            weights = weights * torch.exp(torch.clamp(dA_l[:, None] - dA_s[None, :], max=0.0))
            keep = (tile_l.index[:, None] >= tile_s.index[None, :]) & valid_l[:, None]
            weights = torch.where(keep, weights, 0.0)
            dys = hl.load(dy, [tile_b.begin, pos_l, tile_h.begin, tile_p], extra_mask=valid_l[:, None])
            lhs, rhs = weights.T.to(dys.dtype), dys
            acc = fp64_dot(lhs, rhs, acc) if wide == torch.float64 else hl.dot(lhs, rhs, acc=acc)
        hl.atomic_add(
            ddt,
            [tile_b.begin, tile_h.begin, tile_c.begin, tile_s],
            torch.sum(acc * xs, dim=1).to(torch.float64),
        )
        grad = acc * dt_s[:, None]
        if D is not None:
            dy_s = hl.load(dy, [tile_b.begin, pos_s, tile_h.begin, tile_p], extra_mask=valid_s[:, None])
            dy_s = dy_s.to(wide)
            if D.ndim == 2:
                grad = grad + dy_s * D[tile_h.begin, tile_p].to(wide)[None, :]
            else:
                grad = grad + dy_s * D[tile_h.begin].to(wide)
            hl.atomic_add(
                dD, [tile_b.begin, tile_c.begin, tile_h.begin, tile_p], torch.sum(dy_s * xs, dim=0).to(torch.float64)
            )
        hl.store(dx, [tile_b.begin, pos_s, tile_h.begin, tile_p], grad.to(dx.dtype), extra_mask=valid_s[:, None])
    return dx


@helion.kernel(**_DOT)
def dcb_kernel(
    x: torch.Tensor,
    dy: torch.Tensor,
    dt: torch.Tensor,
    dA_cumsum: torch.Tensor,
    cb: torch.Tensor,
    seq_idx: torch.Tensor | None,
    ddA_next: torch.Tensor,
) -> torch.Tensor:
    """dcb (batch, nchunks, ngroups, chunk_size, chunk_size), like cb: sum over the group's heads of
    dCB_h[l, s] = dt_s exp(a_l - a_s) dy_l . x_s (causal, same sequence). Adds, per head, the intra-chunk
    gradient of each decay step into ddA_next (batch, nheads, nchunks, chunk_size; fp64, zeroed; entry s is
    step s + 1): with W = dCB_h * CB, step k gets sum_{l >= k} sum_{s' < k} W[l, s'] (a_l - a_s' spans it).
    One program per (batch, chunk, group, row block l, column block s), looping over the group's heads (no
    atomics on dcb): the prefix over s' inside the column block goes to the steps in it; the block's whole
    row sums go to the steps past it up to the row block's end (the prefix of later column blocks)."""
    batch, seqlen, nheads, headdim = x.shape
    ngroups = cb.shape[2]
    nchunks, chunk_size = dt.shape[2], dt.shape[3]
    heads_per_group = nheads // ngroups
    wide = acc_dtype(x.dtype)
    dcb = torch.empty_like(cb)
    for tile_b, tile_c, tile_g, tile_l, tile_s in hl.tile(
        [batch, nchunks, ngroups, chunk_size, chunk_size], block_size=[1, 1, 1, None, None]
    ):
        start = tile_c.begin * chunk_size
        pos_l = start + tile_l.index
        pos_s = start + tile_s.index
        valid_l = pos_l < seqlen
        valid_s = pos_s < seqlen
        keep = (tile_l.index[:, None] >= tile_s.index[None, :]) & valid_l[:, None] & valid_s[None, :]
        if seq_idx is not None:
            seq_l = hl.load(seq_idx, [tile_b.begin, pos_l], extra_mask=valid_l)
            seq_s = hl.load(seq_idx, [tile_b.begin, pos_s], extra_mask=valid_s)
            keep = keep & (seq_l[:, None] == seq_s[None, :])
        below = tile_l.index[:, None] > tile_s.index[None, :]
        weights = cb[tile_b.begin, tile_c.begin, tile_g.begin, tile_l, tile_s].to(wide)
        total = hl.zeros([tile_l, tile_s], dtype=wide)
        for tile_h in hl.tile(
            tile_g.begin * heads_per_group, tile_g.begin * heads_per_group + heads_per_group, block_size=1
        ):
            acc = hl.zeros([tile_l, tile_s], dtype=wide)
            for tile_p in hl.tile(headdim):
                dys = hl.load(dy, [tile_b.begin, pos_l, tile_h.begin, tile_p], extra_mask=valid_l[:, None])
                xs = hl.load(x, [tile_b.begin, pos_s, tile_h.begin, tile_p], extra_mask=valid_s[:, None])
                acc = fp64_dot(dys, xs.T, acc) if wide == torch.float64 else hl.dot(dys, xs.T, acc=acc)
            dA_l = dA_cumsum[tile_b.begin, tile_h.begin, tile_c.begin, tile_l]
            dA_s = dA_cumsum[tile_b.begin, tile_h.begin, tile_c.begin, tile_s]
            dt_s = dt[tile_b.begin, tile_h.begin, tile_c.begin, tile_s]
            acc = acc * torch.exp(torch.clamp(dA_l[:, None] - dA_s[None, :], max=0.0)) * dt_s[None, :]
            acc = torch.where(keep, acc, 0.0)
            total = total + acc
            # Each step's gradient summed from its own terms only (W[l, s'], s' < k <= l): no cancelling sums.
            products = acc * weights
            prefix = torch.where(below, torch.cumsum(products, dim=1), 0.0)
            hl.atomic_add(
                ddA_next, [tile_b.begin, tile_h.begin, tile_c.begin, tile_s], torch.sum(prefix, dim=0).to(torch.float64)
            )
            rows = torch.sum(products, dim=1)
            for tile_k in hl.tile(tile_s.end, tile_l.end, block_size=16):  # fixed: the config keeps its layout
                later = tile_l.index[:, None] > tile_k.index[None, :]
                hl.atomic_add(
                    ddA_next,
                    [tile_b.begin, tile_h.begin, tile_c.begin, tile_k],
                    torch.sum(torch.where(later, rows[:, None], 0.0), dim=0).to(torch.float64),
                )
        dcb[tile_b.begin, tile_c.begin, tile_g.begin, tile_l, tile_s] = total
    return dcb


@helion.kernel(**_DOT)
def dc_kernel(
    dy: torch.Tensor,
    states: torch.Tensor,
    dA_cumsum: torch.Tensor,
    C: torch.Tensor,
    B: torch.Tensor,
    dcb: torch.Tensor,
    seq_idx: torch.Tensor | None,
    ddA: torch.Tensor,
) -> torch.Tensor:
    """dC (C.dtype, like C); adds each head's C_l . (exp(a_l) m_l dy_l H_c) into ddA (fp64). One program per
    (batch, chunk, group, row block l, dstate block), looping over the group's heads and headdim, then over
    the columns s <= l of dCB."""
    batch, seqlen, nheads, headdim = dy.shape
    ngroups, dstate = C.shape[2], C.shape[3]
    nchunks, chunk_size = dA_cumsum.shape[2], dA_cumsum.shape[3]
    heads_per_group = nheads // ngroups
    wide = acc_dtype(dy.dtype)
    dC = torch.empty_like(C)
    for tile_b, tile_c, tile_g, tile_l, tile_n in hl.tile(
        [batch, nchunks, ngroups, chunk_size, dstate], block_size=[1, 1, 1, None, None]
    ):
        start = tile_c.begin * chunk_size
        pos_l = start + tile_l.index
        valid_l = pos_l < seqlen
        mask_l = valid_l
        if seq_idx is not None:
            seq_l = hl.load(seq_idx, [tile_b.begin, pos_l], extra_mask=valid_l)
            prev_pos = pos_l - tile_l.index - 1
            seq_prev = hl.load(seq_idx, [tile_b.begin, prev_pos], extra_mask=prev_pos >= 0)
            mask_l = valid_l & (seq_l == seq_prev)
        cs = hl.load(C, [tile_b.begin, pos_l, tile_g.begin, tile_n], extra_mask=valid_l[:, None]).to(wide)
        acc = hl.zeros([tile_l, tile_n], dtype=wide)
        for tile_h in hl.tile(
            tile_g.begin * heads_per_group, tile_g.begin * heads_per_group + heads_per_group, block_size=1
        ):
            part = hl.zeros([tile_l, tile_n], dtype=wide)
            for tile_p in hl.tile(headdim):
                dys = hl.load(dy, [tile_b.begin, pos_l, tile_h.begin, tile_p], extra_mask=valid_l[:, None])
                hs = states[tile_b.begin, tile_c.begin, tile_h.begin, tile_p, tile_n].to(dys.dtype)
                part = fp64_dot(dys, hs, part) if wide == torch.float64 else hl.dot(dys, hs, acc=part)
            scale = torch.exp(dA_cumsum[tile_b.begin, tile_h.begin, tile_c.begin, tile_l])
            part = part * torch.where(mask_l, scale, 0.0)[:, None]
            acc = acc + part
            hl.atomic_add(
                ddA,
                [tile_b.begin, tile_h.begin, tile_c.begin, tile_l],
                torch.sum(part * cs, dim=1).to(torch.float64),
            )
        for tile_s in hl.tile(0, tile_l.end):
            pos_s = start + tile_s.index
            bs = hl.load(B, [tile_b.begin, pos_s, tile_g.begin, tile_n], extra_mask=(pos_s < seqlen)[:, None])
            weights = dcb[tile_b.begin, tile_c.begin, tile_g.begin, tile_l, tile_s]
            lhs, rhs = weights.to(bs.dtype), bs
            acc = fp64_dot(lhs, rhs, acc) if wide == torch.float64 else hl.dot(lhs, rhs, acc=acc)
        hl.store(dC, [tile_b.begin, pos_l, tile_g.begin, tile_n], acc.to(dC.dtype), extra_mask=valid_l[:, None])
    return dC


@helion.kernel(**_DOT)
def db_kernel(
    x: torch.Tensor,
    dt: torch.Tensor,
    dA_cumsum: torch.Tensor,
    dS: torch.Tensor,
    C: torch.Tensor,
    dcb: torch.Tensor,
    seq_idx: torch.Tensor | None,
) -> torch.Tensor:
    """dB (C.dtype, like C). One program per (batch, chunk, group, row block s, dstate block), looping over
    the group's heads and headdim (the chunk-state path), then over the rows l >= s of dCB."""
    batch, seqlen, nheads, headdim = x.shape
    ngroups, dstate = C.shape[2], C.shape[3]
    nchunks, chunk_size = dt.shape[2], dt.shape[3]
    heads_per_group = nheads // ngroups
    wide = acc_dtype(x.dtype)
    dB = torch.empty_like(C)
    for tile_b, tile_c, tile_g, tile_s, tile_n in hl.tile(
        [batch, nchunks, ngroups, chunk_size, dstate], block_size=[1, 1, 1, None, None]
    ):
        start = tile_c.begin * chunk_size
        pos_s = start + tile_s.index
        valid_s = pos_s < seqlen
        keep_s = valid_s
        if seq_idx is not None:
            seq_last = seq_idx[tile_b.begin, min(start + chunk_size, seqlen) - 1]
            seq_s = hl.load(seq_idx, [tile_b.begin, pos_s], extra_mask=valid_s)
            keep_s = valid_s & (seq_s == seq_last) & (seq_last >= 0)
        acc = hl.zeros([tile_s, tile_n], dtype=wide)
        for tile_h in hl.tile(
            tile_g.begin * heads_per_group, tile_g.begin * heads_per_group + heads_per_group, block_size=1
        ):
            part = hl.zeros([tile_s, tile_n], dtype=wide)
            for tile_p in hl.tile(headdim):
                xs = hl.load(x, [tile_b.begin, pos_s, tile_h.begin, tile_p], extra_mask=valid_s[:, None])
                ds = dS[tile_b.begin, tile_c.begin, tile_h.begin, tile_p, tile_n].to(xs.dtype)
                part = fp64_dot(xs, ds, part) if wide == torch.float64 else hl.dot(xs, ds, acc=part)
            dA_s = dA_cumsum[tile_b.begin, tile_h.begin, tile_c.begin, tile_s]
            dA_last = dA_cumsum[tile_b.begin, tile_h.begin, tile_c.begin, chunk_size - 1]
            scale = (
                torch.exp(torch.clamp(dA_last - dA_s, max=0.0)) * dt[tile_b.begin, tile_h.begin, tile_c.begin, tile_s]
            )
            acc = acc + part * torch.where(keep_s, scale, 0.0)[:, None]
        for tile_l in hl.tile(tile_s.begin, chunk_size):
            pos_l = start + tile_l.index
            cs = hl.load(C, [tile_b.begin, pos_l, tile_g.begin, tile_n], extra_mask=(pos_l < seqlen)[:, None])
            weights = dcb[tile_b.begin, tile_c.begin, tile_g.begin, tile_l, tile_s]
            lhs, rhs = weights.T.to(cs.dtype), cs
            acc = fp64_dot(lhs, rhs, acc) if wide == torch.float64 else hl.dot(lhs, rhs, acc=acc)
        hl.store(dB, [tile_b.begin, pos_s, tile_g.begin, tile_n], acc.to(dB.dtype), extra_mask=valid_s[:, None])
    return dB


@helion.kernel(static_shapes=False)
def ddt_kernel(
    ddt: torch.Tensor,
    ddA: torch.Tensor,
    ddA_last: torch.Tensor,
    ddA_next: torch.Tensor,
    ddA_state: torch.Tensor,
    dt_out: torch.Tensor,
    A: torch.Tensor,
    dt: torch.Tensor,
    dt_bias: torch.Tensor | None,
    dt_min: float,
    dt_max: float,
    chunk_block: hl.constexpr,
    dt_softplus: hl.constexpr,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The decay steps' gradients and dt's, from the other kernels' fp64 parts (batch, nheads, nchunks, chunk_size):
    ddt (dx), ddA (dc: the a_l terms), ddA_last (states: per chunk and block, the chunk decay's a_last term),
    ddA_next (dcb: entry s is step s + 1) and ddA_state (dx: V_s). Returns (grad dt in dt's dtype, (batch,
    nchunks * chunk_size, nheads), of which only the first seqlen positions are written: grad dt is that slice;
    partials (2, batch, nchunks, nheads), fp64: per chunk, grad A's sum of dA_k dt_k and the sum of grad dt, the
    caller's grad dt_bias; the caller sums them in a fixed order, no atomics). grad dt is sized by the tile extents,
    not like dt: Helion 1.5.0's dynamic shapes drop the index of a size-1 dimension of an input's shape, so a store
    into a dt-shaped output broke at nheads 1 (every head of the block into head 0) and at seqlen 1 (mis-shaped).

    Step k's gradient is the reverse sum over l >= k of the a_l terms (a_last's at the chunk's last position,
    also past seqlen) plus ddA_next and the prefix sum of V_s through s = k - 1 (each its own sum, never a
    difference of two). Then ddt += dA A, and back through dt's processing: the clamp to [dt_min, dt_max]
    (gradient kept at the bound, as torch.clamp does), softplus (where dt + bias <= 20) and the layout, writing the
    positions before seqlen only. All in fp64, dt's processing in its accumulation dtype, as the forward computes
    it. One program per (batch, chunk, block of heads); the whole chunk is one ``hl.arange(chunk_block)``
    (chunk_block = next power of two >= chunk_size), so no config splits a cumsum."""
    batch, nheads, nchunks, chunk_size = ddt.shape
    seqlen = dt.shape[1]
    wide = acc_dtype(dt.dtype)
    grad_dt = torch.empty([batch, nchunks * chunk_size, nheads], dtype=dt.dtype, device=dt.device)
    partials = torch.empty([2, batch, nchunks, nheads], dtype=torch.float64, device=dt.device)
    for tile_b, tile_c, tile_h in hl.tile([batch, nchunks, nheads], block_size=[1, 1, None]):
        offs = hl.arange(chunk_block)
        in_chunk = offs < chunk_size
        pos = tile_c.begin * chunk_size + offs
        valid = in_chunk & (pos < seqlen)
        at = [tile_b.begin, tile_h, tile_c.begin, offs]
        before = [tile_b.begin, tile_h, tile_c.begin, offs - 1]  # position k reads k - 1
        has_before = in_chunk & (offs >= 1)
        chunk_decay = torch.sum(ddA_last[tile_b.begin, tile_h, tile_c.begin, :], dim=1)
        own = hl.load(ddA, at, extra_mask=in_chunk[None, :])
        own = own + torch.where((offs == chunk_size - 1)[None, :], chunk_decay[:, None], 0.0)
        prefix = hl.cumsum(hl.load(ddA_state, before, extra_mask=has_before[None, :]), dim=1)
        prefix = hl.load(ddA_next, before, extra_mask=has_before[None, :]) + prefix
        step = hl.cumsum(own, dim=1, reverse=True) + prefix  # [heads, chunk]
        steps = hl.load(dt_out, at, extra_mask=in_chunk[None, :]).to(torch.float64)
        partials[0, tile_b.begin, tile_c.begin, tile_h] = torch.sum(step * steps, dim=1)
        grad = hl.load(ddt, at, extra_mask=in_chunk[None, :]) + step * A[tile_h].to(torch.float64)[:, None]
        d = hl.load(dt, [tile_b.begin, pos, tile_h], extra_mask=valid[:, None]).to(wide).permute(1, 0)
        if dt_bias is not None:
            d = d + dt_bias[tile_h].to(wide)[:, None]
        processed = d
        if dt_softplus:
            processed = torch.nn.functional.softplus(d, beta=1.0, threshold=20.0)
            # 1 / (1 + exp(-d)) spelled out: torch.sigmoid lowers through fp32 in Helion 1.5.0, even for fp64.
            grad = grad * torch.where(d <= 20.0, 1.0 / (1.0 + torch.exp(-d.to(torch.float64))), 1.0)
        keep = (processed >= dt_min) & (processed <= dt_max) & valid[None, :]
        grad = torch.where(keep, grad, 0.0)
        partials[1, tile_b.begin, tile_c.begin, tile_h] = torch.sum(grad, dim=1)
        hl.store(grad_dt, [tile_b.begin, pos, tile_h], grad.permute(1, 0).to(dt.dtype), extra_mask=valid[:, None])
    return grad_dt, partials


KERNELS = ("bwd_states", "bwd_dx", "bwd_dcb", "bwd_dc", "bwd_db", "bwd_ddt")
"""The backward's keys in the combined op's config (one Helion config each; missing means the default)."""

CONFIGS: list[dict[str, Any]] = [
    {
        "bwd_states": {"block_sizes": [16, 16, 16], "num_warps": 4},
        "bwd_dx": {"block_sizes": [16, 16, 16, 16], "num_warps": 4},
        "bwd_dcb": {"block_sizes": [16, 16, 16], "num_warps": 4},
        "bwd_dc": {"block_sizes": [16, 16, 16, 16], "num_warps": 4},
        "bwd_db": {"block_sizes": [16, 16, 16, 16], "num_warps": 4},
        "bwd_ddt": {"block_sizes": [1], "num_warps": 1},
    },
    {
        "bwd_states": {"block_sizes": [16, 32, 32], "num_warps": 8},
        "bwd_dx": {"block_sizes": [32, 16, 32, 16], "num_warps": 8},
        "bwd_dcb": {"block_sizes": [32, 16, 16], "num_warps": 8},
        "bwd_dc": {"block_sizes": [32, 16, 16, 16], "num_warps": 8},
        "bwd_db": {"block_sizes": [16, 32, 16, 32], "num_warps": 8},
        "bwd_ddt": {"block_sizes": [4], "num_warps": 4},
    },
]
"""Explicit configs for the CPU parity tests (block_sizes follow each kernel's tile order: states [headdim,
dstate, rows]; dx [rows, headdim, dstate, rows l]; dcb [rows, columns, headdim]; dc and
db [rows, dstate, headdim, rows of dCB]; ddt [heads]). The first has several row blocks per chunk at the CI shapes, the
second row blocks wider than the column blocks and blocks wider than headdim."""


def gate_backward(
    dout: torch.Tensor, z: torch.Tensor, out_x: torch.Tensor, wide: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """(grad z, dy) of out = y * silu(z), y = ``out_x``, computed in ``wide``; its wide temporaries (four x-sized
    tensors) are freed on return, before the backward's kernels allocate theirs."""
    zf, y = z.to(wide), out_x.to(wide)
    sig = torch.sigmoid(zf)
    dout_f = dout.to(wide)
    return (dout_f * y * sig * (1 + zf * (1 - sig))).to(z.dtype), (dout_f * zf * sig).to(out_x.dtype)


def ssd_combined_bwd(
    dout: torch.Tensor,
    dfinal_states: torch.Tensor | None,
    saved: Mapping[str, Any],
    fwd: Mapping[str, torch.Tensor],
    configs: Mapping[str, ConfigLike],
) -> dict[str, torch.Tensor | None]:
    """Gradients of mamba_chunk_scan_combined's inputs from dout (like x) and dfinal_states (accumulation dtype,
    or None).
    ``saved``: the forward's inputs (x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, chunk_size,
    dt_softplus, dt_limit, out_x); ``fwd``: the recomputed dA_cumsum, dt_out, chunk states S (flat (b, c, h, p*n)),
    entering states H (flat), final states (flat) and cb, all in the accumulation dtype of x's dtype."""
    x, B, C, D, z, seq_idx = (saved[k] for k in ("x", "B", "C", "D", "z", "seq_idx"))
    batch, _, nheads, headdim = x.shape
    dstate = B.shape[-1]
    dA_cumsum, dt_out = fwd["dA_cumsum"], fwd["dt_out"]
    nchunks = dt_out.shape[2]
    grads: dict[str, torch.Tensor | None] = {}
    wide = acc_dtype(x.dtype)
    if z is not None:
        grads["z"], dy = gate_backward(dout, z, saved["out_x"], wide)
    else:
        dy = dout.to(x.dtype)
    dy = dy.contiguous()

    dS, dinitial, ddA_last = launch(
        states_bwd_kernel,
        (
            dy,
            C,
            dA_cumsum,
            fwd["states"].reshape(batch, nchunks, nheads, headdim, dstate),
            None if dfinal_states is None else dfinal_states.reshape(batch, nheads, headdim, dstate),
            seq_idx,
        ),
        configs.get("bwd_states"),
    )
    ddt = torch.zeros_like(dt_out, dtype=torch.float64)
    ddA_state = torch.zeros_like(dt_out, dtype=torch.float64)
    dD = torch.zeros(batch, nchunks, nheads, headdim, dtype=torch.float64, device=x.device)
    grads["x"] = launch(
        dx_kernel, (x, dy, dt_out, dA_cumsum, B, fwd["cb"], dS, D, seq_idx, ddt, ddA_state, dD), configs.get("bwd_dx")
    )
    ddA_next = torch.zeros_like(dA_cumsum, dtype=torch.float64)
    dcb = launch(dcb_kernel, (x, dy, dt_out, dA_cumsum, fwd["cb"], seq_idx, ddA_next), configs.get("bwd_dcb"))
    ddA = torch.zeros_like(dA_cumsum, dtype=torch.float64)
    states = fwd["states"].reshape(batch, nchunks, nheads, headdim, dstate)
    grads["C"] = launch(dc_kernel, (dy, states, dA_cumsum, C, B, dcb, seq_idx, ddA), configs.get("bwd_dc"))
    grads["B"] = launch(db_kernel, (x, dt_out, dA_cumsum, dS, C, dcb, seq_idx), configs.get("bwd_db"))

    A, dt, dt_bias = saved["A"], saved["dt"], saved["dt_bias"]
    low, high = saved["dt_limit"]
    grad_dt, partials = launch(
        ddt_kernel,
        (
            ddt,
            ddA,
            ddA_last,
            ddA_next,
            ddA_state,
            dt_out,
            A,
            dt,
            dt_bias,
            float(low),
            float(high),
            triton.next_power_of_2(dt_out.shape[3]),
            bool(saved["dt_softplus"]),
        ),
        configs.get("bwd_ddt"),
    )
    grads["dt"] = grad_dt[:, : dt.shape[1]]
    sums = partials.sum((1, 2))
    grads["A"] = sums[0].to(A.dtype)
    if dt_bias is not None:
        grads["dt_bias"] = sums[1].to(dt_bias.dtype)
    if D is not None:
        grads["D"] = dD.sum((0, 1) if D.dim() == 2 else (0, 1, 3)).to(D.dtype)
    init = saved["initial_states"]
    if init is not None:
        grads["initial_states"] = dinitial.reshape(init.shape).to(init.dtype)
    return grads
