"""The command line: usage and user errors are one line on stderr, exit 2, no traceback, and
nothing is written to the store."""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys
from pathlib import Path

import pytest

from parity.cli import main

ROOT = Path(__file__).resolve().parents[1]


def parity(*args: str) -> subprocess.CompletedProcess:
    """``parity ARGS`` in this process (the registry is loaded once; the plugin set the device)."""
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
        code = main(list(args))
    return subprocess.CompletedProcess(args, code, "", stderr.getvalue())


def _one_line_error(proc: subprocess.CompletedProcess, needle: str) -> None:
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert needle in lines[0], lines[0]


def test_a_user_error_in_a_fresh_process_prints_no_traceback():
    proc = subprocess.run([sys.executable, "-m", "parity", "check", "--op", "no_such_op"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    _one_line_error(proc, "unknown op 'no_such_op'")


@pytest.mark.parametrize(("args", "needle"), [
    (("frobnicate",), "invalid choice: 'frobnicate'"),
    (("check", "--device", "tpu"), "invalid choice: 'tpu'"),
    (("check", "--op", "no_such_op"), "unknown op 'no_such_op'"),
    (("check", "--op", "chunk_cumsum", "--impl", "cuda-magic"), "has no implementation 'cuda-magic'"),
    (("check", "--op", "chunk_cumsum", "--problem", "{oops"), "--problem is not valid JSON"),
    (("check", "--op", "chunk_cumsum", "--problem", '{"batch": 1, "seqlen": 4, "chunk_size": 16, "nheads": 3, '
      '"ngroups": 2, "headdim": 8, "dstate": 16}'), "nheads=3 is not a multiple of ngroups=2"),
    (("check", "--dtype", "fp8"), "unknown dtype 'fp8'"),
    (("gate", "chunk_cumsum"), "the following arguments are required: --config"),
])
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
    proc = subprocess.run([sys.executable, "-m", "parity", "check", "--op", "chunk_cumsum"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    _one_line_error(proc, "tolerances.toml: malformed TOML")


def test_a_config_that_does_not_compile_is_a_one_line_error(tmp_path):
    config = tmp_path / "bad.json"
    config.write_text('{"bwd": {"block_sizes": [16, 1], "num_warpz": 4}}')
    store = tmp_path / "store"
    _one_line_error(parity("promote", "layernorm_gated", "--config", str(config), "--store", str(store)),
                    "does not compile or run")
    assert not store.exists()
