"""Shims that let the ORIGINAL Triton kernels (mamba-ssm's, and the Triton code Helion generates) run
on CPU in the Triton interpreter (``TRITON_INTERPRET=1``), plus :func:`load_mamba_triton`, which
imports ``mamba_ssm.ops.triton.<name>`` without running ``mamba_ssm/__init__.py``.

Every shim fixes one defect that a minimal kernel shows (``tests/test_triton_shims.py`` runs each one
without and with its shim). Checked on triton 3.6.0 with torch 2.13.0+cpu and numpy 2.4.6:

- ``torch_cuda_device``: ``with torch.cuda.device(None)`` raises ``TypeError`` in a CPU-only torch (mamba
  passes ``x.device.index``, None for a CPU tensor). Fix: None or a negative index is a no-op, as
  torch documents. Condition: torch has no CUDA.
- ``cuda_device_properties``: ``torch.cuda.get_device_properties(cpu device)`` raises ``AssertionError``
  in a CPU-only torch (a CUDA torch raises ``ValueError`` for a CPU device); mamba reads
  ``multi_processor_count`` for its split heuristics. Fix: a CPU device reports :data:`CPU_SM_COUNT`
  SMs; other devices go to torch. Condition: the interpreter is on.
- ``tensor_index``: the interpreter's ``tensor.__index__`` is ``int(handle.data)`` on a 1-element array,
  which numpy 2.4 rejects (``TypeError: only 0-dimensional arrays can be converted to Python scalars``);
  mamba's kernels hit it in ``range(0, chunk_size_limit, BLOCK_SIZE_K)``. Fix: ``int(data.item())``.
  Condition: verified triton and a numpy that rejects it (seen with numpy 2.4.6).
- ``autotune_without_benchmark``: ``@triton.autotune`` with more than one config benchmarks, which fails
  in the interpreter ("0 active drivers"). Fix: rank configs without running them, cheapest to interpret
  first: fewest programs in the launch grid, then the smallest product of the ``BLOCK*`` meta-parameters,
  ``num_stages``, ``num_warps`` and list order, so the pick is deterministic; pre-hooks and
  ``best_config`` behave as after a real tuning run.
- ``bf16_values``: the interpreter stores bf16 as raw uint16 bits, and arithmetic, comparisons, math,
  ``tl.dot``, reductions, scans and ``atomic_add`` act on the bits as integers (errors of 1e10 and more);
  fp64/integer -> bf16 casts and non-zero bf16 constants (``tl.full``) are broken too. Fix: these
  operations decode bf16 to fp32, compute, and round the result to bf16 (round to nearest even).
- ``bf16_rounding``: fp32 -> bf16 casts (``.to(tl.bfloat16)`` and stores of fp32 values into bf16
  memory) truncate; the GPU rounds to nearest even. Fix: round to nearest even.
- ``libdevice``: ``triton.language.extra.libdevice.*`` are stubs in the interpreter and return None
  (the compiler maps them to the CUDA library; the interpreter does not). Fix: the stubs dispatch to the
  CUDA module's functions (same type checks and broadcasting), whose extern calls are evaluated with
  numpy; a symbol without a numpy equivalent raises ``NotImplementedError`` instead of returning None.
  mamba-ssm's kernels use none of them; Helion and Inductor code generation do.

fp16 needs no shim: fp16 arithmetic, ``tl.dot`` and fp32 -> fp16 casts are correct in the interpreter.

Guards: each interpreter shim is applied only on the triton versions it was verified on
(:data:`VERIFIED_TRITON`); ``torch_cuda_device`` only where torch has no CUDA; the patched functions
leave CUDA devices to torch. :func:`install` does nothing
unless the interpreter is enabled, and it is idempotent. On an unverified triton it warns and skips the
interpreter shims; :func:`bf16_ready` then says False, and callers must refuse bf16 on CPU.

What bf16 on CPU can and cannot verify, with the shims:

- Can: every bf16 load/store and cast, each elementwise operation rounded to bf16 as the GPU rounds it,
  ``tl.dot`` on bf16 operands with fp32 accumulation, block sizes, masking and loop structure.
- Cannot: the order of floating-point accumulation in ``tl.dot`` and reductions; bf16 reductions and
  scans of bf16 tensors (rare: kernels reduce in fp32) are computed in fp32 and rounded once, where the
  GPU rounds partial results; FMA contraction (the GPU may fuse ``a * b + c`` and round once, the
  interpreter rounds twice, in every dtype); TF32 (``input_precision`` is ignored, fp32 dots are exact
  fp32); races and atomics' order (programs run one after another).
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import math
import os
import sys
import types
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

VERIFIED_TRITON = frozenset({"3.6.0"})
"""triton versions on which each interpreter shim's defect and fix were checked."""

CPU_SM_COUNT = 1
"""The SM count a CPU device reports. With one SM mamba-ssm's heuristics (``nheads_per_program`` in the
SSD backward, ``nrow_groups`` in the gated-norm backward) give each program the most work, which is the
regime of training shapes on the H200 (b*c*h far above 132 SMs), and interpret the fewest programs."""

MAMBA_PACKAGES = ("mamba_ssm", "mamba_ssm.ops", "mamba_ssm.ops.triton", "mamba_ssm.utils")
"""Packages registered bare (their ``__init__`` not run) so that the Triton modules import."""

_MARK = "__parity_shim__"
_installed: set[str] = set()
_warned: list[bool] = []  # non-empty once install() warned about an unverified triton


@dataclass(frozen=True)
class Shim:
    """One fix: its name, the defect it fixes, when it applies, and how it is applied."""

    name: str
    defect: str
    applies: Callable[[], bool]
    patch: Callable[[], None]


def interpreting() -> bool:
    """Whether Triton kernels in this process run in the interpreter."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def _torch_without_cuda() -> bool:
    import torch

    return not torch.cuda.is_available()


def _verified_triton() -> bool:
    import triton

    return interpreting() and triton.__version__ in VERIFIED_TRITON


def _replace(owner: Any, attr: str, new: Any, shim: str) -> None:
    """Set ``owner.attr = new`` unless a previous install of ``shim`` already did (idempotence that
    survives a reload of this module)."""
    if getattr(getattr(owner, attr, None), _MARK, None) == shim:
        return
    setattr(new, _MARK, shim)
    setattr(owner, attr, new)


# ---------------------------------------------------------------------------------------------
# torch.cuda for CPU tensors


def _patch_torch_cuda_device() -> None:
    import torch

    original = torch.cuda.device

    class device(original):  # type: ignore[misc, valid-type]
        """torch.cuda.device whose None/negative index is a no-op in a torch without CUDA."""

        def __init__(self, device: Any) -> None:
            if device is None or (isinstance(device, int) and device < 0):
                self.idx, self.prev_idx = -1, -1
            else:
                super().__init__(device)

        def __enter__(self) -> None:
            if self.idx >= 0:
                super().__enter__()

        def __exit__(self, *exc: Any) -> bool:
            if self.idx >= 0:
                return super().__exit__(*exc)
            return False

    _replace(torch.cuda, "device", device, "torch_cuda_device")


@dataclass(frozen=True)
class CpuDeviceProperties:
    """What mamba-ssm reads from ``torch.cuda.get_device_properties`` for a CPU tensor."""

    name: str
    multi_processor_count: int


def _patch_device_properties() -> None:
    import torch

    original = torch.cuda.get_device_properties

    def get_device_properties(device: Any = None) -> Any:
        if isinstance(device, str | torch.device) and torch.device(device).type == "cpu":
            return CpuDeviceProperties(name="cpu (Triton interpreter)", multi_processor_count=CPU_SM_COUNT)
        return original(device)

    _replace(
        torch.cuda, "get_device_properties", functools.wraps(original)(get_device_properties), "cuda_device_properties"
    )


# ---------------------------------------------------------------------------------------------
# tensor.__index__ under numpy 2.4


def _numpy_rejects_int_of_1d() -> bool:
    try:
        int(np.zeros(1, dtype=np.int32))
    except TypeError:
        return True
    return False


def _patch_tensor_index() -> None:
    from triton.runtime import interpreter as interp

    patch_lang_tensor = interp._patch_lang_tensor

    def new_patch_lang_tensor(tensor: Any, scope: Any) -> None:
        patch_lang_tensor(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.item()))

    _replace(interp, "_patch_lang_tensor", new_patch_lang_tensor, "tensor_index")


# ---------------------------------------------------------------------------------------------
# Autotuning without benchmarks


def config_rank(config: Any, programs: int = 0) -> tuple[int, int, int, int]:
    """Sort key of a triton.Config that cannot be timed: the number of programs its grid launches
    (each interpreted program costs tens of milliseconds, whatever its block size), then the product
    of its ``BLOCK*`` meta-parameters, then num_stages, then num_warps; ties keep the list order."""
    blocks = math.prod(v for k, v in config.kwargs.items() if "BLOCK" in k.upper() and isinstance(v, int))
    return programs, blocks, config.num_stages or 0, config.num_warps or 0


def _programs(grid: Any, meta: dict[str, Any]) -> int:
    """How many programs ``grid`` (a tuple or a function of the meta-parameters) launches."""
    if callable(grid):
        grid = grid(meta)
    return math.prod(int(g) for g in grid)


def _patch_autotune() -> None:
    from triton.runtime import autotuner

    original = autotuner.Autotuner._bench

    def _bench(self: Any, *args: Any, config: Any, **meta: Any) -> list[float]:
        if not interpreting():
            return original(self, *args, config=config, **meta)
        programs = _programs(meta["grid"], {**self.nargs, **meta, **config.all_kwargs()}) if "grid" in meta else 0
        return [float(v) for v in config_rank(config, programs)]  # compared as lists: lexicographic

    _replace(autotuner.Autotuner, "_bench", _bench, "autotune_without_benchmark")


# ---------------------------------------------------------------------------------------------
# bf16 in the interpreter


def bf16_bits_to_f32(bits: np.ndarray) -> np.ndarray:
    """uint16 bf16 bit patterns -> their exact fp32 values."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


def f32_to_bf16_bits(values: np.ndarray) -> np.ndarray:
    """fp32 values -> bf16 bit patterns, rounded to nearest even (NaN stays a quiet NaN)."""
    f = np.ascontiguousarray(values, dtype=np.float32)
    u = f.view(np.uint32)
    with np.errstate(over="ignore"):
        rounded = (u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    quiet_nan = (u >> np.uint32(16)) | np.uint32(0x40)
    return np.where(np.isnan(f), quiet_nan, rounded).astype(np.uint16)


def f64_to_bf16_bits(values: np.ndarray) -> np.ndarray:
    """fp64 values -> bf16 bit patterns, rounded once to nearest even: round to odd into fp32 first
    (exact for the final rounding, as fp32 has more than 8 + 2 significand bits), then to bf16."""
    d = np.asarray(values, dtype=np.float64)
    with np.errstate(over="ignore"):
        f = d.astype(np.float32)
    f = np.where(np.abs(f.astype(np.float64)) > np.abs(d), np.nextafter(f, np.float32(0)), f).astype(np.float32)
    inexact = (f.astype(np.float64) != d) & ~np.isnan(d)
    odd = (np.ascontiguousarray(f).view(np.uint32) | inexact.astype(np.uint32)).view(np.float32)
    return f32_to_bf16_bits(odd)


def _patch_bf16_values() -> None:
    from triton import language as tl
    from triton.runtime import interpreter as interp

    bf16, builder_cls, handle = tl.bfloat16, interp.InterpreterBuilder, interp.TensorHandle

    def is_bf16(h: Any) -> bool:
        return isinstance(h, handle) and h.dtype.scalar == bf16

    def value(h: Any) -> Any:
        return bf16_bits_to_f32(h.data) if is_bf16(h) else h.data

    def to_bf16(data: np.ndarray) -> Any:
        return handle(f32_to_bf16_bits(data), bf16)

    name = "bf16_values"
    binary_op, ternary_op, unary_op = builder_cls.binary_op, builder_cls.ternary_op, builder_cls.unary_op
    create_fma, create_erf, create_rsqrt = builder_cls.create_fma, builder_cls.create_erf, builder_cls.create_rsqrt
    create_dot, cast_impl, atomic_rmw = builder_cls.create_dot, builder_cls.cast_impl, builder_cls.create_atomic_rmw

    def new_binary_op(self: Any, lhs: Any, rhs: Any, op: Any) -> Any:
        if not (is_bf16(lhs) or is_bf16(rhs)):
            return binary_op(self, lhs, rhs, op)
        out = op(value(lhs), value(rhs))
        return handle(out, bf16) if out.dtype == np.bool_ else to_bf16(out)  # comparisons keep bool data

    def new_ternary_op(self: Any, lhs: Any, rhs: Any, other: Any, op: Any) -> Any:
        if not is_bf16(other):
            return ternary_op(self, lhs, rhs, other, op)
        return to_bf16(op(value(lhs), value(rhs), value(other)))

    def new_unary_op(self: Any, arg: Any, op: Any) -> Any:
        return to_bf16(op(value(arg))) if is_bf16(arg) else unary_op(self, arg, op)

    def new_create_fma(self: Any, x: Any, y: Any, z: Any) -> Any:
        if not is_bf16(z):
            return create_fma(self, x, y, z)
        exact = value(x).astype(np.float64) * value(y) + value(z)
        return handle(f64_to_bf16_bits(exact), bf16)

    def via_f32(method: Any) -> Any:
        def run(self: Any, arg: Any) -> Any:
            if not is_bf16(arg):
                return method(self, arg)
            return to_bf16(method(self, handle(value(arg), tl.float32)).data)

        return run

    def new_create_dot(self: Any, a: Any, b: Any, d: Any, input_precision: Any, max_num_imprecise_acc: Any) -> Any:
        if not (is_bf16(a) or is_bf16(b) or is_bf16(d)):
            return create_dot(self, a, b, d, input_precision, max_num_imprecise_acc)
        up = [handle(value(t), tl.float32) if is_bf16(t) else t for t in (a, b, d)]
        out = create_dot(self, *up, input_precision, max_num_imprecise_acc)
        return to_bf16(out.data) if is_bf16(d) else out

    def new_cast_impl(self: Any, src: Any, dst_type: Any) -> Any:
        # fp32 <-> bf16 belongs to bf16_rounding; bf16 <-> other types goes through fp32 in the semantic.
        if dst_type.scalar != bf16 or src.dtype.scalar in (bf16, tl.float32):
            return cast_impl(self, src, dst_type)
        return handle(f64_to_bf16_bits(src.data.astype(np.float64)), bf16)  # fp64, integers

    def new_atomic_rmw(self: Any, rmw_op: Any, ptr: Any, val: Any, mask: Any, sem: Any, scope: Any) -> Any:
        from triton._C.libtriton import ir

        if not is_bf16(val) or rmw_op != ir.ATOMIC_OP.FADD:
            return atomic_rmw(self, rmw_op, ptr, val, mask, sem, scope)
        # Programs run one after another, so a read-modify-write per element is atomic; lanes that
        # share an address are applied in order.
        ptrs, vals, keep = np.broadcast_arrays(ptr.data, val.data, mask.data)
        old = np.zeros(ptrs.shape, dtype=np.uint16)
        for i in zip(*np.nonzero(keep), strict=True):
            one = np.array([ptrs[i]], dtype=np.uint64)
            prev = interp._interpreter.load(one, np.array([True]), np.zeros(1, np.uint16), np.dtype(np.uint16))
            total = bf16_bits_to_f32(prev) + bf16_bits_to_f32(np.array([vals[i]], dtype=np.uint16))
            interp._interpreter.store(one, f32_to_bf16_bits(total), np.array([True]))
            old[i] = prev[0]
        return handle(old, bf16)

    def get_bf16(self: Any, v: float) -> Any:
        return handle(f64_to_bf16_bits(np.array([v], dtype=np.float64)), bf16)

    for attr, new in (
        ("binary_op", new_binary_op),
        ("ternary_op", new_ternary_op),
        ("unary_op", new_unary_op),
        ("create_fma", new_create_fma),
        ("create_erf", via_f32(create_erf)),
        ("create_rsqrt", via_f32(create_rsqrt)),
        ("create_dot", new_create_dot),
        ("cast_impl", new_cast_impl),
        ("create_atomic_rmw", new_atomic_rmw),
        ("get_bf16", get_bf16),
    ):
        _replace(builder_cls, attr, new, name)

    reduce_sum, min_max = interp.ReduceOps.sum, interp.ReduceOps.min_max
    cumsum, cumprod = interp.ScanOps.cumsum, interp.ScanOps.cumprod

    def retyped(t: Any, dtype: Any) -> Any:
        return t.type.with_element_ty(dtype) if t.type.is_block() else dtype

    def as_f32(t: Any) -> Any:
        return tl.core.tensor(handle(value(t.handle), tl.float32), retyped(t, tl.float32))

    def back_to_bf16(t: Any) -> Any:
        if t.dtype != tl.float32:  # indices of argmin/argmax
            return t
        return tl.core.tensor(to_bf16(t.handle.data), retyped(t, bf16))

    def new_sum(self: Any, input: Any) -> Any:
        return back_to_bf16(reduce_sum(self, as_f32(input))) if input.dtype == bf16 else reduce_sum(self, input)

    def new_min_max(self: Any, input: Any, val_reduce_op: Any, idx_reduce_op: Any = None) -> Any:
        one = input[0] if isinstance(input, tuple) else input
        if one.dtype != bf16:
            return min_max(self, input, val_reduce_op, idx_reduce_op)
        out = min_max(self, as_f32(one), val_reduce_op, idx_reduce_op)
        return tuple(back_to_bf16(t) for t in out) if isinstance(out, tuple) else back_to_bf16(out)

    def scan(original: Any) -> Any:
        def run(self: Any, input: Any) -> Any:
            if input.dtype != bf16:
                return original(self, input)
            return [back_to_bf16(t) for t in original(self, as_f32(input))]

        return run

    _replace(interp.ReduceOps, "sum", new_sum, name)
    _replace(interp.ReduceOps, "min_max", new_min_max, name)
    _replace(interp.ScanOps, "cumsum", scan(cumsum), name)
    _replace(interp.ScanOps, "cumprod", scan(cumprod), name)


def _patch_bf16_rounding() -> None:
    from triton import language as tl
    from triton.runtime import interpreter as interp

    cast_impl = interp.InterpreterBuilder.cast_impl

    def new_cast_impl(self: Any, src: Any, dst_type: Any) -> Any:
        if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16:
            return interp.TensorHandle(f32_to_bf16_bits(src.data), tl.bfloat16)
        return cast_impl(self, src, dst_type)

    _replace(interp.InterpreterBuilder, "cast_impl", new_cast_impl, "bf16_rounding")


# ---------------------------------------------------------------------------------------------
# libdevice


def _vectorized(fn: Callable[[float], float]) -> Callable[[np.ndarray], np.ndarray]:
    vec = np.vectorize(fn, otypes=[np.float64])
    return lambda x: vec(x.astype(np.float64)).astype(x.dtype)


def _torch_unary(name: str) -> Callable[[np.ndarray], np.ndarray]:
    def run(x: np.ndarray) -> np.ndarray:
        import torch

        return getattr(torch.special, name)(torch.from_numpy(np.ascontiguousarray(x))).numpy()

    return run


def _round_half_away(x: np.ndarray) -> np.ndarray:
    return np.copysign(np.floor(np.abs(x) + 0.5), x)


# Function name (the fp64 symbol without "__nv_"; the fp32 one adds "f") -> numpy implementation.
_LIBDEVICE_FLOAT: dict[str, Callable[..., np.ndarray]] = {
    "exp": np.exp,
    "exp2": np.exp2,
    "exp10": lambda x: np.power(x.dtype.type(10), x),
    "expm1": np.expm1,
    "log": np.log,
    "log2": np.log2,
    "log10": np.log10,
    "log1p": np.log1p,
    "sin": np.sin,
    "cos": np.cos,
    "tan": np.tan,
    "asin": np.arcsin,
    "acos": np.arccos,
    "atan": np.arctan,
    "sinh": np.sinh,
    "cosh": np.cosh,
    "tanh": np.tanh,
    "asinh": np.arcsinh,
    "acosh": np.arccosh,
    "atanh": np.arctanh,
    "sinpi": lambda x: np.sin(np.pi * x),
    "cospi": lambda x: np.cos(np.pi * x),
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1 / np.sqrt(x),
    "cbrt": np.cbrt,
    "rcbrt": lambda x: 1 / np.cbrt(x),
    "floor": np.floor,
    "ceil": np.ceil,
    "trunc": np.trunc,
    "rint": np.rint,
    "nearbyint": np.rint,
    "round": _round_half_away,
    "fabs": np.abs,
    "erf": _vectorized(math.erf),
    "erfc": _vectorized(math.erfc),
    "erfinv": _torch_unary("erfinv"),
    "lgamma": _vectorized(math.lgamma),
    "tgamma": _vectorized(math.gamma),
    "normcdf": _torch_unary("ndtr"),
    "normcdfinv": _torch_unary("ndtri"),
    "atan2": np.arctan2,
    "pow": np.power,
    "hypot": np.hypot,
    "fmod": np.fmod,
    "copysign": np.copysign,
    "remainder": lambda x, y: x - np.rint(x / y) * y,
    "fdim": lambda x, y: np.maximum(x - y, 0),
    "nextafter": np.nextafter,
    "fma": lambda x, y, z: x * y + z,
    "saturate": lambda x: np.clip(x, 0, 1),
}
_LIBDEVICE_EXTRA: dict[str, Callable[..., np.ndarray]] = {
    "__nv_fdiv_rn": np.divide,
    "__nv_ddiv_rn": np.divide,
    "__nv_fsqrt_rn": np.sqrt,
    "__nv_dsqrt_rn": np.sqrt,
    "__nv_frcp_rn": lambda x: 1 / x,
    "__nv_drcp_rn": lambda x: 1 / x,
    "__nv_frsqrt_rn": lambda x: 1 / np.sqrt(x),
    "__nv_fmaf_rn": lambda x, y, z: x * y + z,
    "__nv_fma_rn": lambda x, y, z: x * y + z,
    "__nv_fast_fdividef": np.divide,
    "__nv_fast_expf": np.exp,
    "__nv_fast_exp10f": lambda x: np.power(10, x),
    "__nv_fast_logf": np.log,
    "__nv_fast_log2f": np.log2,
    "__nv_fast_log10f": np.log10,
    "__nv_fast_sinf": np.sin,
    "__nv_fast_cosf": np.cos,
    "__nv_fast_tanf": np.tan,
    "__nv_fast_powf": np.power,
    "__nv_saturatef": lambda x: np.clip(x, 0, 1),
    "__nv_isnanf": np.isnan,
    "__nv_isnand": np.isnan,
    "__nv_isinff": np.isinf,
    "__nv_isinfd": np.isinf,
    "__nv_finitef": np.isfinite,
    "__nv_isfinited": np.isfinite,
    "__nv_signbitf": np.signbit,
    "__nv_signbitd": np.signbit,
}


def libdevice_numpy(symbol: str) -> Callable[..., np.ndarray]:
    """The numpy implementation of a CUDA libdevice symbol (``__nv_expf``), or NotImplementedError."""
    if symbol in _LIBDEVICE_EXTRA:
        return _LIBDEVICE_EXTRA[symbol]
    base = symbol.removeprefix("__nv_")
    for name in (base, base[:-1] if base.endswith("f") else None):
        if name in _LIBDEVICE_FLOAT:
            return _LIBDEVICE_FLOAT[name]
    raise NotImplementedError(f"libdevice {symbol} has no CPU implementation in {__name__}; add one to its table")


def _patch_libdevice() -> None:
    from triton.language.extra import libdevice as stub
    from triton.language.extra.cuda import libdevice as cuda
    from triton.runtime import interpreter as interp

    def create_extern_elementwise(
        self: Any, lib_name: str, lib_path: str, symbol: str, args: list[Any], ret_type: Any, is_pure: bool
    ) -> Any:
        fn = libdevice_numpy(symbol)
        out = np.asarray(fn(*(a.data for a in args)))
        scalar = ret_type.scalar
        return interp.TensorHandle(out.astype(interp._get_np_dtype(scalar)), scalar)

    _replace(interp.InterpreterBuilder, "create_extern_elementwise", create_extern_elementwise, "libdevice")

    def dispatcher(fn: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            kwargs["_semantic"] = interp.interpreter_semantic
            return fn(*args, **kwargs)

        functools.update_wrapper(call, fn, assigned=("__name__", "__qualname__", "__doc__"), updated=())
        call.__module__ = stub.__name__  # what triton's dependency finder expects of a libdevice stub
        return call

    for name, fn in vars(cuda).items():
        if callable(fn) and getattr(fn, "__triton_builtin__", False) and hasattr(stub, name):
            _replace(stub, name, dispatcher(fn), "libdevice")


# ---------------------------------------------------------------------------------------------

SHIMS: tuple[Shim, ...] = (
    Shim(
        "torch_cuda_device",
        "torch.cuda.device(None) raises TypeError in a torch without CUDA",
        _torch_without_cuda,
        _patch_torch_cuda_device,
    ),
    Shim(
        "cuda_device_properties",
        "torch.cuda.get_device_properties raises for a CPU device",
        interpreting,
        _patch_device_properties,
    ),
    Shim(
        "tensor_index",
        "tensor.__index__ calls int() on a 1-element array, which numpy >= 2.4 rejects",
        lambda: _verified_triton() and _numpy_rejects_int_of_1d(),
        _patch_tensor_index,
    ),
    Shim(
        "autotune_without_benchmark",
        "autotune with >1 config fails in the interpreter (0 active drivers)",
        _verified_triton,
        _patch_autotune,
    ),
    Shim("bf16_values", "interpreter computes on bf16 bit patterns as integers", _verified_triton, _patch_bf16_values),
    Shim(
        "bf16_rounding",
        "interpreter truncates fp32 -> bf16 instead of rounding to nearest even",
        _verified_triton,
        _patch_bf16_rounding,
    ),
    Shim("libdevice", "interpreter libdevice functions are stubs returning None", _verified_triton, _patch_libdevice),
)


def install() -> tuple[str, ...]:
    """Apply every shim whose condition holds (idempotent); return the names of the installed shims.
    Does nothing unless Triton runs in the interpreter."""
    if not interpreting():
        return ()
    skipped = []
    for shim in SHIMS:
        if shim.name in _installed:
            continue
        if shim.applies():
            shim.patch()
            _installed.add(shim.name)
        elif not _verified_triton() and shim.applies not in (_torch_without_cuda, interpreting):
            skipped.append(shim.name)
    if skipped and not _warned:
        import triton

        _warned.append(True)

        warnings.warn(
            f"triton {triton.__version__} is not among the versions the interpreter shims were "
            f"verified on ({', '.join(sorted(VERIFIED_TRITON))}); not applied: {', '.join(skipped)}",
            RuntimeWarning,
            stacklevel=2,
        )
    return installed()


def installed() -> tuple[str, ...]:
    """Names of the shims installed in this process."""
    return tuple(s.name for s in SHIMS if s.name in _installed)


def bf16_ready() -> bool:
    """Whether bf16 kernels compute correctly here: on CPU only with both bf16 shims installed."""
    return not interpreting() or {"bf16_values", "bf16_rounding"} <= _installed


# ---------------------------------------------------------------------------------------------
# Importing mamba-ssm's Triton modules


def register_mamba_packages() -> None:
    """Put bare ``mamba_ssm``, ``mamba_ssm.ops``, ``mamba_ssm.ops.triton`` and ``mamba_ssm.utils``
    package modules in ``sys.modules`` (unless already imported), so that their submodules import
    without ``mamba_ssm/__init__.py``, which needs the CUDA extensions and transformers."""
    for name in MAMBA_PACKAGES:
        if name in sys.modules:
            continue
        spec = importlib.util.find_spec(name)
        if spec is None or spec.submodule_search_locations is None:
            raise ImportError(f"{name} is not installed as a package (install mamba-ssm, see scripts/bootstrap.sh)")
        module = importlib.util.module_from_spec(spec)  # not executed: __init__ does not run
        sys.modules[name] = module
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(sys.modules[parent], child, module)


def load_mamba_triton(name: str) -> types.ModuleType:
    """Import ``mamba_ssm.ops.triton.<name>`` (e.g. ``"ssd_combined"``) without running mamba_ssm's
    package ``__init__``. Imports triton: configure the device (TRITON_INTERPRET on CPU) first."""
    register_mamba_packages()
    return importlib.import_module(f"mamba_ssm.ops.triton.{name}")
