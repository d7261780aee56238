"""Codegen checks of the Helion gated-norm port that need no numbers: the default config and every config in
CONFIGS generate Triton, forward and backward, for the variants the parity tests draw (one row, group sizes
that are not powers of two, z before/after the norm, bias, RMS/LayerNorm); the backward's rows per row group
is a tunable block size; no kernel uses ``.mean`` (Helion 1.5 can divide it by the padded block size)."""

from __future__ import annotations

import inspect

import pytest
import torch

from kernels.chunk_cumsum import as_config
from kernels.layernorm_gated import (
    CONFIGS,
    layer_norm_bwd_args,
    layer_norm_bwd_kernel,
    layer_norm_fwd_args,
    layer_norm_fwd_kernel,
    layernorm_fn,
)

# (rows, ngroups, group_size, z, norm_before_gate, is_rms_norm, bias)
VARIANTS = [
    (7, 2, 48, True, False, True, False),
    (5, 3, 16, True, True, False, True),
    (1, 2, 96, True, True, True, False),
    (37, 1, 320, False, True, False, True),
]


def _bound(variant: tuple, dtype: torch.dtype = torch.float16):
    rows, ngroups, group_size, with_z, norm_before_gate, is_rms_norm, with_bias = variant
    n = ngroups * group_size
    x = torch.randn(rows, n).to(dtype)
    weight = torch.ones(n, dtype=dtype)
    bias = torch.zeros(n, dtype=dtype) if with_bias else None
    z = torch.randn(rows, n).to(dtype) if with_z else None
    fwd = layer_norm_fwd_args(x, weight, bias, 1e-5, z=z, group_size=group_size, norm_before_gate=norm_before_gate,
                              is_rms_norm=is_rms_norm)
    mean, rstd = fwd[5], fwd[6]
    bwd = layer_norm_bwd_args(torch.randn_like(x), x, weight, bias, 1e-5, None if mean is None else mean.view(-1),
                              rstd.view(-1), z=z, group_size=group_size, norm_before_gate=norm_before_gate,
                              is_rms_norm=is_rms_norm, recompute_output=True)
    return layer_norm_fwd_kernel.bind(fwd), layer_norm_bwd_kernel.bind(bwd)


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_config_generates_triton(variant):
    fwd, bwd = _bound(variant)
    for bound, key in ((fwd, "fwd"), (bwd, "bwd")):
        for config in [bound.config_spec.default_config(), *(as_config(c[key]) for c in CONFIGS)]:
            assert "@triton.jit" in bound.to_triton_code(config)


def test_configs_differ_in_block_sizes():
    assert len(CONFIGS) >= 2
    for key in ("fwd", "bwd"):
        assert len({tuple(c[key]["block_sizes"]) for c in CONFIGS}) == len(CONFIGS)


def test_tunable_block_sizes():
    # Forward: rows per program. Backward: rows per row group (the nrow_groups knob), rows at a time.
    # The group's columns are an hl.arange inside the program, never a tile.
    fwd, bwd = _bound((40, 2, 96, True, False, True, False))
    assert len(fwd.config_spec.block_sizes) == 1
    assert len(bwd.config_spec.block_sizes) == 2


def test_no_mean_in_kernels():
    for kernel in (layer_norm_fwd_kernel, layer_norm_bwd_kernel):
        assert ".mean(" not in inspect.getsource(kernel.fn)


def test_flat_config_is_rejected():
    x = torch.randn(2, 16)
    with pytest.raises(ValueError, match="fwd"):
        layernorm_fn(x, torch.ones(16), None, config={"block_sizes": [4]})
