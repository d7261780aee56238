"""Helion port of mamba-ssm's ``_bmm_chunk_fwd``: per chunk (and group), out[i, j] = <a[i], b[j]> over the
positions i, j of the chunk, zero across sequences (seq_idx) and past seqlen."""

from __future__ import annotations

from typing import Any

import helion
import helion.language as hl
import torch

from contract.checks import check_bmm_chunk
from kernels.launch import ConfigLike, launch
from kernels.precision import acc_dtype, fp64_dot


@helion.kernel(static_shapes=False, dot_precision="ieee")
def bmm_chunk_kernel(
    a: torch.Tensor,
    b: torch.Tensor,
    seq_idx: torch.Tensor | None,
    chunk_size: int,
    dot_dtype: torch.dtype,
    out_dtype: torch.dtype,
) -> torch.Tensor:
    """a, b (batch, seqlen, ngroups, k) -> out (batch, nchunks, ngroups, chunk_size, chunk_size) in out_dtype.

    One program per (batch, chunk, group, row block, column block), looping over k; products in dot_dtype with fp32
    accumulation, true fp32 (not TF32) for fp32 inputs (fp64 for fp64 inputs). Rows and columns are tiles of chunk_size,
    offset by the chunk start; positions past seqlen are masked explicitly (hl.tile masks only against chunk_size)."""
    batch, seqlen, ngroups, k = a.shape
    chunk_size = hl.specialize(chunk_size)
    nchunks = (seqlen + chunk_size - 1) // chunk_size
    wide = acc_dtype(dot_dtype)
    out = torch.empty([batch, nchunks, ngroups, chunk_size, chunk_size], dtype=out_dtype, device=a.device)
    for tile_b, tile_c, tile_g, tile_i, tile_j in hl.tile(
        [batch, nchunks, ngroups, chunk_size, chunk_size], block_size=[1, 1, 1, None, None]
    ):
        pos_i = tile_c.begin * chunk_size + tile_i.index
        pos_j = tile_c.begin * chunk_size + tile_j.index
        valid_i = pos_i < seqlen
        valid_j = pos_j < seqlen
        acc = hl.zeros([tile_i, tile_j], dtype=wide)
        for tile_k in hl.tile(k):
            rows = hl.load(a, [tile_b.begin, pos_i, tile_g.begin, tile_k], extra_mask=valid_i[:, None])
            cols = hl.load(b, [tile_b.begin, pos_j, tile_g.begin, tile_k], extra_mask=valid_j[:, None])
            lhs, rhs = rows.to(dot_dtype), cols.to(dot_dtype).T
            acc = fp64_dot(lhs, rhs, acc) if wide == torch.float64 else hl.dot(lhs, rhs, acc=acc)
        if seq_idx is not None:
            seq_i = hl.load(seq_idx, [tile_b.begin, pos_i], extra_mask=valid_i)
            seq_j = hl.load(seq_idx, [tile_b.begin, pos_j], extra_mask=valid_j)
            acc = torch.where(seq_i[:, None] == seq_j[None, :], acc, 0.0)
        out[tile_b.begin, tile_c.begin, tile_g.begin, tile_i, tile_j] = acc.to(out_dtype)
    return out


CONFIGS: list[dict[str, Any]] = [
    {"block_sizes": [16, 16, 16], "num_warps": 4, "num_stages": 2},
    {"block_sizes": [32, 16, 32], "num_warps": 4, "num_stages": 3},
]
"""Explicit configs for the CPU parity tests: block_sizes = [rows, columns, k]."""


def bmm_chunk_args(
    a: torch.Tensor,
    b: torch.Tensor,
    chunk_size: int,
    seq_idx: torch.Tensor | None = None,
    causal: bool = False,
    output_dtype: torch.dtype | None = None,
) -> tuple[Any, ...]:
    """Validate the wrapper's arguments and return the arguments of :data:`bmm_chunk_kernel` (what a tuner
    passes to ``bmm_chunk_kernel.autotune``); ungrouped a, b get a group axis of size 1. ``causal`` changes
    nothing (see :func:`bmm_chunk_fwd`)."""
    check_bmm_chunk(a, b, chunk_size, seq_idx)
    a4, b4 = (a, b) if a.dim() == 4 else (a.unsqueeze(2), b.unsqueeze(2))
    dot_dtype = a.dtype if a.dtype == b.dtype else torch.float32
    out_dtype = a.dtype if output_dtype is None else output_dtype
    return (a4, b4, seq_idx, int(chunk_size), dot_dtype, out_dtype)


def bmm_chunk_fwd(
    a: torch.Tensor,
    b: torch.Tensor,
    chunk_size: int,
    seq_idx: torch.Tensor | None = None,
    causal: bool = False,
    output_dtype: torch.dtype | None = None,
    *,
    config: ConfigLike = None,
) -> torch.Tensor:
    """a, b (batch, seqlen, k) or (batch, seqlen, ngroups, k) -> out (batch, nchunks, chunk_size, chunk_size)
    or (batch, nchunks, ngroups, chunk_size, chunk_size), in output_dtype (default a.dtype).

    out[..., i, j] = sum_k a[c*chunk_size + i, k] * b[c*chunk_size + j, k], zero where i or j lies past seqlen or
    seq_idx differs between them. mamba-ssm computes the products in the lower of the two input precisions; here inputs
    of one dtype multiply in that dtype and mixed inputs in fp32, accumulated in fp32 (fp64 inputs in fp64). causal:
    mamba-ssm defines only out[i, j] for i >= j then (it leaves the blocks wholly above the diagonal unwritten, and
    writes the full product elsewhere); like reference/bmm_chunk.py this port returns the full product everywhere."""
    out = launch(bmm_chunk_kernel, bmm_chunk_args(a, b, chunk_size, seq_idx, causal, output_dtype), config)
    return out if a.dim() == 4 else out.squeeze(2)


HAS_BACKWARD = False
"""Forward only: the parity engine judges this port's outputs, not its gradients (no Helion backward yet)."""
