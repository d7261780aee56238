"""Codegen checks of the Helion chunk_scan port that need no numbers: the default config and every config in
CONFIGS generate Triton for the shapes the parity tests draw (with and without D, z and seq_idx), and fp32
products are not TF32."""

from __future__ import annotations

import pytest
import torch

from kernels.chunk_cumsum import as_config
from kernels.chunk_scan import CONFIGS, chunk_scan_args, chunk_scan_kernel

# (batch, seqlen, nheads, ngroups, headdim, dstate, chunk_size)
SHAPES = [(2, 37, 4, 2, 8, 16, 16), (1, 5, 2, 1, 8, 16, 16), (1, 1, 2, 2, 16, 16, 16), (2, 70, 4, 2, 16, 16, 32)]


def _bound(shape: tuple[int, ...], dtype: torch.dtype, with_options: bool):
    batch, seqlen, nheads, ngroups, headdim, dstate, chunk_size = shape
    nchunks = -(-seqlen // chunk_size)
    seq_idx = torch.zeros(batch, seqlen, dtype=torch.int32)
    seq_idx[:, seqlen // 2:] = 1
    x = torch.randn(batch, seqlen, nheads, headdim).to(dtype)
    args = chunk_scan_args(
        torch.randn(batch, nchunks, ngroups, chunk_size, chunk_size), x,
        torch.rand(batch, nheads, nchunks, chunk_size), -torch.rand(batch, nheads, nchunks, chunk_size).cumsum(-1),
        torch.randn(batch, seqlen, ngroups, dstate).to(dtype),
        torch.randn(batch, nchunks, nheads, headdim, dstate).to(dtype),
        D=torch.randn(nheads, headdim) if with_options else torch.randn(nheads),
        z=torch.randn_like(x) if with_options else None, seq_idx=seq_idx if with_options else None)
    return chunk_scan_kernel.bind(args)


@pytest.mark.parametrize("with_options", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", SHAPES)
def test_every_config_generates_triton(shape, dtype, with_options):
    bound = _bound(shape, dtype, with_options)
    for config in [bound.config_spec.default_config(), *map(as_config, CONFIGS)]:
        assert "@triton.jit" in bound.to_triton_code(config)


def test_configs_differ_in_block_sizes():
    assert len(CONFIGS) >= 2
    assert len({tuple(c["block_sizes"]) for c in CONFIGS}) == len(CONFIGS)


def test_fp32_dot_is_ieee():
    code = _bound(SHAPES[0], torch.float32, True).to_triton_code(as_config(CONFIGS[0]))
    dots = [line for line in code.splitlines() if "tl.dot(" in line]
    assert len(dots) == 2 and all("input_precision='ieee'" in line for line in dots)
