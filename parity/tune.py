"""Tuning with the parity check as the accuracy judge.

Helion's autotuner judges a candidate once, forward only, against the kernel's own default config.
Here every candidate config is timed, then, fastest first, judged by the full engine (fp64 oracle,
baseline rule, forward and backward, poisoned allocations) on the tuning shape and the op's pinned
small problems, and the N fastest passing configs are kept.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from parity.runner import run_problem
from parity.spec import Impl, OpSpec, Problem
from parity.tolerances import Tolerances

Timer = Callable[[Callable[[], Any]], float]


def cuda_timer(fn: Callable[[], Any]) -> float:
    """Median milliseconds of ``fn`` with triton's do_bench (warm, CUDA events)."""
    from triton.testing import do_bench

    return float(do_bench(fn, return_mode="median"))


def training_step(spec: OpSpec, impl: Impl, inputs: Mapping[str, Any]) -> Callable[[], None]:
    """What training runs: the forward, and the backward too when the implementation has one."""
    fn = impl.load()
    names = [n for n in spec.grad_inputs if isinstance(inputs.get(n), torch.Tensor)] if impl.backward else []
    args = {k: (v.detach().clone().requires_grad_(True) if k in names else v) for k, v in inputs.items()}

    def step() -> None:
        out = fn(**args)
        outs = [
            o
            for o in (out if isinstance(out, tuple | list) else (out,))
            if isinstance(o, torch.Tensor) and o.requires_grad
        ]
        if names and outs:
            torch.autograd.grad(outs, [args[n] for n in names], [torch.ones_like(o) for o in outs], allow_unused=True)

    return step


@dataclass
class Trial:
    """One candidate config: its time, and the verdict if it was judged."""

    config: dict[str, Any]
    ms: float | None = None
    error: str | None = None
    passed: bool | None = None
    failure: str | None = None


def tune(
    spec: OpSpec,
    base: Impl,
    problem: Problem,
    dtype: torch.dtype,
    device: str,
    tolerances: Tolerances,
    configs: Iterable[Mapping[str, Any]],
    keep: int,
    timer: Timer = cuda_timer,
    progress: Callable[[str, Trial], None] | None = None,
) -> list[Trial]:
    """Time every config on ``problem``; judge them fastest first; stop once ``keep`` have passed.
    ``progress(stage, trial)`` is called after each timing ("timed") and each verdict ("judged"), so a run
    cut short by a time limit still shows what it measured."""
    inputs = spec.make_inputs(problem, dtype, 0, torch.device(device))
    trials: list[Trial] = []
    for config in configs:
        trial = Trial(dict(config))
        step = training_step(spec, dataclasses.replace(base, config=trial.config), inputs)
        try:
            step()  # compile outside the timed region
            trial.ms = timer(step)
        except Exception as exc:  # a config that does not compile or run is discarded, with the reason
            trial.error = f"{type(exc).__name__}: {str(exc)[:300]}"
        trials.append(trial)
        if progress:
            progress("timed", trial)
    passed = 0
    for trial in sorted((t for t in trials if t.ms is not None), key=lambda t: t.ms or 0.0):
        if passed >= keep:
            break
        impl = dataclasses.replace(base, name=f"{base.name}-trial", config=trial.config)
        problems = [problem, *spec.examples[:1]]
        results = [r for p in problems for r in run_problem(spec, [impl], p, dtype, 0, device, tolerances)]
        failed = [r for r in results if not r.passed]
        trial.passed = not failed
        trial.failure = failed[0].message() if failed else None
        passed += trial.passed
        if progress:
            progress("judged", trial)
    return trials
