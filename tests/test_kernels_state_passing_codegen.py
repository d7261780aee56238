"""Codegen checks of the Helion state_passing port that need no numbers: the default config and every config in
CONFIGS generate Triton for the shapes the parity tests draw (one chunk included, whose size-1 axes Helion
specializes), and no config can tile the chunk axis (a scan split across tiles is silently wrong in Helion)."""

from __future__ import annotations

import pytest
import torch

from kernels.chunk_cumsum import as_config
from kernels.state_passing import CONFIGS, state_passing_args, state_passing_kernel

# (batch, seqlen, nheads, dim, chunk_size): 3 chunks (ragged), 1 chunk, 1 token, 4 whole chunks.
SHAPES = [(2, 37, 4, 128, 16), (1, 5, 2, 128, 16), (1, 1, 2, 256, 16), (2, 128, 2, 40, 32)]


def _bound(shape: tuple[int, ...], with_options: bool):
    batch, seqlen, nheads, dim, chunk_size = shape
    nchunks = -(-seqlen // chunk_size)
    seq_idx = torch.zeros(batch, seqlen, dtype=torch.int32)
    seq_idx[:, seqlen // 2:] = 1
    args = state_passing_args(torch.randn(batch, nchunks, nheads, dim), -torch.rand(batch, nheads, nchunks),
                              initial_states=torch.randn(batch, nheads, dim) if with_options else None,
                              seq_idx=seq_idx if with_options else None, chunk_size=chunk_size,
                              out_dtype=torch.float16)
    return state_passing_kernel.bind(args)


@pytest.mark.parametrize("with_options", [False, True])
@pytest.mark.parametrize("shape", SHAPES)
def test_every_config_generates_triton(shape, with_options):
    bound = _bound(shape, with_options)
    for config in [bound.config_spec.default_config(), *map(as_config, CONFIGS)]:
        assert "@triton.jit" in bound.to_triton_code(config)


def test_configs_differ_in_block_sizes():
    assert len(CONFIGS) >= 2
    assert len({tuple(c["block_sizes"]) for c in CONFIGS}) == len(CONFIGS)


@pytest.mark.parametrize("shape", SHAPES)
def test_only_the_dim_block_is_tunable(shape):
    # The chunk axis is an hl.arange inside the program, never a tile: one tunable block size (dim).
    assert len(_bound(shape, True).config_spec.block_sizes) == 1
