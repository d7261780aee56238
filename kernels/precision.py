"""The accumulation dtype and the matrix product the SSD kernels share. fp64 inputs compute in fp64 throughout
(the fp32 backward upcasts to reach gradients within half an ulp of the exact ones); every other dtype
multiplies in its own precision and accumulates in fp32, as mamba-ssm does."""

from __future__ import annotations

import helion.language as hl
import torch


def acc_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a kernel accumulates and keeps its intermediates in for inputs of ``dtype``."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def mma(a: torch.Tensor, b: torch.Tensor, acc: torch.Tensor) -> torch.Tensor:
    """acc + a @ b inside a Helion kernel: ``hl.dot`` for fp32 accumulators (it rejects fp64), an fp64 product
    (Triton's fp64 dot, fp64 result) for fp64 accumulators."""
    if acc.dtype == torch.float64:
        return acc + a.to(torch.float64) @ b.to(torch.float64)
    return hl.dot(a, b, acc=acc)
