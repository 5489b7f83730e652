#!/usr/bin/env bash
# The one prepared check of the CUDA backend for a machine with an NVIDIA GPU (issue 18): builds
# with `make CUDA=1`, runs the device tests, measures the device matmul, runs `ferrox bench
# -ngl 99` where the build has it, and prints a summary. Every step runs under `timeout`, and the
# whole script under a budget (GPU_CHECK_BUDGET seconds, default 470: inside 8 minutes), so it
# cannot hang; a step that would start past the budget is reported as not run.
#
#   tools/gpu-check.sh            from the repository root or anywhere inside it
#
# Logs: one file per step under $OUT/gpu-check (the device runner's folder that comes back) or
# build/gpu-check. Exit status: 0 when every step that ran passed, 1 otherwise.
set -u
cd "$(dirname "$0")/.." || exit 1

BUDGET=${GPU_CHECK_BUDGET:-470}
LOGS=${OUT:+$OUT/gpu-check}
LOGS=${LOGS:-build/gpu-check}
mkdir -p "$LOGS"
START=$(date +%s)
BUILD=build/release-cuda
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
        SUMMARY+=("$(printf '%-14s NOT RUN  (budget of %ss spent)' "$name" "$BUDGET")")
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
    SUMMARY+=("$(printf '%-14s %-9s %4ss  %s' "$name" "$verdict" "$secs" "$LOGS/$name.log")")
    [[ $verdict == PASS ]]
}

skip() {
    SUMMARY+=("$(printf '%-14s SKIPPED  %s' "$1" "$2")")
}

# ---- the machine ------------------------------------------------------------------------------
if command -v nvidia-smi >/dev/null; then
    step device 30 nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.memory \
        --format=csv
else
    skip device "nvidia-smi not found"
fi
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
if [[ ! -x $NVCC ]]; then
    echo "no nvcc (set NVCC or CUDA_HOME): nothing can be built" >&2
    skip build "no nvcc at $NVCC"
    printf '%s\n' "${SUMMARY[@]}"
    exit 1
fi

# ---- build: the library, the program, the tests, the device benchmark --------------------------
if step build 300 make CUDA=1 NVCC="$NVCC" -j"$JOBS" all "$BUILD/ferrox_tests"; then
    # ---- device tests: every kernel against the generic CPU table. CI=true turns "no device"
    # into a failure instead of a skip: on this machine a skip would hide the problem.
    step cuda-tests 180 env CI=true FX_TEST_FILTER='cuda_*' "$BUILD/ferrox_tests"

    # ---- the device matmul's read rate on the benchmark models' matrix shapes --------------
    step matvec-bench 150 "$BUILD/ferrox-cuda-bench" Q4_K Q6_K Q8_0

    # ---- the decoder on the device: goldens and ferrox bench -ngl 99 -----------------------
    if "$BUILD/ferrox" bench --help 2>&1 | grep -q -- '-ngl'; then
        step goldens 120 env FX_TEST_FILTER='decoder_golden*' FERROX_NGL=99 "$BUILD/ferrox_tests"
        step bench-ngl 200 "$BUILD/ferrox" bench -ngl 99 -p 512 -n 128 -r 2 \
            --synth llama-3.2-1b:Q4_K_M --synth llama-3.2-1b:Q8_0 \
            --synth qwen3-0.6b:Q4_K_M --synth qwen3-0.6b:Q8_0
    else
        skip goldens "no device decode step in this build (ferrox bench has no -ngl)"
        skip bench-ngl "no device decode step in this build (ferrox bench has no -ngl)"
    fi

    # ---- out-of-bounds and race checks of the kernels, with what budget is left -------------
    SANITIZER=$(dirname "$NVCC")/compute-sanitizer
    if [[ -x $SANITIZER ]]; then
        step memcheck 120 env CI=true FX_TEST_FILTER='cuda_*' "$SANITIZER" --tool memcheck \
            --error-exitcode 3 "$BUILD/ferrox_tests"
    else
        skip memcheck "no compute-sanitizer next to nvcc"
    fi
fi

echo
echo "=== gpu-check summary ($(elapsed)s of a ${BUDGET}s budget)"
printf '%s\n' "${SUMMARY[@]}"
# What each failed device test said: fail_msg's line, then cmocka's verdict.
grep -hE '^ERROR: |^\[  FAILED  \] [a-z]' "$LOGS"/cuda-tests.log 2>/dev/null | awk '!seen[$0]++'
exit $FAILED
