/* What the .cu files of the backend share: turning CUDA errors into struct fx_error, and the
 * launch bookkeeping every entry point repeats. Device code only (included by the .cu files). */
#ifndef FX_CUDA_INTERNAL_CUH
#define FX_CUDA_INTERNAL_CUH

#include <cuda_runtime.h>
#include <stdarg.h>
#include <stdio.h>

#include "cuda/cuda.h"

/* Fills err (when not NULL) like core/error.c's fx_error_set, which is C and not callable from
 * here without its header's C-only attributes; returns code. */
static inline fx_status fx_cuda_fail(struct fx_error *err, fx_status code, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        err->code = code;
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        err->offset = FX_NO_OFFSET;
        va_end(ap);
    }
    return code;
}

/* FX_OK, or the CUDA error of `what` as an error: out of memory is FX_ERR_NOMEM, a bad argument
 * FX_ERR_INVALID_ARG, anything else (no device, a failed launch, a fault) FX_ERR_UNSUPPORTED. */
static inline fx_status fx_cuda_status(cudaError_t e, const char *what, struct fx_error *err) {
    if (e == cudaSuccess)
        return FX_OK;
    fx_status code = e == cudaErrorMemoryAllocation ? FX_ERR_NOMEM
                     : e == cudaErrorInvalidValue   ? FX_ERR_INVALID_ARG
                                                    : FX_ERR_UNSUPPORTED;
    return fx_cuda_fail(err, code, "cuda: %s: %s (%s)", what, cudaGetErrorString(e),
                        cudaGetErrorName(e));
}

/* The result of the launch just made: a launch error is reported at once; the kernel's own
 * faults show up at the next synchronisation. */
static inline fx_status fx_cuda_launched(const char *what, struct fx_error *err) {
    return fx_cuda_status(cudaGetLastError(), what, err);
}

static inline cudaStream_t fx_cuda_stream(void *stream) {
    return (cudaStream_t)stream;
}

/* Sum of v over the 32 lanes of a warp, every lane getting the total (butterfly order, the same
 * on every call, so a result never depends on anything but its inputs). */
static __device__ inline float fx_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

#endif
