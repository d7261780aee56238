"""Read any JSON that parity or its benchmarks write, into one model the report renders.

Every file written from now on carries ``{"format": "parity-<kind>", "version": N}``; files written before the
marker existed are recognized by their structure. A file that is not a parity result, is malformed, or comes
from a newer format is a ParityError with one line naming the file and the problem.
"""

from __future__ import annotations

import json
import math
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from parity.errors import ParityError

FORMATS: dict[str, int] = {
    "check": 1,  # parity check --json, the pytest plugin's --report input
    "gate": 1,  # parity gate / promote --json
    "tune": 1,  # parity tune --json
    "gate-speed": 1,  # bench/gate_speed.py --json
    "bench": 1,  # bench/bench.py --json
    "mixer": 1,  # bench/mixer.py --json
    "precision": 1,  # bench/ssd_bwd_precision.py --json
    "convergence": 1,  # bench/convergence.py's convergence.json
    "kernel-times": 1,  # bench/kernel_times.py --json
}
"""The newest version of each kind this parity reads (and writes)."""

HOST_PHASES = ("fwd", "fwd+bwd")
"""The steps bench/kernel_times.py times unprofiled (host time to issue one, wall time to finish it), stored per
backend as ``<phase>_host``."""

TITLES = {
    "check": "parity check",
    "gate": "parity gate",
    "tune": "parity tune",
    "gate-speed": "gate benchmark (bench/gate_speed.py)",
    "bench": "kernel benchmark (bench/bench.py)",
    "mixer": "mixer benchmark (bench/mixer.py)",
    "precision": "SSD backward precision sweep (bench/ssd_bwd_precision.py)",
    "convergence": "convergence parity (bench/convergence.py)",
    "kernel-times": "time per GPU kernel (bench/kernel_times.py)",
}


def stamped(kind: str, payload: dict[str, Any]) -> dict[str, Any]:
    """``payload`` with the format marker of ``kind`` first (what every writer puts in its JSON)."""
    return {"format": f"parity-{kind}", "version": FORMATS[kind], **payload}


@dataclass(frozen=True)
class Quantity:
    """One output or gradient of one case: its max-abs error against the oracle and its bound."""

    name: str
    err: float
    bound: float
    passed: bool

    @property
    def ratio(self) -> float:
        """err / bound (0 for an exact result under a zero bound, inf for an error over one)."""
        if self.bound > 0:
            return self.err / self.bound
        return 0.0 if self.err == 0 else math.inf


@dataclass
class Case:
    """One implementation on one problem, dtype and seed."""

    op: str
    impl: str
    dtype: str
    problem: dict[str, Any]
    seed: int
    passed: bool
    reproducer: str
    quantities: list[Quantity] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def ratio(self) -> float:
        """The worst err/bound over the case's quantities (inf when it raised)."""
        if self.errors:
            return math.inf
        return max((q.ratio for q in self.quantities), default=0.0)


@dataclass
class Result:
    """One input file: its kind, the raw JSON, and the cases in it (empty for benchmark kinds)."""

    path: str
    kind: str
    data: Any
    meta: dict[str, Any]
    cases: list[Case]

    @property
    def name(self) -> str:
        """The file's name with its parent folder (``h200-run8/gate-ssd.json``): short, unambiguous."""
        p = Path(self.path)
        return f"{p.parent.name}/{p.name}" if p.parent.name else p.name

    @property
    def passed(self) -> bool | None:
        """The verdict where the file has one; None for measurements."""
        if self.kind in ("check", "precision"):
            return all(c.passed for c in self.cases) and bool(self.cases)
        if self.kind == "gate":
            return bool(self.data.get("passed", all(c.passed for c in self.cases) and bool(self.cases)))
        if self.kind == "gate-speed":
            return all(r["passed"] for r in self.data["results"])
        if self.kind == "tune":
            return any(t.get("passed") for t in self.data["trials"])
        if self.kind == "convergence":
            return bool(self.data["passed"])
        return None


def _case(raw: dict[str, Any]) -> Case:
    """A case of ``parity check``/``gate`` JSON (CaseResult.to_dict)."""
    quantities = [
        Quantity(q["name"], float(q["candidate"]["max_abs"]), float(q["bound"]), q["passed"]) for q in raw["quantities"]
    ]
    return Case(
        op=raw["op"],
        impl=raw["impl"],
        dtype=raw["dtype"],
        problem=dict(raw["problem"]),
        seed=int(raw["seed"]),
        passed=bool(raw["passed"]),
        reproducer=raw.get("reproducer", ""),
        quantities=quantities,
        errors=list(raw.get("errors", [])),
    )


def _precision_cases(data: dict[str, Any]) -> list[Case]:
    """Records of bench/ssd_bwd_precision.py as cases of ssd_combined, one implementation per Helion config."""
    cases = []
    for record in data["records"]:
        problem = {**data["problem"], "chunk_size": record.get("chunk_size", data["problem"].get("chunk_size"))}
        name = record["config"]
        chosen = (
            f"--config {shlex.quote(json.dumps(data['configs'][name]))}" if name == "explicit" else f"--configs {name}"
        )
        reproducer = (
            f"python bench/ssd_bwd_precision.py --device {data['device']} --dtype {data['dtype']} "
            f"--seeds {record['seed']} {chosen} --problem {shlex.quote(json.dumps(problem, separators=(',', ':')))}"
        )
        quantities = [
            Quantity(n, float(q["helion"]), float(q["bound"]), bool(q["passed"]))
            for n, q in record["quantities"].items()
        ]
        cases.append(
            Case(
                op="ssd_combined",
                impl=f"helion-{name}",
                dtype=data["dtype"],
                problem=problem,
                seed=int(record["seed"]),
                passed=bool(record["passed"]),
                reproducer=reproducer,
                quantities=quantities,
                errors=list(record.get("errors", [])),
            )
        )
    return cases


def _legacy_kind(data: Any) -> str | None:
    """The kind of a file written before the format marker, from its structure."""
    if isinstance(data, dict):
        if isinstance(data.get("cases"), list) and "summary" in data:
            return "check"
        if {"worst_max_abs", "problems", "seeds", "determinism"} <= data.keys():
            return "gate"
        if isinstance(data.get("rows"), list) and "meta" in data:
            return "bench"
        if {"mixer", "norm_bwd"} <= data.keys():
            return "mixer"
        if isinstance(data.get("records"), list) and "configs" in data:
            return "precision"
    if isinstance(data, list) and data and all(isinstance(x, dict) for x in data):
        if all({"op", "determinism", "compile_groups"} <= x.keys() for x in data):
            return "gate-speed"
        if all({"config", "ms", "passed"} <= x.keys() for x in data):
            return "tune"
    return None


def _upgrade(kind: str, data: Any) -> Any:
    """An older file in the shape the current format has (the report reads one shape per kind)."""
    if kind == "gate-speed" and isinstance(data, list):
        return {"results": data}
    if kind == "tune" and isinstance(data, list):
        return {"trials": data}
    if kind == "gate" and "evidence" not in data:
        return {"evidence": data, "cases": []}
    return data


CONVERGENCE_CHECKS = (
    ("loss_curve", "max_ratio"),
    ("loss_curve", "worst_step"),
    ("grad_norm_curve", "max_ratio"),
    ("grad_norm_curve", "worst_step"),
    ("final_loss", "value"),
    ("final_loss", "ratio"),
    ("params", "ratio"),
)
"""The numbers of a convergence candidate's verdict that the report shows."""


def _numbers(values: Any) -> list[float]:
    """``values`` as a list of floats; TypeError if it is not a list of numbers (JSON's Infinity and NaN are)."""
    if not isinstance(values, list) or not all(type(v) in (int, float) for v in values):
        raise TypeError(f"expected a list of numbers, got {json.dumps(values)[:60]}")
    return [float(v) for v in values]


def _touch_convergence(data: Any) -> None:
    """Every field the report reads of a convergence.json: per task the runs' curves and step times, the band's
    bounds, each candidate's checks (or its error) and the verdicts."""
    (data["passed"], dict(data["meta"]))
    for task in dict(data["tasks"]).values():
        runs = dict(task["runs"])
        if not runs:
            raise ValueError("a task without runs")
        for run in runs.values():
            (_numbers(run["losses"]), _numbers(run["grad_norms"]), run["error"])
            _numbers([run["step_ms_median"]] if run["step_ms_median"] is not None else [])
        if task["band"] is not None:
            (_numbers(task["band"]["bound"]["loss"]), _numbers(task["band"]["bound"]["grad_norm"]))
        for verdict in dict(task["verdicts"]).values():
            if "loss_curve" not in verdict:
                (verdict["passed"], verdict["error"])
                continue
            verdict["passed"]
            _numbers([verdict[check][key] for check, key in CONVERGENCE_CHECKS])
            _numbers([verdict[c]["ratio"] for c in ("same_weights_loss", "same_weights_grad") if c in verdict])
            if not all(type(verdict[c].get("judged", True)) is bool for c, _ in CONVERGENCE_CHECKS):
                raise TypeError("a check's 'judged' is not true or false")
        (
            task["passed"],
            task["note"],
            _numbers([task["timing_skips_steps"], *dict(task["data"].get("levels") or {}).values()]),
        )


def _touch(kind: str, data: Any) -> None:
    """Read every field the report uses of a benchmark kind, so that a malformed file fails here, in one line."""
    if kind == "bench":
        for row in data["rows"]:
            (row["op"], row["shape"], dict(row["impls"]))
    elif kind == "mixer":
        (dict(data["mixer"]["backends"]), dict(data["norm_bwd"]["backends"]))
    elif kind == "tune":
        for trial in data["trials"]:
            (trial["config"], trial["ms"], trial["passed"])
    elif kind == "gate-speed":
        for run in data["results"]:
            (run["op"], run["impl"], run["dtype"], run["passed"], run["cases"], list(run["determinism"]))
    elif kind == "convergence":
        _touch_convergence(data)
    elif kind == "kernel-times":
        for backend in data["backends"].values():
            _numbers([backend["fwd_us"], backend["bwd_us"]])
            for step in HOST_PHASES:
                host = backend.get(f"{step}_host")  # optional: older files lack it
                if host is not None:
                    _numbers([host["host_us"], host["wall_us"]])
            for phase in ("fwd", "bwd"):
                for row in backend[phase].values():
                    _numbers([row["calls"], row["us"]])
        for phase in data.get("counterparts", {}).values():  # optional: files before it lack it
            for row in phase.values():
                _numbers([row["mamba_us"], row["helion_us"]] + ([] if row["ratio"] is None else [row["ratio"]]))


def parse(data: Any, path: str) -> Result:
    """A Result from already-decoded JSON; ParityError (one line, naming ``path``) if it is not one."""
    if isinstance(data, dict) and "format" in data:
        marker = data["format"]
        kind = marker[len("parity-") :] if isinstance(marker, str) and marker.startswith("parity-") else None
        if kind not in FORMATS:
            raise ParityError(f"{path}: not a parity result: unknown format {json.dumps(marker)}")
        version = data.get("version")
        if type(version) is not int or version < 1:
            raise ParityError(f"{path}: {marker} result with a bad version {json.dumps(version)}")
        if version > FORMATS[kind]:
            raise ParityError(
                f"{path}: written in a newer format ({marker} version {version}; this parity reads up to version "
                f"{FORMATS[kind]}): update parity to read it"
            )
    else:
        kind = _legacy_kind(data)
        if kind is None:
            raise ParityError(
                f"{path}: not a parity result (expected the JSON of parity check/gate/tune or of bench/bench.py, "
                "mixer.py, gate_speed.py, ssd_bwd_precision.py)"
            )
    data = _upgrade(kind, data)
    try:
        if kind in ("check", "gate"):
            cases = [_case(raw) for raw in data["cases"]]
        elif kind == "precision":
            cases = _precision_cases(data)
        else:
            cases = []
            _touch(kind, data)
        meta = dict(data.get("meta") or {}) if kind != "gate-speed" else {}
        if kind == "precision":
            meta = {k: data[k] for k in ("command", "device", "dtype", "torch", "gpu") if k in data}
        if kind == "gate-speed":
            first = data["results"][0] if data["results"] else {}
            meta = {k: first[k] for k in ("command", "gpu") if k in first}
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        detail = f"missing field {exc}" if isinstance(exc, KeyError) else f"{type(exc).__name__}: {exc}"
        raise ParityError(f"{path}: malformed parity-{kind} result: {detail}") from None
    return Result(path, kind, data, meta, cases)


def load(path: Path | str) -> Result:
    """Read and recognize one file."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ParityError(f"{path}: cannot read: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ParityError(f"{path}: not a parity result (not text)") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ParityError(f"{path}: not a parity result (not JSON: {exc})") from None
    return parse(data, str(path))
