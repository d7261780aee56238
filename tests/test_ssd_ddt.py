"""The SSD backward's ddt kernel equals the PyTorch glue it replaced (fp64, to rounding), at the shapes where
Helion 1.5.0's dynamic shapes drop a size-1 dimension's index (one head in a wider head block, one position), a
ragged last chunk and a chunk size that is not a power of two."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
import triton

from kernels import ssd_combined_bwd
from kernels.launch import launch
from kernels.precision import acc_dtype
from reference import _triton_shims

_triton_shims.install()  # the interpreter fixes the kernels need on CPU, as ops.common installs them

F64 = torch.float64


def _glue(args: tuple[Any, ...]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(grad dt, grad A, grad dt_bias) by the PyTorch glue the kernel replaced, from the kernel's arguments."""
    ddt, ddA, ddA_last, ddA_next, ddA_state, dt_out, A, dt, dt_bias, low, high, _, softplus = args
    batch, nheads = ddt.shape[:2]
    ddA = ddA.clone()
    ddA[:, :, :, -1] += ddA_last.sum(-1)
    ddA = ddA.flip(-1).cumsum(-1).flip(-1)
    ddA[:, :, :, 1:] += (ddA_next + ddA_state.cumsum(-1))[:, :, :, :-1]
    ddt = ddt + ddA * A.to(F64)[None, :, None, None]
    grad = ddt.permute(0, 2, 3, 1).reshape(batch, -1, nheads)[:, : dt.shape[1]]
    wide = acc_dtype(dt.dtype)
    d = dt.to(wide) if dt_bias is None else dt.to(wide) + dt_bias.to(wide)
    processed = d
    if softplus:
        processed = torch.where(d <= 20.0, F.softplus(d), d)
        grad = grad * torch.where(d <= 20.0, torch.sigmoid(d.double()), 1.0)
    grad = torch.where((processed >= low) & (processed <= high), grad, 0.0)
    return grad.to(dt.dtype), (ddA * dt_out).sum((0, 2, 3)), grad.sum((0, 1))


@pytest.mark.parametrize(
    ("batch", "nheads", "seqlen", "chunk_size", "heads_block", "options", "dtype"),
    [
        (1, 1, 5, 16, 4, True, F64),  # one head in a block of 4
        (2, 3, 1, 16, 2, False, F64),  # one position
        (2, 4, 37, 16, 4, True, F64),  # a ragged last chunk
        (2, 3, 30, 12, 1, True, torch.bfloat16),  # a chunk of 12 in a block of 16
    ],
)
def test_ddt_kernel_is_the_glue(batch, nheads, seqlen, chunk_size, heads_block, options, dtype, parity_device):
    """grad dt (its first seqlen positions, what the caller returns) and the partials' sums, against the glue."""
    torch.manual_seed(0)
    with torch.device(parity_device):  # the kernel runs where the session's kernels do
        nchunks = -(-seqlen // chunk_size)
        wide = acc_dtype(dtype)
        parts = [torch.randn(batch, nheads, nchunks, chunk_size, dtype=F64) for _ in range(4)]
        args = (
            *parts[:2],
            torch.randn(batch, nheads, nchunks, 3, dtype=F64),
            *parts[2:],
            torch.rand(batch, nheads, nchunks, chunk_size, dtype=wide),
            -torch.rand(nheads, dtype=wide),
            torch.randn(batch, seqlen, nheads, dtype=F64).to(dtype),
            torch.randn(nheads, dtype=wide) if options else None,
            0.3 if options else 0.0,
            1.2 if options else float("inf"),
            triton.next_power_of_2(chunk_size),
            options,
        )
    grad_dt, partials = launch(ssd_combined_bwd.ddt_kernel, args, {"block_sizes": [heads_block], "num_warps": 4})
    want_dt, want_A, want_bias = _glue(args)
    sums = partials.sum((1, 2))
    torch.testing.assert_close(grad_dt[:, :seqlen], want_dt, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(sums[0], want_A, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(sums[1], want_bias, rtol=1e-12, atol=1e-12)
