#!/usr/bin/env bash
# H200 call 3 (session 11; tree = git archive of the commit in commit.txt), after fixing the recorded baseline
# configs (call 2 ran mamba-ssm with copies of its configs that lacked the pre-hooks zeroing its atomic
# accumulators: its grad.A/ddt were garbage and inflated the bounds): (A) issue 12's bf16 reproducer, seeds
# 0-19; (B) gate speed of ssd_combined, 50 generated shapes, 15 workers;
# (C) the same for layernorm_gated. Baseline autotune choices recorded.
set -uo pipefail
cd "$(dirname "$0")/tree"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../../.whl/*.whl || exit 3
export PYTHONPATH=/tmp/site:$PWD:$PWD/bench/compile_log PYTHONUNBUFFERED=1 PARITY_RECORD_BASELINE=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$OUT/gpu.txt"
s=$SECONDS
timeout 75 python3 bench/ssd_bwd_precision.py --device cuda --dtype bfloat16 --seeds 0-19 --max-ratio inf \
  --json "$OUT/ssd-bwd-bf16.json" > "$OUT/ssd-bwd-bf16.log" 2>&1
echo "A1 rc=$? $((SECONDS-s)) s"; grep -v Warn "$OUT/ssd-bwd-bf16.log" | grep -v promoted_config | tail -8 | cut -c1-250; s=$SECONDS
PARITY_COMPILE_LOG="$OUT/compile-ssd.jsonl" timeout 170 python3 bench/gate_speed.py --op ssd_combined --examples 50 \
  --workers 15 --json "$OUT/gate-ssd.json" > "$OUT/gate-ssd.log" 2>&1
echo "B rc=$? $((SECONDS-s)) s"; grep -v Warn "$OUT/gate-ssd.log" | grep -v promoted_config | tail -4 | cut -c1-400; s=$SECONDS
python3 bench/compile_log/summary.py "$OUT/compile-ssd.jsonl" > "$OUT/compile-ssd.txt" 2>&1; head -8 "$OUT/compile-ssd.txt"
PARITY_COMPILE_LOG="$OUT/compile-ln.jsonl" timeout 55 python3 bench/gate_speed.py --op layernorm_gated --examples 50 \
  --workers 15 --json "$OUT/gate-ln.json" > "$OUT/gate-ln.log" 2>&1
echo "C rc=$? $((SECONDS-s)) s"; grep -v Warn "$OUT/gate-ln.log" | grep -v promoted_config | tail -3 | cut -c1-400; s=$SECONDS
python3 bench/compile_log/summary.py "$OUT/compile-ln.jsonl" >> "$OUT/gate-ln.log" 2>&1
cp reference/mamba_autotune.json "$OUT/"
cd "$OUT" && tar czf all.tgz *.json *.jsonl 2>/dev/null; rm -f *.json *.jsonl; ls
