"""Benchmark every registered op's Helion port against the original mamba-ssm Triton kernel on the GPU.

For each op and shape: forward and forward+backward median times (triton.testing.do_bench, warm,
fresh random inputs from the op's own input generator, never zeros), the speed ratio, and the
floor of each kernel (bytes moved over measured copy bandwidth, matmul FLOPs over measured bf16
matmul rate) with the fraction of it reached. Prints a table; writes JSON.

    python bench/bench.py --json bench/results/h200-bench.json [--op chunk_scan] [--shape nemotron]

The Helion SSD forward kernels that are ops of their own (chunk_cumsum, chunk_state, state_passing, bmm_chunk,
chunk_scan) run with their default configs as ``helion``, and, where an SSD config names them, as
``helion-tuned`` with that kernel's config: the config promoted for ``ssd_combined`` at the shape's bucket on
this GPU, or the file given with ``--ssd-config`` (e.g. the tuner's config.json) at every shape.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import mixer  # bench/mixer.py: the SSD problem sizes, shared with the mixer benchmarks

from parity import device, lookup, registry
from parity.report import atomic_write
from parity.results import stamped
from parity.spec import Impl, OpSpec

SSD_SHAPES = {name: shape for name, shape in mixer.SHAPES.items() if name != "tiny"}
NORM_SHAPES = {name: mixer.norm_problem(shape) for name, shape in SSD_SHAPES.items()}


def ceilings() -> dict[str, float]:
    """Measured device-to-device copy bandwidth (bytes read + written per s) and bf16 matmul FLOP/s."""
    from triton.testing import do_bench

    src = torch.randn(512 * 1024 * 1024 // 2, device="cuda", dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    ms = do_bench(lambda: dst.copy_(src), return_mode="median")
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    mm = do_bench(lambda: a @ b, return_mode="median")
    return {"copy_bytes_per_s": 2 * src.nbytes / (ms * 1e-3), "bf16_flops_per_s": 2 * 8192**3 / (mm * 1e-3)}


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, list | tuple):
        return [t for v in value for t in _tensors(v)]
    return []


def time_impl(spec: OpSpec, fn: Callable[..., Any], inputs: dict[str, Any]) -> dict[str, Any]:
    """Forward and forward+backward medians, bytes touched, and peak memory of one fwd+bwd."""
    from triton.testing import do_bench

    out = fn(**inputs)
    moved = sum(t.nbytes for t in _tensors(list(inputs.values()))) + sum(t.nbytes for t in _tensors(out))
    result: dict[str, Any] = {"fwd_ms": do_bench(lambda: fn(**inputs), return_mode="median"), "bytes": moved}
    names = [n for n in spec.grad_inputs if isinstance(inputs.get(n), torch.Tensor)]
    if names:
        leaves = {k: (v.detach().clone().requires_grad_(True) if k in names else v) for k, v in inputs.items()}
        outs = [t for t in _tensors(fn(**leaves)) if t.requires_grad]
        grads = [torch.randn_like(t) for t in outs]

        def fwd_bwd() -> None:
            ys = [t for t in _tensors(fn(**leaves)) if t.requires_grad]
            torch.autograd.grad(ys, [leaves[n] for n in names], grads, allow_unused=True)

        try:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            fwd_bwd()
            torch.cuda.synchronize()
            result["peak_mem_bytes"] = torch.cuda.max_memory_allocated()
            result["fwd_bwd_ms"] = do_bench(fwd_bwd, return_mode="median")
        except Exception as exc:  # a port without backward yet: say so in the results
            result["fwd_bwd_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
    return result


SSD_KERNEL_OPS = ("chunk_cumsum", "chunk_state", "state_passing", "bmm_chunk", "chunk_scan")
"""Ops whose Helion kernel is the kernel of the same name in the ssd_combined config."""


def ssd_config(problem: dict[str, Any], path: str | None) -> dict[str, Any] | None:
    """The ssd_combined config to take kernel configs from: the file ``path``, else the one promoted for the
    problem's bucket on this GPU (None without an entry)."""
    if path:
        config = json.loads(Path(path).read_text())
        if not isinstance(config, dict):
            raise SystemExit(f"bench: --ssd-config {path} must be a JSON object")
        return config
    from kernels import ssd_combined

    bucket = ssd_combined.store_bucket(
        problem["headdim"], problem["dstate"], problem["chunk_size"], problem["nheads"] // problem["ngroups"]
    )
    target = "kernels.ssd_combined:mamba_chunk_scan_combined"
    return lookup.promoted_config("ssd_combined", target, "bfloat16", bucket, "cuda")


def tuned_impls(spec: OpSpec, config: dict[str, Any] | None) -> list[Impl]:
    """``helion-tuned``: the op's Helion implementation with its kernel's config from ``config``, if it has one."""
    helion = spec.impls().get("helion")
    if spec.name not in SSD_KERNEL_OPS or helion is None or not config or spec.name not in config:
        return []
    return [dataclasses.replace(helion, name="helion-tuned", config=dict(config[spec.name]))]


def bench_op(
    spec: OpSpec, shape_name: str, problem: dict[str, Any], ceil: dict[str, float], ssd_config_path: str | None = None
) -> dict[str, Any]:
    """Every implementation of one op at one shape (bf16 inputs), and the tuned SSD kernel (:func:`tuned_impls`)."""
    inputs = spec.make_inputs(problem, torch.bfloat16, 0, torch.device("cuda"))
    flops = spec.flops(problem) if spec.flops else 0.0
    row: dict[str, Any] = {"op": spec.name, "shape": shape_name, "problem": problem, "flops": flops, "impls": {}}
    impls: list[Impl] = [i for i in spec.impls().values() if "-cfg" not in i.name]
    if spec.name in SSD_KERNEL_OPS:
        impls += tuned_impls(spec, ssd_config(problem, ssd_config_path))
    for impl in impls:
        try:
            timing = time_impl(spec, impl.load(), inputs)
        except Exception as exc:
            row["impls"][impl.name] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
            continue
        floor_ms = max(timing["bytes"] / ceil["copy_bytes_per_s"], flops / ceil["bf16_flops_per_s"]) * 1e3
        timing["floor_ms"] = floor_ms
        timing["fraction_of_floor"] = floor_ms / timing["fwd_ms"]
        row["impls"][impl.name] = timing
    base = row["impls"].get("triton", {}).get("fwd_ms")
    for timing in row["impls"].values():
        if base and "fwd_ms" in timing:
            timing["speedup_vs_triton"] = base / timing["fwd_ms"]
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--op", action="append", default=[])
    parser.add_argument("--shape", action="append", default=[])
    parser.add_argument("--json", dest="json_path", default=None)
    parser.add_argument(
        "--ssd-config", default=None, help="ssd_combined config whose kernel configs the SSD kernel ops also run with"
    )
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("bench: needs a CUDA GPU", file=sys.stderr)
        return 2
    device.configure("cuda")
    from reference import mamba_triton

    mamba_triton.autotune_as_shipped()  # mamba-ssm as users run it, not pinned to the parity baseline's record
    specs = registry.load()
    ceil = ceilings()
    rows = []
    for name in args.op or sorted(specs):
        spec = specs[name]
        shapes = NORM_SHAPES if name == "layernorm_gated" else SSD_SHAPES
        for shape_name in args.shape or list(shapes):
            rows.append(bench_op(spec, shape_name, shapes[shape_name], ceil, args.ssd_config))
            torch.cuda.empty_cache()
    header = ("op", "shape", "impl", "fwd ms", "fwd+bwd", "vs triton", "floor ms", "of floor")
    print(f"{header[0]:16} {header[1]:11} {header[2]:12} " + " ".join(f"{h:>9}" for h in header[3:]))
    for row in rows:
        for impl, t in row["impls"].items():
            if "error" in t:
                print(f"{row['op']:16} {row['shape']:11} {impl:12} error: {t['error'][:80]}")
                continue
            fb = f"{t['fwd_bwd_ms']:8.3f}" if "fwd_bwd_ms" in t else f"{'-':>8}"
            print(
                f"{row['op']:16} {row['shape']:11} {impl:12} {t['fwd_ms']:8.3f} {fb} "
                f"{t.get('speedup_vs_triton', float('nan')):9.2f} {t['floor_ms']:8.3f} {t['fraction_of_floor']:8.2f}"
            )
    meta = {
        "command": " ".join([sys.executable.split("/")[-1], *sys.argv]),
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "ceilings": ceil,
    }
    if args.json_path:
        atomic_write(args.json_path, json.dumps(stamped("bench", {"meta": meta, "rows": rows}), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
