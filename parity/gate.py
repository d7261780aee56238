"""The gate: one candidate config across an op's whole shape family, forward and backward, with
poisoned allocations and determinism reruns. Only a config that passes may be promoted."""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from parity.errors import ParityError
from parity.lookup import STATIC_SHAPES
from parity.runner import CaseResult, execute, make_inputs, run_problem, same_bits, upstream_grads
from parity.spec import Impl, OpSpec, dtype_name, parse_dtype
from parity.strategies import Profile, plan
from parity.tolerances import Tolerances
from parity.workers import Call, Work, resolve, run_groups


def load_config(path: Path | str) -> dict[str, Any]:
    """A config file: a JSON object. Malformed input is a ParityError naming the file."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise ParityError(f"{path}: cannot read config: {exc.strerror}") from exc
    except json.JSONDecodeError as exc:
        raise ParityError(f"{path}: malformed JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ParityError(f"{path}: a config must be a JSON object, got {type(data).__name__}")
    return data


def _power_of_two(value: Any) -> bool:
    return type(value) is int and value > 0 and value & (value - 1) == 0


def _at_least(low: int) -> Callable[[Any], bool]:
    return lambda value: type(value) is int and value >= low


HELION_FIELDS: dict[str, tuple[bool, Callable[[Any], bool], str]] = {
    "block_sizes": (True, _power_of_two, "a positive power of two"),
    "l2_groupings": (True, _power_of_two, "a positive power of two"),
    "range_unroll_factors": (True, _at_least(0), "an integer >= 0"),
    "range_num_stages": (True, _at_least(0), "an integer >= 0"),
    "num_warps": (False, _power_of_two, "a positive power of two"),
    "num_stages": (False, _at_least(1), "an integer >= 1"),
    STATIC_SHAPES: (False, lambda value: type(value) is bool, "true or false"),
}
"""Helion config fields checked before anything runs: name -> (is a list, test of a value, what it must be);
the ranges Helion's own config spec enforces only when the config is compiled (if at all)."""


def check_helion_config(config: Mapping[str, Any], source: str, where: str = "") -> None:
    """Reject a malformed Helion config up front, with a ParityError naming ``source`` and the key.

    ``config`` is one Helion config, or a mapping of named sub-configs (``{"fwd": ..., "bwd": ...}`` of the
    gated norm, ``{kernel: config}`` of the combined SSD op), walked recursively: a mapping whose values are
    all mappings (or None) is such a wrapper. Fields outside :data:`HELION_FIELDS` are left to the compile."""
    if config and all(value is None or isinstance(value, Mapping) for value in config.values()):
        for name, sub in config.items():
            if sub is not None:
                check_helion_config(sub, source, f"{where}{name}.")
        return
    for name, (is_list, valid, must) in HELION_FIELDS.items():
        if name not in config:
            continue
        value = config[name]
        if is_list and not isinstance(value, list):
            raise ParityError(f"{source}: {where}{name} = {json.dumps(value)} must be a list, each {must}")
        for i, item in enumerate(value if is_list else [value]):
            if not valid(item):
                at = f"{where}{name}[{i}]" if is_list else f"{where}{name}"
                raise ParityError(f"{source}: {at} = {json.dumps(item)} must be {must}")


@dataclass
class GateReport:
    """Everything the gate saw: every case, determinism reruns, and a verdict."""

    op: str
    impl: str
    config: dict[str, Any]
    device: str
    cases: list[CaseResult] = field(default_factory=list)
    determinism: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    timing: list[dict[str, Any]] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """Every case and rerun passed, and every timing ran (a candidate that raises there fails too)."""
        return (
            bool(self.cases)
            and all(c.passed for c in self.cases)
            and all(d["ok"] for d in self.determinism)
            and not any("error" in t for t in self.timing)
        )

    def evidence(self) -> dict[str, Any]:
        """The summary a store entry carries."""
        worst: dict[str, float] = {}
        for case in self.cases:
            for q in case.quantities:
                worst[f"{case.dtype}:{q.name}"] = max(worst.get(f"{case.dtype}:{q.name}", 0.0), q.candidate.max_abs)
        return {
            "cases": len(self.cases),
            "problems": sorted({json.dumps(c.problem, sort_keys=True) for c in self.cases}),
            "seeds": sorted({c.seed for c in self.cases}),
            "dtypes": sorted({c.dtype for c in self.cases}),
            "worst_max_abs": worst,
            "determinism": self.determinism,
            "skipped": self.skipped,
            "timing": self.timing,
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        }


def _determinism(
    spec: OpSpec, impl: Impl, problem: Mapping[str, Any], dtype: torch.dtype, device: str, reruns: int
) -> dict[str, Any]:
    """Re-run forward and backward on identical inputs and upstream gradients: bitwise identical, or the largest
    spread seen."""
    inputs = make_inputs(spec, problem, dtype, 0, device)
    upstream = upstream_grads(0, dtype) if impl.backward and spec.grad_inputs else None
    fn = impl.load()
    first = execute(spec, fn, inputs, upstream)
    spread = 0.0
    identical = True
    for _ in range(reruns):
        again = execute(spec, fn, inputs, upstream)
        for name, value in first.values.items():
            other = again.values.get(name)
            if isinstance(value, torch.Tensor) and isinstance(other, torch.Tensor) and not same_bits(value, other):
                identical = False
                spread = max(spread, float((value.double() - other.double()).abs().max()))
    ok = not first.errors and (identical or spec.nondeterministic)
    return {
        "problem": dict(problem),
        "dtype": dtype_name(dtype),
        "reruns": reruns,
        "bitwise_identical": identical,
        "max_spread": spread,
        "ok": ok,
    }


def _timing(spec: OpSpec, impl: Impl, problem: Mapping[str, Any], dtype: torch.dtype) -> dict[str, Any]:
    """Forward+backward median ms of the candidate and of the baseline on one training problem (CUDA)."""
    from parity.tune import cuda_timer, training_step

    inputs = make_inputs(spec, problem, dtype, 0, "cuda")
    found: dict[str, Any] = {"problem": dict(problem), "dtype": dtype_name(dtype)}
    for label, which in (("candidate_ms", impl), ("baseline_ms", spec.baseline)):
        if which is not None:
            step = training_step(spec, which, inputs)
            step()
            found[label] = cuda_timer(step)
    return found


def preflight(spec: OpSpec, impl: Impl, dtype: torch.dtype, device: str) -> None:
    """Run the candidate once on the smallest pinned problem: a config that does not compile or run is
    a user error (ParityError naming it), not a parity failure."""
    problems = list(spec.examples) or list(spec.training_problems)
    if not problems:
        return
    problem = min(problems, key=lambda p: sum(v for v in p.values() if type(v) is int))
    from parity.tune import training_step

    inputs = make_inputs(spec, problem, dtype, 0, device)
    try:
        training_step(spec, impl, inputs)()
    except ParityError:
        raise
    except Exception as exc:
        raise ParityError(
            f"config {json.dumps(impl.config)} for {spec.name} does not compile or run on "
            f"{json.dumps(problem)}: {_first_line(exc)}"
        ) from exc


def _first_line(exc: BaseException) -> str:
    """``Type: first line of the message`` (at most 300 characters of it)."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0][:300] if text else ''}"


def _case(
    spec: OpSpec | str,
    impl: Impl,
    problem: dict,
    seed: int,
    dtype: str,
    device: str,
    tolerances: Tolerances,
    layout: str,
) -> list[CaseResult]:
    """One gate case (poisoned allocations; ``layout`` other than contiguous re-lays the op's relayout inputs)."""
    spec = resolve(spec)
    relayout_inputs = spec.relayout_inputs if layout != "contiguous" else ()
    results = run_problem(
        spec,
        [impl],
        problem,
        parse_dtype(dtype),
        seed,
        device,
        tolerances,
        poison=("nan", "garbage"),
        layout=layout,
        relayout_inputs=relayout_inputs,
    )
    for result in results if layout != "contiguous" else ():
        result.notes.append(f"inputs {', '.join(relayout_inputs)} laid out {layout}")
    return results


def _rerun(spec: OpSpec | str, impl: Impl, problem: dict, dtype: str, device: str, reruns: int) -> dict[str, Any]:
    start = time.perf_counter()
    found = _determinism(resolve(spec), impl, problem, parse_dtype(dtype), device, reruns)
    return {**found, "seconds": round(time.perf_counter() - start, 2)}


def _time(spec: OpSpec | str, impl: Impl, problem: dict, dtype: str) -> dict[str, Any]:
    """:func:`_timing`, or what it raised as ``error`` (the gate then fails, with its report written, rather
    than ending the run with a worker's traceback)."""
    start = time.perf_counter()
    try:
        found = _timing(resolve(spec), impl, problem, parse_dtype(dtype))
    except Exception as exc:
        found = {"problem": dict(problem), "dtype": dtype, "error": _first_line(exc)}
    return {**found, "seconds": round(time.perf_counter() - start, 2)}


def gate(
    spec: OpSpec,
    impl: Impl,
    device: str,
    profile: Profile,
    tolerances: Tolerances,
    dtypes: Sequence[torch.dtype],
    max_examples: int | None = None,
    reruns: int = 2,
    on_result: Callable[[CaseResult], None] | None = None,
    workers: int = 1,
) -> GateReport:
    """Check ``impl`` on the profile's problems plus the op's training problems (on CUDA), forward and
    backward, each with NaN- and garbage-filled allocations, then rerun forward and backward for determinism
    (at the first pinned problem, and on CUDA at the training problems too: races need many programs). A
    malformed config, no dtype or a dtype without default tolerances is a ParityError before anything runs.

    The work is grouped by dtype and the spec's compile key, so that each compiled kernel is built in one
    place; ``workers`` > 1 runs the groups in that many processes at once (see parity.workers; the op must be
    registered), the largest group (the training shape's, on CUDA) first. Timings at the training shapes run
    last, in the process that compiled them, with nothing beside them."""
    if not dtypes:
        raise ParityError(f"no dtype to gate {spec.name} in (the op runs {', '.join(map(dtype_name, spec.dtypes))})")
    tolerances.require(dtype_name(d) for d in dtypes)
    if impl.config is not None:
        check_helion_config(impl.config, f"config of {impl.name}")
        if spec.check_config is not None:
            spec.check_config(impl.config)
    report = GateReport(spec.name, impl.name, dict(impl.config or {}), device)
    ref: OpSpec | str = spec.name if workers > 1 else spec
    planned: Work = ([], [])

    def work() -> Work:
        """Plan and group the calls, then pre-flight the candidate (here, while the workers start)."""
        nonlocal planned
        keyed: dict[Any, list[Call]] = {}
        last: list[tuple[Any, Call]] = []

        def add(dtype: torch.dtype, problem: dict, call: Call) -> Any:
            key = (dtype_name(dtype), json.dumps(spec.compile_key(problem), default=str))
            keyed.setdefault(key, []).append(call)
            return key

        for dtype in dtypes:
            name = dtype_name(dtype)
            cases = plan(spec, profile, device, max_examples)
            for problem in spec.training_problems:
                if device != "cuda":
                    report.skipped.append(
                        f"training problem {json.dumps(problem)} ({name}): too large for the CPU interpreter"
                    )
                    continue
                key = add(
                    dtype, dict(problem), (_case, (ref, impl, dict(problem), 0, name, device, tolerances, "contiguous"))
                )
                add(dtype, dict(problem), (_rerun, (ref, impl, dict(problem), name, device, reruns)))
                last.append((key, (_time, (ref, impl, dict(problem), name))))
            training = (
                {json.dumps(dict(p), sort_keys=True) for p in spec.training_problems} if device == "cuda" else set()
            )
            for problem, seed in cases:
                if not (seed == 0 and json.dumps(problem, sort_keys=True) in training):
                    add(dtype, problem, (_case, (ref, impl, problem, seed, name, device, tolerances, "contiguous")))
            pinned = spec.examples[0] if spec.examples else (spec.training_problems[0] if device == "cuda" else None)
            if pinned is None:
                continue
            add(dtype, dict(pinned), (_rerun, (ref, impl, dict(pinned), name, device, reruns)))
            for layout in ("strided", "offset") if spec.relayout_inputs else ():
                add(dtype, dict(pinned), (_case, (ref, impl, dict(pinned), 1, name, device, tolerances, layout)))
        keys = sorted(keyed, key=lambda k: (not any(k == t for t, _ in last), -len(keyed[k])))
        planned = ([keyed[k] for k in keys], [(keys.index(k), call) for k, call in last])
        preflight(spec, impl, dtypes[0], device)
        return planned

    def collect(where: tuple[int, int], result: Any) -> None:
        groups, finals = planned
        fn = (list(groups[where[0]]) + [c for g, c in finals if g == where[0]])[where[1]][0]
        if fn is _rerun:
            report.determinism.append(result)
        elif fn is _time:
            report.timing.append(result)
        else:
            for case in result:
                report.cases.append(case)
                if on_result:
                    on_result(case)

    run_groups(work, device, tolerances, workers, collect)
    return report
