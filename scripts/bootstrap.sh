#!/usr/bin/env bash
# Create .venv and install parity with its pinned stack on a CPU machine. Idempotent: a second run
# returns at once unless pyproject.toml or this script changed.
set -euo pipefail
cd "$(dirname "$0")/.."
stamp=.venv/.parity-installed
want=$(cat pyproject.toml scripts/bootstrap.sh | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
[ -x .venv/bin/python ] || "${PYTHON:-python3}" -m venv .venv
py=.venv/bin/python
"$py" -m pip install -q --upgrade pip
# torch 2.13.0 first: this machine kind keeps its CPU wheel on disk; a bare "torch" requirement
# would pull a multi-GB CUDA build from PyPI.
"$py" -m pip install -q "torch==2.13.0"
"$py" -m pip install -q -e ".[dev]"
# mamba-ssm: only its Python/Triton code (no CUDA build, no transformers); it needs torch at build time.
MAMBA_SKIP_CUDA_BUILD=TRUE MAMBA_FORCE_BUILD=TRUE \
  "$py" -m pip install -q --no-deps --no-build-isolation "mamba-ssm==2.3.2.post1"
echo "$want" > "$stamp"
