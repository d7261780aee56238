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


def error_stats(actual: torch.Tensor, oracle: torch.Tensor) -> ErrorStats:
    """Compare ``actual`` (any dtype) with ``oracle`` (float64) elementwise."""
    if actual.shape != oracle.shape:
        raise ValueError(f"shape {tuple(actual.shape)} != oracle shape {tuple(oracle.shape)}")
    # On the oracle's device: at training shapes (67M elements) a host copy and CPU passes cost seconds per
    # quantity; only scalars leave the device.
    r = oracle.detach().to(torch.float64)
    a = actual.detach().to(device=r.device, dtype=torch.float64)
    nan = int(torch.isnan(a).sum())
    inf = int(torch.isinf(a).sum())
    if a.numel() == 0:
        return ErrorStats(0.0, 0.0, 0.0, 0, 0, (), 0.0, 0.0, 0.0)
    diff = (a - r).abs()
    # A non-finite value counts as infinitely wrong, unless the oracle has the same value there.
    same = (a == r) | (torch.isnan(a) & torch.isnan(r))
    diff = torch.where(same, torch.zeros_like(diff), diff)
    diff = torch.where(torch.isnan(diff), torch.full_like(diff, float("inf")), diff)
    flat = int(torch.argmax(diff))
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), tuple(a.shape)))
    finite_r = torch.where(torch.isfinite(r), r, torch.zeros_like(r))
    ref_norm = float(torch.linalg.vector_norm(finite_r))
    rms = ref_norm / max(r.numel(), 1) ** 0.5
    diff_norm = float(torch.linalg.vector_norm(diff))
    floor = max(1e-3 * rms, torch.finfo(torch.float64).tiny)
    max_rel = float((diff / torch.clamp(finite_r.abs(), min=floor)).max())
    return ErrorStats(
        max_abs=float(diff.max()),
        rel_l2=diff_norm / ref_norm if ref_norm > 0 else (0.0 if diff_norm == 0 else float("inf")),
        max_rel=max_rel,
        nan=nan,
        inf=inf,
        worst_index=index,
        worst_value=float(a[index]),
        worst_oracle=float(r[index]),
        oracle_max_abs=float(finite_r.abs().max()),
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
