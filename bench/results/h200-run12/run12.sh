#!/usr/bin/env bash
# H200 call 1 (session 13; tree = git archive of the commit in commit.txt): (A) the ragged-chunk cumsum tail, old vs
# new kernel; (B) the whole GPU suite as a kernel engineer runs it before a merge, with its parity report.
set -uo pipefail
cd "$(dirname "$0")/tree"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../../.whl/*.whl || exit 3
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
timeout 60 python3 ../diag_cumsum.py ../old_chunk_cumsum.py 2>&1 | tee "$OUT/diag-cumsum.log" | grep -v Warning
s=$SECONDS
timeout 545 python3 -m pytest -n 15 --dist loadgroup -p no:cacheprovider --parity-device cuda -v -rfE \
  --durations=40 --junitxml "$OUT/gpu-tests.xml" --report "$OUT/report" > "$OUT/gpu-tests.log" 2>&1
echo "rc=$? $((SECONDS-s)) s"; grep -E "passed|failed" "$OUT/gpu-tests.log" | tail -3; grep -E "^FAILED|^ERROR" "$OUT/gpu-tests.log" | head -30 | cut -c1-250
tail -4 "$OUT/gpu-tests.log" | cut -c1-300
gzip -f "$OUT/gpu-tests.log" "$OUT/gpu-tests.xml"
[ -f "$OUT/report/results.json" ] && gzip -f "$OUT/report/results.json"
(cd "$OUT" && tar czf report.tgz report && rm -rf report)
ls -la "$OUT"
