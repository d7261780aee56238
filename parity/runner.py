"""Run one problem through the oracle, the baseline and candidates; compare and judge.

The oracle is the op's pure-PyTorch reference run on float64 copies of the inputs. The baseline
(e.g. the original Triton kernel) and the candidates run in the test dtype on the same inputs.
The backward uses one random upstream gradient per output, the same values for every implementation and
the oracle: drawn in float64 and rounded to the case's dtype, so the oracle differentiates exactly the
inputs and upstream gradients the candidates receive.
"""

from __future__ import annotations

import json
import logging
import shlex
import time
import traceback
import zlib
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from parity import device as device_mod
from parity.compare import ErrorStats, bound, error_stats
from parity.errors import ParityError
from parity.poison import poisoned
from parity.spec import Impl, OpSpec, Problem, dtype_name
from parity.tolerances import Tolerance, Tolerances

log = logging.getLogger(__name__)
"""Each phase of a case with its seconds, at INFO (``parity check --verbose``): where a long problem's minutes go."""


@dataclass
class QuantityResult:
    """The verdict on one output or gradient of one implementation."""

    name: str
    candidate: ErrorStats
    baseline: ErrorStats | None
    tolerance: Tolerance
    bound: float
    passed: bool

    def describe(self) -> str:
        """One line: what was compared, both errors and the bound."""
        c = self.candidate
        base = f"baseline err {self.baseline.max_abs:.3e}" if self.baseline else "no baseline"
        return (
            f"{self.name}: max_abs {c.max_abs:.3e} (bound {self.bound:.3e}; {base}), rel_l2 {c.rel_l2:.2e}, "
            f"nan {c.nan}, inf {c.inf}, worst at {list(c.worst_index)}: got {c.worst_value:.6g}, "
            f"oracle {c.worst_oracle:.6g}"
        )


@dataclass
class CaseResult:
    """One implementation on one problem, dtype and seed: data first, text on demand."""

    op: str
    impl: str
    dtype: str
    device: str
    problem: dict[str, Any]
    seed: int
    quantities: list[QuantityResult] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    layout: str = "contiguous"

    @property
    def passed(self) -> bool:
        return not self.errors and all(q.passed for q in self.quantities)

    def reproducer(self) -> str:
        """A shell command that re-runs exactly this case."""
        problem = json.dumps(self.problem, sort_keys=True, separators=(",", ":"))
        layout = f" --layout {self.layout}" if self.layout != "contiguous" else ""
        return (
            f"parity check --op {self.op} --impl {self.impl} --dtype {self.dtype} --seed {self.seed} "
            f"--device {self.device}{layout} --problem {shlex.quote(problem)}"
        )

    def message(self) -> str:
        """A failure report naming op, implementation, quantity, dtype, shape, seed and a reproducer."""
        head = f"{self.op} [{self.impl}] {self.dtype} seed={self.seed} problem={json.dumps(self.problem)}"
        lines = [f"{'PASS' if self.passed else 'FAIL'} {head}"]
        lines += [f"  error: {e}" for e in self.errors]
        lines += [f"  note: {n}" for n in self.notes]
        lines += [
            f"  {'ok  ' if q.passed else 'FAIL'} {q.describe()}" for q in self.quantities if not q.passed or self.passed
        ]
        lines.append(f"  reproduce: {self.reproducer()}")
        return "\n".join(lines)

    def worst(self) -> dict[str, float]:
        """Worst max-abs error per quantity (for evidence records)."""
        return {q.name: q.candidate.max_abs for q in self.quantities}

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["passed"] = self.passed
        data["reproducer"] = self.reproducer()
        return data


@dataclass
class Run:
    """What one implementation produced: outputs and gradients by name, or the error it raised."""

    values: dict[str, torch.Tensor | None] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


LAYOUTS = ("contiguous", "strided", "offset")


def relayout(value: Any, layout: str) -> Any:
    """The same values in another memory layout: ``strided`` views every other element of a twice
    as wide buffer (non-contiguous last dim), ``offset`` starts one element into its storage."""
    if not isinstance(value, torch.Tensor) or value.dim() == 0 or layout == "contiguous":
        return value
    if layout == "strided":
        wide = torch.empty(*value.shape[:-1], 2 * value.shape[-1], dtype=value.dtype, device=value.device)
        view = wide[..., ::2]
    elif layout == "offset":
        flat = torch.empty(value.numel() + 1, dtype=value.dtype, device=value.device)
        view = flat[1:].view(value.shape)
    else:
        raise ValueError(f"unknown layout {layout!r}: expected one of {', '.join(LAYOUTS)}")
    view.copy_(value)
    return view


def _upcast(value: Any, wide: torch.dtype = torch.float64) -> Any:
    """The oracle's view of an argument: float tensors and float dtype arguments become ``wide`` (float64, or what
    the op's ``oracle_for`` asks for); a tensor is always a fresh copy, the oracle's alone."""
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return value.detach().to(wide, copy=True)
    if isinstance(value, torch.dtype) and value.is_floating_point:
        return wide
    return value


def _clone(value: Any) -> Any:
    """A copy with the same strides and storage offset (layouts are part of what is tested)."""
    if not isinstance(value, torch.Tensor):
        return value
    if value.is_contiguous() and value.storage_offset() == 0:
        return value.detach().clone()
    base = torch.empty(value.untyped_storage().nbytes() // value.element_size(), dtype=value.dtype, device=value.device)
    copy = base.as_strided(value.shape, value.stride(), value.storage_offset())
    copy.copy_(value.detach())
    return copy


def _as_tuple(result: Any, n: int) -> tuple:
    if isinstance(result, torch.Tensor) or result is None:
        result = (result,)
    result = tuple(result)
    if len(result) != n:
        raise ValueError(f"returned {len(result)} outputs, the spec names {n}")
    return result


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise equality that treats NaN as equal to NaN."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point():
        return bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())
    return bool(torch.equal(a, b))


def execute(
    spec: OpSpec,
    fn: Callable[..., Any],
    inputs: Mapping[str, Any],
    upstream: Callable[[str, torch.Tensor], torch.Tensor] | None,
    private: bool = False,
) -> Run:
    """Call ``fn`` on copies of ``inputs``; then backward with ``upstream(name, out)`` gradients. ``private``
    inputs (the oracle's upcast copies, made for this call alone) are used as they are, unchecked for in-place
    changes: at a long problem two more copies of every input would not fit beside it.

    Whatever raises, in the implementation or around it (copying the inputs, the in-place check, a CUDA error an
    earlier launch left behind), is an error of this run, never a crash of the engine. On CUDA the run ends with
    a synchronize, so that an asynchronous device error is charged to the implementation that caused it."""
    run = Run()
    phase = "copying the inputs"
    try:
        args = dict(inputs) if private else {k: _clone(v) for k, v in inputs.items()}
        before = {} if private else {k: _clone(v) for k, v in args.items() if isinstance(v, torch.Tensor)}
        wanted = [n for n in spec.grad_inputs if isinstance(args.get(n), torch.Tensor)] if upstream else []
        for name in wanted:
            args[name].requires_grad_(True)
        phase = "forward"
        outs = _as_tuple(fn(**args), len(spec.outputs))
        for name, out in zip(spec.outputs, outs, strict=True):
            run.values[name] = out.detach() if isinstance(out, torch.Tensor) else None
        phase = "the in-place check"
        for name, old in before.items():
            if name not in spec.mutable_inputs and not same_bits(args[name].detach(), old):
                run.errors.append(f"input {name!r} was modified in place")
        if wanted and upstream is not None:
            phase = "drawing the upstream gradients"
            pairs = [
                (o, upstream(n, o))
                for n, o in zip(spec.outputs, outs, strict=True)
                if isinstance(o, torch.Tensor) and o.is_floating_point()
            ]
            differentiable = [(o, g) for o, g in pairs if o.requires_grad]
            if not differentiable:
                run.errors.append("no output is differentiable: backward not implemented")
            else:
                phase = "backward"
                grads = torch.autograd.grad(
                    [o for o, _ in differentiable],
                    [args[n] for n in wanted],
                    [g for _, g in differentiable],
                    allow_unused=True,
                )
                for name, grad in zip(wanted, grads, strict=True):
                    run.values[f"grad.{name}"] = grad
        phase = "synchronizing the device"
        if any(isinstance(v, torch.Tensor) and v.is_cuda for v in run.values.values()):
            torch.cuda.synchronize()
    except Exception as exc:  # an implementation failing is a result, not a crash of the engine
        where = traceback.extract_tb(exc.__traceback__)[-1]
        at = f" (at {where.filename}:{where.lineno})" if phase == "forward" else ""
        run.errors.append(f"{phase} raised {type(exc).__name__}: {exc}{at}".strip())
    return run


_UPSTREAM: dict[tuple[int, torch.dtype, str, tuple[int, ...], torch.device], torch.Tensor] = {}
_UPSTREAM_LIMIT = 4


def upstream_grads(seed: int, dtype: torch.dtype) -> Callable[[str, torch.Tensor], torch.Tensor]:
    """One random upstream gradient per output, a function of the seed, the case's dtype, the output's name and
    shape only. It is drawn in float64 and rounded to ``dtype``, so every implementation, the float64 oracle
    included, gets the same values (in its own output dtype): an oracle given the unrounded draw would charge
    every candidate the rounding of its upstream gradient, an error no implementation can avoid and which, in a
    gradient summed over many positions, can exceed the implementations' own (issue 12). Drawn on the CPU
    generator, so that CPU and GPU runs of a seed see the same values, and remembered for the last few keys: at
    a training shape one draw takes seconds, and a case, its determinism reruns and every implementation judged
    on it use the same one."""

    def upstream(name: str, out: torch.Tensor) -> torch.Tensor:
        key = (seed, dtype, name, tuple(out.shape), out.device)
        if key not in _UPSTREAM:
            gen = torch.Generator().manual_seed(seed * 1000003 + zlib.crc32(name.encode()))
            drawn = torch.randn(out.shape, generator=gen, dtype=torch.float64).to(dtype)
            _UPSTREAM[key] = drawn.to(out.device)  # kept in ``dtype``: every wider copy of it is exact
            while len(_UPSTREAM) > _UPSTREAM_LIMIT:
                _UPSTREAM.pop(next(iter(_UPSTREAM)))
        return _UPSTREAM[key].to(dtype=out.dtype)

    return upstream


BROKEN_BASELINE = 10.0
"""A baseline whose error on a quantity exceeds this many times its own absolute bound (atol + rtol *
max|oracle|) is broken there, and does not set the candidate's bound: the absolute bound does, with a note.
Evidence: H200 run 7 (bench/results/h200-run7), where mamba-ssm's recorded configs lost their pre-hooks and its
bf16 grad.A error was 34 and 81 (17x and 20x its absolute bound) against 0.05 when intact, so every candidate
passed grad.A with a bound of 69."""


@dataclass
class Measured:
    """One run compared with the oracle, its tensors dropped: the errors the run raised, each quantity's error
    statistics, and why a quantity could not be compared (missing, wrong shape, the device failing)."""

    run_errors: list[str] = field(default_factory=list)
    stats: dict[str, ErrorStats] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


def _measure(spec: OpSpec, oracle: Run, run: Run, forward_only: bool = False) -> Measured:
    """Each output and gradient of ``run`` against the oracle. A comparison that raises (a device left broken by
    the implementation, e.g. an illegal memory access) is an error of this run, not of the engine."""
    measured = Measured(run_errors=list(run.errors))
    for name in spec.compared_names():
        if name not in oracle.values or (forward_only and name.startswith("grad.")):
            continue
        ref, got = oracle.values[name], run.values.get(name)
        if ref is None:
            if got is not None:
                measured.errors.append(f"{name}: the oracle returns None but the implementation returned a tensor")
            continue
        if got is None:
            measured.errors.append(f"{name}: missing (the oracle has shape {tuple(ref.shape)})")
            continue
        if tuple(got.shape) != tuple(ref.shape):
            measured.errors.append(f"{name}: shape {tuple(got.shape)} != oracle shape {tuple(ref.shape)}")
            continue
        try:
            measured.stats[name] = error_stats(got, ref)
        except Exception as exc:
            measured.errors.append(f"{name}: comparing raised {type(exc).__name__}: {exc}".strip())
    return measured


def _judge(
    spec: OpSpec, dtype: str, tolerances: Tolerances, measured: Measured, baseline: Measured | None
) -> tuple[list[QuantityResult], list[str]]:
    """The verdict on each measured quantity, bounded by the baseline's error where it has a usable one:
    (verdicts, notes)."""
    results: list[QuantityResult] = []
    notes: list[str] = []
    for name, stats in measured.stats.items():
        base_stats = None if baseline is None else baseline.stats.get(name)
        if base_stats is not None and base_stats.max_abs == float("inf"):
            base_stats = None  # a broken baseline must not widen the bound to infinity
        tol = tolerances.lookup(spec.name, dtype, name)
        limit = bound(tol, base_stats, stats.oracle_max_abs)
        if base_stats is not None and base_stats.max_abs > BROKEN_BASELINE * bound(tol, None, stats.oracle_max_abs):
            limit = bound(tol, None, stats.oracle_max_abs)
            notes.append(
                f"{name}: baseline error {base_stats.max_abs:.3e} is over {BROKEN_BASELINE:g}x its own bound; "
                f"the absolute bound {limit:.3e} applies"
            )
        ok = stats.max_abs <= limit and stats.nan == 0 and stats.inf == 0
        results.append(QuantityResult(name, stats, base_stats, tol, limit, ok))
    return results, notes


def check_inputs(spec: OpSpec, problem: Problem, inputs: Mapping[str, Any]) -> None:
    """Non-finite inputs make every comparison meaningless: refuse them with an error naming the input."""
    for name, value in inputs.items():
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            bad = int((~torch.isfinite(value)).sum())
            if bad:
                raise ParityError(
                    f"{spec.name}: input {name!r} has {bad} NaN/Inf values "
                    f"(problem {json.dumps(dict(problem))}); inputs must be finite"
                )


_SHARED: dict[tuple, tuple[Run, Measured | None]] = {}
_SHARED_LIMIT = 64
_SHARED_GPU_BYTES = 16 << 30
"""The shared runs kept: at most _SHARED_LIMIT problems, and on the GPU at most this many bytes of their
outputs and gradients (a training-shape SSD oracle is a few GB in fp64; the generated problems are small, so
the GPU suite's per-implementation cases still find the oracle of every problem they share)."""


def _impl_key(impl: Impl | None) -> tuple | None:
    """What an implementation's runs depend on; a callable target counts by identity (and the key keeps it
    alive, so its id cannot be reused by another while cached)."""
    return None if impl is None else (impl.name, impl.target, repr(impl.config), impl.backward)


def _spec_key(spec: OpSpec) -> tuple:
    """Everything of a spec that the oracle and baseline runs depend on: the input generator (by identity: two
    variants of one op with other inputs must not share runs), the reference, the baseline, and what is run and
    compared."""
    return (
        spec.name,
        spec.make_inputs,
        _impl_key(spec.reference),
        _impl_key(spec.baseline),
        spec.outputs,
        spec.grad_inputs,
        spec.mutable_inputs,
    )


_INPUTS: dict[tuple, dict[str, Any]] = {}


def make_inputs(spec: OpSpec, problem: Problem, dtype: torch.dtype, seed: int, device: str) -> dict[str, Any]:
    """``spec.make_inputs``, remembered for the last two (problem, dtype, seed, device): a gate's case, its
    determinism reruns and its timing at a training shape draw the same inputs (seconds each on the CPU
    generator). Callers never modify them: :func:`execute` works on copies."""
    key = (_spec_key(spec), json.dumps(problem, sort_keys=True), str(dtype), seed, device)
    if key not in _INPUTS:
        _INPUTS[key] = spec.make_inputs(problem, dtype, seed, torch.device(device))
        while len(_INPUTS) > 2:
            _INPUTS.pop(next(iter(_INPUTS)))
    return _INPUTS[key]


def _remember(key: tuple, oracle: Run, baseline: Measured | None) -> None:
    """Keep the oracle run and the baseline's measurement of recent problems: checking several candidates one at
    a time (one pytest case each) then runs the slow reference implementations once per problem."""
    _SHARED.pop(key, None)
    _SHARED[key] = (oracle, baseline)
    while len(_SHARED) > _SHARED_LIMIT or (len(_SHARED) > 1 and _gpu_bytes() > _SHARED_GPU_BYTES):
        _SHARED.pop(next(iter(_SHARED)))


def limit_shared_gpu_bytes(limit: int) -> None:
    """Keep at most ``limit`` bytes of shared runs on the GPU (a worker shares the device with the others)."""
    global _SHARED_GPU_BYTES
    _SHARED_GPU_BYTES = limit


def forget() -> None:
    """Drop every remembered input, upstream gradient and shared run (a worker that ran short of device memory)."""
    _SHARED.clear()
    _INPUTS.clear()
    _UPSTREAM.clear()


def _gpu_bytes() -> int:
    """Bytes of GPU tensors held by the shared oracle runs."""
    return sum(
        v.numel() * v.element_size()
        for oracle, _ in _SHARED.values()
        for v in oracle.values.values()
        if isinstance(v, torch.Tensor) and v.is_cuda
    )


def run_problem(
    spec: OpSpec,
    impls: Sequence[Impl],
    problem: Problem,
    dtype: torch.dtype,
    seed: int,
    device: str,
    tolerances: Tolerances,
    backward: bool = True,
    poison: Sequence[str] = ("nan",),
    layout: str = "contiguous",
    relayout_inputs: Sequence[str] = (),
) -> list[CaseResult]:
    """Check each of ``impls`` on one problem; the oracle and the baseline run once and are shared.

    Each implementation runs once per ``poison`` pattern (its fresh allocations pre-filled with it,
    see :mod:`parity.poison`) and must pass every time; the baseline that sets the bounds runs clean.
    ``layout`` re-lays the ``relayout_inputs`` out in memory (see :func:`relayout`) for every run.
    A problem the op's schema rejects raises ParityError before any work (:meth:`OpSpec.validate`). Every problem
    but the op's training problems runs in ``spec.any_shape()``: the training problems run the training build.
    """
    spec.validate(problem, [dtype])
    training = dict(problem) in [dict(p) for p in spec.training_problems]
    large = device == "cuda" and training
    with device_mod.large_problem_slot(large), nullcontext() if training else spec.any_shape():
        try:
            return _run_problem(
                spec, impls, problem, dtype, seed, device, tolerances, backward, poison, layout, relayout_inputs
            )
        finally:
            if large:  # give the run's cached blocks (tens of GB) back before the slot goes to another process
                torch.cuda.empty_cache()


def _run_problem(
    spec: OpSpec,
    impls: Sequence[Impl],
    problem: Problem,
    dtype: torch.dtype,
    seed: int,
    device: str,
    tolerances: Tolerances,
    backward: bool,
    poison: Sequence[str],
    layout: str,
    relayout_inputs: Sequence[str],
) -> list[CaseResult]:
    clock = time.monotonic()

    def done(phase: str) -> None:
        nonlocal clock
        log.info("%s %s: %s in %.1f s", spec.name, dtype_name(dtype), phase, time.monotonic() - clock)
        clock = time.monotonic()

    inputs = make_inputs(spec, problem, dtype, seed, device)
    inputs = {k: relayout(v, layout) if k in relayout_inputs else v for k, v in inputs.items()}
    check_inputs(spec, problem, inputs)
    upstream = upstream_grads(seed, dtype) if backward and spec.grad_inputs else None
    key = (
        _spec_key(spec),
        json.dumps(problem, sort_keys=True),
        str(dtype),
        seed,
        device,
        upstream is not None,
        layout,
        tuple(relayout_inputs),
    )
    done("inputs")
    oracle, baseline = _SHARED.get(key, (None, None))
    if oracle is None:
        oracle_impl, wide = spec.oracle(problem)
        wide_inputs = {k: _upcast(v, wide) for k, v in inputs.items()}
        oracle = execute(spec, oracle_impl.load(), wide_inputs, upstream, private=True)
        del wide_inputs
        if oracle.errors:
            raise RuntimeError(f"the oracle of {spec.name} failed on {dict(problem)}: {'; '.join(oracle.errors)}")
        done(f"oracle {oracle_impl.name}")
    name = dtype_name(dtype)
    base_name = spec.baseline.name if spec.baseline is not None else None

    def measure(impl: Impl, fn: Callable[..., Any]) -> Measured:
        return _measure(spec, oracle, execute(spec, fn, inputs, upstream if impl.backward else None), not impl.backward)

    # The candidates run before the baseline: a baseline that breaks the device (an illegal memory access is
    # sticky in a CUDA context) then fails only itself, and the candidates are judged by the absolute bounds.
    measured: dict[int, list[tuple[str, Measured]]] = {}
    for index in sorted(range(len(impls)), key=lambda i: impls[i].name == base_name):
        impl = impls[index]
        if impl.name == base_name and not poison:
            continue  # judged below from the baseline's own clean run
        fn = impl.load()
        measured[index] = [(p, measure(impl, poisoned(fn, p) if p else fn)) for p in poison or ("",)]
        done(impl.name)
    if baseline is None and spec.baseline is not None and any(i.name != base_name or not poison for i in impls):
        baseline = measure(spec.baseline, spec.baseline.load())
        done(f"baseline {base_name}")
    _remember(key, oracle, baseline)
    results = []
    for index, impl in enumerate(impls):
        is_baseline = impl.name == base_name
        runs = measured.get(index) or ([("", baseline)] if is_baseline and baseline is not None else [])
        case = None
        for pattern, run in runs:
            case = CaseResult(spec.name, impl.name, name, device, dict(problem), seed, layout=layout)
            case.errors.extend(run.run_errors)
            if baseline is not None and baseline.run_errors and not is_baseline:
                case.notes.append(f"baseline {base_name} failed, absolute bounds used: {baseline.run_errors[0]}")
            if not run.run_errors:
                case.errors.extend(run.errors)
                case.quantities, notes = _judge(spec, name, tolerances, run, None if is_baseline else baseline)
                case.notes.extend(notes)
            if upstream is not None and not impl.backward:
                case.notes.append("forward only: this implementation has no backward yet")
            if not case.passed:
                if pattern:
                    case.errors.append(f"(fresh allocations were pre-filled with {pattern})")
                break
        assert case is not None
        results.append(case)
    return results
