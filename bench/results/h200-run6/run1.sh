#!/usr/bin/env bash
# H200 call 1 (session 11; tree = git archive of the commit in commit.txt): (A) issue 12's bf16 reproducer,
# seeds 0-19, and the chunk x block-size sweep on seed 0; (B) gate speed of ssd_combined over 50 generated
# shapes with 15 workers, work grouped by compile key, compile log of every process; (C) the same for
# layernorm_gated.
set -uo pipefail
cd "$(dirname "$0")/tree"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../../.whl/*.whl || exit 3
export PYTHONPATH=/tmp/site:$PWD:$PWD/bench/compile_log PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import torch, triton, helion; print('torch', torch.__version__, 'triton', triton.__version__, 'helion', helion.__version__)" | tee -a "$OUT/gpu.txt"
nproc | tee -a "$OUT/gpu.txt"
s=$SECONDS
timeout 130 python3 bench/ssd_bwd_precision.py --device cuda --dtype bfloat16 --seeds 0-19 --max-ratio inf \
  --json "$OUT/ssd-bwd-bf16.json" > "$OUT/ssd-bwd-bf16.log" 2>&1
echo "A1 rc=$? $((SECONDS-s)) s"; tail -12 "$OUT/ssd-bwd-bf16.log" | cut -c1-300; s=$SECONDS
timeout 80 python3 bench/ssd_bwd_precision.py --device cuda --dtype bfloat16 --seeds 0 --chunk-sizes 32,64,128 \
  --configs default --block-sizes 32,64,128 --max-ratio inf --json "$OUT/ssd-bwd-sweep.json" > "$OUT/ssd-bwd-sweep.log" 2>&1
echo "A2 rc=$? $((SECONDS-s)) s"; tail -12 "$OUT/ssd-bwd-sweep.log" | cut -c1-300; s=$SECONDS
PARITY_COMPILE_LOG="$OUT/compile-ssd.jsonl" timeout 220 python3 bench/gate_speed.py --op ssd_combined --examples 50 \
  --workers 15 --json "$OUT/gate-ssd.json" > "$OUT/gate-ssd.log" 2>&1
echo "B rc=$? $((SECONDS-s)) s"; tail -5 "$OUT/gate-ssd.log" | cut -c1-400; s=$SECONDS
python3 bench/compile_log/summary.py "$OUT/compile-ssd.jsonl" > "$OUT/compile-ssd.txt" 2>&1; head -22 "$OUT/compile-ssd.txt"
PARITY_COMPILE_LOG="$OUT/compile-ln.jsonl" timeout 75 python3 bench/gate_speed.py --op layernorm_gated --examples 50 \
  --workers 15 --json "$OUT/gate-ln.json" > "$OUT/gate-ln.log" 2>&1
echo "C rc=$? $((SECONDS-s)) s"; tail -3 "$OUT/gate-ln.log" | cut -c1-400
python3 bench/compile_log/summary.py "$OUT/compile-ln.jsonl" >> "$OUT/gate-ln.log" 2>&1
cd "$OUT" && tar czf all.tgz *.json *.jsonl 2>/dev/null; rm -f *.json *.jsonl; ls
