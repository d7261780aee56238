"""Time an op's training step with Helion's default (int32) index builds and with the int64 twins (issue 18).

One op's training step (forward and backward, the Helion port with its default configs) at its training shape,
with every kernel's default build (int32 offsets at that shape), then with every kernel's ``index_dtype=torch.int64``
twin (which ``kernels.launch`` runs only where offsets pass 2**31), then the default builds again. The int64 run
lowers ``kernels.launch.INT32_MAX`` to -1, so every launch takes the int64 twin. Median ms with triton's do_bench.

    python bench/index_dtype.py --op ssd_combined --op layernorm_gated --json out.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernels import launch
from parity import device, registry
from parity.report import atomic_write
from parity.runner import make_inputs
from parity.tune import cuda_timer, training_step


def time_op(op: str, dtype: torch.dtype) -> dict[str, Any]:
    """Median ms of the op's training step at its training shape with the default builds and the int64 twins."""
    spec = registry.load()[op]
    if not spec.training_problems:
        raise SystemExit(f"index_dtype: op {op!r} has no training shape")
    problem = dict(spec.training_problems[0])
    step = training_step(spec, spec.impl("helion"), make_inputs(spec, problem, dtype, 0, "cuda"))
    times: dict[str, float] = {}
    limit = launch.INT32_MAX
    for name, int32_max in (("default", limit), ("int64", -1), ("default_again", limit)):
        launch.INT32_MAX = int32_max
        launch._COMPILED.clear()
        try:
            step()  # compile outside the timing
            torch.cuda.synchronize()
            times[name] = cuda_timer(step)
        finally:
            launch.INT32_MAX = limit
    default = min(times["default"], times["default_again"])
    return {
        "op": op,
        "problem": problem,
        "dtype": str(dtype),
        "ms": times,
        "int64_over_default": times["int64"] / default,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--op", action="append", default=[], help="ops to time, in order (default ssd_combined)")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--json", dest="json_path", default=None)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("index_dtype: needs a CUDA GPU", file=sys.stderr)
        return 2
    device.configure("cuda")
    results = []
    for op in args.op or ["ssd_combined"]:
        result = time_op(op, getattr(torch, args.dtype))
        ms = result["ms"]
        print(
            f"{op}: default {ms['default']:.3f} ms (again {ms['default_again']:.3f}), int64 {ms['int64']:.3f} ms, "
            f"x{result['int64_over_default']:.3f}",
            flush=True,
        )
        results.append(result)
    if args.json_path:
        atomic_write(
            Path(args.json_path), json.dumps({"format": "index-dtype-bench", "results": results}, indent=1) + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
