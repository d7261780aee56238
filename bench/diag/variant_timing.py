"""What the kernel-variant diagnostics share: the GPU set-up (mamba-ssm autotuned as shipped), CUDA-graph timing,
and the loop that compiles each variant at each config, compares its outputs with the first variant's first build
and times it, writing the JSON after each variant (a call cut by its limit keeps what it measured)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import helion
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from parity.report import atomic_write

Variant = tuple[helion.Kernel, tuple[Any, ...], Sequence[Mapping[str, Any]]]
"""A kernel (run as its static-shape build), its arguments and the configs to time it at."""


def int_list(text: str) -> list[int]:
    """A comma-separated list of integers (a diagnostic's grid argument); ValueError otherwise."""
    return [int(value) for value in text.split(",")]


def static_build(kernel: helion.Kernel, static: bool = True) -> helion.Kernel:
    """``kernel`` with static shapes on (as promoted configs run it) or off."""
    return helion.kernel(kernel.fn, settings=kernel.settings.copy(static_shapes=static))


def gpu_ready(script: str) -> bool:
    """Whether a CUDA GPU is there (else one error line naming ``script``); if so, the process is set up for it and
    mamba-ssm's Triton kernels autotune as shipped."""
    if not torch.cuda.is_available():
        print(f"{script}: needs a CUDA GPU", file=sys.stderr)
        return False
    from parity import device as parity_device
    from reference import mamba_triton

    parity_device.configure("cuda")
    mamba_triton.autotune_as_shipped()
    return True


def graph_ms(fn: Callable[[], Any]) -> float:
    """Median ms per call from CUDA-graph replay (launch overhead left out, as in a profile)."""
    import triton.testing

    fn()
    torch.cuda.synchronize()
    return float(triton.testing.do_bench_cudagraph(fn, rep=50))


def time_variants(
    variants: Mapping[str, Variant],
    baseline_ms: float,
    json_path: Path | None,
    meta: Mapping[str, Any],
    timer: Callable[[Callable[[], Any]], float] = graph_ms,
) -> dict[str, Any]:
    """Each variant at each of its configs: max abs difference from the first build's outputs, and ``timer``'s ms;
    each variant's best against ``baseline_ms`` (mamba-ssm's kernel). A config that fails to build or run is
    reported by its exception's type and skipped."""
    results: dict[str, Any] = {"mamba": baseline_ms}
    reference = None
    for name, (kernel, args, configs) in variants.items():
        static = static_build(kernel)
        best = None
        for fields in configs:
            label = " ".join(f"{key} {value}" for key, value in fields.items())
            try:
                compiled = static.bind(args).compile_config(helion.Config(**fields))
                outputs = compiled(*args)
            except Exception as exc:  # e.g. a block too large for the registers: the next config
                print(f"{name} {label}: {type(exc).__name__}", flush=True)
                continue
            if reference is None:
                reference = outputs
            diff = max(float((o.float() - r.float()).abs().max()) for o, r in zip(outputs, reference, strict=True))
            ms = timer(lambda compiled=compiled, args=args: compiled(*args))
            print(f"{name} {label}: {ms * 1e3:.2f} us, max diff {diff:.3g}", flush=True)
            results[f"{name}/{json.dumps(dict(fields), sort_keys=True)}"] = {"ms": ms, "max_diff": diff}
            best = ms if best is None else min(best, ms)
        if best is not None:
            print(f"{name}: best {best * 1e3:.2f} us, {baseline_ms / best:.2f}x mamba-ssm", flush=True)
        if json_path is not None:
            atomic_write(json_path, json.dumps({"meta": dict(meta), "results": results}, indent=1) + "\n")
    return results
