"""A training-style call: the Nemotron-3-Nano gated RMSNorm, forward and backward, through the Helion
drop-in ``rmsnorm_fn`` with no config argument, so the kernel loads the config promoted to the store
for this GPU (no autotuning). Prints the config it loaded, the time, and the error against mamba-ssm.

    python bench/train_step.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from parity import device


def main() -> int:
    if not torch.cuda.is_available():
        print("train_step: needs a CUDA GPU", file=sys.stderr)
        return 2
    device.configure("cuda")
    from triton.testing import do_bench

    from kernels import layernorm_gated as helion_norm
    from reference import mamba_triton

    g = torch.Generator(device="cuda").manual_seed(0)
    rows, width, group = 2 * 8192, 64 * 64, 512
    x = torch.randn(rows, width, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_(True)
    z = torch.randn(rows, width, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_(True)
    w = (1 + 0.1 * torch.randn(width, device="cuda", generator=g)).to(torch.bfloat16).requires_grad_(True)
    dy = torch.randn(rows, width, device="cuda", dtype=torch.bfloat16, generator=g)
    print("promoted config loaded:", json.dumps(helion_norm._promoted(x, group)))

    def step(fn):
        def run():
            out = fn(x, w, None, z=z, group_size=group, norm_before_gate=False)
            return torch.autograd.grad(out, (x, w, z), dy)

        return run

    ours, theirs = step(helion_norm.rmsnorm_fn), step(mamba_triton.rmsnorm_fn)
    diffs = [float((a.float() - b.float()).abs().max()) for a, b in zip(ours(), theirs(), strict=True)]
    print(
        json.dumps(
            {
                "helion_fwd_bwd_ms": do_bench(ours, return_mode="median"),
                "mamba_fwd_bwd_ms": do_bench(theirs, return_mode="median"),
                "max_abs_diff_vs_mamba": dict(zip(("dx", "dw", "dz"), diffs, strict=True)),
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
