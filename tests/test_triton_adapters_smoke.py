"""Smoke tests of reference/mamba_triton.py on CPU (Triton interpreter): every adapter runs forward and
backward at a tiny shape with every feature on (ragged last chunk, two groups, two packed sequences,
initial states, D, z, dt bias/softplus/limit), returns mamba-ssm's shapes and dtypes without NaN, and
gives a gradient to every differentiable input. Numerical agreement is the parity engine's job."""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any

import pytest
import torch

from ops import layernorm_gated as norm_op
from parity import registry
from reference import mamba_triton

pytestmark = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1",
    reason="CPU smoke tests (Triton interpreter); on CUDA the parity tests of every op judge the adapters",
)

TINY = {
    "batch": 1,
    "seqlen": 21,
    "chunk_size": 16,
    "nheads": 4,
    "ngroups": 2,
    "headdim": 8,
    "dstate": 16,
    "D": "hp",
    "z": True,
    "dt_bias": True,
    "dt_softplus": True,
    "dt_limit": [0.001, 0.1],
    "nseq": 2,
    "initial_states": True,
}
NORM = {
    "rows": 7,
    "ngroups": 2,
    "group_size": 16,
    "z": True,
    "norm_before_gate": False,
    "is_rms_norm": True,
    "bias": True,
}
CPU = torch.device("cpu")
F32 = torch.float32

Shapes = Callable[[dict[str, Any], torch.dtype], dict[str, tuple[tuple[int, ...], torch.dtype]]]


def _dims(p: dict[str, Any]) -> tuple[int, ...]:
    return (
        p["batch"],
        p["seqlen"],
        math.ceil(p["seqlen"] / p["chunk_size"]),
        p["chunk_size"],
        p["nheads"],
        p["ngroups"],
        p["headdim"],
        p["dstate"],
    )


def _cumsum_shapes(p: dict[str, Any], dtype: torch.dtype) -> dict[str, Any]:
    b, _, c, cs, h, _, _, _ = _dims(p)
    return {"dA_cumsum": ((b, h, c, cs), F32), "dt_out": ((b, h, c, cs), F32)}


def _state_shapes(p: dict[str, Any], dtype: torch.dtype) -> dict[str, Any]:
    b, _, c, _, h, _, hd, n = _dims(p)
    return {"states": ((b, c, h, hd, n), F32)}


def _passing_shapes(p: dict[str, Any], dtype: torch.dtype) -> dict[str, Any]:
    b, _, c, _, h, _, hd, n = _dims(p)
    return {"out": ((b, c, h, hd * n), dtype), "final_states": ((b, h, hd * n), F32)}


def _bmm_shapes(p: dict[str, Any], dtype: torch.dtype) -> dict[str, Any]:
    b, _, c, cs, _, g, _, _ = _dims(p)
    return {"out": ((b, c, g, cs, cs), F32)}


def _scan_shapes(p: dict[str, Any], dtype: torch.dtype) -> dict[str, Any]:
    b, seqlen, _, _, h, _, hd, _ = _dims(p)
    return {"out": ((b, seqlen, h, hd), dtype), "out_x": ((b, seqlen, h, hd), dtype)}


def _combined_shapes(p: dict[str, Any], dtype: torch.dtype) -> dict[str, Any]:
    b, seqlen, _, _, h, _, hd, n = _dims(p)
    return {"out": ((b, seqlen, h, hd), dtype), "final_states": ((b, h, hd, n), F32)}


def _norm_shapes(p: dict[str, Any], dtype: torch.dtype) -> dict[str, Any]:
    return {"out": ((p["rows"], p["ngroups"] * p["group_size"]), dtype)}


CASES: dict[str, tuple[Shapes, dict[str, Any]]] = {
    "chunk_cumsum": (_cumsum_shapes, TINY),
    "chunk_state": (_state_shapes, TINY),
    "state_passing": (_passing_shapes, TINY),
    "bmm_chunk": (_bmm_shapes, TINY),
    "chunk_scan": (_scan_shapes, TINY),
    "ssd_combined": (_combined_shapes, TINY),
    "layernorm_gated": (_norm_shapes, NORM),
}


def _spec(op: str) -> tuple[str, Callable[..., dict[str, Any]], tuple[str, ...], tuple[str, ...]]:
    """(adapter name, input maker, output names, differentiable inputs) of one op."""
    spec = registry.get(op)
    assert spec.baseline is not None and isinstance(spec.baseline.target, str)
    return spec.baseline.target.partition(":")[2], spec.make_inputs, spec.outputs, spec.grad_inputs


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("op", list(CASES))
def test_adapter_forward_backward(op: str, dtype: torch.dtype) -> None:
    shapes, problem = CASES[op]
    name, make, outputs, grad_names = _spec(op)
    inputs = make(problem, dtype, 0, CPU)
    wanted = [k for k in grad_names if isinstance(inputs.get(k), torch.Tensor)]
    assert set(wanted) == set(grad_names), "the tiny problem should switch on every differentiable input"
    for k in wanted:
        inputs[k] = inputs[k].detach().clone().requires_grad_(True)

    result = getattr(mamba_triton, name)(**inputs)
    result = result if isinstance(result, tuple) else (result,)
    expected = shapes(problem, dtype)
    assert len(result) == len(outputs)
    for out_name, out in zip(outputs, result, strict=True):
        shape, out_dtype = expected[out_name]
        assert (tuple(out.shape), out.dtype) == (shape, out_dtype), out_name
        assert not out.isnan().any(), out_name

    gen = torch.Generator().manual_seed(1)
    upstream = [torch.randn(o.shape, generator=gen).to(o.dtype) for o in result]
    grads = torch.autograd.grad(result, [inputs[k] for k in wanted], upstream, allow_unused=True)
    for k, g in zip(wanted, grads, strict=True):
        assert g is not None, f"no gradient for {k}"
        assert g.shape == inputs[k].shape, k
        assert torch.isfinite(g).all(), k
        assert g.abs().sum() > 0, f"gradient of {k} is all zeros"


def test_chunk_state_seq_idx_path_matches_the_plain_one() -> None:
    """With seq_idx the chunk_state backward takes other kernels (and the per-step -> cumulative glue);
    with one sequence it must give the plain path's gradients."""
    problem = {k: v for k, v in TINY.items() if k != "nseq"}
    inputs = registry.get("chunk_state").make_inputs(problem, F32, 0, CPU)
    seq_idx = torch.zeros(problem["batch"], problem["seqlen"], dtype=torch.int32)
    names = ("B", "x", "dt", "dA_cumsum")
    runs = []
    for extra in ({}, {"seq_idx": seq_idx}):
        args = {**inputs, **extra}
        leaves = [args[k].detach().clone().requires_grad_(True) for k in names]
        states = mamba_triton.chunk_state_fwd(*leaves, **{k: v for k, v in args.items() if k not in names})
        upstream = torch.randn(states.shape, generator=torch.Generator().manual_seed(2))
        runs.append(torch.autograd.grad(states, leaves, upstream))
    for name, plain, with_seq in zip(names, *runs, strict=True):
        torch.testing.assert_close(with_seq, plain, rtol=1e-5, atol=1e-5, msg=name)


def test_every_raw_wrapper_resolves() -> None:
    from reference import _triton_shims

    for table in (mamba_triton.FORWARD_WRAPPERS, mamba_triton.BACKWARD_WRAPPERS):
        for name, module in table.items():
            assert callable(getattr(_triton_shims.load_mamba_triton(module), name)), name
            assert getattr(mamba_triton, name).__name__ == name
    with pytest.raises(AttributeError):
        _ = mamba_triton._not_a_wrapper


def test_rmsnorm_fn_is_layernorm_fn_with_rms() -> None:
    inputs = norm_op.inputs({**NORM, "bias": False}, F32, 0, CPU)
    inputs.pop("is_rms_norm")
    out = mamba_triton.rmsnorm_fn(**inputs)
    torch.testing.assert_close(out, mamba_triton.layernorm_fn(**inputs, is_rms_norm=True), rtol=0, atol=0)
