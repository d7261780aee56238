"""Summaries of many CaseResults: a table for people, JSON for tools (written atomically)."""

from __future__ import annotations

import os
import tempfile
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from parity.results import stamped
from parity.runner import CaseResult


def atomic_write(path: Path | str, text: str) -> None:
    """Write ``text`` to ``path`` via a temporary file and a rename: readers never see half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.chmod(tmp, 0o644)  # what open() would give; mkstemp's 0600 hides a report from a web server
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def summarize(results: Iterable[CaseResult]) -> list[dict[str, Any]]:
    """One row per (op, impl, dtype): case counts and the worst error relative to its bound."""
    groups: dict[tuple[str, str, str], list[CaseResult]] = defaultdict(list)
    for r in results:
        groups[(r.op, r.impl, r.dtype)].append(r)
    rows = []
    for (op, impl, dtype), cases in sorted(groups.items()):
        ratio, where = 0.0, ""
        for case in cases:
            for q in case.quantities:
                value = (
                    q.candidate.max_abs / q.bound
                    if q.bound > 0
                    else (0.0 if q.candidate.max_abs == 0 else float("inf"))
                )
                if value >= ratio:
                    ratio, where = value, q.name
        forward_only = any(n.startswith("forward only") for c in cases for n in c.notes)
        rows.append(
            {
                "op": op,
                "impl": impl + (" (fwd only)" if forward_only else ""),
                "dtype": dtype,
                "cases": len(cases),
                "failed": sum(not c.passed for c in cases),
                "worst_err_over_bound": ratio,
                "worst_quantity": where,
            }
        )
    return rows


def print_table(rows: list[dict[str, Any]], console: Console) -> None:
    """The summary as a rich table."""
    table = Table(title="parity")
    for column in ("op", "impl", "dtype", "cases", "failed", "worst err/bound", "at", "verdict"):
        table.add_column(column)
    for row in rows:
        table.add_row(
            row["op"],
            row["impl"],
            row["dtype"],
            str(row["cases"]),
            str(row["failed"]),
            f"{row['worst_err_over_bound']:.3f}",
            row["worst_quantity"],
            "[green]pass[/]" if row["failed"] == 0 else "[red]FAIL[/]",
        )
    console.print(table)


def results_payload(results: list[CaseResult], meta: dict[str, Any]) -> dict[str, Any]:
    """Everything a check run found, as the JSON object ``--json`` writes: metadata, summary rows and every case."""
    return stamped("check", {"meta": meta, "summary": summarize(results), "cases": [r.to_dict() for r in results]})
