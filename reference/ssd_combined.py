"""Reference of mamba-ssm's ``mamba_chunk_scan_combined``: the chunked SSD forward, chaining the op
references in the order and with the intermediate dtypes of ``_mamba_chunk_scan_combined_fwd``."""

from __future__ import annotations

import torch

from contract.checks import check_combined
from reference.bmm_chunk import bmm_chunk_fwd
from reference.chunk_cumsum import chunk_cumsum_fwd
from reference.chunk_scan import chunk_scan_fwd
from reference.chunk_state import chunk_state_fwd, chunk_state_varlen
from reference.common import compute_dtype
from reference.state_passing import state_passing_fwd


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
) -> torch.Tensor | tuple[torch.Tensor, ...]:
    """x (b, l, h, p), dt (b, l, h), A (h,), B and C (b, l, g, n), D (h,) or (h, p), z like x, dt_bias (h,),
    initial_states (b, h, p, n), seq_idx (b, l), cu_seqlens (nseq + 1,) (read only with
    return_varlen_states, which needs b == 1).

    Returns out (x.dtype), then final_states (b, h, p, n; fp32, fp64 for fp64 input) if
    return_final_states, then varlen_states (nseq, h, p, n; C.dtype) if return_varlen_states. As in
    mamba-ssm the states entering each chunk are stored in C.dtype between state passing and the scan."""
    check_combined(x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states, seq_idx, cu_seqlens, return_varlen_states)
    batch, _, nheads, headdim = x.shape
    dstate = B.shape[-1]
    wide = compute_dtype(x, dt, A, B, C, D, z, dt_bias, initial_states)  # mamba-ssm's "fp32" intermediates
    dA_cumsum, dt_out = chunk_cumsum_fwd(
        dt.to(wide), A, chunk_size, dt_bias=dt_bias, dt_softplus=dt_softplus, dt_limit=dt_limit
    )
    states = chunk_state_fwd(B, x, dt_out, dA_cumsum, seq_idx=seq_idx, states_in_fp32=True)
    nchunks = states.shape[1]
    states, final_states = state_passing_fwd(
        states.reshape(batch, nchunks, nheads, headdim * dstate),
        dA_cumsum[:, :, :, -1],
        initial_states=None if initial_states is None else initial_states.reshape(batch, nheads, -1),
        seq_idx=seq_idx,
        chunk_size=chunk_size,
        out_dtype=C.dtype,
    )
    states = states.reshape(batch, nchunks, nheads, headdim, dstate)
    final_states = final_states.reshape(batch, nheads, headdim, dstate)
    cb = bmm_chunk_fwd(C, B, chunk_size, seq_idx=seq_idx, output_dtype=wide)
    out, _ = chunk_scan_fwd(cb, x, dt_out, dA_cumsum, C, states, D=D, z=z, seq_idx=seq_idx)
    results: tuple[torch.Tensor, ...] = (out,)
    if return_final_states:
        results += (final_states,)
    if return_varlen_states:
        results += (chunk_state_varlen(B[0], x[0], dt_out[0], dA_cumsum[0], cu_seqlens, states[0]),)
    return results[0] if len(results) == 1 else results
