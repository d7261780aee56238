"""Per-kernel tuning: Helion's autotuner searches, parity judges.

``parity tune OP`` runs the op once, forward and backward, at its training shape and records every kernel
launch that goes through the project's explicit-config launcher: which Helion kernel, on exactly which
arguments (copied before the launch), with which config. The op's config names one Helion config per kernel
(``{name: config}``, ``{}`` = every kernel's default); the names are those of the op's hand grid
(:attr:`OpSpec.tuning_configs`) and of its explicit-config candidates, and a first run with a marker config
per name tells which kernel runs under which name.

For each named kernel, Helion's own autotuner then searches a config on those arguments, for the static-shape
build that training runs, seeded with the hand grid's configs of that kernel. Its accuracy check is parity's,
not Helion's default: the baseline is the kernel's output with the config the op runs by default, trusted
because the op with its default configs passes the engine against the fp64 oracle at this problem (judged
first); every tensor a candidate returns or writes must be within ``atol + rtol * max|baseline|`` of the
baseline's (the engine's rule for a lone implementation, with the op's tolerances). The kernels tuned before run
their tuned configs in the capture, so each kernel is searched on the arguments training gives it (the gated norm's
partial sums get one row per row group of the tuned backward); a search that changes a config captures again, and
what that changes is tuned again.

Each kernel's result is written as soon as it is found (atomically, one file per kernel), keyed by the kernel's
code hash (:func:`parity.lookup.code_hash`: its device code, not the host code around it), the library versions,
the device, the problem, the dtype and the exact argument signature: a re-run skips what is current, so a run cut
short (a time limit, a killed job) resumes where it stopped. On a
host with several GPUs (``gpus``), the kernels to search are dealt round robin to one spawned process per GPU,
each capturing the launches again on its own GPU and writing its kernels' records (distinct files); this process
then reads them back. Then
the assembled op config is judged end to end by the engine (forward and backward, at the problem and at the
op's pinned examples). If it fails, kernels are added to the default one at a time, the largest time saved
first, and a kernel whose config fails is rejected: a wrong config never wins. A config whose per-operation lists
differ entry by entry is tried a second way, each list as its most common entry (checked and timed on the kernel
as well): a build with more loads or stores than the one tuned refuses the list, not one value. Every judgement is
stored too.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import importlib
import json
import multiprocessing
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.utils._pytree import tree_flatten

from parity import lookup
from parity.compare import bound, error_stats
from parity.errors import ParityError
from parity.report import atomic_write
from parity.runner import CaseResult, execute, make_inputs, run_problem, upstream_grads
from parity.spec import Impl, OpSpec, Problem, dtype_name
from parity.tolerances import Tolerance, Tolerances

LAUNCHER = "kernels.launch:launch"
"""The project's explicit-config launcher, ``launch(kernel, args, config, **options)``, through which every
Helion kernel runs (see kernels/launch.py)."""

NAME_FIELD = "__parity_tune_name__"
"""The only field of the marker config that tells which named config a launch runs with."""

Timer = Callable[[Callable[[], Any]], float]
Search = Callable[[Any, tuple[Any, ...]], Mapping[str, Any]]
"""(a Helion kernel carrying the tuning settings, its arguments) -> the best config found."""
Log = Callable[[str], None]


def cuda_timer(fn: Callable[[], Any]) -> float:
    """Median milliseconds of ``fn`` with triton's do_bench (warm, CUDA events)."""
    from triton.testing import do_bench

    return float(do_bench(fn, return_mode="median"))


def helion_search(kernel: Any, args: tuple[Any, ...]) -> Mapping[str, Any]:
    """Helion's autotuner on ``args`` with the kernel's settings (``force``: never a config from Helion's cache)."""
    return kernel.autotune(list(args), force=True)


def training_step(spec: OpSpec, impl: Impl, inputs: Mapping[str, Any]) -> Callable[[], None]:
    """What training runs: the forward, and the backward too when the implementation has one."""
    fn = impl.load()
    names = [n for n in spec.grad_inputs if isinstance(inputs.get(n), torch.Tensor)] if impl.backward else []
    args = {k: (v.detach().clone().requires_grad_(True) if k in names else v) for k, v in inputs.items()}

    def step() -> None:
        out = fn(**args)
        outs = [
            o
            for o in (out if isinstance(out, tuple | list) else (out,))
            if isinstance(o, torch.Tensor) and o.requires_grad
        ]
        if names and outs:
            torch.autograd.grad(outs, [args[n] for n in names], [torch.ones_like(o) for o in outs], allow_unused=True)

    return step


@dataclass(frozen=True)
class SearchSettings:
    """The Helion autotuner settings of every kernel's search."""

    effort: str = "quick"
    budget_seconds: int | None = 120
    precompile: str | None = "fork"
    precompile_jobs: int | None = None
    random_seed: int = 0
    benchmark_subprocess: bool = False
    """Benchmark each candidate in Helion's worker process (a config that breaks the CUDA context costs the worker,
    not the search): set for a kernel whose in-process search lost the context (:meth:`Tuner.settings_for`)."""
    pointer_indexing: bool = False
    """Every load and store indexed by pointer (Helion's ``indexing`` pinned): set for a kernel whose in-process
    search lost the context on a tensor-descriptor candidate (:meth:`Tuner.settings_for`): TMA's alignment rules
    are what such a candidate breaks (a misaligned address, H200 run 31 and H100 run 32, chunk_scan), and the
    search stays in this process, where it measures hundreds of configs instead of a few."""

    def helion(self) -> dict[str, Any]:
        """As ``helion.Settings`` fields (no progress bar: a log file gets Helion's log lines instead). A config
        Triton cannot compile is skipped, not raised: Helion 1.5.0 takes some Triton compile errors for unexpected
        ones and raises them, which ended the search of three SSD backward kernels on the H200 (run 22).

        Candidates are benchmarked in this process, as Helion always does for a kernel that writes into its
        arguments: with Helion's default benchmark worker process, the searches of the others measured almost
        nothing within their budgets, in-process ones hundreds of configs (``bench/results/h200-run30``,
        ``h200-run31``). A config that breaks the CUDA context ends the run; the run that resumes searches that
        kernel with :attr:`pointer_indexing` (a tensor-descriptor candidate broke it) or :attr:`benchmark_subprocess`
        (where such a config costs only the worker)."""
        return {
            "autotune_ignore_errors": True,
            "autotune_benchmark_subprocess": self.benchmark_subprocess,
            "autotune_effort": self.effort,
            "autotune_budget_seconds": self.budget_seconds,
            "autotune_precompile": self.precompile,
            "autotune_precompile_jobs": self.precompile_jobs,
            "autotune_random_seed": self.random_seed,
            "autotune_progress_bar": False,
        }

    def stored(self) -> dict[str, Any]:
        """As a kernel's record stores them (``search``): :attr:`pointer_indexing` only where set, so that the records
        written before it existed (none pinned) stay current under ``--same-search``."""
        fields = dataclasses.asdict(self)
        if not self.pointer_indexing:
            del fields["pointer_indexing"]
        return fields

    def overrides(self) -> dict[str, Any]:
        """The config fields this search pins (``autotune_config_overrides``), besides the build-dependent ones."""
        return {"indexing": "pointer"} if self.pointer_indexing else {}


# ---------------------------------------------------------------------------------------------
# Capture: what the op launches, on which arguments.


@dataclass
class Launch:
    """The first launch of one named kernel in a forward+backward of the op, and how often it ran."""

    name: str
    kernel: Any
    args: tuple[Any, ...]
    config: Any
    options: dict[str, Any]
    count: int = 0
    signatures: list[str] = field(default_factory=list)

    @property
    def target(self) -> str:
        """``module:function`` of the kernel's Python function (what its code hash covers)."""
        return f"{self.kernel.fn.__module__}:{self.kernel.fn.__qualname__}"


def signature(args: Sequence[Any]) -> str:
    """What a static-shape build specializes on, as text: each tensor's dtype, shape, strides and storage
    offset, every other argument's value."""
    parts = [
        f"{a.dtype}{list(a.shape)}/{list(a.stride())}+{a.storage_offset()}" if isinstance(a, torch.Tensor) else repr(a)
        for a in args
    ]
    return json.dumps(parts)


def snapshot(args: Sequence[Any]) -> tuple[Any, ...]:
    """A copy of ``args`` with the same layouts and the same aliasing: each storage is copied once and every
    tensor is rebuilt on its copy (same offset, shape and strides)."""
    storages: dict[int, Any] = {}

    def copy(value: Any) -> Any:
        if not isinstance(value, torch.Tensor):
            return value
        storage = value.untyped_storage()
        if storage.data_ptr() not in storages:
            storages[storage.data_ptr()] = storage.clone()
        return torch.empty(0, dtype=value.dtype, device=value.device).set_(
            storages[storage.data_ptr()], value.storage_offset(), value.shape, value.stride()
        )

    return tuple(copy(a) for a in args)


@contextmanager
def _replaced(original: Callable[..., Any], replacement: Callable[..., Any]) -> Iterator[None]:
    """Every module global bound to ``original`` (``from kernels.launch import launch`` binds one per module)
    bound to ``replacement`` while the block runs."""
    sites = [
        (namespace, name)
        for module in list(sys.modules.values())
        for namespace in (getattr(module, "__dict__", None),)
        if isinstance(namespace, dict)
        for name, value in list(namespace.items())
        if value is original
    ]
    for namespace, name in sites:
        namespace[name] = replacement
    try:
        yield
    finally:
        for namespace, name in sites:
            namespace[name] = original


def _launcher(path: str) -> Callable[..., Any]:
    module, _, name = path.partition(":")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ParityError(f"cannot load the launcher {path!r}: {exc}") from exc


def _fwd_bwd(spec: OpSpec, impl: Impl, inputs: Mapping[str, Any], dtype: torch.dtype, seed: int, what: str) -> None:
    """The op forward and backward as the engine runs it (one random upstream gradient); errors are ParityErrors."""
    upstream = upstream_grads(seed, dtype) if impl.backward and spec.grad_inputs else None
    run = execute(spec, impl.load(), inputs, upstream)
    if run.errors:
        raise ParityError(f"{spec.name} [{impl.name}] failed while {what}: {run.errors[0]}")


def capture(
    spec: OpSpec,
    impl: Impl,
    problem: Problem,
    dtype: torch.dtype,
    device: str,
    names: Sequence[str],
    launcher: str = LAUNCHER,
    seed: int = 0,
    configs: Mapping[str, Any] | None = None,
) -> dict[str, Launch]:
    """Run the op forward and backward on the engine's inputs of ``problem`` (seed ``seed``): with a marker config
    per name (which kernel runs with which name: each marker launch runs the kernel's default config), then with
    ``{}`` (every kernel as the op runs it by default), recording each named kernel's first launch: a copy of its
    arguments taken before it ran, its config, how often and with how many argument signatures it ran.

    With ``configs`` (a config for some of the names), the arguments, counts and signatures are those of a third
    run with them, each launch keeping its default config: a kernel's arguments can depend on the configs of the
    kernels before it (the gated norm's partial sums get one row per row group of the backward), and a kernel is
    tuned on what it gets when the others run their tuned configs. ParityError if a launch carries no marker or
    the runs launch different kernels."""
    original = _launcher(launcher)
    impl.load()  # import the kernel modules before their launcher globals are replaced
    inputs = make_inputs(spec, problem, dtype, seed, device)
    order: list[tuple[Any, str]] = []

    def probe(kernel: Any, args: tuple[Any, ...], config: Any, **options: Any) -> Any:
        name = config.get(NAME_FIELD) if isinstance(config, Mapping) else None
        if name is None:
            raise ParityError(
                f"{kernel.fn.__name__} was launched with a config the op's config does not name "
                f"(expected a name among {', '.join(names)})"
            )
        order.append((kernel, name))
        return original(kernel, args, None, **options)

    markers = {name: {NAME_FIELD: name} for name in names}
    with _replaced(original, probe):
        _fwd_bwd(
            spec, dataclasses.replace(impl, config=markers), inputs, dtype, seed, "finding which kernel each name runs"
        )
    named: dict[Any, str] = {}
    for kernel, name in order:
        if named.setdefault(kernel, name) != name:
            raise ParityError(f"{kernel.fn.__name__} runs under two names, {named[kernel]!r} and {name!r}")

    def recorded(op_config: Mapping[str, Any], what: str) -> dict[str, Launch]:
        launches: dict[str, Launch] = {}
        pending = iter(order)

        def record(kernel: Any, args: tuple[Any, ...], config: Any, **options: Any) -> Any:
            expected = next(pending, None)
            if expected is None or expected[0] is not kernel:
                raise ParityError(f"{spec.name} launched {kernel.fn.__name__} {what}, out of turn")
            launch = launches.get(expected[1])
            if launch is None:
                launch = launches[expected[1]] = Launch(expected[1], kernel, snapshot(args), config, dict(options))
            launch.count += 1
            if (text := signature(args)) not in launch.signatures:
                launch.signatures.append(text)
            return original(kernel, args, config, **options)

        with _replaced(original, record):
            _fwd_bwd(spec, dataclasses.replace(impl, config=dict(op_config)), inputs, dtype, seed, f"running {what}")
        if next(pending, None) is not None:
            raise ParityError(f"{spec.name} launched fewer kernels {what} than with named configs")
        return launches

    launches = recorded({}, "with its default configs")
    if not configs:
        return launches
    tuned = recorded(configs, f"with the tuned configs of {', '.join(configs)}")
    for name, launch in tuned.items():
        launch.config = launches[name].config
    return tuned


# ---------------------------------------------------------------------------------------------
# The accuracy check Helion runs on every candidate.


def accuracy_check(tolerance: Tolerance) -> Callable[[object, object], None]:
    """Helion's ``autotune_baseline_accuracy_check_fn`` with parity's rule. Helion calls it with (outputs,
    baseline outputs), and with (arguments, baseline arguments) when the kernel writes into its arguments.
    Every floating-point tensor must be within ``bound(tolerance, None, max|baseline|)`` = atol + rtol *
    max|baseline| in max-abs error (a NaN or Inf counts as infinitely wrong unless the baseline has the same
    value there); integer tensors and other values must be equal. A dimension whose extent differs from the
    baseline's depends on the config: it holds the partial results of a split reduction (e.g. one row per row
    group of the gated norm's backward, summed by the caller), so its sum is compared. Raises AssertionError,
    which makes Helion skip the config."""

    def check(actual: object, expected: object) -> None:
        got, got_tree = tree_flatten(actual)
        want, want_tree = tree_flatten(expected)
        if got_tree != want_tree:
            raise AssertionError(f"output structure {got_tree} != baseline structure {want_tree}")
        for index, (a, e) in enumerate(zip(got, want, strict=True)):
            if not isinstance(e, torch.Tensor):
                if isinstance(a, torch.Tensor) or (a != e and a is not e):
                    raise AssertionError(f"leaf {index}: {a!r} != baseline {e!r}")
                continue
            if not isinstance(a, torch.Tensor) or a.dim() != e.dim():
                shape = tuple(a.shape) if isinstance(a, torch.Tensor) else type(a).__name__
                raise AssertionError(f"leaf {index}: {shape} where the baseline has shape {tuple(e.shape)}")
            if not (a.is_floating_point() or e.is_floating_point()):
                if not torch.equal(a, e):
                    raise AssertionError(f"leaf {index}: integer tensor differs from the baseline")
                continue
            split = [d for d in range(a.dim()) if a.shape[d] != e.shape[d]]
            if split:
                a, e = (t.to(torch.float64).sum(split) for t in (a, e))
            stats = error_stats(a, e)
            limit = bound(tolerance, None, stats.oracle_max_abs)
            if not stats.max_abs <= limit:
                summed = f" (summed over dims {split})" if split else ""
                raise AssertionError(
                    f"leaf {index}{summed}: max_abs {stats.max_abs:.3e} > bound {limit:.3e} (max|baseline| "
                    f"{stats.oracle_max_abs:.3e}); worst at {list(stats.worst_index)}: {stats.worst_value:.6g} vs "
                    f"{stats.worst_oracle:.6g}"
                )

    return check


def kernel_tolerance(tolerances: Tolerances, op: str, dtype: torch.dtype) -> Tolerance:
    """The tolerance a kernel's outputs are held to: the op's at its dtype (as the engine holds every output
    of the op, fp32 intermediates included)."""
    return tolerances.lookup(op, dtype_name(dtype), "")


# ---------------------------------------------------------------------------------------------
# The tuner: plan, trust, search each kernel, assemble, judge.


def _hash(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


def _target(impl: Impl) -> str:
    """``module:function`` of an implementation (a callable's, for an Impl built around one)."""
    if isinstance(impl.target, str):
        return impl.target
    return f"{impl.target.__module__}:{impl.target.__qualname__}"


def _read(path: Path) -> dict[str, Any] | None:
    """A JSON record, or None when absent or unreadable (a torn or foreign file is redone, not trusted)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def _write(path: Path, record: Mapping[str, Any]) -> None:
    atomic_write(path, json.dumps(record, indent=1, default=str) + "\n")


@dataclass
class Outcome:
    """What a run did: ``status`` is done (``config`` passed end to end and is written at ``config_path``),
    planned (nothing run), incomplete (re-run to continue), untrusted (the default configs fail: no baseline)
    or no-gain (no tuned kernel config survived the judge)."""

    status: str
    kernels: list[dict[str, Any]] = field(default_factory=list)
    judged: list[dict[str, Any]] = field(default_factory=list)
    config: dict[str, Any] | None = None
    config_path: Path | None = None
    note: str = ""


def _check_fits(spec: Any, seed: Mapping[str, Any]) -> None:
    """Raise ``helion.exc.InvalidConfig`` unless ``seed`` is a config of the kernel ``spec`` describes: Helion's own
    normalization, and a list of one entry per load, loop or block (``indexing``, ``range_num_stages``, ...) as long as
    the kernel's. Normalization keeps a list of another length, and Helion's search then fails on the seed as a
    whole (an AssertionError): a best config found at another argument signature can have one load more or less."""
    import helion

    config = helion.Config(**seed)
    spec.normalize(config)
    default = spec.default_config().config
    for key, value in config.config.items():
        expected = default.get(key)
        if isinstance(value, list) and isinstance(expected, list) and len(value) != len(expected):
            raise helion.exc.InvalidConfig(f"{key} has {len(value)} entries, the kernel {len(expected)}")


@dataclass
class Tuner:
    """Tune one op's kernels at one problem and dtype; results under ``out`` (see :meth:`folder`)."""

    spec: OpSpec
    base: Impl
    problem: Problem
    dtype: torch.dtype
    device: str
    tolerances: Tolerances
    out: Path
    settings: SearchSettings = SearchSettings()
    seeds: int = 8
    search: Search = helion_search
    timer: Timer = cuda_timer
    log: Log = print
    time_limit: float | None = None
    launcher: str = LAUNCHER
    started: float = field(default_factory=time.monotonic)
    gpus: int = 1
    """GPUs to spread the kernel searches over, one spawned process per GPU (:func:`spread`); 1: all here."""
    workers: int = 1
    """Processes a judgement runs the op's pinned examples in (:mod:`parity.workers`, registered ops), at the same
    time as the tuning problem runs here, where its builds are already compiled; 1: all here, one after another."""
    same_search: bool = False
    """A record searched with other settings (effort, budget, precompile, random seed) is not current: re-running
    with new settings re-tunes every kernel once, resumably (``--force`` redoes every kernel on every run)."""

    @property
    def folder(self) -> Path:
        """``out/<device>/<op>/<dtype>-<problem hash>``: ``kernels/<name>.json`` per kernel, ``judged/<config
        hash>.json`` per end-to-end judgement, ``config.json`` (the passing op config, for ``parity promote``)."""
        tag = _hash(dict(self.problem))[:12]
        return self.out / lookup.device_key(self.device) / self.spec.name / f"{dtype_name(self.dtype)}-{tag}"

    def _elapsed(self) -> float:
        return time.monotonic() - self.started

    def _say(self, text: str) -> None:
        self.log(f"[{self._elapsed():7.1f} s] {text}")

    def _out_of_time(self, needed: float, before: str) -> bool:
        """Whether the time limit leaves less than ``needed`` seconds; says so, naming what is left undone."""
        if self.time_limit is None or self._elapsed() + needed <= self.time_limit:
            return False
        self._say(f"time limit {self.time_limit:g} s: stopping before {before}; re-run the same command to continue")
        return True

    def names_and_seeds(self, inputs: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
        """Each kernel name of the op's config -> its distinct configs in the hand grid (the autotuner's seeds).
        The names are those of the grid and of the explicit configs of the op's candidates of the same target."""
        if self.spec.tuning_configs is None:
            raise ParityError(f"op {self.spec.name!r} declares no tuning space (OpSpec.tuning_configs)")
        grid = self.spec.tuning_configs(inputs, self.seeds)
        explicit = [dict(c.config) for c in self.spec.candidates if c.config and c.target == self.base.target]
        for config in [*grid, *explicit]:
            if not all(isinstance(v, Mapping) for v in config.values()):
                raise ParityError(
                    f"parity tune needs the op's config to name one Helion config per kernel ({{name: config}}); "
                    f"{self.spec.name} has {json.dumps(config)}"
                )
        found: dict[str, list[dict[str, Any]]] = {name: [] for config in [*grid, *explicit] for name in config}
        for config in grid:
            for name, sub in config.items():
                if dict(sub) not in found[name]:
                    found[name].append(dict(sub))
        return found

    def _expected_for(self, name: str, target: str) -> dict[str, Any]:
        """The fields a record of kernel ``name`` (Python function ``target``) must match, but its signature."""
        return {
            "op": self.spec.name,
            "kernel": name,
            "target": target,
            "code_hash": lookup.code_hash(target),
            "versions": lookup.versions(),
            "problem": dict(self.problem),
            "dtype": dtype_name(self.dtype),
        }

    def _expected(self, launch: Launch) -> dict[str, Any]:
        """The fields a kernel's record must match to be current."""
        return {**self._expected_for(launch.name, launch.target), "signature": launch.signatures[0]}

    def _tuned_configs(self, names: Iterable[str]) -> dict[str, dict[str, Any]]:
        """Kernel name -> the form of its tuned config the op is first judged with (the first faster than its
        default, as :meth:`assemble` takes it), for each record at this problem current but for its argument
        signature: the configs a capture runs (:func:`capture`), so that each kernel is captured, checked and
        searched on the arguments it gets when the kernels before it run their tuned configs."""
        configs: dict[str, dict[str, Any]] = {}
        for name in names:
            record = _read(self.folder / "kernels" / f"{name}.json") or {}
            if record.get("status") != "tuned" or not isinstance(record.get("target"), str):
                continue
            if all(record.get(k) == v for k, v in self._expected_for(name, record["target"]).items()):
                if faster := _faster_forms(record):
                    configs[name] = faster[0][0]
        return configs

    def _capture(self, names: Sequence[str], configs: Mapping[str, Any]) -> dict[str, Launch]:
        """:func:`capture` of this op's kernels ``names``, the kernels of ``configs`` running those."""
        launches = capture(
            self.spec, self.base, self.problem, self.dtype, self.device, names, self.launcher, configs=configs
        )
        tuned = f", with the tuned configs of {', '.join(configs)}" if configs else ""
        self._say(f"captured the launches of {len(launches)} kernels (forward and backward{tuned})")
        return launches

    def _follow(
        self,
        names: Sequence[str],
        configs: dict[str, dict[str, Any]],
        launches: dict[str, Launch],
        records: dict[str, dict[str, Any]],
        queue: list[str],
        only: Sequence[str],
        forced: set[str],
    ) -> tuple[dict[str, dict[str, Any]], dict[str, Launch]]:
        """After a search: when the tuned configs changed, capture again; queue every kernel whose record is no
        longer current (its arguments changed with another kernel's config; not outside ``only``, where it stays
        untuned), and take off the queue every one not ``forced`` whose record is current again (its stale
        arguments came from another kernel's stale config). Returns the configs and launches now current."""
        now = self._tuned_configs(names)
        if now == configs:
            return configs, launches
        launches = self._capture(names, now)
        for name, launch in launches.items():
            record = self._record(launch)[0]
            if name in queue and name not in forced and record is not None:
                queue.remove(name)
                records[name] = record
                self._say(f"{name}: current with the other kernels' tuned configs: not tuned again")
            elif name in records and name not in queue and record is None:
                del records[name]
                if not only or name in only:
                    queue.append(name)
                    self._say(f"{name}: its arguments changed with another kernel's tuned config: tuned again")
        return now, launches

    def _record(self, launch: Launch) -> tuple[dict[str, Any] | None, str]:
        """(the current record of a kernel or None, why it must be tuned: missing or what changed)."""
        record = _read(self.folder / "kernels" / f"{launch.name}.json")
        if record is None:
            return None, "not tuned"
        expected = self._expected(launch)
        if self.same_search:
            expected["search"] = self.settings_for(launch.name).stored()
        changed = [k for k, v in expected.items() if record.get(k) != v]
        return (record, "") if not changed else (None, f"stale ({', '.join(changed)} changed)")

    def _lost_marker(self, name: str) -> Path:
        return self.folder / "kernels" / f"{name}.context-lost.json"

    def settings_for(self, name: str) -> SearchSettings:
        """The search settings of kernel ``name``: :attr:`settings`, unless a search of it in this process lost the
        CUDA context (its marker, ``kernels/<name>.context-lost.json``, names the candidate it was measuring): then
        with pointer indexing where that candidate used a tensor descriptor, else (or when a search with pointer
        indexing lost it too) benchmarked in Helion's worker process."""
        marker = _read(self._lost_marker(name))
        if marker is None:
            return self.settings
        if "tensor_descriptor" in str(marker.get("candidate")):
            return dataclasses.replace(self.settings, pointer_indexing=True)
        return dataclasses.replace(self.settings, benchmark_subprocess=True)

    def _earlier_bests(self, name: str) -> list[tuple[str | None, dict[str, Any]]]:
        """(where, config) of the best configs found for kernel ``name`` of this op and dtype before, stale ones too
        (a search starts from them; it does not trust them): this device's last at this problem (where None) first,
        then each other GPU's of the same architecture (``-sm90``: the same SMs, so its best is a good start here),
        then this device's at the op's other problems (another shape bucket: its tiles may not fit this one, and a
        seed that does not is dropped)."""
        own = lookup.device_key(self.device)
        arch = own.rpartition("-")[2]
        others = sorted(
            path.name
            for path in (self.out.iterdir() if self.out.is_dir() else ())
            if path.is_dir() and path.name != own and arch.startswith("sm") and path.name.endswith(f"-{arch}")
        )
        here = self.folder.relative_to(self.out / own)
        folders: list[tuple[str | None, Path]] = [(None, self.folder)]
        folders += [(where, self.out / where / here) for where in others]
        shapes = sorted(
            path
            for path in self.folder.parent.glob(f"{dtype_name(self.dtype)}-*")
            if path.is_dir() and path != self.folder
        )
        folders += [(f"the {path.name} tuning", path) for path in shapes]
        found: list[tuple[str | None, dict[str, Any]]] = []
        for where, folder in folders:
            record = _read(folder / "kernels" / f"{name}.json") or {}
            if record.get("status") == "tuned" and isinstance(record.get("config"), dict):
                found.append((where, dict(record["config"])))
        return found

    def _seed_earlier(self, name: str, seeds: list[dict[str, Any]]) -> list[str | None]:
        """Put the earlier bests of kernel ``name`` (:meth:`_earlier_bests`) first among ``seeds``, in their order,
        each once; return where each one put there came from."""
        earlier: list[tuple[str | None, dict[str, Any]]] = []
        for where, config in self._earlier_bests(name):
            if config not in seeds and config not in [c for _, c in earlier]:
                earlier.append((where, config))
        seeds[:0] = [config for _, config in earlier]
        return [where for where, _ in earlier]

    def run(self, *, only: Sequence[str] = (), force: bool = False, plan: bool = False) -> Outcome:
        """Capture, then (unless ``plan``) establish the baseline's trust (when a kernel is to be searched), tune each
        kernel not tuned yet (only ``only`` if given; every one with ``force``), and judge the assembled config."""
        inputs = make_inputs(self.spec, self.problem, self.dtype, 0, self.device)
        seeds = self.names_and_seeds(inputs)
        unknown = sorted(set(only) - set(seeds))
        if unknown:
            raise ParityError(
                f"no kernel named {unknown[0]!r} in {self.spec.name}'s config: expected among {list(seeds)}"
            )
        self._say(
            f"tune {self.spec.name} [{self.base.name}] {dtype_name(self.dtype)} on {self.device} at "
            f"{json.dumps(dict(self.problem))}: {len(seeds)} kernel names; results in {self.folder}"
        )
        configs = self._tuned_configs(seeds)
        launches = self._capture(list(seeds), configs)
        todo: list[Launch] = []
        records: dict[str, dict[str, Any]] = {}
        for name in seeds:
            launch = launches.get(name)
            if launch is None:
                self._say(f"plan {name}: not launched at this problem: not tuned")
                continue
            record, why = self._record(launch)
            if record is not None and not (force and (not only or name in only)):
                records[name] = record
                state = f"{record['status']} before, skipped (--force redoes it)"
            else:
                state = "forced" if record is not None else why
                search = self.settings_for(name)
                if search.benchmark_subprocess:
                    state += ", benchmarked in a worker process (a search here lost the CUDA context)"
                elif search.pointer_indexing:
                    state += ", pointer indexing only (a tensor-descriptor candidate lost the CUDA context)"
                for where in self._seed_earlier(name, seeds[name]):
                    state += ", its last best config seeded" if where is None else f", {where}'s best seeded"
                if not only or name in only:
                    todo.append(launch)
                else:
                    state += ", not in --kernel"
            shapes = ", ".join(json.loads(launch.signatures[0])[:3])
            self._say(
                f"plan {name}: {launch.kernel.fn.__name__} x{launch.count} ({len(launch.signatures)} argument "
                f"signature(s), tuned on the first: {shapes}, ...), {len(seeds[name])} seed(s): {state}"
            )
        if plan:
            return Outcome("planned", kernels=list(records.values()))
        judged: list[dict[str, Any]] = []  # the trust's verdict, when judged
        if todo:  # the searches' baseline; with none to run, the judgement of the tuned configs is what counts
            # at the tuning problem alone: the searches' baselines run there (the examples' builds are the final
            # judgement's, with the tuned configs)
            trust = self.judge({}, "the default configs (the baseline's trust)", examples=False)
            if trust is None:
                return Outcome("incomplete", kernels=list(records.values()))
            judged.append(trust)
            if not trust["passed"]:
                return Outcome(
                    "untrusted", list(records.values()), judged, note="the op fails with its default configs"
                )
        else:
            self._say("no kernel to search: the baseline's trust is not judged")
        tolerance = kernel_tolerance(self.tolerances, self.spec.name, self.dtype)
        queue = [launch.name for launch in todo]
        forced = set(queue) if force else set()
        if self.gpus > 1 and len(queue) > 1:
            self._spread(todo, records)
            queue = []  # tuned there, each GPU on its own capture: what their configs changed is tuned here
            configs, launches = self._follow(list(seeds), configs, launches, records, queue, only, forced)
        number = 0
        while queue:
            name = queue.pop(0)
            if self._out_of_time(self._search_seconds(name), f"{name} ({len(queue) + 1} left)"):
                return Outcome("incomplete", list(records.values()), judged)
            number += 1
            self._say(f"tuning {name} ({number}/{number + len(queue)})")
            self._seed_earlier(name, seeds[name])  # a kernel queued again since the plan: its last best first
            records[name] = self.tune_kernel(launches[name], seeds[name], tolerance)
            configs, launches = self._follow(list(seeds), configs, launches, records, queue, only, forced)
        left = [n for n in launches if n not in records]
        if left:
            self._say(f"not tuned yet: {', '.join(left)}; run again (without --kernel) to finish and judge the op")
            return Outcome("incomplete", list(records.values()), judged)
        return self.assemble(records, judged)

    def _spread(self, todo: Sequence[Launch], records: dict[str, dict[str, Any]]) -> None:
        """Deal the kernels of ``todo`` round robin to the GPUs, tune them there at once (:func:`spread`), and
        read back the record each wrote into ``records`` (one missing stays missing: a re-run resumes)."""
        shares = [(gpu, [launch.name for launch in todo[gpu :: self.gpus]]) for gpu in range(self.gpus)]
        shares = [(gpu, names) for gpu, names in shares if names]
        for gpu, names in shares:
            self._say(f"GPU {gpu} tunes {', '.join(names)}")
        spread(self, shares)
        for launch in todo:
            record, why = self._record(launch)
            if record is not None:
                records[launch.name] = record
            else:
                self._say(f"{launch.name}: no record from its GPU's process ({why})")

    def tune_share(self, names: Sequence[str]) -> None:
        """Capture the launches here and tune the kernels ``names`` one after another, writing each record (a
        process of :func:`spread`, on its own GPU; the trust of the default configs was judged by its parent)."""
        inputs = make_inputs(self.spec, self.problem, self.dtype, 0, self.device)
        seeds = self.names_and_seeds(inputs)
        launches = self._capture(list(seeds), self._tuned_configs(seeds))
        tolerance = kernel_tolerance(self.tolerances, self.spec.name, self.dtype)
        for number, name in enumerate(names, start=1):
            if self._out_of_time(self._search_seconds(name), f"{name} ({len(names) - number + 1} left)"):
                return
            self._say(f"tuning {name} ({number}/{len(names)})")
            self.tune_kernel(launches[name], seeds[name], tolerance)

    def tune_kernel(self, launch: Launch, seeds: list[dict[str, Any]], tolerance: Tolerance) -> dict[str, Any]:
        """Search one kernel with Helion's autotuner and parity's check, verify and time the result, and write
        its record at once (also when the search fails: a re-run then skips it; ``--force`` retries)."""
        import helion

        started = time.monotonic()
        search = self.settings_for(launch.name)
        settings = launch.kernel.settings.copy(static_shapes=True)
        plain = helion.kernel(launch.kernel.fn, settings=settings).bind(launch.args)
        fields = {k: v for k, v in dict(launch.config or {}).items() if k != lookup.STATIC_SHAPES}
        default = helion.Config(**fields) if fields else plain.config_spec.default_config()
        baseline = plain.compile_config(default)
        valid = []
        for seed in seeds:
            try:
                _check_fits(plain.config_spec, seed)
                valid.append(seed)
            except helion.exc.InvalidConfig as exc:
                self._say(f"  seed dropped: {json.dumps(seed)}: {exc}")
        check = accuracy_check(tolerance)
        tuning = helion.kernel(
            launch.kernel.fn,
            settings=settings.copy(
                autotune_seed_configs=[helion.Config(**s) for s in valid],
                autotune_baseline_fn=baseline,
                autotune_baseline_accuracy_check_fn=check,
                autotune_config_overrides={**{key: [] for key in BUILD_DEPENDENT_FIELDS}, **search.overrides()},
                # every config Helion measures (generation, status, compile s, ms, when), appended per search: what
                # a search spent its budget on (kernels/<name>.autotune.csv and .log beside the record)
                autotune_log=str(self.folder / "kernels" / f"{launch.name}.autotune"),
                **search.helion(),
            ),
        )
        record: dict[str, Any] = {
            **self._expected(launch),
            "baseline_config": dict(default),
            "seeds": valid,
            "search": search.stored(),
            "device": lookup.device_key(self.device),
        }
        try:
            try:
                best = dict(self.search(tuning, launch.args))
            except Exception as exc:
                lost = _context_lost(self.device)
                if lost is not None and not search.benchmark_subprocess:  # the resumed run avoids or isolates it
                    candidate = unfinished_candidate(self.folder / "kernels" / f"{launch.name}.csv")
                    marker = {"error": f"{type(exc).__name__}: {lost}"[:1000], "candidate": candidate}
                    _write(self._lost_marker(launch.name), marker)
                raise
            expected, written = baseline(*snapshot(launch.args)), _after(baseline, launch.args)

            def verify(got: Any, args: tuple[Any, ...]) -> None:
                check(got, expected)
                check(args, written)

            args = snapshot(launch.args)
            baseline_ms = self.timer(lambda: baseline(*args))
            record["ms"] = self._checked_time(plain, best, launch.args, verify)
            record.update(status="tuned", config=best, baseline_ms=baseline_ms)
            common = most_common_form(best)
            if common != broadcast_uniform(best):
                try:  # the form every build of the kernel loads, checked and timed too (the op may refuse the other)
                    record["common_ms"] = self._checked_time(plain, common, launch.args, verify)
                    record["common_config"] = common
                except Exception as exc:
                    _device_alive(self.device, exc)
                    record["common_error"] = f"{type(exc).__name__}: {str(exc)[:500]}"
        except Exception as exc:  # a failed search or a best config that fails parity's check is recorded
            _device_alive(self.device, exc)
            record.update(status="failed", error=f"{type(exc).__name__}: {str(exc)[:500]}")
        record["seconds"] = round(time.monotonic() - started, 1)
        _write(self.folder / "kernels" / f"{launch.name}.json", record)
        if record["status"] == "tuned":
            self._say(
                f"  {launch.name}: {record['baseline_ms']:.4f} ms -> {record['ms']:.4f} ms "
                f"({record['seconds']:.0f} s) {json.dumps(record['config'])}"
            )
        else:
            self._say(f"  {launch.name}: FAILED ({record['seconds']:.0f} s): {record['error']}")
        return record

    def _checked_time(
        self, plain: Any, config: Mapping[str, Any], args: tuple[Any, ...], verify: Callable[[Any, Any], None]
    ) -> float:
        """The time of ``plain`` (a bound kernel) compiled with ``config``, on a copy of ``args``, once ``verify``
        passed on its output and on what it wrote into that copy."""
        import helion

        compiled = plain.compile_config(helion.Config(**config))
        copy = snapshot(args)
        verify(compiled(*copy), copy)
        return self.timer(lambda: compiled(*copy))

    def judge(self, config: Mapping[str, Any], what: str, *, examples: bool = True) -> dict[str, Any] | None:
        """The engine's verdict on the op with ``config``, forward and backward, at the problem and (with
        ``examples``) the op's pinned examples, with the fwd+bwd time at the problem; stored per config (a stored
        verdict for the same op source, versions, problems and dtype is reused, and so is a pass on more problems).
        None when the time limit is reached first."""
        impl = dataclasses.replace(self.base, name=f"{self.base.name.split('-cfg')[0]}-tune", config=dict(config))
        problems = [dict(self.problem), *(map(dict, self.spec.examples) if examples else ())]
        key = {
            "op": self.spec.name,
            "target": _target(self.base),
            "source_hash": lookup.source_hash(_target(self.base)),
            "versions": lookup.versions(),
            "problems": problems,
            "dtype": dtype_name(self.dtype),
            "config": dict(config),
        }
        path = self.folder / "judged" / f"{_hash(key)[:16]}.json"
        stored = _read(path)
        if stored is None or any(stored.get(k) != v for k, v in key.items()):
            stored = self._passed_on_more(key)
        if stored is not None:
            self._say(f"judged before: {what}: {'pass' if stored['passed'] else 'FAIL'}")
            return stored
        if self._out_of_time(self._judging_seconds(), f"judging {what}"):
            return None
        self._say(f"judging {what} end to end, forward and backward, on {len(problems)} problem(s)")
        started = time.monotonic()
        results = self._run_problems(impl, problems)
        failed = [r for r in results if not r.passed]
        record: dict[str, Any] = {**key, "what": what, "passed": not failed, "failures": [r.message() for r in failed]}
        if not failed:
            inputs = make_inputs(self.spec, self.problem, self.dtype, 0, self.device)
            step = training_step(self.spec, impl, inputs)
            step()  # compiled outside the timed region
            record["ms"] = self.timer(step)
        record["seconds"] = round(time.monotonic() - started, 1)
        _write(path, record)
        verdict = f"pass, fwd+bwd {record['ms']:.4f} ms" if not failed else f"FAIL ({len(failed)} cases)"
        self._say(f"  {what}: {verdict}")
        for message in record["failures"][:3]:
            self.log(message)
        return record

    def _run_problems(self, impl: Impl, problems: Sequence[Problem]) -> list[CaseResult]:
        """The engine's results for ``impl`` on each problem, forward and backward, in order. With :attr:`workers`,
        the first (the tuning problem, whose builds this process holds) runs here while the workers start, then the
        others run in up to that many spawned processes at once (their compiles on the host's cores at once)."""
        from parity import registry

        def here(problem: Problem) -> list[CaseResult]:
            return run_problem(self.spec, [impl], problem, self.dtype, 0, self.device, self.tolerances)

        rest = list(problems[1:])
        if self.workers <= 1 or not rest or registry.load().get(self.spec.name) is not self.spec:
            return [result for problem in problems for result in here(problem)]
        from parity.workers import check_case, run_groups

        first: list[CaseResult] = []
        found: dict[int, list[CaseResult]] = {}
        dtype = dtype_name(self.dtype)

        def work() -> tuple[list[list[Any]], list[Any]]:
            first.extend(here(problems[0]))
            args = [(self.spec.name, (impl,), p, 0, dtype, self.device, self.tolerances, True) for p in rest]
            return [[(check_case, case)] for case in args], []

        def done(where: tuple[int, int], results: list[CaseResult]) -> None:
            found[where[0]] = results

        run_groups(work, self.device, self.tolerances, min(self.workers, len(rest)), done)
        return first + [result for group in range(len(rest)) for result in found[group]]

    def _passed_on_more(self, key: Mapping[str, Any]) -> dict[str, Any] | None:
        """A stored verdict that passed with ``key``'s config on every problem of ``key`` and more (the trust, judged
        at the tuning problem alone, finds the verdict of an earlier run that also judged the examples)."""
        for path in sorted((self.folder / "judged").glob("*.json")):
            stored = _read(path) or {}
            if (
                stored.get("passed")
                and all(stored.get(k) == v for k, v in key.items() if k != "problems")
                and all(problem in stored.get("problems", []) for problem in key["problems"])
            ):
                return stored
        return None

    def _search_seconds(self, name: str) -> float:
        """How long the search of kernel ``name`` is expected to take: its budget, or the longest search stored
        for this op, shape and dtype with the same settings if longer (Helion's final verification of the best
        candidates can run well past the budget: ``bench/results/h200-run32``). The time limit starts none that
        would be cut."""
        search = self.settings_for(name).stored()
        stored = [_read(path) or {} for path in (self.folder / "kernels").glob("*.json")]
        taken = [float(r.get("seconds", 0.0)) for r in stored if r.get("search") == search]
        return max([float(search["budget_seconds"] or 0), *taken])

    def _judging_seconds(self) -> float:
        """How long a judgement is expected to take (a judgement compiles the kernels whose config changed): the
        longest one of tuned configs stored for this op, shape and dtype, else the trust's, per problem times the
        problems of a full judgement (the trust judges the tuning problem alone; 0 when none says). The trust's own
        time is no guide once tuned ones exist: it also built every default-config kernel on a cold compile cache
        (H200 run 26, SSD: 132 s, then 8-66 s for each tuned config). The time limit starts none that would be
        cut."""
        stored = [_read(path) or {} for path in (self.folder / "judged").glob("*.json")]
        tuned = [float(r.get("seconds", 0.0)) for r in stored if r.get("config")]
        full = 1 + len(self.spec.examples)
        trust = [float(r.get("seconds", 0.0)) * full / max(1, len(r.get("problems") or ())) for r in stored]
        return max(tuned or trust, default=0.0)

    def assemble(self, records: dict[str, dict[str, Any]], judged: list[dict[str, Any]]) -> Outcome:
        """Judge every tuned kernel config that is faster than its default together; if that fails, add them one
        at a time to the defaults (the largest time saved first), rejecting each form that fails (a kernel's
        config as searched, then its per-operation lists as their most common entry: :func:`_forms`). ``judged``:
        the verdicts so far (the trust's, when judged), extended with each made here."""
        candidates: dict[str, list[dict[str, Any]]] = {}
        gains = {}
        for name, record in records.items():
            if record.get("status") != "tuned" or not _forms(record):
                continue
            if faster := _faster_forms(record):
                candidates[name] = [form for form, _ in faster]
                gains[name] = record["baseline_ms"] - faster[0][1]
            else:
                self._say(f"{name}: not faster than its default config: left out")
        order = sorted(gains, key=lambda n: -gains[n])
        config = {n: candidates[n][0] for n in order}
        verdict = self.judge(config, f"the tuned configs of {len(config)} kernels") if config else None
        if config and verdict is None:
            return Outcome("incomplete", list(records.values()), judged)
        if verdict is not None:
            judged.append(verdict)
        if verdict is not None and not verdict["passed"]:
            config = {}
            for name in order:
                for number, form in enumerate(candidates[name]):
                    trial = {**config, name: form}
                    label = " (per-operation lists as one value)" if number else ""
                    verdict = self.judge(trial, f"{len(config)} accepted + {name}{label}")
                    if verdict is None:
                        return Outcome("incomplete", list(records.values()), judged)
                    judged.append(verdict)
                    if verdict["passed"]:
                        config = trial
                        break
                    records[name]["rejected"] = f"the op fails end to end with it: {verdict['failures'][:1]}"
                    records[name]["rejected_forms"] = [*records[name].get("rejected_forms", []), form]
                    _write(self.folder / "kernels" / f"{name}.json", records[name])
                    self._say(f"{name}{label}: rejected (the op fails end to end with its tuned config)")
        if not config:
            return Outcome("no-gain", list(records.values()), judged, note="no tuned kernel config was kept")
        path = self.folder / "config.json"
        atomic_write(path, json.dumps(config, indent=1) + "\n")
        return Outcome("done", list(records.values()), judged, config, path)


_SHARED_FIELDS = ("spec", "log", "started", "gpus")
"""Tuner fields a process of :func:`spread` does not take from its parent (the spec is found by name)."""


def spawn(target: Callable[..., None], args: tuple[Any, ...]) -> Any:
    """A started spawned process running ``target(*args)`` (CUDA is initialized here: never fork)."""
    process = multiprocessing.get_context("spawn").Process(target=target, args=args)
    process.start()
    return process


def spread(tuner: Tuner, shares: Sequence[tuple[int, Sequence[str]]]) -> None:
    """Tune each (GPU, kernel names) share at once, in one process per GPU (:func:`tune_on_gpu`: every name of
    its share, current or not), and wait for them all. Their records are written atomically, one file per
    kernel, so they never collide."""
    fields = {f.name: getattr(tuner, f.name) for f in dataclasses.fields(tuner) if f.name not in _SHARED_FIELDS}
    if tuner.time_limit is not None:
        fields["time_limit"] = max(1.0, tuner.time_limit - tuner._elapsed())
    processes = [(gpu, spawn(tune_on_gpu, (gpu, tuner.spec.name, fields, list(names)))) for gpu, names in shares]
    for gpu, process in processes:
        process.join()
        if process.exitcode:
            tuner._say(f"the process on GPU {gpu} failed (exit code {process.exitcode}); re-run to resume")


def tune_on_gpu(gpu: int, op: str, fields: dict[str, Any], names: list[str]) -> None:
    """A process of :func:`spread`: pinned to ``gpu`` before any CUDA work, it tunes ``names`` of op ``op``."""
    from parity import device as device_mod
    from parity import registry

    device_mod.configure(fields["device"])
    if fields["device"] == "cuda":
        torch.cuda.set_device(gpu)
    tuner = Tuner(registry.get(op), **fields, log=lambda text: print(f"[GPU {gpu}] {text}", flush=True))
    tuner.tune_share(names)


PER_OPERATION_FIELDS = ("indexing", "atomic_indexing", "load_eviction_policies")
"""Helion config fields with one entry per load/store of the kernel; a single string applies to every one."""


def broadcast_uniform(config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` with each per-operation field whose entries are all equal written as that one value. A kernel
    with constexpr branches (the gated norm's bias, z, norm_before_gate) has more loads and stores in some
    builds than in the one tuned: Helion rejects a per-operation list shorter than the build's operations
    ("Load/Store operation 8 exceeds indexing config length 8", H200 run 21), a single value it broadcasts."""
    return _as_one_value(config, uniform_only=True)


def most_common_form(config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` with each per-operation list written as its most common entry (the first of equals): a form
    every build of the kernel loads, whatever its count of loads and stores."""
    return _as_one_value(config, uniform_only=False)


def _as_one_value(config: Mapping[str, Any], *, uniform_only: bool) -> dict[str, Any]:
    """``config`` with each per-operation list of strings (all of them equal, with ``uniform_only``) written as its
    most common entry."""
    out = dict(config)
    for name in PER_OPERATION_FIELDS:
        value = out.get(name)
        if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            if not uniform_only or len(set(value)) == 1:
                out[name] = Counter(value).most_common(1)[0][0]
    return out


BUILD_DEPENDENT_FIELDS = ("static_ranges",)
"""Helion config fields with one entry per loop of a kind that some builds of the kernel have and others lack.
Helion 1.5.0 offers a static range only for a loop whose bounds are compile-time constants with at most 8 trips: the
SSD scans' block loop has one in the static build at the training shape, none in the dynamic build or at longer
sequences, and Helion refuses a config with more entries than the build has loops ("Too many values for
config['static_ranges']", H200 run 26). The search holds them at their neutral value (an empty list, which Helion
fills with False for every loop) and a tuned config omits them (:func:`_as_tuned`), so it loads on every build."""


def _forms(record: Mapping[str, Any]) -> list[tuple[dict[str, Any], float]]:
    """(form, its kernel time) of a tuned kernel config as the op may run it (:func:`_as_tuned`), in the order the
    op is judged with them, less those that failed the op before: the config as searched, then (when the search
    set a per-operation list to different entries) each such list as its most common entry. A build of the kernel
    with more loads or stores than the one tuned (an optional input: the SSD's initial states) refuses a list of
    another length ("Load/Store operation 8 exceeds indexing config length 8", H100 run 30, bwd_state_passing),
    and loads one value on every operation. A rejection of another form (before the op's assembly changed) is
    judged again."""
    forms = [(_as_tuned(record["config"]), float(record["ms"]))]
    if isinstance(record.get("common_config"), dict):
        forms.append((_as_tuned(record["common_config"]), float(record["common_ms"])))
    rejected = record.get("rejected_forms", [])
    return [(form, ms) for form, ms in forms if form not in rejected]


def _faster_forms(record: Mapping[str, Any]) -> list[tuple[dict[str, Any], float]]:
    """The forms of a tuned kernel config (:func:`_forms`) faster than its default config, in their order."""
    return [(form, ms) for form, ms in _forms(record) if ms < record["baseline_ms"]]


def _as_tuned(config: Mapping[str, Any]) -> dict[str, Any]:
    """A tuned kernel config as the op runs it: on the static-shape build it was tuned on (the engine then judges
    that build at the training shape and the dynamic build on the other problems), uniform per-operation fields
    as one value (:func:`broadcast_uniform`), without the fields a build may lack (:data:`BUILD_DEPENDENT_FIELDS`:
    the search kept them neutral; one set otherwise is refused here)."""
    out = broadcast_uniform(config)
    for name in BUILD_DEPENDENT_FIELDS:
        if any(out.pop(name, None) or ()):
            raise ParityError(f"tuned config sets {name}={config[name]}, which the search holds neutral")
    return {**out, lookup.STATIC_SHAPES: True}


def unfinished_candidate(log: Path) -> str | None:
    """The config a search was measuring when its process failed: in Helion's autotune CSV log (``status``
    ``started``, then ``ok`` or ``error`` per ``config_id``), the last one started and never finished."""
    try:
        with log.open(newline="") as file:
            rows = list(csv.DictReader(file))
    except (OSError, csv.Error):
        return None
    unfinished: dict[str, str] = {}  # config_id -> config, in the order last started
    for row in rows:
        config_id = row.get("config_id") or ""
        unfinished.pop(config_id, None)
        if row.get("status") == "started":
            unfinished[config_id] = row.get("config") or ""
    return list(unfinished.values())[-1] if unfinished else None


def _context_lost(device: str) -> RuntimeError | None:
    """The error that left the CUDA context of ``device`` unusable (e.g. an illegal memory access), or None."""
    if device != "cuda":
        return None
    try:
        torch.cuda.synchronize()
    except RuntimeError as lost:
        return lost
    return None


def _device_alive(device: str, error: Exception) -> None:
    """Raise (nothing recorded) when ``error`` left the CUDA context unusable: every later kernel of this process
    would fail too and be recorded as failed. A fresh process resumes."""
    lost = _context_lost(device)
    if lost is not None:
        raise ParityError(
            f"the CUDA context is lost ({lost}) after {type(error).__name__}: re-run to resume"
        ) from error


def _after(fn: Callable[..., Any], args: Sequence[Any]) -> tuple[Any, ...]:
    """The arguments after ``fn`` ran on a copy of them (what a kernel writes into its arguments)."""
    copy = snapshot(args)
    fn(*copy)
    return copy
