/* AVX-512 chunked delta rule of the Gated DeltaNet layers (kernels.h, delta_rows): the shared
 * register-tiled body (x86_delta_rows.h) sixteen values at a time, tails under masks. */
#if defined(__x86_64__)

#include "kernels/x86_avx512_ssm.h"

#include <immintrin.h>

/* The first n (clamped to 0..16) lanes. */
static inline __mmask16 lanes16(int64_t n) {
    return n >= 16 ? (__mmask16)0xffff : n <= 0 ? 0 : (__mmask16)((1u << n) - 1);
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

typedef __m512 vf;
#define VW 16
#define PJ 4 /* 16 accumulators and 4 loads of the 32 registers */
#define RJ 8 /* d = 128 in one tile */

static inline vf vload(const float *p, int64_t n) {
    return n >= 16 ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(lanes16(n), p);
}

static inline void vstore(float *p, vf x, int64_t n) {
    if (n >= 16)
        _mm512_storeu_ps(p, x);
    else
        _mm512_mask_storeu_ps(p, lanes16(n), x);
}

static inline vf vset1(float x) {
    return _mm512_set1_ps(x);
}

static inline vf vfma(vf a, vf b, vf c) {
    return _mm512_fmadd_ps(a, b, c);
}

static inline vf vmul(vf a, vf b) {
    return _mm512_mul_ps(a, b);
}

#include "kernels/x86_delta_rows.h"

void fx_avx512_delta_rows(const struct fx_delta_state *st, int32_t r0, int32_t n, const float *q,
                          const float *k, const float *v, int64_t in_stride, const float *g,
                          const float *beta, float scale, float *out, int64_t out_stride,
                          float *work, int64_t d) {
    delta_rows_simd(st, r0, n, q, k, v, in_stride, g, beta, scale, out, out_stride, work, d);
}

#endif
