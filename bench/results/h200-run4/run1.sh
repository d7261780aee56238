#!/usr/bin/env bash
# H200 call 1: gate speed with dynamic shapes + pinned baseline autotune (tree = git archive of the commit in $OUT/commit.txt)
set -uo pipefail
cd "$(dirname "$0")/tree"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../../.whl/*.whl || exit 3
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import torch, triton, helion; print('torch', torch.__version__, 'triton', triton.__version__, 'helion', helion.__version__)" | tee -a "$OUT/gpu.txt"
s=$SECONDS
timeout 170 python3 bench/gate_speed.py --op layernorm_gated --examples 50 --json "$OUT/gate-speed-layernorm.json" 2>&1 | tee "$OUT/gate-speed-layernorm.log"
echo "layernorm step: $((SECONDS-s)) s"; s=$SECONDS
timeout 330 python3 bench/gate_speed.py --op ssd_combined --examples 50 --json "$OUT/gate-speed-ssd.json" 2>&1 | tee "$OUT/gate-speed-ssd.log"
echo "ssd step: $((SECONDS-s)) s"
