"""Reference of mamba-ssm's ``_state_passing_fwd``: the chunk-to-chunk recurrence that turns each chunk's
own state into the state entering every chunk."""

from __future__ import annotations

import torch

from contract.checks import check_state_passing
from reference.common import compute_dtype


def state_passing_fwd(
    states: torch.Tensor,
    dA_chunk_cumsum: torch.Tensor,
    initial_states: torch.Tensor | None = None,
    seq_idx: torch.Tensor | None = None,
    chunk_size: int | None = None,
    out_dtype: torch.dtype | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """states (b, c, h, d), dA_chunk_cumsum (b, h, c) (each chunk's total dA), initial_states (b, h, d) ->
    (out (b, c, h, d) in out_dtype or states.dtype, final_states (b, h, d) in fp32, fp64 for fp64 input).

    s = initial_states (zeros if None); for each chunk c: out[c] = s, then
    s = exp(dA_chunk_cumsum[c]) * s + states[c]; final_states is the last s. With seq_idx the decay is
    zeroed where the seq_idx at the end of chunk c differs from the one at the end of chunk c - 1, the
    "previous" seq_idx before chunk 0 being 0: an initial state is carried only into sequence 0."""
    check_state_passing(states, dA_chunk_cumsum, initial_states, seq_idx, chunk_size)
    batch, nchunks, nheads, dim = states.shape
    dtype = compute_dtype(states, dA_chunk_cumsum, initial_states)
    s = states.new_zeros(batch, nheads, dim, dtype=dtype) if initial_states is None else initial_states.to(dtype)
    decay = torch.exp(dA_chunk_cumsum.to(dtype))
    prev_seq = None if seq_idx is None else torch.zeros_like(seq_idx[:, 0])
    outs = []
    for c in range(nchunks):
        outs.append(s)
        factor = decay[:, :, c]
        if seq_idx is not None:
            seq = seq_idx[:, min((c + 1) * chunk_size, seq_idx.shape[-1]) - 1]
            factor = torch.where((seq == prev_seq)[:, None], factor, 0.0)
            prev_seq = seq
        s = factor[:, :, None] * s + states[:, c].to(dtype)
    out = torch.stack(outs, dim=1).to(states.dtype if out_dtype is None else out_dtype)
    return out, s
