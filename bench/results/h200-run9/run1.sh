#!/usr/bin/env bash
# H200 call 1 (session 12; tree = git archive of the commit in commit.txt): (A) layernorm_gated gate speed,
# 50 generated shapes + training shape, 15 workers; (B) static vs dynamic shapes at the training shape (the
# Nemotron mixer, both backends); (C) `parity check --device cuda` over every op, implementation and dtype.
set -uo pipefail
cd "$(dirname "$0")/tree"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../../.whl/*.whl || exit 3
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$OUT/gpu.txt"
s=$SECONDS
timeout 110 python3 bench/gate_speed.py --op layernorm_gated --examples 50 --workers 15 --json "$OUT/gate-ln.json" \
  > "$OUT/gate-ln.log" 2>&1
echo "A rc=$? $((SECONDS-s)) s"; grep -v Warn "$OUT/gate-ln.log" | grep -v promoted_config | tail -3 | cut -c1-600; s=$SECONDS
timeout 100 python3 bench/mixer.py --json "$OUT/mixer-dynamic.json" > "$OUT/mixer-dynamic.log" 2>&1
echo "B1 rc=$? $((SECONDS-s)) s"; grep -v Warn "$OUT/mixer-dynamic.log" | tail -12 | cut -c1-300; s=$SECONDS
PARITY_STATIC_SHAPES=1 timeout 100 python3 bench/mixer.py --json "$OUT/mixer-static.json" > "$OUT/mixer-static.log" 2>&1
echo "B2 rc=$? $((SECONDS-s)) s"; grep -v Warn "$OUT/mixer-static.log" | tail -12 | cut -c1-300; s=$SECONDS
timeout $((560-SECONDS)) python3 -m parity check --device cuda --profile gpu --workers 15 --json "$OUT/parity-cuda.json" \
  > "$OUT/parity-cuda.log" 2>&1
echo "C rc=$? $((SECONDS-s)) s"; grep -v Warn "$OUT/parity-cuda.log" | grep -v promoted_config | tail -25 | cut -c1-300
cd "$OUT" && tar czf all.tgz *.json 2>/dev/null; rm -f *.json; ls
