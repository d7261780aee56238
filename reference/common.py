"""What the chunked references share: their precision rule (:func:`compute_dtype`) and the chunked layout
(:func:`per_chunk`)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def compute_dtype(*tensors: torch.Tensor | None) -> torch.dtype:
    """float64 when any given tensor is float64 (the oracle), else float32 (what the kernels accumulate in)."""
    return torch.float64 if any(t is not None and t.dtype == torch.float64 for t in tensors) else torch.float32


def per_chunk(t: torch.Tensor, chunk_size: int, value: float = 0.0) -> torch.Tensor:
    """(b, l, ...) -> (b, nchunks, chunk_size, ...), padded with ``value`` past seqlen."""
    nchunks = math.ceil(t.shape[1] / chunk_size)
    t = F.pad(t, (0, 0) * (t.dim() - 2) + (0, nchunks * chunk_size - t.shape[1]), value=value)
    return t.reshape(t.shape[0], nchunks, chunk_size, *t.shape[2:])
