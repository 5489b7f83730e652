#!/usr/bin/env bash
# The one prepared check of the CUDA backend for a machine with an NVIDIA GPU (issue 18): builds
# with `make CUDA=1`, runs the device tests (kernels, then the decoder against the CPU decoder and
# the llama.cpp goldens), measures the device matmul, runs `ferrox bench -ngl 99` on the
# benchmark models, then compute-sanitizer, and prints a summary. Every step runs under `timeout`, and the
# whole script under a budget (GPU_CHECK_BUDGET seconds, default 470: inside 8 minutes), so it
# cannot hang; a step that would start past the budget is reported as not run.
#
#   tools/gpu-check.sh                   from the repository root or anywhere inside it
#   tools/gpu-check.sh --stage-fixtures  (on a machine that has ../shared/fixtures) copies the
#                                        fixtures the device tests read into build/gpu-fixtures
#                                        (about 35 MB), for a device machine that lacks them
#
# GPU_CHECK_PREBUILT=1 skips the build when build/release-cuda/{ferrox,ferrox_tests,
# ferrox-cuda-bench} are there and run (built elsewhere with make CUDA=1 and carried over, about
# 28 MB): the build is the longest step on a fresh machine.
#
# The device tests that run the decoder read the shared fixtures: FERROX_FIXTURES when set, else
# ../shared/fixtures, else build/gpu-fixtures; without any, those steps are skipped and say so.
# Logs: one file per step under $OUT/gpu-check (the device runner's folder that comes back) or
# build/gpu-check. Exit status: 0 when every step that ran passed, 1 otherwise.
set -u
cd "$(dirname "$0")/.." || exit 1

if [[ ${1:-} == --stage-fixtures ]]; then
    src=${FERROX_FIXTURES:-../shared/fixtures}
    dst=build/gpu-fixtures
    mkdir -p "$dst/models" "$dst/golden" || exit 1
    for f in "$src"/models/{llama-tiny,qwen2-tiny,qwen3-tiny}*.gguf \
        "$src"/models/{qwen3moe-tiny,gemma2-tiny,gptoss-tiny}.F32.gguf; do
        cp "$f" "$dst/models/" || exit 1
    done
    for f in "$src"/golden/{llama-tiny,qwen2-tiny,qwen3-tiny}[.-]*; do
        [[ $f == *.seq.logits.bin ]] || cp "$f" "$dst/golden/" || exit 1
    done
    du -sh "$dst"
    exit 0
fi

BUDGET=${GPU_CHECK_BUDGET:-470}
LOGS=${OUT:+$OUT/gpu-check}
LOGS=${LOGS:-build/gpu-check}
mkdir -p "$LOGS"
START=$(date +%s)
BUILD=build/release-cuda
if [[ -z ${FERROX_FIXTURES:-} ]]; then
    for dir in ../shared/fixtures build/gpu-fixtures; do
        [[ -d $dir/models ]] && export FERROX_FIXTURES=$PWD/$dir && break
    done
fi
JOBS=$(nproc 2>/dev/null || echo 4)
SUMMARY=()
FAILED=0

elapsed() { echo $(($(date +%s) - START)); }

# step NAME TIMEOUT CMD...: runs CMD with its output in $LOGS/NAME.log (and its tail on the
# terminal), for at most TIMEOUT seconds or what is left of the budget.
step() {
    local name=$1 limit=$2
    shift 2
    local left=$((BUDGET - $(elapsed)))
    if ((left < 15)); then
        SUMMARY+=("$(printf '%-26s NOT RUN  (budget of %ss spent)' "$name" "$BUDGET")")
        FAILED=1
        return 1
    fi
    ((limit > left)) && limit=$left
    echo "=== $name (limit ${limit}s): $*"
    local t0 rc
    t0=$(date +%s)
    timeout -k 5 "$limit" "$@" >"$LOGS/$name.log" 2>&1
    rc=$?
    tail -n 25 "$LOGS/$name.log"
    local secs=$(($(date +%s) - t0)) verdict=PASS
    if ((rc == 124 || rc == 137)); then
        verdict="TIMEOUT"
    elif ((rc != 0)); then
        verdict="FAIL rc=$rc"
    fi
    [[ $verdict == PASS ]] || FAILED=1
    SUMMARY+=("$(printf '%-26s %-9s %4ss  %s' "$name" "$verdict" "$secs" "$LOGS/$name.log")")
    [[ $verdict == PASS ]]
}

skip() {
    SUMMARY+=("$(printf '%-26s SKIPPED  %s' "$1" "$2")")
}

# ---- the machine ------------------------------------------------------------------------------
if command -v nvidia-smi >/dev/null; then
    step device 30 nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.memory \
        --format=csv
else
    skip device "nvidia-smi not found"
fi
prebuilt() {
    [[ ${GPU_CHECK_PREBUILT:-0} == 1 && -x $BUILD/ferrox_tests && -x $BUILD/ferrox-cuda-bench ]] &&
        "$BUILD/ferrox" --version >/dev/null 2>&1
}
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
if [[ ! -x $NVCC ]] && ! prebuilt; then
    echo "no nvcc (set NVCC or CUDA_HOME): nothing can be built" >&2
    skip build "no nvcc at $NVCC"
    printf '%s\n' "${SUMMARY[@]}"
    exit 1
fi

# ---- build: the library, the program, the tests, the device benchmark --------------------------
if prebuilt; then
    skip build "GPU_CHECK_PREBUILT=1: the carried binaries run"
    BUILT=1
elif step build 300 make CUDA=1 NVCC="$NVCC" -j"$JOBS" all "$BUILD/ferrox_tests"; then
    BUILT=1
else
    BUILT=0
fi
if ((BUILT)); then
    # ---- device tests: every kernel against the generic CPU table. CI=true turns "no device"
    # into a failure instead of a skip: on this machine a skip would hide the problem.
    KERNEL_TESTS='cuda_attn*,cuda_dequantize*,cuda_device*,cuda_matmul*,cuda_rms*,cuda_rope*'
    KERNEL_TESTS+=',cuda_swiglu*,cuda_top_k*,cuda_type*,cuda_refuses*,cuda_decoders*'
    step cuda-kernels 150 env CI=true FX_TEST_FILTER="$KERNEL_TESTS" "$BUILD/ferrox_tests"

    # ---- the device matmul's read rate on the benchmark models' matrix shapes --------------
    step matvec-bench 120 "$BUILD/ferrox-cuda-bench" Q4_K Q6_K Q8_0

    # ---- the decoder on the device: against the CPU decoder, and the llama.cpp goldens ------
    if [[ -n ${FERROX_FIXTURES:-} ]]; then
        step cuda-decoder 150 env CI=true \
            FX_TEST_FILTER='cuda_decode*,cuda_context*,context_gpu*,cuda_golden*' \
            "$BUILD/ferrox_tests"
    else
        skip cuda-decoder "no fixtures (tools/gpu-check.sh --stage-fixtures, carry build/gpu-fixtures)"
    fi

    # ---- ferrox bench -ngl 99 on the benchmark models: decode (tg) on the device; pp is left
    # out, since prefill still runs on the CPU. The models are synthesised first with every core
    # (kept in build/gpu-models, so a second run on the same machine skips that).
    MODELS=()
    for shape in qwen3-0.6b llama-3.2-1b; do
        for type in Q8_0 Q4_K_M; do
            MODELS+=("build/gpu-models/$shape.$type.gguf")
        done
    done
    SYNTH_OK=1
    for f in "${MODELS[@]}"; do
        [[ -s $f ]] && continue
        base=${f##*/} && base=${base%.gguf}
        mkdir -p build/gpu-models
        # Written under another name and renamed, so that a killed run leaves no partial model
        # (the arguments expand in the inner shell, hence the single quotes).
        # shellcheck disable=SC2016
        step "synth-$base" 100 bash -c '"$0" synth --shape "$1" --type "$2" -t "$3" -o "$4.part" \
            && mv "$4.part" "$4"' "$BUILD/ferrox" "${base%.*}" "${base##*.}" "$JOBS" "$f" ||
            SYNTH_OK=0
    done
    if ((SYNTH_OK)); then
        BENCH_ARGS=()
        for f in "${MODELS[@]}"; do
            BENCH_ARGS+=(-m "$f")
        done
        step bench-ngl 150 "$BUILD/ferrox" bench -ngl 99 -p 0 -n 128 -r 3 "${BENCH_ARGS[@]}"
    else
        skip bench-ngl "a benchmark model could not be synthesised"
    fi

    # ---- out-of-bounds and race checks of the kernels, with what budget is left -------------
    SANITIZER=$(dirname "$NVCC")/compute-sanitizer
    if [[ -x $SANITIZER ]]; then
        step memcheck 120 env CI=true FX_TEST_FILTER="$KERNEL_TESTS,cuda_decode_step*" \
            "$SANITIZER" --tool memcheck --error-exitcode 3 "$BUILD/ferrox_tests"
    else
        skip memcheck "no compute-sanitizer next to nvcc"
    fi
fi

echo
echo "=== gpu-check summary ($(elapsed)s of a ${BUDGET}s budget)"
printf '%s\n' "${SUMMARY[@]}"
# What each failed device test said: fail_msg's line, then cmocka's verdict.
grep -hE '^ERROR: |^\[  FAILED  \] [a-z]' "$LOGS"/cuda-*.log 2>/dev/null | awk '!seen[$0]++'
exit $FAILED
