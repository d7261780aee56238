"""Spread parity work over worker processes on one device, so that what must still compile (Helion's code
generation, Triton's LLVM and ptxas) runs on all CPU cores at once instead of one kernel after another:
a gate's (problem, seed) cases (:func:`run_cases`), or a check's (op, dtype) runs (:func:`run_jobs`).

Each worker is a spawned process that loads the registry once and keeps its own compiled kernels and its own
oracle/baseline cache; a case runs entirely in one worker, so its oracle and baseline runs are still shared by
the implementations judged on it. Workers find the spec by name in the registry: only registered ops can be
spread.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any

import torch

from parity.runner import CaseResult, run_problem
from parity.spec import Impl, OpSpec, dtype_name, parse_dtype
from parity.strategies import Profile, drive, get_profile
from parity.tolerances import Tolerances

_WORKER: dict[str, Any] = {}


def _start(device: str, tolerances: Tolerances) -> None:
    """Worker initializer: configure the device (before triton is imported), load the registry."""
    from parity import device as device_mod
    from parity import registry

    device_mod.configure(device)
    _WORKER.update(specs=registry.load(), tolerances=tolerances)


def _case(
    op: str, impls: Sequence[Impl], problem: dict, seed: int, dtype: str, device: str, poison: Sequence[str]
) -> list[CaseResult]:
    spec = _WORKER["specs"][op]
    return run_problem(spec, impls, problem, parse_dtype(dtype), seed, device, _WORKER["tolerances"], poison=poison)


def _drive(
    op: str, impls: Sequence[Impl], dtype: str, device: str, profile: str, backward: bool, max_examples: int | None
) -> list[CaseResult]:
    results: list[CaseResult] = []
    drive(
        _WORKER["specs"][op],
        impls,
        parse_dtype(dtype),
        device,
        get_profile(profile),
        _WORKER["tolerances"],
        on_result=results.append,
        raise_on_fail=False,
        backward=backward,
        max_examples=max_examples,
    )
    return results


def run_jobs(
    jobs: Sequence[tuple[OpSpec, Sequence[Impl], torch.dtype]],
    device: str,
    profile: Profile,
    tolerances: Tolerances,
    workers: int,
    backward: bool,
    max_examples: int | None,
    on_job: Callable[[int, list[CaseResult]], None],
) -> None:
    """Drive each (spec, implementations, dtype) job (see parity.strategies.drive) in one of ``workers``
    spawned processes; ``on_job(index into jobs, its results)`` as each job finishes."""
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=context, initializer=_start, initargs=(device, tolerances)) as pool:
        futures = {
            pool.submit(
                _drive, spec.name, tuple(impls), dtype_name(dtype), device, profile.name, backward, max_examples
            ): index
            for index, (spec, impls, dtype) in enumerate(jobs)
        }
        for future in as_completed(futures):
            on_job(futures[future], future.result())


def run_cases(
    spec: OpSpec,
    impls: Sequence[Impl],
    cases: Sequence[tuple[dict, int]],
    dtype: torch.dtype,
    device: str,
    tolerances: Tolerances,
    poison: Sequence[str],
    workers: int,
    on_result: Callable[[CaseResult], None],
) -> None:
    """Judge ``impls`` on every (problem, seed) of ``cases``, in this process (``workers`` <= 1) or spread over
    ``workers`` spawned processes; ``on_result`` sees each result as its case finishes (the order of
    completion), in this process either way."""
    if workers <= 1:
        for problem, seed in cases:
            for result in run_problem(spec, impls, problem, dtype, seed, device, tolerances, poison=poison):
                on_result(result)
        return
    context = multiprocessing.get_context("spawn")  # CUDA is initialized in this process: never fork
    with ProcessPoolExecutor(workers, mp_context=context, initializer=_start, initargs=(device, tolerances)) as pool:
        futures = [
            pool.submit(_case, spec.name, tuple(impls), problem, seed, dtype_name(dtype), device, tuple(poison))
            for problem, seed in cases
        ]
        for future in as_completed(futures):
            for result in future.result():
                on_result(result)
