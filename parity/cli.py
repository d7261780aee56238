"""The ``parity`` command line.

Usage errors and user errors (bad files, unknown ops, forbidden shapes) print one line and exit 2;
a parity failure exits 1; success exits 0.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from collections.abc import Sequence
from typing import Any

from rich.console import Console

from parity.errors import ParityError

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of printing usage, so every usage error is one line."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise ParityError(f"{self.prog}: {message}")


def _add_run_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="cpu (Triton interpreter) or cuda")
    p.add_argument("--profile", choices=("ci", "gpu"), default=None, help="hypothesis profile (default by device)")
    p.add_argument("--dtype", action="append", default=[], help="only these dtypes (repeatable)")
    p.add_argument("--json", dest="json_path", default=None, help="also write every result as JSON here")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="parity", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    check = sub.add_parser("check", help="run the parity suite and print a table (the main job)")
    check.add_argument("--op", action="append", default=[], help="only these ops (repeatable)")
    check.add_argument("--impl", action="append", default=[], help="only these implementations (repeatable)")
    check.add_argument("--problem", default=None, help="one problem as JSON instead of generated ones")
    check.add_argument("--seed", type=int, default=0, help="input seed with --problem")
    check.add_argument("--examples", type=int, default=None, help="generated problems per op (default by profile)")
    check.add_argument("--forward-only", action="store_true", help="skip the backward check")
    _add_run_options(check)
    return parser


def _setup(args: argparse.Namespace) -> tuple[dict, Any, Any]:
    """Configure the device, then load the registry, the profile and the tolerances."""
    from parity import device, registry, tolerances
    from parity.strategies import get_profile

    device.configure(args.device)
    specs = registry.load()
    profile = get_profile(args.profile or ("gpu" if args.device == "cuda" else "ci"))
    return specs, profile, tolerances.load(specs=specs)


def _meta(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    return {"command": " ".join(["parity", *sys.argv[1:]]), "device": args.device, "torch": torch.__version__,
            "python": platform.python_version(),
            "gpu": torch.cuda.get_device_name() if args.device == "cuda" else None}


def cmd_check(args: argparse.Namespace, console: Console) -> int:
    from rich.progress import Progress

    from parity import registry, report
    from parity.runner import CaseResult, run_problem
    from parity.spec import parse_dtype
    from parity.strategies import drive

    specs, profile, tols = _setup(args)
    chosen = [registry.get(name) for name in args.op] if args.op else [specs[k] for k in sorted(specs)]
    problem = None
    if args.problem is not None:
        try:
            problem = json.loads(args.problem)
        except json.JSONDecodeError as exc:
            raise ParityError(f"--problem is not valid JSON: {exc}") from exc
        if not isinstance(problem, dict):
            raise ParityError("--problem must be a JSON object")
    wanted_dtypes = [parse_dtype(d) for d in args.dtype]
    results: list[CaseResult] = []
    jobs = []
    for spec in chosen:
        impls = [spec.impl(n) for n in args.impl] if args.impl else list(spec.impls().values())
        dtypes = [d for d in spec.dtypes if (d in wanted_dtypes if wanted_dtypes else profile.wants(str(d)[6:]))]
        jobs += [(spec, impls, d) for d in dtypes if impls]
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("parity", total=len(jobs))
        for spec, impls, dtype in jobs:
            progress.update(task, description=f"{spec.name} {str(dtype)[6:]}")
            if problem is not None:
                results += run_problem(spec, impls, problem, dtype, args.seed, args.device, tols,
                                       backward=not args.forward_only)
            else:
                drive(spec, impls, dtype, args.device, profile, tols, on_result=results.append,
                      raise_on_fail=False, backward=not args.forward_only, max_examples=args.examples)
            progress.advance(task)
    report.print_table(report.summarize(results), console)
    failed = [r for r in results if not r.passed]
    for r in failed:
        console.print(r.message(), markup=False, highlight=False)
    if args.json_path:
        report.atomic_write(args.json_path, report.results_json(results, _meta(args)))
    console.print(f"{len(results) - len(failed)} passed, {len(failed)} failed", markup=False)
    return EXIT_FAIL if failed or not results else EXIT_OK


COMMANDS = {"check": cmd_check}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: dispatch, turning user errors into one line and exit code 2."""
    console = Console(stderr=False)
    try:
        args = build_parser().parse_args(argv)
        return COMMANDS[args.command](args, console)
    except ParityError as exc:
        print(f"parity: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("parity: interrupted", file=sys.stderr)
        return 130
