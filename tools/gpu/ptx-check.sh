#!/usr/bin/env bash
# A check of the device code that needs no GPU: compiles every src/cuda/*.cu to PTX and fails
# when a kernel has no store to global memory. Undefined behaviour in device code (an infinite
# recursion, a read of an unset value) lets the compiler delete a kernel's whole body, which
# then "runs" and writes nothing; this finds it on a machine without a device.
#
#   tools/gpu/ptx-check.sh [NVCC]      (make CUDA=1 ptx-check)
set -u
cd "$(dirname "$0")/../.." || exit 1
NVCC=${1:-${NVCC:-/usr/local/cuda/bin/nvcc}}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
status=0
for cu in src/cuda/*.cu; do
    ptx=$out/$(basename "$cu" .cu).ptx
    "$NVCC" -Iinclude -Isrc -D_GNU_SOURCE -DFX_HAVE_CUDA -std=c++17 -O2 -arch=sm_90 -ptx "$cu" \
        -o "$ptx" || exit 1
    # Each .entry's body runs from its line to the closing brace at the start of a line.
    awk -v file="$cu" '
        /^\.visible \.entry / { name = $3; sub(/\(.*/, "", name); stores = 0; inside = 1; n++ }
        inside && /st\.global/ { stores++ }
        inside && /^}/ { if (!stores) { print file ": kernel " name " stores nothing"; bad = 1 }
                         inside = 0 }
        END { printf "%s: %d kernels\n", file, n > "/dev/stderr"; exit bad }
    ' "$ptx" || status=1
done
exit $status
