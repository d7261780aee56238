"""Declarative op specs, in the spirit of PyTorch's OpInfo.

An :class:`OpSpec` says how to build inputs for a problem, which implementations exist (a pure
PyTorch reference that doubles as the float64 oracle, an optional baseline such as the original
Triton kernel, and candidates such as Helion ports with explicit configs), which outputs are
compared and which inputs receive gradients. Implementations are named by import path and loaded
lazily, so registering an op imports neither triton nor helion.
"""

from __future__ import annotations

import importlib
import json
import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from parity.errors import ParityError

Problem = Mapping[str, Any]
"""A JSON-able description of one problem instance: sizes and optional features."""

InputMaker = Callable[[Problem, torch.dtype, int, torch.device], dict[str, Any]]
"""(problem, dtype, seed, device) -> keyword arguments of the op."""

ProblemCheck = Callable[[Problem, torch.dtype], None]
"""(problem, dtype) -> None: raises ParityError, one line naming the field, if the op cannot run the problem
in that dtype."""

FieldCheck = Callable[[str, Any], None]
"""(field name, value) -> None: raises ParityError naming the field if the value is malformed."""

TuningSpace = Callable[[Mapping[str, Any], int], list[dict[str, Any]]]
"""(the op's keyword arguments at a problem, count) -> the first ``count`` candidate configs ``parity tune`` tries."""

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "float64": torch.float64,
}


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.bfloat16`` -> ``"bfloat16"``."""
    return str(dtype).removeprefix("torch.")


def parse_dtype(name: str) -> torch.dtype:
    """``"bfloat16"`` (or ``"bf16"``, ``"fp16"``, ``"fp32"``) -> the torch dtype."""
    aliases = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "fp32": "float32", "fp64": "float64"}
    key = aliases.get(name, name)
    if key not in DTYPES:
        raise ParityError(f"unknown dtype {name!r}: expected one of {', '.join(DTYPES)}")
    return DTYPES[key]


# ---------------------------------------------------------------------------------------------
# Problem schemas: declared fields, checked before any work so that a typo or a malformed value in a
# reproducer is a one-line usage error, never a traceback, a silently ignored key or a parity FAIL.


def _bad(name: str, expected: str, value: Any) -> ParityError:
    try:
        shown = json.dumps(value)
    except (TypeError, ValueError):
        shown = repr(value)
    return ParityError(f"problem field {name!r} must be {expected}, got {shown}")


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def integer(lo: int, hi: int | None = None) -> FieldCheck:
    """An integer (not a boolean) in [lo, hi]."""
    expected = f"an integer >= {lo}" if hi is None else f"an integer in [{lo}, {hi}]"

    def check(name: str, value: Any) -> None:
        if not isinstance(value, int) or isinstance(value, bool) or value < lo or (hi is not None and value > hi):
            raise _bad(name, expected, value)

    return check


def flag(name: str, value: Any) -> None:
    """A boolean."""
    if not isinstance(value, bool):
        raise _bad(name, "true or false", value)


def one_of(*choices: Any) -> FieldCheck:
    """One of the given JSON values."""
    expected = "one of " + ", ".join(map(repr, choices))

    def check(name: str, value: Any) -> None:
        if isinstance(value, bool) or value not in choices:
            raise _bad(name, expected, value)

    return check


def number(lo: float, hi: float) -> FieldCheck:
    """A finite number in [lo, hi]."""

    def check(name: str, value: Any) -> None:
        if not _is_number(value) or not math.isfinite(value) or not lo <= value <= hi:
            raise _bad(name, f"a finite number in [{lo:g}, {hi:g}]", value)

    return check


def increasing_pair(lo: float, hi: float, strict: bool = False, nullable: bool = False) -> FieldCheck:
    """Two numbers [a, b] with lo <= a <= b <= hi (a < b if ``strict``); null too if ``nullable``."""
    order = "<" if strict else "<="
    expected = f"two numbers [a, b] with {lo:g} <= a {order} b <= {hi:g}" + (", or null" if nullable else "")

    def check(name: str, value: Any) -> None:
        if value is None and nullable:
            return
        if not isinstance(value, list | tuple) or len(value) != 2 or not all(map(_is_number, value)):
            raise _bad(name, expected, value)
        a, b = value
        if math.isnan(a) or math.isnan(b) or not lo <= a <= b <= hi or (strict and a == b):
            raise _bad(name, expected, value)

    return check


def check_fields(problem: Problem, required: Mapping[str, FieldCheck], optional: Mapping[str, FieldCheck]) -> None:
    """Every required field present, no field undeclared, every value well-formed (relations between
    fields are the op's own check)."""
    declared = {**required, **optional}
    unknown = sorted(str(k) for k in problem if k not in declared)
    if unknown:
        raise ParityError(f"unknown problem field {unknown[0]!r}: expected fields among {', '.join(declared)}")
    for name in required:
        if name not in problem:
            raise ParityError(f"problem field {name!r} is missing")
    for name, check in declared.items():
        if name in problem:
            check(name, problem[name])


@dataclass(frozen=True)
class Impl:
    """One implementation of an op: a callable, or its import path ``"package.module:function"``
    (loaded lazily, so that registering an op imports no kernel library).

    ``config`` is passed as the keyword ``config=`` when not None (e.g. a Helion config).
    ``backward=False`` marks a forward-only implementation: its gradients are not judged, and the
    results say so.
    """

    name: str
    target: str | Callable[..., Any]
    config: Mapping[str, Any] | None = None
    backward: bool = True

    def load(self) -> Callable[..., Any]:
        """Import the target and return a callable taking the op's keyword arguments."""
        if callable(self.target):
            fn = self.target
        else:
            module_name, _, attr = self.target.partition(":")
            try:
                fn = getattr(importlib.import_module(module_name), attr)
            except (ImportError, AttributeError) as exc:
                raise ParityError(f"implementation {self.name!r}: cannot load {self.target!r}: {exc}") from exc
        if self.config is None:
            return fn
        config = dict(self.config)
        return lambda **kwargs: fn(**kwargs, config=config)


class KernelModule(Protocol):
    """What a Helion port's module (``kernels/<op>.py``) declares for :func:`helion_candidates`.

    CONFIGS: explicit configs the parity tests check besides the kernel's default config.
    HAS_BACKWARD: whether its entry point differentiates through Helion kernels (False: forward only, its
        gradients are not judged).
    """

    __name__: str

    @property
    def CONFIGS(self) -> Sequence[Mapping[str, Any]]: ...

    @property
    def HAS_BACKWARD(self) -> bool: ...


def helion_candidates(module: KernelModule, function: str, count: int = 2) -> tuple[Impl, ...]:
    """The candidates of a Helion port: ``module.function`` with its default config (``helion``) and with each of
    its first ``count`` CONFIGS (``helion-cfg0``, ...), judged backward unless the module says otherwise."""
    target = f"{module.__name__}:{function}"
    return (
        Impl("helion", target, backward=module.HAS_BACKWARD),
        *(
            Impl(f"helion-cfg{i}", target, config=c, backward=module.HAS_BACKWARD)
            for i, c in enumerate(module.CONFIGS[:count])
        ),
    )


def size_one_key(problem: Problem) -> Hashable:
    """The default :attr:`OpSpec.compile_key`: a problem's flags and strings, and which integer fields are 1
    (kernels compiled for dynamic shapes still specialize on sizes of 0 and 1, not on other values)."""
    return tuple(
        sorted(
            (name, value == 1 if type(value) is int else value)
            for name, value in problem.items()
            if type(value) in (int, bool, str) or value is None
        )
    )


@dataclass(frozen=True)
class ErrorInput:
    """An invalid call of an op, in the spirit of OpInfo's error inputs: every implementation must reject it up
    front (before any kernel launch) with ``error_type`` and a message that names ``argument`` as a word and
    matches the regex ``match``.

    make: device -> the call's keyword arguments (tiny tensors: the call must fail before any work).
    argument: the offending keyword argument (a key of what ``make`` returns).
    accepted_by: names of implementations (``Impl.name``) that accept the call by design and must return
        normally, e.g. a pure-PyTorch reference without the kernels' block-size limit; ``description`` says why.
    """

    description: str
    make: Callable[[torch.device], dict[str, Any]]
    argument: str
    error_type: type[Exception] = ValueError
    match: str = ""
    accepted_by: tuple[str, ...] = ()

    def expected(self, impl: str) -> type[Exception] | None:
        """The exception type implementation ``impl`` must raise; None if it must accept the call."""
        return None if impl in self.accepted_by else self.error_type


@dataclass(frozen=True)
class OpSpec:
    """Everything the engine needs to check one op.

    outputs: names of the positional outputs of the op (a single tensor counts as one).
    grad_inputs: inputs that receive gradients (skipped when the input is None for a problem).
    problems: profile name -> hypothesis strategy of problems.
    examples: problems always checked first (pinned regressions).
    training_problems: the shapes the op meets in training, always part of a gate.
    profile_examples: profile name -> problems pinned under that profile only (e.g. the ``long`` profile's problems
        past 2^31 elements), run after the examples.
    nondeterministic: outputs may differ bitwise between identical runs (e.g. atomics).
    mutable_inputs: inputs an implementation is allowed to modify in place.
    relayout_inputs: inputs the op's API accepts non-contiguous or at a storage offset; the gate
        re-runs with them re-laid out (see parity.runner.relayout).
    bucket: the config-store shape bucket of a problem (configs are promoted per bucket).
    check_config: raises ParityError if a candidate config is malformed (before any run).
    check_problem: raises ParityError if a problem is malformed or outside what the op supports in a
        dtype (see :meth:`validate`); None accepts any JSON object.
    compile_key: what of a problem selects the compiled kernels it runs (constexpr sizes, optional
        inputs, flags): problems with equal keys share every compilation, so a spread-out gate runs them
        in one worker (parity.workers).
    error_inputs: invalid calls that the reference, the baseline and the default-config candidate must reject
        alike, before any kernel runs (:class:`ErrorInput`; checked by tests/test_error_inputs.py).
    max_examples: profile name -> generated problems per run, for an op heavier or lighter than the profile's
        default (pinned examples and training problems always run).
    flops: problem -> the forward's matmul FLOPs (the benchmark's compute floor); None: not counted.
    tuning_configs: the candidate configs ``parity tune`` tries (:data:`TuningSpace`); None: the op has no
        tuning space.
    oracle_for: problem -> None (the oracle is the reference run on float64 copies of the inputs), or another oracle
        and the dtype the engine copies the floating-point inputs into for it: e.g. a segmented fp64 oracle for a
        problem whose whole-tensor fp64 copies would not fit in device memory (see :meth:`oracle`).
    any_shape: a context in which the candidates run builds that serve any shape (e.g. compiled once with dynamic
        shapes); outside it they run as training runs them (e.g. specialized to the call's shapes). Every
        problem but the training problems runs inside it, so a gate over many shapes compiles little and the
        training shapes are judged on the code training runs.
    """

    name: str
    reference: Impl
    make_inputs: InputMaker
    problems: Callable[[str], Any]
    outputs: tuple[str, ...]
    grad_inputs: tuple[str, ...] = ()
    baseline: Impl | None = None
    candidates: tuple[Impl, ...] = ()
    dtypes: tuple[torch.dtype, ...] = (torch.float32, torch.bfloat16, torch.float16)
    examples: tuple[Problem, ...] = ()
    training_problems: tuple[Problem, ...] = ()
    profile_examples: Mapping[str, tuple[Problem, ...]] = field(default_factory=dict)
    nondeterministic: bool = False
    mutable_inputs: tuple[str, ...] = ()
    relayout_inputs: tuple[str, ...] = ()
    bucket: Callable[[Problem], str] = lambda problem: "*"
    check_config: Callable[[Mapping[str, Any]], None] | None = None
    check_problem: ProblemCheck | None = None
    compile_key: Callable[[Problem], Hashable] = size_one_key
    description: str = ""
    error_inputs: tuple[ErrorInput, ...] = ()
    max_examples: Mapping[str, int] = field(default_factory=dict)
    flops: Callable[[Problem], float] | None = None
    tuning_configs: TuningSpace | None = None
    any_shape: Callable[[], AbstractContextManager[Any]] = nullcontext
    oracle_for: Callable[[Problem], tuple[Impl, torch.dtype] | None] = lambda problem: None

    def oracle(self, problem: Problem) -> tuple[Impl, torch.dtype]:
        """The oracle of ``problem`` and the dtype its floating-point inputs are copied into: the reference in
        float64 unless :attr:`oracle_for` says otherwise."""
        return self.oracle_for(problem) or (self.reference, torch.float64)

    def validate(self, problem: Any, dtypes: Sequence[torch.dtype] | None = None) -> None:
        """Raise ParityError, one line naming the op and the field, unless ``problem`` is a problem this op can
        run in each of ``dtypes`` (default: every dtype the op is checked in). Called before any work."""
        if not isinstance(problem, Mapping):
            raise ParityError(f"{self.name}: a problem must be a JSON object of fields, got {problem!r}")
        if self.check_problem is None:
            return
        for dtype in self.dtypes if dtypes is None else dtypes:
            try:
                self.check_problem(problem, dtype)
            except ParityError as exc:
                raise ParityError(f"{self.name}: {exc}") from None

    def impls(self) -> dict[str, Impl]:
        """All implementations that can be checked against the oracle, by name."""
        found = {impl.name: impl for impl in ((self.baseline,) if self.baseline else ()) + self.candidates}
        return found

    def impl(self, name: str) -> Impl:
        """The implementation called ``name``; a clear error if there is none."""
        impls = self.impls()
        if name not in impls:
            raise ParityError(
                f"op {self.name!r} has no implementation {name!r}: expected one of {', '.join(impls) or '(none)'}"
            )
        return impls[name]

    def compared_names(self) -> tuple[str, ...]:
        """Names of every compared quantity: outputs, then ``grad.<input>``."""
        return self.outputs + tuple(f"grad.{name}" for name in self.grad_inputs)
