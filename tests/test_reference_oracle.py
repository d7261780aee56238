"""The chunked references against the independent token-by-token recurrence (fp64, forward and autograd
backward), plus the output dtypes and shapes every reference promises (those of mamba-ssm's wrappers)."""

from __future__ import annotations

import itertools
import math
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from parity import tolerances
from reference.bmm_chunk import bmm_chunk_fwd
from reference.chunk_cumsum import chunk_cumsum_fwd
from reference.chunk_scan import chunk_scan_fwd
from reference.chunk_state import chunk_state_fwd
from reference.layernorm_gated import layernorm_fn, rmsnorm_fn
from reference.recurrence import ssd_recurrence
from reference.ssd_combined import mamba_chunk_scan_combined
from reference.state_passing import state_passing_fwd

F64 = torch.float64
GRAD_INPUTS = ("x", "dt", "A", "B", "C", "D", "z", "dt_bias", "initial_states")

# Each case: shape (batch, seqlen, nheads, ngroups, headdim, dstate, chunk_size) and features.
# "starts": first position of each packed sequence (-> seq_idx 0, 1, ...; "first" shifts the numbering).
CASES = [
    ("ragged", (2, 37, 4, 2, 8, 16, 16), {}),
    ("exact_multiple", (1, 32, 2, 1, 8, 8, 16), {}),
    ("shorter_than_chunk", (2, 5, 2, 1, 4, 8, 16), {}),
    ("one_token", (1, 1, 2, 2, 4, 8, 16), {"D": "h", "initial_states": True}),
    ("groups_4", (1, 20, 8, 4, 4, 8, 8), {}),
    ("negative_dt_clamped_to_zero", (2, 21, 2, 1, 4, 8, 8), {"raw_dt": True}),
    ("D_per_head", (1, 19, 2, 1, 4, 8, 8), {"D": "h"}),
    ("D_per_head_dim", (1, 19, 2, 1, 4, 8, 8), {"D": "hp"}),
    ("z_gate", (1, 19, 2, 1, 4, 8, 8), {"z": True}),
    ("dt_bias_softplus", (2, 19, 4, 2, 4, 8, 8), {"dt_bias": True, "dt_softplus": True}),
    ("dt_limit", (1, 19, 2, 1, 4, 8, 8), {"dt_bias": True, "dt_softplus": True, "dt_limit": (0.2, 0.9)}),
    ("initial_states", (2, 27, 2, 1, 4, 8, 8), {"initial_states": True}),
    ("packed_seq_idx", (2, 37, 4, 2, 8, 16, 16), {"starts": (0, 10, 16, 30), "initial_states": True}),
    ("seq_idx_not_from_zero", (1, 27, 2, 1, 4, 8, 8), {"starts": (0, 9), "first": 1, "initial_states": True}),
    ("varlen_states", (1, 40, 2, 1, 4, 8, 16), {"starts": (0, 7, 16, 33), "varlen": True}),
    (
        "all_on",
        (2, 45, 4, 2, 8, 16, 16),
        {
            "D": "hp",
            "z": True,
            "dt_bias": True,
            "dt_softplus": True,
            "dt_limit": (0.05, 1.5),
            "starts": (0, 13, 40),
            "initial_states": True,
        },
    ),
]


@pytest.fixture(scope="module")
def bound() -> dict[str, float]:
    """[checks.reference_vs_recurrence_fp64] of tolerances.toml."""
    return tolerances.load().check("reference_vs_recurrence_fp64")


def make_inputs(shape: tuple[int, ...], features: dict[str, Any], dtype: torch.dtype, seed: int = 0) -> dict:
    """Keyword arguments of mamba_chunk_scan_combined with realistic values (dt > 0 after processing,
    A < 0, nothing all-zero)."""
    batch, seqlen, nheads, ngroups, headdim, dstate, chunk_size = shape
    g = torch.Generator().manual_seed(seed)

    def randn(*size: int, scale: float = 1.0) -> torch.Tensor:
        return (scale * torch.randn(*size, generator=g, dtype=F64)).to(dtype)

    dt = torch.randn(batch, seqlen, nheads, generator=g, dtype=F64)
    if not (features.get("dt_softplus") or features.get("raw_dt")):
        dt = F.softplus(dt - 1.0)
    kw: dict[str, Any] = {
        "x": randn(batch, seqlen, nheads, headdim),
        "dt": dt.to(dtype),
        "A": (-torch.exp(torch.rand(nheads, generator=g, dtype=F64))).to(dtype),
        "B": randn(batch, seqlen, ngroups, dstate),
        "C": randn(batch, seqlen, ngroups, dstate),
        "chunk_size": chunk_size,
        "dt_softplus": bool(features.get("dt_softplus")),
        "dt_limit": features.get("dt_limit", (0.0, float("inf"))),
    }
    if "D" in features:
        kw["D"] = randn(nheads) if features["D"] == "h" else randn(nheads, headdim)
    if features.get("z"):
        kw["z"] = randn(batch, seqlen, nheads, headdim)
    if features.get("dt_bias"):
        kw["dt_bias"] = randn(nheads, scale=0.5)
    if features.get("initial_states"):
        kw["initial_states"] = randn(batch, nheads, headdim, dstate)
    if "starts" in features:
        seq_idx = torch.zeros(batch, seqlen, dtype=torch.int32)
        for start in features["starts"]:
            seq_idx[:, start:] += 1
        kw["seq_idx"] = seq_idx - 1 + features.get("first", 0)
        if features.get("varlen"):
            kw["cu_seqlens"] = torch.tensor([*features["starts"], seqlen], dtype=torch.int32)
    return kw


def _err(got: torch.Tensor, want: torch.Tensor) -> tuple[float, float]:
    return (got - want).abs().max().item(), want.abs().max().item()


@pytest.mark.parametrize(("shape", "features"), [pytest.param(s, f, id=name) for name, s, f in CASES])
def test_chunked_reference_matches_recurrence(shape, features, bound):
    kw = make_inputs(shape, features, F64)
    for name in GRAD_INPUTS:
        if name in kw:
            kw[name].requires_grad_(True)
    varlen = "cu_seqlens" in kw
    out, final, *varlen_states = mamba_chunk_scan_combined(**kw, return_final_states=True, return_varlen_states=varlen)
    rec = {k: v for k, v in kw.items() if k not in ("chunk_size", "cu_seqlens")}
    out_r, final_r = ssd_recurrence(**rec, return_final_states=True)
    pairs = {"out": (out, out_r), "final_states": (final, final_r)}
    if varlen:
        # The state after each packed sequence's last token = the recurrence run on that sequence alone.
        bounds = kw["cu_seqlens"].tolist()
        per_seq = [
            ssd_recurrence(
                **{
                    **rec,
                    "seq_idx": None,
                    "x": kw["x"][:, s:e],
                    "dt": kw["dt"][:, s:e],
                    "B": kw["B"][:, s:e],
                    "C": kw["C"][:, s:e],
                },
                return_final_states=True,
            )[1][0]
            for s, e in itertools.pairwise(bounds)
        ]
        pairs["varlen_states"] = (varlen_states[0], torch.stack(per_seq))

    g = torch.Generator().manual_seed(1)
    cotangents = [torch.randn(o.shape, generator=g, dtype=F64) for o in (out, final)]
    grads = [k for k in GRAD_INPUTS if k in kw]
    dgot = torch.autograd.grad([out, final], [kw[k] for k in grads], cotangents)
    dwant = torch.autograd.grad([out_r, final_r], [kw[k] for k in grads], cotangents)
    pairs.update({f"grad.{k}": (a, b) for k, a, b in zip(grads, dgot, dwant, strict=True)})

    for name, (got, want) in pairs.items():
        assert got.shape == want.shape and got.dtype == want.dtype == F64, name
        err, scale = _err(got, want)
        assert err <= bound["atol"] + bound["rtol"] * scale, f"{name}: max error {err:.3e} (max |oracle| {scale:.3e})"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64])
def test_reference_output_dtypes_and_shapes(dtype):
    """mamba-ssm's dtypes: dA_cumsum, dt_out, chunk states, final states fp32; forward states and varlen
    states C.dtype; CB a.dtype unless asked; outputs x.dtype. fp64 inputs keep fp64 everywhere."""
    b, seqlen, h, g, p, n, cs = 1, 21, 4, 2, 4, 8, 8
    c = 3
    kw = make_inputs((b, seqlen, h, g, p, n, cs), {"D": "h", "z": True, "starts": (0, 5), "varlen": True}, dtype)
    wide = F64 if dtype == F64 else torch.float32
    dA_cumsum, dt_out = chunk_cumsum_fwd(kw["dt"], kw["A"], cs)
    states = chunk_state_fwd(kw["B"], kw["x"], dt_out, dA_cumsum, seq_idx=kw["seq_idx"])
    narrow_states = chunk_state_fwd(kw["B"], kw["x"], dt_out, dA_cumsum, states_in_fp32=False)
    passed, final = state_passing_fwd(
        states.reshape(b, c, h, p * n), dA_cumsum[..., -1], chunk_size=cs, seq_idx=kw["seq_idx"], out_dtype=dtype
    )
    cb = bmm_chunk_fwd(kw["C"], kw["B"], cs, seq_idx=kw["seq_idx"])
    cb_flat = bmm_chunk_fwd(kw["C"][:, :, 0], kw["B"][:, :, 0], cs, output_dtype=torch.float32)
    out, out_x = chunk_scan_fwd(
        cb, kw["x"], dt_out, dA_cumsum, kw["C"], passed.reshape(b, c, h, p, n), D=kw["D"], z=kw["z"]
    )
    comb, comb_final, comb_varlen = mamba_chunk_scan_combined(**kw, return_final_states=True, return_varlen_states=True)
    rec = ssd_recurrence(kw["x"], kw["dt"], kw["A"], kw["B"], kw["C"])
    norm = rmsnorm_fn(kw["x"], torch.ones(p, dtype=dtype), None, z=kw["z"], group_size=2)
    expected = {
        "dA_cumsum": (dA_cumsum, wide, (b, h, c, cs)),
        "dt_out": (dt_out, wide, (b, h, c, cs)),
        "states": (states, wide, (b, c, h, p, n)),
        "states_not_fp32": (narrow_states, dtype, (b, c, h, p, n)),
        "passed": (passed, dtype, (b, c, h, p * n)),
        "final": (final, wide, (b, h, p * n)),
        "cb": (cb, dtype, (b, c, g, cs, cs)),
        "cb_no_groups": (cb_flat, torch.float32, (b, c, cs, cs)),
        "out": (out, dtype, (b, seqlen, h, p)),
        "out_x": (out_x, dtype, (b, seqlen, h, p)),
        "combined": (comb, dtype, (b, seqlen, h, p)),
        "combined_final": (comb_final, wide, (b, h, p, n)),
        "varlen": (comb_varlen, dtype, (2, h, p, n)),
        "recurrence": (rec, dtype, (b, seqlen, h, p)),
        "rmsnorm": (norm, dtype, (b, seqlen, h, p)),
    }
    for name, (t, want_dtype, want_shape) in expected.items():
        assert (t.dtype, tuple(t.shape)) == (want_dtype, want_shape), name
        assert torch.isfinite(t).all(), name


def test_chunk_cumsum_tail_and_dt_processing():
    """dt_out is zero past seqlen and dA_cumsum flat there; negative dt clamps to 0 by default; softplus
    applies only where dt <= 20."""
    dt = torch.tensor([[[-1.0], [0.5], [25.0], [2.0], [-0.3]]])  # (1, 5, 1)
    A = torch.tensor([-0.5])
    dA_cumsum, dt_out = chunk_cumsum_fwd(dt, A, chunk_size=4)
    assert dt_out.flatten().tolist() == [0.0, 0.5, 25.0, 2.0, 0.0, 0.0, 0.0, 0.0]
    assert dA_cumsum[0, 0, 1].tolist() == [0.0, 0.0, 0.0, 0.0]
    assert dA_cumsum[0, 0, 0].tolist() == [0.0, -0.25, -12.75, -13.75]
    _, soft = chunk_cumsum_fwd(dt, A, chunk_size=4, dt_softplus=True)
    want = [math.log1p(math.exp(v)) if v <= 20 else v for v in dt.flatten().tolist()]
    assert torch.allclose(soft.flatten()[:5], torch.tensor(want))


@pytest.mark.parametrize(
    ("is_rms_norm", "gate"), [(False, None), (True, None), (False, "norm_then_gate"), (True, "gate_then_norm")]
)
def test_gated_norm_matches_torch_norms(is_rms_norm, gate):
    """Per group, layernorm_fn is F.layer_norm / F.rms_norm plus the affine, gated by silu(z) after the
    norm (norm_before_gate=True) or before it."""
    g = torch.Generator().manual_seed(0)
    x, z = (torch.randn(2, 3, 12, generator=g, dtype=F64) for _ in range(2))
    w, bias = 1 + 0.1 * torch.randn(12, generator=g, dtype=F64), torch.randn(12, generator=g, dtype=F64)
    norm = F.rms_norm if is_rms_norm else F.layer_norm
    h = x * F.silu(z) if gate == "gate_then_norm" else x
    want = norm(h.reshape(2, 3, 3, 4), (4,), eps=1e-6).reshape(2, 3, 12) * w + bias
    want = want * F.silu(z) if gate == "norm_then_gate" else want
    got = layernorm_fn(
        x,
        w,
        bias,
        z=None if gate is None else z,
        group_size=4,
        norm_before_gate=gate != "gate_then_norm",
        is_rms_norm=is_rms_norm,
    )
    assert torch.allclose(got, want, rtol=1e-12, atol=1e-12)
