#!/usr/bin/env bash
# H200 call 3 (session 13; tree = git archive of the commit in commit.txt): the training-shape groups (g0) of
# ssd_combined and state_passing, every implementation and dtype, on 6 workers (they ran out of memory among 15),
# then the mamba-ssm fp32 baseline failure of call 2 (ssd_combined g11) with its details.
set -uo pipefail
cd "$(dirname "$0")/tree"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../../.whl/*.whl || exit 3
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
s=$SECONDS
timeout 190 python3 -m pytest -n 6 --dist loadgroup -p no:cacheprovider --parity-device cuda -v -rfE \
  -k "(ssd_combined or state_passing) and g0" --durations=30 --report "$OUT/report" tests/test_ops_parity.py > "$OUT/g0-tests.log" 2>&1
echo "rc=$? $((SECONDS-s)) s"; grep -E "passed|failed" "$OUT/g0-tests.log" | tail -2; grep -E "PASSED|FAILED" "$OUT/g0-tests.log" | cut -c1-160
grep -E "^parity: .*failed" "$OUT/g0-tests.log" | cut -c1-1500
left=$((245 - SECONDS))
[ $left -gt 20 ] && timeout $left python3 -m parity check --device cuda --op ssd_combined --impl triton --dtype float32 --seed 1117 \
  --problem '{"A_range": [0.01, 0.1], "D": "h", "batch": 1, "bc_scale": 1.0, "chunk_size": 64, "dstate": 128, "dt_bias": false, "dt_limit": null, "dt_range": [0.01, 1.0], "dt_softplus": true, "headdim": 64, "initial_states": true, "ngroups": 2, "nheads": 2, "nseq": 1, "seqlen": 640, "state_scale": 0.1, "x_scale": 0.001, "z": false, "z_scale": 1.0}' \
  > "$OUT/g11.log" 2>&1; tail -25 "$OUT/g11.log" | cut -c1-300
[ -d "$OUT/report" ] && (cd "$OUT" && tar czf report.tgz report && rm -rf report)
ls -la "$OUT"
