/* Row operations on device: RMSNorm, rope, SwiGLU, add, the KV cache store, each the generic
 * table's arithmetic (kernels/generic_rows.c) with the reductions spread over a block.
 *
 * RMSNorm keeps ggml's sum of squares in double, as the CPU does; the block sums in a different
 * order than the CPU's loop, which can move the double sum by an ulp of double, rarely enough to
 * change the f32 mean. Rope and SwiGLU have no reductions: rope is bit for bit the CPU's
 * (__f*_rn, no fused multiply-add), SwiGLU differs only by the device's expf (2 ulp at most). */
#include <cuda_fp16.h>

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

/* One thread per (row, head, pair): normal mode turns (2i, 2i+1), neox (i, i + n_dims/2); row
 * r's angles are entry pos[r] (r when pos is NULL) of the table cs. */
__global__ void rope_kernel(float *x, int64_t n_rows, int64_t row_stride, int64_t n_heads,
                            int64_t head_stride, int32_t n_dims, int neox, const float *cs,
                            const int32_t *pos) {
    int32_t half = n_dims / 2;
    int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n_rows * n_heads * half)
        return;
    int32_t i = (int32_t)(t % half);
    int64_t h = t / half % n_heads, r = t / half / n_heads;
    float *v = x + r * row_stride + h * head_stride;
    const float *c_s = cs + (pos ? (int64_t)pos[r] : r) * n_dims + 2 * i;
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

__global__ void add_kernel(float *out, const float *a, const float *b, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = __fadd_rn(a[i], b[i]);
}

/* Row r (n_head_kv heads of dim floats) into the cache at position pos[r] of each head: f32 as
 * it is, f16 rounded to nearest even (the CPU's kv_store). One thread per element. */
template <typename KV> static __device__ inline KV kv_from_f32(float x);
template <> __device__ inline float kv_from_f32<float>(float x) {
    return x;
}
template <> __device__ inline __half kv_from_f32<__half>(float x) {
    return __float2half_rn(x);
}

template <typename KV>
__global__ void kv_store_kernel(const float *src, int64_t n_rows, int64_t n_head_kv, int64_t dim,
                                KV *cache, int64_t n_ctx, const int32_t *pos) {
    int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n_rows * n_head_kv * dim)
        return;
    int64_t i = t % dim, g = t / dim % n_head_kv, r = t / dim / n_head_kv;
    cache[(g * n_ctx + pos[r]) * dim + i] = kv_from_f32<KV>(src[t]);
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
                       const int32_t *d_pos, void *stream, struct fx_error *err) {
    if (n_dims < 2 || n_dims % 2 || n_dims > head_stride)
        return fx_cuda_fail(err, FX_ERR_INVALID_ARG, "cuda: rope of %d dims in heads of %lld",
                            (int)n_dims, (long long)head_stride);
    int64_t n = n_rows * n_heads * (n_dims / 2);
    if (n <= 0)
        return FX_OK;
    rope_kernel<<<ew_blocks(n), EW_THREADS, 0, fx_cuda_stream(stream)>>>(
        d_x, n_rows, row_stride, n_heads, head_stride, n_dims, neox, d_cs, d_pos);
    return fx_cuda_launched("rope", err);
}

fx_status fx_cuda_swiglu(float *d_out, const float *d_g, const float *d_u, int64_t n, void *stream,
                         struct fx_error *err) {
    if (n <= 0)
        return FX_OK;
    swiglu_kernel<<<ew_blocks(n), EW_THREADS, 0, fx_cuda_stream(stream)>>>(d_out, d_g, d_u, n);
    return fx_cuda_launched("swiglu", err);
}

fx_status fx_cuda_add(float *d_out, const float *d_a, const float *d_b, int64_t n, void *stream,
                      struct fx_error *err) {
    if (n <= 0)
        return FX_OK;
    add_kernel<<<ew_blocks(n), EW_THREADS, 0, fx_cuda_stream(stream)>>>(d_out, d_a, d_b, n);
    return fx_cuda_launched("add", err);
}

fx_status fx_cuda_kv_store(enum fx_type kv_type, const float *d_src, int64_t n_rows,
                           int64_t n_head_kv, int64_t dim, void *d_cache, int64_t n_ctx,
                           const int32_t *d_pos, void *stream, struct fx_error *err) {
    int64_t n = n_rows * n_head_kv * dim;
    if (n <= 0)
        return FX_OK;
    cudaStream_t s = fx_cuda_stream(stream);
    if (kv_type == FX_TYPE_F32)
        kv_store_kernel<float><<<ew_blocks(n), EW_THREADS, 0, s>>>(d_src, n_rows, n_head_kv, dim,
                                                                   (float *)d_cache, n_ctx, d_pos);
    else if (kv_type == FX_TYPE_F16)
        kv_store_kernel<__half><<<ew_blocks(n), EW_THREADS, 0, s>>>(
            d_src, n_rows, n_head_kv, dim, (__half *)d_cache, n_ctx, d_pos);
    else
        return fx_cuda_fail(err, FX_ERR_UNSUPPORTED, "cuda: a %s KV cache", fx_type_name(kv_type));
    return fx_cuda_launched("kv_store", err);
}
