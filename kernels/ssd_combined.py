"""The Mamba-2 chunked SSD forward (mamba-ssm's ``mamba_chunk_scan_combined``) chained from the Helion
kernels of its five ops, in mamba-ssm's order and with its intermediate dtypes:
chunk_cumsum -> chunk_state -> state_passing -> bmm_chunk -> chunk_scan (+ chunk_state_varlen)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from kernels import bmm_chunk, chunk_cumsum, chunk_scan, chunk_state, state_passing
from kernels.chunk_cumsum import ConfigLike

OPS = ("chunk_cumsum", "chunk_state", "state_passing", "bmm_chunk", "chunk_scan", "chunk_state_varlen")
"""The keys of the combined op's config: one Helion config per op (a missing key means that op's default)."""

CONFIGS: list[dict[str, Any]] = [
    {"chunk_cumsum": chunk_cumsum.CONFIGS[0], "chunk_state": chunk_state.CONFIGS[0],
     "state_passing": state_passing.CONFIGS[0], "bmm_chunk": bmm_chunk.CONFIGS[0],
     "chunk_scan": chunk_scan.CONFIGS[0], "chunk_state_varlen": chunk_state.VARLEN_CONFIGS[0]},
    {"chunk_cumsum": chunk_cumsum.CONFIGS[1], "chunk_state": chunk_state.CONFIGS[1],
     "state_passing": state_passing.CONFIGS[1], "bmm_chunk": bmm_chunk.CONFIGS[1],
     "chunk_scan": chunk_scan.CONFIGS[1], "chunk_state_varlen": chunk_state.VARLEN_CONFIGS[1]},
]
"""Explicit configs for the CPU parity tests: each op's CONFIGS[0], then each op's CONFIGS[1]."""


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
    (nseq, h, p, n, C.dtype) if return_varlen_states, as mamba-ssm does. Intermediates as in mamba-ssm:
    dt and dA_cumsum fp32, chunk states fp32, the states entering each chunk in C.dtype, CB fp32.
    config maps op name (see :data:`OPS`) -> that op's Helion config."""
    configs = _op_configs(config)
    batch, seqlen, nheads, headdim = x.shape
    if B.dim() != 4 or B.shape[:2] != (batch, seqlen):
        raise ValueError(f"B must be (batch={batch}, seqlen={seqlen}, ngroups, dstate), got {tuple(B.shape)}")
    if C.shape != B.shape:
        raise ValueError(f"C must have the shape of B {tuple(B.shape)}, got {tuple(C.shape)}")
    if dt.shape != (batch, seqlen, nheads):
        raise ValueError(f"dt must have shape {(batch, seqlen, nheads)}, got {tuple(dt.shape)}")
    dstate = B.shape[-1]
    if initial_states is not None and initial_states.shape != (batch, nheads, headdim, dstate):
        raise ValueError(f"initial_states must have shape {(batch, nheads, headdim, dstate)}, "
                         f"got {tuple(initial_states.shape)}")
    if return_varlen_states:
        if cu_seqlens is None:
            raise ValueError("cu_seqlens must be provided if return_varlen_states is True")
        if batch != 1:
            raise ValueError("passing cu_seqlens to get the varlen states is only supported if batch is 1")
    x, z, B, C, D = (_last_dim_contiguous(t) for t in (x, z, B, C, D))

    dA_cumsum, dt_out = chunk_cumsum.chunk_cumsum_fwd(dt, A, chunk_size, dt_bias=dt_bias, dt_softplus=dt_softplus,
                                                      dt_limit=dt_limit, config=configs["chunk_cumsum"])
    states = chunk_state.chunk_state_fwd(B, x, dt_out, dA_cumsum, seq_idx=seq_idx, states_in_fp32=True,
                                         config=configs["chunk_state"])
    nchunks = states.shape[1]
    states, final_states = state_passing.state_passing_fwd(
        states.reshape(batch, nchunks, nheads, headdim * dstate), dA_cumsum[:, :, :, -1],
        initial_states=None if initial_states is None else initial_states.reshape(batch, nheads, headdim * dstate),
        seq_idx=seq_idx, chunk_size=chunk_size, out_dtype=C.dtype, config=configs["state_passing"])
    states = states.reshape(batch, nchunks, nheads, headdim, dstate)
    final_states = final_states.reshape(batch, nheads, headdim, dstate)
    cb = bmm_chunk.bmm_chunk_fwd(C, B, chunk_size, seq_idx=seq_idx, output_dtype=torch.float32,
                                 config=configs["bmm_chunk"])
    out, _ = chunk_scan.chunk_scan_fwd(cb, x, dt_out, dA_cumsum, C, states, D=D, z=z, seq_idx=seq_idx,
                                       config=configs["chunk_scan"])
    results: tuple[torch.Tensor, ...] = (out,)
    if return_final_states:
        results += (final_states,)
    if return_varlen_states:
        results += (chunk_state.chunk_state_varlen(B[0], x[0], dt_out[0], dA_cumsum[0], cu_seqlens, states[0],
                                                   config=configs["chunk_state_varlen"]),)
    return results[0] if len(results) == 1 else results


HAS_BACKWARD = False
"""Forward only: the parity engine judges this port's outputs, not its gradients (no Helion backward yet)."""
