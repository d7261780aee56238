"""The segmented fp64 oracle (reference/ssd_segmented.py) equals the whole-sequence fp64 oracle to 1e-12, forward
and backward, across segment lengths, ragged last segments and chunks, and every optional feature; it refuses
segments off the chunk grid in one line. The gated norm's row-blocked oracle (reference/layernorm_segmented.py)
likewise equals its whole-tensor reference."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from ops import layernorm_gated
from ops.ssd import ssd_raw_inputs
from reference.layernorm_gated import layernorm_fn
from reference.layernorm_segmented import layernorm_fn as row_blocked
from reference.ssd_combined import mamba_chunk_scan_combined as whole
from reference.ssd_segmented import mamba_chunk_scan_combined as segmented

F64 = torch.float64
GRAD_INPUTS = ("x", "dt", "A", "B", "C", "D", "z", "dt_bias", "initial_states")
SIZES = {"batch": 2, "nheads": 4, "ngroups": 2, "headdim": 4, "dstate": 8}
ALL_ON = {
    "D": "hp",
    "z": True,
    "dt_bias": True,
    "dt_softplus": True,
    "dt_limit": [0.001, 0.1],
    "initial_states": True,
    "nseq": 3,
}

# (seqlen, chunk_size, segment_len, features): one segment, aligned and ragged last segments and chunks.
CASES = [
    (40, 8, 40, {}),  # one whole segment, ragged last chunk
    (40, 8, 16, {}),  # ragged last segment (8 tokens) and chunk
    (45, 8, 8, {"D": "h", "initial_states": True}),  # one chunk per segment, last segment 5 tokens
    (48, 16, 32, {"z": True, "dt_bias": True, "dt_softplus": True}),
    (37, 8, 24, ALL_ON),  # every feature, three packed sequences per row
    (37, 8, 16, {**ALL_ON, "dt_softplus": False, "dt_limit": None, "initial_states": False}),
]


def _run(fn: Any, inputs: dict[str, Any], upstream: tuple[torch.Tensor, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Outputs and the gradient of every floating input under the given upstream gradients."""
    args = {k: v.detach().to(F64).requires_grad_(True) if k in GRAD_INPUTS else v for k, v in inputs.items()}
    out, final = fn(**args)
    leaves = [k for k in GRAD_INPUTS if k in args]
    grads = torch.autograd.grad([out, final], [args[k] for k in leaves], list(upstream))
    named = {f"grad.{k}": g for k, g in zip(leaves, grads, strict=True)}
    return {"out": out.detach(), "final_states": final.detach(), **named}


@pytest.mark.parametrize(("seqlen", "chunk", "segment", "features"), CASES)
def test_segmented_equals_whole(seqlen: int, chunk: int, segment: int, features: dict[str, Any]) -> None:
    problem = {**SIZES, "seqlen": seqlen, "chunk_size": chunk, **{k: v for k, v in features.items() if v is not None}}
    inputs = ssd_raw_inputs(problem, torch.float32, 0, torch.device("cpu"))
    inputs["return_final_states"] = True
    g = torch.Generator().manual_seed(1)
    b, h, p, n = SIZES["batch"], SIZES["nheads"], SIZES["headdim"], SIZES["dstate"]
    upstream = (torch.randn(b, seqlen, h, p, generator=g, dtype=F64), torch.randn(b, h, p, n, generator=g, dtype=F64))
    expected = _run(whole, inputs, upstream)
    got = _run(lambda **kw: segmented(**kw, segment_len=segment), inputs, upstream)
    assert got.keys() == expected.keys()
    for name, ref in expected.items():
        assert got[name].dtype == F64, name
        err = (got[name] - ref).abs().max().item()
        assert err <= 1e-12 * max(1.0, ref.abs().max().item()), f"{name}: {err:.3e}"


def test_segments_keep_fp32_storage_and_round_once() -> None:
    """Given fp32 whole-length tensors (the engine's long-problem storage), outputs and gradients come back in fp32,
    within one fp32 rounding of the fp64 oracle."""
    problem = {**SIZES, "seqlen": 24, "chunk_size": 8, "D": "h", "initial_states": True}
    inputs = ssd_raw_inputs(problem, torch.float32, 0, torch.device("cpu"))
    inputs = {k: v.float() if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}
    expected = whole(**{k: v.to(F64) if isinstance(v, torch.Tensor) else v for k, v in inputs.items()})
    x = inputs["x"].clone().requires_grad_(True)
    out = segmented(**{**inputs, "x": x}, segment_len=8)
    assert out.dtype == torch.float32
    (grad,) = torch.autograd.grad(out.sum(), [x])
    assert grad.dtype == torch.float32
    assert (out.double() - expected).abs().max().item() <= 1e-6 * expected.abs().max().item()


def test_a_wrong_entering_state_is_caught() -> None:
    """The comparison can fail: dropping the carried state (each segment from zero) is far from the oracle."""
    problem = {**SIZES, "seqlen": 32, "chunk_size": 8, "A_range": [1e-2, 1e-1]}
    inputs = {
        k: v.to(F64) if isinstance(v, torch.Tensor) else v
        for k, v in ssd_raw_inputs(problem, torch.float32, 0, torch.device("cpu")).items()
    }
    expected = whole(**inputs)
    tail = whole(**{k: v[:, 16:] if k in ("x", "dt", "B", "C") else v for k, v in inputs.items()})
    assert (segmented(**inputs, segment_len=16)[:, 16:] - expected[:, 16:]).abs().max() < 1e-12
    assert (tail - expected[:, 16:]).abs().max() > 1e-3


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"segment_len": 12}, r"^segment_len \(12\) must be a positive multiple of chunk_size \(8\)"),
        ({"segment_len": 0}, r"^segment_len \(0\) must be a positive multiple"),
        ({"return_varlen_states": True, "cu_seqlens": torch.tensor([0, 16])}, r"^cu_seqlens: the segmented"),
        ({"seq_idx": torch.full((1, 16), -1, dtype=torch.int32)}, r"^seq_idx: the segmented oracle refuses negative"),
    ],
)
def test_refusals_are_one_line(change: dict[str, Any], message: str) -> None:
    problem = {**SIZES, "batch": 1, "seqlen": 16, "chunk_size": 8}
    inputs = ssd_raw_inputs(problem, torch.float32, 0, torch.device("cpu"))
    with pytest.raises(ValueError, match=message) as info:
        segmented(**{**inputs, "segment_len": 16, **change})
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("norm_before_gate", [True, False])
@pytest.mark.parametrize("block_rows", [1, 4, 16])
def test_row_blocked_norm_equals_whole(norm_before_gate: bool, block_rows: int) -> None:
    """Blocks of 1, 4 (the last one ragged: 10 rows) and 16 rows (one block); LayerNorm with bias and gate."""
    problem = {
        "rows": 10,
        "ngroups": 2,
        "group_size": 8,
        "z": True,
        "bias": True,
        "is_rms_norm": False,
        "norm_before_gate": norm_before_gate,
    }
    inputs = layernorm_gated.inputs(problem, torch.float32, 0, torch.device("cpu"))
    names = ("x", "weight", "bias", "z")
    upstream = torch.randn(10, 16, generator=torch.Generator().manual_seed(1), dtype=F64)
    results = []
    for fn in (layernorm_fn, lambda **kw: row_blocked(**kw, block_rows=block_rows)):
        args = {k: v.double().requires_grad_(True) if k in names else v for k, v in inputs.items()}
        out = fn(**args)
        results.append([out.detach(), *torch.autograd.grad(out, [args[k] for k in names], upstream)])
    for name, ref, got in zip(("out", *names), *results, strict=True):
        assert got.dtype == F64 and (got - ref).abs().max().item() <= 1e-12 * max(1.0, ref.abs().max().item()), name
