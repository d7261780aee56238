"""The long profile (issue 18) on CPU: the problems' offset arithmetic and memory estimate, the engine's choice of
the segmented oracle for problems flagged long (checked with small problems forced through it), and the one-line
refusals (the long profile on CPU, a segment off the chunk grid)."""

from __future__ import annotations

import contextlib
import dataclasses
import io
from pathlib import Path
from typing import Any

import pytest
import torch

import ops.chunk_state
import ops.ssd_combined
from ops import layernorm_gated, long
from parity import compare, profiles, tolerances
from parity.cli import main
from parity.errors import ParityError
from parity.runner import run_problem
from parity.spec import Impl
from parity.strategies import plan
from reference.layernorm_gated import layernorm_fn
from reference.ssd_combined import mamba_chunk_scan_combined as whole

pytestmark = pytest.mark.cpu  # the engine and the CLI run in this process, configured for the CPU

SPEC = ops.ssd_combined.SPEC
SMALL = {
    "batch": 2,
    "seqlen": 37,
    "chunk_size": 8,
    "nheads": 4,
    "ngroups": 2,
    "headdim": 4,
    "dstate": 8,
    "D": "hp",
    "z": True,
    "dt_bias": True,
    "dt_softplus": True,
    "initial_states": True,
    "nseq": 2,
}


@pytest.mark.parametrize("axis", sorted(long.SSD_LONG))
def test_each_long_problem_crosses_its_axis_and_fits(axis: str) -> None:
    problem = long.long_ssd()[axis]
    SPEC.validate(problem, [torch.bfloat16])
    crossed = long.ssd_crossings(problem)
    assert crossed.get(axis), f"{axis}: no tensor crosses 2^31 along it: {crossed}"
    assert "head" not in crossed  # the docstring's claim: out of an H200's reach
    assert problem["segment"] % problem["chunk_size"] == 0
    peak = long.ssd_memory(problem)["peak"]
    assert peak <= long.H200_BYTES
    assert f"{problem['segment']}    {peak / 1e9:.1f}" in str(long.__doc__)  # the docstring's table is current


def test_offset_arithmetic() -> None:
    """Terms are (size - 1) * stride of a contiguous tensor; one element past 2^31 - 1 crosses, 2^31 - 1 does not."""
    assert long.axis_terms((("a", 3), ("b", 5), ("c", 7))) == {"c": 6, "b": 28, "a": 70}
    assert long.crossings({"t": (("row", 2), ("col", 2**31 - 1))}) == {}
    assert long.crossings({"t": (("row", 2), ("col", 2**31 + 1))}) == {"row": ["t"], "col": ["t"]}
    norm = long.long_norm()
    assert long.norm_crossings(norm) == {"row": ["x"]}
    layernorm_gated.SPEC.validate(norm, [torch.bfloat16])
    assert long.norm_memory(norm) <= long.H200_BYTES
    assert f"{norm['segment']}    {long.norm_memory(norm) / 1e9:.1f}" in str(long.__doc__)
    impl, wide = layernorm_gated.SPEC.oracle(norm)
    assert impl.name == "row-blocked-fp64" and wide == torch.float32


def test_the_long_profile_pins_the_long_problems_and_generates_none() -> None:
    """Under ``long``, ssd_combined's problems are its pinned ones, its training problem and the long ones; an op
    without long problems (chunk_state) gets no generated problem either."""
    profile = profiles.PROFILES["long"]
    found = [p for p, _ in plan(SPEC, profile, "cuda")]
    expected = [*SPEC.training_problems, *SPEC.examples, *long.long_ssd().values()]
    assert found == [dict(p) for p in expected]
    norm = layernorm_gated.SPEC
    found = [p for p, _ in plan(norm, profile, "cuda")]
    assert found == [dict(p) for p in (*norm.training_problems, *norm.examples, long.long_norm())]
    chunk_state = ops.chunk_state.SPEC
    assert len(plan(chunk_state, profile, "cuda")) == len(chunk_state.training_problems) + len(chunk_state.examples)


def test_the_long_profile_on_cpu_is_one_error_line() -> None:
    with pytest.raises(ParityError, match=r"^profile 'long' runs on cuda only .* this process runs on cpu"):
        profiles.get_profile("long")
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
        code = main(["check", "--op", "ssd_combined", "--profile", "long", "--device", "cpu"])
    lines = stderr.getvalue().strip().splitlines()
    assert code == 2 and len(lines) == 1 and "profile 'long' runs on cuda only" in lines[0], stderr.getvalue()


def test_a_segment_off_the_chunk_grid_is_one_error_line() -> None:
    with pytest.raises(ParityError, match=r"^ssd_combined: problem field 'segment' \(12\) must be a multiple"):
        SPEC.validate({**SMALL, "segment": 12})


FP64_BOUNDS = tolerances.Tolerances(
    Path("fp64"), {"defaults": {"float64": {"factor": 2.0, "atol": 1e-12, "rtol": 0.0}}}
)


def _fp64_whole(**kwargs: Any) -> Any:
    """The whole-sequence reference on fp64 copies: a candidate the segmented oracle must agree with to 1e-12."""
    return whole(
        **{k: v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v for k, v in kwargs.items()}
    )


def _fp64_norm(**kwargs: Any) -> Any:
    return layernorm_fn(**{k: v.double() if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()})


def test_the_engine_judges_a_long_flagged_problem_by_the_segmented_oracle(monkeypatch: pytest.MonkeyPatch) -> None:
    """A small problem with ``segment`` runs through the segmented oracle (three segments of 16, the last ragged),
    and the fp64 whole-sequence reference judged against it agrees to 1e-12 (in float64 the sequence inputs and
    initial states are fp64 leaves; A, D and dt_bias stay fp32 parameters, their gradients rounded to fp32)."""
    calls: list[int] = []
    real = ops.ssd_combined.segmented

    def spy(segment_len: int) -> Any:
        calls.append(segment_len)
        return real(segment_len)

    monkeypatch.setattr(ops.ssd_combined, "segmented", spy)
    problem = {**SMALL, "segment": 16}
    assert SPEC.oracle(SMALL) == (SPEC.reference, torch.float64)
    alone = dataclasses.replace(SPEC, baseline=None)  # no Triton baseline: the interpreter would take seconds
    (case,) = run_problem(
        alone, [Impl("fp64-whole", _fp64_whole)], problem, torch.float64, 0, "cpu", FP64_BOUNDS, poison=()
    )
    assert calls == [16]
    assert not case.errors
    assert [q.name for q in case.quantities] == list(SPEC.compared_names())
    for q in case.quantities:
        rel = 1e-6 if q.name in ("grad.A", "grad.D", "grad.dt_bias") else 1e-12
        assert q.candidate.max_abs <= rel * max(1.0, q.candidate.oracle_max_abs), q.describe()


def test_the_engine_judges_a_flagged_norm_by_row_blocks() -> None:
    """The gated norm's small problem with ``segment`` (rows per block) against its fp64 whole-tensor reference."""
    problem = {"rows": 9, "ngroups": 2, "group_size": 8, "z": True, "bias": True, "segment": 4}
    assert layernorm_gated.SPEC.oracle(problem)[0].name == "row-blocked-fp64"
    alone = dataclasses.replace(layernorm_gated.SPEC, baseline=None)
    (case,) = run_problem(
        alone, [Impl("fp64-whole", _fp64_norm)], problem, torch.float64, 0, "cpu", FP64_BOUNDS, poison=()
    )
    assert not case.errors and [q.name for q in case.quantities] == [
        "out",
        "grad.x",
        "grad.weight",
        "grad.bias",
        "grad.z",
    ]
    for q in case.quantities:
        assert q.candidate.max_abs <= 1e-12 * max(1.0, q.candidate.oracle_max_abs), q.describe()


def test_blockwise_comparison_equals_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    """parity.compare's blocks (the long problems' comparisons) give the statistics of one whole-tensor pass: the
    first worst element, NaN and Inf counts, norms."""
    g = torch.Generator().manual_seed(0)
    oracle = torch.randn(5, 9, 7, generator=g, dtype=torch.float64)
    actual = (oracle + 1e-3 * torch.randn(5, 9, 7, generator=g, dtype=torch.float64)).float()
    actual[1, 2, 3], actual[4, 0, 0], oracle[2, 2, 2] = float("nan"), float("inf"), float("inf")
    actual[3, 1, 1] = actual[0, 5, 5] = 0.0  # two finite errors below the infinite ones
    whole_pass = compare.error_stats(actual, oracle)
    monkeypatch.setattr(compare, "BLOCK", 10)
    blocked = compare.error_stats(actual, oracle)
    assert blocked.worst_index == whole_pass.worst_index == (1, 2, 3)
    assert (blocked.nan, blocked.inf, blocked.max_abs) == (whole_pass.nan, whole_pass.inf, whole_pass.max_abs)
    assert blocked.oracle_max_abs == whole_pass.oracle_max_abs
    finite, clean = actual.nan_to_num(0.0, 0.0, 0.0), oracle.nan_to_num(0.0, 0.0, 0.0)
    monkeypatch.setattr(compare, "BLOCK", 1 << 26)
    one = compare.error_stats(finite, clean)
    monkeypatch.setattr(compare, "BLOCK", 10)
    many = compare.error_stats(finite, clean)
    assert (many.worst_index, many.max_abs, many.max_rel) == (one.worst_index, one.max_abs, one.max_rel)
    assert many.rel_l2 == pytest.approx(one.rel_l2, rel=1e-12) and many.max_abs > 0


def test_long_problems_get_fp32_storage() -> None:
    impl, wide = SPEC.oracle(long.long_ssd()["sequence"])
    assert impl.name == "segmented-fp64" and wide == torch.float32
    assert SPEC.oracle({**SMALL, "segment": 16})[1] == torch.float64
