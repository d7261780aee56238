"""Where the Nemotron mixer's time goes, GPU kernel by GPU kernel, Helion ports vs mamba-ssm.

For each backend (bench/mixer.py's: SSD combined then the gated RMSNorm, bf16) the forward and the
forward+backward run ``--iters`` times each under torch.profiler (after two warm runs); every CUDA kernel
event's device interval is summed per kernel name and divided by the iterations. The backward's kernels
are forward+backward minus forward, name by name (the backward's recomputed forward kernels stay in it).
Kernels that are neither backend's Triton kernels (PyTorch's elementwise, reduction, copy and fill kernels:
the glue) are listed too, so that a restructure sees the whole cost. Profiled times carry the profiler's
overhead: the ratios are the point; bench/mixer.py's do_bench times are the reference numbers.

    python bench/kernel_times.py --json bench/results/h200-kernel-times.json [--shape nemotron]
    python bench/kernel_times.py --recount SAVED.json [--json OUT.json]   # a saved result paired again, no GPU
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import mixer  # bench/mixer.py: the mixer's inputs, backends and steps

from parity import device as parity_device
from parity.report import atomic_write
from parity.results import HOST_PHASES, stamped

KERNEL_TARGET = 1.0
"""The tuning issue's target: every Helion kernel at least as fast as its mamba-ssm counterpart."""

PHASES = ("fwd", "bwd")

Table = dict[str, dict[str, float]]
"""Kernel name -> {"calls": launches per iteration, "us": microseconds per iteration}."""

COUNTERPARTS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "chunk_cumsum": (("_helion_chunk_cumsum_kernel",), ("_chunk_cumsum_fwd_kernel",)),
    "chunk_state": (("_helion_chunk_state_kernel",), ("_chunk_state_fwd_kernel",)),
    "state_passing": (("_helion_state_passing_kernel",), ("_state_passing_fwd_kernel",)),
    "bmm_chunk": (("_helion_bmm_chunk_kernel",), ("_bmm_chunk_fwd_kernel",)),
    "chunk_scan": (("_helion_chunk_scan_kernel",), ("_chunk_scan_fwd_kernel",)),
    "norm_fwd": (("_helion_layer_norm_fwd_kernel",), ("_layer_norm_fwd_1pass_kernel",)),
    "bwd_states": (("_helion_states_bwd_kernel",), ("_chunk_scan_bwd_dstates_kernel", "_state_passing_bwd_kernel")),
    "bwd_dx": (("_helion_dx_kernel",), ("_chunk_scan_chunk_state_bwd_dx_kernel",)),
    "bwd_dB_dC_dCB": (
        ("_helion_dcb_kernel", "_helion_dc_kernel", "_helion_db_kernel"),
        (
            "_chunk_scan_bwd_dcb_kernel",
            "_chunk_scan_bwd_dc_kernel",
            "_chunk_state_bwd_db_kernel",
            "_bmm_chunk_bwd_kernel",
            "_chunk_scan_bwd_ddAcs_stable_kernel",
        ),
    ),
    "bwd_ddt": (("_helion_ddt_kernel",), ("_chunk_cumsum_bwd_kernel",)),
    "norm_bwd": (("_helion_layer_norm_bwd_kernel", "_helion_partials_sum_kernel"), ("_layer_norm_bwd_kernel",)),
}
"""Each part of the mixer's work -> (the Helion kernels that do it, mamba-ssm's kernels that do it). The backward's
dB, dC and dCB (with the intra-chunk decay gradient) are one part: the two ports split that work differently, and
mamba-ssm launches ``_bmm_chunk_bwd_kernel`` for both dB and dC. bwd_ddt is the chunk_cumsum backward (ddt += dA A,
dt's softplus and clamp, dA and ddt_bias): Helion's kernel also takes the per-step decay gradient's sums that
mamba-ssm does in PyTorch before its kernel, so those PyTorch kernels count to it too (:data:`GLUE`). What no part
names (PyTorch's glue: the adds of those sums, zero fills, Helion's partial sums of grad A, dt_bias and D) is the
rest, compared as a whole. norm_bwd's Helion side includes its partial sums' kernel; mamba-ssm sums its partials in
PyTorch, in its rest."""

GLUE: dict[str, tuple[str, ...]] = {"bwd_ddt": ("flip_kernel_impl", "tensor_kernel_scan_innermost_dim")}
"""Parts that also own PyTorch kernels, by a substring of the kernel's name, on either backend's side. mamba-ssm's
backward turns the gradient of dA_cumsum into the per-step gradient in PyTorch: a flip-cumsum-flip (ddA_prev) and a
cumsum after ``_chunk_state_bwd_db`` (ddA_next); in its backward no other flip or cumsum runs. Helion's
``_helion_ddt_kernel`` does both sums. Their adds (``ddA += ddA_next + ddA_prev``) are generic elementwise kernels
that other glue launches too, so they stay in the rest: mamba-ssm's side of bwd_ddt is the smaller for it."""


def part_of(name: str) -> str | None:
    """The part of :data:`COUNTERPARTS` that a kernel of either backend belongs to (None: the rest)."""
    for part, (helion_names, mamba_names) in COUNTERPARTS.items():
        if name in helion_names or name in mamba_names or any(glue in name for glue in GLUE.get(part, ())):
            return part
    return None


def kernel_table(events: Iterable[Any], iters: int) -> Table:
    """Per-iteration launches and device microseconds of each kernel among profiler ``events`` (those on the
    CUDA device; each event's ``time_range`` is its device interval)."""
    table: Table = {}
    for event in events:
        if event.device_type != torch.autograd.DeviceType.CUDA:
            continue
        row = table.setdefault(event.name, {"calls": 0.0, "us": 0.0})
        row["calls"] += 1 / iters
        row["us"] += event.time_range.elapsed_us() / iters
    return table


def difference(total: Table, part: Table) -> Table:
    """``total`` less ``part``, kernel by kernel; kernels left with no launches are dropped."""
    out: Table = {}
    for name, row in total.items():
        other = part.get(name, {"calls": 0.0, "us": 0.0})
        calls = row["calls"] - other["calls"]
        if calls > 1e-9:
            out[name] = {"calls": calls, "us": max(0.0, row["us"] - other["us"])}
    return out


def profiled(fn: Callable[[], Any], iters: int) -> Table:
    """The kernel table of ``iters`` calls of ``fn`` (two warm calls first, not profiled)."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:  # kernels are CUDA events
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
    return kernel_table(prof.events(), iters)


def host_and_wall(fn: Callable[[], Any], iters: int, sync: Callable[[], None]) -> dict[str, float]:
    """Median microseconds of one call of ``fn`` from an idle GPU: until it returns (``host_us``: Python, autograd
    and every launch issued) and until its work is done (``wall_us``, after ``sync``); two warm calls first.
    Where the host time nears the wall time and the kernels' sum falls short of it, the GPU waits on the host."""
    for _ in range(2):
        fn()
    host, wall = [], []
    for _ in range(iters):
        sync()
        start = time.perf_counter()
        fn()
        issued = time.perf_counter()
        sync()
        done = time.perf_counter()
        host.append(issued - start)
        wall.append(done - start)
    return {"host_us": statistics.median(host) * 1e6, "wall_us": statistics.median(wall) * 1e6}


def total_us(table: Table) -> float:
    return sum(row["us"] for row in table.values())


def _by_part(table: Table) -> dict[str, float]:
    """Microseconds per part of :data:`COUNTERPARTS` (``"rest"``: the kernels of none) among ``table``'s kernels."""
    parts: dict[str, float] = {}
    for name, row in table.items():
        part = part_of(name) or "rest"
        parts[part] = parts.get(part, 0.0) + row["us"]
    return parts


def counterpart_ratios(mamba: Table, helion: Table) -> dict[str, dict[str, float | None]]:
    """Per part of :data:`COUNTERPARTS` present in either table, and for the rest: mamba-ssm's and Helion's
    microseconds and mamba-ssm's over Helion's (None where a side has none of its kernels)."""
    helion_us, mamba_us = _by_part(helion), _by_part(mamba)
    rows: dict[str, dict[str, float | None]] = {}
    for part in [*COUNTERPARTS, "rest"]:
        if part not in helion_us and part not in mamba_us:
            continue
        h_us, m_us = helion_us.get(part, 0.0), mamba_us.get(part, 0.0)
        ratio = m_us / h_us if h_us > 0 and m_us > 0 else None
        rows[part] = {"mamba_us": m_us, "helion_us": h_us, "ratio": ratio}
    return rows


def print_counterparts(phase: str, rows: dict[str, dict[str, float | None]]) -> None:
    """One line per part: both times, the ratio and the tuning issue's per-kernel target (>= 1.0x)."""
    for part, row in rows.items():
        ratio = row["ratio"]
        verdict = "n/a" if ratio is None else ("met" if ratio >= KERNEL_TARGET else "MISSED")
        shown = "n/a" if ratio is None else f"{ratio:.2f}x"
        print(
            f"{phase} {part}: mamba-ssm {row['mamba_us']:.1f} us, Helion {row['helion_us']:.1f} us, {shown} "
            f"(target >= {KERNEL_TARGET}x: {verdict})"
        )


def print_table(backend: str, phase: str, table: Table) -> None:
    print(f"{backend} {phase}: {total_us(table):9.1f} us in {sum(r['calls'] for r in table.values()):.0f} launches")
    for name, row in sorted(table.items(), key=lambda item: -item[1]["us"]):
        print(f"  {row['us']:9.1f} us  x{row['calls']:<4.0f} {name[:110]}")


def recount(path: Path, json_path: str | None) -> int:
    """Print the counterparts of a saved kernel-times result under this module's pairing (no GPU); with
    ``json_path``, write the result again with them replaced (its profiled tables unchanged)."""
    try:
        payload = json.loads(path.read_text())
        mamba, helion = payload["backends"]["mamba"], payload["backends"]["helion"]
        counterparts = {phase: counterpart_ratios(mamba[phase], helion[phase]) for phase in PHASES}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        print(f"kernel_times: {path} is not a kernel-times result: {error!r}", file=sys.stderr)
        return 2
    for phase, rows in counterparts.items():
        print_counterparts(phase, rows)
    if json_path:
        payload["counterparts"] = counterparts
        payload.setdefault("meta", {})["recounted"] = " ".join([sys.executable.split("/")[-1], *sys.argv])
        atomic_write(json_path, json.dumps(payload, indent=1) + "\n")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=sorted(set(mixer.SHAPES) - {"tiny"}), default="nemotron")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--json", dest="json_path", default=None)
    parser.add_argument("--ssd-config", default=None, help="JSON file with the Helion SSD config (default: promoted)")
    parser.add_argument("--norm-config", default=None, help="JSON file with the Helion norm config (default: promoted)")
    parser.add_argument(
        "--recount", type=Path, help="a saved kernel-times JSON: its counterparts under this pairing (no GPU)"
    )
    args = parser.parse_args()
    if args.recount:
        return recount(args.recount, args.json_path)
    if not torch.cuda.is_available():
        print("kernel_times: needs a CUDA GPU", file=sys.stderr)
        return 2
    if args.iters < 1:
        print(f"kernel_times: --iters must be at least 1, got {args.iters}", file=sys.stderr)
        return 2
    configs = {"ssd": mixer.load_config(args.ssd_config), "norm": mixer.load_config(args.norm_config)}
    parity_device.configure("cuda")
    from reference import mamba_triton

    mamba_triton.autotune_as_shipped()  # mamba-ssm as users run it
    dev = torch.device("cuda")
    inputs = mixer.mixer_inputs(mixer.SHAPES[args.shape], torch.bfloat16, dev)
    results: dict[str, Any] = {}
    for name, backend in mixer.mixer_backends(configs).items():
        forward, fwd_bwd = mixer.mixer_step(backend, inputs)
        fwd = profiled(forward, args.iters)
        both = profiled(fwd_bwd, args.iters)
        bwd = difference(both, fwd)
        results[name] = {"fwd": fwd, "bwd": bwd, "fwd_us": total_us(fwd), "bwd_us": total_us(bwd)}
        print_table(name, "forward", fwd)
        print_table(name, "backward", bwd)
        for phase, fn, kernels in zip(HOST_PHASES, (forward, fwd_bwd), (fwd, both), strict=True):
            timed = host_and_wall(fn, args.iters, torch.cuda.synchronize)
            results[name][f"{phase}_host"] = timed
            print(
                f"{name} {phase}: host {timed['host_us']:.1f} us to issue, wall {timed['wall_us']:.1f} us, "
                f"kernels {total_us(kernels):.1f} us in {sum(r['calls'] for r in kernels.values()):.0f} launches"
            )
        torch.cuda.empty_cache()
    counterparts = {}
    for phase in PHASES:
        mamba_us, helion_us = results["mamba"][f"{phase}_us"], results["helion"][f"{phase}_us"]
        print(f"{phase}: mamba-ssm {mamba_us:.1f} us, Helion {helion_us:.1f} us, ratio {mamba_us / helion_us:.2f}x")
        counterparts[phase] = counterpart_ratios(results["mamba"][phase], results["helion"][phase])
        print_counterparts(phase, counterparts[phase])
    meta = {
        "command": " ".join([sys.executable.split("/")[-1], *sys.argv]),
        "gpu": torch.cuda.get_device_name(),
        "shape": args.shape,
        "iters": args.iters,
        "helion_configs": configs,
        "timing": "torch.profiler CUDA kernel intervals, per iteration; host/wall: perf_counter medians, unprofiled",
    }
    if args.json_path:
        payload = {"meta": meta, "backends": results, "counterparts": counterparts}
        atomic_write(args.json_path, json.dumps(stamped("kernel-times", payload), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
