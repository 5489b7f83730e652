/* Greedy argmax and top-k on device, so that a decode step need not copy the logits back.
 *
 * One block of SEL_THREADS makes k passes over x; pass p finds the largest element that comes
 * after pick p - 1 in the order (value descending, index ascending), skipping NaN: each thread
 * keeps its best of a strided share, then a shared-memory tree picks the block's best. O(k n)
 * reads, all from L2 after the first pass: meant for the small k of sampling (a vocabulary of
 * 150K and k = 40 reads 24 MB of L2), not for sorting. */
#include "cuda/internal.cuh"

#define SEL_THREADS 1024

/* Does (v, i) come before (bv, bi): larger value first, then the lower index; bi < 0 is none. */
static __device__ inline bool before(float v, int64_t i, float bv, int64_t bi) {
    return bi < 0 || v > bv || (v == bv && i < bi);
}

__global__ void top_k_kernel(const float *x, int64_t n, int k, int32_t *idx, float *val) {
    __shared__ float sv[SEL_THREADS];
    __shared__ int64_t si[SEL_THREADS];
    float pv = 0.0f;
    int64_t pi = -1; /* the previous pick; -1 before the first */
    for (int p = 0; p < k; p++) {
        float bv = 0.0f;
        int64_t bi = -1;
        for (int64_t i = threadIdx.x; i < n; i += SEL_THREADS) {
            float v = x[i];
            if (v != v)
                continue; /* NaN never wins */
            if (pi >= 0 && !(v < pv || (v == pv && i > pi)))
                continue; /* already picked */
            if (before(v, i, bv, bi)) {
                bv = v;
                bi = i;
            }
        }
        sv[threadIdx.x] = bv;
        si[threadIdx.x] = bi;
        __syncthreads();
        for (int half = SEL_THREADS / 2; half > 0; half >>= 1) {
            if (threadIdx.x < half) {
                int o = threadIdx.x + half;
                if (si[o] >= 0 && before(sv[o], si[o], sv[threadIdx.x], si[threadIdx.x])) {
                    sv[threadIdx.x] = sv[o];
                    si[threadIdx.x] = si[o];
                }
            }
            __syncthreads();
        }
        pv = sv[0];
        pi = si[0];
        if (threadIdx.x == 0) {
            idx[p] = (int32_t)pi;
            val[p] = pi >= 0 ? pv : 0.0f;
        }
        /* Everyone has read the pick before the next pass overwrites it. */
        __syncthreads();
        if (pi < 0) { /* nothing left: the rest are -1 */
            for (int q = p + 1 + threadIdx.x; q < k; q += SEL_THREADS) {
                idx[q] = -1;
                val[q] = 0.0f;
            }
            return;
        }
    }
}

fx_status fx_cuda_top_k(const float *d_x, int64_t n, int k, int32_t *d_idx, float *d_val,
                        void *stream, struct fx_error *err) {
    if (n < 1 || n > INT32_MAX || k < 1 || k > FX_CUDA_TOP_K_MAX)
        return fx_cuda_fail(err, FX_ERR_INVALID_ARG, "cuda: top-%d of %lld elements", k,
                            (long long)n);
    top_k_kernel<<<1, SEL_THREADS, 0, fx_cuda_stream(stream)>>>(d_x, n, k, d_idx, d_val);
    return fx_cuda_launched("top_k", err);
}
