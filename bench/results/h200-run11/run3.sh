#!/usr/bin/env bash
# H200 call 3 (session 12; tree = git archive of the commit in commit.txt): 4 of the 20 training-shape parity
# tests that run 10 lost to CUDA out-of-memory: ssd_combined bf16, group g0 (the Nemotron shape), every
# implementation, in one process.
set -uo pipefail
cd "$(dirname "$0")/tree"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../../.whl/*.whl || exit 3
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
s=$SECONDS
timeout 150 python3 -m pytest -n 1 --dist loadgroup -p no:cacheprovider --parity-device cuda -v -rfE --durations=15 \
  --junitxml "$OUT/gpu-tests.xml"  'tests/test_ops_parity.py::test_parity[ssd_combined-triton-bfloat16-g0]' 'tests/test_ops_parity.py::test_parity[ssd_combined-helion-bfloat16-g0]' 'tests/test_ops_parity.py::test_parity[ssd_combined-helion-cfg0-bfloat16-g0]' 'tests/test_ops_parity.py::test_parity[ssd_combined-helion-cfg1-bfloat16-g0]' > "$OUT/gpu-tests.log" 2>&1
echo "rc=$? $((SECONDS-s)) s"; grep -E "PASSED|FAILED" "$OUT/gpu-tests.log" | grep -v "^tests" | cut -c1-160; tail -3 "$OUT/gpu-tests.log" | cut -c1-300
