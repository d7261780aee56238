"""Codegen checks of the Helion bmm_chunk port that need no numbers: the default config and every config in
CONFIGS generate Triton for the shapes the parity tests draw, and fp32 products are not TF32."""

from __future__ import annotations

import pytest
import torch

from kernels.bmm_chunk import CONFIGS, bmm_chunk_args, bmm_chunk_kernel
from kernels.chunk_cumsum import as_config

# (batch, seqlen, ngroups or 0 for (b, L, k) inputs, k, chunk_size)
SHAPES = [(2, 37, 2, 16, 16), (1, 5, 1, 16, 16), (1, 1, 2, 16, 16), (2, 70, 0, 24, 32)]


def _bound(shape: tuple[int, ...], dtype: torch.dtype, with_options: bool):
    batch, seqlen, ngroups, k, chunk_size = shape
    dims = (batch, seqlen, ngroups, k) if ngroups else (batch, seqlen, k)
    seq_idx = torch.zeros(batch, seqlen, dtype=torch.int32)
    seq_idx[:, seqlen // 2:] = 1
    args = bmm_chunk_args(torch.randn(dims).to(dtype), torch.randn(dims).to(dtype), chunk_size,
                          seq_idx=seq_idx if with_options else None, causal=with_options,
                          output_dtype=torch.float32)
    return bmm_chunk_kernel.bind(args)


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
    code = _bound(SHAPES[0], torch.float32, False).to_triton_code(as_config(CONFIGS[0]))
    dots = [line for line in code.splitlines() if "tl.dot(" in line]
    assert dots and all("input_precision='ieee'" in line for line in dots)
