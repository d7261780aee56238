"""A segmented fp64 oracle of ``mamba_chunk_scan_combined`` for sequences too long for whole-sequence fp64 copies.

The SSD carries all of its history in its state, so the sequence is referenced segment by segment: each segment of
``segment_len`` tokens runs the whole-sequence reference (:mod:`reference.ssd_combined`) in fp64 on fp64 copies of
that segment alone, starting from the previous segment's final state (the reference's ``initial_states``). The
whole-length tensors stay in the dtype they were given in (the engine passes fp32 for long problems: exact for
bf16, fp16 and fp32 inputs); outputs and gradients are rounded once into it.

Gradients are exact, not judged on a window: a reverse pass over the segments recomputes each one in fp64 from its
saved entering state (one (batch, nheads, headdim, dstate) fp64 state per segment is all the forward keeps) and
back-propagates the upstream gradient of its output together with the adjoint of its final state, which is the
gradient of the next segment's ``initial_states``; the gradients of the parameters (A, D, dt_bias) sum over the
segments. This is the whole-sequence autograd graph cut at segment boundaries, so forward and backward equal the
whole-sequence oracle up to fp64 rounding (tests/test_ssd_segmented.py: 1e-12).

Segments must be multiples of ``chunk_size`` (the last one may be ragged): the reference's chunks, like
mamba-ssm's, start at multiples of ``chunk_size`` from the sequence's start, and only aligned segments keep them
there. With ``seq_idx`` each segment's sequence ids are renumbered so that the sequence running into it carries
the entering state (the reference carries an initial state only into sequence id 0); negative ids (padding) are
refused, as are ``cu_seqlens`` and ``return_varlen_states``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from contract.checks import check_combined
from reference.ssd_combined import mamba_chunk_scan_combined as whole

F64 = torch.float64
SEQUENCE_INPUTS = ("x", "dt", "B", "C", "z")
"""The inputs with a sequence axis (dim 1): sliced per segment."""
PARAMETERS = ("A", "D", "dt_bias")
"""The inputs without one: every segment uses them, their gradients sum over segments."""


def check_segments(seqlen: int, chunk_size: int, segment_len: int) -> None:
    """Refuse, in one line, a segment length that would move the reference's chunk boundaries."""
    if segment_len <= 0 or segment_len % chunk_size:
        raise ValueError(
            f"segment_len ({segment_len}) must be a positive multiple of chunk_size ({chunk_size}), so that "
            f"segments start on mamba-ssm's chunk boundaries (seqlen {seqlen})"
        )


def _renumber(seq_idx: torch.Tensor, start: int, stop: int) -> torch.Tensor:
    """The segment's seq_idx with the id of the token before it and id 0 swapped, per batch row: the sequence
    that runs into the segment becomes sequence 0, the one the reference carries ``initial_states`` into.
    Equality between ids, all the reference reads, is kept."""
    seg = seq_idx[:, start:stop]
    if start == 0:
        return seg
    prev = seq_idx[:, start - 1 : start]
    return torch.where(seg == prev, torch.zeros_like(seg), torch.where(seg == 0, prev, seg))


def _slice(tensors: dict[str, torch.Tensor | None], start: int, stop: int) -> dict[str, torch.Tensor | None]:
    """fp64 copies of tokens [start, stop) of the sequence inputs, and of the parameters."""
    return {
        k: None if v is None else (v[:, start:stop] if k in SEQUENCE_INPUTS else v).detach().to(F64, copy=True)
        for k, v in tensors.items()
    }


def _segment(
    args: dict[str, torch.Tensor | None],
    state: torch.Tensor | None,
    seq_idx: torch.Tensor | None,
    start: int,
    stop: int,
    options: dict[str, Any],
) -> tuple[torch.Tensor, torch.Tensor]:
    """The reference on the segment [start, stop) (``args``: its fp64 inputs, :func:`_slice`) from the entering
    ``state``: (out, final_states)."""
    out, final = whole(
        **args,
        initial_states=state,
        seq_idx=None if seq_idx is None else _renumber(seq_idx, start, stop),
        return_final_states=True,
        **options,
    )
    return out, final


class _Segmented(torch.autograd.Function):
    """Forward over the segments keeping only their entering states; backward by a reverse pass over them."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        options: dict[str, Any],
        segment_len: int,
        seq_idx: torch.Tensor | None,
        x: torch.Tensor,
        dt: torch.Tensor,
        A: torch.Tensor,
        B: torch.Tensor,
        C: torch.Tensor,
        D: torch.Tensor | None,
        z: torch.Tensor | None,
        dt_bias: torch.Tensor | None,
        initial_states: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        tensors = {"x": x, "dt": dt, "A": A, "B": B, "C": C, "D": D, "z": z, "dt_bias": dt_bias}
        out = torch.empty_like(x)
        state = None if initial_states is None else initial_states.to(F64)
        entering = []
        for start in range(0, x.shape[1], segment_len):
            stop = min(start + segment_len, x.shape[1])
            entering.append(state)
            seg_out, state = _segment(_slice(tensors, start, stop), state, seq_idx, start, stop, options)
            out[:, start:stop] = seg_out
        assert state is not None
        ctx.options, ctx.segment_len, ctx.entering = options, segment_len, entering
        ctx.save_for_backward(seq_idx, x, dt, A, B, C, D, z, dt_bias, initial_states)
        return out, state.to(x.dtype)

    @staticmethod
    def backward(ctx: Any, dout: torch.Tensor, dfinal: torch.Tensor) -> tuple[torch.Tensor | None, ...]:  # type: ignore[override]
        seq_idx, x, dt, A, B, C, D, z, dt_bias, initial_states = ctx.saved_tensors
        tensors = {"x": x, "dt": dt, "A": A, "B": B, "C": C, "D": D, "z": z, "dt_bias": dt_bias}
        names = tuple(tensors)
        wanted = {n for n, need in zip(names, ctx.needs_input_grad[3:11], strict=True) if need}
        grads: dict[str, torch.Tensor] = {
            n: torch.zeros_like(tensors[n]) if n in SEQUENCE_INPUTS else torch.zeros_like(tensors[n], dtype=F64)
            for n in wanted
        }
        adjoint = dfinal.to(F64)
        for k in reversed(range(len(ctx.entering))):
            start = k * ctx.segment_len
            stop = min(start + ctx.segment_len, x.shape[1])
            args = _slice(tensors, start, stop)
            leaves = {n: t.requires_grad_(True) for n, t in args.items() if n in wanted and t is not None}
            entering = ctx.entering[k]
            state = None if entering is None else entering.clone().requires_grad_(True)
            with torch.enable_grad():
                seg_out, final = _segment(args, state, seq_idx, start, stop, ctx.options)
                inputs = [*leaves.values(), *([state] if state is not None else [])]
                got = torch.autograd.grad(
                    [seg_out, final], inputs, [dout[:, start:stop].to(F64), adjoint], allow_unused=True
                )
            for n, g in zip(leaves, got[: len(leaves)], strict=True):
                if g is None:
                    continue
                if n in SEQUENCE_INPUTS:
                    grads[n][:, start:stop] = g
                else:
                    grads[n] += g
            if state is not None:
                adjoint = got[-1] if got[-1] is not None else torch.zeros_like(adjoint)
        d_initial = (
            adjoint.to(initial_states.dtype) if initial_states is not None and ctx.needs_input_grad[11] else None
        )
        return (None, None, None, *(grads[n].to(tensors[n].dtype) if n in grads else None for n in names), d_initial)


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
    segment_len: int,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """The reference's signature plus ``segment_len`` (tokens per fp64 segment, a multiple of ``chunk_size``).

    Returns out in x.dtype, and final_states (b, h, p, n) in x.dtype if return_final_states; differentiable in
    every floating-point input as the reference is."""
    check_combined(x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states, seq_idx, cu_seqlens, return_varlen_states)
    if cu_seqlens is not None or return_varlen_states:
        raise ValueError("cu_seqlens: the segmented oracle does not compute varlen states; use the reference")
    if seq_idx is not None and bool((seq_idx < 0).any()):
        raise ValueError("seq_idx: the segmented oracle refuses negative sequence ids (padding)")
    check_segments(x.shape[1], chunk_size, segment_len)
    options = {"chunk_size": chunk_size, "dt_softplus": dt_softplus, "dt_limit": dt_limit}
    out, final = _Segmented.apply(options, segment_len, seq_idx, x, dt, A, B, C, D, z, dt_bias, initial_states)
    return (out, final) if return_final_states else out


def segmented(segment_len: int) -> Callable[..., Any]:
    """The segmented oracle with ``segment_len`` tokens per segment, callable with the op's keyword arguments."""
    return functools.partial(mamba_chunk_scan_combined, segment_len=segment_len)
