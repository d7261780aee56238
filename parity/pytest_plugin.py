"""pytest integration: ``--parity-device``, hypothesis's ``--hypothesis-profile`` (ci or gpu), markers
``gpu``/``slow``, and one parametrized test case per registered op, implementation and dtype (any test that asks for the
``parity_case`` fixture), so registering an op adds its tests."""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from parity import device as parity_device_mod
from parity import profiles
from parity.errors import ParityError
from parity.spec import Impl, OpSpec, dtype_name


@dataclass(frozen=True)
class ParityCase:
    """One (op, implementation, dtype) combination: driven through hypothesis (CPU), or on the GPU judged on
    ``problems``, one compile group of the profile's problems (JSON, seed), so that a group's kernels compile
    in one pytest-xdist worker and the groups of the heavy ops spread over all of them."""

    spec: OpSpec
    impl: Impl
    dtype_name: str
    problems: tuple[tuple[str, int], ...] = ()


_START = pytest.StashKey[float]()
_PROPERTY = "parity_case"
"""The user property a test records each CaseResult under (xdist sends it from the workers to the controller)."""


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("parity")
    group.addoption(
        "--parity-device",
        choices=parity_device_mod.DEVICES,
        default=None,
        help="where kernels run: cpu (Triton interpreter, the default) or cuda",
    )
    group.addoption("--parity-op", action="append", default=[], help="only these ops (repeatable)")
    group.addoption(
        "--report",
        dest="parity_report",
        default=None,
        metavar="DIR",
        help="write the parity report (index.html, summary.md, results.json) of every parity case here",
    )
    group.addoption(
        "--parity-durations",
        default=None,
        metavar="XML",
        help="a junit XML (.xml or .xml.gz) of an earlier CUDA session: its tests' durations order this one, "
        "longest pytest-xdist group first (default: the ini option parity_cuda_durations)",
    )
    parser.addini(
        "parity_cuda_durations",
        "junit XML of an earlier CUDA session whose durations order a CUDA session's tests (longest group first)",
        default="",
    )


def _device(config: pytest.Config) -> str:
    return config.getoption("--parity-device") or parity_device_mod.default_device()


SLOW_SECONDS = 30.0
"""A test that takes this long is logged as it ends (the GPU suite's critical path)."""

_IN_WORKER = [False]
"""Whether this process is an xdist worker (its reports reach the controller, which prints them)."""


def pytest_configure(config: pytest.Config) -> None:
    _IN_WORKER[0] = hasattr(config, "workerinput")
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU (skipped without one)")
    config.addinivalue_line("markers", "slow: long-running; deselect with -m 'not slow'")
    config.addinivalue_line(
        "markers", "cpu: runs the CPU interpreter in this process (skipped in a --parity-device cuda session)"
    )
    out = config.getoption("parity_report")
    if out and not hasattr(config, "workerinput"):  # the controller (or the only process) writes the report
        from parity import render

        try:
            render.require()
        except ParityError as exc:
            raise pytest.UsageError(str(exc)) from None
        config.pluginmanager.register(_Reporter(config, out), "parity-report")
    device = _device(config)
    if device == "cuda" and _durations_source(config) and hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False  # xdist would re-sort the groups by size, undoing longest_first
    if device == "cpu" or _cuda_available():
        parity_device_mod.configure(device)
    if device == "cuda" and _cuda_available():
        from parity.workers import share_device

        if hasattr(config, "workerinput"):  # an xdist worker: gwK runs on GPU K mod the visible GPUs
            parity_device_mod.pin_worker(config.workerinput.get("workerid", os.environ.get("PYTEST_XDIST_WORKER")))
        share_device(int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[_START] = time.perf_counter()


@pytest.fixture
def parity_record(request: pytest.FixtureRequest) -> Any:
    """A callable that records a CaseResult for ``--report`` (a no-op without it, so that a junit XML does not
    carry every case)."""
    if not request.config.getoption("parity_report"):
        return lambda result: None

    def record(result: Any) -> None:
        request.node.user_properties.append((_PROPERTY, json.dumps(result.to_dict(), default=str)))

    return record


class _Reporter:
    """Gathers the recorded cases from every test's report (under xdist, in the controller, which receives the
    workers' reports with their user properties) and writes the report when the session ends."""

    def __init__(self, config: pytest.Config, out: str) -> None:
        self.config, self.out = config, Path(out)
        self.cases: list[dict[str, Any]] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call":
            self.cases += [json.loads(str(value)) for name, value in report.user_properties if name == _PROPERTY]

    def pytest_sessionfinish(self) -> None:
        from parity import render, report, results

        meta = {
            "command": " ".join(["pytest", *self.config.invocation_params.args]),
            "device": _device(self.config),
            "profile": _profile_name(self.config),
        }
        text = json.dumps(results.stamped("check", {"meta": meta, "cases": self.cases}), indent=1) + "\n"
        report.atomic_write(self.out / "results.json", text)
        render.write([results.parse(json.loads(text), str(self.out / "results.json"))], self.out)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """A failure's reason, and a slow test's duration, on one line as soon as it happens (under xdist, in the
    controller): a batch job cut by its time limit never reaches pytest's end-of-run summary, and its log must
    still say why tests failed and where the time went."""
    if _IN_WORKER[0]:
        return
    if report.when == "call" and report.duration >= SLOW_SECONDS:
        sys.stderr.write(f"parity: slow: {report.nodeid}: {report.duration:.1f} s\n")
    if not report.failed:
        return
    crash = getattr(report.longrepr, "reprcrash", None)
    lines = (crash.message if crash is not None else str(report.longrepr)).strip().splitlines() or ["?"]
    reason = " | ".join(line.strip() for line in lines[:6])  # a parity failure's problem, then its errors
    sys.stderr.write(f"parity: {report.when} failed: {report.nodeid}: {reason[:1500]}\n")
    sys.stderr.flush()


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """One line with the device, the profile and the wall time of the whole run (the GPU suite's budget)."""
    start = config.stash.get(_START, None)
    if start is not None:
        terminalreporter.write_line(
            f"parity: device {_device(config)}, profile {_profile_name(config)}, "
            f"{time.perf_counter() - start:.1f} s wall"
        )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip GPU tests without a GPU, and in a CUDA session the tests that switch this process to the CPU
    interpreter (a process is set up for one device; the CPU suite runs them). A CUDA session runs its longest
    groups first when it has an earlier session's durations (see :func:`longest_first`)."""
    on_cuda = _device(config) == "cuda"
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
    skip_cpu = pytest.mark.skip(reason="runs the CPU interpreter: part of the CPU suite, not of a CUDA session")
    for item in items:
        if "gpu" in item.keywords and not _cuda_available():
            item.add_marker(skip_gpu)
        if "cpu" in item.keywords and on_cuda:
            item.add_marker(skip_cpu)
    source = _durations_source(config)
    if on_cuda and source:
        path = Path(source) if Path(source).is_absolute() else config.rootpath / source
        if not path.is_file():
            raise pytest.UsageError(f"parity: durations file {source} does not exist")
        items[:] = longest_first(items, junit_durations(path))


def _durations_source(config: pytest.Config) -> str:
    """The junit XML whose durations order a CUDA session ('' for none)."""
    return config.getoption("--parity-durations") or config.getini("parity_cuda_durations")


def _test_key(nodeid: str) -> str:
    """A test's id without the ``@group`` suffix that pytest-xdist's loadgroup adds."""
    return nodeid.split("@", 1)[0]


def junit_durations(path: Path) -> dict[str, float]:
    """Seconds per test id (without ``@group``) in a junit XML file, gzipped or not."""
    import gzip
    import xml.etree.ElementTree as ET

    with gzip.open(path) if path.suffix == ".gz" else path.open("rb") as stream:
        tree = ET.parse(stream)
    durations: dict[str, float] = {}
    for case in tree.iter("testcase"):
        module, name = case.get("classname", ""), case.get("name", "")
        nodeid = f"{module.replace('.', '/')}.py::{name}"
        durations[_test_key(nodeid)] = float(case.get("time") or 0.0)
    return durations


def longest_first(items: list[pytest.Item], durations: dict[str, float]) -> list[pytest.Item]:
    """``items`` with their pytest-xdist groups (one test where unmarked) ordered by summed earlier duration, longest
    first, keeping the order within a group: loadgroup hands groups out in collection order, so the long ones no
    longer start last and hold up the end of the run. A test the durations lack counts as their mean."""
    mean = sum(durations.values()) / len(durations) if durations else 0.0
    cost: dict[str, float] = {}
    first: dict[str, int] = {}
    keys = []
    for index, item in enumerate(items):
        mark = item.get_closest_marker("xdist_group")
        group = str(mark.args[0] if mark.args else mark.kwargs.get("name")) if mark is not None else item.nodeid
        cost[group] = cost.get(group, 0.0) + durations.get(_test_key(item.nodeid), mean)
        first.setdefault(group, index)
        keys.append((group, index))
    order = sorted(keys, key=lambda key: (-cost[key[0]], first[key[0]], key[1]))
    return [items[index] for _, index in order]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "parity_case" not in metafunc.fixturenames:
        return
    from parity import registry

    wanted = set(metafunc.config.getoption("--parity-op"))
    on_gpu = _device(metafunc.config) == "cuda"
    profile = profiles.get_profile(_profile_name(metafunc.config))
    params = []
    for name, spec in sorted(registry.load().items()):
        if wanted and name not in wanted:
            continue
        # One process per op shares the oracle and baseline runs of the op's problems among its implementations;
        # on the GPU, one process per op, dtype and compile group (parity.spec.OpSpec.compile_key).
        groups: list[tuple[tuple[str, int], ...]] = [()]
        if on_gpu:
            from parity.strategies import plan

            keyed: dict[str, list[tuple[str, int]]] = {}
            for problem, seed in plan(spec, profile, "cuda"):
                key = json.dumps(spec.compile_key(problem), default=str)
                keyed.setdefault(key, []).append((json.dumps(problem, sort_keys=True), seed))
            groups = [tuple(g) for g in keyed.values()]
        for impl in spec.impls().values():
            for dtype in spec.dtypes:
                if not profile.wants(dtype_name(dtype)):
                    continue
                for number, problems in enumerate(groups):
                    where = f"{name}-{dtype_name(dtype)}-g{number}" if on_gpu else name
                    marks = (
                        [pytest.mark.gpu, pytest.mark.xdist_group(where)]
                        if on_gpu
                        else [pytest.mark.xdist_group(where)]
                    )
                    case = ParityCase(spec, impl, dtype_name(dtype), problems)
                    test_id = f"{name}-{impl.name}-{case.dtype_name}" + (f"-g{number}" if on_gpu else "")
                    params.append(pytest.param(case, id=test_id, marks=marks))
    metafunc.parametrize("parity_case", params)


@pytest.fixture(scope="session")
def parity_device(pytestconfig: pytest.Config) -> str:
    """The device the parity tests run on."""
    return _device(pytestconfig)


@pytest.fixture(scope="session")
def parity_profile(pytestconfig: pytest.Config, parity_device: str):
    """The hypothesis profile (ci on cpu, gpu on cuda unless given)."""
    return profiles.get_profile(_profile_name(pytestconfig))


def _profile_name(config: pytest.Config) -> str:
    """The profile given with hypothesis's ``--hypothesis-profile`` (hypothesis loads it), else the device's."""
    return config.getoption("hypothesis_profile", None) or ("gpu" if _device(config) == "cuda" else "ci")


@pytest.fixture(scope="session")
def parity_tolerances():
    """The project's tolerances.toml, validated against the registry."""
    from parity import registry, tolerances

    return tolerances.load(specs=registry.load())
