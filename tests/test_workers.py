"""Work spread over worker processes (parity.workers): groups stay whole in one process, a group's final calls
run where the group ran, after everything else; a gate spread over processes gives the same verdicts as one
process; and plan() lists the problems drive() checks."""

from __future__ import annotations

import json
import os

import pytest
import torch

from parity import registry
from parity.gate import gate
from parity.profiles import get_profile
from parity.runner import CaseResult
from parity.strategies import plan
from parity.workers import run_groups


def _where(tag: str) -> tuple[str, int]:
    return tag, os.getpid()


def _fail(tag: str) -> None:
    raise ValueError(f"broken call {tag}")


def test_groups_stay_in_one_process_and_finals_run_last_where_their_group_ran(parity_tolerances):
    groups = [[(_where, (f"g{g}c{c}",)) for c in range(3 - g)] for g in range(3)]
    seen: list[tuple[tuple[int, int], tuple[str, int]]] = []
    finals = [(0, (_where, ("final0",))), (2, (_where, ("final2",)))]
    run_groups(lambda: (groups, finals), "cpu", parity_tolerances, 2, lambda at, result: seen.append((at, result)))
    assert sorted(at for at, _ in seen) == [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1), (2, 0), (2, 1)]
    pid = {tag: p for _, (tag, p) in seen}
    for g in range(3):
        assert len({p for tag, p in pid.items() if tag.startswith(f"g{g}")}) == 1, "a group was split"
    assert pid["final0"] == pid["g0c0"] and pid["final2"] == pid["g2c0"]
    assert {tag for _, (tag, _) in seen[-2:]} == {"final0", "final2"}  # after every group's own calls
    assert len(set(pid.values())) == 2 and os.getpid() not in pid.values()


def test_a_failing_call_stops_the_run_with_its_traceback(parity_tolerances):
    with pytest.raises(RuntimeError, match="broken call x"):
        run_groups(
            lambda: ([[(_where, ("a",))], [(_fail, ("x",))]], []), "cpu", parity_tolerances, 2, lambda a, r: None
        )


def _verdicts(results: list[CaseResult]) -> dict[str, tuple[bool, dict[str, float]]]:
    return {json.dumps([r.problem, r.seed, r.layout], sort_keys=True): (r.passed, r.worst()) for r in results}


@pytest.mark.cpu
def test_gate_spread_over_workers_matches_one_process(parity_tolerances):
    spec = registry.get("layernorm_gated")
    impl = spec.impl("helion")
    cases = plan(spec, get_profile("ci"), "cpu", max_examples=1)
    assert [p for p, _ in cases[: len(spec.examples)]] == [dict(p) for p in spec.examples]
    assert len({json.dumps(c, sort_keys=True) for c in cases}) == len(cases)
    reports = [
        gate(
            spec,
            impl,
            "cpu",
            get_profile("ci"),
            parity_tolerances,
            [torch.float32],
            max_examples=0,
            reruns=1,
            workers=workers,
        )
        for workers in (1, 2)
    ]
    alone, spread = reports
    assert len(alone.cases) == len(spread.cases) == len(spec.examples) + 2  # + the pinned problem re-laid out twice
    assert _verdicts(spread.cases) == _verdicts(alone.cases)
    assert alone.passed and spread.passed
    assert len(spread.determinism) == 1 and spread.determinism[0]["bitwise_identical"]


def test_a_call_that_ran_out_of_device_memory_is_retried_after_giving_memory_back(monkeypatch):
    """Other workers may hold the device's memory for a moment: an out-of-memory failure, raised or left in a
    case's errors or notes (a baseline's only leaves a note), is retried after a release; other failures are not."""
    import queue

    from parity import workers

    short = CaseResult("op", "impl", "float32", "cuda", {}, 0, notes=["baseline failed: OutOfMemoryError: CUDA"])
    outcomes = [RuntimeError("CUDA out of memory. Tried to allocate 1 GiB"), [short], ["ok"], ValueError("bad")]

    def flaky() -> list:
        outcome = outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    released: list[float] = []
    monkeypatch.setattr(workers, "_start", lambda *args: None)
    monkeypatch.setattr(workers, "_release", lambda wait: released.append(wait))
    inbox, outbox = queue.Queue(), queue.Queue()
    inbox.put((0, [(flaky, ()), (flaky, ())]))
    workers._serve(0, inbox, outbox, "cpu", None, 2)
    messages = [outbox.get_nowait() for _ in range(outbox.qsize())]
    assert released == [1.0, 2.0]
    assert messages[0] == ("result", 0, (0, 0), ["ok"])
    assert messages[1][0] == "error" and "ValueError: bad" in messages[1][3]


def test_large_problems_wait_for_a_free_slot(monkeypatch, tmp_path):
    """At most LARGE_SLOTS large problems run at once on a host: the next waits until one finishes."""
    import threading

    from parity import device

    monkeypatch.setattr(device, "LARGE_SLOTS", 2)
    monkeypatch.setattr(device.tempfile, "gettempdir", lambda: str(tmp_path))
    entered = threading.Event()

    def third() -> None:
        with device.large_problem_slot():
            entered.set()

    with device.large_problem_slot(), device.large_problem_slot():
        waiting = threading.Thread(target=third)
        waiting.start()
        assert not entered.wait(0.6), "a third large problem ran beside two"
    assert entered.wait(5), "the third large problem never got a slot"
    waiting.join()
    with device.large_problem_slot(False):  # a small problem takes no slot
        pass


def test_large_slots_follow_the_environment():
    """``PARITY_LARGE_SLOTS`` sets how many training-shape problems share the GPU at once (a fresh process)."""
    import subprocess
    import sys

    code = "from parity import device; print(device.LARGE_SLOTS)"
    env = {**os.environ, "PARITY_LARGE_SLOTS": "5"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "5"
