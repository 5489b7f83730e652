/* AVX2 delta-rule step of the Gated DeltaNet layers (kernels.h, delta_step). Each row of the
 * state (one column of the matrix) is read and written once per token: decayed and dotted with k,
 * then updated and dotted with q, eight keys at a time with fused multiply-adds. The sums run in
 * another order than the generic kernel's, so the two agree within the kernel tests' tolerance,
 * not bit for bit. */
#if defined(__x86_64__)

#include "kernels/x86_avx2.h"

static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

void fx_avx2_delta_step(float *state, const float *q, const float *k, const float *v, float decay,
                        float beta, float scale, float *out, int64_t d) {
    __m256 vdecay = _mm256_set1_ps(decay);
    int64_t d8 = d - d % 8;
    __m256i tail = lanes8((int)(d - d8));
    for (int64_t j = 0; j < d; j++) {
        float *m = state + j * d;
        __m256 acc = _mm256_setzero_ps();
        for (int64_t i = 0; i < d8; i += 8) {
            __m256 x = _mm256_mul_ps(_mm256_loadu_ps(m + i), vdecay);
            _mm256_storeu_ps(m + i, x);
            acc = _mm256_fmadd_ps(x, _mm256_loadu_ps(k + i), acc);
        }
        if (d8 < d) {
            __m256 x = _mm256_mul_ps(_mm256_maskload_ps(m + d8, tail), vdecay);
            _mm256_maskstore_ps(m + d8, tail, x);
            acc = _mm256_fmadd_ps(x, _mm256_maskload_ps(k + d8, tail), acc);
        }
        __m256 delta = _mm256_set1_ps((v[j] - hsum8(acc)) * beta);
        acc = _mm256_setzero_ps();
        for (int64_t i = 0; i < d8; i += 8) {
            __m256 x = _mm256_fmadd_ps(_mm256_loadu_ps(k + i), delta, _mm256_loadu_ps(m + i));
            _mm256_storeu_ps(m + i, x);
            acc = _mm256_fmadd_ps(x, _mm256_loadu_ps(q + i), acc);
        }
        if (d8 < d) {
            __m256 x = _mm256_fmadd_ps(_mm256_maskload_ps(k + d8, tail), delta,
                                       _mm256_maskload_ps(m + d8, tail));
            _mm256_maskstore_ps(m + d8, tail, x);
            acc = _mm256_fmadd_ps(x, _mm256_maskload_ps(q + d8, tail), acc);
        }
        out[j] = hsum8(acc) * scale;
    }
}

#endif
