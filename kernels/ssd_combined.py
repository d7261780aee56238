"""The Mamba-2 chunked SSD (mamba-ssm's ``mamba_chunk_scan_combined``) in Helion, forward and backward: a
drop-in autograd function with mamba-ssm's arguments, outputs, gradients and dtypes. The forward chains the
Helion kernels of its five ops in mamba-ssm's order and with its intermediate dtypes (chunk_cumsum ->
chunk_state -> state_passing -> bmm_chunk -> chunk_scan, + chunk_state_varlen); the backward recomputes the
first four, as mamba-ssm does, and runs the Helion backward kernels of :mod:`kernels.ssd_combined_bwd`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from contract.checks import check_combined
from kernels import bmm_chunk, chunk_cumsum, chunk_scan, chunk_state, ssd_combined_bwd, state_passing
from kernels.launch import ConfigLike
from kernels.precision import acc_dtype
from parity.lookup import promoted_config

OPS = (
    "chunk_cumsum",
    "chunk_state",
    "state_passing",
    "bmm_chunk",
    "chunk_scan",
    "chunk_state_varlen",
    *ssd_combined_bwd.KERNELS,
)
"""The keys of the combined op's config: one Helion config per op (a missing key means that op's default)."""

CONFIGS: list[dict[str, Any]] = [
    {
        "chunk_cumsum": chunk_cumsum.CONFIGS[0],
        "chunk_state": chunk_state.CONFIGS[0],
        "state_passing": state_passing.CONFIGS[0],
        "bmm_chunk": bmm_chunk.CONFIGS[0],
        "chunk_scan": chunk_scan.CONFIGS[0],
        "chunk_state_varlen": chunk_state.VARLEN_CONFIGS[0],
        **ssd_combined_bwd.CONFIGS[0],
    },
    {
        "chunk_cumsum": chunk_cumsum.CONFIGS[1],
        "chunk_state": chunk_state.CONFIGS[1],
        "state_passing": state_passing.CONFIGS[1],
        "bmm_chunk": bmm_chunk.CONFIGS[1],
        "chunk_scan": chunk_scan.CONFIGS[1],
        "chunk_state_varlen": chunk_state.VARLEN_CONFIGS[1],
        **ssd_combined_bwd.CONFIGS[1],
    },
]
"""Explicit configs for the CPU parity tests: each kernel's CONFIGS[0], then each kernel's CONFIGS[1]."""


def store_bucket(headdim: int, dstate: int, chunk_size: int, heads_per_group: int) -> str:
    """The config-store shape bucket of a call: configs are promoted per (headdim, dstate, chunk_size, heads
    per group); batch and seqlen vary freely."""
    return f"p{headdim}-n{dstate}-cs{chunk_size}-hpg{heads_per_group}"


def _promoted(x: torch.Tensor, B: torch.Tensor, chunk_size: int) -> Mapping[str, ConfigLike] | None:
    """The config promoted for this GPU, dtype and bucket (parity.lookup; never autotunes). None on CPU or
    without an entry: then every kernel runs its default config (the store warns once)."""
    if x.device.type != "cuda":
        return None
    bucket = store_bucket(x.shape[3], B.shape[3], chunk_size, x.shape[2] // B.shape[2])
    return promoted_config(
        "ssd_combined", f"{__name__}:mamba_chunk_scan_combined", str(x.dtype).removeprefix("torch."), bucket, "cuda"
    )


def tuning_configs(inputs: Mapping[str, Any], count: int) -> list[dict[str, Any]]:
    """Candidates for ``parity tune`` on the GPU (the autotuner's seeds), the first ``count`` in a fixed order. Each
    sets, for every kernel, its output-row tile, the tile of the loop over chunk positions, the dstate tile (the whole
    dstate up to 128, or 32 and 64) and warps and pipeline stages; the whole headdim is one tile, except in the
    states backward, one program per (batch, head, headdim block, dstate block) walking every chunk, where the grid's
    32-row entries split headdim too (more programs: 128 at the Nemotron shape with whole tiles). They span the tile
    shapes mamba-ssm's own autotuner offers for the same loops (a 32-wide position loop with 4-5 stages, as in its
    chunk_scan and dx configs recorded on the H200, reference/mamba_autotune.json) and the large tiles Helion's
    search found for the backward (h200-run26). chunk_cumsum and bwd_ddt (a head block only, none of these tiles)
    are not in the grid: ``parity tune`` searches them from their default configs (their names come from
    :data:`CONFIGS`)."""
    headdim, dstate = inputs["x"].shape[-1], inputs["B"].shape[-1]
    full = min(dstate, 128)
    grid = [
        (64, 64, full, 4, 2),
        (64, 32, full, 2, 4),
        (32, 32, full, 4, 5),
        (128, 128, full, 8, 2),
        (64, 64, 64, 4, 3),
        (128, 64, 64, 8, 3),
        (32, 32, 32, 2, 4),
        (128, 32, full, 4, 4),
    ]
    configs = []
    for rows, cols, nblk, warps, stages in grid[:count]:

        def cfg(*sizes: int, warps: int = warps, stages: int = stages) -> dict[str, Any]:
            return {"block_sizes": list(sizes), "num_warps": warps, "num_stages": stages}

        configs.append(
            {
                "chunk_state": cfg(headdim, nblk, cols),
                "bmm_chunk": cfg(rows, rows, min(nblk, 64)),
                "chunk_scan": cfg(rows, headdim, nblk, cols),
                "state_passing": {"block_sizes": [64], "num_warps": 1},
                "bwd_states": cfg(min(headdim, rows), nblk, cols),
                "bwd_dx": cfg(rows, headdim, nblk, cols),
                "bwd_dcb": cfg(rows, cols, headdim),
                "bwd_dc": cfg(rows, nblk, headdim, cols),
                "bwd_db": cfg(rows, nblk, headdim, cols),
            }
        )
    return configs


def _op_configs(config: Mapping[str, ConfigLike] | None) -> dict[str, ConfigLike]:
    """{op: config or None} from the combined config, rejecting unknown op names."""
    config = dict(config or {})
    unknown = sorted(set(config) - set(OPS))
    if unknown:
        raise ValueError(f"unknown op(s) {unknown} in the combined config; expected keys among {list(OPS)}")
    return {op: config.get(op) for op in OPS}


def _last_dim_contiguous(t: torch.Tensor | None) -> torch.Tensor | None:
    """t, copied only when its last dimension is strided (as mamba-ssm does for B, C, D, x and z)."""
    return t if t is None or t.stride(-1) == 1 else t.contiguous()


def _chain(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    chunk_size: int,
    dt_bias: torch.Tensor | None,
    initial_states: torch.Tensor | None,
    seq_idx: torch.Tensor | None,
    dt_softplus: bool,
    dt_limit: tuple[float, float],
    configs: Mapping[str, ConfigLike],
    entering_dtype: torch.dtype,
) -> dict[str, torch.Tensor]:
    """The forward up to the scan: dA_cumsum, dt_out, chunk states, the states entering each chunk (in
    entering_dtype) and final states, both flat (b, c, h, p*n) / (b, h, p*n), and cb, all but the entering states
    in the accumulation dtype (fp32; fp64 for fp64 inputs, see kernels.precision)."""
    batch, _, nheads, headdim = x.shape
    dstate = B.shape[-1]
    dA_cumsum, dt_out = chunk_cumsum.chunk_cumsum_fwd(
        dt, A, chunk_size, dt_bias=dt_bias, dt_softplus=dt_softplus, dt_limit=dt_limit, config=configs["chunk_cumsum"]
    )
    own = chunk_state.chunk_state_fwd(
        B, x, dt_out, dA_cumsum, seq_idx=seq_idx, states_in_fp32=True, config=configs["chunk_state"]
    )
    nchunks = own.shape[1]
    states, final_states = state_passing.state_passing_fwd(
        own.reshape(batch, nchunks, nheads, headdim * dstate),
        dA_cumsum[:, :, :, -1],
        initial_states=None if initial_states is None else initial_states.reshape(batch, nheads, headdim * dstate),
        seq_idx=seq_idx,
        chunk_size=chunk_size,
        out_dtype=entering_dtype,
        config=configs["state_passing"],
    )
    cb = bmm_chunk.bmm_chunk_fwd(
        C, B, chunk_size, seq_idx=seq_idx, output_dtype=acc_dtype(x.dtype), config=configs["bmm_chunk"]
    )
    return {"dA_cumsum": dA_cumsum, "dt_out": dt_out, "states": states, "final_states": final_states, "cb": cb}


class MambaChunkScanCombinedFn(torch.autograd.Function):
    """Autograd over the Helion forward chain and the Helion backward (inputs saved, intermediates recomputed
    in the backward, as mamba-ssm does: activation memory stays that of the inputs and the pre-gate output)."""

    @staticmethod
    def forward(
        ctx: Any,
        x: torch.Tensor,
        dt: torch.Tensor,
        A: torch.Tensor,
        B: torch.Tensor,
        C: torch.Tensor,
        chunk_size: int,
        D: torch.Tensor | None,
        z: torch.Tensor | None,
        dt_bias: torch.Tensor | None,
        initial_states: torch.Tensor | None,
        seq_idx: torch.Tensor | None,
        cu_seqlens: torch.Tensor | None,
        dt_softplus: bool,
        dt_limit: tuple[float, float],
        return_varlen_states: bool,
        configs: dict[str, ConfigLike],
    ) -> tuple[torch.Tensor, ...]:
        batch, _, nheads, headdim = x.shape
        dstate = B.shape[-1]
        f = _chain(
            x, dt, A, B, C, chunk_size, dt_bias, initial_states, seq_idx, dt_softplus, dt_limit, configs, C.dtype
        )
        states = f["states"].reshape(batch, -1, nheads, headdim, dstate)
        out, out_x = chunk_scan.chunk_scan_fwd(
            f["cb"], x, f["dt_out"], f["dA_cumsum"], C, states, D=D, z=z, seq_idx=seq_idx, config=configs["chunk_scan"]
        )
        ctx.save_for_backward(x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, out_x)
        ctx.settings = (chunk_size, dt_softplus, tuple(dt_limit), configs)
        ctx.set_materialize_grads(False)
        results = (out, f["final_states"].reshape(batch, nheads, headdim, dstate))
        if return_varlen_states:
            varlen = chunk_state.chunk_state_varlen(
                B[0],
                x[0],
                f["dt_out"][0],
                f["dA_cumsum"][0],
                cu_seqlens,
                states[0],
                config=configs["chunk_state_varlen"],
            )
            ctx.mark_non_differentiable(varlen)
            results += (varlen,)
        return results

    @staticmethod
    def backward(
        ctx: Any, dout: torch.Tensor | None, dfinal_states: torch.Tensor | None, *_: torch.Tensor | None
    ) -> tuple[torch.Tensor | None, ...]:
        inputs = ctx.saved_tensors
        chunk_size, dt_softplus, dt_limit, configs = ctx.settings
        # fp32 inputs: the backward, and the forward it recomputes, run on fp64 copies, so every gradient is the
        # exact gradient of the fp32 inputs rounded once (no fp32 implementation gets closer; issue 12).
        wide = torch.float64 if inputs[0].dtype == torch.float32 else None
        x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, out_x = (
            t.to(wide) if wide is not None and t is not None and t.is_floating_point() else t for t in inputs
        )
        saved = {
            "x": x,
            "dt": dt,
            "A": A,
            "B": B,
            "C": C,
            "D": D,
            "z": z,
            "dt_bias": dt_bias,
            "initial_states": initial_states,
            "seq_idx": seq_idx,
            "dt_softplus": dt_softplus,
            "dt_limit": dt_limit,
            "out_x": out_x,
        }
        entering = acc_dtype(x.dtype)
        fwd = _chain(
            x, dt, A, B, C, chunk_size, dt_bias, initial_states, seq_idx, dt_softplus, dt_limit, configs, entering
        )
        dout = torch.zeros_like(x) if dout is None else _last_dim_contiguous(dout.to(x.dtype))
        g = ssd_combined_bwd.ssd_combined_bwd(
            dout, None if dfinal_states is None else dfinal_states.to(entering), saved, fwd, configs
        )
        names = ("x", "dt", "A", "B", "C", "D", "z", "dt_bias", "initial_states")
        grads = {
            name: None if g.get(name) is None else g[name].to(t.dtype) for name, t in zip(names, inputs, strict=False)
        }
        return (
            grads["x"],
            grads["dt"],
            grads["A"],
            grads["B"],
            grads["C"],
            None,
            grads["D"],
            grads["z"],
            grads["dt_bias"],
            grads["initial_states"],
            None,
            None,
            None,
            None,
            None,
            None,
        )


def mamba_chunk_scan_combined(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    chunk_size: int,
    D: torch.Tensor | None = None,
    z: torch.Tensor | None = None,
    dt_bias: torch.Tensor | None = None,
    initial_states: torch.Tensor | None = None,
    seq_idx: torch.Tensor | None = None,
    cu_seqlens: torch.Tensor | None = None,
    dt_softplus: bool = False,
    dt_limit: tuple[float, float] = (0.0, float("inf")),
    return_final_states: bool = False,
    return_varlen_states: bool = False,
    *,
    config: Mapping[str, ConfigLike] | None = None,
) -> torch.Tensor | tuple[torch.Tensor, ...]:
    """x (b, l, h, p), dt (b, l, h), A (h,), B and C (b, l, g, n), D (h,) or (h, p), z like x, dt_bias (h,),
    initial_states (b, h, p, n), seq_idx (b, l), cu_seqlens (nseq + 1,) (read only with
    return_varlen_states, which needs b == 1).

    Returns out (x.dtype), then final_states (b, h, p, n, fp32) if return_final_states, then varlen_states
    (nseq, h, p, n, C.dtype, not differentiable) if return_varlen_states, as mamba-ssm does. Differentiable
    in x, dt, A, B, C, D, z, dt_bias and initial_states (gradients in each input's dtype). config maps kernel
    name (see :data:`OPS`) -> that kernel's Helion config; None means the config promoted to the store for
    this GPU (see :func:`_promoted`)."""
    check_combined(x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states, seq_idx, cu_seqlens, return_varlen_states)
    x, z, B, C, D = (_last_dim_contiguous(t) for t in (x, z, B, C, D))
    configs = _op_configs(_promoted(x, B, chunk_size) if config is None else config)
    out, final_states, *varlen = MambaChunkScanCombinedFn.apply(
        x,
        dt,
        A,
        B,
        C,
        chunk_size,
        D,
        z,
        dt_bias,
        initial_states,
        seq_idx,
        cu_seqlens,
        dt_softplus,
        tuple(dt_limit),
        return_varlen_states,
        configs,
    )
    results: tuple[torch.Tensor, ...] = (out,)
    if return_final_states:
        results += (final_states,)
    results += tuple(varlen)
    return results[0] if len(results) == 1 else results


HAS_BACKWARD = True
"""Differentiable through the Helion backward kernels: the parity engine judges every gradient."""
