"""Helion port of mamba-ssm's ``_state_passing_fwd``: the inter-chunk recurrence
s_c = exp(dA_chunk_cumsum[c]) * s_{c-1} + states[c] (decay zeroed where a new sequence starts), computed as
an associative scan over chunks instead of a sequential loop."""

from __future__ import annotations

from typing import Any

import helion
import helion.language as hl
import torch
import triton

from contract.checks import check_state_passing
from kernels.launch import ConfigLike, launch
from kernels.precision import acc_dtype


def affine_combine(
    left: tuple[torch.Tensor, torch.Tensor], right: tuple[torch.Tensor, torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Compose two affine maps s -> a*s + b, left first: (a1, b1) o (a2, b2) = (a1*a2, a2*b1 + b2). The combine
    function of the forward state scan."""
    a1, b1 = left
    a2, b2 = right
    return a1 * a2, a2 * b1 + b2


def chunk_end_sequences(
    seq_idx: torch.Tensor, batch_index: int, chunk: torch.Tensor, chunk_size: int, real: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(seq_end, seq_before): per chunk, the sequence of its last position and of the previous chunk's last
    position (sequence 0 before the first chunk); ``real`` masks the chunks that exist. A chunk continues the
    previous chunk's sequence only where the two are equal, so the decay into it is zeroed elsewhere. Shared
    by the forward scan here and the backward's state kernel in :mod:`kernels.ssd_combined_bwd`."""
    seqlen = seq_idx.size(1)
    seq_end = hl.load(seq_idx, [batch_index, torch.clamp((chunk + 1) * chunk_size, max=seqlen) - 1], extra_mask=real)
    seq_before = hl.load(seq_idx, [batch_index, chunk * chunk_size - 1], extra_mask=real & (chunk > 0))
    return seq_end, seq_before


def block_last(values: torch.Tensor, index: torch.Tensor, count: int, begin: int, block: int) -> torch.Tensor:
    """The row of ``values`` (one per scan element ``index`` of the block starting at ``begin``) at the block's last
    real element (``index < count``): the value a blocked scan carries into its next block."""
    last = (index < count) & ((index + 1 == count) | (index + 1 == begin + block))
    return torch.sum(torch.where(last[:, None], values, 0.0), dim=0)


def carried_in(
    update: torch.Tensor, decay: torch.Tensor, carry: torch.Tensor, index: torch.Tensor, begin: int
) -> torch.Tensor:
    """``update`` (one row per scan element ``index`` of the block starting at ``begin``) with the value carried into
    the block (``carry``, one row) folded into its first element, ``decay * carry``: the block's scan then continues
    the recurrence itself, with no second scan of the running decay to scale the carry by. The caller takes the row
    (``carry[None, :]``): Helion 1.5.0 cannot lower that indexing of a loop-carried value inside a helper."""
    return update + torch.where(index == begin, decay, 0.0)[:, None] * carry


SCAN_BLOCK = 1024
"""The most chunks one scan step covers: a longer sequence is scanned block after block, the state carried
between them. One block over all chunks needs shared memory in proportion to their number: at 4098 chunks (8192
padded) Triton asked for 256 KiB, past the H100's 227 KiB (bench/results/h200-run24)."""


def scan_block(nchunks: int) -> int:
    """The chunk block of the forward state scan: all chunks at once up to
    :data:`SCAN_BLOCK` (a power of two, at least 2, so the scan's dimension is never of size 1), else SCAN_BLOCK."""
    return min(SCAN_BLOCK, max(2, triton.next_power_of_2(nchunks)))


@helion.kernel(static_shapes=False)
def state_passing_kernel(
    states: torch.Tensor,
    dA_chunk_cumsum: torch.Tensor,
    initial_states: torch.Tensor | None,
    seq_idx: torch.Tensor | None,
    chunk_size: int,
    out_dtype: torch.dtype,
    chunk_block: hl.constexpr,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(out (batch, nchunks, nheads, dim) in out_dtype, final_states (batch, nheads, dim) fp32, fp64 for
    fp64 states).

    One program per (batch, head, block of dim), scanning the chunks ``chunk_block`` (:func:`scan_block`) at a
    time: each block is one associative scan whose first element takes in the state carried from the blocks before
    (:func:`carried_in`). Padded chunks load as (0, 0) and come after the real ones, so they
    change no prefix."""
    batch, nchunks, nheads, dim = states.shape
    wide = acc_dtype(states.dtype)
    out = torch.empty([batch, nchunks, nheads, dim], dtype=out_dtype, device=states.device)
    final_states = torch.empty([batch, nheads, dim], dtype=wide, device=states.device)
    for tile_b, tile_h, tile_d in hl.tile([batch, nheads, dim], block_size=[1, 1, None]):
        if initial_states is not None:
            carry = initial_states[tile_b.begin, tile_h.begin, tile_d].to(wide)
        else:
            carry = hl.zeros([tile_d], dtype=wide)
        out[tile_b.begin, 0, tile_h.begin, tile_d] = carry.to(out_dtype)
        for tile_c in hl.tile(nchunks, block_size=chunk_block):
            chunk = tile_c.index
            real = chunk < nchunks
            update = hl.load(states, [tile_b.begin, chunk, tile_h.begin, tile_d], extra_mask=real[:, None]).to(wide)
            decay = torch.exp(hl.load(dA_chunk_cumsum, [tile_b.begin, tile_h.begin, chunk], extra_mask=real).to(wide))
            if seq_idx is not None:
                seq_end, seq_before = chunk_end_sequences(seq_idx, tile_b.begin, chunk, chunk_size, real)
                decay = torch.where(seq_end == seq_before, decay, 0.0)
            update = carried_in(update, decay, carry[None, :], chunk, tile_c.begin)
            _, state = hl.associative_scan(affine_combine, (decay[:, None] + torch.zeros_like(update), update), dim=0)
            # state[c] is the state after chunk c: out[c + 1] for c < nchunks - 1, final_states for the last.
            if nchunks > 1:  # with nchunks == 1, Helion drops the (size-1) chunk index and the store mis-shapes
                hl.store(
                    out,
                    [tile_b.begin, chunk + 1, tile_h.begin, tile_d],
                    state.to(out_dtype),
                    extra_mask=(chunk + 1 < nchunks)[:, None],
                )
            carry = block_last(state, chunk, nchunks, tile_c.begin, chunk_block)
        final_states[tile_b.begin, tile_h.begin, tile_d] = carry
    return out, final_states


CONFIGS: list[dict[str, Any]] = [
    {"block_sizes": [64], "num_warps": 1},
    {"block_sizes": [16], "num_warps": 2},
]
"""Explicit configs for the CPU parity tests. The knob that changes the executed code is the dim block
(block_sizes[0]); the chunk axis is always one block, so no config can split the scan. The first is also
the fastest seen on the H200 at the Nemotron shape, faster than the default config (the timings:
bench/results/kernel-config-notes.md)."""


def state_passing_args(
    states: torch.Tensor,
    dA_chunk_cumsum: torch.Tensor,
    initial_states: torch.Tensor | None = None,
    seq_idx: torch.Tensor | None = None,
    chunk_size: int | None = None,
    out_dtype: torch.dtype | None = None,
) -> tuple[Any, ...]:
    """Validate the wrapper's arguments and return the arguments of :data:`state_passing_kernel` (what a tuner
    passes to ``state_passing_kernel.autotune``)."""
    check_state_passing(states, dA_chunk_cumsum, initial_states, seq_idx, chunk_size)
    nchunks = states.shape[1]
    return (
        states,
        dA_chunk_cumsum,
        initial_states,
        seq_idx,
        int(chunk_size or 0),
        states.dtype if out_dtype is None else out_dtype,
        scan_block(nchunks),
    )


def state_passing_fwd(
    states: torch.Tensor,
    dA_chunk_cumsum: torch.Tensor,
    initial_states: torch.Tensor | None = None,
    seq_idx: torch.Tensor | None = None,
    chunk_size: int | None = None,
    out_dtype: torch.dtype | None = None,
    *,
    config: ConfigLike = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """states (batch, nchunks, nheads, dim), dA_chunk_cumsum (batch, nheads, nchunks) -> (out, final_states).

    out[:, 0] is the initial state (zeros when None) and out[:, c] the state entering chunk c, in out_dtype (default
    states.dtype); final_states (fp32; fp64 for fp64 states) is the state after the last chunk. With seq_idx (batch,
    seqlen), the decay into a chunk is zeroed when the chunk ends in another sequence than the previous chunk, as in
    mamba-ssm."""
    args = state_passing_args(states, dA_chunk_cumsum, initial_states, seq_idx, chunk_size, out_dtype)
    return launch(state_passing_kernel, args, config)


HAS_BACKWARD = False
"""Forward only: the parity engine judges this port's outputs, not its gradients (no Helion backward yet)."""
