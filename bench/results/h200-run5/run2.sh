#!/usr/bin/env bash
# H200 call 2 (tree = git archive of the commit in commit.txt): (A) every op at the Nemotron training shape,
# bf16 and fp32, all implementations, 8 pytest-xdist workers, recording mamba-ssm's autotune choices;
# (B) gate speed of layernorm_gated and ssd_combined over 50 generated shapes with 12 worker processes.
set -uo pipefail
cd "$(dirname "$0")/tree"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../../.whl/*.whl || exit 3
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$OUT/gpu.txt"
s=$SECONDS
PARITY_RECORD_BASELINE=1 timeout 300 python3 -m pytest -p no:cacheprovider -n 8 --dist loadgroup -m gpu --parity-device cuda \
  tests/test_gpu.py -rA -v --junitxml "$OUT/gpu-tests.xml" 2>&1 | tee "$OUT/gpu-tests.log" | grep -E "PASSED|FAILED|ERROR|passed|failed|wall"
echo "A: $((SECONDS-s)) s"; s=$SECONDS
cp reference/mamba_autotune.json "$OUT/" 2>/dev/null
timeout 100 python3 bench/gate_speed.py --op layernorm_gated --examples 50 --workers 12 --json "$OUT/gate-speed-layernorm.json" > "$OUT/gate-speed-layernorm.log" 2>&1
tail -3 "$OUT/gate-speed-layernorm.log"; echo "B1: $((SECONDS-s)) s"; s=$SECONDS
timeout 230 python3 bench/gate_speed.py --op ssd_combined --examples 50 --workers 12 --json "$OUT/gate-speed-ssd.json" > "$OUT/gate-speed-ssd.log" 2>&1
tail -8 "$OUT/gate-speed-ssd.log" | cut -c1-600; echo "B2: $((SECONDS-s)) s"
