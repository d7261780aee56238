"""Helion port of mamba-ssm's gated RMSNorm / LayerNorm (``ops/triton/layernorm_gated.py``), forward and
backward, with the autograd functions ``layernorm_fn`` / ``rmsnorm_fn``.

The point of the port is the backward's row split: mamba-ssm gives each program
``ceil(M / nrow_groups)`` rows, with ``nrow_groups`` derived from the SM count by A100-era constants, and
sums the per-program fp32 partials of dw/db afterwards. Here the rows per program is a block size of the
Helion config (``block_sizes[0]`` of :data:`layer_norm_bwd_kernel`), so the autotuner searches it; the
partials are summed in fp32 by a second Helion kernel, :data:`partials_sum_kernel`, in a fixed order (no atomics:
the backward is bitwise reproducible). PyTorch's sum over the row groups was a column reduction that took 20.6 us
of the backward's 0.197 ms at the Nemotron shape on the H200 (bench/results/h200-run38/call5, the float
``reduce_kernel``: 8 MiB of partials at 0.4 TB/s).

Without a config (none given, none promoted, or a promoted config that carries only "bwd") each kernel runs
an explicit fallback, never Helion's default config: mamba-ssm's launch heuristic for the forward and backward
(:func:`fwd_fallback_config`, :func:`bwd_fallback_config`), :data:`SUM_FALLBACK` for the partial sums.

Each program holds one whole group of ``group_size`` columns as one ``hl.arange(next_pow2(group_size))``,
masked to the group, as mamba-ssm does; every mean is an explicit sum divided by the true group_size
(never ``.mean()``, which Helion 1.5 can divide by the padded block size).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from typing import Any, NamedTuple

import helion
import helion.language as hl
import torch
import triton

from contract.checks import check_layernorm
from kernels.launch import ConfigLike, launch
from parity.lookup import promoted_config

MAX_FUSED_BYTES = 65536
"""Largest group held in one block, in bytes of x's dtype (mamba-ssm's limit)."""

HAS_BACKWARD = True
"""layernorm_fn/rmsnorm_fn differentiate through the Helion backward: the parity engine judges the gradients."""


@helion.kernel(static_shapes=False)
def layer_norm_fwd_kernel(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    z: torch.Tensor | None,
    out: torch.Tensor,
    mean: torch.Tensor | None,
    rstd: torch.Tensor,
    eps: float,
    group_size: int,
    block_n: hl.constexpr,
    norm_before_gate: hl.constexpr,
    is_rms_norm: hl.constexpr,
) -> None:
    """Writes out (M, N), mean and rstd (ngroups, M) fp32 (mean None for RMS norm).

    One program per (block of rows, group); the group is one ``hl.arange(block_n)`` with
    block_n = next_pow2(group_size), masked to the group. With z: out = norm(x) * silu(z) if
    norm_before_gate, else norm(x * silu(z))."""
    m, n = x.shape
    group_size = hl.specialize(group_size)
    ngroups = n // group_size
    for tile_m, tile_g in hl.tile([m, ngroups], block_size=[None, 1]):
        cols = hl.arange(block_n)
        valid = cols < group_size
        idx = tile_g.begin * group_size + cols
        xs = hl.load(x, [tile_m, idx], extra_mask=valid[None, :]).to(torch.float32)
        if z is not None:
            zs = hl.load(z, [tile_m, idx], extra_mask=valid[None, :]).to(torch.float32)
            gate = zs * torch.sigmoid(zs)
            if not norm_before_gate:
                xs = xs * gate
        if is_rms_norm:
            centered = xs
        else:
            mu = torch.sum(xs, dim=1) / group_size
            mean[tile_g.begin, tile_m] = mu
            centered = torch.where(valid[None, :], xs - mu[:, None], 0.0)
        var = torch.sum(centered * centered, dim=1) / group_size
        inv = 1.0 / torch.sqrt(var + eps)
        rstd[tile_g.begin, tile_m] = inv
        w = hl.load(weight, [idx], extra_mask=valid).to(torch.float32)
        y = centered * inv[:, None] * w[None, :]
        if bias is not None:
            y = y + hl.load(bias, [idx], extra_mask=valid).to(torch.float32)[None, :]
        if z is not None and norm_before_gate:
            y = y * gate
        hl.store(out, [tile_m, idx], y.to(out.dtype), extra_mask=valid[None, :])


# The host-side `bias is None` that sizes the partials is flagged as a tensor operation in the wrapper; it is not.
@helion.kernel(static_shapes=False, ignore_warnings=[helion.exc.TensorOperationInWrapper])
def layer_norm_bwd_kernel(
    dy: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    z: torch.Tensor | None,
    mean: torch.Tensor | None,
    rstd: torch.Tensor,
    dx: torch.Tensor,
    dz: torch.Tensor | None,
    out: torch.Tensor | None,
    group_size: int,
    block_n: hl.constexpr,
    norm_before_gate: hl.constexpr,
    is_rms_norm: hl.constexpr,
) -> torch.Tensor:
    """Writes dx, dz (with z) and out (when given: the recomputed forward output); returns the fp32
    partial sums (1 or 2, nrow_groups, N) of dw and, with bias, db: one row per row group.

    One program per (row group, group): a row group is ``block_sizes[0]`` consecutive rows (the tunable
    that replaces mamba-ssm's SM-count formula), walked ``block_sizes[1]`` rows at a time while dw/db
    accumulate in fp32 registers."""
    m, n = x.shape
    group_size = hl.specialize(group_size)
    ngroups = n // group_size
    rows_per_program = hl.register_block_size(m)
    nrow_groups = (m + rows_per_program - 1) // rows_per_program
    # partials[0] holds dw, partials[1] db (only with bias).
    partials = torch.empty([1 if bias is None else 2, nrow_groups, n], dtype=torch.float32, device=x.device)
    for tile_p, tile_g in hl.tile([m, ngroups], block_size=[rows_per_program, 1]):
        cols = hl.arange(block_n)
        valid = cols < group_size
        idx = tile_g.begin * group_size + cols
        w = hl.load(weight, [idx], extra_mask=valid).to(torch.float32)
        if bias is not None:
            b = hl.load(bias, [idx], extra_mask=valid).to(torch.float32)
        dw_acc = hl.zeros([block_n], dtype=torch.float32)
        db_acc = hl.zeros([block_n], dtype=torch.float32)
        for tile_r in hl.tile(tile_p.begin, tile_p.end):
            xs = hl.load(x, [tile_r, idx], extra_mask=valid[None, :]).to(torch.float32)
            g = hl.load(dy, [tile_r, idx], extra_mask=valid[None, :]).to(torch.float32)
            if z is not None:
                zs = hl.load(z, [tile_r, idx], extra_mask=valid[None, :]).to(torch.float32)
                sig = torch.sigmoid(zs)
                # d silu(z) / dz = sigmoid(z) * (1 + z * (1 - sigmoid(z)))
                dsilu = sig * (1.0 + zs * (1.0 - sig))
                if not norm_before_gate:
                    x_og = xs
                    xs = xs * zs * sig
            inv = rstd[tile_g.begin, tile_r]
            if is_rms_norm:
                xhat = xs * inv[:, None]
            else:
                mu = mean[tile_g.begin, tile_r]
                xhat = torch.where(valid[None, :], (xs - mu[:, None]) * inv[:, None], 0.0)
            y = xhat * w[None, :]
            if bias is not None:
                y = y + b[None, :]
            if z is not None and norm_before_gate:
                if out is not None:
                    hl.store(out, [tile_r, idx], (y * zs * sig).to(out.dtype), extra_mask=valid[None, :])
                hl.store(dz, [tile_r, idx], (g * y * dsilu).to(dz.dtype), extra_mask=valid[None, :])
                g = g * zs * sig
            elif out is not None:
                hl.store(out, [tile_r, idx], y.to(out.dtype), extra_mask=valid[None, :])
            wdy = w[None, :] * g
            c1 = torch.sum(xhat * wdy, dim=1) / group_size
            if is_rms_norm:
                dxs = (wdy - xhat * c1[:, None]) * inv[:, None]
            else:
                c2 = torch.sum(wdy, dim=1) / group_size
                dxs = (wdy - (xhat * c1[:, None] + c2[:, None])) * inv[:, None]
            # Rows past m are zeroed before the sums over rows: with m == 1 (a static size-1 dimension)
            # Helion 1.5 drops the row index and its mask, so every row of the tile reads row 0.
            live = (tile_r.index < m)[:, None]
            dw_acc = dw_acc + torch.sum(torch.where(live, g * xhat, 0.0), dim=0)
            if bias is not None:
                db_acc = db_acc + torch.sum(torch.where(live, g, 0.0), dim=0)
            if z is not None and not norm_before_gate:
                hl.store(dz, [tile_r, idx], (dxs * x_og * dsilu).to(dz.dtype), extra_mask=valid[None, :])
                dxs = dxs * zs * sig
            hl.store(dx, [tile_r, idx], dxs.to(dx.dtype), extra_mask=valid[None, :])
        hl.store(partials, [0, tile_p.id, idx], dw_acc, extra_mask=valid)
        if bias is not None:
            hl.store(partials, [1, tile_p.id, idx], db_acc, extra_mask=valid)
    return partials


@helion.kernel(static_shapes=False)
def partials_sum_kernel(partials: torch.Tensor, out: torch.Tensor) -> None:
    """``out[k, n] = sum over r of partials[k, r, n]`` (the backward's per-row-group fp32 partials of dw and db),
    accumulated in fp32 in a fixed order, written in out's dtype. One program per block of columns, walking the
    row groups a block at a time: every load is a row of contiguous columns."""
    k, rows, n = partials.shape
    for tile_k, tile_n in hl.tile([k, n], block_size=[1, None]):
        acc = hl.zeros([tile_n], dtype=torch.float32)
        for tile_r in hl.tile(rows):
            # Rows past the extent are zeroed: with one row group (a size-1 dimension) Helion 1.5 drops the row
            # index and its mask, and every row of the tile reads row 0 (as in the backward kernel above).
            part = partials[tile_k.begin, tile_r, tile_n]
            acc = acc + torch.sum(torch.where((tile_r.index < rows)[:, None], part, 0.0), dim=0)
        out[tile_k.begin, tile_n] = acc.to(out.dtype)


SUM_FALLBACK: dict[str, Any] = {"block_sizes": [32, 256], "num_warps": 8}
""":data:`partials_sum_kernel`'s config when none is given: 32 columns (one 128-byte line of each row group) per
program and 256 row groups per step, so that 128 programs at the Nemotron shape's 4096 columns keep 4 MiB of loads
in flight, near what the H200's bandwidth needs over its memory latency. A rule, not a measurement: ``parity tune``
searches the kernel as ``bwd_sum``."""

CONFIGS: list[dict[str, Any]] = [
    {
        "fwd": {"block_sizes": [4], "num_warps": 2},
        "bwd": {"block_sizes": [8, 4], "num_warps": 2},
        "bwd_sum": {"block_sizes": [16, 2], "num_warps": 2},
    },
    {
        "fwd": {"block_sizes": [16], "num_warps": 4},
        "bwd": {"block_sizes": [32, 8], "num_warps": 4},
        "bwd_sum": {"block_sizes": [64, 4], "num_warps": 4},
    },
]
"""Explicit configs for the CPU parity tests: {"fwd": forward config, "bwd": backward config, "bwd_sum": the
partial sums' config}. Forward block_sizes[0] = rows per program; backward block_sizes[0] = rows per row group
(nrow_groups = ceil(M / it)), block_sizes[1] = rows processed at once inside a row group; partial sums
[columns per program, row groups per step]. At the test sizes (M <= 40)
the first gives several row groups with a ragged last one, the second one or two row groups walked by a
masked 8-row tile. (On the H200 at the Nemotron shape the fastest backward seen was [16, 1] with 1-4 warps,
well ahead of mamba-ssm's formula: bench/results/kernel-config-notes.md.)"""


def _mamba_num_warps(block_n: int) -> int:
    """mamba-ssm's warps for a program holding a block_n-wide group, forward and backward."""
    return min(max(block_n // 256, 1), 8)


def fwd_fallback_config(block_n: int) -> dict[str, Any]:
    """The forward's config when none is given: mamba-ssm's launch, one row per program (grid (M, ngroups))
    with its warps, not Helion's default of 32 rows per program, several times slower on the H200
    (bench/results/kernel-config-notes.md)."""
    return {"block_sizes": [1], "num_warps": _mamba_num_warps(block_n)}


@functools.cache
def _sm_count(device: torch.device) -> int:
    """Streaming multiprocessors of a CUDA device; 1 elsewhere (what the CPU shims report to mamba-ssm)."""
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 1


def bwd_fallback_config(m: int, ngroups: int, block_n: int, device: torch.device) -> dict[str, Any]:
    """The backward's config when none is given: mamba-ssm's row split, nrow_groups = ceil(sm_count *
    ceil(4 / num_warps) / ngroups) and ceil(M / nrow_groups) rows per row group, walked one row at a time,
    with its warps. The rows per row group is rounded up to a power of two (Helion requires block sizes to
    be), so there are at most as many row groups as mamba-ssm launches and at least half as many."""
    num_warps = _mamba_num_warps(block_n)
    nrow_groups = math.ceil(_sm_count(device) * math.ceil(4 / num_warps) / ngroups)
    rows = triton.next_power_of_2(math.ceil(m / nrow_groups))
    return {"block_sizes": [rows, 1], "num_warps": num_warps}


PHASES = ("fwd", "bwd", "bwd_sum")
"""The keys of a gated-norm config: one Helion config per kernel (forward, backward, the backward's partial sums)."""


def _split_config(config: ConfigLike | Mapping[str, Any]) -> tuple[ConfigLike, ConfigLike, ConfigLike]:
    """(forward, backward, partial sums' config) from None, or a mapping with keys among :data:`PHASES`."""
    if config is None:
        return None, None, None
    if isinstance(config, Mapping) and set(config) <= set(PHASES):
        return config.get("fwd"), config.get("bwd"), config.get("bwd_sum")
    raise ValueError(
        f'layernorm_fn/rmsnorm_fn take config as {{"fwd": ..., "bwd": ..., "bwd_sum": ...}}, got {config!r}'
    )


def _check_common(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, z: torch.Tensor | None, group_size: int | None
) -> tuple[int, int]:
    """Validate the arguments (:func:`contract.checks.check_layernorm`, on rows (M, N)) and the strides mamba-ssm
    asserts; return (group_size, block_n)."""
    if x.dim() != 2:
        raise ValueError(f"x must be 2-D (M, N), got shape {tuple(x.shape)}")
    group_size = check_layernorm(x, weight, bias, z, group_size)
    if x.stride(-1) != 1:
        raise ValueError("x must be contiguous in its last dimension")
    for name, t in (("z", z), ("weight", weight), ("bias", bias)):
        if t is not None and t.stride(-1) != 1:
            raise ValueError(f"{name} must be contiguous in its last dimension")
    block_n = triton.next_power_of_2(group_size)
    if block_n > MAX_FUSED_BYTES // x.element_size():
        raise RuntimeError(f"group_size {group_size} exceeds one block of {MAX_FUSED_BYTES} bytes")
    return group_size, block_n


class FwdArgs(NamedTuple):
    """The arguments of :data:`layer_norm_fwd_kernel`, in its order."""

    x: torch.Tensor
    weight: torch.Tensor
    bias: torch.Tensor | None
    z: torch.Tensor | None
    out: torch.Tensor
    mean: torch.Tensor | None
    rstd: torch.Tensor
    eps: float
    group_size: int
    block_n: int
    norm_before_gate: bool
    is_rms_norm: bool


class BwdArgs(NamedTuple):
    """The arguments of :data:`layer_norm_bwd_kernel`, in its order."""

    dy: torch.Tensor
    x: torch.Tensor
    weight: torch.Tensor
    bias: torch.Tensor | None
    z: torch.Tensor | None
    mean: torch.Tensor | None
    rstd: torch.Tensor
    dx: torch.Tensor
    dz: torch.Tensor | None
    out: torch.Tensor | None
    group_size: int
    block_n: int
    norm_before_gate: bool
    is_rms_norm: bool


def layer_norm_fwd_args(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    eps: float,
    z: torch.Tensor | None = None,
    out: torch.Tensor | None = None,
    group_size: int | None = None,
    norm_before_gate: bool = True,
    is_rms_norm: bool = False,
) -> FwdArgs:
    """Validate the wrapper's arguments, allocate out (unless given), mean and rstd, and return the arguments
    of :data:`layer_norm_fwd_kernel` (what a tuner passes to ``layer_norm_fwd_kernel.autotune``)."""
    group_size, block_n = _check_common(x, weight, bias, z, group_size)
    m, n = x.shape
    ngroups = n // group_size
    if out is None:
        out = torch.empty_like(x)
    elif out.shape != x.shape or out.stride(-1) != 1:
        raise ValueError(f"out must have shape {tuple(x.shape)} and be contiguous in its last dimension")
    mean = None if is_rms_norm else torch.empty((ngroups, m), dtype=torch.float32, device=x.device)
    rstd = torch.empty((ngroups, m), dtype=torch.float32, device=x.device)
    return FwdArgs(
        x, weight, bias, z, out, mean, rstd, float(eps), group_size, block_n, bool(norm_before_gate), bool(is_rms_norm)
    )


def layer_norm_fwd(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    eps: float,
    z: torch.Tensor | None = None,
    out: torch.Tensor | None = None,
    group_size: int | None = None,
    norm_before_gate: bool = True,
    is_rms_norm: bool = False,
    *,
    config: ConfigLike = None,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """x (M, N) -> (out (M, N) in x.dtype or into ``out``, mean (ngroups*M,) fp32 or None for RMS norm,
    rstd (ngroups*M,) fp32), stats laid out group-major (index g*M + row) as in mamba-ssm. ``config`` None:
    :func:`fwd_fallback_config`."""
    args = layer_norm_fwd_args(x, weight, bias, eps, z, out, group_size, norm_before_gate, is_rms_norm)
    config = fwd_fallback_config(args.block_n) if config is None else config
    launch(layer_norm_fwd_kernel, args, config, static=x.shape[0] == 1)
    return args.out, None if args.mean is None else args.mean.view(-1), args.rstd.view(-1)


def layer_norm_bwd_args(
    dy: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    eps: float,
    mean: torch.Tensor | None,
    rstd: torch.Tensor,
    z: torch.Tensor | None = None,
    group_size: int | None = None,
    norm_before_gate: bool = True,
    is_rms_norm: bool = False,
    recompute_output: bool = False,
    dz: torch.Tensor | None = None,
    out: torch.Tensor | None = None,
) -> BwdArgs:
    """Validate the wrapper's arguments, allocate dx, dz (with z, unless given) and out (with
    ``recompute_output``, unless given), and return the arguments of :data:`layer_norm_bwd_kernel` (what a
    tuner passes to ``layer_norm_bwd_kernel.autotune``). ``eps`` is unused (rstd carries it), as in mamba-ssm."""
    del eps
    group_size, block_n = _check_common(x, weight, bias, z, group_size)
    m, n = x.shape
    ngroups = n // group_size
    if dy.shape != x.shape or dy.stride(-1) != 1:
        raise ValueError(f"dy must have shape {tuple(x.shape)} and be contiguous in its last dimension")
    if rstd.shape != (ngroups * m,) or (not is_rms_norm and (mean is None or mean.shape != (ngroups * m,))):
        raise ValueError(f"mean/rstd must have shape ({ngroups * m},)")
    if dz is not None:
        if z is None or dz.shape != z.shape or dz.stride(-1) != 1:
            raise ValueError("dz needs z, and must have z's shape and be contiguous in its last dimension")
    elif z is not None:
        dz = torch.empty_like(z)
    if recompute_output:
        if out is None:
            out = torch.empty_like(x)
        elif out.shape != x.shape or out.stride(-1) != 1:
            raise ValueError(f"out must have shape {tuple(x.shape)} and be contiguous in its last dimension")
    return BwdArgs(
        dy,
        x,
        weight,
        bias,
        z,
        None if is_rms_norm else mean.view(ngroups, m),
        rstd.view(ngroups, m),
        torch.empty_like(x),
        dz,
        out if recompute_output else None,
        group_size,
        block_n,
        bool(norm_before_gate),
        bool(is_rms_norm),
    )


def layer_norm_bwd(
    dy: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    eps: float,
    mean: torch.Tensor | None,
    rstd: torch.Tensor,
    z: torch.Tensor | None = None,
    group_size: int | None = None,
    norm_before_gate: bool = True,
    is_rms_norm: bool = False,
    recompute_output: bool = False,
    dz: torch.Tensor | None = None,
    out: torch.Tensor | None = None,
    *,
    config: ConfigLike = None,
    sum_config: ConfigLike = None,
) -> tuple[torch.Tensor | None, ...]:
    """(dx, dw, db, dz), plus the recomputed output when ``recompute_output``: dx in x.dtype, dz in z.dtype
    (into ``dz`` when given), dw/db in weight/bias dtype (db None without bias, dz None without z).
    dw/db are the kernel's per-row-group fp32 partials summed by :data:`partials_sum_kernel` (a fixed order:
    deterministic). ``config`` None: :func:`bwd_fallback_config`; ``sum_config`` None: :data:`SUM_FALLBACK`."""
    args = layer_norm_bwd_args(
        dy, x, weight, bias, eps, mean, rstd, z, group_size, norm_before_gate, is_rms_norm, recompute_output, dz, out
    )
    if config is None:
        m, n = x.shape
        config = bwd_fallback_config(m, n // args.group_size, args.block_n, x.device)
    partials = launch(layer_norm_bwd_kernel, args, config, static=x.shape[0] == 1)
    # One output dtype for dw and db: weight's, unless the bias has another (then fp32, cast per output).
    same = bias is None or bias.dtype == weight.dtype
    sums = torch.empty(partials.shape[::2], dtype=weight.dtype if same else torch.float32, device=x.device)
    launch(partials_sum_kernel, (partials, sums), SUM_FALLBACK if sum_config is None else sum_config)
    dx, dz, out = args.dx, args.dz, args.out
    dw = sums[0].to(weight.dtype)
    db = None if bias is None else sums[1].to(bias.dtype)
    return (dx, dw, db, dz, out) if recompute_output else (dx, dw, db, dz)


class LayerNormFn(torch.autograd.Function):
    """Autograd for the gated norm: the Helion forward, and the Helion backward from saved mean/rstd."""

    @staticmethod
    def forward(
        ctx: Any,
        x: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        z: torch.Tensor | None,
        eps: float,
        group_size: int | None,
        norm_before_gate: bool,
        is_rms_norm: bool,
        config: ConfigLike | Mapping[str, Any],
    ) -> torch.Tensor:
        fwd_config, bwd_config, sum_config = _split_config(config)
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])
        if x2.stride(-1) != 1:
            x2 = x2.contiguous()
        z2 = None
        if z is not None:
            if z.shape != shape:
                raise ValueError(f"z must have x's shape {tuple(shape)}, got {tuple(z.shape)}")
            z2 = z.reshape(-1, shape[-1])
            if z2.stride(-1) != 1:
                z2 = z2.contiguous()
        weight = weight.contiguous()
        bias = None if bias is None else bias.contiguous()
        y, mean, rstd = layer_norm_fwd(
            x2,
            weight,
            bias,
            eps,
            z=z2,
            group_size=group_size,
            norm_before_gate=norm_before_gate,
            is_rms_norm=is_rms_norm,
            config=fwd_config,
        )
        ctx.save_for_backward(x2, weight, bias, mean, rstd, z2)
        ctx.shape = shape
        ctx.settings = (eps, group_size, norm_before_gate, is_rms_norm, bwd_config, sum_config)
        return y.reshape(shape)

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x, weight, bias, mean, rstd, z = ctx.saved_tensors
        eps, group_size, norm_before_gate, is_rms_norm, bwd_config, sum_config = ctx.settings
        dy = dy.reshape(-1, dy.shape[-1])
        if dy.stride(-1) != 1:
            dy = dy.contiguous()
        dx, dw, db, dz = layer_norm_bwd(
            dy,
            x,
            weight,
            bias,
            eps,
            mean,
            rstd,
            z,
            group_size,
            norm_before_gate,
            is_rms_norm,
            config=bwd_config,
            sum_config=sum_config,
        )
        return (
            dx.reshape(ctx.shape),
            dw,
            db,
            None if dz is None else dz.reshape(ctx.shape),
            None,
            None,
            None,
            None,
            None,
        )


def store_bucket(group_size: int) -> str:
    """The config-store shape bucket of a call: configs are promoted per group size."""
    return f"gs{group_size}"


def _promoted(x: torch.Tensor, group_size: int | None) -> Mapping[str, Any] | None:
    """The config promoted for this GPU, dtype and group size (parity.lookup, memoized there; never autotunes).
    None on CPU or without an entry: then each kernel runs its fallback config (the store warns once)."""
    if x.device.type != "cuda":
        return None
    return promoted_config(
        "layernorm_gated",
        f"{__name__}:layernorm_fn",
        str(x.dtype).removeprefix("torch."),
        store_bucket(group_size or x.shape[-1]),
        "cuda",
    )


def tuning_configs(inputs: Mapping[str, Any], count: int) -> list[dict[str, Any]]:
    """Candidates for ``parity tune``, each {"fwd": ..., "bwd": ..., "bwd_sum": ...}: the first ``count`` of a grid
    in a fixed order, largest-effect knob varying fastest. Fastest: the backward's rows per row group (nrow_groups =
    ceil(M / rows), the knob mamba-ssm derives from the SM count); then the forward's rows per program
    (1, 2, 4: Helion's default 32 was much slower than mamba-ssm's 1 on the H200); then the backward's inner
    row step, its warps (they changed the best backward little on the H200), and the forward's warps
    (mamba-ssm's first); the timings are in bench/results/kernel-config-notes.md. The first 8 all run the
    forward as :func:`fwd_fallback_config` does. The partial sums keep :data:`SUM_FALLBACK` (the search starts
    there)."""
    block_n = triton.next_power_of_2(inputs.get("group_size") or inputs["x"].shape[-1])
    fwd_warps = dict.fromkeys((_mamba_num_warps(block_n), 4, 1))
    rows = [16, 32, 8, 64, 128, 256, 4, 1024]
    grid = [
        {
            "fwd": {"block_sizes": [fwd_rows], "num_warps": fw},
            "bwd": {"block_sizes": [r, step], "num_warps": w},
            "bwd_sum": SUM_FALLBACK,
        }
        for fw in fwd_warps
        for w in (2, 4, 1)
        for step in (1, 2)
        for fwd_rows in (1, 2, 4)
        for r in rows
    ]
    return grid[:count]


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
    config: Mapping[str, Any] | None = None,
) -> torch.Tensor:
    """Gated LayerNorm (or RMSNorm) over the last dimension, in groups of ``group_size``: norm(x) * silu(z)
    if norm_before_gate, else norm(x * silu(z)); output in x.dtype and x's shape. ``config`` is
    {"fwd": ..., "bwd": ..., "bwd_sum": ...} (any may be missing: that kernel's fallback config); None means
    the config promoted to the store for this GPU (see :func:`_promoted`)."""
    if config is None:
        config = _promoted(x, group_size)
    return LayerNormFn.apply(x, weight, bias, z, eps, group_size, norm_before_gate, is_rms_norm, config)


def rmsnorm_fn(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    z: torch.Tensor | None = None,
    eps: float = 1e-6,
    group_size: int | None = None,
    norm_before_gate: bool = True,
    *,
    config: Mapping[str, Any] | None = None,
) -> torch.Tensor:
    """Gated RMSNorm: :func:`layernorm_fn` with ``is_rms_norm=True``."""
    return layernorm_fn(x, weight, bias, z, eps, group_size, norm_before_gate, True, config=config)
