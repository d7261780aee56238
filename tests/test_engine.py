"""Self-tests of the engine on a small op that is not Mamba (tests/toy_op.py).

A correct candidate passes; candidates wrong in distinct ways fail with a message that names the
output or gradient, the dtype, the seed, the worst element and a reproducer.
"""

from __future__ import annotations

import pytest
import torch
from toy_op import (
    bf16_accumulation,
    dropped_term,
    make_inputs,
    nan_output,
    reference,
    shifted,
    spec,
    unwritten_tail,
)

from parity import tolerances
from parity.profiles import get_profile
from parity.runner import _upcast, execute, run_problem, upstream_grads
from parity.spec import Impl
from parity.strategies import drive

TOLS = tolerances.load()
RAGGED = {"batch": 2, "length": 13, "chunk": 4}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_correct_candidate_passes_on_generated_problems(dtype):
    seen = []
    drive(
        spec(reference),
        [Impl("reference", reference)],
        dtype,
        "cpu",
        get_profile("ci"),
        TOLS,
        on_result=seen.append,
        raise_on_fail=True,
        max_examples=10,
    )
    assert len(seen) >= 10 and all(r.passed for r in seen)


@pytest.mark.parametrize(
    ("mutant", "dtype", "expect"),
    [
        (shifted, torch.float32, "out:"),
        (bf16_accumulation, torch.float32, "out:"),
        (dropped_term, torch.float16, "out:"),
        (nan_output, torch.float32, "nan 1"),
        (unwritten_tail, torch.float32, "pre-filled with nan"),
    ],
)
def test_wrong_candidates_fail_with_a_precise_message(mutant, dtype, expect):
    s = spec(mutant)
    [result] = run_problem(s, [s.impl(mutant.__name__)], RAGGED, dtype, 3, "cpu", TOLS)
    assert not result.passed
    message = result.message()
    for needle in (
        f"decay_sum [{mutant.__name__}]",
        "seed=3",
        '"length": 13',
        "reproduce: parity check",
        expect,
        str(dtype).removeprefix("torch."),
    ):
        assert needle in message, f"{needle!r} missing from:\n{message}"


def test_failure_names_the_worst_element():
    s = spec(dropped_term)
    [result] = run_problem(s, [s.impl("dropped_term")], RAGGED, torch.float32, 0, "cpu", TOLS)
    worst = next(q for q in result.quantities if q.name == "out" and not q.passed).candidate
    x = make_inputs(RAGGED, torch.float32, 0, "cpu")["x"]
    assert worst.worst_index == tuple(int(i) for i in torch.unravel_index(x.abs().argmax(), x.shape))
    assert "grad.d" in result.message()  # the missing term also breaks d's gradient


def test_hypothesis_shrinks_a_failure_to_a_minimal_problem():
    def tail_only(x, a, d, chunk):
        out = reference(x, a, d, chunk)
        return out + (torch.arange(x.shape[1]) >= 20).to(out.dtype)  # wrong only for long sequences

    s = spec(tail_only)
    with pytest.raises(AssertionError) as info:
        drive(
            s,
            [s.impl("tail_only")],
            torch.float32,
            "cpu",
            get_profile("ci"),
            TOLS,
            on_result=lambda _: None,
            raise_on_fail=True,
            max_examples=30,
        )
    assert '"length": 21' in str(info.value)  # shrunk to the shortest failing length


def test_results_are_data():
    s = spec(reference)
    [result] = run_problem(s, [s.impl("reference")], RAGGED, torch.float32, 0, "cpu", TOLS)
    data = result.to_dict()
    assert data["passed"] and data["op"] == "decay_sum" and data["reproducer"].startswith("parity check")
    assert {q["name"] for q in data["quantities"]} == {"out", "grad.x", "grad.a", "grad.d"}
    assert all(q["baseline"] is not None for q in data["quantities"])


def test_input_mutation_is_reported():
    def mutating(x, a, d, chunk):
        out = reference(x, a, d, chunk)
        x.data.mul_(2)
        return out

    s = spec(mutating)
    [result] = run_problem(s, [s.impl("mutating")], RAGGED, torch.float32, 0, "cpu", TOLS, backward=False)
    assert not result.passed and "input 'x' was modified in place" in result.message()


def test_an_implementation_that_raises_is_a_failure_not_a_crash():
    def broken(x, a, d, chunk):
        raise RuntimeError("config does not compile")

    s = spec(broken)
    [result] = run_problem(s, [s.impl("broken")], RAGGED, torch.float32, 0, "cpu", TOLS)
    assert not result.passed and "forward raised RuntimeError: config does not compile" in result.message()


@pytest.mark.parametrize("layout", ["strided", "offset"])
def test_layouts_reach_the_implementation_and_are_checked(layout):
    """Non-contiguous and offset inputs keep their layout through the engine's copies."""
    seen = []

    def contiguous_only(x, a, d, chunk):
        seen.append((x.is_contiguous(), x.storage_offset()))
        if not x.is_contiguous() or x.storage_offset():
            x = torch.empty_like(x)  # wrong on purpose: ignores the values of a non-contiguous input
        return reference(x, a, d, chunk)

    s = spec(contiguous_only)
    [result] = run_problem(
        s,
        [s.impl("contiguous_only")],
        RAGGED,
        torch.float32,
        0,
        "cpu",
        TOLS,
        backward=False,
        layout=layout,
        relayout_inputs=("x",),
    )
    assert not result.passed
    assert (False, 0) in seen if layout == "strided" else (True, 1) in seen


def test_nan_in_the_inputs_is_a_clear_error():
    from parity.errors import ParityError

    def nan_inputs(p, dtype, seed, device):
        inputs = make_inputs(p, dtype, seed, device)
        inputs["x"][0, 0] = float("nan")
        return inputs

    import dataclasses

    s = dataclasses.replace(spec(reference), make_inputs=nan_inputs)
    with pytest.raises(ParityError, match="input 'x' has 1 NaN/Inf values"):
        run_problem(s, [s.impl("reference")], RAGGED, torch.float32, 0, "cpu", TOLS)


def test_specs_with_other_inputs_do_not_share_the_oracle():
    """The oracle and baseline runs are cached per problem and seed: a variant of an op (same name) with another
    input generator must get its own, not the first one's."""
    import dataclasses

    def doubled(p, dtype, seed, device):
        inputs = make_inputs(p, dtype, seed, device)
        inputs["x"] = inputs["x"] * 2
        return inputs

    first = spec(reference)
    second = dataclasses.replace(first, make_inputs=doubled)
    for s in (first, second, first):
        [result] = run_problem(s, [s.impl("reference")], RAGGED, torch.float32, 7, "cpu", TOLS)
        assert result.passed, result.message()


def test_a_broken_baseline_does_not_widen_the_bound():
    """A baseline far outside its own absolute bound (a lost pre-hook: mamba-ssm's kernels summing into
    uninitialized memory, H200 run 7) must not let an equally broken candidate through: the absolute bound
    applies, with a note; a correct candidate still passes."""
    import dataclasses

    from toy_op import baseline

    def garbage(x, a, d, chunk):
        return baseline(x, a, d, chunk) * 1.5

    broken = dataclasses.replace(spec(reference, garbage), baseline=Impl("loop", garbage))
    good, bad = run_problem(
        broken,
        [broken.impl("reference"), broken.impl("garbage")],
        RAGGED,
        torch.float32,
        0,
        "cpu",
        TOLS,
        backward=False,
    )
    assert good.passed, good.message()
    assert not bad.passed, "an equally broken candidate passed on the broken baseline's bound"
    assert any("over 10x its own bound" in note for note in good.notes + bad.notes)
    [intact] = run_problem(
        spec(garbage), [spec(garbage).impl("garbage")], RAGGED, torch.float32, 0, "cpu", TOLS, backward=False
    )
    assert not intact.passed and not intact.notes


def test_candidates_run_before_a_baseline_that_breaks_the_device():
    """A baseline that leaves the device unusable (on CUDA an illegal memory access poisons the whole context, as
    32-bit offsets wrapping past 2^31 can) fails alone: the candidates ran and were measured before it, and are
    judged by the absolute bounds with a note; its own case reports the error."""
    import dataclasses

    from toy_op import baseline

    calls: list[str] = []
    broken_device = False

    def candidate(x, a, d, chunk):
        calls.append("candidate")
        if broken_device:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return baseline(x, a, d, chunk)

    def crashing(x, a, d, chunk):
        nonlocal broken_device
        calls.append("baseline")
        broken_device = True
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    s = dataclasses.replace(spec(candidate), baseline=Impl("loop", crashing))
    base, cand = run_problem(s, [s.impl("loop"), s.impl("candidate")], RAGGED, torch.float32, 11, "cpu", TOLS)
    assert calls[0] == "candidate" and set(calls[1:]) == {"baseline"}, calls  # its poisoned run and its clean one
    assert cand.passed and all(q.baseline is None for q in cand.quantities), cand.message()
    assert any("baseline loop failed, absolute bounds used" in n for n in cand.notes), cand.notes
    assert not base.passed and "illegal memory access" in base.message()


def test_a_candidate_that_breaks_the_device_fails_alone(monkeypatch):
    """As on the H100 (bench/results/h200-run23): mamba-ssm's kernels, run as a candidate, leave an illegal memory
    access behind, and the next CUDA call anywhere raises it (here the baseline's copy of the inputs). Every
    implementation still gets its verdict: the one measured before keeps its own, judged by the absolute bounds,
    the breaking one fails with the error, and so does the baseline that could not run."""
    from toy_op import baseline

    import parity.runner as runner

    broken = False
    error = "CUDA error: an illegal memory access was encountered"
    clone = runner._clone

    def copy(value):
        if broken:
            raise RuntimeError(error)
        return clone(value)

    def compare(a, b):
        if broken:
            raise RuntimeError(error)
        return torch.equal(a, b)

    def breaking(x, a, d, chunk):
        nonlocal broken
        out = baseline(x, a, d, chunk)
        broken = True  # on CUDA its launch returns; the error surfaces at the next synchronizing call
        return out

    def candidate(x, a, d, chunk):
        return baseline(x, a, d, chunk)

    monkeypatch.setattr(runner, "_clone", copy)
    monkeypatch.setattr(runner, "same_bits", compare)
    s = spec(candidate, breaking)
    impls = [s.impl("candidate"), s.impl("breaking"), s.impl("loop")]
    good, bad, base = run_problem(s, impls, RAGGED, torch.float32, 11, "cpu", TOLS, poison=())
    assert good.passed and any("baseline loop failed, absolute bounds used" in n for n in good.notes), good.message()
    assert not bad.passed and f"the in-place check raised RuntimeError: {error}" in bad.message(), bad.message()
    assert not base.passed and f"copying the inputs raised RuntimeError: {error}" in base.message(), base.message()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_the_oracle_differentiates_the_upstream_gradient_the_candidates_get(dtype):
    """The oracle gets the case's upstream gradient with the values the candidates get (drawn, then rounded to the
    dtype): an implementation that computes its forward and backward exactly and rounds once then has exactly the
    oracle's gradient, rounded. An oracle given the unrounded draw would charge it the upstream's rounding."""
    s = spec(reference)
    inputs = make_inputs(RAGGED, dtype, 3, "cpu")
    upstream = upstream_grads(3, dtype)
    oracle = execute(s, reference, {k: _upcast(v, torch.float64) for k, v in inputs.items()}, upstream)
    exact = execute(s, lambda **kw: reference(**kw, acc=torch.float64), inputs, upstream)
    assert not oracle.errors and not exact.errors
    for name in ("grad.x", "grad.a", "grad.d"):
        assert torch.equal(exact.values[name], oracle.values[name].to(exact.values[name].dtype)), name
