"""Reference of mamba-ssm's ``_chunk_cumsum_fwd``: dt processed (bias, softplus, clamp) and laid out
per chunk, and the cumulative sum of dt * A inside each chunk.

Also home of the two helpers the chunked references share: :func:`compute_dtype` (their precision rule)
and :func:`per_chunk` (the chunked layout).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from reference import checks

SOFTPLUS_THRESHOLD = 20.0
"""mamba-ssm applies softplus only where dt <= 20 and passes larger values through."""


def compute_dtype(*tensors: torch.Tensor | None) -> torch.dtype:
    """float64 when any given tensor is float64 (the oracle), else float32 (what the kernels accumulate in)."""
    return torch.float64 if any(t is not None and t.dtype == torch.float64 for t in tensors) else torch.float32


def per_chunk(t: torch.Tensor, chunk_size: int, value: float = 0.0) -> torch.Tensor:
    """(b, l, ...) -> (b, nchunks, chunk_size, ...), padded with ``value`` past seqlen."""
    nchunks = math.ceil(t.shape[1] / chunk_size)
    t = F.pad(t, (0, 0) * (t.dim() - 2) + (0, nchunks * chunk_size - t.shape[1]), value=value)
    return t.reshape(t.shape[0], nchunks, chunk_size, *t.shape[2:])


def check_chunk_cumsum(dt: torch.Tensor, A: torch.Tensor, chunk_size: int, dt_bias: torch.Tensor | None = None) -> None:
    """Reject invalid arguments of :func:`chunk_cumsum_fwd` up front (ValueError/TypeError naming the argument);
    the Triton adapter runs the same checks."""
    _, _, nheads = checks.sizes("dt", dt, "(batch, seqlen, nheads)", 3)
    checks.floating_tensor("dt", dt)
    checks.shape("A", A, (nheads,))
    checks.shape("dt_bias", dt_bias, (nheads,))
    checks.chunk_size(chunk_size)


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
