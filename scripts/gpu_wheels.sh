#!/usr/bin/env bash
# Fill .whl/ (git-ignored) with what the offline H200 image lacks: helion 1.5.0 and its filecheck
# dependency, matplotlib and its dependencies (for --report there), and mamba-ssm built as a pure-Python
# wheel (no CUDA extensions). Run on a CPU machine
# after scripts/bootstrap.sh; carry .whl to the GPU (see README).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .whl
py=.venv/bin/python
"$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d .whl helion==1.5.0 filecheck==1.0.6 \
  matplotlib contourpy cycler fonttools kiwisolver pillow pyparsing python-dateutil six
MAMBA_SKIP_CUDA_BUILD=TRUE MAMBA_FORCE_BUILD=TRUE \
  "$py" -m pip wheel -q --no-deps --no-build-isolation mamba-ssm==2.3.2.post1 -w .whl
ls .whl
