"""Codegen checks of the Helion kernel ports that need no numbers.

One table entry per Helion kernel. For every case the parity tests draw (shapes, dtypes, with and without the
optional inputs), the default config and every config the kernel module ships generate Triton; fp32 products
are ``ieee``, never TF32; kernels whose scan/cumsum axis must stay whole inside a program tune only the block
sizes pinned here (a scan split across tiles is silently wrong in Helion). The shipped configs differ in their
block sizes. A few kernel-specific checks (gated norm) follow the table.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import product
from typing import Any, NamedTuple

import helion
import helion._compiler.autotuner_heuristics.triton as heuristics
import pytest
import torch
import triton
from helion.runtime.kernel import BoundKernel

from kernels import (
    bmm_chunk,
    chunk_cumsum,
    chunk_scan,
    chunk_state,
    layernorm_gated,
    ssd_combined,
    ssd_combined_bwd,
    state_passing,
)
from kernels.launch import as_config


class Case(NamedTuple):
    """One binding of a kernel: a shape tuple (its layout is the entry's), an input dtype, optional inputs on/off."""

    shape: tuple[int, ...]
    dtype: torch.dtype = torch.float32
    options: bool = False


@dataclass(frozen=True)
class Entry:
    """A Helion kernel, how to build its args for a case, the cases, and the configs its module ships."""

    name: str
    kernel: helion.Kernel
    args: Callable[[Case], tuple[Any, ...]]
    cases: Sequence[Case]
    configs: Sequence[Mapping[str, Any]]
    dots: int | None = None  # tl.dot lines in the fp32 code, all of them ieee; None: the kernel has no dots
    block_sizes: int | None = None  # tunable block sizes the kernel must have; None: not pinned

    def bind(self, case: Case) -> BoundKernel:
        """The kernel bound to the case's args."""
        return self.kernel.bind(self.args(case))


def _grid(
    shapes: Sequence[tuple[int, ...]],
    dtypes: Sequence[torch.dtype] = (torch.float32,),
    options: Sequence[bool] = (False, True),
) -> list[Case]:
    """Every combination of shape, dtype and options."""
    return [Case(shape, dtype, opt) for shape, dtype, opt in product(shapes, dtypes, options)]


def _seq_idx(batch: int, seqlen: int) -> torch.Tensor:
    """Two sequences per batch row, split in the middle."""
    seq_idx = torch.zeros(batch, seqlen, dtype=torch.int32)
    seq_idx[:, seqlen // 2 :] = 1
    return seq_idx


BOTH_DTYPES = (torch.float32, torch.bfloat16)

# (batch, seqlen, nheads, chunk_size): ragged last chunk, shorter than a chunk, one token, whole chunks,
# a chunk size that is not a power of two.
CUMSUM_SHAPES = [(2, 37, 4, 16), (1, 5, 2, 16), (1, 1, 2, 16), (2, 64, 4, 32), (2, 30, 3, 12)]


def _chunk_cumsum_args(case: Case) -> tuple[Any, ...]:
    batch, seqlen, nheads, chunk_size = case.shape
    bias = case.options
    return chunk_cumsum.chunk_cumsum_args(
        torch.randn(batch, seqlen, nheads),
        -torch.rand(nheads),
        chunk_size,
        dt_bias=torch.randn(nheads) if bias else None,
        dt_softplus=bias,
        dt_limit=(0.001, 0.1) if bias else (0.0, float("inf")),
    )


# (batch, seqlen, ngroups or 0 for (b, L, k) inputs, k, chunk_size)
BMM_SHAPES = [(2, 37, 2, 16, 16), (1, 5, 1, 16, 16), (1, 1, 2, 16, 16), (2, 70, 0, 24, 32)]


def _bmm_chunk_args(case: Case) -> tuple[Any, ...]:
    batch, seqlen, ngroups, k, chunk_size = case.shape
    dims = (batch, seqlen, ngroups, k) if ngroups else (batch, seqlen, k)
    return bmm_chunk.bmm_chunk_args(
        torch.randn(dims).to(case.dtype),
        torch.randn(dims).to(case.dtype),
        chunk_size,
        seq_idx=_seq_idx(batch, seqlen) if case.options else None,
        causal=case.options,
        output_dtype=torch.float32,
    )


# (batch, seqlen, nheads, ngroups, headdim, dstate, chunk_size), shared by chunk_state and chunk_scan
SSD_SHAPES = [(2, 37, 4, 2, 8, 16, 16), (1, 5, 2, 1, 8, 16, 16), (1, 1, 2, 2, 16, 16, 16), (2, 70, 4, 2, 16, 16, 32)]


def _chunk_state_inputs(case: Case) -> dict[str, torch.Tensor]:
    batch, seqlen, nheads, ngroups, headdim, dstate, chunk_size = case.shape
    nchunks = -(-seqlen // chunk_size)
    return {
        "B": torch.randn(batch, seqlen, ngroups, dstate).to(case.dtype),
        "x": torch.randn(batch, seqlen, nheads, headdim).to(case.dtype),
        "dt": torch.rand(batch, nheads, nchunks, chunk_size),
        "dA_cumsum": -torch.rand(batch, nheads, nchunks, chunk_size).cumsum(-1),
    }


def _chunk_state_args(case: Case) -> tuple[Any, ...]:
    seq_idx = _seq_idx(*case.shape[:2]) if case.options else None
    return chunk_state.chunk_state_args(**_chunk_state_inputs(case), seq_idx=seq_idx)


def _chunk_state_varlen_args(case: Case) -> tuple[Any, ...]:
    # The first batch row as one packed batch of two sequences.
    _, seqlen, nheads, _, headdim, dstate, _ = case.shape
    inputs = {k: v[0] for k, v in _chunk_state_inputs(case).items()}
    chunk_states = torch.randn(inputs["dt"].shape[1], nheads, headdim, dstate).to(case.dtype)
    cu_seqlens = torch.tensor([0, seqlen // 2, seqlen], dtype=torch.int32)
    return chunk_state.chunk_state_varlen_args(**inputs, cu_seqlens=cu_seqlens, chunk_states=chunk_states)


def _chunk_scan_args(case: Case) -> tuple[Any, ...]:
    batch, seqlen, nheads, ngroups, headdim, dstate, chunk_size = case.shape
    nchunks = -(-seqlen // chunk_size)
    x = torch.randn(batch, seqlen, nheads, headdim).to(case.dtype)
    return chunk_scan.chunk_scan_args(
        torch.randn(batch, nchunks, ngroups, chunk_size, chunk_size),
        x,
        torch.rand(batch, nheads, nchunks, chunk_size),
        -torch.rand(batch, nheads, nchunks, chunk_size).cumsum(-1),
        torch.randn(batch, seqlen, ngroups, dstate).to(case.dtype),
        torch.randn(batch, nchunks, nheads, headdim, dstate).to(case.dtype),
        D=torch.randn(nheads, headdim) if case.options else torch.randn(nheads),
        z=torch.randn_like(x) if case.options else None,
        seq_idx=_seq_idx(batch, seqlen) if case.options else None,
    )


# (batch, seqlen, nheads, dim, chunk_size): 3 chunks (ragged), 1 chunk (whose size-1 axes Helion specializes),
# 1 token, 4 whole chunks.
STATE_PASSING_SHAPES = [(2, 37, 4, 128, 16), (1, 5, 2, 128, 16), (1, 1, 2, 256, 16), (2, 128, 2, 40, 32)]


def _state_passing_args(case: Case) -> tuple[Any, ...]:
    batch, seqlen, nheads, dim, chunk_size = case.shape
    nchunks = -(-seqlen // chunk_size)
    return state_passing.state_passing_args(
        torch.randn(batch, nchunks, nheads, dim),
        -torch.rand(batch, nheads, nchunks),
        initial_states=torch.randn(batch, nheads, dim) if case.options else None,
        seq_idx=_seq_idx(batch, seqlen) if case.options else None,
        chunk_size=chunk_size,
        out_dtype=torch.float16,
    )


# (rows, ngroups, group_size, z, norm_before_gate, is_rms_norm, bias): one row, group sizes that are not powers
# of two, z before/after the norm, bias, RMS/LayerNorm; the last (40 rows) pins the tunable block sizes.
NORM_VARIANTS = [
    (7, 2, 48, True, False, True, False),
    (5, 3, 16, True, True, False, True),
    (1, 2, 96, True, True, True, False),
    (37, 1, 320, False, True, False, True),
    (40, 2, 96, True, False, True, False),
]
NORM_CASES = [Case(variant, torch.float16) for variant in NORM_VARIANTS]


def _layer_norm_fwd_args(case: Case) -> tuple[Any, ...]:
    rows, ngroups, group_size, with_z, norm_before_gate, is_rms_norm, with_bias = case.shape
    n = ngroups * group_size
    return layernorm_gated.layer_norm_fwd_args(
        torch.randn(rows, n).to(case.dtype),
        torch.ones(n, dtype=case.dtype),
        torch.zeros(n, dtype=case.dtype) if with_bias else None,
        1e-5,
        z=torch.randn(rows, n).to(case.dtype) if with_z else None,
        group_size=group_size,
        norm_before_gate=norm_before_gate,
        is_rms_norm=is_rms_norm,
    )


SUM_CASES = [Case((1, 7, 40), torch.float16), Case((2, 1, 17)), Case((2, 130, 64), torch.bfloat16)]
"""The backward's partial sums: (1 or 2 sums, row groups, columns), the output dtype (one row group included)."""


def _partials_sum_args(case: Case) -> tuple[Any, ...]:
    k, rows, n = case.shape
    return torch.randn(k, rows, n), torch.empty(k, n, dtype=case.dtype)


def _layer_norm_bwd_args(case: Case) -> tuple[Any, ...]:
    # The backward takes the forward's inputs and its mean and rstd buffers.
    _, _, group_size, _, norm_before_gate, is_rms_norm, _ = case.shape
    fwd = _layer_norm_fwd_args(case)
    (x, weight, bias, z), (mean, rstd) = fwd[:4], fwd[5:7]
    return layernorm_gated.layer_norm_bwd_args(
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
        recompute_output=True,
    )


def _ssd_bwd_args(case: Case) -> dict[str, tuple[Any, ...]]:
    """The arguments ssd_combined_bwd passes to each backward kernel, for one SSD shape."""
    batch, seqlen, nheads, ngroups, headdim, dstate, chunk_size = case.shape
    nchunks = -(-seqlen // chunk_size)
    x = torch.randn(batch, seqlen, nheads, headdim).to(case.dtype)
    B, C = (torch.randn(batch, seqlen, ngroups, dstate).to(case.dtype) for _ in range(2))
    dt = torch.rand(batch, nheads, nchunks, chunk_size)
    dA = -dt.cumsum(-1)
    cb = torch.randn(batch, nchunks, ngroups, chunk_size, chunk_size)
    states = torch.randn(batch, nchunks, nheads, headdim, dstate)
    seq_idx = _seq_idx(batch, seqlen) if case.options else None
    D = torch.randn(nheads, headdim) if case.options else torch.randn(nheads)
    return {
        "bwd_states": (
            x,
            C,
            dA,
            states,
            torch.randn(batch, nheads, headdim, dstate) if case.options else None,
            seq_idx,
        ),
        "bwd_dx": (
            x,
            x,
            dt,
            dA,
            B,
            cb,
            states,
            D,
            seq_idx,
            torch.zeros_like(dt),
            torch.zeros_like(dt),
            torch.zeros(batch, nchunks, nheads, headdim),
        ),
        "bwd_dcb": (x, x, dt, dA, cb, seq_idx, torch.zeros_like(dA)),
        "bwd_dc": (x, states, dA, C, B, cb, seq_idx, torch.zeros_like(dA)),
        "bwd_db": (x, dt, dA, states, C, cb, seq_idx),
        "bwd_ddt": (
            *(torch.randn(batch, nheads, nchunks, chunk_size, dtype=torch.float64) for _ in range(2)),
            torch.randn(batch, nheads, nchunks, 2, dtype=torch.float64),
            *(torch.randn(batch, nheads, nchunks, chunk_size, dtype=torch.float64) for _ in range(2)),
            dt,
            -torch.rand(nheads),
            torch.randn(batch, seqlen, nheads).to(case.dtype),
            torch.randn(nheads) if case.options else None,
            0.001 if case.options else 0.0,
            0.1 if case.options else float("inf"),
            triton.next_power_of_2(chunk_size),
            case.options,
        ),
    }


# The backward kernels are slow to generate: a ragged and a two-chunk shape, each dtype once with and once
# without the optional inputs.
BWD_CASES = [
    Case(SSD_SHAPES[0], torch.float32, True),
    Case(SSD_SHAPES[0], torch.bfloat16, False),
    Case(SSD_SHAPES[3], torch.float32, False),
    Case(SSD_SHAPES[3], torch.bfloat16, True),
]


def _bwd_entry(key: str, kernel: helion.Kernel, dots: int | None = None, block_sizes: int | None = None) -> Entry:
    return Entry(
        key,
        kernel,
        lambda case: _ssd_bwd_args(case)[key],
        BWD_CASES,
        [c[key] for c in ssd_combined_bwd.CONFIGS],
        dots=dots,
        block_sizes=block_sizes,
    )


ENTRIES = [
    # The chunk axis is an hl.arange inside the program, never a tile: one tunable block size (heads).
    Entry(
        "chunk_cumsum",
        chunk_cumsum.chunk_cumsum_kernel,
        _chunk_cumsum_args,
        _grid(CUMSUM_SHAPES),
        chunk_cumsum.CONFIGS,
        block_sizes=1,
    ),
    Entry(
        "bmm_chunk",
        bmm_chunk.bmm_chunk_kernel,
        _bmm_chunk_args,
        _grid(BMM_SHAPES, BOTH_DTYPES),
        bmm_chunk.CONFIGS,
        dots=1,
    ),
    Entry(
        "chunk_state",
        chunk_state.chunk_state_kernel,
        _chunk_state_args,
        _grid(SSD_SHAPES, BOTH_DTYPES),
        chunk_state.CONFIGS,
        dots=1,
    ),
    Entry(
        "chunk_state_varlen",
        chunk_state.chunk_state_varlen_kernel,
        _chunk_state_varlen_args,
        _grid(SSD_SHAPES, BOTH_DTYPES, options=(False,)),
        chunk_state.VARLEN_CONFIGS,
        dots=1,
    ),
    # The chunk axis is an hl.arange inside the program, never a tile: one tunable block size (dim).
    Entry(
        "state_passing",
        state_passing.state_passing_kernel,
        _state_passing_args,
        _grid(STATE_PASSING_SHAPES),
        state_passing.CONFIGS,
        block_sizes=1,
    ),
    Entry(
        "chunk_scan",
        chunk_scan.chunk_scan_kernel,
        _chunk_scan_args,
        _grid(SSD_SHAPES, BOTH_DTYPES),
        chunk_scan.CONFIGS,
        dots=2,
    ),
    # The group's columns are an hl.arange inside the program, never a tile. Forward: rows per program.
    Entry(
        "layer_norm_fwd",
        layernorm_gated.layer_norm_fwd_kernel,
        _layer_norm_fwd_args,
        NORM_CASES,
        [c["fwd"] for c in layernorm_gated.CONFIGS],
        block_sizes=1,
    ),
    # Backward: rows per row group (the nrow_groups knob), rows at a time.
    Entry(
        "layer_norm_bwd",
        layernorm_gated.layer_norm_bwd_kernel,
        _layer_norm_bwd_args,
        NORM_CASES,
        [c["bwd"] for c in layernorm_gated.CONFIGS],
        block_sizes=2,
    ),
    # The partial sums: columns per program, row groups per step.
    Entry(
        "partials_sum",
        layernorm_gated.partials_sum_kernel,
        _partials_sum_args,
        SUM_CASES,
        [c["bwd_sum"] for c in layernorm_gated.CONFIGS],
        block_sizes=2,
    ),
    # The SSD backward.
    _bwd_entry("bwd_states", ssd_combined_bwd.states_bwd_kernel, dots=1),
    _bwd_entry("bwd_dx", ssd_combined_bwd.dx_kernel, dots=2),
    _bwd_entry("bwd_dcb", ssd_combined_bwd.dcb_kernel, dots=1),
    _bwd_entry("bwd_dc", ssd_combined_bwd.dc_kernel, dots=2),
    _bwd_entry("bwd_db", ssd_combined_bwd.db_kernel, dots=2),
    # The chunk is an hl.arange inside the program, never a tile: one tunable block size (heads).
    _bwd_entry("bwd_ddt", ssd_combined_bwd.ddt_kernel, block_sizes=1),
]


def _case_id(case: Case) -> str:
    shape = "x".join(str(int(v)) for v in case.shape)
    return f"{shape}-{str(case.dtype).removeprefix('torch.')}-{'options' if case.options else 'plain'}"


@pytest.mark.parametrize(
    ("entry", "case"),
    [pytest.param(entry, case, id=f"{entry.name}-{_case_id(case)}") for entry in ENTRIES for case in entry.cases],
)
def test_every_config_generates_triton(entry: Entry, case: Case) -> None:
    """Default and shipped configs generate Triton; fp32 dots are ieee; the tunable block sizes are as pinned."""
    bound = entry.bind(case)
    if entry.block_sizes is not None:
        assert len(bound.config_spec.block_sizes) == entry.block_sizes
    for config in [bound.config_spec.default_config(), *map(as_config, entry.configs)]:
        code = bound.to_triton_code(config)
        assert "@triton.jit" in code, config
        if entry.dots is not None and case.dtype == torch.float32:
            dots = [line for line in code.splitlines() if "tl.dot(" in line]
            assert len(dots) == entry.dots and all("input_precision='ieee'" in line for line in dots), (config, dots)


@pytest.mark.parametrize("entry", [entry for entry in ENTRIES if entry.dots is not None], ids=lambda entry: entry.name)
def test_dot_kernels_get_the_sm90_matmul_default(entry: Entry, monkeypatch: pytest.MonkeyPatch) -> None:
    """Helion sees each of the kernel's dots (one matmul fact per dot, with its extents) and, on sm90, seeds the
    kernel's default config from them. A dot called from a helper function is recorded once per trace, without
    extents, and the default falls back to 16x16x16 tiles: 3.6x slower at the training shape (h200-run25)."""
    monkeypatch.setattr(heuristics, "matches_hardware", lambda _env, targets: ("cuda", "sm90") in tuple(targets))
    monkeypatch.setattr(helion.runtime, "get_num_sm", lambda *_args, **_options: 132)
    case = next(case for case in entry.cases if case.dtype == torch.bfloat16)
    fresh = helion.kernel(entry.kernel.fn, settings=entry.kernel.settings.copy())  # bound here, not from the cache
    spec = fresh.bind(entry.args(case)).config_spec
    assert len(spec.matmul_facts) == entry.dots, spec.matmul_facts
    assert all(None not in (f.static_m, f.static_n, f.static_k) for f in spec.matmul_facts), spec.matmul_facts
    assert spec.autotuner_heuristics, "no Helion heuristic seeded the default config"


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda entry: entry.name)
def test_configs_differ_in_block_sizes(entry: Entry) -> None:
    """At least two shipped configs, no two with the same block sizes."""
    assert len(entry.configs) >= 2
    assert len({tuple(c["block_sizes"]) for c in entry.configs}) == len(entry.configs)


@pytest.mark.parametrize(
    "kernel",
    [layernorm_gated.layer_norm_fwd_kernel, layernorm_gated.layer_norm_bwd_kernel, layernorm_gated.partials_sum_kernel],
    ids=["fwd", "bwd", "bwd_sum"],
)
def test_no_mean_in_norm_kernels(kernel: helion.Kernel) -> None:
    """No ``.mean`` in the gated-norm kernels: Helion 1.5 can divide it by the padded block size."""
    assert ".mean(" not in inspect.getsource(kernel.fn)


def test_flat_norm_config_is_rejected() -> None:
    """A gated-norm config must be split into fwd and bwd parts."""
    x = torch.randn(2, 16)
    with pytest.raises(ValueError, match="fwd"):
        layernorm_gated.layernorm_fn(x, torch.ones(16), None, config={"block_sizes": [4]})


GPU_SHAPE = Case((2, 256, 4, 2, 64, 128, 128), torch.bfloat16, True)
"""A Nemotron-like SSD shape (headdim 64, dstate 128, chunk 128), small enough to bind on CPU."""


def test_ssd_tuning_configs_generate_triton() -> None:
    """Every kernel config of every ``parity tune`` candidate of the combined op generates Triton at a
    Nemotron-like shape (a malformed candidate would otherwise surface only on the GPU)."""
    batch, seqlen, nheads, ngroups, headdim, dstate, chunk_size = GPU_SHAPE.shape
    x = torch.randn(batch, seqlen, nheads, headdim, dtype=GPU_SHAPE.dtype)
    B = torch.randn(batch, seqlen, ngroups, dstate, dtype=GPU_SHAPE.dtype)
    candidates = ssd_combined.tuning_configs({"x": x, "B": B}, 8)
    assert len(candidates) == 8 and len({str(c) for c in candidates}) == 8
    forward = {
        "chunk_state": (chunk_state.chunk_state_kernel, _chunk_state_args),
        "chunk_scan": (chunk_scan.chunk_scan_kernel, _chunk_scan_args),
        "state_passing": (state_passing.state_passing_kernel, _state_passing_args),
        "bmm_chunk": (bmm_chunk.bmm_chunk_kernel, _bmm_chunk_args),
    }
    shapes = {
        "state_passing": (batch, seqlen, nheads, headdim * dstate, chunk_size),
        "bmm_chunk": (batch, seqlen, ngroups, dstate, chunk_size),
    }
    bound = {
        key: kernel.bind(args(Case(shapes.get(key, GPU_SHAPE.shape), GPU_SHAPE.dtype, True)))
        for key, (kernel, args) in forward.items()
    }
    bwd = _ssd_bwd_args(GPU_SHAPE)
    bound.update({e.name: e.kernel.bind(bwd[e.name]) for e in ENTRIES if e.name in bwd})
    for candidate in candidates:
        assert set(candidate) <= set(ssd_combined.OPS)
        for key, config in candidate.items():
            assert "@triton.jit" in bound[key].to_triton_code(as_config(config)), (key, config)


def test_the_kernel_profile_names_every_mixer_kernel_as_its_code_is_named() -> None:
    """bench/kernel_times.py pairs kernels by the names the profiler shows: each Helion kernel the mixer launches
    under its generated Triton function's name, each mamba-ssm kernel under a name its source defines."""
    import importlib.util
    import re
    from pathlib import Path

    import bench_scripts

    kt = bench_scripts.load("kernel_times")
    helion_named = {name for helion_names, _ in kt.COUNTERPARTS.values() for name in helion_names}
    generated = set()
    for entry in ENTRIES:
        if entry.name == "chunk_state_varlen":  # runs only with cu_seqlens, never in the mixer
            continue
        bound = entry.bind(entry.cases[0])
        generated.update(
            re.findall(r"^def (_helion_\w+)\(", bound.to_triton_code(bound.config_spec.default_config()), re.M)
        )
    assert helion_named == generated
    spec = importlib.util.find_spec("mamba_ssm")  # its __init__ is not run (it needs the CUDA extensions)
    assert spec is not None and spec.origin is not None
    sources = "".join(p.read_text() for p in (Path(spec.origin).parent / "ops" / "triton").glob("*.py"))
    defined = set(re.findall(r"^def (_\w+_kernel)\(", sources, re.M))
    mamba_named = {name for _, mamba_names in kt.COUNTERPARTS.values() for name in mamba_names}
    assert mamba_named <= defined, mamba_named - defined
