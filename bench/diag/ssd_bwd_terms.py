"""Diagnostic (issue 12): which fp32 intermediate of the forward carries Helion's grad.A / grad.dt_bias error.

The Helion backward recomputes dA_cumsum, dt_out, the entering states and cb with the forward kernels
(``kernels.ssd_combined._chain``). Here each is replaced, in the backward only, by its exact value (the
pure-PyTorch reference in fp64, rounded to fp32), one set at a time, and the error of grad.A and grad.dt_bias
against the fp64 oracle is printed in fp32 ulps at max|oracle|, beside mamba-ssm's. Same inputs, upstream
gradients and oracle as the engine (``parity.runner``), Helion's default config, CPU interpreter.

    python bench/diag/ssd_bwd_terms.py --seeds 0,5,14,19
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("TRITON_INTERPRET", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
from ssd_bwd_precision import RATIO_QUANTITIES, WIDE, parse_seeds, ulp

import kernels.ssd_combined as combined
from parity import registry
from parity.runner import _upcast, execute, make_inputs, upstream_grads
from parity.spec import Impl
from reference import bmm_chunk, chunk_cumsum, chunk_state, state_passing

PROBLEM = {
    "batch": 2,
    "seqlen": 80,
    "chunk_size": 32,
    "nheads": 4,
    "ngroups": 2,
    "headdim": 16,
    "dstate": 16,
    "D": "h",
    "dt_bias": True,
    "dt_softplus": True,
    "initial_states": True,
    **WIDE,
}
"""bench/results/cpu-ssd-bwd-precision.md's problem with ``--wide-dt``."""
VARIANTS: tuple[tuple[str, ...], ...] = (
    (),
    ("dA_cumsum", "dt_out"),
    ("states",),
    ("cb",),
    ("dA_cumsum", "dt_out", "states", "cb"),
)


def exact_chain(original: Callable[..., dict[str, torch.Tensor]], exact: set[str]) -> Callable[..., Any]:
    """``_chain`` with the intermediates named in ``exact`` replaced by the fp64 reference's, rounded to fp32, when
    the backward calls it (entering states in fp32); the forward's call is left alone."""

    def chain(*args: Any) -> dict[str, torch.Tensor]:
        f = original(*args)
        x, dt, A, B, C, chunk_size, dt_bias, init, seq_idx, softplus, limit, _, entering = args
        if entering != torch.float32 or not exact:
            return f

        def wide(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.double()

        batch, _, nheads, headdim = x.shape
        dim = headdim * B.shape[-1]
        dA, dt_out = chunk_cumsum.chunk_cumsum_fwd(
            wide(dt), wide(A), chunk_size, dt_bias=wide(dt_bias), dt_softplus=softplus, dt_limit=limit
        )
        own = chunk_state.chunk_state_fwd(wide(B), wide(x), dt_out, dA, seq_idx=seq_idx)
        states, _ = state_passing.state_passing_fwd(
            own.reshape(batch, own.shape[1], nheads, dim),
            dA[:, :, :, -1],
            initial_states=None if init is None else init.double().reshape(batch, nheads, dim),
            seq_idx=seq_idx,
            chunk_size=chunk_size,
        )
        cb = bmm_chunk.bmm_chunk_fwd(wide(C), wide(B), chunk_size, seq_idx=seq_idx)
        values = {"dA_cumsum": dA, "dt_out": dt_out, "states": states, "cb": cb}
        return {**f, **{k: values[k].float() for k in exact}}

    return chain


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,5,14,19", help='e.g. "0,5,14,19" or "0-19"')
    args = parser.parse_args()
    spec = registry.get("ssd_combined")
    registry.load()
    helion = Impl("helion", "kernels.ssd_combined:mamba_chunk_scan_combined").load()
    exact: set[str] = set()
    combined._chain = exact_chain(combined._chain, exact)
    print("errors in fp32 ulp at max|oracle|; Helion: " + " / ".join("+".join(v) or "as-is" for v in VARIANTS))
    for seed in parse_seeds(args.seeds):
        inputs = make_inputs(spec, PROBLEM, torch.float32, seed, "cpu")
        upstream = upstream_grads(seed, torch.float32)
        oracle = execute(
            spec, spec.reference.load(), {k: _upcast(v, torch.float64) for k, v in inputs.items()}, upstream
        )
        assert spec.baseline is not None
        mamba = execute(spec, spec.baseline.load(), inputs, upstream)
        errors: dict[str, list[float]] = {q: [] for q in RATIO_QUANTITIES}
        for variant in VARIANTS:
            exact.clear()
            exact.update(variant)
            run = execute(spec, helion, inputs, upstream)
            for q in RATIO_QUANTITIES:
                errors[q].append((run.values[q].double() - oracle.values[q]).abs().max().item())
        parts = []
        for q in RATIO_QUANTITIES:
            o = oracle.values[q]
            unit = ulp(o.abs().max().item(), torch.float32)
            base = (mamba.values[q].double() - o).abs().max().item() / unit
            parts.append(f"{q} mamba {base:.2f} helion " + " / ".join(f"{e / unit:.2f}" for e in errors[q]))
        print(f"seed {seed} | " + " | ".join(parts), flush=True)


if __name__ == "__main__":
    main()
