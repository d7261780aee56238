"""Benchmark the Nemotron-3-Nano Mamba-2 mixer, Helion ports against mamba-ssm's Triton kernels.

Two measurements at the mixer shape (b=2, L=8192, h=64, p=64, g=8, n=128, chunk 128, bf16), or at ``--shape``
(``SHAPES``: also the issue's other two bench shapes, long and small-head, which bench/bench.py shares):

1. the whole mixer, ``mamba_chunk_scan_combined`` (D, dt_bias, dt_softplus, no z) then the gated
   ``rmsnorm_fn`` (z gate, group_size h*p/g, norm_before_gate=False), forward and forward+backward
   through autograd (gradients of x, dt, A, B, C, D, dt_bias, z, weight), with the peak memory of one
   forward+backward and the gradients' max abs difference helion vs mamba (diagnostic only);
2. the gated RMSNorm backward alone (rows b*L, columns h*p), timed without its forward, against the
   bandwidth floor (bytes read and written over the measured device copy bandwidth).

Beside each mixer time, the host's time to issue one call ("host", :func:`host_ms`): where it is close to the
do_bench time, the call is bound by the host, not the kernels.

Times are triton.testing.do_bench medians on CUDA. ``--device cpu`` (Triton interpreter, one
perf_counter-timed call each, no peak memory, no floor) is a smoke test only, meant for ``--shape tiny``.
A backend that raises is recorded as ``{"error": ...}``, never fatal.

    python bench/mixer.py --json bench/results/h200-mixer.json
    python bench/mixer.py --device cpu --shape tiny --json /tmp/mixer.json
"""

from __future__ import annotations

import argparse
import functools
import importlib.metadata
import importlib.util
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # host_time, also when a test loads this file

from host_time import host_profile, issue_ms

from parity import device as parity_device
from parity.report import atomic_write
from parity.results import stamped

SHAPES: dict[str, dict[str, Any]] = {
    "nemotron": {
        "batch": 2,
        "seqlen": 8192,
        "chunk_size": 128,
        "nheads": 64,
        "ngroups": 8,
        "headdim": 64,
        "dstate": 128,
    },
    "long": {"batch": 1, "seqlen": 65536, "chunk_size": 128, "nheads": 32, "ngroups": 1, "headdim": 64, "dstate": 128},
    "small-head": {
        "batch": 4,
        "seqlen": 4096,
        "chunk_size": 256,
        "nheads": 128,
        "ngroups": 1,
        "headdim": 32,
        "dstate": 64,
    },
    "tiny": {"batch": 1, "seqlen": 64, "chunk_size": 16, "nheads": 4, "ngroups": 2, "headdim": 16, "dstate": 16},
}
"""SSD problem sizes; the norm runs over rows = batch * seqlen, columns = nheads * headdim, one group per
B/C group (group_size = nheads * headdim / ngroups)."""


def norm_problem(shape: dict[str, Any]) -> dict[str, Any]:
    """The mixer's gated RMSNorm at an SSD shape (ops.layernorm_gated's problem): rows batch * seqlen, one group of
    nheads * headdim / ngroups columns per B/C group, the z gate after the norm, no bias."""
    g = shape["ngroups"]
    return {
        "rows": shape["batch"] * shape["seqlen"],
        "ngroups": g,
        "group_size": shape["nheads"] * shape["headdim"] // g,
        "z": True,
        "norm_before_gate": False,
        "is_rms_norm": True,
        "bias": False,
    }


EPS = 1e-5
GRAD_NAMES = ("x", "dt", "A", "B", "C", "D", "dt_bias", "z", "weight")
TARGETS = {
    "norm_bwd_speedup_min": 2.5,
    "mixer_fwd_speedup_min": 1.1,
    "mixer_fwd_bwd_speedup_min": 1.5,
    "mixer_peak_mem_ratio_max": 1.0,
}
"""The tuning issue's targets: RMSNorm bwd >= 2.5x mamba-ssm, mixer forward >= 1.1x and forward+backward >= 1.5x,
Helion mixer peak memory <= mamba-ssm's."""

Backend = tuple[Callable[..., Any], Callable[..., Any]]


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc)[:300]}"


def timed(fn: Callable[[], Any], dev: torch.device) -> float:
    """Milliseconds of one ``fn()``: do_bench median on CUDA, one perf_counter-timed call on CPU."""
    if dev.type == "cuda":
        from triton.testing import do_bench

        return do_bench(fn, return_mode="median")
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e3


def host_ms(fn: Callable[[], Any], dev: torch.device) -> float | None:
    """Milliseconds the host takes to issue one ``fn()`` (CUDA only, :func:`host_time.issue_ms`). Near the do_bench
    time, the call is bound by the host (the device waits on launches); well below it, by the device."""
    return issue_ms(fn, torch.cuda.synchronize) if dev.type == "cuda" else None


def peak_memory(fn: Callable[[], Any], dev: torch.device) -> dict[str, int]:
    """Peak allocated bytes during one ``fn()`` after empty_cache (CUDA only), and the bytes allocated before."""
    if dev.type != "cuda":
        return {}
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return {"peak_mem_bytes": torch.cuda.max_memory_allocated(), "base_mem_bytes": base}


def _cotangent(shape: Sequence[int], dtype: torch.dtype, seed: int, dev: torch.device) -> torch.Tensor:
    """A standard-normal upstream gradient, drawn on the CPU with a fixed seed (the same on every device)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float32).to(device=dev, dtype=dtype)


def _max_abs_diffs(ours: dict[str, torch.Tensor], theirs: dict[str, torch.Tensor]) -> dict[str, float]:
    return {k: float((ours[k].float() - theirs[k].float()).abs().max()) for k in theirs if k in ours}


def _ratio(num: float | None, den: float | None) -> float | None:
    return num / den if num is not None and den else None


def _median(values: Sequence[float | None]) -> float | None:
    """The median of the values that were measured (None: a CPU run's host time)."""
    measured = sorted(v for v in values if v is not None)
    return statistics.median(measured) if measured else None


# ---------------------------------------------------------------------------------------------
# 1. The mixer: SSD combined + gated RMSNorm, forward and backward


def mixer_inputs(shape: dict[str, Any], dtype: torch.dtype, dev: torch.device) -> dict[str, Any]:
    """The SSD inputs (ops.ssd.ssd_raw_inputs: D per head, dt_bias, dt_softplus), the gate z and the norm weight
    (ops.layernorm_gated.inputs, z reshaped to (b, L, h*p)), and the upstream gradient dout; every
    differentiated tensor a leaf requiring grad."""
    from ops import layernorm_gated as norm_op
    from ops import ssd as ssd_op

    b, L, h, p, g = shape["batch"], shape["seqlen"], shape["nheads"], shape["headdim"], shape["ngroups"]
    problem = {**shape, "D": "h", "dt_bias": True, "dt_softplus": True}
    ssd = ssd_op.ssd_raw_inputs(problem, dtype, 0, dev)
    norm = norm_op.inputs(
        {
            "rows": b * L,
            "ngroups": g,
            "group_size": h * p // g,
            "z": True,
            "norm_before_gate": False,
            "is_rms_norm": True,
            "bias": False,
        },
        dtype,
        1,
        dev,
    )
    leaves = {k: ssd[k] for k in ("x", "dt", "A", "B", "C", "D", "dt_bias")}
    leaves["z"] = norm["z"].reshape(b, L, h * p)
    leaves["weight"] = norm["weight"]
    leaves = {k: v.detach().clone().requires_grad_(True) for k, v in leaves.items()}
    return {
        "leaves": leaves,
        "chunk_size": ssd["chunk_size"],
        "group_size": norm["group_size"],
        "dout": _cotangent((b, L, h * p), dtype, 2, dev),
    }


def mixer_step(
    backend: Backend, inputs: dict[str, Any]
) -> tuple[Callable[[], torch.Tensor], Callable[[], tuple[torch.Tensor, ...]]]:
    """(forward, forward+backward) of the mixer with one backend on ``inputs`` (:func:`mixer_inputs`)."""
    ssd_fn, norm_fn = backend
    t, cs, gs, dout = inputs["leaves"], inputs["chunk_size"], inputs["group_size"], inputs["dout"]
    b, L, h, p = t["x"].shape
    wrt = [t[n] for n in GRAD_NAMES]

    def forward() -> torch.Tensor:
        y = ssd_fn(
            t["x"], t["dt"], t["A"], t["B"], t["C"], cs, D=t["D"], z=None, dt_bias=t["dt_bias"], dt_softplus=True
        )
        return norm_fn(
            y.reshape(b, L, h * p), t["weight"], None, z=t["z"], eps=EPS, group_size=gs, norm_before_gate=False
        )

    def fwd_bwd() -> tuple[torch.Tensor, ...]:
        return torch.autograd.grad(forward(), wrt, dout)

    return forward, fwd_bwd


def mixer_backends(configs: dict[str, Any]) -> dict[str, Backend]:
    """mamba-ssm's (ssd, norm) functions and Helion's drop-ins with ``configs`` ("ssd", "norm"; None: promoted)."""
    from kernels import layernorm_gated as helion_norm
    from kernels import ssd_combined as helion_ssd
    from reference import mamba_triton

    return {
        "mamba": (mamba_triton.mamba_chunk_scan_combined, mamba_triton.rmsnorm_fn),
        "helion": (
            functools.partial(helion_ssd.mamba_chunk_scan_combined, config=configs["ssd"]),
            functools.partial(helion_norm.rmsnorm_fn, config=configs["norm"]),
        ),
    }


def bench_mixer_backend(backend: Backend, inputs: dict[str, Any], dev: torch.device) -> dict[str, Any]:
    """fwd_ms, fwd_bwd_ms and peak memory of one backend, plus its output and gradients (on the CPU, under
    the "_values" key) for the comparison; {"error": ...} (with fwd_ms if the forward ran) if it raises."""
    forward, fwd_bwd = mixer_step(backend, inputs)
    result: dict[str, Any] = {}
    try:
        out = forward()  # compiles the forward kernels
        values = {"out": out.detach().cpu()}
        del out
        result["fwd_ms"] = timed(forward, dev)
        result["fwd_host_ms"] = host_ms(forward, dev)
    except Exception as exc:
        return {"error": f"forward: {_error(exc)}"}
    try:
        grads = fwd_bwd()  # compiles the backward kernels; its gradients are the ones compared
        values.update({n: g.detach().cpu() for n, g in zip(GRAD_NAMES, grads, strict=True)})
        del grads
        result.update(peak_memory(fwd_bwd, dev))
        result["fwd_bwd_ms"] = timed(fwd_bwd, dev)
        result["fwd_bwd_host_ms"] = host_ms(fwd_bwd, dev)
    except Exception as exc:
        result["error"] = f"fwd+bwd: {_error(exc)}"
    result["_values"] = values
    return result


TIMED = ("fwd_ms", "fwd_host_ms", "fwd_bwd_ms", "fwd_bwd_host_ms")
"""The per-round timings of a backend (:func:`bench_mixer`'s rounds)."""


def bench_mixer(
    shape: dict[str, Any],
    dtype: torch.dtype,
    dev: torch.device,
    configs: dict[str, Any],
    rounds: int = 1,
    profile_steps: int = 0,
) -> dict[str, Any]:
    """Both backends (mamba first, so the baseline is measured even if a Helion kernel breaks the device),
    speedups helion vs mamba, peak-memory ratio and output/gradient differences.

    ``rounds``: the timings are taken that many times, the backends alternating round by round, and each is the
    median (every round's value kept under "rounds", and each round's speedups): a host-bound step's time moves
    between runs and machines (``bench/results/h200-run36``, calls 4 and 7). ``profile_steps`` (CUDA): after the
    rounds, where each backend's host time goes over that many forward+backward steps (``host_time``)."""
    inputs = mixer_inputs(shape, dtype, dev)
    backends = mixer_backends(configs)
    results: dict[str, dict[str, Any]] = {}
    for name, backend in backends.items():
        if dev.type == "cuda":
            torch.cuda.empty_cache()
        results[name] = bench_mixer_backend(backend, inputs, dev)
        shown = {k: v for k, v in results[name].items() if k != "_values"}
        print(f"mixer {name}: {json.dumps(shown)}", flush=True)
    steps = {name: mixer_step(backends[name], inputs) for name, r in results.items() if "error" not in r}
    for result in results.values():
        result["rounds"] = {key: [result[key]] for key in TIMED if key in result}
    for _ in range(rounds - 1):
        for name, (forward, fwd_bwd) in steps.items():
            for key, fn in (("fwd_ms", forward), ("fwd_bwd_ms", fwd_bwd)):
                results[name]["rounds"][key].append(timed(fn, dev))
                results[name]["rounds"][key.replace("_ms", "_host_ms")].append(host_ms(fn, dev))
    for result in results.values():
        result.update({key: _median(values) for key, values in result["rounds"].items()})
    for name, (_, fwd_bwd) in steps.items() if profile_steps and dev.type == "cuda" else ():
        print(f"mixer {name}:", flush=True)
        results[name]["host_profile"] = host_profile(fwd_bwd, profile_steps, torch.cuda.synchronize)
    ours, theirs = results["helion"], results["mamba"]
    paired = {
        f"speedup_{key.removesuffix('_ms')}_rounds": [
            _ratio(a, b) for a, b in zip(theirs["rounds"].get(key, []), ours["rounds"].get(key, []), strict=False)
        ]
        for key in ("fwd_ms", "fwd_bwd_ms")
    }
    ours_v, theirs_v = ours.pop("_values", {}), theirs.pop("_values", {})
    return {
        "problem": {
            **shape,
            "D": "h",
            "dt_bias": True,
            "dt_softplus": True,
            "dtype": str(dtype).removeprefix("torch."),
            "group_size": inputs["group_size"],
            "norm_before_gate": False,
            "eps": EPS,
        },
        "backends": results,
        "speedup_fwd": _ratio(theirs.get("fwd_ms"), ours.get("fwd_ms")),
        "speedup_fwd_bwd": _ratio(theirs.get("fwd_bwd_ms"), ours.get("fwd_bwd_ms")),
        **paired,
        "peak_mem_ratio": _ratio(ours.get("peak_mem_bytes"), theirs.get("peak_mem_bytes")),
        "max_abs_diff_helion_vs_mamba": _max_abs_diffs(ours_v, theirs_v),
        "mamba_max_abs": {k: float(v.float().abs().max()) for k, v in theirs_v.items()},
    }


# ---------------------------------------------------------------------------------------------
# 2. The gated RMSNorm backward alone


def _helion_norm_bwd(
    x: torch.Tensor, w: torch.Tensor, z: torch.Tensor, dy: torch.Tensor, gs: int, config: dict[str, Any] | None
) -> tuple[Callable[[], Any], Any]:
    """The Helion backward call, configured as rmsnorm_fn would be (``config``, else the promoted config, else
    the kernel fallbacks), after its forward; returns (the call, the backward's and the partial sums' configs)."""
    from kernels import layernorm_gated as hn

    fwd_cfg, bwd_cfg, sum_cfg = hn._split_config(hn._promoted(x, gs) if config is None else config)
    _, mean, rstd = hn.layer_norm_fwd(
        x, w, None, EPS, z=z, group_size=gs, norm_before_gate=False, is_rms_norm=True, config=fwd_cfg
    )

    def run() -> Any:
        return hn.layer_norm_bwd(
            dy, x, w, None, EPS, mean, rstd, z, gs, False, True, config=bwd_cfg, sum_config=sum_cfg
        )

    return run, {"bwd": bwd_cfg, "bwd_sum": sum_cfg}


def _mamba_norm_bwd(
    x: torch.Tensor, w: torch.Tensor, z: torch.Tensor, dy: torch.Tensor, gs: int, config: None
) -> tuple[Callable[[], Any], Any]:
    """mamba-ssm's ``_layer_norm_bwd`` call after its ``_layer_norm_fwd``, as LayerNormFn makes them."""
    from reference import mamba_triton

    mamba_triton.prepare(x, w, z, dy)
    lg = mamba_triton._module("layernorm_gated")
    _, mean, rstd = lg._layer_norm_fwd(x, w, None, EPS, z=z, group_size=gs, norm_before_gate=False, is_rms_norm=True)
    return lambda: lg._layer_norm_bwd(dy, x, w, None, EPS, mean, rstd, z, gs, False, True), None


def bench_norm_bwd(
    shape: dict[str, Any],
    dtype: torch.dtype,
    dev: torch.device,
    ceil: dict[str, float] | None,
    config: dict[str, Any] | None,
) -> dict[str, Any]:
    """bwd_ms of each backend's gated RMSNorm backward kernel call, speedup, bandwidth floor and fraction of it."""
    from ops import layernorm_gated as norm_op

    problem = norm_problem(shape)
    rows, g, gs = problem["rows"], problem["ngroups"], problem["group_size"]
    inp = norm_op.inputs(problem, dtype, 3, dev)
    x, w, z = inp["x"], inp["weight"], inp["z"]
    dy = _cotangent(x.shape, dtype, 4, dev)
    # Bytes the backward must move: x, z, dy, weight, rstd read (no mean: RMS norm); dx, dz, dw written.
    reads = x.nbytes + z.nbytes + dy.nbytes + w.nbytes + g * rows * 4  # rstd: (ngroups * rows,) fp32
    writes = x.nbytes + z.nbytes + w.nbytes  # dx, dz, dw (the final dw; partial sums not counted)
    moved = reads + writes
    floor_ms = moved / ceil["copy_bytes_per_s"] * 1e3 if ceil else None
    results: dict[str, dict[str, Any]] = {}
    values: dict[str, dict[str, torch.Tensor]] = {}
    for name, make in (("mamba", _mamba_norm_bwd), ("helion", _helion_norm_bwd)):
        if dev.type == "cuda":
            torch.cuda.empty_cache()
        try:
            run, used = make(x, w, z, dy, gs, config if name == "helion" else None)
            dx, dw, _, dz = run()[:4]  # compiles
            values[name] = {"dx": dx.cpu(), "dweight": dw.cpu(), "dz": dz.cpu()}
            del dx, dw, dz
            ms = timed(run, dev)
        except Exception as exc:
            results[name] = {"error": _error(exc)}
            continue
        results[name] = {"bwd_ms": ms, "config": used}
        print(f"norm bwd {name}: {ms:.4f} ms", flush=True)
        if floor_ms is not None:
            results[name]["fraction_of_floor"] = floor_ms / ms
    return {
        "problem": {**problem, "columns": g * gs, "dtype": str(dtype).removeprefix("torch."), "eps": EPS},
        "backends": results,
        "bytes": moved,
        "floor_ms": floor_ms,
        "speedup_bwd": _ratio(results["mamba"].get("bwd_ms"), results["helion"].get("bwd_ms")),
        "max_abs_diff_helion_vs_mamba": _max_abs_diffs(values.get("helion", {}), values.get("mamba", {})),
    }


# ---------------------------------------------------------------------------------------------
# Report


def load_config(path: str | None) -> dict[str, Any] | None:
    """A config from a JSON file (None: let the drop-in use the promoted config)."""
    if path is None:
        return None
    try:
        config = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise SystemExit(f"mixer: cannot read config {path}: {exc}") from exc
    if not isinstance(config, dict):
        raise SystemExit(f"mixer: config {path} must be a JSON object")
    return config


def _ceilings() -> dict[str, float]:
    """bench/bench.py's ``ceilings()`` (loaded from its file: ``bench`` is a directory of scripts, not a package)."""
    path = Path(__file__).with_name("bench.py")
    spec = importlib.util.spec_from_file_location("_bench_bench", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.ceilings()


def _versions() -> dict[str, str]:
    found = {"torch": torch.__version__, "python": platform.python_version()}
    for pkg in ("triton", "helion", "mamba_ssm"):
        try:
            found[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            found[pkg] = "unknown"
    return found


def _verdict(value: float | None, limit: float, at_least: bool, dev: torch.device) -> str:
    if value is None or dev.type != "cuda":
        return "n/a" if dev.type == "cuda" else "n/a (CPU smoke test)"
    return "met" if (value >= limit if at_least else value <= limit) else "MISSED"


def _fmt(value: float | None, spec: str = "9.3f") -> str:
    if value is None:
        width = spec.split(".")[0]
        return f"{'-':>{width}}" if width else "n/a"
    return f"{value:{spec}}"


def _times(ratio: float | None) -> str:
    return f"{ratio:.2f}x" if ratio is not None else "n/a"


def print_report(mixer: dict[str, Any], norm: dict[str, Any], targets: dict[str, dict[str, Any]]) -> None:
    """A short table of both measurements with the issue's targets."""
    p = mixer["problem"]
    print(
        f"mixer fwd+bwd  b={p['batch']} L={p['seqlen']} h={p['nheads']} p={p['headdim']} g={p['ngroups']} "
        f"n={p['dstate']} chunk={p['chunk_size']} {p['dtype']}"
    )
    print(f"  {'backend':8} {'fwd ms':>9} {'fwd+bwd':>9} {'peak MiB':>9} {'host fwd':>9} {'host f+b':>9}")
    for name, r in mixer["backends"].items():
        peak = r["peak_mem_bytes"] / 2**20 if "peak_mem_bytes" in r else None
        line = f"  {name:8} {_fmt(r.get('fwd_ms'))} {_fmt(r.get('fwd_bwd_ms'))} {_fmt(peak, '9.0f')}"
        line += f" {_fmt(r.get('fwd_host_ms'))} {_fmt(r.get('fwd_bwd_host_ms'))}"
        print(line + (f"  error: {r['error'][:100]}" if "error" in r else ""))
    for name, r in mixer["backends"].items():
        spread = {k: [v for v in r.get("rounds", {}).get(k, []) if v is not None] for k in TIMED}
        if len(spread["fwd_bwd_ms"]) > 1:
            shown = ", ".join(f"{k.removesuffix('_ms')} {min(v):.3f}-{max(v):.3f}" for k, v in spread.items() if v)
            print(f"  {name:8} {len(spread['fwd_bwd_ms'])} rounds (the table: medians): {shown}")
    per_round = [f"{x:.2f}x" for x in mixer.get("speedup_fwd_bwd_rounds", []) if x is not None]
    if len(per_round) > 1:
        print(f"  fwd+bwd speedup per round: {' '.join(per_round)}")
    t = targets
    print(
        f"  speedup helion/mamba: fwd {_times(mixer['speedup_fwd'])} (target >= {t['mixer_fwd_speedup']['target']}x: "
        f"{t['mixer_fwd_speedup']['verdict']}), fwd+bwd {_times(mixer['speedup_fwd_bwd'])} (target >= "
        f"{t['mixer_fwd_bwd_speedup']['target']}x: {t['mixer_fwd_bwd_speedup']['verdict']})"
    )
    print(
        f"  peak memory helion/mamba: {_fmt(mixer['peak_mem_ratio'], '.3f')}  "
        f"(target <= {t['mixer_peak_mem_ratio']['target']}: {t['mixer_peak_mem_ratio']['verdict']})"
    )
    diffs = mixer["max_abs_diff_helion_vs_mamba"]
    if diffs:
        print("  max |helion - mamba|: " + " ".join(f"{k}={v:.3g}" for k, v in diffs.items()))
    q = norm["problem"]
    floor = f"{norm['floor_ms']:.3f} ms" if norm["floor_ms"] is not None else "n/a"
    print(
        f"gated RMSNorm bwd  M={q['rows']} N={q['columns']} group={q['group_size']} z "
        f"norm_before_gate=False {q['dtype']}  floor {floor} "
        f"({norm['bytes'] / 2**20:.2f} MiB moved)"
    )
    print(f"  {'backend':8} {'bwd ms':>9} {'of floor':>9}")
    for name, r in norm["backends"].items():
        if "error" in r:
            print(f"  {name:8} error: {r['error'][:100]}")
            continue
        print(f"  {name:8} {_fmt(r['bwd_ms'])} {_fmt(r.get('fraction_of_floor'), '9.2f')}")
    print(
        f"  speedup helion/mamba: {_times(norm['speedup_bwd'])}  (target >= "
        f"{t['norm_bwd_speedup']['target']}x: {t['norm_bwd_speedup']['verdict']})"
    )
    if norm["max_abs_diff_helion_vs_mamba"]:
        print(
            "  max |helion - mamba|: "
            + " ".join(f"{k}={v:.3g}" for k, v in norm["max_abs_diff_helion_vs_mamba"].items())
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="nemotron")
    parser.add_argument("--json", dest="json_path", default=None)
    parser.add_argument(
        "--ssd-config",
        default=None,
        help="JSON file with the Helion SSD config (default: the promoted one, else the defaults)",
    )
    parser.add_argument(
        "--norm-config",
        default=None,
        help="JSON file with the Helion gated-norm config (default: the promoted one, else fallbacks)",
    )
    parser.add_argument(
        "--rounds", type=int, default=None, help="timing rounds, backends alternating (default: 5 on CUDA, 1 on CPU)"
    )
    parser.add_argument(
        "--host-profile", type=int, default=0, metavar="N", help="where each backend's host time goes, over N steps"
    )
    args = parser.parse_args()
    rounds = args.rounds if args.rounds is not None else 5 if args.device == "cuda" else 1
    if rounds < 1 or args.host_profile < 0:
        print(
            f"mixer: --rounds must be at least 1 and --host-profile at least 0, got {rounds}, {args.host_profile}",
            file=sys.stderr,
        )
        return 2
    configs = {"ssd": load_config(args.ssd_config), "norm": load_config(args.norm_config)}
    if args.device == "cuda" and not torch.cuda.is_available():
        print("mixer: needs a CUDA GPU (or --device cpu --shape tiny for a smoke test)", file=sys.stderr)
        return 2
    parity_device.configure(args.device)  # before triton is imported: the interpreter on CPU
    from reference import mamba_triton

    mamba_triton.autotune_as_shipped()  # mamba-ssm as users run it, not pinned to the parity baseline's record
    dev, dtype, shape = torch.device(args.device), torch.bfloat16, SHAPES[args.shape]
    if dev.type == "cpu" and args.shape != "tiny":
        print("mixer: warning: CPU times are one interpreted call each, only a smoke test", file=sys.stderr)
    torch.manual_seed(0)
    ceil = _ceilings() if dev.type == "cuda" else None
    mixer = bench_mixer(shape, dtype, dev, configs, rounds, args.host_profile)
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    norm = bench_norm_bwd(shape, dtype, dev, ceil, configs["norm"])
    targets = {
        name: {"value": value, "target": TARGETS[limit], "verdict": _verdict(value, TARGETS[limit], at_least, dev)}
        for name, value, limit, at_least in (
            ("norm_bwd_speedup", norm["speedup_bwd"], "norm_bwd_speedup_min", True),
            ("mixer_fwd_speedup", mixer["speedup_fwd"], "mixer_fwd_speedup_min", True),
            ("mixer_fwd_bwd_speedup", mixer["speedup_fwd_bwd"], "mixer_fwd_bwd_speedup_min", True),
            ("mixer_peak_mem_ratio", mixer["peak_mem_ratio"], "mixer_peak_mem_ratio_max", False),
        )
    }
    print_report(mixer, norm, targets)
    meta = {
        "command": " ".join([sys.executable.split("/")[-1], *sys.argv]),
        "gpu": torch.cuda.get_device_name() if dev.type == "cuda" else None,
        "device": args.device,
        "shape": args.shape,
        "helion_configs": configs,
        "timing": "do_bench median" if dev.type == "cuda" else "one perf_counter call",
        **_versions(),
        "ceilings": ceil,
        "seeds": {"ssd": 0, "norm_z_weight": 1, "dout": 2, "norm_bwd": 3, "dy": 4},
    }
    if args.json_path:
        payload = {"meta": meta, "targets": targets, "mixer": mixer, "norm_bwd": norm}
        atomic_write(args.json_path, json.dumps(stamped("mixer", payload), indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
