"""How long the gate takes: one config of each op over at least 50 generated shapes, forward and backward,
compilation included (the gpu profile plus the op's training shapes), with the number of Triton compilations
it caused in this process (Helion's generated kernels and mamba-ssm's baseline alike; for every process,
workers included, see bench/compile_log) and the number of compile groups (parity.spec.OpSpec.compile_key).

    python bench/gate_speed.py --op layernorm_gated --op ssd_combined --examples 50 --workers 12 --json out.json
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from parity import device, registry, tolerances
from parity.gate import gate
from parity.profiles import get_profile
from parity.report import atomic_write
from parity.results import stamped


def count_compilations() -> collections.Counter[str]:
    """A counter of Triton compilations by kernel name, filled from now on (Triton's post-compile hook)."""
    from triton import knobs

    compiled: collections.Counter[str] = collections.Counter()

    def hook(*, fn: Any, **_: Any) -> None:
        compiled[fn.name] += 1

    knobs.runtime.jit_post_compile_hook = hook
    return compiled


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--op", action="append", default=[], help="ops to gate, in order (default layernorm_gated)")
    parser.add_argument("--impl", default="helion")
    parser.add_argument("--examples", type=int, default=50)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--workers", type=int, default=1, help="processes the gate's problems are spread over")
    parser.add_argument("--json", dest="json_path", default=None)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("gate_speed: needs a CUDA GPU", file=sys.stderr)
        return 2
    device.configure("cuda")
    specs = registry.load()
    tols = tolerances.load(specs=specs)
    compiled = count_compilations()
    results = []
    for op in args.op or ["layernorm_gated"]:
        spec = specs[op]
        start = time.perf_counter()
        done = 0

        def progress(case: Any, start: float = start) -> None:
            nonlocal done
            done += 1
            print(
                f"  [{done}] {time.perf_counter() - start:6.1f} s {'ok  ' if case.passed else 'FAIL'} "
                f"{json.dumps(case.problem, sort_keys=True)}",
                flush=True,
            )

        report = gate(
            spec,
            spec.impl(args.impl),
            "cuda",
            get_profile("gpu"),
            tols,
            [getattr(torch, args.dtype)],
            max_examples=args.examples,
            on_result=progress,
            workers=args.workers,
        )
        seconds = time.perf_counter() - start
        shapes = {json.dumps(c.problem, sort_keys=True) for c in report.cases}
        groups = {json.dumps(spec.compile_key(c.problem), default=str) for c in report.cases}
        from reference.mamba_triton import BASELINE_CONFIGS

        result = {
            "op": op,
            "impl": args.impl,
            "dtype": args.dtype,
            "workers": args.workers,
            "seconds": round(seconds, 1),
            "cases": len(report.cases),
            "distinct_shapes": len(shapes),
            "compile_groups": len(groups),
            "passed": report.passed,
            "determinism": report.determinism,
            "timing": report.timing,
            "triton_compilations": sum(compiled.values()),
            "compilations_by_kernel": dict(compiled),
            "baseline_configs": dict(BASELINE_CONFIGS),
            "gpu": torch.cuda.get_device_name(),
            "command": " ".join(["python", *sys.argv]),
            "failures": [c.message() for c in report.cases if not c.passed][:5],
        }
        compiled.clear()
        results.append(result)
        print(
            json.dumps(
                {k: v for k, v in result.items() if k not in ("failures", "compilations_by_kernel", "baseline_configs")}
            ),
            flush=True,
        )
        for failure in result["failures"]:
            print(failure, flush=True)
        if args.json_path:
            atomic_write(args.json_path, json.dumps(stamped("gate-speed", {"results": results}), indent=1) + "\n")
    return 0 if all(r["passed"] for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
