"""The host's side of a GPU step: how long the host takes to issue it (:func:`issue_ms`) and where that time goes
(:func:`host_profile`). A step whose issue time is near its device time is bound by the host: its kernels wait on
launches, and faster kernels do not make it faster."""

from __future__ import annotations

import cProfile
import pstats
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def issue_ms(fn: Callable[[], Any], synchronize: Callable[[], None], calls: int = 10) -> float:
    """Milliseconds the host takes to issue one ``fn()``: ``calls`` calls back to back after a synchronize, timed
    without waiting for the device."""
    synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    issued = time.perf_counter() - start
    synchronize()
    return issued / calls * 1e3


def host_profile(
    step: Callable[[], Any], calls: int, synchronize: Callable[[], None], top: int = 30
) -> list[dict[str, Any]]:
    """The host's time by function over ``calls`` steps (cProfile): each function's own and cumulative time and its
    calls per step, the ``top`` largest own times first, also printed. From Python 3.12 cProfile sees every thread,
    so a backward that autograd runs on its device thread is included; before it, only this thread is."""
    profiler = cProfile.Profile()
    synchronize()
    profiler.enable()
    try:
        for _ in range(calls):
            step()
    finally:
        profiler.disable()
    synchronize()
    rows = []
    for (path, line, function), (_, ncalls, own, cumulative, _) in pstats.Stats(profiler).stats.items():  # type: ignore[attr-defined]
        rows.append(
            {
                "function": f"{Path(path).name}:{line}({function})" if line else function,
                "calls": ncalls / calls,
                "own_us": own / calls * 1e6,
                "cumulative_us": cumulative / calls * 1e6,
            }
        )
    rows.sort(key=lambda row: -row["own_us"])
    threads = "every thread" if sys.version_info >= (3, 12) else "this thread only (Python < 3.12)"
    print(f"host profile: {sum(r['own_us'] for r in rows):.0f} us per step under cProfile, {threads}")
    for row in rows[:top]:
        own, cumulative, count = row["own_us"], row["cumulative_us"], row["calls"]
        print(f"  {own:8.1f} us own {cumulative:8.1f} us cum {count:6.1f}x  {row['function'][:90]}")
    return rows[:top]
