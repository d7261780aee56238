"""Where compile time goes, in every Python process of a run (spawned workers included): put this folder on
PYTHONPATH and set PARITY_COMPILE_LOG to a file; each Triton compilation (kernel, seconds) and each Helion
binding that traced a kernel anew (kernel, seconds) is appended to it as a JSON line with the process id.
Summarize with ``python bench/compile_log/summary.py LOG``."""

from __future__ import annotations

import os

if os.environ.get("PARITY_COMPILE_LOG"):
    import functools
    import json
    import time

    _LOG = os.environ["PARITY_COMPILE_LOG"]

    def _write(kind: str, name: str, seconds: float, key: str = "") -> None:
        with open(_LOG, "a") as f:
            f.write(
                json.dumps(
                    {
                        "pid": os.getpid(),
                        "kind": kind,
                        "name": name,
                        "s": round(seconds, 3),
                        "key": key,
                        "t": round(time.time(), 2),
                    }
                )
                + "\n"
            )

    def _install() -> None:
        import triton.compiler as tc

        real_compile = tc.compile  # JITFunction.create_binder imports it from this package at first launch

        @functools.wraps(real_compile)
        def timed_compile(src, *args, **kwargs):
            start = time.perf_counter()
            try:
                return real_compile(src, *args, **kwargs)
            finally:
                name = getattr(getattr(src, "fn", None), "__name__", None) or getattr(src, "name", "?")
                _write("triton", str(name), time.perf_counter() - start)

        tc.compile = timed_compile
        import importlib

        hk = importlib.import_module("helion.runtime.kernel")  # the package rebinds the name "kernel"

        real_bind = hk.Kernel.bind

        @functools.wraps(real_bind)
        def timed_bind(self, args):
            start = time.perf_counter()
            bound = real_bind(self, args)
            seconds = time.perf_counter() - start
            if seconds > 0.05:
                _write("helion_bind", self.name, seconds)
            return bound

        hk.Kernel.bind = timed_bind

    _install()
