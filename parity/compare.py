"""Error statistics of one tensor against the float64 oracle, and the verdict rule."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from parity.tolerances import Tolerance


@dataclass(frozen=True)
class ErrorStats:
    """How far one output is from the oracle.

    max_rel divides by max(|oracle|, 1e-3 * rms(oracle)) so that near-zero oracle entries do not
    dominate. Non-finite values where the oracle is finite make max_abs infinite.
    """

    max_abs: float
    rel_l2: float
    max_rel: float
    nan: int
    inf: int
    worst_index: tuple[int, ...]
    worst_value: float
    worst_oracle: float
    oracle_max_abs: float

    def to_dict(self) -> dict:
        return asdict(self)


BLOCK = 1 << 26
"""Elements compared at a time: the fp64 temporaries are those of one block (a few GB at most), never of a whole
tensor (a long problem's output past 2^31 elements would take 17 GB per fp64 copy, several at once)."""


def error_stats(actual: torch.Tensor, oracle: torch.Tensor) -> ErrorStats:
    """Compare ``actual`` (any dtype) with ``oracle`` (float64) elementwise, :data:`BLOCK` elements at a time."""
    if actual.shape != oracle.shape:
        raise ValueError(f"shape {tuple(actual.shape)} != oracle shape {tuple(oracle.shape)}")
    if actual.numel() == 0:
        return ErrorStats(0.0, 0.0, 0.0, 0, 0, (), 0.0, 0.0, 0.0)
    # On the oracle's device: at training shapes (67M elements) a host copy and CPU passes cost seconds per
    # quantity; only scalars leave the device.
    flat_r, flat_a = oracle.detach().reshape(-1), actual.detach().reshape(-1)
    spans = [(s, min(s + BLOCK, flat_r.numel())) for s in range(0, flat_r.numel(), BLOCK)]

    def oracle_block(s: int, e: int) -> tuple[torch.Tensor, torch.Tensor]:
        r = flat_r[s:e].to(torch.float64)
        return r, torch.where(torch.isfinite(r), r, torch.zeros_like(r))

    ref_norms, oracle_max_abs = [], 0.0
    for s, e in spans:
        _, finite_r = oracle_block(s, e)
        ref_norms.append(float(torch.linalg.vector_norm(finite_r)))
        oracle_max_abs = max(oracle_max_abs, float(finite_r.abs().max()))
    ref_norm = float(torch.linalg.vector_norm(torch.tensor(ref_norms, dtype=torch.float64)))
    rms = ref_norm / flat_r.numel() ** 0.5
    floor = max(1e-3 * rms, torch.finfo(torch.float64).tiny)
    nan = inf = worst = 0
    max_abs, max_rel, diff_norms = -1.0, 0.0, []
    for s, e in spans:
        r, finite_r = oracle_block(s, e)
        a = flat_a[s:e].to(device=r.device, dtype=torch.float64)
        nan += int(torch.isnan(a).sum())
        inf += int(torch.isinf(a).sum())
        diff = (a - r).abs()
        # A non-finite value counts as infinitely wrong, unless the oracle has the same value there.
        same = (a == r) | (torch.isnan(a) & torch.isnan(r))
        diff = torch.where(same, torch.zeros_like(diff), diff)
        diff = torch.where(torch.isnan(diff), torch.full_like(diff, float("inf")), diff)
        at = int(torch.argmax(diff))
        if float(diff[at]) > max_abs:  # strictly: the first occurrence of the maximum, as argmax over the whole
            max_abs, worst = float(diff[at]), s + at
        diff_norms.append(float(torch.linalg.vector_norm(diff)))
        max_rel = max(max_rel, float((diff / torch.clamp(finite_r.abs(), min=floor)).max()))
    diff_norm = float(torch.linalg.vector_norm(torch.tensor(diff_norms, dtype=torch.float64)))
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(worst), tuple(actual.shape)))
    return ErrorStats(
        max_abs=max_abs,
        rel_l2=diff_norm / ref_norm if ref_norm > 0 else (0.0 if diff_norm == 0 else float("inf")),
        max_rel=max_rel,
        nan=nan,
        inf=inf,
        worst_index=index,
        worst_value=float(flat_a[worst].to(torch.float64)),
        worst_oracle=float(flat_r[worst].to(torch.float64)),
        oracle_max_abs=oracle_max_abs,
    )


def bound(tol: Tolerance, baseline: ErrorStats | None, oracle_max_abs: float) -> float:
    """The largest max-abs error a candidate may have.

    With a baseline (the original kernel in the same dtype): factor * err(baseline) + atol * max(1, max|oracle|),
    the FlashAttention rule with an fp64 oracle; atol is a few ulp at 1.0 (slack for outputs the baseline
    happens to round exactly), so it scales with outputs larger than 1 (an fp32 CB of 279 carries 3 ulp =
    9e-5 of honest rounding where mamba-ssm rounded exactly: a fixed 1e-5 failed it). Without a baseline:
    atol + rtol * max|oracle|.
    """
    if baseline is not None:
        return tol.factor * baseline.max_abs + tol.atol * max(1.0, oracle_max_abs)
    return tol.atol + tol.rtol * oracle_max_abs
