"""A row-blocked fp64 oracle of the gated norm (``layernorm_fn``) for inputs too large for whole-tensor fp64 copies.

Rows are independent, so the reference (:mod:`reference.layernorm_gated`) runs in fp64 on fp64 copies of
``block_rows`` rows at a time; the whole-size tensors stay in the dtype they were given in (fp32 for long problems:
exact for bf16, fp16 and fp32 inputs), and outputs and gradients are rounded once into it. The backward recomputes
each block in fp64 and back-propagates its slice of the upstream gradient; the weight and bias gradients sum over
the blocks in fp64. Exact up to fp64 rounding (tests/test_ssd_segmented.py checks it against the reference).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from contract.checks import check_layernorm
from reference.layernorm_gated import layernorm_fn as whole

F64 = torch.float64


def _f64(t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None else t.detach().to(F64, copy=True)


class _Rows(torch.autograd.Function):
    """Forward block by block; backward by recomputing each block."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        options: dict[str, Any],
        block_rows: int,
        x: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        z: torch.Tensor | None,
    ) -> torch.Tensor:
        out = torch.empty_like(x)
        w, b = _f64(weight), _f64(bias)
        for s in range(0, x.shape[0], block_rows):
            rows = slice(s, s + block_rows)
            out[rows] = whole(_f64(x[rows]), w, b, None if z is None else _f64(z[rows]), **options)
        ctx.options, ctx.block_rows = options, block_rows
        ctx.save_for_backward(x, weight, bias, z)
        return out

    @staticmethod
    def backward(ctx: Any, dout: torch.Tensor) -> tuple[torch.Tensor | None, ...]:  # type: ignore[override]
        x, weight, bias, z = ctx.saved_tensors
        need_x, need_w, need_b, need_z = ctx.needs_input_grad[2:6]
        dx = torch.zeros_like(x) if need_x else None
        dz = torch.zeros_like(z) if need_z else None
        dw = torch.zeros_like(weight, dtype=F64)
        db = None if bias is None else torch.zeros_like(bias, dtype=F64)
        for s in range(0, x.shape[0], ctx.block_rows):
            rows = slice(s, s + ctx.block_rows)
            leaves = {"x": _f64(x[rows]), "weight": _f64(weight), "bias": _f64(bias)}
            leaves["z"] = None if z is None else _f64(z[rows])
            present = {k: v.requires_grad_(True) for k, v in leaves.items() if v is not None}
            with torch.enable_grad():
                y = whole(leaves["x"], leaves["weight"], leaves["bias"], leaves["z"], **ctx.options)
                grads = torch.autograd.grad(y, list(present.values()), dout[rows].to(F64))
            got = dict(zip(present, grads, strict=True))
            if dx is not None:
                dx[rows] = got["x"]
            if dz is not None:
                dz[rows] = got["z"]
            dw += got["weight"]
            if db is not None:
                db += got["bias"]
        return (
            None,
            None,
            dx,
            dw.to(weight.dtype) if need_w else None,
            db.to(bias.dtype) if db is not None and need_b else None,
            dz,
        )


def layernorm_fn(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    z: torch.Tensor | None = None,
    eps: float = 1e-6,
    group_size: int | None = None,
    norm_before_gate: bool = True,
    is_rms_norm: bool = False,
    *,
    block_rows: int,
) -> torch.Tensor:
    """The reference's signature plus ``block_rows`` (rows per fp64 block); x is (rows, N). Returns y in x.dtype."""
    check_layernorm(x, weight, bias, z, group_size)
    if x.dim() != 2 or block_rows <= 0:
        raise ValueError(f"x: the row-blocked oracle takes (rows, N) and block_rows > 0, got {tuple(x.shape)}")
    options = {"eps": eps, "group_size": group_size, "norm_before_gate": norm_before_gate, "is_rms_norm": is_rms_norm}
    out: torch.Tensor = _Rows.apply(options, block_rows, x, weight, bias, z)
    return out


def row_blocked(block_rows: int) -> Callable[..., Any]:
    """The row-blocked oracle with ``block_rows`` rows per block, callable with the op's keyword arguments."""
    return functools.partial(layernorm_fn, block_rows=block_rows)
