/* Dequantization and matmul of weights in device memory, for every format of types.cuh, both
 * decoding elements with the one decoder per format of blocks.cuh.
 *
 * Matmul layout: a block of MM_WARPS warps; warp w computes weight row r = blockIdx.x * MM_WARPS
 * + w against activation rows blockIdx.y * MM_ACT .. + MM_ACT - 1. Lane l decodes elements
 * l, l + 32, ... of the weight row, so the 32 lanes read consecutive elements (one 32-wide block,
 * or 32 elements of a 256-wide one, at a time) and every activation row is read coalesced; each
 * decoded element is used for all MM_ACT activation rows (ARCHITECTURE rule 6 within a launch).
 * The lane's partial sums are one FMA per element in element order, then a fixed butterfly
 * across lanes: row j's bits do not depend on n_act or on which other rows share its launch. */
#include "cuda/blocks.cuh"
#include "cuda/internal.cuh"
#include "cuda/types.cuh"

#define MM_WARPS   4
#define MM_ACT     8 /* activation rows per launch column; 1 for a matvec */
#define DQ_THREADS 256

template <int T> __global__ void dequantize_kernel(const uint8_t *src, int64_t n, float *dst) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        dst[i] = fx_dq<T>(src, i);
}

/* out[r][0..ne0) = row ids[r] of the matrix, decoded (one thread per element). */
template <int T>
__global__ void get_rows_kernel(const uint8_t *w, uint64_t row_bytes, int64_t ne0,
                                const int32_t *ids, int64_t n_ids, float *out) {
    int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n_ids * ne0)
        return;
    int64_t r = t / ne0, i = t % ne0;
    out[t] = fx_dq<T>(w + (uint64_t)ids[r] * row_bytes, i);
}

/* out[j * out_stride + r] for weight row r and activation rows j0 .. j0 + NA - 1 (< n_act). */
template <int T, int NA>
__global__ void matmul_kernel(const uint8_t *w, uint64_t row_bytes, int64_t ne0, int64_t ne1,
                              const float *act, int64_t act_stride, int64_t n_act, float *out,
                              int64_t out_stride) {
    int lane = threadIdx.x & 31;
    int64_t r = (int64_t)blockIdx.x * MM_WARPS + (threadIdx.x >> 5);
    int64_t j0 = (int64_t)blockIdx.y * NA;
    if (r >= ne1)
        return; /* a whole warp leaves together: r is the same for its lanes */
    const uint8_t *row = w + r * row_bytes;
    float sum[NA];
    for (int a = 0; a < NA; a++)
        sum[a] = 0.0f;
    for (int64_t i = lane; i < ne0; i += 32) {
        float wi = fx_dq<T>(row, i);
        for (int a = 0; a < NA; a++)
            if (j0 + a < n_act)
                sum[a] = fmaf(wi, act[(j0 + a) * act_stride + i], sum[a]);
    }
    for (int a = 0; a < NA; a++) {
        float s = fx_warp_sum(sum[a]);
        if (lane == 0 && j0 + a < n_act)
            out[(j0 + a) * out_stride + r] = s;
    }
}

bool fx_cuda_type_supported(enum fx_type type) {
    return fx_cuda_with_type(type, [](auto) {});
}

static fx_status check_blocks(enum fx_type type, int64_t n, struct fx_error *err) {
    int64_t be = fx_type_block_elems(type);
    if (!fx_cuda_type_supported(type))
        return fx_cuda_fail(err, FX_ERR_UNSUPPORTED, "cuda: no device kernel for type %s",
                            fx_type_name(type));
    if (n < 0 || be <= 0 || n % be != 0)
        return fx_cuda_fail(err, FX_ERR_INVALID_ARG,
                            "cuda: %lld elements are not a whole number of %s blocks of %lld",
                            (long long)n, fx_type_name(type), (long long)be);
    return FX_OK;
}

fx_status fx_cuda_dequantize(enum fx_type type, const void *d_src, int64_t n, float *d_dst,
                             void *stream, struct fx_error *err) {
    fx_status st = check_blocks(type, n, err);
    if (st != FX_OK || n == 0)
        return st;
    unsigned blocks = (unsigned)((n + DQ_THREADS - 1) / DQ_THREADS);
    fx_cuda_with_type(type, [&](auto t) {
        dequantize_kernel<decltype(t)::value>
            <<<blocks, DQ_THREADS, 0, fx_cuda_stream(stream)>>>((const uint8_t *)d_src, n, d_dst);
    });
    return fx_cuda_launched("dequantize", err);
}

fx_status fx_cuda_get_rows(const struct fx_cuda_mat *w, const int32_t *d_ids, int64_t n_ids,
                           float *d_out, void *stream, struct fx_error *err) {
    fx_status st = check_blocks(w->type, w->ne0, err);
    if (st != FX_OK || n_ids <= 0)
        return st;
    unsigned blocks = (unsigned)((n_ids * w->ne0 + DQ_THREADS - 1) / DQ_THREADS);
    fx_cuda_with_type(w->type, [&](auto t) {
        get_rows_kernel<decltype(t)::value><<<blocks, DQ_THREADS, 0, fx_cuda_stream(stream)>>>(
            (const uint8_t *)w->d_data, w->row_bytes, w->ne0, d_ids, n_ids, d_out);
    });
    return fx_cuda_launched("get_rows", err);
}

fx_status fx_cuda_dequantize_host(enum fx_type type, const void *src, int64_t n, float *dst,
                                  struct fx_error *err) {
    fx_status st = check_blocks(type, n, err);
    if (st != FX_OK)
        return st;
    fx_cuda_with_type(type, [&](auto t) {
        for (int64_t i = 0; i < n; i++)
            dst[i] = fx_dq<decltype(t)::value>((const uint8_t *)src, i);
    });
    return FX_OK;
}

fx_status fx_cuda_matmul(const struct fx_cuda_mat *w, const float *d_act, int64_t act_stride,
                         int64_t n_act, float *d_out, int64_t out_stride, void *stream,
                         struct fx_error *err) {
    fx_status st = check_blocks(w->type, w->ne0, err);
    if (st != FX_OK)
        return st;
    if (w->ne1 <= 0 || n_act <= 0)
        return FX_OK;
    if (act_stride < w->ne0 || (n_act > 1 && out_stride < w->ne1))
        return fx_cuda_fail(err, FX_ERR_INVALID_ARG, "cuda: matmul strides %lld, %lld too short",
                            (long long)act_stride, (long long)out_stride);
    dim3 threads(32 * MM_WARPS);
    cudaStream_t s = fx_cuda_stream(stream);
    const uint8_t *data = (const uint8_t *)w->d_data;
    fx_cuda_with_type(w->type, [&](auto t) {
        constexpr int T = decltype(t)::value;
        if (n_act == 1) {
            dim3 grid((unsigned)((w->ne1 + MM_WARPS - 1) / MM_WARPS), 1);
            matmul_kernel<T, 1><<<grid, threads, 0, s>>>(data, w->row_bytes, w->ne0, w->ne1, d_act,
                                                         act_stride, 1, d_out, out_stride);
        } else {
            dim3 grid((unsigned)((w->ne1 + MM_WARPS - 1) / MM_WARPS),
                      (unsigned)((n_act + MM_ACT - 1) / MM_ACT));
            matmul_kernel<T, MM_ACT><<<grid, threads, 0, s>>>(
                data, w->row_bytes, w->ne0, w->ne1, d_act, act_stride, n_act, d_out, out_stride);
        }
    });
    return fx_cuda_launched("matmul", err);
}
