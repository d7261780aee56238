"""Codegen checks of the Helion chunk_state ports that need no numbers: the default config and every config in
CONFIGS / VARLEN_CONFIGS generate Triton for the shapes the parity tests draw, and fp32 products are not TF32."""

from __future__ import annotations

import pytest
import torch

from kernels.chunk_cumsum import as_config
from kernels.chunk_state import (
    CONFIGS,
    VARLEN_CONFIGS,
    chunk_state_args,
    chunk_state_kernel,
    chunk_state_varlen_args,
    chunk_state_varlen_kernel,
)

# (batch, seqlen, nheads, ngroups, headdim, dstate, chunk_size)
SHAPES = [(2, 37, 4, 2, 8, 16, 16), (1, 5, 2, 1, 8, 16, 16), (1, 1, 2, 2, 16, 16, 16), (2, 70, 4, 2, 16, 16, 32)]


def _inputs(shape: tuple[int, ...], dtype: torch.dtype) -> dict[str, torch.Tensor]:
    batch, seqlen, nheads, ngroups, headdim, dstate, chunk_size = shape
    nchunks = -(-seqlen // chunk_size)
    return {"B": torch.randn(batch, seqlen, ngroups, dstate).to(dtype),
            "x": torch.randn(batch, seqlen, nheads, headdim).to(dtype),
            "dt": torch.rand(batch, nheads, nchunks, chunk_size),
            "dA_cumsum": -torch.rand(batch, nheads, nchunks, chunk_size).cumsum(-1)}


def _bound(shape: tuple[int, ...], dtype: torch.dtype, with_seq_idx: bool):
    inputs = _inputs(shape, dtype)
    seq_idx = torch.zeros(shape[0], shape[1], dtype=torch.int32)
    seq_idx[:, shape[1] // 2:] = 1
    return chunk_state_kernel.bind(chunk_state_args(**inputs, seq_idx=seq_idx if with_seq_idx else None))


def _bound_varlen(shape: tuple[int, ...], dtype: torch.dtype):
    inputs = {k: v[0] for k, v in _inputs(shape, dtype).items()}
    chunk_states = torch.randn(inputs["dt"].shape[1], shape[2], shape[4], shape[5]).to(dtype)
    cu_seqlens = torch.tensor([0, shape[1] // 2, shape[1]], dtype=torch.int32)
    return chunk_state_varlen_kernel.bind(chunk_state_varlen_args(**inputs, cu_seqlens=cu_seqlens,
                                                                  chunk_states=chunk_states))


@pytest.mark.parametrize("with_seq_idx", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", SHAPES)
def test_every_config_generates_triton(shape, dtype, with_seq_idx):
    bound = _bound(shape, dtype, with_seq_idx)
    for config in [bound.config_spec.default_config(), *map(as_config, CONFIGS)]:
        assert "@triton.jit" in bound.to_triton_code(config)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", SHAPES)
def test_every_varlen_config_generates_triton(shape, dtype):
    bound = _bound_varlen(shape, dtype)
    for config in [bound.config_spec.default_config(), *map(as_config, VARLEN_CONFIGS)]:
        assert "@triton.jit" in bound.to_triton_code(config)


def test_configs_differ_in_block_sizes():
    for configs in (CONFIGS, VARLEN_CONFIGS):
        assert len(configs) >= 2
        assert len({tuple(c["block_sizes"]) for c in configs}) == len(configs)


@pytest.mark.parametrize("varlen", [False, True])
def test_fp32_dot_is_ieee(varlen):
    bound = _bound_varlen(SHAPES[0], torch.float32) if varlen else _bound(SHAPES[0], torch.float32, True)
    code = bound.to_triton_code(as_config((VARLEN_CONFIGS if varlen else CONFIGS)[0]))
    dots = [line for line in code.splitlines() if "tl.dot(" in line]
    assert dots and all("input_precision='ieee'" in line for line in dots)
