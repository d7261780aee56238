"""The accumulation dtype and the fp64 matrix product the SSD kernels share. fp64 inputs compute in fp64 throughout
(the fp32 backward upcasts to reach gradients within half an ulp of the exact ones); every other dtype
multiplies in its own precision and accumulates in fp32, as mamba-ssm does."""

from __future__ import annotations

import torch


def acc_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a kernel accumulates and keeps its intermediates in for inputs of ``dtype``."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def fp64_dot(a: torch.Tensor, b: torch.Tensor, acc: torch.Tensor) -> torch.Tensor:
    """acc + a @ b in fp64 inside a Helion kernel (Triton's fp64 dot; ``hl.dot`` rejects fp64). A kernel calls it as
    ``fp64_dot(a, b, acc) if wide == torch.float64 else hl.dot(a, b, acc=acc)``: ``hl.dot`` must be called in the
    kernel's own body, where Helion sees its extents and seeds the kernel's default config from them (on sm90, the
    matmul heuristic's tiles); called from a helper function, the default stays at 16x16x16 tiles
    (bench/results/h200-run25)."""
    return acc + a.to(torch.float64) @ b.to(torch.float64)
