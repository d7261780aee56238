"""Diagnostic: write the device code (the ``@triton.jit`` functions, without Helion's source-line comments) that Helion
generates for every kernel of one SSD forward+backward (each kernel's default config, CPU interpreter) to
OUT/<kernel>.py, so that two commits' code can be compared with ``diff -r`` (e.g. whether a refactor changes what
the bf16 path compiles).

    python bench/diag/ssd_kernel_code.py /tmp/code-new --dtype bfloat16
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("TRITON_INTERPRET", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import helion
import torch

import kernels.launch
from kernels import bmm_chunk, chunk_cumsum, chunk_scan, chunk_state, ssd_combined_bwd, state_passing
from kernels.ssd_combined import mamba_chunk_scan_combined
from reference import _triton_shims


def device_code(code: str, name: str) -> str:
    """The generated module up to the host wrapper ``def name(``, comment lines dropped."""
    lines = []
    for line in code.splitlines():
        if line.startswith(f"def {name}("):
            break
        if not line.lstrip().startswith("#"):
            lines.append(line)
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    args = parser.parse_args(argv)
    _triton_shims.install()
    args.out.mkdir(parents=True, exist_ok=True)
    launch = kernels.launch.launch
    written: set[str] = set()

    def recording(kernel: Any, kernel_args: Sequence[Any], config: Any = None, *rest: Any, **kw: Any) -> Any:
        name = kernel.fn.__name__
        if name not in written:
            bound = kernel.bind(tuple(kernel_args))
            cfg = bound.config_spec.default_config() if config is None else helion.Config(**config)
            (args.out / f"{name}.py").write_text(device_code(bound.to_triton_code(cfg), name))
            written.add(name)
        return launch(kernel, kernel_args, config, *rest, **kw)

    for module in (bmm_chunk, chunk_cumsum, chunk_scan, chunk_state, ssd_combined_bwd, state_passing):
        module.launch = recording  # type: ignore[attr-defined]
    torch.manual_seed(0)
    dtype = getattr(torch, args.dtype)
    batch, seqlen, nheads, headdim, ngroups, dstate = 1, 64, 4, 16, 2, 16

    def leaf(*shape: int, scale: float = 1.0, dt: torch.dtype = dtype) -> torch.Tensor:
        return (torch.randn(*shape) * scale).to(dt).requires_grad_()

    out = mamba_chunk_scan_combined(
        leaf(batch, seqlen, nheads, headdim),
        torch.rand(batch, seqlen, nheads).to(dtype).requires_grad_(),
        (-torch.rand(nheads)).requires_grad_(),
        leaf(batch, seqlen, ngroups, dstate),
        leaf(batch, seqlen, ngroups, dstate),
        32,
        D=leaf(nheads, dt=torch.float32),
        dt_bias=torch.rand(nheads).requires_grad_(),
        dt_softplus=True,
    )
    out.float().sum().backward()
    print(f"{len(written)} kernels: {', '.join(sorted(written))} -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
