"""How long the gate takes: one config of one op over at least 50 generated shapes, forward and
backward, compilation included (the gpu profile plus the op's training shapes).

    python bench/gate_speed.py --op layernorm_gated --examples 50 --json bench/results/h200-gate-speed.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from parity import device, registry, tolerances
from parity.gate import gate
from parity.report import atomic_write
from parity.strategies import get_profile


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--op", default="layernorm_gated")
    parser.add_argument("--impl", default="helion")
    parser.add_argument("--examples", type=int, default=50)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--json", dest="json_path", default=None)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("gate_speed: needs a CUDA GPU", file=sys.stderr)
        return 2
    device.configure("cuda")
    specs = registry.load()
    spec = specs[args.op]
    tols = tolerances.load(specs=specs)
    start = time.perf_counter()
    report = gate(spec, spec.impl(args.impl), "cuda", get_profile("gpu"), tols, [getattr(torch, args.dtype)],
                  max_examples=args.examples)
    seconds = time.perf_counter() - start
    shapes = {json.dumps(c.problem, sort_keys=True) for c in report.cases}
    result = {"op": args.op, "impl": args.impl, "dtype": args.dtype, "seconds": seconds, "cases": len(report.cases),
              "distinct_shapes": len(shapes), "passed": report.passed, "gpu": torch.cuda.get_device_name(),
              "command": " ".join(["python", *sys.argv]),
              "failures": [c.message() for c in report.cases if not c.passed][:5]}
    print(json.dumps({k: v for k, v in result.items() if k != "failures"}))
    for failure in result["failures"]:
        print(failure)
    if args.json_path:
        atomic_write(args.json_path, json.dumps(result, indent=1) + "\n")
    return 0 if report.passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
