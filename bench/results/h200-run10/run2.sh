#!/usr/bin/env bash
# H200 call 2 (session 12; tree = git archive of the commit in commit.txt): the whole GPU suite as a kernel
# engineer runs it before a merge: `pytest --parity-device cuda` (gpu profile, every op, implementation and dtype,
# compile groups over 15 xdist workers, training shapes, GPU-only mutants), with its junit XML.
set -uo pipefail
cd "$(dirname "$0")/tree"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../../.whl/*.whl || exit 3
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
s=$SECONDS
timeout 575 python3 -m pytest -n 15 --dist loadgroup -p no:cacheprovider --parity-device cuda -v -rfE \
  --durations=40 --junitxml "$OUT/gpu-tests.xml" > "$OUT/gpu-tests.log" 2>&1
echo "rc=$? $((SECONDS-s)) s"; grep -E "passed|failed" "$OUT/gpu-tests.log" | tail -3; grep -E "^FAILED|^ERROR" "$OUT/gpu-tests.log" | head -20 | cut -c1-250
grep -c PASSED "$OUT/gpu-tests.log"; tail -5 "$OUT/gpu-tests.log" | cut -c1-300
