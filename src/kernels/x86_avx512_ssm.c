/* AVX-512 delta-rule step of the Gated DeltaNet layers (kernels.h, delta_step): the AVX2
 * kernel's single pass over each state row, sixteen keys at a time, the tail under a mask. */
#if defined(__x86_64__)

#include "kernels/x86_avx512_ssm.h"

#include <immintrin.h>

void fx_avx512_delta_step(float *state, const float *q, const float *k, const float *v, float decay,
                          float beta, float scale, float *out, int64_t d) {
    __m512 vdecay = _mm512_set1_ps(decay);
    int64_t d16 = d - d % 16;
    __mmask16 tail = (__mmask16)((1u << (d - d16)) - 1);
    for (int64_t j = 0; j < d; j++) {
        float *m = state + j * d;
        __m512 acc = _mm512_setzero_ps();
        for (int64_t i = 0; i < d16; i += 16) {
            __m512 x = _mm512_mul_ps(_mm512_loadu_ps(m + i), vdecay);
            _mm512_storeu_ps(m + i, x);
            acc = _mm512_fmadd_ps(x, _mm512_loadu_ps(k + i), acc);
        }
        if (tail) {
            __m512 x = _mm512_mul_ps(_mm512_maskz_loadu_ps(tail, m + d16), vdecay);
            _mm512_mask_storeu_ps(m + d16, tail, x);
            acc = _mm512_fmadd_ps(x, _mm512_maskz_loadu_ps(tail, k + d16), acc);
        }
        __m512 delta = _mm512_set1_ps((v[j] - _mm512_reduce_add_ps(acc)) * beta);
        acc = _mm512_setzero_ps();
        for (int64_t i = 0; i < d16; i += 16) {
            __m512 x = _mm512_fmadd_ps(_mm512_loadu_ps(k + i), delta, _mm512_loadu_ps(m + i));
            _mm512_storeu_ps(m + i, x);
            acc = _mm512_fmadd_ps(x, _mm512_loadu_ps(q + i), acc);
        }
        if (tail) {
            __m512 x = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, k + d16), delta,
                                       _mm512_maskz_loadu_ps(tail, m + d16));
            _mm512_mask_storeu_ps(m + d16, tail, x);
            acc = _mm512_fmadd_ps(x, _mm512_maskz_loadu_ps(tail, q + d16), acc);
        }
        out[j] = _mm512_reduce_add_ps(acc) * scale;
    }
}

#endif
