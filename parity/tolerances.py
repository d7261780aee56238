"""tolerances.toml: per op, per dtype, per output or gradient, the numbers the verdict uses.

Layout::

    [defaults.<dtype>]                  factor, atol, rtol (all three required)
    [op.<op>]                           any of factor/atol/rtol, for every dtype of the op
    [op.<op>.<dtype>]                   any of them, for that dtype
    [op.<op>.<dtype>."<output>"]        any of them, for one output or "grad.<input>"
    [checks.<name>]                     free-form named bounds used by tests (atol, rtol, factor)

More specific entries override less specific ones. Everything is validated on load: an unknown op,
dtype, output or key, a non-number, or a negative or non-finite value is an error naming the file
and the entry.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from parity.errors import ParityError
from parity.spec import DTYPES, OpSpec

KEYS = ("factor", "atol", "rtol")


@dataclass(frozen=True)
class Tolerance:
    """err(candidate) <= factor * err(baseline) + atol; with no baseline: <= atol + rtol * max|oracle|."""

    factor: float
    atol: float
    rtol: float


def _kind(value: Any) -> str:
    """``int 3``: a value's type and repr, for error messages."""
    return f"{type(value).__name__} {value!r}"


def _table(path: Path, where: str, value: Any) -> dict[str, Any]:
    """``value`` if it is a table; otherwise an error naming the file and the entry."""
    if not isinstance(value, dict):
        raise ParityError(f"{path}: [{where}] must be a table, got {_kind(value)}")
    return value


def _numbers(
    path: Path, where: str, table: Mapping[str, Any], allowed: tuple[str, ...], tables: tuple[str, ...] = ()
) -> dict[str, float]:
    """The numeric keys of ``table``; subtables are skipped (the caller walks them). A key in ``tables``
    names a subtable, so a plain value there is an error that says so."""
    found: dict[str, float] = {}
    for key, value in table.items():
        if isinstance(value, dict):
            continue
        if key in tables:
            _table(path, f"{where}.{key}", value)
        if key not in allowed:
            raise ParityError(f"{path}: [{where}] unknown key {key!r} (expected {', '.join(allowed)})")
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ParityError(f"{path}: [{where}] {key} must be a number, got {_kind(value)}")
        if not math.isfinite(value) or value < 0:
            raise ParityError(f"{path}: [{where}] {key} = {value} must be finite and >= 0")
        found[key] = float(value)
    return found


class Tolerances:
    """The validated contents of one tolerances file."""

    def __init__(self, path: Path, data: Mapping[str, Any], specs: Mapping[str, OpSpec] | None = None):
        self.path = path
        unknown = set(data) - {"defaults", "op", "checks"}
        if unknown:
            raise ParityError(
                f"{path}: unknown top-level table(s) {', '.join(sorted(unknown))} (expected defaults, op, checks)"
            )
        self.defaults: dict[str, dict[str, float]] = {}
        for dtype, table in _table(path, "defaults", data.get("defaults", {})).items():
            where = f"defaults.{dtype}"
            if dtype not in DTYPES:
                raise ParityError(f"{path}: [{where}] is not a dtype table (dtypes: {', '.join(DTYPES)})")
            _table(path, where, table)
            numbers = _numbers(path, where, table, KEYS)
            missing = [k for k in KEYS if k not in numbers]
            if missing:
                raise ParityError(f"{path}: [{where}] is missing {', '.join(missing)}")
            self.defaults[dtype] = numbers
        self.ops: dict[str, dict[str, Any]] = {}
        for op, table in _table(path, "op", data.get("op", {})).items():
            self.ops[op] = self._op_entry(op, table, specs)
        self.checks: dict[str, dict[str, float]] = {}
        for name, table in _table(path, "checks", data.get("checks", {})).items():
            self.checks[name] = _numbers(path, f"checks.{name}", _table(path, f"checks.{name}", table), KEYS)

    def _op_entry(self, op: str, table: Any, specs: Mapping[str, OpSpec] | None) -> dict[str, Any]:
        path = self.path
        if specs is not None and op not in specs:
            raise ParityError(f"{path}: [op.{op}] unknown op (known: {', '.join(sorted(specs))})")
        _table(path, f"op.{op}", table)
        entry: dict[str, Any] = {"*": _numbers(path, f"op.{op}", table, KEYS, tables=tuple(DTYPES))}
        names = specs[op].compared_names() if specs is not None else None
        for dtype, sub in table.items():
            if not isinstance(sub, dict):
                continue
            where = f"op.{op}.{dtype}"
            if dtype not in DTYPES:
                raise ParityError(f"{path}: [{where}] unknown dtype {dtype!r} (expected {', '.join(DTYPES)})")
            per_output: dict[str, dict[str, float]] = {"*": _numbers(path, where, sub, KEYS, tables=names or ())}
            for output, leaf in sub.items():
                if not isinstance(leaf, dict):
                    continue
                if names is not None and output not in names:
                    raise ParityError(
                        f"{path}: [{where}.{output}] op {op!r} has no output or gradient "
                        f"{output!r} (expected {', '.join(names)})"
                    )
                if any(isinstance(v, dict) for v in leaf.values()):
                    raise ParityError(f"{path}: [{where}.{output}] nests too deep")
                per_output[output] = _numbers(path, f"{where}.{output}", leaf, KEYS)
            entry[dtype] = per_output
        return entry

    def lookup(self, op: str, dtype: str, quantity: str) -> Tolerance:
        """The tolerance of ``quantity`` (an output or ``grad.<input>``) of ``op`` at ``dtype``."""
        if dtype not in self.defaults:
            raise ParityError(f"{self.path}: no [defaults.{dtype}] table")
        merged = dict(self.defaults[dtype])
        entry = self.ops.get(op, {})
        merged.update(entry.get("*", {}))
        per_dtype = entry.get(dtype, {})
        merged.update(per_dtype.get("*", {}))
        merged.update(per_dtype.get(quantity, {}))
        return Tolerance(**merged)

    def require(self, dtypes: Iterable[str]) -> None:
        """Refuse up front a run in a dtype this file has no ``[defaults.<dtype>]`` for (every lookup needs
        one), rather than after its first case has run."""
        missing = sorted(set(dtypes) - set(self.defaults))
        if missing:
            tables = ", ".join(f"[defaults.{d}]" for d in missing)
            raise ParityError(f"{self.path}: no {tables} table, needed for the {', '.join(missing)} run")

    def check(self, name: str) -> dict[str, float]:
        """A named bound from ``[checks.<name>]``."""
        if name not in self.checks:
            raise ParityError(f"{self.path}: no [checks.{name}] table")
        return self.checks[name]


def default_path() -> Path:
    """tolerances.toml at the project root."""
    from parity.registry import project_root

    return project_root() / "tolerances.toml"


def load(path: Path | str | None = None, specs: Mapping[str, OpSpec] | None = None) -> Tolerances:
    """Read and validate a tolerances file (default: the project's)."""
    path = Path(path) if path is not None else default_path()
    try:
        text = path.read_text()
    except OSError as exc:
        raise ParityError(f"{path}: cannot read tolerances: {exc.strerror}") from exc
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ParityError(f"{path}: malformed TOML: {exc}") from exc
    return Tolerances(path, data, specs)


def uncommented_numbers(path: Path | str) -> list[int]:
    """Line numbers of ``key = <number>`` lines with no comment on the line or in the comment block
    directly above its table or key (every number must say where it came from)."""
    missing: list[int] = []
    commented = False
    for lineno, raw in enumerate(Path(path).read_text().splitlines(), start=1):
        line = raw.strip()
        if not line:
            commented = False
        elif line.startswith("#"):
            commented = True
        elif line.startswith("["):
            commented = commented or "#" in line
        elif "=" in line:
            value = line.split("=", 1)[1].split("#", 1)[0].strip()
            is_number = value.replace(".", "", 1).replace("e-", "", 1).replace("e", "", 1).isdigit()
            if is_number and "#" not in line and not commented:
                missing.append(lineno)
    return missing
