"""Spread parity work over worker processes on one device, so that what must still compile (Helion's code
generation, Triton's LLVM and ptxas) runs on all CPU cores at once instead of one kernel after another:
groups of calls that share their compiled kernels (:func:`run_groups`): a gate's cases, determinism reruns
and timings, or a check's problems (:func:`check_groups`).

Each worker is a spawned process that loads the registry once and keeps its own compiled kernels and its own
oracle/baseline cache. On CUDA, worker K runs on GPU K mod (visible GPUs): ``--workers`` spreads over a host's
GPUs. A group runs entirely in one worker, so what its calls compile is compiled once, and a
case's oracle and baseline runs are still shared by the implementations judged on it. Workers find a spec by
name in the registry (:func:`resolve`): only registered ops can be spread.
"""

from __future__ import annotations

import gc
import json
import multiprocessing
import os
import queue
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import torch

from parity import runner
from parity.runner import CaseResult, run_problem
from parity.spec import Impl, OpSpec, dtype_name, parse_dtype
from parity.strategies import Profile, plan
from parity.tolerances import Tolerances

_WORKER: dict[str, Any] = {}


def _start(device: str, tolerances: Tolerances, workers: int = 1, index: int | None = None) -> None:
    """Worker initializer: configure the device (before triton is imported), pin worker ``index`` to its GPU
    (round robin over the visible GPUs, :func:`parity.device.pin_worker`) before any CUDA work, share the CPU
    cores among the ``workers`` processes (each would otherwise start one intra-op thread per core), load the
    registry."""
    from parity import device as device_mod
    from parity import registry

    torch.set_num_threads(max(1, (os.cpu_count() or 1) // max(workers, 1)))
    device_mod.configure(device)
    if device == "cuda":
        device_mod.pin_worker(index)
        share_device(workers)
    _WORKER.update(specs=registry.load(), tolerances=tolerances)


def share_device(workers: int) -> None:
    """This process is one of ``workers`` spread round robin over the visible CUDA devices: its oracle/baseline
    cache takes its share of its own GPU's memory, shared with the workers on that GPU (all of them with one)."""
    from parity import device as device_mod

    gpu = device_mod.current_gpu()
    beside = device_mod.workers_on_gpu(workers, torch.cuda.device_count(), gpu)
    runner.limit_shared_gpu_bytes(int(_CACHE_SHARE * torch.cuda.get_device_properties(gpu).total_memory / beside))


def resolve(spec: OpSpec | str) -> OpSpec:
    """The spec itself, or in a worker the registered spec of that name."""
    return _WORKER["specs"][spec] if isinstance(spec, str) else spec


Call = tuple[Callable[..., Any], tuple[Any, ...]]
"""A function importable by name (so that it pickles) and its arguments."""


def _serve(index: int, inbox: Any, outbox: Any, device: str, tolerances: Tolerances, workers: int) -> None:
    """A worker's loop: run each group of calls it is sent, reporting every result, until None arrives."""
    try:
        _start(device, tolerances, workers, index)
    except BaseException:
        outbox.put(("error", index, None, traceback.format_exc()))
        return
    while (message := inbox.get()) is not None:
        group, calls = message
        for position, (fn, args) in enumerate(calls):
            try:
                result = patient(fn, *args)
            except BaseException:
                outbox.put(("error", index, group, traceback.format_exc()))
                return
            outbox.put(("result", index, (group, position), result))
        if device == "cuda" and torch.cuda.memory_reserved() > _KEEP_RESERVED:
            _release(wait=0.0)
        outbox.put(("done", index, group, None))


_CACHE_SHARE = 0.25
"""Share of a GPU's memory that the oracle/baseline caches of the workers on it may hold, all together."""
_KEEP_RESERVED = 4 << 30
"""A worker gives its cached device memory back after a group when it holds more than this."""
_OOM_RETRIES = 6
"""Times a call that ran out of device memory (other workers held it) is retried, after giving back memory
and waiting 1, 2, 4, ... 32 s (a minute in all), before its failure counts."""


def patient(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``, run again after giving device memory back while it runs out of it (other processes on the
    device may hold it for a moment): what it returns or raises on its last try counts."""
    attempt = 0
    while True:
        try:
            result = fn(*args)
        except BaseException:
            if attempt == _OOM_RETRIES or not _out_of_memory(traceback.format_exc()):
                raise
        else:
            if attempt == _OOM_RETRIES or not _out_of_memory(result):
                return result
        _release(wait=2.0**attempt)
        attempt += 1


def _out_of_memory(outcome: Any) -> bool:
    """Whether a call failed for want of device memory: its traceback, or an error or note of a case it returned
    (a baseline that ran out of memory would only leave a note)."""
    if isinstance(outcome, str):
        texts = [outcome]
    elif isinstance(outcome, list):
        texts = [t for r in outcome if isinstance(r, CaseResult) for t in (*r.errors, *r.notes)]
    else:
        return False
    return any("OutOfMemoryError" in t or "CUDA out of memory" in t for t in texts)


def _release(wait: float) -> None:
    """Give this worker's cached inputs, runs and device memory back, then wait ``wait`` seconds."""
    runner.forget()
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    time.sleep(wait)


Work = tuple[Sequence[Sequence[Call]], Sequence[tuple[int, Call]]]
"""Groups of calls, and (group index, call) pairs to run after every group (see :func:`run_groups`)."""


def run_groups(
    work: Callable[[], Work],
    device: str,
    tolerances: Tolerances,
    workers: int,
    on_result: Callable[[tuple[int, int], Any], None],
) -> None:
    """Run every call of every group of ``work()``, each group in one process and in order; groups are handed, in
    the given order, to whichever of ``workers`` spawned processes is free (``workers`` <= 1: all here). The
    second part of ``work()``, (group index, call) pairs, runs after every group has finished, in the process
    that ran that group (its kernels are compiled there and nothing else runs beside it: timings).
    ``on_result((group, position), result)`` in this process as each call finishes (position counts a group's
    final calls after its own). ``work()`` itself runs here while the workers start (planning, a pre-flight
    check). A call that raises stops every worker and raises RuntimeError with the worker's traceback."""
    if workers <= 1:
        groups, last = work()
        for group, calls in enumerate(groups):
            for position, (fn, args) in enumerate(calls):
                on_result((group, position), fn(*args))
        for group, calls in sorted(_by_group(last).items()):
            for position, (fn, args) in enumerate(calls, start=len(groups[group])):
                on_result((group, position), fn(*args))
        return
    context = multiprocessing.get_context("spawn")  # CUDA is initialized in this process: never fork
    outbox = context.Queue()
    inboxes = [context.Queue() for _ in range(workers)]
    processes = [
        context.Process(target=_serve, args=(i, inbox, outbox, device, tolerances, workers), daemon=True)
        for i, inbox in enumerate(inboxes)
    ]
    for process in processes:
        process.start()
    try:
        groups, last = work()
        _schedule(groups, _by_group(last), inboxes, outbox, processes, on_result)
    finally:
        for inbox, process in zip(inboxes, processes, strict=True):
            if process.is_alive():
                inbox.put(None)
        for process in processes:
            process.join(timeout=5)  # every result is in: do not wait on a slow CUDA teardown
            if process.is_alive():
                process.terminate()


def _by_group(last: Sequence[tuple[int, Call]]) -> dict[int, list[Call]]:
    extra: dict[int, list[Call]] = {}
    for group, call in last:
        extra.setdefault(group, []).append(call)
    return extra


def _schedule(
    groups: Sequence[Sequence[Call]],
    extra: dict[int, list[Call]],
    inboxes: list[Any],
    outbox: Any,
    processes: list[Any],
    on_result: Callable[[tuple[int, int], Any], None],
) -> None:
    """Hand out groups to free workers, then each group's ``extra`` calls to the worker that ran it."""
    pending = list(range(len(groups)))[::-1]
    owner: dict[int, int] = {}
    running: set[int] = set()

    def hand(worker: int, group: int, calls: Sequence[Call]) -> None:
        owner[group] = worker
        running.add(group)
        inboxes[worker].put((group, list(calls)))

    for worker in range(len(inboxes)):
        if pending:
            group = pending.pop()
            hand(worker, group, groups[group])
    finals = False
    while running or pending:
        try:
            kind, worker, where, payload = outbox.get(timeout=10)
        except queue.Empty:
            dead = [i for i, p in enumerate(processes) if not p.is_alive() and i in owner.values()]
            stuck = [g for g in running if owner[g] in dead]
            if stuck:
                raise RuntimeError(
                    f"worker {owner[stuck[0]]} died (exit code "
                    f"{processes[owner[stuck[0]]].exitcode}) while running group {stuck[0]}"
                ) from None
            continue
        if kind == "error":
            raise RuntimeError(f"worker {worker} failed:\n{payload}")
        if kind == "result":
            group, position = where
            if finals:
                position += len(groups[group])
            on_result((group, position), payload)
            continue
        running.discard(where)
        if pending:
            group = pending.pop()
            hand(worker, group, groups[group])
        elif not running and not finals and extra:
            finals = True
            for group, calls in sorted(extra.items()):
                hand(owner.get(group, 0), group, calls)


def check_case(
    spec: OpSpec | str,
    impls: Sequence[Impl],
    problem: dict,
    seed: int,
    dtype: str,
    device: str,
    tolerances: Tolerances,
    backward: bool,
) -> list[CaseResult]:
    """Every implementation of a check on one problem (they share its oracle and baseline runs)."""
    return run_problem(resolve(spec), impls, problem, parse_dtype(dtype), seed, device, tolerances, backward)


def check_groups(
    jobs: Sequence[tuple[OpSpec, Sequence[Impl], torch.dtype]],
    device: str,
    profile: Profile,
    tolerances: Tolerances,
    backward: bool,
    max_examples: int | None,
) -> tuple[list[list[Call]], list[list[int]]]:
    """The problems of each (spec, implementations, dtype) job of ``parity check`` (those drive() checks),
    grouped by op, dtype and compile key so that each group's kernels compile in one worker: the groups of
    calls (largest first), and for each call the index of its job."""
    keyed: dict[tuple[str, str, str], list[tuple[Call, int]]] = {}
    for index, (spec, impls, dtype) in enumerate(jobs):
        for problem, seed in plan(spec, profile, device, max_examples):
            key = (spec.name, dtype_name(dtype), json.dumps(spec.compile_key(problem), default=str))
            args = (spec.name, tuple(impls), problem, seed, dtype_name(dtype), device, tolerances, backward)
            keyed.setdefault(key, []).append(((check_case, args), index))
    ordered = sorted(keyed.values(), key=len, reverse=True)
    return [[call for call, _ in group] for group in ordered], [[index for _, index in group] for group in ordered]
