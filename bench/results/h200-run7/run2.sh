#!/usr/bin/env bash
# H200 call 2 (session 11; tree = git archive of the commit in commit.txt), after pinning every autotuned
# mamba-ssm kernel (call 1 showed the chunk-state/scan/bmm modules' kernels re-autotuning per shape), error
# statistics on the device and one intra-op thread share per worker: (A) issue 12's bf16 reproducer, seeds
# 0-19, and the chunk x block-size sweep; (B) gate speed of ssd_combined, 50 generated shapes, 15 workers;
# (C) the same for layernorm_gated; (D) the GPU-only mutants. Baseline autotune choices recorded.
set -uo pipefail
cd "$(dirname "$0")/tree"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../../.whl/*.whl || exit 3
export PYTHONPATH=/tmp/site:$PWD:$PWD/bench/compile_log PYTHONUNBUFFERED=1 PARITY_RECORD_BASELINE=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$OUT/gpu.txt"
s=$SECONDS
timeout 90 python3 bench/ssd_bwd_precision.py --device cuda --dtype bfloat16 --seeds 0-19 --max-ratio inf \
  --json "$OUT/ssd-bwd-bf16.json" > "$OUT/ssd-bwd-bf16.log" 2>&1
echo "A1 rc=$? $((SECONDS-s)) s"; grep -v Warn "$OUT/ssd-bwd-bf16.log" | grep -v promoted_config | tail -8 | cut -c1-250; s=$SECONDS
timeout 60 python3 bench/ssd_bwd_precision.py --device cuda --dtype bfloat16 --seeds 0 --chunk-sizes 32,64,128 \
  --configs default --block-sizes 32,64,128 --max-ratio inf --json "$OUT/ssd-bwd-sweep.json" > "$OUT/ssd-bwd-sweep.log" 2>&1
echo "A2 rc=$? $((SECONDS-s)) s"; grep -v Warn "$OUT/ssd-bwd-sweep.log" | grep -v promoted_config | tail -6 | cut -c1-250; s=$SECONDS
PARITY_COMPILE_LOG="$OUT/compile-ssd.jsonl" timeout 200 python3 bench/gate_speed.py --op ssd_combined --examples 50 \
  --workers 15 --json "$OUT/gate-ssd.json" > "$OUT/gate-ssd.log" 2>&1
echo "B rc=$? $((SECONDS-s)) s"; grep -v Warn "$OUT/gate-ssd.log" | grep -v promoted_config | tail -4 | cut -c1-400; s=$SECONDS
python3 bench/compile_log/summary.py "$OUT/compile-ssd.jsonl" > "$OUT/compile-ssd.txt" 2>&1; head -8 "$OUT/compile-ssd.txt"
PARITY_COMPILE_LOG="$OUT/compile-ln.jsonl" timeout 70 python3 bench/gate_speed.py --op layernorm_gated --examples 50 \
  --workers 15 --json "$OUT/gate-ln.json" > "$OUT/gate-ln.log" 2>&1
echo "C rc=$? $((SECONDS-s)) s"; grep -v Warn "$OUT/gate-ln.log" | grep -v promoted_config | tail -3 | cut -c1-400; s=$SECONDS
python3 bench/compile_log/summary.py "$OUT/compile-ln.jsonl" >> "$OUT/gate-ln.log" 2>&1
timeout 80 python3 -m pytest -p no:cacheprovider -n 0 -m gpu --parity-device cuda tests/test_mutants.py \
  -k "tf32 or racy or atomic_reduction" -rA > "$OUT/mutants.log" 2>&1
echo "D rc=$? $((SECONDS-s)) s"; grep -E "PASSED|FAILED|ERROR|passed|failed|REJECTED|FOOLED" "$OUT/mutants.log" | tail -8
cp reference/mamba_autotune.json "$OUT/"
cd "$OUT" && tar czf all.tgz *.json *.jsonl 2>/dev/null; rm -f *.json *.jsonl; ls
