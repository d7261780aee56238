"""Reference of mamba-ssm's gated LayerNorm/RMSNorm (``layernorm_gated.layernorm_fn`` and ``rmsnorm_fn``):
a per-group norm over the last dimension, gated by silu(z) before or after normalizing."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from contract.checks import check_layernorm


def layernorm_fn(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    z: torch.Tensor | None = None,
    eps: float = 1e-6,
    group_size: int | None = None,
    norm_before_gate: bool = True,
    is_rms_norm: bool = False,
) -> torch.Tensor:
    """x (..., N), weight and bias (N,), z like x -> y like x, in x.dtype.

    Each group of ``group_size`` consecutive features (all N when None) is normalized on its own
    (LayerNorm: mean and biased variance; RMSNorm: mean square), then y = x_hat * weight + bias.
    With z: y = norm(x) * silu(z) if norm_before_gate, else norm(x * silu(z)). Statistics in fp32,
    fp64 when any input is fp64."""
    group_size = check_layernorm(x, weight, bias, z, group_size)
    n = x.shape[-1]
    wide = (
        torch.float64
        if any(t is not None and t.dtype == torch.float64 for t in (x, weight, bias, z))
        else torch.float32
    )
    h = x.to(wide)
    if z is not None and not norm_before_gate:
        h = h * F.silu(z.to(wide))
    groups = h.reshape(*h.shape[:-1], n // group_size, group_size)
    if not is_rms_norm:
        groups = groups - groups.mean(dim=-1, keepdim=True)
    rstd = torch.rsqrt(groups.square().mean(dim=-1, keepdim=True) + eps)
    y = (groups * rstd).reshape(h.shape) * weight.to(wide)
    if bias is not None:
        y = y + bias.to(wide)
    if z is not None and norm_before_gate:
        y = y * F.silu(z.to(wide))
    return y.to(x.dtype)


def rmsnorm_fn(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    z: torch.Tensor | None = None,
    eps: float = 1e-6,
    group_size: int | None = None,
    norm_before_gate: bool = True,
) -> torch.Tensor:
    """:func:`layernorm_fn` with ``is_rms_norm=True``."""
    return layernorm_fn(
        x, weight, bias, z=z, eps=eps, group_size=group_size, norm_before_gate=norm_before_gate, is_rms_norm=True
    )
