"""Diagnostic: does Helion's autotuner compile candidates on this machine, outside parity's process state?

Autotunes the gated-norm forward kernel at the training shape (rows 16384, 8 groups of 512, bf16) in a fresh
process with one precompile mode (fork, spawn or none), a short budget and quick effort, printing the CPU
counts and thread count first. With fork, a watchdog asks every child process for its Python stack after
``--stacks-after`` seconds (faulthandler on SIGUSR1, written to ``--stacks``), to show where a compile waits.

    python bench/diag/autotune_probe.py fork --stacks /tmp/stacks.txt
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import signal
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def children(pid: int) -> list[int]:
    """Direct children of ``pid`` from /proc (Helion's compile children run in their own process groups)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=("fork", "spawn", "none"))
    parser.add_argument("--budget", type=int, default=30)
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--stacks", default=None)
    parser.add_argument("--stacks-after", type=float, default=35.0)
    parser.add_argument(
        "--parity-state",
        action="store_true",
        help="first judge the op at the training shape and capture its launches, as parity tune does",
    )
    args = parser.parse_args()
    import helion
    import torch

    from kernels.layernorm_gated import PHASES
    from parity import device, registry, tolerances
    from parity.runner import run_problem
    from parity.tune import capture

    device.configure("cuda")
    if args.parity_state:
        spec = registry.get("layernorm_gated")
        impl = spec.candidates[0]
        problem = dict(spec.training_problems[0])
        tols = tolerances.load()
        results = run_problem(spec, [impl], problem, torch.bfloat16, 0, "cuda", tols)
        capture(spec, impl, problem, torch.bfloat16, "cuda", PHASES)
        print(f"parity state: judged ({all(r.passed for r in results)}) and captured", flush=True)

    from kernels.layernorm_gated import layer_norm_fwd_kernel

    print(
        f"cpu_count {os.cpu_count()} affinity {len(os.sched_getaffinity(0))} "
        f"threads {threading.active_count()} tasks {len(os.listdir('/proc/self/task'))}",
        flush=True,
    )
    if args.stacks:
        sink = open(args.stacks, "a")  # kept open: the children inherit the descriptor
        faulthandler.register(signal.SIGUSR1, file=sink, all_threads=True)

        def watchdog() -> None:
            time.sleep(args.stacks_after)
            pids = children(os.getpid())
            print(f"watchdog: {len(pids)} children at {args.stacks_after:g} s: asking each for its stack", flush=True)
            for pid in pids[:4]:
                sink.write(f"\n==== child {pid}\n")
                sink.flush()
                try:
                    os.kill(pid, signal.SIGUSR1)
                except ProcessLookupError:
                    pass
                time.sleep(0.5)

        threading.Thread(target=watchdog, daemon=True).start()
    rows, groups, size = 16384, 8, 512
    dev = torch.device("cuda")
    x = torch.randn(rows, groups * size, device=dev, dtype=torch.bfloat16)
    z = torch.randn_like(x)
    w = torch.randn(groups * size, device=dev, dtype=torch.bfloat16)
    out = torch.empty_like(x)
    rstd = torch.empty(groups, rows, device=dev, dtype=torch.float32)
    call = (x, w, None, z, out, None, rstd, 1e-5, size, size, False, True)
    kernel = helion.kernel(
        layer_norm_fwd_kernel.fn,
        settings=layer_norm_fwd_kernel.settings.copy(
            static_shapes=True,
            autotune_effort="quick",
            autotune_budget_seconds=args.budget,
            autotune_precompile=None if args.mode == "none" else args.mode,
            autotune_precompile_jobs=args.jobs,
            autotune_progress_bar=False,
        ),
    )
    started = time.monotonic()
    try:
        config = kernel.autotune(list(call), force=True)
    except Exception as exc:
        print(f"PROBE FAIL {args.mode} {time.monotonic() - started:.0f} s {type(exc).__name__}: {exc}", flush=True)
        return
    print(f"PROBE OK {args.mode} {time.monotonic() - started:.0f} s {dict(config)}", flush=True)


if __name__ == "__main__":
    main()
