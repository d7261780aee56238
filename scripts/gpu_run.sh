#!/usr/bin/env bash
# One call on the offline H200: install the carried wheels, then run the GPU tests and/or the
# benchmarks, writing logs and JSON under $OUT (default ./gpu-out). Usage:
#   bash scripts/gpu_run.sh [tests] [parity] [bench] [gate] [mixer] [kernels] [cumsum] [statepass] [record] [convergence] [precision] [e2e] [ssd] [promote] [long] [trees] [index]
#   (default: tests parity bench; each call is cut at 10 minutes: one or two steps per call)
# PATCH=FILE first applies FILE (a `git diff`, e.g. a change awaiting its gate) to the device's copy of the tree only.
# e2e / ssd: tune (Helion's autotuner, resumable) + gate + promote the gated norm / the SSD kernels at the training shape.
# mixer: the Nemotron mixer (SSD combined + gated RMSNorm) fwd/fwd+bwd/peak memory and the RMSNorm bwd, vs mamba-ssm
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
# At most 8 files come back from $OUT: at exit everything the steps wrote goes back as one archive, results.tgz.
pack() {
  (cd "$OUT" && find . -mindepth 1 -maxdepth 1 ! -name results.tgz -print0 | tar czf /tmp/results.tgz --null -T - \
    && find . -mindepth 1 -maxdepth 1 ! -name results.tgz -exec rm -rf {} + && mv /tmp/results.tgz results.tgz)
}
trap pack EXIT
trap 'exit 143' TERM INT  # a call cut at its limit by a signal still packs what it wrote
if [ -n "${PATCH:-}" ]; then
  why=$(git apply --whitespace=nowarn "$PATCH" 2>&1) \
    || { echo "gpu_run.sh: PATCH=$PATCH does not apply to this tree: $(echo "$why" | head -1)"; exit 3; }
  echo "applied $PATCH" | tee "$OUT/patch.txt"
fi
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || { echo "wheel install failed"; exit 3; }
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
# Triton's compile cache in an ignored folder of the tree: a later call on a still-warm machine reuses it.
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-$PWD/.gpu-cache/triton}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import torch, triton, helion; print('torch', torch.__version__, 'triton', triton.__version__)" \
  | tee -a "$OUT/gpu.txt"
steps=${*:-tests parity bench}
status=0
promote_config() {  # OP CONFIG STEM SECONDS [ARGS]: gate + promote CONFIG (log and JSON at STEM.log / STEM.json)
  local op=$1 cfg=$2 stem=$3 limit=$4; shift 4
  timeout -k 10 "$limit" python3 -m parity promote "$op" --device cuda --config "$cfg" --dtype bfloat16 \
    --workers "${WORKERS:-15}" --json "$stem.json" "$@" > "$stem.log" 2>&1 || status=1
  tail -5 "$stem.log" | cut -c1-300
  [ -d configs ] && cp -r configs "$OUT/"
}
for step in $steps; do
  case $step in
    tests)   # the whole suite on the GPU (gpu profile, compile groups over xdist workers, training shapes, the
             # GPU-only mutants); TESTS_ARGS='-m gpu' for the GPU-marked tests alone. pytest prints its duration.
      # A call is cut at 10 minutes: the failure and slow-test lines ("parity: ...") are logged as they happen, and
      # the limit interrupts pytest (SIGINT) so that a cut run still writes its durations and junit XML.
      timeout -s INT -k 25 "${TESTS_TIMEOUT:-545}" python3 -m pytest -n "${WORKERS:-15}" --dist loadgroup -p no:cacheprovider \
        --parity-device cuda -v -rfE --durations=40 --junitxml "$OUT/gpu-tests.xml" \
        ${TESTS_ARGS:-} > "$OUT/gpu-tests.log" 2>&1 || status=1
      grep -E "^parity: |passed|failed" "$OUT/gpu-tests.log" | tail -60 | cut -c1-400 ;;
    parity)  # every registered op, implementation and dtype, compiled, gpu profile, compile groups over workers
      timeout "${PARITY_TIMEOUT:-570}" python3 -m parity check --device cuda --profile gpu --workers "${WORKERS:-15}" \
        ${PARITY_EXAMPLES:+--examples "$PARITY_EXAMPLES"} --json "$OUT/parity-cuda.json" \
        --report "$OUT/check-report" > "$OUT/parity-cuda.log" 2>&1 || status=1
      grep -E " FAIL |passed|failed" "$OUT/parity-cuda.log" | tail -40 | cut -c1-300 ;;
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
    kernels) # where the mixer's time goes, kernel by kernel, helion vs mamba-ssm (torch.profiler; bench/kernel_times.py),
             # and each part against its mamba-ssm counterpart; at each of KERNELS_SHAPES (nemotron long small-head)
      for shape in ${KERNELS_SHAPES:-nemotron}; do
        timeout "${KERNELS_TIMEOUT:-240}" python3 bench/kernel_times.py --shape "$shape" \
          --json "$OUT/kernel-times-$shape.json" ${KERNELS_ARGS:-} > "$OUT/kernel-times-$shape.log" 2>&1 || status=1
        grep -E "^(mamba|helion) |^(fwd|bwd)[: ]" "$OUT/kernel-times-$shape.log" | sed "s/^/$shape /" | cut -c1-200
      done ;;
    cumsum)  # chunk_cumsum's forward and variants of it against mamba-ssm's kernel (bench/diag/chunk_cumsum_variants.py)
      timeout "${CUMSUM_TIMEOUT:-60}" python3 bench/diag/chunk_cumsum_variants.py --json "$OUT/chunk-cumsum-variants.json" \
        > "$OUT/chunk-cumsum-variants.log" 2>&1 || status=1
      grep -E "^mamba|best" "$OUT/chunk-cumsum-variants.log" | cut -c1-200 ;;
    statepass) # state_passing's forward as shipped and walked sequentially, against mamba-ssm's (bench/diag/state_passing_variants.py)
      timeout "${STATEPASS_TIMEOUT:-90}" python3 bench/diag/state_passing_variants.py \
        --json "$OUT/state-passing-variants.json" > "$OUT/state-passing-variants.log" 2>&1 || status=1
      grep -E "^mamba|best" "$OUT/state-passing-variants.log" | cut -c1-200 ;;
    record)  # mamba-ssm's autotune choices at the training shapes for what reference/mamba_autotune.json lacks
             # (the pinned examples and training problems of every op; copy $OUT/mamba_autotune.json back)
      PARITY_RECORD_BASELINE=1 timeout "${RECORD_TIMEOUT:-400}" python3 -m parity check --device cuda --examples 0 \
        --workers "${WORKERS:-15}" > "$OUT/record.log" 2>&1 || status=1
      cp reference/mamba_autotune.json "$OUT/mamba_autotune.json"; tail -5 "$OUT/record.log" ;;
    convergence)  # a small Mamba-2 LM trained with each backend (bench/convergence.py, issue 16)
      timeout "${CONVERGENCE_TIMEOUT:-570}" python3 bench/convergence.py --device cuda --out "$OUT/convergence" \
        ${CONVERGENCE_ARGS:-} > "$OUT/convergence.log" 2>&1 || status=1
      tail -40 "$OUT/convergence.log" | cut -c1-300 ;;
    precision)  # issue 12, PRECISION_PARTS (default all three): repro = the bf16 reproducer over seeds 0-19 (gate
                # verdicts); sweep = seed 0 at chunk/tile 32/64/128; fp32 = the CPU criterion's problem with wide dt on
                # the GPU (the backward's fp64 path, fp64 dots: every gradient within half an ulp)
      for part in ${PRECISION_PARTS:-repro sweep fp32}; do
        case $part in
          repro) args=(--dtype bfloat16 --seeds 0-19) ;;
          sweep) args=(--dtype bfloat16 --seeds 0 --chunk-sizes 32,64,128 --configs default --block-sizes 32,64,128) ;;
          fp32) args=(--dtype float32 --wide-dt --seeds 0-9 --problem '{"batch":2,"seqlen":80,"chunk_size":32,
"nheads":4,"ngroups":2,"headdim":16,"dstate":16,"D":"h","dt_bias":true,"dt_softplus":true,"initial_states":true}') ;;
          *) echo "unknown precision part $part"; status=1; continue ;;
        esac
        timeout "${PRECISION_TIMEOUT:-280}" python3 bench/ssd_bwd_precision.py --device cuda "${args[@]}" --max-ratio inf \
          --json "$OUT/ssd-bwd-$part.json" > "$OUT/precision-$part.log" 2>&1 || status=1
        tail -n 8 "$OUT/precision-$part.log" | cut -c1-300
      done ;;
    e2e|ssd) # tune the op's Helion kernels with Helion's autotuner, then gate + promote the assembled config. Resumable:
             # the carried tuned/ is copied to $OUT/tuned and the tuner writes there (each kernel's record lands at once,
             # so a call cut by its limit keeps what it found); copy $OUT/tuned back to tuned/ and run again until "done".
             # The tuner stops before a kernel it has no time for: CALL_LIMIT (s since the script started) less
             # PROMOTE_RESERVE (the promote gate's time) bounds it; the promote runs only when that much is left.
      # TUNE_SHAPE (JSON): tune at that problem instead of the training shape and promote for its shape bucket.
      # TUNE_ARGS: more `parity tune` options (e.g. "--force --kernel bwd_dx" re-tunes that kernel alone;
      # "--same-search" with a new TUNE_BUDGET re-tunes every kernel once, resuming across calls).
      op=$([ "$step" = e2e ] && echo layernorm_gated || echo ssd_combined)
      log="$OUT/tune-$op${TUNE_SHAPE:+-$(echo "$TUNE_SHAPE" | md5sum | cut -c1-8)}.log"
      mkdir -p "$OUT/tuned"; [ -d tuned ] && cp -r tuned/. "$OUT/tuned/"
      [ -f "$OUT/tuned.tgz" ] && tar xzf "$OUT/tuned.tgz" -C "$OUT"  # an earlier tune step of this call
      # PROMOTE_RESERVE_E2E / _SSD, TUNE_BUDGET_E2E / _SSD: one step's own values in a call that runs both.
      reserve_var=PROMOTE_RESERVE_${step^^} budget_var=TUNE_BUDGET_${step^^}
      reserve=${!reserve_var:-${PROMOTE_RESERVE:-150}} budget=${!budget_var:-${TUNE_BUDGET:-60}}
      limit=$(( ${CALL_LIMIT:-585} - SECONDS - reserve ))
      limit=$(( limit < ${TUNE_LIMIT:-100000} ? limit : ${TUNE_LIMIT:-100000} ))
      echo "tune $op${TUNE_SHAPE:+ at $TUNE_SHAPE}: --time-limit $limit s (call at ${SECONDS} s)"
      if [ "$limit" -lt 60 ]; then
        echo "tune $op: no time left in this call"; status=1
      elif timeout -k 10 "$(( limit + 60 ))" python3 -m parity tune "$op" --device cuda --budget "$budget" \
          --effort "${TUNE_EFFORT:-quick}" --precompile "${PRECOMPILE:-fork}" --workers "${WORKERS:-15}" \
          ${PRECOMPILE_JOBS:+--precompile-jobs "$PRECOMPILE_JOBS"} ${TUNE_SHAPE:+--shape "$TUNE_SHAPE"} ${TUNE_ARGS:-} \
          --time-limit "$limit" --out "$OUT/tuned" > "$log" 2>&1; then
        cfg=$(sed -n 's/.*done: the assembled config passed end to end: //p' "$log" | tail -1)
        left=$(( ${CALL_LIMIT:-585} - SECONDS ))
        if [ "$left" -ge "$reserve" ]; then
          promote_config "$op" "$cfg" "${log%.log}-promote" "$left" ${TUNE_SHAPE:+--bucket-shape "$TUNE_SHAPE"}
        else
          echo "tune $op done, $left s left: promote in the next call"
        fi
      else
        status=1
      fi
      [ -f "$log" ] && grep -E "tuning |: .* ms -> |FAILED|judg|pass|FAIL|time limit|done|incomplete|untrusted|no-gain|Error" \
        "$log" | tail -40 | cut -c1-300
      tar czf "$OUT/tuned.tgz" -C "$OUT" tuned && rm -rf "$OUT/tuned" ;;  # the results come back as one file
    long)    # issue 18: each long problem (offsets past 2^31, ops/long.py) in its own process (the engine keeps the
             # last problem's oracle: two would not fit), bf16, judged by the segmented oracles; peak memory in meta.
             # The candidates run before mamba-ssm (parity.runner): a baseline that wraps its offsets into an illegal
             # address breaks the CUDA context for the rest of its process, not the candidates' verdicts.
      # LONG_PROBLEMS picks some of: sequence batch chunk norm; LONG_IMPLS the implementations (default: the Helion
      # port as training loads it, and mamba-ssm). A problem starts only if LONG_MIN s are left of CALL_LIMIT.
      for name in ${LONG_PROBLEMS:-sequence batch chunk norm}; do
        left=$(( ${CALL_LIMIT:-585} - SECONDS ))
        if [ "$left" -lt "${LONG_MIN:-150}" ]; then echo "long $name: $left s left, not started"; status=1; continue; fi
        p=$([ "$name" = norm ] && echo 'long.long_norm()' || echo "long.long_ssd()[\"$name\"]")
        P=$(python3 -c "import json; from ops import long; print(json.dumps($p))") || { status=2; continue; }
        op=$([ "$name" = norm ] && echo layernorm_gated || echo ssd_combined)
        impls=$(for i in ${LONG_IMPLS:-helion triton}; do printf -- '--impl %s ' "$i"; done)
        echo "long $name at ${SECONDS} s: $P"
        # shellcheck disable=SC2086
        timeout -k 10 "$(( left < ${LONG_TIMEOUT:-400} ? left : ${LONG_TIMEOUT:-400} ))" python3 -m parity check \
          --device cuda --op "$op" --dtype bfloat16 $impls --problem "$P" --verbose \
          --json "$OUT/long-$name.json" > "$OUT/long-$name.log" 2>&1 || status=1
        grep -E "^ +(error|note|ok  |FAIL)|passed|failed| in [0-9.]+ s$" "$OUT/long-$name.log" | tail -24 | cut -c1-300
        echo "long $name done at ${SECONDS} s"
      done ;;
    trees)   # the SSD drop-in's step time (bench/diag/ssd_step_time.py; TREES_ARGS, default --default-configs, e.g.
             # "--ssd-config tuned/.../config.json --host-profile 5") for this tree and each of TREES, source trees
             # exported beside it (`git archive C kernels reference parity contract ops`), in one call
      for tree in . ${TREES:-}; do
        name=$([ "$tree" = . ] && echo this || basename "$tree")
        # shellcheck disable=SC2086
        timeout "${TREES_TIMEOUT:-150}" python3 bench/diag/ssd_step_time.py --tree "$tree" ${TREES_ARGS:---default-configs} \
          --json "$OUT/step-time-$name.json" > "$OUT/step-time-$name.log" 2>&1 || status=1
        grep -E "fwd\+bwd|all kernels|host profile" "$OUT/step-time-$name.log" | sed "s/^/$name /" | cut -c1-200
      done ;;
    promote) # gate + promote a config already judged by the tuner, without tuning again: PROMOTE_OP, PROMOTE_CONFIG
             # (e.g. tuned/<gpu>/<op>/<dtype>-<hash>/config.json, when only a kernel source hash moved since)
      : "${PROMOTE_OP:?name the op}" "${PROMOTE_CONFIG:?name the config file}"
      promote_config "$PROMOTE_OP" "$PROMOTE_CONFIG" "$OUT/promote-$PROMOTE_OP" "${PROMOTE_TIMEOUT:-400}" ;;
    index)   # issue 18: the training step with the default (int32-indexed) builds vs every kernel's int64 twin
      timeout "${INDEX_TIMEOUT:-300}" python3 bench/index_dtype.py --op ssd_combined --op layernorm_gated \
        --json "$OUT/index-dtype.json" 2>&1 | tee "$OUT/index-dtype.log" || status=1 ;;
    *) echo "unknown step $step"; status=2 ;;
  esac
done
exit $status
