"""Which build a Helion kernel runs: specialized to the call's shapes as training runs it, the dynamic-shape build
inside ``kernels.launch.any_shape()``; and the engine enters that context for every problem but the training
problems, so the gate judges the static build where training runs it."""

from __future__ import annotations

import contextlib
import dataclasses

import torch
from toy_op import reference, spec

from kernels import chunk_cumsum, launch
from parity import tolerances
from parity.runner import run_problem


def _builds(monkeypatch) -> list[tuple[bool, int]]:
    """Record the ``static_shapes`` setting and the bound kernel (one per code generation) of every bind."""
    seen: list[tuple[bool, int]] = []
    real_bind = chunk_cumsum.chunk_cumsum_kernel.bind.__func__

    def bind(kernel, args):
        bound = real_bind(kernel, args)
        seen.append((kernel.settings.static_shapes, id(bound)))
        return bound

    monkeypatch.setattr(type(chunk_cumsum.chunk_cumsum_kernel), "bind", bind)
    monkeypatch.setattr(launch, "_COMPILED", {})
    return seen


def test_training_runs_the_static_build_any_shape_the_dynamic_one(monkeypatch) -> None:
    seen = _builds(monkeypatch)
    dts = [torch.rand(1, seqlen, 2) for seqlen in (16, 24)]
    A = -torch.rand(2)
    for dt in dts:
        chunk_cumsum.chunk_cumsum_fwd(dt, A, 8)
    assert [static for static, _ in seen] == [True, True] and seen[0][1] != seen[1][1]  # one build per shape
    with launch.any_shape():
        for dt in dts:
            chunk_cumsum.chunk_cumsum_fwd(dt, A, 8)
    assert [static for static, _ in seen[2:]] == [False, False] and seen[2][1] == seen[3][1]  # one for both
    assert not launch._ANY_SHAPE.get()


def test_engine_enters_any_shape_except_at_training_problems() -> None:
    entered: list[bool] = []

    @contextlib.contextmanager
    def any_shape():
        entered.append(True)
        yield

    training = {"batch": 1, "length": 9, "chunk": 4}
    s = dataclasses.replace(spec(reference), training_problems=(training,), any_shape=any_shape)
    tols = tolerances.load()
    for problem, expected in (({"batch": 2, "length": 13, "chunk": 4}, [True]), (training, [True])):
        [result] = run_problem(s, [s.impl("reference")], problem, torch.float32, 0, "cpu", tols)
        assert result.passed and entered == expected
