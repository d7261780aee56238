#!/usr/bin/env bash
# H200 call 2 (session 13; tree = git archive of the commit in commit.txt): the whole GPU suite as a kernel engineer
# runs it before a merge, with its parity report; then, in the time left, `parity check --device cuda`.
set -uo pipefail
cd "$(dirname "$0")/tree"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../../.whl/*.whl || exit 3
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
s=$SECONDS
timeout 540 python3 -m pytest -n 15 --dist loadgroup -p no:cacheprovider --parity-device cuda -v -rfE \
  --durations=40 --junitxml "$OUT/gpu-tests.xml" --report "$OUT/report" > "$OUT/gpu-tests.log" 2>&1
echo "rc=$? $((SECONDS-s)) s"; grep -E "passed|failed" "$OUT/gpu-tests.log" | tail -2; grep -E "^parity: .*failed" "$OUT/gpu-tests.log" | head -40 | cut -c1-400
tail -3 "$OUT/gpu-tests.log" | cut -c1-300
left=$((570 - SECONDS))
if [ $left -gt 30 ]; then
  timeout $left python3 -m parity check --device cuda --profile gpu --workers 15 --json "$OUT/parity-cuda.json" \
    > "$OUT/parity-cuda.log" 2>&1
  echo "check rc=$? $((SECONDS-s)) s"; grep -c " ok \| FAIL " "$OUT/parity-cuda.log"; grep " FAIL " "$OUT/parity-cuda.log" | head | cut -c1-250
fi
for f in gpu-tests.log gpu-tests.xml parity-cuda.log parity-cuda.json report/results.json; do [ -f "$OUT/$f" ] && gzip -f "$OUT/$f"; done
[ -d "$OUT/report" ] && (cd "$OUT" && tar czf report.tgz report && rm -rf report)
ls -la "$OUT"
