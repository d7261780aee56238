"""Diagnostic: where the Helion chunk_cumsum forward loses to mamba-ssm's ``_chunk_cumsum_fwd_kernel``.

Times the shipped kernel and variants that each change one thing, over a small grid of head blocks and warps,
against mamba-ssm's kernel (autotuned as shipped), at a mixer shape, bf16. Kernel time is CUDA-graph replay
(``triton.testing.do_bench_cudagraph``), so launch overhead is left out, as in a profile. Each variant's outputs
are compared with the shipped kernel's (max abs difference) so that a fast but different variant is visible.

- ``heads_major``: dt read through a (batch, nheads, seqlen) view, so the tile is [heads, chunk] as loaded
  (no permute before the scan), as mamba-ssm lays it out (its sm90 build runs the cumsum inside one warp, the
  shipped kernel's across warps: ``bench/diag/sm90_build.py``);
- ``fast_softplus``: that, with mamba-ssm's ``log(exp(x) + 1)`` instead of ``log1p(exp(x))``;
- ``no_tail_fix``: that, without the copy of the last real position's sum past seqlen (exact only when seqlen is
  a multiple of the chunk; timing only).

    python bench/diag/chunk_cumsum_variants.py --shape nemotron --json out.json
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

from kernels.chunk_cumsum import chunk_cumsum_args, chunk_cumsum_kernel


@helion.kernel(static_shapes=True)
def heads_major_kernel(
    dt_t: torch.Tensor,
    A: torch.Tensor,
    dt_bias: torch.Tensor,
    dt_min: float,
    dt_max: float,
    chunk_size: int,
    chunk_block: hl.constexpr,
    fast_softplus: hl.constexpr,
    tail_fix: hl.constexpr,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The shipped kernel with dt read as (batch, nheads, seqlen) and the tile [heads, chunk] from load to stores
    (no permute), mamba-ssm's softplus if ``fast_softplus``, the tail copy past seqlen only if ``tail_fix``. Triton's
    sm90 build of it runs the cumsum inside one warp only so (``bench/diag/sm90_build.py``): with a store under a
    runtime ``if``, or with the decay's product taken before the dt_out store, it ran across warps as the shipped
    kernel's does."""
    batch, nheads, seqlen = dt_t.shape
    chunk_size = hl.specialize(chunk_size)
    nchunks = (seqlen + chunk_size - 1) // chunk_size
    dA_cumsum = torch.empty([batch, nheads, nchunks, chunk_size], dtype=torch.float32, device=dt_t.device)
    dt_out = torch.empty([batch, nheads, nchunks, chunk_size], dtype=torch.float32, device=dt_t.device)
    for tile_b, tile_c, tile_h in hl.tile([batch, nchunks, nheads], block_size=[1, 1, None]):
        offs = hl.arange(chunk_block)
        in_chunk = offs < chunk_size
        pos = tile_c.begin * chunk_size + offs
        valid = in_chunk & (pos < seqlen)
        step = hl.load(dt_t, [tile_b.begin, tile_h, pos], extra_mask=valid[None, :]).to(torch.float32)
        step = step + dt_bias[tile_h].to(torch.float32)[:, None]
        if fast_softplus:
            soft = torch.log(torch.exp(step) + 1.0)
        else:
            soft = torch.log1p(torch.exp(step))
        step = torch.where(step <= 20.0, soft, step)
        step = torch.clamp(step, dt_min, dt_max)
        step = torch.where(valid[None, :], step, 0.0)
        hl.store(dt_out, [tile_b.begin, tile_h, tile_c.begin, offs], step, extra_mask=in_chunk[None, :])
        cumsum = torch.cumsum(step * A[tile_h].to(torch.float32)[:, None], dim=1)
        if tail_fix:
            last = valid & ~((offs + 1 < chunk_size) & (pos + 1 < seqlen))
            end = torch.sum(torch.where(last[None, :], cumsum, 0.0), dim=1)
            cumsum = torch.where(valid[None, :], cumsum, end[:, None])
        hl.store(dA_cumsum, [tile_b.begin, tile_h, tile_c.begin, offs], cumsum, extra_mask=in_chunk[None, :])
    return dA_cumsum, dt_out


def variants(shipped: tuple[Any, ...], configs: list[dict[str, Any]]) -> dict[str, Variant]:
    """name -> (kernel, its arguments, configs) for the shipped kernel's arguments (dt_softplus on, a dt_bias given)."""
    dt, A, bias, lo, hi, chunk, block, _ = shipped
    dt_t = dt.transpose(1, 2)
    return {
        "shipped": (chunk_cumsum_kernel, shipped, configs),
        "heads_major": (heads_major_kernel, (dt_t, A, bias, lo, hi, chunk, block, False, True), configs),
        "fast_softplus": (heads_major_kernel, (dt_t, A, bias, lo, hi, chunk, block, True, True), configs),
        "no_tail_fix": (heads_major_kernel, (dt_t, A, bias, lo, hi, chunk, block, False, False), configs),
    }


def main() -> int:
    import mixer

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=sorted(set(mixer.SHAPES) - {"tiny"}), default="nemotron")
    parser.add_argument("--blocks", default="4,8,16", help="head blocks to try (comma-separated)")
    parser.add_argument("--warps", default="2,4", help="num_warps to try (comma-separated)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    try:
        grid = list(itertools.product(int_list(args.blocks), int_list(args.warps)))
    except ValueError:
        print(
            f"chunk_cumsum_variants: --blocks and --warps take integers, got {args.blocks!r} and {args.warps!r}",
            file=sys.stderr,
        )
        return 2
    if not gpu_ready("chunk_cumsum_variants"):
        return 2
    from reference import mamba_triton

    inputs = mixer.mixer_inputs(mixer.SHAPES[args.shape], torch.bfloat16, torch.device("cuda"))
    leaves, chunk = {k: v.detach() for k, v in inputs["leaves"].items()}, inputs["chunk_size"]
    dt, A, bias = leaves["dt"], leaves["A"], leaves["dt_bias"]
    shipped = chunk_cumsum_args(dt, A, chunk, bias, True)
    mamba = mamba_triton._module("ssd_chunk_state")._chunk_cumsum_fwd
    mamba_ms = graph_ms(lambda: mamba(dt, A, chunk, dt_bias=bias, dt_softplus=True))
    print(f"mamba-ssm _chunk_cumsum_fwd: {mamba_ms * 1e3:.2f} us", flush=True)
    configs = [{"block_sizes": [block], "num_warps": warps, "num_stages": 1} for block, warps in grid]
    meta = {"gpu": torch.cuda.get_device_name(), "shape": args.shape, "command": " ".join(sys.argv)}
    time_variants(variants(shipped, configs), mamba_ms, args.json, meta)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
