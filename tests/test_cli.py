"""The command line: usage and user errors are one line on stderr, exit 2, no traceback, nothing run and
nothing written (store, JSON); progress shows in a log file as well as on a terminal."""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from parity import lookup
from parity.cli import main

pytestmark = pytest.mark.cpu  # each test runs the CPU interpreter in this process

ROOT = Path(__file__).resolve().parents[1]


def parity(*args: str, stdout: io.StringIO | None = None) -> subprocess.CompletedProcess:
    """``parity ARGS`` in this process (the registry is loaded once; the plugin set the device)."""
    stderr, stdout = io.StringIO(), stdout or io.StringIO()
    with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(stdout):
        code = main(list(args))
    return subprocess.CompletedProcess(args, code, stdout.getvalue(), stderr.getvalue())


def _one_line_error(proc: subprocess.CompletedProcess, needle: str) -> None:
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    assert needle in lines[0], lines[0]


def test_a_user_error_in_a_fresh_process_prints_no_traceback():
    proc = subprocess.run(
        [sys.executable, "-m", "parity", "check", "--op", "no_such_op"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    _one_line_error(proc, "unknown op 'no_such_op'")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("frobnicate",), "invalid choice: 'frobnicate'"),
        (("check", "--device", "tpu"), "invalid choice: 'tpu'"),
        (("check", "--op", "no_such_op"), "unknown op 'no_such_op'"),
        (("check", "--op", "chunk_cumsum", "--impl", "cuda-magic"), "has no implementation 'cuda-magic'"),
        (("check", "--op", "chunk_cumsum", "--problem", "{oops"), "--problem is not valid JSON"),
        (
            (
                "check",
                "--op",
                "chunk_cumsum",
                "--problem",
                '{"batch": 1, "seqlen": 4, "chunk_size": 16, "nheads": 3, "ngroups": 2, "headdim": 8, "dstate": 16}',
            ),
            "'nheads' (3) must be a multiple of 'ngroups' (2)",
        ),
        (("check", "--dtype", "fp8"), "unknown dtype 'fp8'"),
        (("gate", "chunk_cumsum"), "the following arguments are required: --config"),
        # counts: negative or zero is a usage error, not a silent no-op
        (("check", "--examples", "-1"), "argument --examples: must be an integer >= 0, got -1"),
        (("check", "--examples", "many"), "argument --examples: expected an integer >= 0, got 'many'"),
        (("gate", "chunk_cumsum", "--config", "c.json", "--examples", "-3"), "argument --examples: must be an integer"),
        (("promote", "chunk_cumsum", "--config", "c.json", "--examples", "-1"), "argument --examples: must be"),
        (("tune", "ssd_combined", "--seeds", "-1"), "argument --seeds: must be an integer >= 0, got -1"),
        (("tune", "ssd_combined", "--budget", "0"), "argument --budget: must be an integer >= 1, got 0"),
        (("tune", "ssd_combined"), "tuning needs --device cuda"),
    ],
)
def test_usage_errors_are_one_line_exit_2(args, needle):
    _one_line_error(parity(*args), needle)


@pytest.mark.parametrize(("text", "needle"), [("{nope", "malformed JSON"), ("[1, 2]", "must be a JSON object")])
def test_malformed_config_file_writes_nothing(tmp_path, text, needle):
    config = tmp_path / "cfg.json"
    config.write_text(text)
    store = tmp_path / "store"
    _one_line_error(parity("promote", "chunk_cumsum", "--config", str(config), "--store", str(store)), needle)
    assert not store.exists()


def test_missing_config_file(tmp_path):
    _one_line_error(parity("gate", "chunk_cumsum", "--config", str(tmp_path / "absent.json")), "cannot read config")


def test_malformed_tolerances_file_is_named(tmp_path):
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    (tmp_path / "tolerances.toml").write_text("[defaults.float32\n")
    proc = subprocess.run(
        [sys.executable, "-m", "parity", "check", "--op", "chunk_cumsum"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    _one_line_error(proc, "tolerances.toml: malformed TOML")


def test_a_config_that_does_not_compile_is_a_one_line_error(tmp_path):
    config = tmp_path / "bad.json"
    config.write_text('{"bwd": {"block_sizes": [16, 1], "num_warpz": 4}}')
    store = tmp_path / "store"
    _one_line_error(
        parity("promote", "layernorm_gated", "--config", str(config), "--store", str(store)), "does not compile or run"
    )
    assert not store.exists()


@pytest.fixture()
def nothing_runs(monkeypatch):
    """Fail the test if any case, gate or store write starts: bad input must be refused before any work."""

    def ran(*args, **kwargs):
        raise AssertionError("work started despite bad input")

    # Imported before patching: a module first imported under the patch would keep the stand-in for good (parity.gate
    # and parity.tune import run_problem by name), failing later tests in this process.
    for module in ("parity.gate", "parity.tune", "parity.store", "parity.strategies"):
        importlib.import_module(module)
    for target in (
        "parity.strategies.drive",
        "parity.runner.run_problem",
        "parity.gate.gate",
        "parity.gate.preflight",
        "parity.store.Store.put",
    ):
        monkeypatch.setattr(target, ran)


def _defaults(*dtypes: str) -> str:
    return "".join(f"[defaults.{d}]\nfactor = 2.0\natol = 1e-5\nrtol = 1e-4\n" for d in dtypes)


@pytest.fixture()
def project(tmp_path, monkeypatch):
    """A project directory with its own tolerances.toml (the registry stays the one loaded): returns a writer."""
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    monkeypatch.chdir(tmp_path)

    def write(tolerances: str) -> Path:
        (tmp_path / "tolerances.toml").write_text(tolerances)
        return tmp_path

    return write


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("op = 3\n" + _defaults("float32", "float16"), "[op] must be a table, got int 3"),
        ("defaults = 3\n", "[defaults] must be a table, got int 3"),
        (_defaults("float32", "float16") + "[op]\nchunk_scan = 3\n", "[op.chunk_scan] must be a table, got int 3"),
        (_defaults("float32", "float16") + "[op.chunk_scan]\nfloat16 = 3\n", "[op.chunk_scan.float16] must be a table"),
    ],
)
def test_a_value_where_a_table_goes_in_the_tolerances_file(project, nothing_runs, text, needle):
    root = project(text)
    proc = parity("check", "--op", "chunk_cumsum", "--json", str(root / "out.json"))
    _one_line_error(proc, needle)
    assert "tolerances.toml" in proc.stderr and not (root / "out.json").exists()


@pytest.mark.parametrize(
    "args",
    [
        ("check", "--op", "chunk_cumsum", "--dtype", "float16"),
        ("check", "--op", "chunk_cumsum"),  # the ci profile runs float32 and float16
        ("gate", "chunk_cumsum", "--config", "cfg.json", "--dtype", "float16"),
        ("promote", "chunk_cumsum", "--config", "cfg.json", "--store", "store"),
    ],
)
def test_a_dtype_without_default_tolerances_is_refused_before_the_first_case(project, nothing_runs, args):
    root = project(_defaults("float32", "bfloat16"))
    (root / "cfg.json").write_text('{"block_sizes": [4], "num_warps": 4}')
    proc = parity(*args, "--json", str(root / "out.json"))
    _one_line_error(proc, "no [defaults.float16] table, needed for the float16 run")
    assert not (root / "out.json").exists() and not (root / "store").exists()


@pytest.mark.parametrize(
    ("op", "config", "needle"),
    [
        ("chunk_cumsum", {"block_sizes": [4], "num_warps": -2}, "num_warps = -2 must be a positive power of two"),
        ("chunk_cumsum", {"block_sizes": [4], "num_warps": 6}, "num_warps = 6 must be a positive power of two"),
        ("chunk_cumsum", {"block_sizes": [4], "num_warps": True}, "num_warps = true must be a positive power of two"),
        ("chunk_scan", {"block_sizes": [32, 16, 0, 16]}, "block_sizes[2] = 0 must be a positive power of two"),
        ("chunk_scan", {"block_sizes": [32, 16, 24, 16]}, "block_sizes[2] = 24 must be a positive power of two"),
        ("chunk_scan", {"block_sizes": [32, 16, 16, 16], "num_stages": 0}, "num_stages = 0 must be an integer >= 1"),
        (
            "layernorm_gated",
            {"fwd": {"block_sizes": [4]}, "bwd": {"block_sizes": [8, 3], "num_warps": 2}},
            "bwd.block_sizes[1] = 3 must be a positive power of two",
        ),
        (
            "ssd_combined",
            {"chunk_cumsum": {"block_sizes": [1]}, "chunk_scan": {"block_sizes": [16], "num_warps": -2}},
            "chunk_scan.num_warps = -2 must be a positive power of two",
        ),
        ("ssd_combined", {"bwd_db": {"block_sizes": 16}}, "bwd_db.block_sizes = 16 must be a list"),
    ],
)
def test_a_config_with_bad_helion_fields_is_refused_up_front(tmp_path, nothing_runs, op, config, needle):
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps(config))
    store = tmp_path / "store"
    _one_line_error(parity("promote", op, "--config", str(path), "--store", str(store)), f"cfg.json: {needle}")
    assert not store.exists()


SSD_SHAPE = {"batch": 1, "seqlen": 64, "chunk_size": 64, "nheads": 8, "ngroups": 2, "headdim": 64, "dstate": 128}


@pytest.mark.parametrize(
    ("shape", "needle"),
    [
        ({k: v for k, v in SSD_SHAPE.items() if k != "chunk_size"}, "'chunk_size'"),
        ({k: v for k, v in SSD_SHAPE.items() if k != "dstate"}, "'dstate'"),
    ],
)
def test_a_bucket_shape_missing_a_field_is_refused_before_the_gate(tmp_path, nothing_runs, shape, needle):
    config = tmp_path / "cfg.json"
    config.write_text("{}")
    store = tmp_path / "store"
    proc = parity(
        "promote", "ssd_combined", "--config", str(config), "--store", str(store), "--bucket-shape", json.dumps(shape)
    )
    _one_line_error(proc, needle)
    assert "--bucket-shape" in proc.stderr and not store.exists()


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"batch": True}, "--problem: ssd_combined: problem field 'batch' must be an integer >= 1, got true"),
        ({"dt_limit": [0.1]}, "--problem: ssd_combined: problem field 'dt_limit' must be two numbers"),
        ({"nseq": -1}, "--problem: ssd_combined: problem field 'nseq' must be an integer >= 0, got -1"),
    ],
)
def test_a_bad_problem_is_refused_before_any_case(tmp_path, nothing_runs, change, needle):
    proc = parity(
        "check",
        "--op",
        "ssd_combined",
        "--problem",
        json.dumps({**SSD_SHAPE, **change}),
        "--json",
        str(tmp_path / "out.json"),
    )
    _one_line_error(proc, needle)
    assert not (tmp_path / "out.json").exists()


def test_a_bucket_shape_outside_the_schema_is_refused_before_the_gate(tmp_path, nothing_runs):
    config = tmp_path / "cfg.json"
    config.write_text("{}")
    shape = json.dumps({**SSD_SHAPE, "ngroups": 3})
    proc = parity(
        "promote", "ssd_combined", "--config", str(config), "--store", str(tmp_path / "s"), "--bucket-shape", shape
    )
    _one_line_error(proc, "--bucket-shape: ssd_combined: problem field 'nheads' (8) must be a multiple of 'ngroups'")
    assert not (tmp_path / "s").exists()


def test_a_bucket_that_cannot_be_computed_is_one_line_for_an_op_without_a_schema():
    import dataclasses

    from toy_op import reference, spec

    from parity.cli import _bucket
    from parity.errors import ParityError

    toy = dataclasses.replace(spec(reference), bucket=lambda p: f"b{p['batch'] // p['chunk']}")
    assert _bucket(toy, {"batch": 8, "chunk": 4}, "--bucket-shape") == "b2"
    with pytest.raises(ParityError, match=r"--bucket-shape \{\"batch\": 8\} has no field 'chunk'"):
        _bucket(toy, {"batch": 8}, "--bucket-shape")
    with pytest.raises(ParityError, match=r"cannot compute the store bucket of decay_sum: ZeroDivisionError"):
        _bucket(toy, {"batch": 8, "chunk": 0}, "--bucket-shape")


def test_configs_verify_reports_malformed_entries_as_stale(tmp_path, monkeypatch):
    """An entry missing a field, one whose kernel module is gone and one that is not an object: a STALE line
    each (exit 1), next to an OK entry; ``list`` still lists all four. A stray temp file is not a store file."""
    from parity.store import Key, Store

    (tmp_path / "toykernel.py").write_text("def kernel(**kw):\n    return 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    store = Store(tmp_path / "store")
    good = store.put(Key("cpu-interpreter", "toy", "toykernel:kernel", "float32", "b1"), {"v": 1}, {})
    gone = {**good, "target": "no_such_kernels.gone:kernel", "bucket": "b2"}
    partial = {k: v for k, v in good.items() if k != "kernel_hash"} | {"bucket": "b3"}
    path = store.path("cpu-interpreter", "toy")
    path.write_text(json.dumps({"device": "cpu-interpreter", "op": "toy", "entries": [good, gone, partial, 7]}))
    (path.parent / ".toy.json.abc123.tmp").write_text('{"half": ')
    try:
        proc = parity("configs", "verify", "--store", str(store.root))
        listed = parity("configs", "list", "--store", str(store.root))
    finally:
        sys.modules.pop("toykernel", None)
    assert proc.returncode == 1 and proc.stderr == "" and "Traceback" not in proc.stdout, proc.stdout + proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 4 and lines[0].endswith("  OK"), lines
    assert (
        "bucket=b2" in lines[1]
        and "STALE: the kernel no_such_kernels.gone:kernel cannot be loaded: ModuleNotFoundError" in lines[1]
    )
    assert "bucket=b3" in lines[2] and "STALE: invalid entry: missing field(s) kernel_hash" in lines[2]
    assert "STALE: invalid entry: not an object (int)" in lines[3]
    assert listed.returncode == 0 and len(listed.stdout.strip().splitlines()) == 4 and ".tmp" not in listed.stdout


def test_configs_on_an_empty_store_say_so(tmp_path):
    """No entry is a line saying so, not silence (and not a failure: nothing is stale)."""
    for action in ("list", "verify"):
        proc = parity("configs", action, "--store", str(tmp_path / "none"))
        assert proc.returncode == 0 and proc.stdout.strip() == f"no entries in {tmp_path / 'none'}", proc.stdout


def test_every_committed_store_entry_is_current():
    """The entries under configs/ (promoted on the GPU) match main's kernel sources: a kernel edited after its
    promotion would raise StaleConfigError where training loads it. Re-promote it, or remove its entry."""
    proc = parity("configs", "verify")
    assert proc.returncode == 0 and "STALE" not in proc.stdout, proc.stdout + proc.stderr


def test_configs_verify_compares_versions_on_the_entrys_own_device_only(tmp_path, monkeypatch):
    """A GPU's entry gated under other library versions (the GPU image's torch, not this machine's) is OK here on its
    kernel source, and STALE once that source changes; an entry of this machine with another version is STALE."""
    from parity.store import Key, Store

    kernel = tmp_path / "toykernel.py"
    kernel.write_text("def kernel(**kw):\n    return 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    store = Store(tmp_path / "store")
    for device in ("nvidia-h200-sm90", "cpu-interpreter"):
        entry = store.put(Key(device, "toy", "toykernel:kernel", "float32", "b1"), {"v": 1}, {})
        entry["versions"] = {**entry["versions"], "torch": "2.11.0+cu130"}
        path = store.path(device, "toy")
        path.write_text(json.dumps({"device": device, "op": "toy", "entries": [entry]}))
    try:
        proc = parity("configs", "verify", "--store", str(store.root))
        kernel.write_text("def kernel(**kw):\n    return 2\n")
        sys.modules.pop("toykernel", None)
        lookup.clear_caches()  # source hashes are memoized per process
        edited = parity("configs", "verify", "--store", str(store.root))
    finally:
        sys.modules.pop("toykernel", None)
    lines = dict(line.split(" ", 1) for line in proc.stdout.strip().splitlines())
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert lines["nvidia-h200-sm90"].endswith("OK (kernel source; versions are compared on nvidia-h200-sm90 itself)")
    assert (
        "STALE: torch is" in lines["cpu-interpreter"]
        and "the entry was gated with 2.11.0+cu130" in lines["cpu-interpreter"]
    )
    assert edited.returncode == 1 and all("the source of toykernel changed" in x for x in edited.stdout.splitlines())


class _Log(io.StringIO):
    """A non-terminal stdout that remembers what had been written at each flush."""

    def __init__(self, tty: bool = False) -> None:
        super().__init__()
        self.tty = tty
        self.flushed: list[str] = []

    def isatty(self) -> bool:
        return self.tty

    def flush(self) -> None:
        self.flushed.append(self.getvalue())


TINY = '{"batch": 1, "seqlen": 4, "chunk_size": 16, "nheads": 2, "ngroups": 2, "headdim": 8, "dstate": 16}'


def test_check_prints_progress_lines_to_a_log_file():
    log = _Log()
    proc = parity(
        "check",
        "--op",
        "chunk_cumsum",
        "--impl",
        "triton",
        "--dtype",
        "float32",
        "--dtype",
        "float16",
        "--forward-only",
        "--problem",
        TINY,
        stdout=log,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "parity check: 2 op x dtype runs on cpu (ci profile)"
    assert lines[1].startswith('[1] ok chunk_cumsum triton float32 seed=0 {"batch": 1') and lines[1].endswith(" s)")
    assert lines[2].startswith("done 1/2: chunk_cumsum float32, 1 cases, 0 failed, ")
    assert lines[3].startswith("[2] ok chunk_cumsum triton float16") and lines[4].startswith("done 2/2: ")
    # each line reached the log (flushed) before the run went on
    assert any(snapshot.endswith(lines[1] + "\n") for snapshot in log.flushed)
    assert any(snapshot.endswith(lines[2] + "\n") for snapshot in log.flushed)


def test_check_verbose_logs_each_phase_with_its_seconds(caplog):
    """``--verbose``: the inputs, the oracle and each implementation's run, in the order they ran (the baseline
    last), each with its seconds: where a long problem's minutes go."""
    from parity import runner

    runner.forget()  # an earlier test's oracle and baseline runs of this problem would be reused, not logged
    with caplog.at_level("INFO", logger="parity.runner"):
        proc = parity(
            "check", "--op", "chunk_cumsum", "--dtype", "float32", "--forward-only", "--problem", TINY, "--verbose"
        )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    phases = [r.getMessage() for r in caplog.records if r.name == "parity.runner"]
    assert [m.split(": ", 1)[1].rsplit(" in ", 1)[0] for m in phases] == [
        "inputs",
        "oracle torch",
        "helion",
        "helion-cfg0",
        "helion-cfg1",
        "triton",
        "baseline triton",
    ], phases
    assert all(m.startswith("chunk_cumsum float32: ") and m.endswith(" s") for m in phases), phases


def test_check_on_a_terminal_shows_the_bar_not_the_lines():
    proc = parity(
        "check",
        "--op",
        "chunk_cumsum",
        "--impl",
        "triton",
        "--dtype",
        "float32",
        "--forward-only",
        "--problem",
        TINY,
        stdout=_Log(tty=True),
    )
    assert proc.returncode == 0 and "[1] ok" not in proc.stdout and "done 1/1" not in proc.stdout
    assert "parity \x1b[90m━━" in proc.stdout and " passed, " in proc.stdout  # the bar was drawn


def test_gate_and_promote_in_fp16_pass_a_correct_helion_kernel_with_progress(tmp_path, monkeypatch):
    """A plain CPU gate of a real Helion port, in fp16 (the poison fill once overflowed fp16 and failed every
    case): no false alarm, one flushed line per case, and the promoted entry verifies. Only the op's first
    pinned problem, so the test judges the gate, not whichever extreme problems the op pins."""
    import dataclasses

    from parity import registry

    norm = registry.get("layernorm_gated")
    monkeypatch.setitem(registry._REGISTRY, norm.name, dataclasses.replace(norm, examples=norm.examples[:1]))
    config = tmp_path / "cfg.json"
    config.write_text('{"fwd": {"block_sizes": [4], "num_warps": 2}, "bwd": {"block_sizes": [8, 4], "num_warps": 2}}')
    store = tmp_path / "store"
    log = _Log()
    proc = parity(
        "promote",
        "layernorm_gated",
        "--config",
        str(config),
        "--dtype",
        "float16",
        "--examples",
        "0",
        "--store",
        str(store),
        stdout=log,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "gating layernorm_gated helion@cfg.json in float16 on cpu"
    assert lines[1].startswith("[1] ok layernorm_gated helion@cfg.json float16 seed=0")
    assert any(snapshot.endswith(lines[1] + "\n") for snapshot in log.flushed)
    assert "FAIL" not in proc.stdout and "promoted to" in proc.stdout
    verify = parity("configs", "verify", "--store", str(store))
    assert verify.returncode == 0 and "float16 bucket=gs512" in verify.stdout and verify.stdout.rstrip().endswith("OK")


def test_check_with_workers_gives_the_cases_of_one_process(tmp_path):
    """--workers 2: the problems, grouped by op, dtype and compile key, run in two spawned processes; every case
    is reported, with one "done" line per op x dtype, and the JSON holds the same cases a one-process run gives."""
    runs = {}
    for workers in ("1", "2"):
        out = tmp_path / f"w{workers}.json"
        proc = parity(
            "check",
            "--op",
            "chunk_cumsum",
            "--impl",
            "triton",
            "--dtype",
            "float32",
            "--dtype",
            "float16",
            "--forward-only",
            "--examples",
            "0",
            "--workers",
            workers,
            "--json",
            str(out),
            stdout=_Log(),
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        runs[workers] = sorted(
            (c["dtype"], json.dumps(c["problem"], sort_keys=True), c["passed"])
            for c in json.loads(out.read_text())["cases"]
        )
        if workers == "2":
            assert sorted(line.split(":")[0] for line in proc.stdout.splitlines() if line.startswith("done ")) == [
                "done chunk_cumsum float16",
                "done chunk_cumsum float32",
            ]
    assert runs["1"] == runs["2"] and runs["1"]
