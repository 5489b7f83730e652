/* AVX2 chunked delta rule of the Gated DeltaNet layers (kernels.h, delta_rows): the generic
 * kernel's steps, each dot product and scaled add eight keys or values at a time with fused
 * multiply-adds (tails under masks). Every dot has one accumulation order whatever the number of
 * rows of the call, so a row gets the same bits alone or in a batch; the order differs from the
 * generic kernel's, so the tables agree within the kernel tests' tolerance. */
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

/* y = y * s + a * x (s = 1: a scaled add). */
FX_INLINE void scale_add(float *y, float s, const float *x, float a, int64_t n) {
    __m256 vs = _mm256_set1_ps(s), va = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(_mm256_loadu_ps(x + i), va,
                                                _mm256_mul_ps(_mm256_loadu_ps(y + i), vs)));
    if (i < n) {
        __m256i m = lanes8((int)(n - i));
        _mm256_maskstore_ps(y + i, m,
                            _mm256_fmadd_ps(_mm256_maskload_ps(x + i, m), va,
                                            _mm256_mul_ps(_mm256_maskload_ps(y + i, m), vs)));
    }
}

#include "kernels/x86_delta_rows.h"

void fx_avx2_delta_rows(const struct fx_delta_state *st, int32_t r0, int32_t n, const float *q,
                        const float *k, const float *v, int64_t in_stride, const float *g,
                        const float *beta, float scale, float *out, int64_t out_stride, float *work,
                        int64_t d) {
    delta_rows_simd(st, r0, n, q, k, v, in_stride, g, beta, scale, out, out_stride, work, d);
}

#endif
