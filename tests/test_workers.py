"""The gate's problems spread over worker processes (parity.workers) give the same verdicts as one process,
and plan() lists the problems drive() checks."""

from __future__ import annotations

import json

from parity import registry
from parity.runner import CaseResult
from parity.strategies import get_profile, plan
from parity.workers import run_cases


def _verdicts(results: list[CaseResult]) -> dict[str, tuple[bool, dict[str, float]]]:
    return {json.dumps([r.problem, r.seed], sort_keys=True): (r.passed, r.worst()) for r in results}


def test_workers_match_one_process(parity_tolerances):
    spec = registry.get("layernorm_gated")
    impl = spec.impl("helion")
    cases = plan(spec, get_profile("ci"), "cpu", max_examples=1)
    assert [p for p, _ in cases[: len(spec.examples)]] == [dict(p) for p in spec.examples]
    assert len({json.dumps(c, sort_keys=True) for c in cases}) == len(cases)
    alone: list[CaseResult] = []
    spread: list[CaseResult] = []
    run_cases(spec, [impl], cases, spec.dtypes[0], "cpu", parity_tolerances, ("nan",), 1, alone.append)
    run_cases(spec, [impl], cases, spec.dtypes[0], "cpu", parity_tolerances, ("nan",), 2, spread.append)
    assert len(spread) == len(alone) == len(cases)
    assert _verdicts(spread) == _verdicts(alone)
    assert all(r.passed for r in alone)
