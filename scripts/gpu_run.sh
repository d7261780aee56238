#!/usr/bin/env bash
# One call on the offline H200: install the carried wheels, then run the GPU tests and/or the
# benchmarks, writing logs and JSON under $OUT (default ./gpu-out). Usage:
#   bash scripts/gpu_run.sh [tests] [parity] [bench] [gate] [mixer] [e2e] [ssd]     (default: tests parity bench)
# ssd: tune + gate + promote the SSD kernels at the Nemotron shape (the mixer step then loads that config).
# mixer: the Nemotron mixer (SSD combined + gated RMSNorm) fwd/fwd+bwd/peak memory and the RMSNorm bwd, vs mamba-ssm
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || { echo "wheel install failed"; exit 3; }
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import torch, triton, helion; print('torch', torch.__version__, 'triton', triton.__version__)" \
  | tee -a "$OUT/gpu.txt"
steps=${*:-tests parity bench}
status=0
for step in $steps; do
  case $step in
    tests)   # the whole suite on the GPU (gpu profile, compile groups over xdist workers, training shapes, the
             # GPU-only mutants); TESTS_ARGS='-m gpu' for the GPU-marked tests alone. pytest prints its duration.
      timeout "${TESTS_TIMEOUT:-900}" python3 -m pytest -n "${WORKERS:-15}" --dist loadgroup -p no:cacheprovider \
        --parity-device cuda -rfE --junitxml "$OUT/gpu-tests.xml" ${TESTS_ARGS:-} 2>&1 | tee "$OUT/gpu-tests.log" \
        || status=1 ;;
    parity)  # every registered op, implementation and dtype, compiled, gpu profile, compile groups over workers
      timeout "${PARITY_TIMEOUT:-900}" python3 -m parity check --device cuda --profile gpu --workers "${WORKERS:-15}" \
        ${PARITY_EXAMPLES:+--examples "$PARITY_EXAMPLES"} --json "$OUT/parity-cuda.json" 2>&1 \
        | tee "$OUT/parity-cuda.log" || status=1 ;;
    bench)
      timeout "${BENCH_TIMEOUT:-900}" python3 bench/bench.py --json "$OUT/bench.json" ${BENCH_ARGS:-} 2>&1 \
        | tee "$OUT/bench.log" || status=1 ;;
    gate)    # gate speed of one config of each op over >= 50 generated shapes, bf16 (issue 11's targets)
      timeout "${GATE_TIMEOUT:-400}" python3 bench/gate_speed.py --op layernorm_gated --op ssd_combined \
        --examples 50 --workers "${WORKERS:-15}" --json "$OUT/gate-speed.json" 2>&1 | tee "$OUT/gate-speed.log" \
        || status=1 ;;
    mixer)   # the whole mixer fwd/fwd+bwd and peak memory, and the gated RMSNorm bwd alone, helion vs mamba-ssm
      timeout "${MIXER_TIMEOUT:-300}" python3 bench/mixer.py --json "$OUT/mixer.json" ${MIXER_ARGS:-} 2>&1 \
        | tee "$OUT/mixer.log" || status=1 ;;
    e2e)     # tune the gated RMSNorm backward, gate + promote the fastest passing config, load it in training
      { python3 -m parity tune layernorm_gated --device cuda --trials "${TUNE_TRIALS:-12}" --keep 2 \
          --out "$OUT/tuned" --shape '{"rows": 16384, "ngroups": 8, "group_size": 512, "z": true,
          "norm_before_gate": false, "is_rms_norm": true, "bias": false}' \
        && python3 -m parity promote layernorm_gated --device cuda --config "$OUT/tuned/layernorm_gated-0.json" \
          --dtype bfloat16 --examples "${GATE_EXAMPLES:-8}" \
        && python3 bench/train_step.py; } 2>&1 | tee "$OUT/e2e.log" || status=1
      cp configs/*/layernorm_gated.json "$OUT/store-layernorm_gated.json" 2>/dev/null
      rm -rf "$OUT/tuned" ;;
    ssd)     # tune the SSD kernels (fwd+bwd at the Nemotron shape), gate + promote the fastest passing config;
             # with SSD_CONFIG=file, gate + promote that config without tuning
      mkdir -p "$OUT/tuned-ssd"
      { if [ -n "${SSD_CONFIG:-}" ]; then cp "$SSD_CONFIG" "$OUT/tuned-ssd/ssd_combined-0.json"; else
          timeout "${SSD_TUNE_TIMEOUT:-300}" python3 -m parity tune ssd_combined --device cuda \
          --trials "${SSD_TRIALS:-8}" --keep 1 --out "$OUT/tuned-ssd" --shape "$(python3 -c \
          'import json; from ops.ssd import NEMOTRON; print(json.dumps(NEMOTRON))')"; fi \
        && timeout "${SSD_GATE_TIMEOUT:-600}" python3 -m parity promote ssd_combined --device cuda \
          --config "$OUT/tuned-ssd/ssd_combined-0.json" --dtype bfloat16 --examples "${GATE_EXAMPLES:-4}"; } 2>&1 \
        | tee "$OUT/ssd-tune.log" || status=1
      cp configs/*/ssd_combined.json "$OUT/store-ssd_combined.json" 2>/dev/null
      cp "$OUT/tuned-ssd/ssd_combined-0.json" "$OUT/ssd-tuned-config.json" 2>/dev/null
      rm -rf "$OUT/tuned-ssd" ;;
    *) echo "unknown step $step"; status=2 ;;
  esac
done
exit $status
