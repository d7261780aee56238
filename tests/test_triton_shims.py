"""Each CPU shim of reference/_triton_shims.py: the defect it fixes, shown by a minimal kernel in a fresh
process without shims (they patch triton and torch globally), and the fixed result with the shims.

Run as a script (``python tests/test_triton_shims.py``), this file prints the probes' observations
without shims as JSON; the tests start it in a subprocess.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __name__ == "__main__":
    os.environ["TRITON_INTERPRET"] = "1"

import pytest
import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from reference import _triton_shims  # noqa: E402

pytestmark = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1",
    reason="the shims are for the Triton interpreter (CPU, TRITON_INTERPRET=1); nothing to shim on CUDA",
)

verified = pytest.mark.skipif(
    triton.__version__ not in _triton_shims.VERIFIED_TRITON,
    reason=f"the interpreter defects were checked on triton {sorted(_triton_shims.VERIFIED_TRITON)}, "
    f"not {triton.__version__}",
)

N = 16
BF16 = torch.bfloat16


# ---------------------------------------------------------------------------------------------
# Minimal kernels


@triton.jit
def _arith(x, y, o, N: tl.constexpr):
    i = tl.arange(0, N)
    a = tl.load(x + i)
    b = tl.load(y + i)
    tl.store(o + i, tl.where(a < b, a * b + a, tl.maximum(a, b) - 0.75))


@triton.jit
def _dot(a, b, o, N: tl.constexpr):
    i = tl.arange(0, N)
    acc = tl.zeros((N, N), dtype=tl.float32)
    acc += tl.dot(tl.load(a + i[:, None] * N + i[None, :]), tl.load(b + i[:, None] * N + i[None, :]))
    tl.store(o + i[:, None] * N + i[None, :], acc)


@triton.jit
def _reduce(x, o, N: tl.constexpr):
    a = tl.load(x + tl.arange(0, N))
    tl.store(o + 0, tl.sum(a))
    tl.store(o + 1, tl.max(a))
    tl.store(o + 2, tl.min(a))
    tl.store(o + 3 + tl.arange(0, N), tl.cumsum(a, 0))


@triton.jit
def _constants(o, N: tl.constexpr):
    i = tl.arange(0, N)
    tl.store(o + i, tl.full((N,), 1.7, tl.bfloat16) + (i * 37 + 1001).to(tl.bfloat16))


@triton.jit
def _atomic(x, o, N: tl.constexpr):
    i = tl.arange(0, N)
    tl.atomic_add(o + i % 4, tl.load(x + i))


@triton.jit
def _cast(x, o, N: tl.constexpr):
    i = tl.arange(0, N)
    tl.store(o + i, tl.load(x + i).to(o.dtype.element_ty))


@triton.jit
def _libdevice(x, o, N: tl.constexpr):
    i = tl.arange(0, N)
    v = tl.load(x + i)
    tl.store(o + i, libdevice.exp2(v) + libdevice.log1p(v) + libdevice.tanh(v) + libdevice.pow(v, 2.0))


@triton.jit
def _libdevice_unsupported(x, o, N: tl.constexpr):
    i = tl.arange(0, N)
    tl.store(o + i, libdevice.j0(tl.load(x + i)))


@triton.jit
def _runtime_bound(x, n, o, B: tl.constexpr):
    total = tl.zeros((B,), dtype=tl.float32)
    bound = n - tl.program_id(0) * 0  # a tensor, as mamba's chunk_size_limit
    for k in range(0, bound, B):
        total += tl.load(x + k + tl.arange(0, B))
    tl.store(o + tl.arange(0, B), total)


@triton.autotune(
    configs=[triton.Config({"BLOCK": 4}), triton.Config({"BLOCK": 8}), triton.Config({"BLOCK": 16})], key=["n"]
)
@triton.jit
def _autotuned(x, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x + i, tl.load(x + i, mask=i < n) + 1, mask=i < n)


# ---------------------------------------------------------------------------------------------
# Probes: each returns what it observed (JSON-able); an exception is recorded as "raised: ..."


def _bits(t: torch.Tensor) -> list[int]:
    return t.view(torch.int16).tolist()


def probe_torch_cuda_device() -> Any:
    with torch.cuda.device(None):
        return "ok"


def probe_cuda_device_properties() -> Any:
    return torch.cuda.get_device_properties(torch.device("cpu")).multi_processor_count


def probe_tensor_index() -> Any:
    x, o = torch.arange(32, dtype=torch.float32), torch.empty(8)
    _runtime_bound[(1,)](x, 32, o, 8)
    return (o - x.reshape(4, 8).sum(0)).abs().max().item()


def probe_autotune_without_benchmark() -> Any:
    x = torch.zeros(20)
    _autotuned[lambda meta: (triton.cdiv(20, meta["BLOCK"]),)](x, 20)
    return {"ok": bool((x == 1).all()), "block": _autotuned.best_config.kwargs["BLOCK"]}


def probe_bf16_values() -> Any:
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(N, generator=g).to(BF16), torch.randn(N, generator=g).to(BF16)
    out: dict[str, Any] = {}
    o = torch.empty(N, dtype=BF16)
    _arith[(1,)](x, y, o, N)
    expected = torch.where(x < y, x * y + x, torch.maximum(x, y) - 0.75)  # torch rounds each op to bf16
    out["arith_bits_equal"] = _bits(o) == _bits(expected)
    out["arith_err"] = (o.float() - expected.float()).abs().max().item()
    a, b, d = torch.randn(N, N, generator=g).to(BF16), torch.randn(N, N, generator=g).to(BF16), torch.empty(N, N)
    _dot[(1,)](a, b, d, N)
    out["dot_err"] = (d - a.float() @ b.float()).abs().max().item()
    r = torch.empty(3 + N, dtype=BF16)
    _reduce[(1,)](x, r, N)
    expected = torch.cat(
        [x.float().sum().reshape(1), x.float().max().reshape(1), x.float().min().reshape(1), x.float().cumsum(0)]
    ).to(BF16)
    out["reduce_bits_equal"] = _bits(r) == _bits(expected)
    try:
        c = torch.empty(N, dtype=BF16)
        _constants[(1,)](c, N)
        expected = torch.tensor(1.7).to(BF16) + (torch.arange(N) * 37 + 1001).to(BF16)
        out["constants_bits_equal"] = _bits(c) == _bits(expected)
    except Exception as exc:  # without the shim: no get_bf16 in the interpreter
        out["constants_bits_equal"] = f"raised: {exc!r}"
    f64 = torch.randn(4096, generator=g, dtype=torch.float64) * 3
    c = torch.empty(4096, dtype=BF16)
    _cast[(1,)](f64, c, 4096)
    out["f64_cast_mismatches"] = int((c != f64.to(BF16)).sum())
    try:
        acc = torch.zeros(4, dtype=BF16)
        _atomic[(1,)](x, acc, N)
        out["atomic_err"] = (acc.float() - x.float().reshape(4, 4).sum(0)).abs().max().item()
    except Exception as exc:
        out["atomic_err"] = f"raised: {exc!r}"
    return out


def probe_bf16_rounding() -> Any:
    f = torch.randn(4096, generator=torch.Generator().manual_seed(0)) * 3
    f[:4] = torch.tensor([1 + 2**-8, 1 + 3 * 2**-8, -(1 + 2**-8 + 2**-12), 3.0000002])  # ties and near-ties
    o = torch.empty(4096, dtype=BF16)
    _cast[(1,)](f, o, 4096)
    return int((o != f.to(BF16)).sum())


def probe_libdevice() -> Any:
    v, o = torch.rand(N, generator=torch.Generator().manual_seed(0)), torch.empty(N)
    _libdevice[(1,)](v, o, N)
    return (o - (torch.exp2(v) + torch.log1p(v) + torch.tanh(v) + v**2)).abs().max().item()


def probe_fp16() -> Any:
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(N, generator=g).half(), torch.randn(N, generator=g).half()
    o = torch.empty(N, dtype=torch.float16)
    _arith[(1,)](x, y, o, N)
    a, b, d = torch.randn(N, N, generator=g).half(), torch.randn(N, N, generator=g).half(), torch.empty(N, N)
    _dot[(1,)](a, b, d, N)
    f, c = torch.randn(4096, generator=g) * 3, torch.empty(4096, dtype=torch.float16)
    _cast[(1,)](f, c, 4096)
    return {
        "arith_bits_equal": _bits(o) == _bits(torch.where(x < y, x * y + x, torch.maximum(x, y) - 0.75)),
        "dot_err": (d - a.float() @ b.float()).abs().max().item(),
        "cast_mismatches": int((c != f.half()).sum()),
    }


def unverified() -> dict[str, Any]:
    """Pretend triton is an unverified version, then install the shims and call a bf16 adapter."""
    import warnings

    from reference import mamba_triton

    triton.__version__ = "0.0.0"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        names = _triton_shims.install()
    a = torch.randn(1, 4, 1, 16).to(BF16)
    try:
        mamba_triton.bmm_chunk_fwd(a, a, 4)
        call = "returned"
    except Exception as exc:
        call = f"raised: {type(exc).__name__}: {exc}"
    return {
        "installed": list(names),
        "warned": any("not among the versions" in str(w.message) for w in caught),
        "bf16_ready": _triton_shims.bf16_ready(),
        "bf16_call": call,
    }


PROBES: dict[str, Callable[[], Any]] = {
    name.removeprefix("probe_"): fn for name, fn in list(globals().items()) if name.startswith("probe_")
}


def observe(names: list[str] | None = None) -> dict[str, Any]:
    """Run the probes in this process; an exception becomes the string "raised: <repr>"."""
    seen: dict[str, Any] = {}
    for name, probe in PROBES.items():
        if names is None or name in names:
            try:
                seen[name] = probe()
            except Exception as exc:
                seen[name] = f"raised: {exc!r}"
    return seen


# ---------------------------------------------------------------------------------------------
# Fixtures


@pytest.fixture(scope="module")
def unshimmed() -> dict[str, Any]:
    """The probes' observations in a fresh interpreter process without shims (then :func:`unverified`)."""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, __file__], env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def shimmed() -> tuple[str, ...]:
    return _triton_shims.install()


# ---------------------------------------------------------------------------------------------
# One defect / fix pair per shim


def test_torch_cuda_device(unshimmed: dict[str, Any], shimmed: tuple[str, ...]) -> None:
    if torch.cuda.is_available():
        pytest.skip("torch has CUDA: torch.cuda.device(None) works, no shim")
    assert "TypeError" in unshimmed["torch_cuda_device"]
    assert "torch_cuda_device" in shimmed
    assert probe_torch_cuda_device() == "ok"


def test_cuda_device_properties(unshimmed: dict[str, Any], shimmed: tuple[str, ...]) -> None:
    raised = "ValueError" if torch.cuda.is_available() else "AssertionError"
    assert raised in unshimmed["cuda_device_properties"]
    assert "cuda_device_properties" in shimmed
    assert probe_cuda_device_properties() == _triton_shims.CPU_SM_COUNT


@verified
def test_tensor_index(unshimmed: dict[str, Any], shimmed: tuple[str, ...]) -> None:
    if not _triton_shims._numpy_rejects_int_of_1d():
        pytest.skip("this numpy still converts 1-element arrays with int(): no defect, no shim")
    assert "only 0-dimensional arrays" in unshimmed["tensor_index"]
    assert "tensor_index" in shimmed
    assert probe_tensor_index() == 0.0


@verified
def test_autotune_without_benchmark(unshimmed: dict[str, Any], shimmed: tuple[str, ...]) -> None:
    assert "0 active drivers" in unshimmed["autotune_without_benchmark"]
    assert "autotune_without_benchmark" in shimmed
    # The fewest programs (cdiv(20, 16) = 2) win; the kernel ran once, with that config.
    assert probe_autotune_without_benchmark() == {"ok": True, "block": 16}


@verified
def test_bf16_values(unshimmed: dict[str, Any], shimmed: tuple[str, ...]) -> None:
    before = unshimmed["bf16_values"]
    assert before["arith_err"] > 1e3 and before["dot_err"] > 1e3  # the bit patterns as integers
    assert not before["reduce_bits_equal"]
    assert "get_bf16" in before["constants_bits_equal"]
    assert before["f64_cast_mismatches"] > 1000
    assert isinstance(before["atomic_err"], str) or before["atomic_err"] > 1
    assert "bf16_values" in shimmed
    after = probe_bf16_values()
    assert after["arith_bits_equal"] and after["reduce_bits_equal"] and after["constants_bits_equal"] is True
    assert after["dot_err"] < 1e-4  # fp32 accumulation order only
    assert after["f64_cast_mismatches"] == 0
    assert after["atomic_err"] <= 2**-6  # sixteen bf16 roundings of partial sums of magnitude < 4


@verified
def test_bf16_rounding(unshimmed: dict[str, Any], shimmed: tuple[str, ...]) -> None:
    assert unshimmed["bf16_rounding"] > 1000  # truncation differs from round-to-nearest-even about half the time
    assert "bf16_rounding" in shimmed
    assert probe_bf16_rounding() == 0


@verified
def test_libdevice(unshimmed: dict[str, Any], shimmed: tuple[str, ...]) -> None:
    assert "NoneType" in unshimmed["libdevice"]
    assert "libdevice" in shimmed
    assert probe_libdevice() < 1e-5
    with pytest.raises(Exception, match=r"NotImplementedError.*__nv_j0f"):
        _libdevice_unsupported[(1,)](torch.rand(N), torch.empty(N), N)


def test_fp16_needs_no_shim(unshimmed: dict[str, Any]) -> None:
    assert unshimmed["fp16"] == {
        "arith_bits_equal": True,
        "dot_err": pytest.approx(0.0, abs=1e-4),
        "cast_mismatches": 0,
    }


# ---------------------------------------------------------------------------------------------
# Installation


def test_install_is_idempotent(shimmed: tuple[str, ...]) -> None:
    from triton.runtime import interpreter

    patched = interpreter.InterpreterBuilder.binary_op
    assert _triton_shims.install() == shimmed
    assert interpreter.InterpreterBuilder.binary_op is patched
    assert _triton_shims.bf16_ready() == ({"bf16_values", "bf16_rounding"} <= set(shimmed))


def test_install_does_nothing_without_the_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRITON_INTERPRET")
    assert _triton_shims.install() == ()


def test_unverified_triton_is_refused_for_bf16(unshimmed: dict[str, Any]) -> None:
    """On a triton the interpreter shims were not checked on they are skipped with a warning, and a
    bf16 adapter call on CPU raises instead of computing on bit patterns (see :func:`unverified`)."""
    seen = unshimmed["unverified"]
    assert "cuda_device_properties" in seen["installed"] and "bf16_values" not in seen["installed"]
    assert seen["warned"] and not seen["bf16_ready"]
    assert "ParityError" in seen["bf16_call"] and "bf16" in seen["bf16_call"]


def test_load_mamba_triton_skips_the_package_init() -> None:
    module = _triton_shims.load_mamba_triton("ssd_combined")
    assert callable(module.mamba_chunk_scan_combined)
    assert not hasattr(sys.modules["mamba_ssm"], "Mamba2")  # set by mamba_ssm/__init__.py
    for name in _triton_shims.MAMBA_PACKAGES:
        assert name in sys.modules


def test_f64_to_bf16_rounds_once() -> None:
    """fp64 -> bf16 rounds to nearest even directly, not through a rounded fp32 (double rounding)."""
    import numpy as np

    # 1 + 2^-8 is a bf16 tie; a hair above it must round up, although fp32 rounds the hair away.
    above_tie = np.array([1 + 2**-8 + 2**-40, 1 + 2**-8, -(1 + 3 * 2**-8), 1e300, -1e-50])
    bits = _triton_shims.f64_to_bf16_bits(above_tie)
    assert bits.tolist() == [0x3F81, 0x3F80, 0xBF82, 0x7F80, 0x8000]


if __name__ == "__main__":
    print(json.dumps({**observe(), "unverified": unverified()}))  # unverified() last: it installs shims
