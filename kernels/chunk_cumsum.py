"""Helion port of mamba-ssm's ``_chunk_cumsum_fwd``: dt (+ bias, softplus, clamp) laid out per chunk, and
the cumulative sum of dt * A inside each chunk."""

from __future__ import annotations

from typing import Any

import helion
import helion.language as hl
import torch
import triton

from contract.checks import check_chunk_cumsum
from kernels.launch import ConfigLike, launch
from kernels.precision import acc_dtype


@helion.kernel(static_shapes=False)
def chunk_cumsum_kernel(
    dt: torch.Tensor,
    A: torch.Tensor,
    dt_bias: torch.Tensor | None,
    dt_min: float,
    dt_max: float,
    chunk_size: int,
    chunk_block: hl.constexpr,
    dt_softplus: hl.constexpr,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(dA_cumsum, dt_out), both fp32 (fp64 for fp64 dt) (batch, nheads, nchunks, chunk_size).

    One program per (batch, chunk, block of heads); the whole chunk is one ``hl.arange(chunk_block)``
    (chunk_block = next power of two >= chunk_size), so the cumsum never spans a tile boundary whatever the
    config. Positions past the chunk or past seqlen are masked explicitly (hl.arange is not masked)."""
    batch, seqlen, nheads = dt.shape
    chunk_size = hl.specialize(chunk_size)
    nchunks = (seqlen + chunk_size - 1) // chunk_size
    wide = acc_dtype(dt.dtype)
    dA_cumsum = torch.empty([batch, nheads, nchunks, chunk_size], dtype=wide, device=dt.device)
    dt_out = torch.empty([batch, nheads, nchunks, chunk_size], dtype=wide, device=dt.device)
    for tile_b, tile_c, tile_h in hl.tile([batch, nchunks, nheads], block_size=[1, 1, None]):
        offs = hl.arange(chunk_block)
        in_chunk = offs < chunk_size
        pos = tile_c.begin * chunk_size + offs
        valid = in_chunk & (pos < seqlen)
        step = hl.load(dt, [tile_b.begin, pos, tile_h], extra_mask=valid[:, None]).to(wide)
        if dt_bias is not None:
            step = step + dt_bias[tile_h].to(wide)[None, :]
        if dt_softplus:
            step = torch.nn.functional.softplus(step, beta=1.0, threshold=20.0)
        step = torch.clamp(step, dt_min, dt_max)
        step = torch.where(valid[:, None], step, 0.0).permute(1, 0)  # [heads, chunk]
        decay = step * A[tile_h].to(wide)[:, None]
        hl.store(dt_out, [tile_b.begin, tile_h, tile_c.begin, offs], step, extra_mask=in_chunk[None, :])
        cumsum = torch.cumsum(decay, dim=1)
        # Past seqlen the sum must equal the last real position's bit for bit: the chunk decay is read at the
        # chunk's end (exp(a_end - a_s) must be exactly 1 for the last token). A GPU scan over the zero-padded
        # tail may round that sum differently (a parallel scan's association differs per position).
        last = valid & ~((offs + 1 < chunk_size) & (pos + 1 < seqlen))
        end = torch.sum(torch.where(last[None, :], cumsum, 0.0), dim=1)
        cumsum = torch.where(valid[None, :], cumsum, end[:, None])
        hl.store(dA_cumsum, [tile_b.begin, tile_h, tile_c.begin, offs], cumsum, extra_mask=in_chunk[None, :])
    return dA_cumsum, dt_out


CONFIGS: list[dict[str, Any]] = [
    {"block_sizes": [1], "num_warps": 1},
    {"block_sizes": [4], "num_warps": 4},
]
"""Explicit configs for the CPU parity tests. The one knob that changes the executed code is the head
block (block_sizes[0]); the chunk is always one block, so no config can split the cumsum."""


def chunk_cumsum_args(
    dt: torch.Tensor,
    A: torch.Tensor,
    chunk_size: int,
    dt_bias: torch.Tensor | None = None,
    dt_softplus: bool = False,
    dt_limit: tuple[float, float] = (0.0, float("inf")),
) -> tuple[Any, ...]:
    """Validate the wrapper's arguments and return the arguments of :data:`chunk_cumsum_kernel` (what a tuner
    passes to ``chunk_cumsum_kernel.autotune``)."""
    check_chunk_cumsum(dt, A, chunk_size, dt_bias)
    return (
        dt,
        A,
        dt_bias,
        float(dt_limit[0]),
        float(dt_limit[1]),
        int(chunk_size),
        triton.next_power_of_2(chunk_size),
        bool(dt_softplus),
    )


def chunk_cumsum_fwd(
    dt: torch.Tensor,
    A: torch.Tensor,
    chunk_size: int,
    dt_bias: torch.Tensor | None = None,
    dt_softplus: bool = False,
    dt_limit: tuple[float, float] = (0.0, float("inf")),
    *,
    config: ConfigLike = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """dt (batch, seqlen, nheads), A (nheads,) -> (dA_cumsum, dt_out), fp32 (fp64 for fp64 dt) (batch, nheads, nchunks,
    chunk_size).

    dt_out = clamp(softplus?(dt + dt_bias), *dt_limit) (softplus only where the argument is <= 20), zero
    past seqlen; dA_cumsum = cumsum of dt_out * A within each chunk, past seqlen a copy of its last value."""
    return launch(chunk_cumsum_kernel, chunk_cumsum_args(dt, A, chunk_size, dt_bias, dt_softplus, dt_limit), config)


HAS_BACKWARD = False
"""Forward only: the parity engine judges this port's outputs, not its gradients (no Helion backward yet)."""
