"""Diagnostic: the Helion state_passing forward as shipped (an associative scan over each block of chunks) against
a sequential walk over the chunks, as mamba-ssm's ``_state_passing_fwd_kernel`` does, and against that kernel.

The sequential kernel holds one row of the state per program and steps through the chunks, storing the state that
enters each: one load of a chunk's states and one store per step, nothing kept across chunks but the row. Kernel
time is CUDA-graph replay (``triton.testing.do_bench_cudagraph``), over a small grid of dim blocks, warps and
pipeline stages, at a mixer shape with the mixer's dtypes (fp32 chunk states, the entering states in bf16). Each
variant's outputs are compared with the shipped kernel's (max abs difference): the two sum in different orders.

    python bench/diag/state_passing_variants.py --shape nemotron --json out.json
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path
from typing import Any

import helion
import helion.language as hl
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: mixer's shapes

from variant_timing import Variant, gpu_ready, graph_ms, int_list, time_variants

from kernels.state_passing import state_passing_args, state_passing_kernel


@helion.kernel(static_shapes=True)
def sequential_kernel(
    states: torch.Tensor, dA_chunk_cumsum: torch.Tensor, out_dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, final_states) as the shipped kernel computes them with no initial states and no seq_idx: one program per
    (batch, head, block of dim) walks the chunks one at a time, storing the state entering each."""
    batch, nchunks, nheads, dim = states.shape
    out = torch.empty([batch, nchunks, nheads, dim], dtype=out_dtype, device=states.device)
    final_states = torch.empty([batch, nheads, dim], dtype=torch.float32, device=states.device)
    for tile_b, tile_h, tile_d in hl.tile([batch, nheads, dim], block_size=[1, 1, None]):
        carry = hl.zeros([tile_d], dtype=torch.float32)
        for tile_c in hl.tile(nchunks, block_size=1):
            out[tile_b.begin, tile_c.begin, tile_h.begin, tile_d] = carry.to(out_dtype)
            decay = torch.exp(dA_chunk_cumsum[tile_b.begin, tile_h.begin, tile_c.begin].to(torch.float32))
            carry = decay * carry + states[tile_b.begin, tile_c.begin, tile_h.begin, tile_d].to(torch.float32)
        final_states[tile_b.begin, tile_h.begin, tile_d] = carry
    return out, final_states


SHIPPED_GRID = [(64, 1, 1), (32, 1, 1), (128, 2, 1)]
"""(dim block, warps, stages) of the shipped scan: the block both GPUs' tuners chose (64, one warp) and its
neighbours; a wider block holds every chunk of it at once."""


def main() -> int:
    import mixer

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=sorted(set(mixer.SHAPES) - {"tiny"}), default="nemotron")
    parser.add_argument("--blocks", default="128,512,2048", help="the sequential kernel's dim blocks (comma-separated)")
    parser.add_argument("--warps", default="2,4", help="its num_warps (comma-separated)")
    parser.add_argument("--stages", default="1,3", help="its num_stages (comma-separated)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    try:
        grid = list(itertools.product(int_list(args.blocks), int_list(args.warps), int_list(args.stages)))
    except ValueError:
        print(
            "state_passing_variants: --blocks, --warps and --stages take integers, got "
            f"{args.blocks!r}, {args.warps!r} and {args.stages!r}",
            file=sys.stderr,
        )
        return 2
    if not gpu_ready("state_passing_variants"):
        return 2
    from reference import mamba_triton

    shape = mixer.SHAPES[args.shape]
    batch, nheads, chunk = shape["batch"], shape["nheads"], shape["chunk_size"]
    nchunks, dim = -(-shape["seqlen"] // chunk), shape["headdim"] * shape["dstate"]
    generator = torch.Generator(device="cuda").manual_seed(0)
    states = torch.randn(batch, nchunks, nheads, dim, device="cuda", generator=generator)
    dA_cumsum = -torch.rand(batch, nheads, nchunks, chunk, device="cuda", generator=generator).cumsum(-1) / chunk
    dA_last = dA_cumsum[:, :, :, -1]  # a strided view, as the SSD passes it
    mamba = mamba_triton._module("ssd_state_passing")._state_passing_fwd
    mamba_ms = graph_ms(lambda: mamba(states, dA_last, out_dtype=torch.bfloat16))
    print(f"mamba-ssm _state_passing_fwd: {mamba_ms * 1e3:.2f} us", flush=True)

    def configs(triples: list[tuple[int, int, int]]) -> list[dict[str, Any]]:
        return [{"block_sizes": [b], "num_warps": w, "num_stages": s} for b, w, s in triples]

    variants: dict[str, Variant] = {
        "shipped": (
            state_passing_kernel,
            state_passing_args(states, dA_last, out_dtype=torch.bfloat16),
            configs(SHIPPED_GRID),
        ),
        "sequential": (sequential_kernel, (states, dA_last, torch.bfloat16), configs(grid)),
    }
    meta = {"gpu": torch.cuda.get_device_name(), "shape": args.shape, "command": " ".join(sys.argv)}
    time_variants(variants, mamba_ms, args.json, meta)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
