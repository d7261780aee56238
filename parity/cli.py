"""The ``parity`` command line.

Usage errors and user errors (bad files, unknown ops, forbidden shapes) print one line and exit 2;
a parity failure exits 1; success exits 0.
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from parity.errors import ParityError

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of printing usage, so every usage error is one line."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise ParityError(f"{self.prog}: {message}")


def _count(minimum: int) -> Any:
    """An argparse type: an integer >= ``minimum`` (a negative or zero count is a usage error, not a no-op)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be an integer >= {minimum}, got {value}")
        return value

    return parse


def _add_run_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="cpu (Triton interpreter) or cuda")
    p.add_argument(
        "--profile", choices=("ci", "gpu", "long"), default=None, help="hypothesis profile (default by device)"
    )
    p.add_argument("--dtype", action="append", default=[], help="only these dtypes (repeatable)")
    p.add_argument("--json", dest="json_path", default=None, help="also write every result as JSON here")
    p.add_argument("--report", default=None, help="also write the HTML report and summary.md to this directory")
    p.add_argument(
        "--workers",
        type=_count(1),
        default=1,
        help="spread the work over this many processes on the device (compiles run in parallel)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="parity", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    check = sub.add_parser("check", help="run the parity suite and print a table (the main job)")
    check.add_argument("--op", action="append", default=[], help="only these ops (repeatable)")
    check.add_argument("--impl", action="append", default=[], help="only these implementations (repeatable)")
    check.add_argument("--problem", default=None, help="one problem as JSON instead of generated ones")
    check.add_argument("--seed", type=int, default=0, help="input seed with --problem")
    check.add_argument(
        "--examples",
        type=_count(0),
        default=None,
        help="generated problems per op (default by profile; 0: the pinned examples only)",
    )
    check.add_argument("--forward-only", action="store_true", help="skip the backward check")
    check.add_argument(
        "--verbose", action="store_true", help="log each phase of each case (inputs, oracle, each run) with its time"
    )
    check.add_argument(
        "--layout",
        choices=("contiguous", "strided", "offset"),
        default="contiguous",
        help="with --problem: re-lay out the inputs the op accepts non-contiguous",
    )
    _add_run_options(check)

    for name, text in (
        ("gate", "check one config across the op's shape family; non-zero exit on failure"),
        ("promote", "gate a config, then write it to the config store only if it passed"),
    ):
        cmd = sub.add_parser(name, help=text)
        cmd.add_argument("op")
        cmd.add_argument("--config", required=True, help="JSON file with the candidate's config")
        cmd.add_argument("--impl", default=None, help="the candidate implementation (default: the op's first)")
        cmd.add_argument(
            "--examples",
            type=_count(0),
            default=None,
            help="generated problems per dtype (0: the pinned examples only)",
        )
        cmd.add_argument(
            "--bucket-shape",
            default=None,
            help="JSON problem whose shape bucket the entry is for (default: the op's training shape)",
        )
        cmd.add_argument("--store", default=None, help="config store directory (default: configs/)")
        _add_run_options(cmd)

    tune = sub.add_parser(
        "tune",
        help="Helion's autotuner per kernel of an op, parity's accuracy check; resumable; the op judged end to end",
    )
    tune.add_argument("op")
    tune.add_argument(
        "--shape", default=None, help="the problem to tune at, as JSON (default: the op's training shape)"
    )
    tune.add_argument("--impl", default=None, help="the candidate implementation (default: the op's first)")
    tune.add_argument("--out", default="tuned", help="directory of the results, kept across runs (default tuned/)")
    tune.add_argument("--kernel", action="append", default=[], help="only tune this kernel name (repeatable)")
    tune.add_argument("--force", action="store_true", help="re-tune kernels whose results are current")
    tune.add_argument(
        "--same-search",
        action="store_true",
        help="a kernel searched with other settings (effort, budget, precompile, seed) is re-tuned, once (resumable)",
    )
    tune.add_argument("--plan", action="store_true", help="capture and print what would be tuned; tune nothing")
    tune.add_argument("--seeds", type=_count(0), default=8, help="configs of the op's hand grid to seed (default 8)")
    tune.add_argument(
        "--effort",
        choices=("quick", "full"),
        default="quick",
        help="Helion's autotune_effort (default quick: it starts from the default and seed configs; full starts "
        "from random ones, most of which at these shapes do not compile within Helion's compile timeout)",
    )
    tune.add_argument(
        "--budget", type=_count(1), default=120, help="seconds of Helion's search per kernel (default 120)"
    )
    tune.add_argument(
        "--time-limit",
        type=_count(1),
        default=None,
        help="seconds: start no kernel search or judgement that would end past it (re-run to continue)",
    )
    tune.add_argument(
        "--precompile",
        choices=("fork", "spawn", "none"),
        default="fork",
        help="Helion's autotune_precompile (none: compile each candidate in this process, one at a time)",
    )
    tune.add_argument("--precompile-jobs", type=_count(1), default=None, help="Helion's autotune_precompile_jobs")
    tune.add_argument("--autotune-seed", type=int, default=0, help="Helion's autotune_random_seed (default 0)")
    tune.add_argument(
        "--gpus",
        type=_count(1),
        default=None,
        help="search the kernels on this many GPUs at once, one process each (default: every visible GPU)",
    )
    _add_run_options(tune)

    rep = sub.add_parser("report", help="an HTML report with plots and a summary.md from result JSON files")
    rep.add_argument("inputs", nargs="+", help="JSON of parity check/gate/tune or bench/*.py (two or more: diffs)")
    rep.add_argument("--out", required=True, help="directory for index.html and summary.md")

    configs = sub.add_parser("configs", help="inspect the config store")
    configs.add_argument("action", choices=("list", "show", "verify"))
    configs.add_argument("op", nargs="?", default=None)
    configs.add_argument("--store", default=None, help="config store directory (default: configs/)")
    return parser


def _setup(args: argparse.Namespace) -> tuple[dict, Any, Any]:
    """Configure the device, then load the registry, the profile and the tolerances."""
    from parity import device, registry, tolerances
    from parity.profiles import get_profile

    if args.report:
        from parity import render

        render.require()
    device.configure(args.device)
    specs = registry.load()
    profile = get_profile(args.profile or ("gpu" if args.device == "cuda" else "ci"))
    return specs, profile, tolerances.load(specs=specs)


def _json_object(text: str, flag: str) -> dict[str, Any]:
    """A command-line JSON object, or a one-line error naming the flag."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ParityError(f"{flag} is not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise ParityError(f"{flag} must be a JSON object, got {type(value).__name__}")
    return value


def _meta(args: argparse.Namespace) -> dict[str, Any]:
    from importlib.metadata import PackageNotFoundError, version

    import torch

    def installed(name: str) -> str | None:
        try:
            return version(name)
        except PackageNotFoundError:
            return None

    return {
        "command": " ".join(["parity", *sys.argv[1:]]),
        "device": args.device,
        "torch": torch.__version__,
        "triton": installed("triton"),
        "helion": installed("helion"),
        "python": platform.python_version(),
        "gpu": torch.cuda.get_device_name() if args.device == "cuda" else None,
        "gpus": torch.cuda.device_count() if args.device == "cuda" else None,  # --workers spread over them all
        # what this process held at most (the whole run's with --workers 1; a long problem's footprint)
        "peak_device_bytes": torch.cuda.max_memory_allocated() if torch.cuda.is_initialized() else None,
    }


def _write_out(args: argparse.Namespace, payload: dict[str, Any]) -> None:
    """``--json FILE`` and ``--report DIR``: the run's JSON, and the report read back from that same JSON."""
    from parity import render, report, results

    text = json.dumps(payload, indent=1, default=str) + "\n"
    if args.json_path:
        report.atomic_write(args.json_path, text)
    if args.report:
        page = render.write([results.parse(json.loads(text), args.json_path or f"parity-{args.command}")], args.report)
        print(f"report: {page}", flush=True)


def _say(console: Console, text: str) -> None:
    """One progress line, unwrapped and flushed at once (a log file shows it while the run goes on)."""
    console.print(text, markup=False, highlight=False, soft_wrap=True)
    console.file.flush()


def _case_line(count: int, result: Any, started: float) -> str:
    """``[12] ok chunk_scan helion-cfg0 float16 seed=3 {...} (41.2 s)``: one finished case, run time so far."""
    mark = "ok" if result.passed else "FAIL"
    return (
        f"[{count}] {mark} {result.op} {result.impl} {result.dtype} seed={result.seed} "
        f"{json.dumps(result.problem)} ({time.monotonic() - started:.1f} s)"
    )


def cmd_check(args: argparse.Namespace, console: Console) -> int:
    """The parity suite. On a terminal a progress bar; otherwise (a log file, a batch job) one flushed line per
    finished case and per finished op x dtype, so a long run shows what it has done."""
    from rich.progress import Progress

    from parity import registry, report
    from parity.runner import CaseResult, run_problem
    from parity.spec import dtype_name, parse_dtype
    from parity.strategies import drive

    specs, profile, tols = _setup(args)
    if args.verbose:
        logging.basicConfig(format="%(asctime)s %(message)s", datefmt="%H:%M:%S", level=logging.WARNING)
        logging.getLogger("parity.runner").setLevel(logging.INFO)
    chosen = [registry.get(name) for name in args.op] if args.op else [specs[k] for k in sorted(specs)]
    problem = None if args.problem is None else _json_object(args.problem, "--problem")
    wanted_dtypes = [parse_dtype(d) for d in args.dtype]
    results: list[CaseResult] = []
    jobs = []
    for spec in chosen:
        impls = [spec.impl(n) for n in args.impl] if args.impl else list(spec.impls().values())
        dtypes = [d for d in spec.dtypes if (d in wanted_dtypes if wanted_dtypes else profile.wants(dtype_name(d)))]
        jobs += [(spec, impls, d) for d in dtypes if impls]
    tols.require(dtype_name(dtype) for _, _, dtype in jobs)
    if problem is not None:
        for spec, _, dtype in jobs:
            _validate(spec, problem, [dtype], "--problem")
    bar = console.is_terminal
    started = time.monotonic()

    def finished(result: CaseResult) -> None:
        results.append(result)
        if not bar:
            _say(console, _case_line(len(results), result, started))

    if not bar:
        _say(console, f"parity check: {len(jobs)} op x dtype runs on {args.device} ({profile.name} profile)")
    if problem is None and args.workers > 1:
        from parity.workers import check_groups, run_groups

        job_of: list[list[int]] = []  # the job index of each call, per group
        expected: dict[int, int] = {}  # results per job: its cases x its implementations
        ran: dict[int, list[CaseResult]] = {}

        def work() -> Any:
            groups, owners = check_groups(jobs, args.device, profile, tols, not args.forward_only, args.examples)
            job_of.extend(owners)
            for index in (i for calls in owners for i in calls):
                expected[index] = expected.get(index, 0) + len(jobs[index][1])
            return groups, []

        def case_done(where: tuple[int, int], done: list[CaseResult]) -> None:
            index = job_of[where[0]][where[1]]
            ran.setdefault(index, []).extend(done)
            for result in done:
                finished(result)
            if len(ran[index]) == expected[index]:
                spec, _, dtype = jobs[index]
                _say(
                    console,
                    f"done {spec.name} {dtype_name(dtype)}: {len(ran[index])} cases, "
                    f"{sum(not r.passed for r in ran[index])} failed ({time.monotonic() - started:.1f} s in all)",
                )

        run_groups(work, args.device, tols, args.workers, case_done)
    else:
        with Progress(console=console, transient=True, disable=not bar) as progress:
            task = progress.add_task("parity", total=len(jobs))
            for number, (spec, impls, dtype) in enumerate(jobs, start=1):
                progress.update(task, description=f"{spec.name} {dtype_name(dtype)}")
                before, job_started = len(results), time.monotonic()
                if problem is not None:
                    for result in run_problem(
                        spec,
                        impls,
                        problem,
                        dtype,
                        args.seed,
                        args.device,
                        tols,
                        backward=not args.forward_only,
                        layout=args.layout,
                        relayout_inputs=spec.relayout_inputs,
                    ):
                        finished(result)
                else:
                    drive(
                        spec,
                        impls,
                        dtype,
                        args.device,
                        profile,
                        tols,
                        on_result=finished,
                        raise_on_fail=False,
                        backward=not args.forward_only,
                        max_examples=args.examples,
                    )
                progress.advance(task)
                if not bar:
                    done = results[before:]
                    _say(
                        console,
                        f"done {number}/{len(jobs)}: {spec.name} {dtype_name(dtype)}, {len(done)} cases, "
                        f"{sum(not r.passed for r in done)} failed, {time.monotonic() - job_started:.1f} s "
                        f"({time.monotonic() - started:.1f} s in all)",
                    )
    report.print_table(report.summarize(results), console)
    failed = [r for r in results if not r.passed]
    for r in failed:
        console.print(r.message(), markup=False, highlight=False)
    _write_out(args, report.results_payload(results, _meta(args)))
    console.print(f"{len(results) - len(failed)} passed, {len(failed)} failed", markup=False)
    return EXIT_FAIL if failed or not results else EXIT_OK


def _candidate(spec: Any, args: argparse.Namespace, config: dict[str, Any]) -> Any:
    """The implementation the config is for, carrying the config."""
    import dataclasses

    if args.impl:
        base = spec.impl(args.impl)
    elif spec.candidates:
        base = spec.candidates[0]
    else:
        raise ParityError(f"op {spec.name!r} has no candidate implementation to configure")
    return dataclasses.replace(base, name=f"{base.name.split('-cfg')[0]}@{Path(args.config).name}", config=config)


def _validate(spec: Any, problem: Mapping[str, Any], dtypes: Sequence[Any], flag: str) -> None:
    """``spec.validate`` (the op's problem schema), its one-line error naming the flag the problem came from."""
    try:
        spec.validate(problem, dtypes)
    except ParityError as exc:
        raise ParityError(f"{flag}: {exc}") from None


def _bucket(spec: Any, shape: Mapping[str, Any], flag: str) -> str:
    """The store bucket of ``shape``, or a one-line error naming what is missing (computed before the gate
    runs, so a bad shape does not cost a whole gate)."""
    try:
        return spec.bucket(shape)
    except KeyError as exc:
        raise ParityError(
            f"{flag} {json.dumps(shape)} has no field {exc.args[0]!r}, which the store bucket of {spec.name} needs"
        ) from exc
    except (TypeError, ValueError, ArithmeticError) as exc:
        raise ParityError(
            f"{flag} {json.dumps(shape)}: cannot compute the store bucket of {spec.name}: {type(exc).__name__}: {exc}"
        ) from exc


def cmd_gate(args: argparse.Namespace, console: Console) -> int:
    """Gate (and with ``promote``, store) one config. Everything a user gave is checked before the gate runs:
    the config's Helion fields, the dtypes' tolerances and the bucket shape."""
    from parity import registry, report
    from parity.gate import check_helion_config, gate, load_config
    from parity.lookup import Key, device_key
    from parity.results import stamped
    from parity.spec import dtype_name, parse_dtype
    from parity.store import Store

    config = load_config(args.config)
    check_helion_config(config, args.config)
    _, profile, tols = _setup(args)
    spec = registry.get(args.op)
    impl = _candidate(spec, args, config)
    dtypes = [parse_dtype(d) for d in args.dtype] or [d for d in spec.dtypes if profile.wants(dtype_name(d))]
    tols.require(dtype_name(d) for d in dtypes)
    shape = (
        _json_object(args.bucket_shape, "--bucket-shape")
        if args.bucket_shape
        else (spec.training_problems[0] if spec.training_problems else {})
    )
    if args.bucket_shape:
        _validate(spec, shape, dtypes, "--bucket-shape")
    bucket = _bucket(spec, shape, "--bucket-shape" if args.bucket_shape else "the training shape")
    store = Store(args.store) if args.store else Store()
    done = []
    started = time.monotonic()

    def progress(result: Any) -> None:
        done.append(result)
        _say(console, _case_line(len(done), result, started))

    _say(console, f"gating {spec.name} {impl.name} in {', '.join(map(dtype_name, dtypes))} on {args.device}")
    result = gate(
        spec,
        impl,
        args.device,
        profile,
        tols,
        dtypes,
        max_examples=args.examples,
        on_result=progress,
        workers=args.workers,
    )
    report.print_table(report.summarize(result.cases), console)
    for case in result.cases:
        if not case.passed:
            console.print(case.message(), markup=False, highlight=False)
    for det in result.determinism:
        console.print(
            f"determinism {det['dtype']}: bitwise identical={det['bitwise_identical']} "
            f"spread={det['max_spread']:.3e} ok={det['ok']}",
            markup=False,
        )
    for timing in result.timing:
        console.print(
            f"time {timing['dtype']} fwd+bwd: FAILED, {timing['error']}"
            if "error" in timing
            else f"time {timing['dtype']} fwd+bwd: candidate {timing.get('candidate_ms', float('nan')):.4f} ms, "
            f"baseline {timing.get('baseline_ms', float('nan')):.4f} ms",
            markup=False,
        )
    for note in result.skipped:
        console.print(f"not run: {note}", markup=False)
    evidence = result.evidence()
    _write_out(
        args,
        stamped(
            "gate",
            {
                "meta": _meta(args),
                "op": spec.name,
                "impl": impl.name,
                "config": config,
                "device": args.device,
                "passed": result.passed,
                "evidence": evidence,
                "cases": [case.to_dict() for case in result.cases],
            },
        ),
    )
    if not result.passed:
        console.print(f"gate FAILED for {spec.name} {impl.name}: nothing written to the store", markup=False)
        return EXIT_FAIL
    console.print(f"gate passed: {len(result.cases)} cases", markup=False)
    if args.command == "promote":
        for dtype in dtypes:
            key = Key(device_key(args.device), spec.name, str(impl.target), dtype_name(dtype), bucket)
            store.put(key, config, evidence)
            console.print(
                f"promoted to {store.path(key.device, key.op)} ({key.dtype}, bucket {key.bucket})", markup=False
            )
    return EXIT_OK


def cmd_configs(args: argparse.Namespace, console: Console) -> int:
    """List, show or verify store entries. ``verify`` says OK or STALE for each entry (a malformed entry, or one
    whose kernel no longer loads, is STALE with the reason) and exits 1 if any is stale. The library versions of
    an entry are compared only on its own device: another machine (the CPU that CI runs on) installs other
    versions (torch's CPU build), so there the kernel source alone decides."""
    from parity.store import Store

    store = Store(args.store) if args.store else Store()
    stale = seen = 0
    here = _local_device_keys() if args.action == "verify" else set()
    for device, op in store.files():
        if args.op and op != args.op:
            continue
        own = device in here
        for entry in store.entries(device, op):
            seen += 1
            fields = entry if isinstance(entry, dict) else {}
            line = (
                f"{device} {op} {fields.get('dtype', '?')} bucket={fields.get('bucket', '?')} "
                f"{fields.get('target', '?')} ({fields.get('date', '?')})"
            )
            if args.action == "show":
                console.print_json(json.dumps(entry))
            elif args.action == "verify":
                reasons = store.staleness(entry, compare_versions=own)
                stale += bool(reasons)
                ok = "  OK" if own else f"  OK (kernel source; versions are compared on {device} itself)"
                line += ok if not reasons else "  STALE: " + "; ".join(reasons)
                console.print(line, markup=False, highlight=False, soft_wrap=True)
            else:
                console.print(line, markup=False, highlight=False, soft_wrap=True)
    if not seen:
        console.print(
            f"no entries{f' for {args.op}' if args.op else ''} in {store.root}",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    return EXIT_FAIL if stale else EXIT_OK


def _local_device_keys() -> set[str]:
    """The store device keys of this machine: the CPU's and each visible CUDA device's."""
    import torch

    from parity.lookup import device_key

    return {"cpu-interpreter", *(device_key(f"cuda:{i}") for i in range(torch.cuda.device_count()))}


EXIT_INCOMPLETE = 3
"""``parity tune`` stopped at its time limit, or tuned only some kernels: run the same command again."""


def cmd_tune(args: argparse.Namespace, console: Console) -> int:
    """Tune each kernel of one op with Helion's autotuner (parity.tune), one progress line at a time. Exit 0:
    the assembled config passed end to end and is written, ready for ``parity promote``; 3: incomplete, re-run
    the same command; 1: no trusted baseline or no tuned config kept."""
    import dataclasses

    from parity import registry
    from parity.results import stamped
    from parity.spec import dtype_name, parse_dtype
    from parity.tune import SearchSettings, Tuner

    if args.device != "cuda" and not args.plan:
        raise ParityError("tuning needs --device cuda (Helion's autotuner benchmarks on the GPU); --plan runs anywhere")
    _, _, tols = _setup(args)
    spec = registry.get(args.op)
    if spec.tuning_configs is None:
        raise ParityError(f"op {spec.name!r} declares no tuning space (OpSpec.tuning_configs)")
    if args.shape is not None:
        shape = _json_object(args.shape, "--shape")
    elif spec.training_problems:
        shape = dict(spec.training_problems[0])
    else:
        raise ParityError(f"op {spec.name!r} has no training shape: give --shape")
    dtype = parse_dtype(args.dtype[0] if args.dtype else "bfloat16")
    tols.require([dtype_name(dtype)])
    _validate(spec, shape, [dtype], "--shape")
    if not args.impl and not spec.candidates:
        raise ParityError(f"op {spec.name!r} has no candidate implementation to tune")
    base = dataclasses.replace(spec.impl(args.impl) if args.impl else spec.candidates[0], config=None)
    tuner = Tuner(
        spec,
        base,
        shape,
        dtype,
        args.device,
        tols,
        Path(args.out),
        settings=SearchSettings(
            effort=args.effort,
            budget_seconds=args.budget,
            precompile=None if args.precompile == "none" else args.precompile,
            precompile_jobs=args.precompile_jobs,
            random_seed=args.autotune_seed,
        ),
        seeds=args.seeds,
        log=lambda text: _say(console, text),
        time_limit=args.time_limit,
        gpus=_tune_gpus(args),
        workers=args.workers,
        same_search=args.same_search,
    )
    outcome = tuner.run(only=args.kernel, force=args.force, plan=args.plan)
    trials = [
        {"config": j["config"], "ms": j.get("ms"), "passed": j["passed"], "what": j["what"]} for j in outcome.judged
    ]
    payload: dict[str, Any] = {"meta": _meta(args), "op": spec.name, "impl": base.name, "shape": shape}
    payload |= {"dtype": dtype_name(dtype), "status": outcome.status, "kernels": outcome.kernels, "trials": trials}
    _write_out(args, stamped("tune", payload))
    if outcome.status == "done":
        _say(console, f"done: the assembled config passed end to end: {outcome.config_path}")
        _say(
            console,
            f"promote it: parity promote {spec.name} --device cuda --dtype {dtype_name(dtype)} "
            f"--config {outcome.config_path}",
        )
        return EXIT_OK
    if outcome.status == "planned":
        return EXIT_OK
    _say(console, f"{outcome.status}{': ' + outcome.note if outcome.note else ''}")
    return EXIT_INCOMPLETE if outcome.status == "incomplete" else EXIT_FAIL


def _tune_gpus(args: argparse.Namespace) -> int:
    """The GPUs ``parity tune`` spreads its kernel searches over: ``--gpus`` (at most the visible ones), else all."""
    import torch

    if args.device != "cuda":
        return 1
    visible = torch.cuda.device_count()
    if args.gpus is not None and args.gpus > visible:
        raise ParityError(f"--gpus {args.gpus}: only {visible} GPU(s) visible")
    return args.gpus or visible


def cmd_report(args: argparse.Namespace, console: Console) -> int:
    """The HTML report and summary.md of result files: every file is read and recognized before anything is
    written (a bad one is a one-line error and no output)."""
    from parity import render, results

    render.require()
    loaded = [results.load(path) for path in args.inputs]
    page = render.write(loaded, args.out)
    console.print(f"report: {page} and {Path(args.out) / 'summary.md'}", markup=False, soft_wrap=True)
    verdicts = [r.passed for r in loaded if r.passed is not None]
    return EXIT_FAIL if not all(verdicts) else EXIT_OK


COMMANDS = {
    "report": cmd_report,
    "check": cmd_check,
    "tune": cmd_tune,
    "gate": cmd_gate,
    "promote": cmd_gate,
    "configs": cmd_configs,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: dispatch, turning user errors into one line and exit code 2."""
    console = Console(stderr=False, width=None if sys.stdout.isatty() else 150)
    try:
        args = build_parser().parse_args(argv)
        return COMMANDS[args.command](args, console)
    except ParityError as exc:
        print(f"parity: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("parity: interrupted", file=sys.stderr)
        return 130
