"""The driver that feeds generated problems through the engine, under a hypothesis profile of
:mod:`parity.profiles`; ``spec.max_examples[profile]`` may lower or raise the example count for a heavy or light
op."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

import torch
from hypothesis import Phase, example, given, settings
from hypothesis import strategies as st

from parity.profiles import Profile
from parity.runner import CaseResult, run_problem
from parity.spec import Impl, OpSpec
from parity.tolerances import Tolerances


def examples_for(spec: OpSpec, profile: Profile) -> int:
    """The number of generated problems for ``spec`` under ``profile``."""
    return int(spec.max_examples.get(profile.name, profile.max_examples))


def _search(
    spec: OpSpec, profile: Profile, device: str, count: int, check: Callable[[dict, int], None]
) -> Callable[[], None]:
    """The hypothesis test calling ``check(problem, seed)``: on CUDA the op's training problems first (they are
    what the gate exists for, and the first run of a baseline fixes the configs it is pinned to, see
    reference.mamba_triton), then the pinned examples and the profile's own (``spec.profile_examples``), then
    ``count`` generated problems."""
    phases = [Phase.explicit] + ([Phase.generate, Phase.shrink] if count > 0 else [])
    search = given(problem=spec.problems(profile.name), seed=st.integers(0, 2**20))(check)
    test = settings(profile.settings, max_examples=max(count, 1), phases=phases)(search)
    first = spec.training_problems if device == "cuda" else ()
    for pinned in reversed((*first, *spec.examples, *spec.profile_examples.get(profile.name, ()))):
        test = example(problem=dict(pinned), seed=0)(test)
    return test


def drive(
    spec: OpSpec,
    impls: Sequence[Impl],
    dtype: torch.dtype,
    device: str,
    profile: Profile,
    tolerances: Tolerances,
    on_result: Callable[[CaseResult], None],
    raise_on_fail: bool,
    backward: bool = True,
    max_examples: int | None = None,
    poison: Sequence[str] = ("nan",),
) -> None:
    """Check ``impls`` on the problems of :func:`_search`.

    With ``raise_on_fail`` a failure raises AssertionError carrying the report and the reproducer,
    so that hypothesis shrinks it to a minimal problem; otherwise every result is only recorded.
    """
    count = examples_for(spec, profile) if max_examples is None else max_examples

    def check(problem: dict, seed: int) -> None:
        for result in run_problem(spec, impls, problem, dtype, seed, device, tolerances, backward, poison):
            on_result(result)
            if raise_on_fail and not result.passed:
                raise AssertionError(result.message())

    _search(spec, profile, device, count, check)()


def plan(spec: OpSpec, profile: Profile, device: str, max_examples: int | None = None) -> list[tuple[dict, int]]:
    """The (problem, seed) pairs of :func:`_search`, in order and without repeats, drawn without running
    anything (so that they can be spread over worker processes; see parity.workers)."""
    count = examples_for(spec, profile) if max_examples is None else max_examples
    found: dict[str, tuple[dict, int]] = {}

    def record(problem: dict, seed: int) -> None:
        found.setdefault(json.dumps([problem, seed], sort_keys=True), (problem, seed))

    _search(spec, profile, device, count, record)()
    return list(found.values())
