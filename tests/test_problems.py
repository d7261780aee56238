"""Problems are validated against each op's declared schema before any work, and their value fields
(ops/ssd.py, ops/layernorm_gated.py) reach the inputs: every drawn problem is valid, every malformed one is a one-line
ParityError naming the field, and a problem without value fields keeps the inputs it always had."""

from __future__ import annotations

import dataclasses
import importlib
import math
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings

from ops import layernorm_gated as norm_op
from ops import ssd
from parity import registry
from parity.errors import ParityError
from parity.runner import run_problem
from parity.spec import OpSpec

SPECS = registry.load()
SSD_OPS = [name for name in sorted(SPECS) if name != "layernorm_gated"]
CPU = torch.device("cpu")


def _base(op: str) -> dict[str, Any]:
    """The op's first pinned example (every feature and value field it takes)."""
    return dict(SPECS[op].examples[0])


def _raises(op: str, problem: Any, field: str, dtypes: list[torch.dtype] | None = None) -> str:
    with pytest.raises(ParityError) as info:
        SPECS[op].validate(problem, dtypes)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{op}: ") and repr(field) in message, message
    return message


class _Missing:
    def __repr__(self) -> str:
        return "missing"


MISSING = _Missing()
"""A table value: leave the field out."""

# (field, value) for every SSD op: bad where the op takes the field, unknown where it does not
SSD_BAD: list[tuple[str, Any]] = [
    ("batch", True),  # a boolean is not a size
    ("batch", MISSING),
    ("seqlen", 0),
    ("chunk_size", 16.0),
    ("headdim", "8"),
    ("dstate", -16),
    ("nheads", 3),  # not a multiple of ngroups (2)
    ("x_scal", 1.0),  # a typo must not be ignored
    ("D", "hpp"),
    ("z", 1),
    ("dt_bias", "yes"),
    ("dt_softplus", None),
    ("initial_states", 0),
    ("dt_limit", [0.1]),
    ("dt_limit", [0.1, 0.001]),
    ("dt_limit", [0.1, 0.1]),
    ("dt_limit", [True, 1.0]),
    ("dt_limit", [-1.0, 1.0]),
    ("nseq", -1),
    ("nseq", 38),  # more sequences than tokens (seqlen 37)
    ("nseq", 1.5),
    ("dt_range", [5.0, 1.0]),
    ("dt_range", [0.0, 1.0]),
    ("dt_range", [1e-3, 100.0]),
    ("dt_range", [1e-3]),
    ("dt_range", 0.1),
    ("A_range", [-16.0, -1.0]),
    ("A_range", [1.0, float("nan")]),
    ("x_scale", 0.0),
    ("bc_scale", float("inf")),
    ("z_scale", True),
    ("state_scale", "1e2"),
]


@pytest.mark.parametrize("op", SSD_OPS)
@pytest.mark.parametrize(("field", "value"), SSD_BAD, ids=[f"{f}={v!r}" for f, v in SSD_BAD])
def test_a_malformed_ssd_problem_is_one_line_naming_the_field(op, field, value):
    problem = _base(op)
    assert problem["seqlen"] == 37 and problem["ngroups"] == 2
    if field in problem or field in ssd.SIZES or field == "x_scal":
        if value is MISSING:
            problem.pop(field)
        else:
            problem[field] = value
        _raises(op, problem, field)
    else:  # a field this op does not take is unknown to it, even with a good value
        problem[field] = value
        assert "unknown problem field" in _raises(op, problem, field)


def test_a_field_of_another_op_is_unknown():
    for op, field, value in (
        ("bmm_chunk", "dt_range", [1e-3, 1e-1]),
        ("chunk_cumsum", "x_scale", 1.0),
        ("chunk_state", "z", True),
        ("layernorm_gated", "dt_range", [1e-3, 1e-1]),
    ):
        _raises(op, {**_base(op), field: value}, field)


NORM_BAD: list[tuple[str, Any]] = [
    ("rows", True),
    ("rows", 0),
    ("ngroups", MISSING),
    ("group_size", 2.5),
    ("z", "true"),
    ("bias", 1),
    ("norm_before_gate", None),
    ("is_rms_norm", 0),
    ("x_range", [1e3, 1.0]),
    ("x_range", [0.0, 1.0]),
    ("x_range", [1.0, 1e9]),
    ("z_scale", -1.0),
    ("eps", 1e-6),  # not a problem field: eps is fixed
]


@pytest.mark.parametrize(("field", "value"), NORM_BAD, ids=[f"{f}={v!r}" for f, v in NORM_BAD])
def test_a_malformed_norm_problem_is_one_line_naming_the_field(field, value):
    problem = _base("layernorm_gated")
    if value is MISSING:
        problem.pop(field)
    else:
        problem[field] = value
    _raises("layernorm_gated", problem, field)


def test_not_an_object_is_a_usage_error():
    for problem in ([1, 2], "batch", None):
        with pytest.raises(ParityError, match="must be a JSON object"):
            SPECS["chunk_cumsum"].validate(problem)


def test_the_group_size_limit_is_the_kernels_own():
    """Beyond one 64 KiB block the Helion port and mamba-ssm refuse the group, so the schema refuses it (a usage
    error, not a parity FAIL) and accepts the limit: 16384 in fp32, 32768 in fp16/bf16."""
    from kernels import layernorm_gated as helion_norm
    from reference import mamba_triton

    assert helion_norm.MAX_FUSED_BYTES == norm_op.MAX_GROUP_BYTES
    spec = SPECS["layernorm_gated"]
    base = {"rows": 1, "ngroups": 1}
    for dtype, most in ((torch.float32, 16384), (torch.float16, 32768), (torch.bfloat16, 32768)):
        spec.validate({**base, "group_size": most}, [dtype])
        message = _raises("layernorm_gated", {**base, "group_size": most + 1}, "group_size", [dtype])
        assert str(most) in message
        x = torch.zeros(1, most + 1, dtype=dtype)
        w = torch.ones(most + 1, dtype=dtype)
        for fn in (helion_norm.layernorm_fn, mamba_triton.layernorm_fn):
            with pytest.raises(RuntimeError, match=r"64KB|65536 bytes"):
                fn(x, w, None, group_size=most + 1)
    # Without a dtype the problem must fit every dtype the op is checked in (fp32 is the tightest).
    _raises("layernorm_gated", {**base, "group_size": 16385}, "group_size")


def test_pinned_and_training_problems_are_valid():
    for spec in SPECS.values():
        for problem in (*spec.examples, *spec.training_problems):
            spec.validate(problem)


@pytest.mark.parametrize("profile", ["ci", "gpu"])
@pytest.mark.parametrize("op", sorted(SPECS))
def test_every_drawn_problem_is_valid(op, profile):
    """Whatever the profiles draw passes the op's schema in each of its dtypes, and its value fields stay within
    the fp16 magnitude budget."""
    spec = SPECS[op]
    seen: set[str] = set()

    @settings(max_examples=150, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(problem=spec.problems(profile))
    def check(problem):
        spec.validate(problem)
        seen.update(problem)
        if op in SSD_OPS:
            assert ssd.ssd_magnitude(problem) <= ssd.VALUES[profile].budget
        else:
            assert norm_op.magnitude(problem) <= norm_op.BUDGET

    check()
    values = importlib.import_module(f"ops.{op}").VALUES
    assert set(values) <= seen, "every value field of the op is drawn"


# ---------------------------------------------------------------------------------------------
# Value fields reach the inputs


def _same_inputs(a: dict[str, Any], b: dict[str, Any]) -> bool:
    if list(a) != list(b):
        return False
    return all(torch.equal(a[k], b[k]) if isinstance(a[k], torch.Tensor) else a[k] == b[k] for k in a)


@pytest.mark.parametrize("op", sorted(SPECS))
def test_default_value_fields_change_nothing(op):
    """A problem without value fields (as every problem was before they existed) gets exactly the inputs of one
    that spells out the defaults, which is what the profiles draw first and shrink to."""
    defaults = {
        "dt_range": [1e-3, 1e-1],
        "A_range": [1.0, 16.0],
        "x_scale": 1.0,
        "bc_scale": 1.0,
        "z_scale": 1.0,
        "state_scale": 1.0,
        "x_range": [1.0, 1.0],
    }
    spec = SPECS[op]
    values = importlib.import_module(f"ops.{op}").VALUES
    bare = {k: v for k, v in spec.examples[0].items() if k not in defaults}
    explicit = {**bare, **{k: defaults[k] for k in values}}
    for dtype in (torch.float32, torch.float16):
        assert _same_inputs(spec.make_inputs(bare, dtype, 3, CPU), spec.make_inputs(explicit, dtype, 3, CPU))


def test_ssd_value_fields_set_the_input_scales():
    problem = {**ssd.RAGGED, "dt_bias": True, "dt_softplus": True, "z": True, "initial_states": True}
    base = ssd.ssd_raw_inputs(problem, torch.float32, 0, CPU)
    wide = {
        **problem,
        "dt_range": [0.5, 5.0],
        "A_range": [1e-2, 1e-1],
        "x_scale": 100.0,
        "bc_scale": 0.1,
        "z_scale": 10.0,
        "state_scale": 1e-2,
    }
    got = ssd.ssd_raw_inputs(wide, torch.float32, 0, CPU)
    # The per-head dt after softplus is drawn log-uniform in dt_range (the bias puts each head there).
    dt0 = torch.nn.functional.softplus(got["dt_bias"])
    assert bool(((dt0 >= 0.5 * (1 - 1e-5)) & (dt0 <= 5.0 * (1 + 1e-5))).all()), dt0
    assert bool(((-got["A"] >= 1e-2 * (1 - 1e-6)) & (-got["A"] <= 1e-1 * (1 + 1e-6))).all()), got["A"]
    for name, scale in (("x", 100.0), ("B", 0.1), ("C", 0.1), ("z", 10.0), ("initial_states", 1e-2)):
        torch.testing.assert_close(got[name], base[name] * scale, rtol=1e-6, atol=0, msg=name)


def test_long_decays_underflow_within_a_chunk():
    """The second pinned problem makes exp(dA_cumsum) underflow in fp32 inside its one chunk."""
    problem = SPECS["chunk_state"].examples[1]
    assert problem["seqlen"] < problem["chunk_size"]
    dA_cumsum = SPECS["chunk_state"].make_inputs(problem, torch.float32, 0, CPU)["dA_cumsum"]
    assert float(torch.exp(dA_cumsum[..., : problem["seqlen"]]).min()) == 0.0


def test_norm_value_fields_set_row_scales_and_z():
    problem = {
        "rows": 64,
        "ngroups": 2,
        "group_size": 64,
        "z": True,
        "norm_before_gate": False,
        "is_rms_norm": True,
        "bias": False,
    }
    base = norm_op.inputs(problem, torch.float32, 0, CPU)
    got = norm_op.inputs({**problem, "x_range": [1e-4, 1e3], "z_scale": 100.0}, torch.float32, 0, CPU)
    ratio = (got["x"] / base["x"]).amax(dim=1)
    assert float(ratio.min()) >= 1e-4 * (1 - 1e-5) and float(ratio.max()) <= 1e3 * (1 + 1e-5)
    assert float(ratio.max() / ratio.min()) > 1e4  # rows from eps-dominated to large
    torch.testing.assert_close(got["z"], base["z"] * 100.0, rtol=1e-6, atol=0)
    assert math.isclose(float((got["x"] / base["x"]).std(dim=1).max()), 0.0, abs_tol=1e-3)  # one scale per row


def test_run_problem_validates_before_any_work():
    """A malformed problem is refused before the inputs are even made."""
    from toy_op import reference
    from toy_op import spec as toy_spec

    def never(*args: Any) -> dict[str, Any]:
        raise AssertionError("make_inputs ran on a malformed problem")

    def check(problem: Any, dtype: torch.dtype) -> None:
        if not isinstance(problem.get("length"), int) or isinstance(problem["length"], bool):
            raise ParityError(f"problem field 'length' must be an integer, got {problem.get('length')!r}")

    s: OpSpec = dataclasses.replace(toy_spec(reference), make_inputs=never, check_problem=check)
    with pytest.raises(ParityError, match="decay_sum: problem field 'length'"):
        run_problem(s, [s.impl("reference")], {"batch": 1, "length": True, "chunk": 4}, torch.float32, 0, "cpu", None)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("softplus", [True, False])
def test_no_drawn_dt_sits_on_an_end_of_dt_limit(dtype, softplus):
    """Steps within rounding of a clamp end are moved just outside the band, on their side; the rest stay bitwise."""
    lo, hi = 1e-3, 1e-1
    steps = torch.tensor([lo * (1 - 1e-5), lo * (1 + 3e-4), hi * (1 - 2e-4), hi * (1 + 1e-5), 0.01, 0.5])
    bias = torch.full((6,), 0.25)
    dt = ((torch.log(torch.expm1(steps.double())) if softplus else steps.double()) - bias.double()).to(dtype)

    def effective(values: torch.Tensor) -> torch.Tensor:
        step = values.double() + bias.double()
        return torch.nn.functional.softplus(step) if softplus else step

    moved = ssd.off_the_limits(dt.reshape(1, 1, 6), bias, softplus, (lo, hi)).reshape(6)
    for end in (lo, hi):
        assert ((effective(moved) - end).abs() > ssd.LIMIT_BAND * end + 1e-6).all(), (end, effective(moved))
        assert torch.equal(effective(moved) > end, effective(dt) > end), f"a step crossed {end}"
    assert torch.equal(moved[4:], dt[4:])


def test_mamba_ssm_baseline_passes_where_its_softplus_once_straddled_dt_limit(parity_device):
    """H200 run 9: seed 54782 drew a dt whose softplus is 1e-5 below dt_limit's lower end; mamba-ssm's fp32
    softplus put it inside, so its grad.dt was not masked (9.8e-2 where the oracle has 0). Off the edge, it passes."""
    spec = registry.get("chunk_cumsum")
    problem = {"batch": 2, "seqlen": 364, "chunk_size": 256, "ngroups": 8, "nheads": 16, "headdim": 32,
               "dstate": 64, "dt_bias": False, "dt_softplus": True, "dt_limit": [0.001, 0.1],
               "dt_range": [0.0001, 5.0], "A_range": [0.01, 16.0]}  # fmt: skip
    from parity import tolerances

    results = run_problem(spec, [spec.impl("triton")], problem, torch.float32, 54782, parity_device, tolerances.load())
    assert all(r.passed for r in results), [r.message() for r in results]
