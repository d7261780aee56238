"""A small op that is not Mamba, for the engine's self-tests: a chunked decaying prefix sum,

out[b, l] = sum over s <= l in l's chunk of x[b, s] * exp(a * (l - s)) + d * x[b, l],

with a correct reference, a second correct implementation (the 'baseline') and mutants that are
wrong in distinct ways.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from hypothesis import strategies as st

from parity.spec import Impl, OpSpec


def _decay(length: int, a: torch.Tensor) -> torch.Tensor:
    """(length, length) lower-triangular exp(a * (l - s))."""
    idx = torch.arange(length, device=a.device, dtype=a.dtype)
    diff = idx[:, None] - idx[None, :]
    return torch.where(diff >= 0, torch.exp(a * diff.clamp(min=0)), torch.zeros((), dtype=a.dtype, device=a.device))


def reference(
    x: torch.Tensor,
    a: torch.Tensor,
    d: torch.Tensor,
    chunk: int,
    shift: int = 0,
    acc: torch.dtype | None = None,
    drop_d: bool = False,
) -> torch.Tensor:
    """The op; ``shift``/``acc``/``drop_d`` inject the bugs the mutants below need."""
    work = acc or (torch.float64 if x.dtype == torch.float64 else torch.float32)
    xs, aa = x.to(work), a.to(work)
    out = torch.zeros_like(xs)
    length = x.shape[1]
    starts = [0, *range(chunk + shift, length, chunk)] if shift else list(range(0, length, chunk))
    for i, start in enumerate(starts):
        stop = starts[i + 1] if i + 1 < len(starts) else length
        out[:, start:stop] = xs[:, start:stop] @ _decay(stop - start, aa).T
    if not drop_d:
        out = out + d.to(work) * xs
    return out.to(x.dtype)


def baseline(x, a, d, chunk):
    """A second correct implementation, as a loop over positions (the 'original kernel')."""
    columns = []
    run = torch.zeros(x.shape[0], dtype=torch.float32)
    for pos in range(x.shape[1]):
        run = (run * torch.exp(a.float()) if pos % chunk else 0.0) + x[:, pos].float()
        columns.append(run + d.float() * x[:, pos].float())
    return torch.stack(columns, dim=1).to(x.dtype)


def shifted(x, a, d, chunk):
    return reference(x, a, d, chunk, shift=1)


def bf16_accumulation(x, a, d, chunk):
    return reference(x, a, d, chunk, acc=torch.bfloat16)


def dropped_term(x, a, d, chunk):
    return reference(x, a, d, chunk, drop_d=True)


def nan_output(x, a, d, chunk):
    out = reference(x, a, d, chunk)
    return torch.where(torch.arange(out.numel()).reshape(out.shape) == out.numel() // 2, float("nan"), out)


def unwritten_tail(x, a, d, chunk):
    """Writes only whole chunks; the ragged tail keeps whatever the allocation held."""
    full = reference(x, a, d, chunk)
    out = torch.empty_like(full)
    whole = (x.shape[1] // chunk) * chunk
    out[:, :whole] = full[:, :whole]
    return out


def make_inputs(p, dtype, seed, device):
    g = torch.Generator().manual_seed(seed)
    return {
        "x": torch.randn(p["batch"], p["length"], generator=g).to(device, dtype),
        "a": -torch.rand((), generator=g).to(device) - 0.1,
        "d": torch.randn((), generator=g).to(device),
        "chunk": p["chunk"],
    }


def problems(profile: str):
    return st.fixed_dictionaries(
        {"batch": st.integers(1, 3), "length": st.integers(1, 40), "chunk": st.sampled_from([4, 8])}
    )


def spec(*candidates: Callable) -> OpSpec:
    return OpSpec(
        name="decay_sum",
        reference=Impl("torch", reference),
        make_inputs=make_inputs,
        problems=problems,
        outputs=("out",),
        grad_inputs=("x", "a", "d"),
        baseline=Impl("loop", baseline),
        candidates=tuple(Impl(c.__name__, c) for c in candidates),
        examples=({"batch": 2, "length": 13, "chunk": 4},),
    )
