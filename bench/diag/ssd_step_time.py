"""Diagnostic: the Helion SSD drop-in's forward and forward+backward time at the Nemotron mixer shape (bf16; default,
promoted or given configs), the host's time to issue them, and its forward+backward GPU time kernel by kernel, for
the source tree given with ``--tree`` (e.g. an exported older commit), so that a regression is found by comparing
trees in one GPU session. ``--host-profile N`` adds where the host's time goes (``host_time.host_profile``, N
forward+backward calls).

    python bench/diag/ssd_step_time.py --tree /tmp/tree-abc123 --ssd-config tuned/<gpu>/ssd_combined/<key>/config.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: host_time
from host_time import host_profile, issue_ms


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, default=Path(__file__).resolve().parents[2])
    parser.add_argument("--json", type=Path)
    parser.add_argument("--iters", type=int, default=10)
    configs = parser.add_mutually_exclusive_group()
    configs.add_argument(
        "--default-configs",
        action="store_true",
        help="every kernel its default config (trees with other kernel code: the promoted entry is stale there)",
    )
    configs.add_argument("--ssd-config", type=Path, help="JSON file with the SSD config to run (no store lookup)")
    parser.add_argument("--host-profile", type=int, default=0, metavar="N", help="cProfile N forward+backward calls")
    args = parser.parse_args()
    if args.host_profile < 0:
        print(f"ssd_step_time: --host-profile must be at least 0, got {args.host_profile}", file=sys.stderr)
        return 2
    sys.path.insert(0, str(args.tree.resolve()))

    import torch
    from torch.profiler import ProfilerActivity, profile
    from triton.testing import do_bench

    from kernels.ssd_combined import mamba_chunk_scan_combined

    torch.manual_seed(0)
    dev, bf16 = "cuda", torch.bfloat16
    b, L, h, p, g, n, cs = 2, 8192, 64, 64, 8, 128, 128
    leaves = {
        "x": torch.randn(b, L, h, p, device=dev, dtype=bf16),
        "dt": (torch.rand(b, L, h, device=dev) * 0.1).to(bf16),
        "A": -torch.exp(torch.rand(h, device=dev)),
        "B": torch.randn(b, L, g, n, device=dev, dtype=bf16),
        "C": torch.randn(b, L, g, n, device=dev, dtype=bf16),
        "D": torch.rand(h, device=dev),
        "dt_bias": torch.rand(h, device=dev) - 4.0,
    }
    leaves = {k: v.requires_grad_() for k, v in leaves.items()}
    dout = torch.randn(b, L, h, p, device=dev, dtype=bf16)
    config = json.loads(args.ssd_config.read_text()) if args.ssd_config else {} if args.default_configs else None

    def forward() -> torch.Tensor:
        t = leaves
        return mamba_chunk_scan_combined(
            t["x"], t["dt"], t["A"], t["B"], t["C"], cs, D=t["D"], dt_bias=t["dt_bias"], dt_softplus=True, config=config
        )

    def fwd_bwd() -> None:
        torch.autograd.grad(forward(), list(leaves.values()), dout)

    fwd_bwd()
    torch.cuda.synchronize()
    result: dict[str, Any] = {"tree": str(args.tree), "fwd_ms": do_bench(forward), "fwd_bwd_ms": do_bench(fwd_bwd)}
    result["fwd_bwd_host_ms"] = issue_ms(fwd_bwd, torch.cuda.synchronize)
    print(
        f"{args.tree}: fwd {result['fwd_ms']:.3f} ms, fwd+bwd {result['fwd_bwd_ms']:.3f} ms, "
        f"host {result['fwd_bwd_host_ms']:.3f} ms to issue fwd+bwd",
        flush=True,
    )
    if args.host_profile:
        result["host_profile"] = host_profile(fwd_bwd, args.host_profile, torch.cuda.synchronize)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(args.iters):
            fwd_bwd()
        torch.cuda.synchronize()
    kernels: dict[str, float] = {}
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            kernels[event.name] = kernels.get(event.name, 0.0) + event.time_range.elapsed_us() / args.iters
    result["kernel_us"] = dict(sorted(kernels.items(), key=lambda kv: -kv[1]))
    for name, us in list(result["kernel_us"].items())[:14]:
        print(f"  {us:9.1f} us  {name[:90]}")
    print(f"  {sum(kernels.values()):9.1f} us  all kernels", flush=True)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
