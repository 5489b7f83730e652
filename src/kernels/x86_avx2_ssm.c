/* AVX2 chunked delta rule of the Gated DeltaNet layers (kernels.h, delta_rows): the shared
 * register-tiled body (x86_delta_rows.h) eight values at a time, tails under masks. Its sums
 * run in another order than the generic kernel's, so the tables agree within the kernel tests'
 * tolerance. */
#if defined(__x86_64__)

#include "kernels/x86_avx2.h"

FX_INLINE float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

FX_INLINE float dot(const float *a, const float *b, int64_t n) {
    __m256 acc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
    if (i < n) {
        __m256i m = lanes8((int)(n - i));
        acc = _mm256_fmadd_ps(_mm256_maskload_ps(a + i, m), _mm256_maskload_ps(b + i, m), acc);
    }
    return hsum8(acc);
}

typedef __m256 vf;
#define VW 8
#define PJ 2 /* 8 accumulators and 2 loads of the 16 registers */
#define RJ 4

FX_INLINE vf vload(const float *p, int64_t n) {
    return n >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, lanes8(n > 0 ? (int)n : 0));
}

FX_INLINE void vstore(float *p, vf x, int64_t n) {
    if (n >= 8)
        _mm256_storeu_ps(p, x);
    else
        _mm256_maskstore_ps(p, lanes8(n > 0 ? (int)n : 0), x);
}

FX_INLINE vf vset1(float x) {
    return _mm256_set1_ps(x);
}

FX_INLINE vf vfma(vf a, vf b, vf c) {
    return _mm256_fmadd_ps(a, b, c);
}

FX_INLINE vf vmul(vf a, vf b) {
    return _mm256_mul_ps(a, b);
}

#include "kernels/x86_delta_rows.h"

void fx_avx2_delta_rows(const struct fx_delta_state *st, int32_t r0, int32_t n, const float *q,
                        const float *k, const float *v, int64_t in_stride, const float *g,
                        const float *beta, float scale, float *out, int64_t out_stride, float *work,
                        int64_t d) {
    delta_rows_simd(st, r0, n, q, k, v, in_stride, g, beta, scale, out, out_stride, work, d);
}

#endif
