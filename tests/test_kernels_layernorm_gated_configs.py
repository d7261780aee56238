"""The gated norm's config handling: without a config each kernel runs an explicit fallback mirroring
mamba-ssm's launch heuristic (never Helion's default), the fallbacks are valid Helion configs, and
``tuning_configs`` grids both kernels with the backward's rows per row group varying fastest."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
import triton

from kernels import layernorm_gated as ln
from kernels.launch import as_config
from reference import _triton_shims

_triton_shims.install()  # the interpreter fixes the kernels need on CPU, as ops.common installs them

# (rows, ngroups, group_size, z, norm_before_gate, is_rms_norm, bias)
VARIANTS = [
    (7, 2, 48, True, False, True, False),
    (1, 2, 96, True, True, False, True),
    (37, 1, 320, False, True, False, True),
]


def _args(variant: tuple) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    rows, ngroups, group_size, with_z, norm_before_gate, is_rms_norm, with_bias = variant
    n = ngroups * group_size
    x = torch.randn(rows, n, dtype=torch.float16)
    fwd = ln.layer_norm_fwd_args(
        x,
        torch.ones(n, dtype=x.dtype),
        torch.zeros(n, dtype=x.dtype) if with_bias else None,
        1e-5,
        z=torch.randn_like(x) if with_z else None,
        group_size=group_size,
        norm_before_gate=norm_before_gate,
        is_rms_norm=is_rms_norm,
    )
    (x, weight, bias, z), (mean, rstd) = fwd[:4], fwd[5:7]
    bwd = ln.layer_norm_bwd_args(
        torch.randn_like(x),
        x,
        weight,
        bias,
        1e-5,
        None if mean is None else mean.view(-1),
        rstd.view(-1),
        z=z,
        group_size=group_size,
        norm_before_gate=norm_before_gate,
        is_rms_norm=is_rms_norm,
    )
    return fwd, bwd


@pytest.mark.parametrize(("block_n", "warps"), [(16, 1), (256, 1), (512, 2), (1024, 4), (2048, 8), (32768, 8)])
def test_fwd_fallback_is_mamba_launch(block_n: int, warps: int) -> None:
    assert ln.fwd_fallback_config(block_n) == {"block_sizes": [1], "num_warps": warps}


def test_bwd_fallback_is_mamba_row_split_in_powers_of_two(monkeypatch: pytest.MonkeyPatch) -> None:
    # H200 (132 SMs), M=16384, 8 groups of 512: mamba-ssm runs 33 row groups of 497 rows; here 32 of 512.
    monkeypatch.setattr(ln, "_sm_count", lambda device: 132)
    assert ln.bwd_fallback_config(16384, 8, 512, torch.device("cuda")) == {"block_sizes": [512, 1], "num_warps": 2}
    for sm in (1, 132):
        monkeypatch.setattr(ln, "_sm_count", lambda device, sm=sm: sm)
        for m in (1, 7, 100, 16384):
            for ngroups in (1, 3, 8):
                for block_n in (64, 512, 4096):
                    config = ln.bwd_fallback_config(m, ngroups, block_n, torch.device("cpu"))
                    rows, step = config["block_sizes"]
                    mamba_groups = math.ceil(sm * math.ceil(4 / config["num_warps"]) / ngroups)
                    assert step == 1 and rows == triton.next_power_of_2(rows) and rows <= triton.next_power_of_2(m)
                    assert math.ceil(m / rows) <= mamba_groups


@pytest.mark.parametrize("variant", VARIANTS)
def test_fallbacks_generate_triton(variant: tuple) -> None:
    fwd, bwd = _args(variant)
    rows, ngroups, _, *_ = variant
    configs = (ln.fwd_fallback_config(fwd[9]), ln.bwd_fallback_config(rows, ngroups, bwd[11], torch.device("cpu")))
    for kernel, args, config in zip(
        (ln.layer_norm_fwd_kernel, ln.layer_norm_bwd_kernel), (fwd, bwd), configs, strict=True
    ):
        assert "@triton.jit" in kernel.bind(args).to_triton_code(as_config(config))


@pytest.mark.cpu
def test_a_missing_part_runs_its_fallback_not_helions_default(monkeypatch: pytest.MonkeyPatch) -> None:
    launched: list[tuple[Any, Any]] = []
    real_launch = ln.launch

    def recording(kernel, args, config, **options):
        launched.append((kernel, config))
        return real_launch(kernel, args, config, **options)

    monkeypatch.setattr(ln, "launch", recording)
    x = torch.randn(6, 128, requires_grad=True)
    bwd, sums = ln.CONFIGS[0]["bwd"], ln.CONFIGS[0]["bwd_sum"]
    ln.rmsnorm_fn(x, torch.ones(128), None, group_size=64, config={"bwd": bwd}).sum().backward()
    ln.rmsnorm_fn(x, torch.ones(128), None, group_size=64, config={"bwd_sum": sums}).sum().backward()
    fwd_fallback = ln.fwd_fallback_config(64)
    bwd_fallback = ln.bwd_fallback_config(6, 2, 64, x.device)
    fk, bk, sk = ln.layer_norm_fwd_kernel, ln.layer_norm_bwd_kernel, ln.partials_sum_kernel
    assert launched == [
        (fk, fwd_fallback),
        (bk, bwd),
        (sk, ln.SUM_FALLBACK),
        (fk, fwd_fallback),
        (bk, bwd_fallback),
        (sk, sums),
    ]


def test_tuning_grid_covers_every_kernel_bwd_rows_fastest() -> None:
    inputs = {"x": torch.empty(16, 4096, dtype=torch.bfloat16), "group_size": 512}
    first = ln.tuning_configs(inputs, 8)
    assert len(first) == 8 and len({repr(c) for c in first}) == 8
    assert all(set(c) == set(ln.PHASES) and c["bwd_sum"] == ln.SUM_FALLBACK for c in first)
    # The first 8 differ only in the backward's rows per row group; their forward is the fallback.
    assert all(c["fwd"] == ln.fwd_fallback_config(512) for c in first)
    assert len({c["bwd"]["block_sizes"][0] for c in first}) == 8
    assert len({(c["bwd"]["block_sizes"][1], c["bwd"]["num_warps"]) for c in first}) == 1
    grid = ln.tuning_configs(inputs, 10_000)
    assert len({repr(c) for c in grid}) == len(grid)
    assert {c["fwd"]["block_sizes"][0] for c in grid} == {1, 2, 4}
    assert {c["fwd"]["num_warps"] for c in grid} == {1, 2, 4}
    assert [c["fwd"]["block_sizes"][0] for c in grid[:24:8]] == [1, 2, 4]


def test_tuning_configs_generate_triton() -> None:
    fwd, bwd = _args(VARIANTS[0])
    grid = ln.tuning_configs({"x": fwd[0], "group_size": VARIANTS[0][2]}, 10_000)
    bound_fwd, bound_bwd = ln.layer_norm_fwd_kernel.bind(fwd), ln.layer_norm_bwd_kernel.bind(bwd)
    for config in {repr(c["fwd"]): c["fwd"] for c in grid}.values():
        assert "@triton.jit" in bound_fwd.to_triton_code(as_config(config))
    for config in grid[:8]:
        assert "@triton.jit" in bound_bwd.to_triton_code(as_config(config["bwd"]))


@pytest.mark.cpu
@pytest.mark.parametrize("rows", [1, 5, 130])
@pytest.mark.parametrize("config", [None, *(c["bwd_sum"] for c in ln.CONFIGS)], ids=["fallback", "c0", "c1"])
def test_partial_sums_add_every_row_group_once(rows: int, config: dict[str, Any] | None) -> None:
    """The partial sums kernel adds each row group once: one row group (a size-1 dimension, whose index Helion 1.5
    drops), a ragged last step, and more row groups than a step."""
    partials = torch.randn(2, rows, 40, dtype=torch.float32)
    out = torch.empty(2, 40, dtype=torch.float32)
    ln.launch(ln.partials_sum_kernel, (partials, out), ln.SUM_FALLBACK if config is None else config)
    torch.testing.assert_close(out, partials.sum(1), rtol=1e-6, atol=1e-5)
