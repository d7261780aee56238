"""Reference of mamba-ssm's ``_chunk_cumsum_fwd``: dt processed (bias, softplus, clamp) and laid out
per chunk, and the cumulative sum of dt * A inside each chunk."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from contract.checks import check_chunk_cumsum
from reference.common import compute_dtype, per_chunk

SOFTPLUS_THRESHOLD = 20.0
"""mamba-ssm applies softplus only where dt <= 20 and passes larger values through."""


def chunk_cumsum_fwd(
    dt: torch.Tensor,
    A: torch.Tensor,
    chunk_size: int,
    dt_bias: torch.Tensor | None = None,
    dt_softplus: bool = False,
    dt_limit: tuple[float, float] = (0.0, float("inf")),
) -> tuple[torch.Tensor, torch.Tensor]:
    """dt (b, l, h), A (h,) -> (dA_cumsum, dt_out), both (b, h, nchunks, chunk_size) in fp32 (fp64 for fp64
    input). dt_out is dt + bias, softplus'd where <= 20, clamped to dt_limit, and zero past seqlen in the
    ragged last chunk; dA_cumsum is the in-chunk cumsum of dt_out * A, so it stays flat past seqlen."""
    check_chunk_cumsum(dt, A, chunk_size, dt_bias)
    dtype = compute_dtype(dt, A, dt_bias)
    d = dt.to(dtype)
    if dt_bias is not None:
        d = d + dt_bias.to(dtype)
    if dt_softplus:
        d = torch.where(d <= SOFTPLUS_THRESHOLD, F.softplus(d), d)
    d = torch.clamp(d, min=dt_limit[0], max=dt_limit[1])
    dt_out = per_chunk(d, chunk_size).permute(0, 3, 1, 2).contiguous()  # zero past seqlen, after processing
    dA_cumsum = torch.cumsum(dt_out * A.to(dtype)[:, None, None], dim=-1)
    return dA_cumsum, dt_out
