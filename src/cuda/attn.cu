/* Decode attention on device: one new query row of every head against a contiguous KV cache
 * (cuda.h, fx_cuda_attn_decode), the online softmax of kernels.h's attn_run / attn_finish.
 *
 * One block of ATTN_THREADS per query head. Keys come in chunks of ATTN_CHUNK: each warp scores
 * keys w, w + ATTN_WARPS, ... of the chunk (lanes split the dot product over dim_k, a fixed
 * butterfly sums them), the block takes the chunk's largest score, turns scores into weights
 * p_j = e^(s_j - m') once into shared memory, and every thread rescales and accumulates the
 * value dimensions it owns (d = tid, tid + ATTN_THREADS, ...), keys in order:
 *   acc = acc * e^(m - m') + sum_j p_j v_j,   l = l * e^(m - m') + sum_j p_j
 * Chunking bounds shared memory whatever the context length. The finish with a sink is the
 * generic table's attn_finish. Sums run in another order than the CPU's, hence the tolerance of
 * tests/test_cuda_attn.c. */
#include <cuda_fp16.h>

#include "cuda/internal.cuh"

#define ATTN_THREADS    128
#define ATTN_WARPS      (ATTN_THREADS / 32)
#define ATTN_CHUNK      128
#define ATTN_PER_THREAD (FX_CUDA_ATTN_MAX_DIM / ATTN_THREADS) /* value dims one thread owns */

template <typename KV> static __device__ inline float kv_elem(const KV *p, int64_t i);
template <> __device__ inline float kv_elem<float>(const float *p, int64_t i) {
    return p[i];
}
template <> __device__ inline float kv_elem<__half>(const __half *p, int64_t i) {
    return __half2float(p[i]);
}

/* q: [n_head][dim_k]; k: [n_head_kv][k_ctx][dim_k]; v: [n_head_kv][v_ctx][dim_v]; out:
 * [n_head][dim_v]. The query is at position *pos (a.n_keys - 1 when pos is NULL): keys j0 .. j1 - 1
 * are seen. Dynamic shared memory: dim_k floats of the query. */
template <typename KV>
__global__ void attn_decode_kernel(struct fx_cuda_attn a, const int32_t *pos, const float *q,
                                   const KV *k, const KV *v, const float *sinks, float *out) {
    extern __shared__ float q_sh[];
    int64_t j1 = pos ? (int64_t)*pos + 1 : a.n_keys;
    int64_t j0 = a.window > 0 && a.window < j1 ? j1 - a.window : 0;
    __shared__ float p_sh[ATTN_CHUNK];
    int64_t h = blockIdx.x, kvh = h / (a.n_head / a.n_head_kv);
    int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const KV *kh = k + kvh * a.k_ctx * a.dim_k;
    const KV *vh = v + kvh * a.v_ctx * a.dim_v;
    for (int64_t i = tid; i < a.dim_k; i += ATTN_THREADS)
        q_sh[i] = q[h * a.dim_k + i];
    float acc[ATTN_PER_THREAD];
    for (int t = 0; t < ATTN_PER_THREAD; t++)
        acc[t] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    __syncthreads();
    for (int64_t c0 = j0; c0 < j1; c0 += ATTN_CHUNK) {
        int n = (int)min((int64_t)ATTN_CHUNK, j1 - c0);
        for (int j = warp; j < n; j += ATTN_WARPS) {
            const KV *kj = kh + (c0 + j) * a.dim_k;
            float dot = 0.0f;
            for (int64_t i = lane; i < a.dim_k; i += 32)
                dot = fmaf(q_sh[i], kv_elem(kj, i), dot);
            dot = fx_warp_sum(dot);
            float s = dot * a.scale;
            if (a.softcap > 0.0f)
                s = a.softcap * tanhf(s / a.softcap);
            if (lane == 0)
                p_sh[j] = s;
        }
        __syncthreads();
        float run_max = -INFINITY;
        for (int j = 0; j < n; j++)
            run_max = fmaxf(run_max, p_sh[j]);
        float m_new = fmaxf(m, run_max);
        float c = expf(m - m_new); /* 0 for the first chunk (m = -inf) */
        /* Every thread has read the scores before they become weights. */
        __syncthreads();
        for (int j = tid; j < n; j += ATTN_THREADS)
            p_sh[j] = expf(p_sh[j] - m_new);
        __syncthreads();
        float sum = 0.0f;
        for (int j = 0; j < n; j++)
            sum += p_sh[j];
        l = l * c + sum;
        m = m_new;
        for (int t = 0; t < ATTN_PER_THREAD; t++) {
            int64_t d = tid + (int64_t)t * ATTN_THREADS;
            if (d >= a.dim_v)
                break;
            float s = acc[t] * c;
            for (int j = 0; j < n; j++)
                s = fmaf(p_sh[j], kv_elem(vh + (c0 + j) * a.dim_v, d), s);
            acc[t] = s;
        }
        /* The weights are read before the next chunk's scores replace them. */
        __syncthreads();
    }
    float inv;
    if (sinks) { /* as attn_finish: rescale to the larger of the two maxima */
        float sk = sinks[h], top = fmaxf(sk, m);
        float lo = l * expf(m - top) + expf(sk - top);
        inv = lo > 0.0f ? expf(m - top) / lo : 0.0f;
    } else {
        inv = l > 0.0f ? 1.0f / l : 0.0f;
    }
    for (int t = 0; t < ATTN_PER_THREAD; t++) {
        int64_t d = tid + (int64_t)t * ATTN_THREADS;
        if (d < a.dim_v)
            out[h * a.dim_v + d] = acc[t] * inv;
    }
}

fx_status fx_cuda_attn_decode(const struct fx_cuda_attn *a, const int32_t *d_pos, const float *d_q,
                              const void *d_k, const void *d_v, const float *d_sinks, float *d_out,
                              void *stream, struct fx_error *err) {
    if (a->kv_type != FX_TYPE_F32 && a->kv_type != FX_TYPE_F16)
        return fx_cuda_fail(err, FX_ERR_UNSUPPORTED, "cuda: attention over a %s KV cache",
                            fx_type_name(a->kv_type));
    if (a->n_head <= 0 || a->n_head_kv <= 0 || a->n_head % a->n_head_kv || a->dim_k <= 0 ||
        a->dim_v <= 0 || a->dim_v > FX_CUDA_ATTN_MAX_DIM || a->n_keys < 1 || a->n_keys > a->k_ctx ||
        a->n_keys > a->v_ctx || a->window < 0)
        return fx_cuda_fail(err, FX_ERR_INVALID_ARG,
                            "cuda: attention shape: %lld heads, %lld KV heads, dims %lld/%lld, "
                            "%lld keys of %lld/%lld",
                            (long long)a->n_head, (long long)a->n_head_kv, (long long)a->dim_k,
                            (long long)a->dim_v, (long long)a->n_keys, (long long)a->k_ctx,
                            (long long)a->v_ctx);
    size_t shared = (size_t)a->dim_k * sizeof(float);
    cudaStream_t s = fx_cuda_stream(stream);
    if (shared > 48 * 1024)
        return fx_cuda_fail(err, FX_ERR_INVALID_ARG, "cuda: attention dim_k %lld too large",
                            (long long)a->dim_k);
    if (a->kv_type == FX_TYPE_F32)
        attn_decode_kernel<float><<<(unsigned)a->n_head, ATTN_THREADS, shared, s>>>(
            *a, d_pos, d_q, (const float *)d_k, (const float *)d_v, d_sinks, d_out);
    else
        attn_decode_kernel<__half><<<(unsigned)a->n_head, ATTN_THREADS, shared, s>>>(
            *a, d_pos, d_q, (const __half *)d_k, (const __half *)d_v, d_sinks, d_out);
    return fx_cuda_launched("attention", err);
}
