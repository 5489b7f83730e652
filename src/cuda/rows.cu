/* Row operations on device: RMSNorm, rope, SwiGLU, each the generic table's arithmetic
 * (kernels/generic_rows.c) with the reductions spread over a block.
 *
 * RMSNorm keeps ggml's sum of squares in double, as the CPU does; the block sums in a different
 * order than the CPU's loop, which can move the double sum by an ulp of double, rarely enough to
 * change the f32 mean. Rope and SwiGLU have no reductions: rope is bit for bit the CPU's
 * (__f*_rn, no fused multiply-add), SwiGLU differs only by the device's expf (2 ulp at most). */
#include "cuda/internal.cuh"

#define NORM_THREADS 256
#define EW_THREADS   256

/* One block per row: a block-wide double sum of x^2 (each square an f32 product, as the CPU's),
 * then out = (x * scale) * w. */
__global__ void rms_norm_kernel(float *out, const float *x, const float *w, int64_t n,
                                int64_t stride, float eps) {
    __shared__ double part[NORM_THREADS];
    const float *xr = x + (int64_t)blockIdx.x * stride;
    float *yr = out + (int64_t)blockIdx.x * stride;
    double sum = 0;
    for (int64_t i = threadIdx.x; i < n; i += NORM_THREADS)
        sum += (double)__fmul_rn(xr[i], xr[i]);
    part[threadIdx.x] = sum;
    __syncthreads();
    for (int half = NORM_THREADS / 2; half > 0; half >>= 1) {
        if (threadIdx.x < half)
            part[threadIdx.x] += part[threadIdx.x + half];
        __syncthreads();
    }
    float mean = (float)(part[0] / (double)n);
    float scale = 1.0f / sqrtf(mean + eps);
    for (int64_t i = threadIdx.x; i < n; i += NORM_THREADS)
        yr[i] = w ? __fmul_rn(__fmul_rn(xr[i], scale), w[i]) : __fmul_rn(xr[i], scale);
}

/* One thread per (row, head, pair): normal mode turns (2i, 2i+1), neox (i, i + n_dims/2). */
__global__ void rope_kernel(float *x, int64_t n_rows, int64_t row_stride, int64_t n_heads,
                            int64_t head_stride, int32_t n_dims, int neox, const float *cs) {
    int32_t half = n_dims / 2;
    int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n_rows * n_heads * half)
        return;
    int32_t i = (int32_t)(t % half);
    int64_t h = t / half % n_heads, r = t / half / n_heads;
    float *v = x + r * row_stride + h * head_stride;
    const float *c_s = cs + r * n_dims + 2 * i;
    int32_t a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
    float c = c_s[0], s = c_s[1], x0 = v[a], x1 = v[b];
    v[a] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
    v[b] = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
}

__global__ void swiglu_kernel(float *out, const float *g, const float *u, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float gi = g[i];
        out[i] = __fmul_rn(__fdiv_rn(gi, __fadd_rn(1.0f, expf(-gi))), u[i]);
    }
}

static unsigned ew_blocks(int64_t n) {
    return (unsigned)((n + EW_THREADS - 1) / EW_THREADS);
}

fx_status fx_cuda_rms_norm(float *d_out, const float *d_x, const float *d_w, int64_t n_rows,
                           int64_t n, int64_t stride, float eps, void *stream,
                           struct fx_error *err) {
    if (n_rows <= 0)
        return FX_OK;
    if (n < 1 || (n_rows > 1 && stride < n))
        return fx_cuda_fail(err, FX_ERR_INVALID_ARG, "cuda: rms_norm of %lld rows of %lld",
                            (long long)n_rows, (long long)n);
    rms_norm_kernel<<<(unsigned)n_rows, NORM_THREADS, 0, fx_cuda_stream(stream)>>>(d_out, d_x, d_w,
                                                                                   n, stride, eps);
    return fx_cuda_launched("rms_norm", err);
}

fx_status fx_cuda_rope(float *d_x, int64_t n_rows, int64_t row_stride, int64_t n_heads,
                       int64_t head_stride, int32_t n_dims, int neox, const float *d_cs,
                       void *stream, struct fx_error *err) {
    if (n_dims < 2 || n_dims % 2 || n_dims > head_stride)
        return fx_cuda_fail(err, FX_ERR_INVALID_ARG, "cuda: rope of %d dims in heads of %lld",
                            (int)n_dims, (long long)head_stride);
    int64_t n = n_rows * n_heads * (n_dims / 2);
    if (n <= 0)
        return FX_OK;
    rope_kernel<<<ew_blocks(n), EW_THREADS, 0, fx_cuda_stream(stream)>>>(
        d_x, n_rows, row_stride, n_heads, head_stride, n_dims, neox, d_cs);
    return fx_cuda_launched("rope", err);
}

fx_status fx_cuda_swiglu(float *d_out, const float *d_g, const float *d_u, int64_t n, void *stream,
                         struct fx_error *err) {
    if (n <= 0)
        return FX_OK;
    swiglu_kernel<<<ew_blocks(n), EW_THREADS, 0, fx_cuda_stream(stream)>>>(d_out, d_g, d_u, n);
    return fx_cuda_launched("swiglu", err);
}
