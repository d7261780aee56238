"""The ORIGINAL mamba-ssm 2.3.2.post1 Triton kernels behind the signatures of ``reference/<op>.py``.

Each op is a function with the signature of mamba-ssm's wrapper, returning what the wrapper returns,
differentiable through autograd: a ``torch.autograd.Function`` whose forward calls the Triton forward
wrapper and whose backward calls the Triton backward wrappers mamba-ssm's own backward uses. On CUDA
the kernels run as shipped. On CPU the first call configures the Triton interpreter
(``parity.device.configure("cpu")``, which must happen before triton is imported) and installs
:mod:`reference._triton_shims`; bf16 on CPU is refused unless the bf16 shims are installed. Importing
this module imports neither triton nor mamba-ssm.

PyTorch glue in the backward passes, each marked ``# glue:`` where it happens, is limited to layout and
to converting between the two forms of the dA gradient: a gradient with respect to ``dA_cumsum`` (the
in-chunk cumulative sum) and one with respect to the per-step dA = dt * A that mamba-ssm's "stable"
kernels and ``_chunk_cumsum_bwd`` work with (one is the reverse cumulative sum of the other). Which
gradient has no Triton wrapper of its own is said in each op's docstring.

:data:`FORWARD_WRAPPERS` and :data:`BACKWARD_WRAPPERS` name every raw kernel wrapper (name -> mamba-ssm
module); :func:`wrapper` returns one ready to call on the device of its arguments, and the names are
also attributes of this module (``mamba_triton._chunk_scan_bwd_dx(...)``).

Up-front checks: each op first runs the argument checks of :mod:`contract.checks` that the reference and the
Helion port run too, so that an invalid call fails with the ValueError or TypeError that the reference
and the Helion port raise, naming the argument, before mamba-ssm's wrapper runs: mamba-ssm checks with bare
``assert`` (an AssertionError naming nothing) or not at all (a ZeroDivisionError for chunk_size 0, an
unpacking error for a wrong rank, a kernel reading out of bounds for a wrong shape it does not assert). The
gated norm also rejects a group wider than one 64 KiB block with mamba-ssm's RuntimeError, named here.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from contract.checks import (
    check_bmm_chunk,
    check_chunk_cumsum,
    check_chunk_scan,
    check_chunk_state,
    check_combined,
    check_layernorm,
    check_state_passing,
)
from parity.errors import ParityError
from reference import _triton_shims

FORWARD_WRAPPERS: dict[str, str] = {
    "_chunk_cumsum_fwd": "ssd_chunk_state",
    "_chunk_state_fwd": "ssd_chunk_state",
    "chunk_state_varlen": "ssd_chunk_state",
    "_state_passing_fwd": "ssd_state_passing",
    "_bmm_chunk_fwd": "ssd_bmm",
    "_chunk_scan_fwd": "ssd_chunk_scan",
    "_mamba_chunk_scan_combined_fwd": "ssd_combined",
    "_layer_norm_fwd": "layernorm_gated",
}
"""Every forward kernel wrapper: name -> module under ``mamba_ssm.ops.triton``."""

BACKWARD_WRAPPERS: dict[str, str] = {
    "_chunk_cumsum_bwd": "ssd_chunk_state",
    "_chunk_state_bwd_dx": "ssd_chunk_state",
    "_chunk_state_bwd_db": "ssd_chunk_state",
    "_chunk_state_bwd_ddAcs_stable": "ssd_chunk_state",
    "_state_passing_bwd": "ssd_state_passing",
    "_bmm_chunk_bwd": "ssd_bmm",
    "_chunk_scan_bwd_dz": "ssd_chunk_scan",
    "_chunk_scan_bwd_dstates": "ssd_chunk_scan",
    "_chunk_scan_bwd_dC": "ssd_chunk_scan",
    "_chunk_scan_bwd_dcb": "ssd_chunk_scan",
    "_chunk_scan_bwd_dx": "ssd_chunk_scan",
    "_chunk_scan_bwd_ddAcs_stable": "ssd_chunk_scan",
    "_chunk_scan_bwd_ddAcs_unstable": "ssd_chunk_scan",
    "_chunk_scan_bwd_ddAcs_prev": "ssd_chunk_scan",
    "_chunk_scan_chunk_state_bwd_dx": "ssd_combined",
    "_mamba_chunk_scan_combined_bwd": "ssd_combined",
    "_layer_norm_bwd": "layernorm_gated",
}
"""Every backward kernel wrapper mamba-ssm's autograd functions call: name -> module."""


def prepare(*values: Any) -> None:
    """Ready the process for mamba-ssm's Triton kernels on the device of the tensors among ``values``:
    on CPU, the Triton interpreter and the shims; bf16 on CPU only where the bf16 shims hold."""
    tensors = [v for v in values if isinstance(v, torch.Tensor)]
    if not any(t.device.type == "cpu" for t in tensors):
        return
    from parity import device

    device.configure("cpu")
    _triton_shims.install()
    if any(t.dtype == torch.bfloat16 for t in tensors) and not _triton_shims.bf16_ready():
        raise ParityError(
            "bf16 Triton kernels cannot run correctly on CPU here: the interpreter computes on "
            "bf16 bit patterns and the bf16 shims are not installed for this triton version "
            f"(verified: {', '.join(sorted(_triton_shims.VERIFIED_TRITON))}); use float16/float32 "
            "on CPU or run on CUDA"
        )


def _module(name: str) -> ModuleType:
    """mamba-ssm's Triton module ``name``, with the autotuned kernels of every mamba-ssm Triton module loaded so
    far pinned (see :func:`_pin`): a wrapper of one module launches kernels defined in the others (the combined
    op runs the chunk-state, state-passing, bmm and chunk-scan modules' kernels)."""
    module = _triton_shims.load_mamba_triton(name)
    if os.environ.get("TRITON_INTERPRET") != "1" and not _AS_SHIPPED:
        from triton.runtime.autotuner import Autotuner, Heuristics

        prefix = "mamba_ssm.ops.triton."
        for loaded in [m for n, m in list(sys.modules.items()) if n.startswith(prefix) and n not in _PINNED_MODULES]:
            _PINNED_MODULES.add(loaded.__name__)
            for value in vars(loaded).values():
                while isinstance(value, Heuristics):
                    value = value.fn
                if isinstance(value, Autotuner) and not getattr(value, "parity_pinned", False):
                    _pin(value)
    return module


# ---------------------------------------------------------------------------------------------
# The baseline's autotuning, on the GPU: once per kernel, then pinned

_PINNED_MODULES: set[str] = set()
_AS_SHIPPED = False


def autotune_as_shipped() -> None:
    """Leave mamba-ssm's autotuning as it ships (every new key autotunes; fp32 dots in TF32) for this process:
    what a speed comparison must run. Call before the first mamba-ssm kernel loads; parity runs pin instead."""
    global _AS_SHIPPED
    if _PINNED_MODULES:
        raise RuntimeError("mamba-ssm's kernels are already pinned in this process")
    _AS_SHIPPED = True


BASELINE_CONFIGS: dict[str, str] = {}
"""What each autotuned mamba-ssm kernel ran with, by ``kernel[float dtypes]``: the config its autotune chose
the first time the kernel ran with those dtypes (the gate runs the op's training shape first), or the one
recorded for this GPU in :data:`AUTOTUNE_RECORD`, and a note where a shape needed its own autotune because the
pinned config did not fit it. Recorded in the results."""

AUTOTUNE_RECORD = Path(__file__).with_name("mamba_autotune.json")
"""mamba-ssm's autotune choices at the training shapes, per GPU name and ``kernel[float dtypes]``, written by
a GPU run with ``PARITY_RECORD_BASELINE=1`` (see :func:`_pin`). A process that finds its kernel here runs it
with that config and never autotunes it, so a gate does not pay mamba-ssm's autotuning on every start."""


def _recorded() -> dict[str, dict[str, Any]]:
    """This GPU's recorded choices (empty without a record or a GPU)."""
    if not AUTOTUNE_RECORD.exists() or not torch.cuda.is_available():
        return {}
    return json.loads(AUTOTUNE_RECORD.read_text()).get(torch.cuda.get_device_name(), {})


def _record(label: str, config: Any) -> None:
    """Add one autotune choice to :data:`AUTOTUNE_RECORD` (locked read, merge, atomic replace: several processes
    may record at once)."""
    with open(AUTOTUNE_RECORD.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        data = json.loads(AUTOTUNE_RECORD.read_text()) if AUTOTUNE_RECORD.exists() else {}
        data.setdefault(torch.cuda.get_device_name(), {})[label] = {
            "kwargs": config.kwargs,
            "num_warps": config.num_warps,
            "num_stages": config.num_stages,
            "num_ctas": config.num_ctas,
            "maxnreg": config.maxnreg,
        }
        tmp = AUTOTUNE_RECORD.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        tmp.replace(AUTOTUNE_RECORD)


def recording() -> bool:
    """Whether this run records the baseline's autotune choices (``PARITY_RECORD_BASELINE=1``)."""
    return os.environ.get("PARITY_RECORD_BASELINE") == "1"


def _own_config(configs: list[Any], record: dict[str, Any] | None) -> Any:
    """The autotuner's own config that ``record`` names, None if none matches (then the kernel autotunes). Never
    a copy built from the record: mamba-ssm's configs carry pre-hooks that zero the buffers its kernels
    accumulate into with atomics, and a copy without them sums into uninitialized memory."""
    if record is None:
        return None
    for config in configs:
        if (
            config.kwargs == record["kwargs"]
            and config.num_warps == record.get("num_warps")
            and config.num_stages == record.get("num_stages")
            and config.num_ctas == record.get("num_ctas", 1)
            and config.maxnreg == record.get("maxnreg")
        ):
            return config
    return None


def _pin(tuner: Any) -> None:
    """Make ``tuner`` run one config per float dtypes of its arguments for every key: the choice recorded for
    this GPU in :data:`AUTOTUNE_RECORD` (this dtype set's, else another's), else its first config; a recording
    run (``PARITY_RECORD_BASELINE=1``) autotunes a dtype set the record lacks once, records it, and pins it.

    mamba-ssm's ``@triton.autotune`` benchmarks all its configs for every new (chunk_size, hdim, dstate,
    nheads) key: a gate over generated shapes would spend most of its time there. The baseline's error, not
    its speed, is what the gate uses, and one config serves every shape. Where the pinned config does not fit a
    shape (out of shared memory), the largest smaller config that does runs instead (no benchmarking; only if
    none fits is that key autotuned). fp32 runs compile their dots in IEEE fp32
    (``TRITON_F32_DEFAULT=ieee``; mamba-ssm's default is TF32): the fp32 rule judges candidates against a
    true-fp32 baseline, so a TF32 candidate cannot pass."""
    from triton import knobs
    from triton.runtime.errors import OutOfResources

    original, every = tuner.run, list(tuner.configs)
    chosen: dict[str, Any] = {}
    fallback: dict[str, Any] = {}
    name = tuner.base_fn.__name__

    def run(*args: Any, **kwargs: Any) -> Any:
        named = {**dict(zip(tuner.arg_names, args, strict=False)), **kwargs}
        floats = sorted(
            {
                str(v.dtype).removeprefix("torch.")
                for v in named.values()
                if isinstance(v, torch.Tensor) and v.is_floating_point()
            }
        )
        label = f"{name}[{','.join(floats)}]"
        if label not in chosen:
            recorded = _recorded()
            # This dtype set's own choice, else the kernel's choice for another dtype set (block sizes do not change
            # what it computes; one that does not fit falls back to autotuning below): without it every worker of
            # a run would autotune each kernel anew for a dtype set the record lacks. A recording run autotunes it.
            others = (k for k in recorded if k.startswith(f"{name}[")) if not recording() else ()
            source = label if label in recorded else min(others, default="")
            if (own := _own_config(every, recorded.get(source))) is not None:
                chosen[label] = own
                BASELINE_CONFIGS[label] = f"{own} (recorded in {AUTOTUNE_RECORD.name} as {source})"
            elif not recording():
                # Nothing recorded for this kernel on this GPU: its first config, not an autotune (every worker of
                # a run would benchmark all its configs anew, compiling each: minutes in fp32 with IEEE dots).
                chosen[label] = every[0]
                BASELINE_CONFIGS[label] = f"{every[0]} (mamba-ssm's first config: none recorded for this GPU)"
        with knobs.language.scope():
            if not {"float16", "bfloat16"} & set(floats):
                knobs.language.fp32_default = "ieee"
            if label in chosen:
                # The pinned config, else (out of shared memory at this shape) the largest smaller one that fits,
                # tried one by one without benchmarking and remembered for the next such shape.
                for config in [chosen[label], *_smaller(every, chosen[label], fallback.get(label))]:
                    tuner.configs = [config]
                    try:
                        result = original(*args, **kwargs)
                    except OutOfResources:
                        continue
                    if config is not chosen[label]:
                        fallback[label] = config
                        BASELINE_CONFIGS[f"{label} (other shapes)"] = f"{config} (pinned config out of resources)"
                    return result
                BASELINE_CONFIGS[f"{label} (other shapes)"] = "autotuned per key: no config fits"
            tuner.configs = every
            result = original(*args, **kwargs)
            if label not in chosen:
                chosen[label] = tuner.best_config
                BASELINE_CONFIGS[label] = str(tuner.best_config)
                if recording():
                    _record(label, tuner.best_config)
            return result

    tuner.run = run
    tuner.parity_pinned = True


def _footprint(config: Any) -> int:
    """A config's shared-memory appetite, for ordering: the product of its block sizes times its stages."""
    size = 1
    for key, value in getattr(config, "kwargs", {}).items():
        if key.startswith("BLOCK_SIZE") and isinstance(value, int):
            size *= value
    return size * max(getattr(config, "num_stages", 1) or 1, 1)


def _smaller(every: list[Any], pinned: Any, remembered: Any) -> list[Any]:
    """The configs to try where ``pinned`` is out of resources: the one that fitted last time first, then the
    others smaller than ``pinned``, largest first."""
    limit = _footprint(pinned)
    rest = sorted((c for c in every if c is not pinned and _footprint(c) < limit), key=_footprint, reverse=True)
    return ([remembered] if remembered is not None else []) + [c for c in rest if c is not remembered]


def wrapper(name: str) -> Callable[..., Any]:
    """The raw mamba-ssm wrapper ``name`` (a key of FORWARD_WRAPPERS or BACKWARD_WRAPPERS), called on
    the device of its tensor arguments (see :func:`prepare`)."""
    module = FORWARD_WRAPPERS.get(name) or BACKWARD_WRAPPERS.get(name)
    if module is None:
        raise KeyError(f"{name!r} is not a mamba-ssm kernel wrapper known here")

    def call(*args: Any, **kwargs: Any) -> Any:
        prepare(*args, *kwargs.values())
        return getattr(_module(module), name)(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"mamba_ssm.ops.triton.{module}.{name}, on the device of its arguments."
    return call


def __getattr__(name: str) -> Any:
    if name in FORWARD_WRAPPERS or name in BACKWARD_WRAPPERS:
        return wrapper(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _zeros_if_none(grad: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(like) if grad is None else grad


def _per_step(ddA_cumsum: torch.Tensor) -> torch.Tensor:
    """glue: gradient w.r.t. dA_cumsum -> gradient w.r.t. the per-step dA (reverse cumsum in each chunk)."""
    return ddA_cumsum.flip(-1).cumsum(-1).flip(-1)


def _cumulative(ddA: torch.Tensor) -> torch.Tensor:
    """glue: gradient w.r.t. the per-step dA -> gradient w.r.t. dA_cumsum (inverse of :func:`_per_step`:
    g_cs[k] = g[k] - g[k + 1])."""
    out = ddA.clone()
    out[..., :-1] -= ddA[..., 1:]
    return out


# ---------------------------------------------------------------------------------------------
# chunk_cumsum


class _ChunkCumsum(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any,
        dt: torch.Tensor,
        A: torch.Tensor,
        chunk_size: int,
        dt_bias: torch.Tensor | None,
        dt_softplus: bool,
        dt_limit: tuple[float, float],
    ) -> tuple[torch.Tensor, torch.Tensor]:
        dA_cumsum, dt_out = _module("ssd_chunk_state")._chunk_cumsum_fwd(
            dt, A, chunk_size, dt_bias=dt_bias, dt_softplus=dt_softplus, dt_limit=dt_limit
        )
        ctx.save_for_backward(dt, A, dt_bias)
        ctx.dt_softplus, ctx.dt_limit = dt_softplus, dt_limit
        ctx.set_materialize_grads(False)
        return dA_cumsum, dt_out

    @staticmethod
    def backward(ctx: Any, ddA_cumsum: torch.Tensor | None, ddt_out: torch.Tensor | None) -> tuple[Any, ...]:
        dt, A, dt_bias = ctx.saved_tensors
        b, _, h = dt.shape
        nchunks, chunk_size = (ddA_cumsum if ddA_cumsum is not None else ddt_out).shape[2:]
        like = dt.new_zeros(b, h, nchunks, chunk_size, dtype=torch.float32)
        ddA = _per_step(_zeros_if_none(ddA_cumsum, like))
        ddt, dA, ddt_bias = _module("ssd_chunk_state")._chunk_cumsum_bwd(
            ddA,
            _zeros_if_none(ddt_out, like),
            dt,
            A,
            dt_bias=dt_bias,
            dt_softplus=ctx.dt_softplus,
            dt_limit=ctx.dt_limit,
        )
        return ddt, dA, None, ddt_bias, None, None


def chunk_cumsum_fwd(
    dt: torch.Tensor,
    A: torch.Tensor,
    chunk_size: int,
    dt_bias: torch.Tensor | None = None,
    dt_softplus: bool = False,
    dt_limit: tuple[float, float] = (0.0, float("inf")),
) -> tuple[torch.Tensor, torch.Tensor]:
    """``_chunk_cumsum_fwd`` -> (dA_cumsum, dt_out), both (b, h, c, cs) fp32. Backward:
    ``_chunk_cumsum_bwd`` (dt, A, dt_bias), after the glue that turns the dA_cumsum gradient into the
    per-step gradient the kernel takes (the flip-cumsum-flip of mamba's combined backward)."""
    check_chunk_cumsum(dt, A, chunk_size, dt_bias)
    prepare(dt, A, dt_bias)
    return _ChunkCumsum.apply(dt, A, chunk_size, dt_bias, dt_softplus, tuple(dt_limit))


# ---------------------------------------------------------------------------------------------
# chunk_state


class _ChunkState(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any,
        B: torch.Tensor,
        x: torch.Tensor,
        dt: torch.Tensor,
        dA_cumsum: torch.Tensor,
        seq_idx: torch.Tensor | None,
        states_in_fp32: bool,
    ) -> torch.Tensor:
        states = _module("ssd_chunk_state")._chunk_state_fwd(
            B, x, dt, dA_cumsum, seq_idx=seq_idx, states_in_fp32=states_in_fp32
        )
        ctx.save_for_backward(B, x, dt, dA_cumsum, seq_idx)
        return states

    @staticmethod
    def backward(ctx: Any, dstates: torch.Tensor) -> tuple[Any, ...]:
        B, x, dt, dA_cumsum, seq_idx = ctx.saved_tensors
        ngroups = B.shape[2]
        cs = _module("ssd_chunk_state")
        if dstates.stride(-1) != 1:
            dstates = dstates.contiguous()
        if seq_idx is None:  # what mamba's ChunkStateFn does
            dx, ddt, ddA_cumsum = cs._chunk_state_bwd_dx(B, x, dt, dA_cumsum, dstates)
            dB = cs._chunk_state_bwd_db(x, dt, dA_cumsum, dstates, ngroups=ngroups)
        else:
            # _chunk_state_bwd_dx ignores seq_idx; mamba's combined backward gets dx and ddt of this term
            # from _chunk_scan_chunk_state_bwd_dx, here with the chunk-scan term's inputs zero.
            batch, nchunks, chunk_size = dt.shape[0], dt.shape[2], dt.shape[3]
            cb = x.new_zeros(batch, nchunks, ngroups, chunk_size, chunk_size, dtype=torch.float32)
            dx, ddt, _ = _module("ssd_combined")._chunk_scan_chunk_state_bwd_dx(
                x, dt, dA_cumsum, B, cb, torch.zeros_like(x), dstates, seq_idx=seq_idx
            )
            dB = cs._chunk_state_bwd_db(x, dt, dA_cumsum, dstates, seq_idx=seq_idx, ngroups=ngroups)
            ddA_cumsum = _cumulative(cs._chunk_state_bwd_ddAcs_stable(B, x, dt, dA_cumsum, dstates, seq_idx=seq_idx))
        return dB.to(B.dtype), dx, ddt, ddA_cumsum, None, None


def chunk_state_fwd(
    B: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    dA_cumsum: torch.Tensor,
    seq_idx: torch.Tensor | None = None,
    states_in_fp32: bool = True,
) -> torch.Tensor:
    """``_chunk_state_fwd`` -> states (b, c, h, p, n), fp32 (B.dtype if not states_in_fp32). Backward as
    mamba's ChunkStateFn: ``_chunk_state_bwd_dx`` (x, dt, dA_cumsum) and ``_chunk_state_bwd_db`` (B).
    With seq_idx, which ``_chunk_state_bwd_dx`` does not take: x and dt from
    ``_chunk_scan_chunk_state_bwd_dx`` (zero chunk-scan inputs), dA_cumsum from
    ``_chunk_state_bwd_ddAcs_stable`` plus the per-step -> cumulative glue, B from
    ``_chunk_state_bwd_db``."""
    check_chunk_state(B, x, dt, dA_cumsum, seq_idx)
    prepare(B, x, dt, dA_cumsum, seq_idx)
    return _ChunkState.apply(B, x, dt, dA_cumsum, seq_idx, states_in_fp32)


# ---------------------------------------------------------------------------------------------
# state_passing


class _StatePassing(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any,
        states: torch.Tensor,
        dA_chunk_cumsum: torch.Tensor,
        initial_states: torch.Tensor | None,
        seq_idx: torch.Tensor | None,
        chunk_size: int | None,
        out_dtype: torch.dtype | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        sp = _module("ssd_state_passing")
        out, final_states = sp._state_passing_fwd(
            states,
            dA_chunk_cumsum,
            initial_states=initial_states,
            seq_idx=seq_idx,
            chunk_size=chunk_size,
            out_dtype=out_dtype,
        )
        # The backward reads the states entering each chunk; like mamba's combined backward it wants
        # them in states.dtype, so a narrower out is recomputed there.
        ctx.save_for_backward(
            states, dA_chunk_cumsum, initial_states, seq_idx, out if out.dtype == states.dtype else None
        )
        ctx.chunk_size = chunk_size
        ctx.set_materialize_grads(False)
        return out, final_states

    @staticmethod
    def backward(ctx: Any, dout: torch.Tensor | None, dfinal_states: torch.Tensor | None) -> tuple[Any, ...]:
        states, dA_chunk_cumsum, initial_states, seq_idx, out = ctx.saved_tensors
        sp = _module("ssd_state_passing")
        if out is None:
            out, _ = sp._state_passing_fwd(
                states, dA_chunk_cumsum, initial_states=initial_states, seq_idx=seq_idx, chunk_size=ctx.chunk_size
            )
        dstates, ddA_chunk_cumsum, dinitial_states = sp._state_passing_bwd(
            out,
            dA_chunk_cumsum,
            _zeros_if_none(dout, out),
            dfinal_states=dfinal_states,
            seq_idx=seq_idx,
            has_initial_states=initial_states is not None,
            dstates_dtype=states.dtype,
            chunk_size=ctx.chunk_size,
        )
        if dinitial_states is not None:
            dinitial_states = dinitial_states.to(initial_states.dtype)
        return dstates, ddA_chunk_cumsum, dinitial_states, None, None, None


def state_passing_fwd(
    states: torch.Tensor,
    dA_chunk_cumsum: torch.Tensor,
    initial_states: torch.Tensor | None = None,
    seq_idx: torch.Tensor | None = None,
    chunk_size: int | None = None,
    out_dtype: torch.dtype | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``_state_passing_fwd`` -> (out (b, c, h, d) in out_dtype or states.dtype, final_states fp32).
    Backward: ``_state_passing_bwd`` (states, dA_chunk_cumsum, initial_states), fed the chunk-entry
    states in states.dtype (recomputed when out_dtype is narrower, as mamba's combined backward does)."""
    check_state_passing(states, dA_chunk_cumsum, initial_states, seq_idx, chunk_size)
    prepare(states, dA_chunk_cumsum, initial_states, seq_idx)
    return _StatePassing.apply(states, dA_chunk_cumsum, initial_states, seq_idx, chunk_size, out_dtype)


# ---------------------------------------------------------------------------------------------
# bmm_chunk


class _BmmChunk(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any,
        a: torch.Tensor,
        b: torch.Tensor,
        chunk_size: int,
        seq_idx: torch.Tensor | None,
        causal: bool,
        output_dtype: torch.dtype | None,
    ) -> torch.Tensor:
        out = _module("ssd_bmm")._bmm_chunk_fwd(
            a, b, chunk_size, seq_idx=seq_idx, causal=causal, output_dtype=output_dtype
        )
        ctx.save_for_backward(a, b, seq_idx)
        ctx.chunk_size, ctx.causal = chunk_size, causal
        return out

    @staticmethod
    def backward(ctx: Any, dout: torch.Tensor) -> tuple[Any, ...]:
        a, b, seq_idx = ctx.saved_tensors
        bmm = _module("ssd_bmm")
        # glue: _bmm_chunk_bwd expects dout already zero where the forward zeroed (across sequences),
        # and with causal=True the entries above the diagonal are undefined, so they carry no gradient.
        cs = dout.shape[-1]
        keep = torch.ones(cs, cs, dtype=torch.bool, device=dout.device)
        if ctx.causal:
            keep = keep.tril()
        if seq_idx is not None:
            nchunks = dout.shape[1]
            seq = torch.nn.functional.pad(seq_idx, (0, nchunks * cs - seq_idx.shape[1]), value=-1)
            seq = seq.reshape(seq.shape[0], nchunks, cs)
            keep = keep & (seq[:, :, :, None] == seq[:, :, None, :])
            if a.dim() == 4:
                keep = keep[:, :, None]
        if seq_idx is not None or ctx.causal:
            dout = torch.where(keep, dout, 0.0)
        # out[i, j] = a_i . b_j; _bmm_chunk_bwd(u, g)[j] = sum_i g[i, j] u_i.
        db = bmm._bmm_chunk_bwd(a, dout)
        da = bmm._bmm_chunk_bwd(b, dout.transpose(-1, -2))
        return da, db, None, None, None, None


def bmm_chunk_fwd(
    a: torch.Tensor,
    b: torch.Tensor,
    chunk_size: int,
    seq_idx: torch.Tensor | None = None,
    causal: bool = False,
    output_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """``_bmm_chunk_fwd`` -> out (b, c, [g,] cs, cs) in output_dtype or a.dtype. Backward: two
    ``_bmm_chunk_bwd`` calls (b, then a with dout transposed), as in mamba's combined backward, after
    the glue that zeroes dout where the forward output is zero by construction (across sequences) or
    undefined (above the diagonal with causal=True)."""
    check_bmm_chunk(a, b, chunk_size, seq_idx)
    prepare(a, b, seq_idx)
    return _BmmChunk.apply(a, b, chunk_size, seq_idx, causal, output_dtype)


# ---------------------------------------------------------------------------------------------
# chunk_scan


class _ChunkScan(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any,
        cb: torch.Tensor,
        x: torch.Tensor,
        dt: torch.Tensor,
        dA_cumsum: torch.Tensor,
        C: torch.Tensor,
        states: torch.Tensor,
        D: torch.Tensor | None,
        z: torch.Tensor | None,
        seq_idx: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        out, out_x = _module("ssd_chunk_scan")._chunk_scan_fwd(
            cb, x, dt, dA_cumsum, C, states, D=D, z=z, seq_idx=seq_idx
        )
        ctx.save_for_backward(cb, x, dt, dA_cumsum, C, states, D, z, seq_idx, out if z is None else out_x)
        ctx.set_materialize_grads(False)
        return out, out_x

    @staticmethod
    def backward(ctx: Any, dout: torch.Tensor | None, dout_x: torch.Tensor | None) -> tuple[Any, ...]:
        cb, x, dt, dA_cumsum, C, states, D, z, seq_idx, y = ctx.saved_tensors
        sc = _module("ssd_chunk_scan")
        chunk_size, ngroups = dt.shape[-1], C.shape[2]
        dout = _zeros_if_none(dout, x)
        if dout.stride(-1) != 1:
            dout = dout.contiguous()
        if z is not None:
            dz, dy, _ = sc._chunk_scan_bwd_dz(x, z, y, dout, chunk_size=chunk_size, has_ddAcs=False)
            if dout_x is not None:
                dy = dy + dout_x  # glue: out_x is y itself, so its gradient adds to y's
        else:
            dz, dy = None, dout
        dstates = sc._chunk_scan_bwd_dstates(C, dA_cumsum, dy, seq_idx=seq_idx, dtype=states.dtype)
        dC, ddA_inter = sc._chunk_scan_bwd_dC(states, dA_cumsum, dy, seq_idx=seq_idx, C=C, ngroups=ngroups)
        dcb = sc._chunk_scan_bwd_dcb(x, dt, dA_cumsum, dy, seq_idx=seq_idx, ngroups=ngroups)
        dx, ddt = sc._chunk_scan_bwd_dx(cb, x, dt, dA_cumsum, dy, D=D)
        ddA_intra = sc._chunk_scan_bwd_ddAcs_stable(x, dt, dA_cumsum, dy, cb)
        ddA_cumsum = _cumulative(ddA_intra) + ddA_inter  # glue: the sum of the two terms' gradients
        dD = None
        if D is not None:  # from the "unstable" ddA kernel (its ddA unused), which sees the whole dy
            _, dD = sc._chunk_scan_bwd_ddAcs_unstable(x, dt, y, dy, ddt, D=D)
        return (
            dcb.to(cb.dtype),
            dx,
            ddt.to(dt.dtype),
            ddA_cumsum.to(dA_cumsum.dtype),
            dC.to(C.dtype),
            dstates,
            dD,
            dz,
            None,
        )


def chunk_scan_fwd(
    cb: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    dA_cumsum: torch.Tensor,
    C: torch.Tensor,
    states: torch.Tensor,
    D: torch.Tensor | None = None,
    z: torch.Tensor | None = None,
    seq_idx: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``_chunk_scan_fwd`` -> (out, out_x), x.dtype; out_x is None without z. Backward, every gradient
    from a Triton wrapper: with z, ``_chunk_scan_bwd_dz`` (z, and the gradient of the pre-gate output y,
    to which out_x's own gradient is added); then ``_chunk_scan_bwd_dstates`` (states),
    ``_chunk_scan_bwd_dC`` (C, and dA_cumsum through the inter-chunk term), ``_chunk_scan_bwd_dcb`` (cb),
    ``_chunk_scan_bwd_dx`` (x, dt), ``_chunk_scan_bwd_ddAcs_stable`` (dA_cumsum through the intra-chunk
    term, per-step form, glued to cumulative) and ``_chunk_scan_bwd_ddAcs_unstable`` for D only (the
    source of dD in mamba's ChunkScanFn without z; the dz kernel's dD would miss out_x's gradient).
    As in mamba, the cb gradient is zero across sequences with seq_idx (``_chunk_scan_bwd_dcb`` masks it,
    the cb mamba feeds in being zero there), although the forward uses cb as given."""
    check_chunk_scan(cb, x, dt, dA_cumsum, C, states, D, z, seq_idx)
    prepare(cb, x, dt, dA_cumsum, C, states, D, z, seq_idx)
    return _ChunkScan.apply(cb, x, dt, dA_cumsum, C, states, D, z, seq_idx)


# ---------------------------------------------------------------------------------------------
# The combined op and the gated norm: mamba-ssm's own autograd functions


def mamba_chunk_scan_combined(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    chunk_size: int,
    D: torch.Tensor | None = None,
    z: torch.Tensor | None = None,
    dt_bias: torch.Tensor | None = None,
    initial_states: torch.Tensor | None = None,
    seq_idx: torch.Tensor | None = None,
    cu_seqlens: torch.Tensor | None = None,
    dt_softplus: bool = False,
    dt_limit: tuple[float, float] = (0.0, float("inf")),
    return_final_states: bool = False,
    return_varlen_states: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, ...]:
    """mamba-ssm's ``mamba_chunk_scan_combined`` (MambaChunkScanCombinedFn: its own forward and
    ``_mamba_chunk_scan_combined_bwd``; no backward with return_varlen_states, as in mamba)."""
    check_combined(x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states, seq_idx, cu_seqlens, return_varlen_states)
    prepare(x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, cu_seqlens)
    return _module("ssd_combined").mamba_chunk_scan_combined(
        x,
        dt,
        A,
        B,
        C,
        chunk_size,
        D=D,
        z=z,
        dt_bias=dt_bias,
        initial_states=initial_states,
        seq_idx=seq_idx,
        cu_seqlens=cu_seqlens,
        dt_softplus=dt_softplus,
        dt_limit=tuple(dt_limit),
        return_final_states=return_final_states,
        return_varlen_states=return_varlen_states,
    )


NORM_BLOCK_BYTES = 65536
"""mamba-ssm's gated norm holds one group in one block of at most 64 KiB (``_layer_norm_fwd``'s MAX_FUSED_SIZE)."""


def _check_norm(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, z: torch.Tensor | None, group_size: int | None
) -> None:
    """The reference's checks, and mamba-ssm's one-block limit with its RuntimeError naming group_size (mamba-ssm
    says only "feature dim >= 64KB")."""
    group_size = check_layernorm(x, weight, bias, z, group_size)
    if group_size > NORM_BLOCK_BYTES // x.element_size():
        raise RuntimeError(f"group_size {group_size} exceeds one block of {NORM_BLOCK_BYTES} bytes")


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
    """mamba-ssm's gated ``layernorm_fn`` (LayerNormFn: ``_layer_norm_fwd`` / ``_layer_norm_bwd``)."""
    _check_norm(x, weight, bias, z, group_size)
    prepare(x, weight, bias, z)
    return _module("layernorm_gated").layernorm_fn(
        x, weight, bias, z=z, eps=eps, group_size=group_size, norm_before_gate=norm_before_gate, is_rms_norm=is_rms_norm
    )


def rmsnorm_fn(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    z: torch.Tensor | None = None,
    eps: float = 1e-6,
    group_size: int | None = None,
    norm_before_gate: bool = True,
) -> torch.Tensor:
    """mamba-ssm's gated ``rmsnorm_fn`` (LayerNormFn with is_rms_norm=True)."""
    _check_norm(x, weight, bias, z, group_size)
    prepare(x, weight, bias, z)
    return _module("layernorm_gated").rmsnorm_fn(
        x, weight, bias, z=z, eps=eps, group_size=group_size, norm_before_gate=norm_before_gate
    )
