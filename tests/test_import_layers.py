"""Import layering: a training process that uses the drop-in kernels loads no part of the harness, and the
references import no kernel (the oracle never depends on what it judges). Each check runs in a fresh
interpreter, so that modules imported by other tests cannot hide an import."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

HARNESS = ("hypothesis", "rich", "pytest", "_pytest", "reference", "ops")
"""Top-level packages a training process must not import (it may use contract/, the argument checks)."""

ENGINE = ("parity.spec", "parity.registry", "parity.runner", "parity.strategies", "parity.report", "parity.store")
ENGINE += ("parity.gate", "parity.tune", "parity.workers", "parity.cli", "parity.tolerances", "parity.compare")
"""parity modules a training process must not import (it may use parity.lookup and parity.errors)."""


def _modules_after(code: str) -> list[str]:
    """The names in sys.modules after running ``code`` in a fresh interpreter at the project root."""
    script = code + "\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))\n"
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300, check=True
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_drop_ins_import_no_harness(tmp_path):
    """Import both drop-ins and run a config lookup (against an empty store): beyond what torch, triton and
    helion load themselves (helion imports rich for its autotuner's progress bar), nothing of the harness: no
    reference, no op spec, no engine module."""
    libraries = set(_modules_after("import helion, torch, triton"))
    loaded = _modules_after(
        "import warnings\n"
        "from kernels.layernorm_gated import rmsnorm_fn\n"
        "from kernels.ssd_combined import mamba_chunk_scan_combined\n"
        "from parity.lookup import StoreReader, promoted_config\n"
        "with warnings.catch_warnings():\n"
        "    warnings.simplefilter('ignore')\n"
        f"    assert promoted_config('ssd_combined', 'kernels.ssd_combined:mamba_chunk_scan_combined', 'bfloat16',"
        f" 'b', 'cpu', StoreReader({str(tmp_path)!r})) is None\n"
    )
    assert "kernels.ssd_combined" in loaded and "contract.checks" in loaded  # the probe ran
    harness = [m for m in loaded if (m.partition(".")[0] in HARNESS and m not in libraries) or m in ENGINE]
    assert not harness, f"a training process imports harness modules: {harness}"
    assert "hypothesis" not in loaded and "pytest" not in loaded


def test_references_import_no_kernel():
    """Import every module of reference/: none of kernels/ comes with them."""
    loaded = _modules_after(
        "import importlib, pkgutil, reference\n"
        "for info in pkgutil.iter_modules(reference.__path__):\n"
        "    importlib.import_module(f'reference.{info.name}')\n"
    )
    assert "reference.mamba_triton" in loaded and "reference.chunk_scan" in loaded  # the probe ran
    kernels = [m for m in loaded if m.partition(".")[0] == "kernels"]
    assert not kernels, f"reference/ imports kernel modules: {kernels}"
