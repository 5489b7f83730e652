/* AVX-512 row operations that a prefill spends enough on to want 16 lanes: the Q8_0 and Q8_1
 * activation quantizers and SiLU with its gated product. Each gives the AVX2 table's bits (the
 * same operations, 16 lanes at a time); the other row operations come from the AVX2 table.
 * Measured on smollm2-135m's 512-row prefill, where the AVX2 ones took 4.0% (quantizing) and 3.6%
 * (SwiGLU) of the samples. */
#if defined(__x86_64__)

#include "kernels/x86_avx512.h"

#include "kernels/generic.h"
#include "kernels/x86_avx512_rows.h"

/* One block of 32 as Q8_0 and Q8_1 activations (kernels.h): codes into qs, the sum of the codes
 * into *sum; returns d = amax / 127. Bit-identical to the generic encoder: the same amax (max is
 * exact; vmaxps returns its second operand for NaN, so NaN is skipped as fmaxf does), the same
 * product, the same round-half-even. */
FX_INLINE float quantize_block_32(const float *src, int8_t *qs, int32_t *sum) {
    const __m512 sign_bit = _mm512_set1_ps(-0.0f);
    __m512 v[2];
    __m512 amax = _mm512_setzero_ps();
#pragma GCC unroll 2
    for (int k = 0; k < 2; k++) {
        v[k] = _mm512_loadu_ps(src + 16 * k);
        amax = _mm512_max_ps(_mm512_andnot_ps(sign_bit, v[k]), amax);
    }
    float max = _mm512_reduce_max_ps(amax);
    __m512 id = _mm512_set1_ps(max != 0.0f ? 127.0f / max : 0.0f);
    __m512i q[2];
#pragma GCC unroll 2
    for (int k = 0; k < 2; k++) {
        __m512 c = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(v[k], id), _mm512_set1_ps(-127.0f)),
                                 _mm512_set1_ps(127.0f));
        q[k] = _mm512_cvtps_epi32(c);
        _mm_storeu_si128((__m128i *)(qs + 16 * k), _mm512_cvtepi32_epi8(q[k]));
    }
    *sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q[0], q[1]));
    return max / 127.0f;
}

void fx_avx512_quantize_act_q8_0(const float *restrict src, void *restrict dst, int64_t n) {
    struct fx_block_q8_0 *b = dst;
    for (int64_t i = 0; i < n / FX_QK; i++, b++, src += FX_QK) {
        int32_t sum;
        b->d = _cvtss_sh(quantize_block_32(src, b->qs, &sum), _MM_FROUND_TO_NEAREST_INT);
    }
}

void fx_avx512_quantize_act_q8_1(const float *restrict src, void *restrict dst, int64_t n) {
    struct fx_block_q8_1 *b = dst;
    for (int64_t i = 0; i < n / FX_QK; i++, b++, src += FX_QK) {
        int32_t sum;
        float d = quantize_block_32(src, b->qs, &sum);
        b->d = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
        b->s = _cvtss_sh(d * (float)sum, _MM_FROUND_TO_NEAREST_INT);
    }
}

/* x / (1 + e^-x) */
FX_INLINE __m512 silu_f32x16(__m512 x) {
    __m512 e = exp_f32x16(_mm512_sub_ps(_mm512_setzero_ps(), x));
    return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

void fx_avx512_silu(float *out, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 k = lanes16(n - i);
        _mm512_mask_storeu_ps(out + i, k, silu_f32x16(_mm512_maskz_loadu_ps(k, x + i)));
    }
}

void fx_avx512_swiglu(float *out, const float *g, const float *u, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 k = lanes16(n - i);
        __m512 y = _mm512_mul_ps(silu_f32x16(_mm512_maskz_loadu_ps(k, g + i)),
                                 _mm512_maskz_loadu_ps(k, u + i));
        _mm512_mask_storeu_ps(out + i, k, y);
    }
}

#endif
