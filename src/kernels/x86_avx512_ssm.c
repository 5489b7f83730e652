/* AVX-512 chunked delta rule of the Gated DeltaNet layers (kernels.h, delta_rows): the AVX2
 * kernel's steps sixteen keys or values at a time, tails under masks. Every dot has one
 * accumulation order whatever the number of rows of the call, so a row gets the same bits alone
 * or in a batch. */
#if defined(__x86_64__)

#include "kernels/x86_avx512_ssm.h"

#include <immintrin.h>

/* The first n (0..16) lanes. */
static inline __mmask16 lanes16(int64_t n) {
    return (__mmask16)((1u << n) - 1);
}

static inline float dot(const float *a, const float *b, int64_t n) {
    __m512 acc = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc);
    if (i < n) {
        __mmask16 m = lanes16(n - i);
        acc =
            _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), acc);
    }
    return _mm512_reduce_add_ps(acc);
}

/* y = y * s + a * x (s = 1: a scaled add). */
static inline void scale_add(float *y, float s, const float *x, float a, int64_t n) {
    __m512 vs = _mm512_set1_ps(s), va = _mm512_set1_ps(a);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_fmadd_ps(_mm512_loadu_ps(x + i), va,
                                                _mm512_mul_ps(_mm512_loadu_ps(y + i), vs)));
    if (i < n) {
        __mmask16 m = lanes16(n - i);
        _mm512_mask_storeu_ps(y + i, m,
                              _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, x + i), va,
                                              _mm512_mul_ps(_mm512_maskz_loadu_ps(m, y + i), vs)));
    }
}

#include "kernels/x86_delta_rows.h"

void fx_avx512_delta_rows(const struct fx_delta_state *st, int32_t r0, int32_t n, const float *q,
                          const float *k, const float *v, int64_t in_stride, const float *g,
                          const float *beta, float scale, float *out, int64_t out_stride,
                          float *work, int64_t d) {
    delta_rows_simd(st, r0, n, q, k, v, in_stride, g, beta, scale, out, out_stride, work, d);
}

#endif
