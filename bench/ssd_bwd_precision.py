"""Precision of the SSD backward's decay gradients: Helion vs mamba-ssm, both against the fp64 oracle.

For each chunk size, seed and Helion config, judges ``ssd_combined`` forward and backward the way the gate
does (``parity.runner.run_problem``: the registry's inputs, the fp64 oracle, mamba-ssm's Triton kernels as
the baseline, the NaN poison, tolerances.toml) and records per output and gradient the max-abs error of
Helion and of mamba-ssm, their ratio, the fp32/bf16 ulp at max|oracle| and the gate's bound and verdict
(``parity.compare.bound``). One line per case is printed as it goes and the JSON is rewritten after each seed
(a time-limited run keeps what it measured); the summary gives, per config, the median and largest per-seed
ratio of grad.A and grad.dt_bias and each implementation's worst error relative to max|oracle|. Exit 1 if any
grad.A / grad.dt_bias ratio exceeds ``--max-ratio`` (``inf``: gate verdicts only) or any case fails the gate.

``--wide-dt`` sets the problem's value ranges to what training sees (issue 12): dt after softplus from
1e-4 to 5 and |A| from 1e-2 to 16 (the ``dt_range`` / ``A_range`` fields of ops/ssd.py; a problem
that gives them keeps its own). ``--chunk-sizes`` sweeps the chunk size; ``--block-sizes`` runs one config
per block size, that size for every chunk-row, chunk-column and dstate tile of every Helion kernel (headdim
whole): a numerics cause shows at every block size and under the CPU interpreter on the same inputs, a
miscompile at one tile width on one GPU only.

    python bench/ssd_bwd_precision.py --device cpu --dtype float32 --wide-dt --seeds 0-19 \\
        --problem '{"batch":2,"seqlen":80,...}' --json bench/results/cpu-ssd-bwd-precision.json
    python bench/ssd_bwd_precision.py --device cuda --dtype bfloat16 --seeds 0-19
    python bench/ssd_bwd_precision.py --device cuda --dtype bfloat16 --seeds 0 --chunk-sizes 32,64,128 \\
        --block-sizes 32,64,128
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from parity import device as parity_device
from parity.report import atomic_write
from parity.results import stamped

REPRODUCER = {
    "batch": 2,
    "seqlen": 512,
    "chunk_size": 64,
    "nheads": 8,
    "ngroups": 2,
    "headdim": 32,
    "dstate": 64,
    "D": "h",
    "dt_bias": True,
    "dt_softplus": True,
}
"""Issue 12's H200 bf16 reproducer (seed 0 failed grad.A: 0.286 vs bound 0.102, mamba-ssm 0.047)."""

WIDE = {"dt_range": [1e-4, 5.0], "A_range": [1e-2, 16.0]}
"""The value ranges of ``--wide-dt`` (the widest dt_range and A_range ops/ssd.py draws)."""
RATIO_QUANTITIES = ("grad.A", "grad.dt_bias")
"""The gradients whose error ratio to mamba-ssm's is bounded by ``--max-ratio`` (issue 12, part 1)."""


def block_config(block: int, headdim: int) -> dict[str, Any]:
    """A combined config with ``block`` for every chunk-row, chunk-column and dstate tile of the forward and
    backward kernels, the whole headdim in one tile (each kernel's block_sizes in its tile order, as
    ``kernels.ssd_combined.tuning_configs`` lays them out); chunk_cumsum and bwd_ddt (a head block only) keep their
    defaults."""

    def cfg(*sizes: int) -> dict[str, Any]:
        return {"block_sizes": list(sizes), "num_warps": 4, "num_stages": 2}

    return {
        "chunk_state": cfg(headdim, block, block),
        "bmm_chunk": cfg(block, block, 64),
        "chunk_scan": cfg(block, headdim, block, block),
        "state_passing": {"block_sizes": [64], "num_warps": 1},
        "bwd_states": cfg(headdim, block, block),
        "bwd_dx": cfg(block, headdim, block, block),
        "bwd_dcb": cfg(block, block, headdim),
        "bwd_dc": cfg(block, block, headdim, block),
        "bwd_db": cfg(block, block, headdim, block),
    }


def named_config(name: str, headdim: int) -> dict[str, Any] | None:
    """``default`` -> None (the store's config on CUDA, else each kernel's default), ``cfgN`` ->
    ``kernels.ssd_combined.CONFIGS[N]``, ``blkN`` -> :func:`block_config` (N, headdim)."""
    if name == "default":
        return None
    if name.startswith("cfg"):
        from kernels.ssd_combined import CONFIGS

        return CONFIGS[int(name[3:])]
    if name.startswith("blk"):
        return block_config(int(name[3:]), headdim)
    raise SystemExit(f"unknown config name {name!r}: expected default, cfgN or blkN")


def ulp(value: float, dtype: torch.dtype) -> float:
    """The spacing of ``dtype`` at ``value`` (the records give it at max|oracle|: a correctly rounded result of
    that size is off by up to half of it)."""
    info = torch.finfo(dtype)
    if value == 0.0:
        return info.tiny
    return info.eps * 2.0 ** (math.frexp(abs(value))[1] - 1)


def evaluate(
    problem: Mapping[str, Any],
    dtype: torch.dtype,
    seed: int,
    device: str,
    configs: Mapping[str, Mapping[str, Any] | None],
) -> list[dict[str, Any]]:
    """One record per Helion config: {config, quantities: {name: {helion, mamba, ratio, bound, passed}},
    errors, passed}, each config judged by the gate (``parity.runner.run_problem``: registry inputs, NaN
    poison, tolerances.toml) on one problem, dtype and seed; the oracle and mamba-ssm run once for all."""
    from parity import registry, tolerances
    from parity.runner import run_problem
    from parity.spec import Impl

    spec = registry.get("ssd_combined")
    tol = tolerances.load(specs=registry.load())
    records = []
    for label, config in configs.items():
        impl = Impl(f"helion-{label}", "kernels.ssd_combined:mamba_chunk_scan_combined", config=config)
        [case] = run_problem(spec, [impl], problem, dtype, seed, device, tol)
        quantities = {}
        for q in case.quantities:
            mamba = None if q.baseline is None else q.baseline.max_abs
            quantities[q.name] = {
                "helion": q.candidate.max_abs,
                "mamba": mamba,
                "ratio": None if mamba is None else q.candidate.max_abs / max(mamba, 1e-300),
                "bound": q.bound,
                "passed": q.passed,
                "oracle_max_abs": q.candidate.oracle_max_abs,
                "ulp": ulp(q.candidate.oracle_max_abs, dtype),
            }
        records.append(
            {"config": label, "quantities": quantities, "errors": case.errors + case.notes, "passed": case.passed}
        )
    return records


def summarize(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per ratio quantity over ``records`` (one config, several seeds): the median and largest per-seed ratio,
    and each implementation's worst error relative to the seed's max|oracle| (a scale-free aggregate)."""
    summary = {}
    for name in RATIO_QUANTITIES:
        qs = [r["quantities"][name] for r in records if name in r["quantities"] and r["quantities"][name]["mamba"]]
        if not qs:
            continue
        ratios = [q["ratio"] for q in qs]
        summary[name] = {
            "median_ratio": statistics.median(ratios),
            "max_ratio": max(ratios),
            "worst_relative": {
                who: max(q[who] / max(q["oracle_max_abs"], 1e-300) for q in qs) for who in ("helion", "mamba")
            },
        }
    return summary


def parse_seeds(text: str) -> list[int]:
    """``"0-19"``, ``"3"`` or ``"0,2,5-7"`` -> the seeds."""
    seeds: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        seeds.extend(range(int(lo), int(hi or lo) + 1))
    return seeds


def _ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v]


def describe(record: dict[str, Any], max_ratio: float) -> str:
    """One line: the ratio quantities' errors, then any gate failure."""
    parts = []
    for name in RATIO_QUANTITIES:
        q = record["quantities"].get(name)
        if q is None:
            continue
        flag = "" if q["ratio"] is None or q["ratio"] <= max_ratio else " RATIO>" + f"{max_ratio:g}"
        if q["mamba"] is None:  # no baseline error for this quantity (the baseline failed to run)
            mamba = "mamba n/a"
        else:
            ulps = f"{q['helion'] / q['ulp']:.1f} vs {q['mamba'] / q['ulp']:.1f} ulp"
            mamba = f"mamba {q['mamba']:.3e} ratio {q['ratio']:.2f} ({ulps})"
        parts.append(
            f"{name} helion {q['helion']:.3e} {mamba} bound {q['bound']:.3e} {'ok' if q['passed'] else 'FAIL'}{flag}"
        )
    failed = [f"{n} {q['helion']:.3e} > {q['bound']:.3e}" for n, q in record["quantities"].items() if not q["passed"]]
    gate = "gate PASS" if record["passed"] else "gate FAIL: " + "; ".join(failed + record["errors"])[:400]
    return " | ".join([*parts, gate])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problem", default=json.dumps(REPRODUCER), help="ssd_combined problem JSON")
    parser.add_argument("--seeds", default="0-19", help='e.g. "0-19" or "0,3,5-7"')
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--device", default="cpu", choices=parity_device.DEVICES)
    parser.add_argument("--wide-dt", action="store_true", help=f"value ranges {WIDE} unless the problem has its own")
    parser.add_argument("--chunk-sizes", type=_ints, default=None, help="sweep the problem's chunk_size, e.g. 32,64")
    parser.add_argument("--block-sizes", type=_ints, default=None, help="adds blkN configs, e.g. 32,64,128")
    parser.add_argument(
        "--configs",
        default=None,
        help="Helion configs by name: default (the store's on CUDA, else each kernel's default), cfgN "
        "(kernels.ssd_combined.CONFIGS[N]), blkN (block_config(N)); default: default, unless --block-sizes or "
        "--config is given",
    )
    parser.add_argument("--config", default=None, help="one explicit combined Helion config (JSON)")
    parser.add_argument("--max-ratio", type=float, default=1.2, help="exit 1 above this grad.A/dt_bias ratio")
    parser.add_argument("--json", default=None, help="write every record here (rewritten after each seed)")
    args = parser.parse_args(argv)

    parity_device.configure(args.device)
    from parity.spec import parse_dtype

    dtype = parse_dtype(args.dtype)
    base = json.loads(args.problem)
    if args.wide_dt:
        base = {**WIDE, **base}
    names = [n for n in (args.configs or "").split(",") if n] + [f"blk{b}" for b in args.block_sizes or []]
    if not names and not args.config:
        names = ["default"]
    configs = {name: named_config(name, base["headdim"]) for name in names}
    if args.config:
        configs["explicit"] = json.loads(args.config)
    seeds = parse_seeds(args.seeds)
    command = "python bench/ssd_bwd_precision.py " + shlex.join(sys.argv[1:] if argv is None else argv)
    report: dict[str, Any] = {
        "command": command,
        "device": args.device,
        "dtype": args.dtype,
        "problem": base,
        "seeds": seeds,
        "configs": configs,
        "max_ratio": args.max_ratio,
        "torch": torch.__version__,
        "records": [],
    }
    if args.device == "cuda":
        report["gpu"] = torch.cuda.get_device_name()
    bad = 0
    start = time.perf_counter()
    for chunk in args.chunk_sizes or [base["chunk_size"]]:
        problem = {**base, "chunk_size": chunk}
        for seed in seeds:
            t0 = time.perf_counter()
            for record in evaluate(problem, dtype, seed, args.device, configs):
                ratios = [record["quantities"][n]["ratio"] for n in RATIO_QUANTITIES if n in record["quantities"]]
                record.update(seed=seed, chunk_size=chunk, seconds=round(time.perf_counter() - t0, 2))
                record["ratio_ok"] = all(r is None or r <= args.max_ratio for r in ratios)
                bad += int(not (record["passed"] and record["ratio_ok"]))
                report["records"].append(record)
                print(f"seed {seed} cs{chunk} {record['config']}: {describe(record, args.max_ratio)}", flush=True)
            if args.json:
                atomic_write(args.json, json.dumps(stamped("precision", report), indent=1) + "\n")
    report["summary"] = {
        "cases": len(report["records"]),
        "failing_cases": bad,
        "per_config": {label: summarize([r for r in report["records"] if r["config"] == label]) for label in configs},
        "seconds": round(time.perf_counter() - start, 1),
    }
    if args.json:
        atomic_write(args.json, json.dumps(stamped("precision", report), indent=1) + "\n")
    print(f"{len(report['records'])} cases, {bad} failing (ratio > {args.max_ratio:g} or gate)", flush=True)
    for label, per_quantity in report["summary"]["per_config"].items():
        for name, q in per_quantity.items():
            print(
                f"  {label} {name}: ratio median {q['median_ratio']:.2f}, max {q['max_ratio']:.2f}; worst error / "
                f"max|oracle| helion {q['worst_relative']['helion']:.2e}, mamba-ssm {q['worst_relative']['mamba']:.2e}",
                flush=True,
            )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
