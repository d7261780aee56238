"""Codegen checks of the Helion chunk_cumsum port that need no numbers: the default config and every config in
CONFIGS generate Triton for the shapes the parity tests draw, and no config can tile the chunk axis (a cumsum
split across tiles is silently wrong in Helion)."""

from __future__ import annotations

import pytest
import torch

from kernels.chunk_cumsum import CONFIGS, as_config, chunk_cumsum_args, chunk_cumsum_kernel

# (batch, seqlen, nheads, chunk_size): ragged last chunk, shorter than a chunk, one token, whole chunks,
# a chunk size that is not a power of two.
SHAPES = [(2, 37, 4, 16), (1, 5, 2, 16), (1, 1, 2, 16), (2, 64, 4, 32), (2, 30, 3, 12)]


def _bound(shape: tuple[int, int, int, int], with_bias: bool):
    batch, seqlen, nheads, chunk_size = shape
    args = chunk_cumsum_args(torch.randn(batch, seqlen, nheads), -torch.rand(nheads), chunk_size,
                             dt_bias=torch.randn(nheads) if with_bias else None, dt_softplus=with_bias,
                             dt_limit=(0.001, 0.1) if with_bias else (0.0, float("inf")))
    return chunk_cumsum_kernel.bind(args)


@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("shape", SHAPES)
def test_every_config_generates_triton(shape, with_bias):
    bound = _bound(shape, with_bias)
    for config in [bound.config_spec.default_config(), *map(as_config, CONFIGS)]:
        assert "@triton.jit" in bound.to_triton_code(config)


def test_configs_differ_in_block_sizes():
    assert len(CONFIGS) >= 2
    assert len({tuple(c["block_sizes"]) for c in CONFIGS}) == len(CONFIGS)


@pytest.mark.parametrize("shape", SHAPES)
def test_only_the_head_block_is_tunable(shape):
    # The chunk axis is an hl.arange inside the program, never a tile: one tunable block size (heads).
    assert len(_bound(shape, True).config_spec.block_sizes) == 1
