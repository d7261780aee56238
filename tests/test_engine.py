"""Self-tests of the engine on a small op that is not Mamba: a chunked decaying prefix sum.

out[b, l] = sum over s <= l in l's chunk of x[b, s] * exp(a * (l - s)) + d * x[b, l]

A correct candidate passes; candidates wrong in distinct ways fail with a message that names the
output or gradient, the dtype, the seed, the worst element and a reproducer.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from hypothesis import strategies as st

from parity import tolerances
from parity.runner import run_problem
from parity.spec import Impl, OpSpec
from parity.strategies import Profile, drive


def _decay(length: int, a: torch.Tensor) -> torch.Tensor:
    """(length, length) lower-triangular exp(a * (l - s))."""
    idx = torch.arange(length, device=a.device, dtype=a.dtype)
    diff = idx[:, None] - idx[None, :]
    return torch.where(diff >= 0, torch.exp(a * diff.clamp(min=0)), torch.zeros((), dtype=a.dtype, device=a.device))


def reference(x: torch.Tensor, a: torch.Tensor, d: torch.Tensor, chunk: int, shift: int = 0,
              acc: torch.dtype | None = None, drop_d: bool = False) -> torch.Tensor:
    """The op; ``shift``/``acc``/``drop_d`` inject the bugs the mutants below need."""
    work = acc or (torch.float64 if x.dtype == torch.float64 else torch.float32)
    xs, aa = x.to(work), a.to(work)
    out = torch.zeros_like(xs)
    length = x.shape[1]
    starts = [0, *range(chunk + shift, length, chunk)] if shift else list(range(0, length, chunk))
    for i, start in enumerate(starts):
        stop = starts[i + 1] if i + 1 < len(starts) else length
        out[:, start:stop] = xs[:, start:stop] @ _decay(stop - start, aa).T
    if not drop_d:
        out = out + d.to(work) * xs
    return out.to(x.dtype)


def baseline(x, a, d, chunk):
    """A second correct implementation, as a loop over positions (the 'original kernel')."""
    columns = []
    run = torch.zeros(x.shape[0], dtype=torch.float32)
    for pos in range(x.shape[1]):
        run = (run * torch.exp(a.float()) if pos % chunk else 0.0) + x[:, pos].float()
        columns.append(run + d.float() * x[:, pos].float())
    return torch.stack(columns, dim=1).to(x.dtype)


def shifted(x, a, d, chunk):
    return reference(x, a, d, chunk, shift=1)


def bf16_accumulation(x, a, d, chunk):
    return reference(x, a, d, chunk, acc=torch.bfloat16)


def dropped_term(x, a, d, chunk):
    return reference(x, a, d, chunk, drop_d=True)


def nan_output(x, a, d, chunk):
    out = reference(x, a, d, chunk)
    return torch.where(torch.arange(out.numel()).reshape(out.shape) == out.numel() // 2, float("nan"), out)


def unwritten_tail(x, a, d, chunk):
    """Writes only whole chunks; the ragged tail keeps whatever the allocation held."""
    full = reference(x, a, d, chunk)
    out = torch.empty_like(full)
    whole = (x.shape[1] // chunk) * chunk
    out[:, :whole] = full[:, :whole]
    return out


def make_inputs(p, dtype, seed, device):
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(p["batch"], p["length"], generator=g).to(device, dtype),
            "a": -torch.rand((), generator=g).to(device) - 0.1,
            "d": torch.randn((), generator=g).to(device),
            "chunk": p["chunk"]}


def problems(profile: str):
    return st.fixed_dictionaries({"batch": st.integers(1, 3), "length": st.integers(1, 40),
                                  "chunk": st.sampled_from([4, 8])})


def spec(*candidates: Callable) -> OpSpec:
    return OpSpec(name="decay_sum", reference=Impl("torch", reference), make_inputs=make_inputs,
                  problems=problems, outputs=("out",), grad_inputs=("x", "a", "d"),
                  baseline=Impl("loop", baseline),
                  candidates=tuple(Impl(c.__name__, c) for c in candidates),
                  examples=({"batch": 2, "length": 13, "chunk": 4},))


TOLS = tolerances.load()
RAGGED = {"batch": 2, "length": 13, "chunk": 4}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_correct_candidate_passes_on_generated_problems(dtype):
    seen = []
    drive(spec(reference), [Impl("reference", reference)], dtype, "cpu", Profile("t", 10, True), TOLS,
          on_result=seen.append, raise_on_fail=True)
    assert len(seen) >= 10 and all(r.passed for r in seen)


@pytest.mark.parametrize(("mutant", "dtype", "expect"), [
    (shifted, torch.float32, "out:"),
    (bf16_accumulation, torch.float32, "out:"),
    (dropped_term, torch.float16, "out:"),
    (nan_output, torch.float32, "nan 1"),
    (unwritten_tail, torch.float32, "pre-filled with nan"),
])
def test_wrong_candidates_fail_with_a_precise_message(mutant, dtype, expect):
    s = spec(mutant)
    [result] = run_problem(s, [s.impl(mutant.__name__)], RAGGED, dtype, 3, "cpu", TOLS)
    assert not result.passed
    message = result.message()
    for needle in (f"decay_sum [{mutant.__name__}]", "seed=3", '"length": 13', "reproduce: parity check",
                   expect, str(dtype).removeprefix("torch.")):
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
        drive(s, [s.impl("tail_only")], torch.float32, "cpu", Profile("t", 30, True), TOLS,
              on_result=lambda _: None, raise_on_fail=True)
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
