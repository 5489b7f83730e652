/* AVX-512 row operations worth 16 lanes. The Q8_0, Q8_1 and Q8_K activation quantizers, SiLU,
 * GELU and sigmoid with their gated products, gpt-oss's gated activation and the softcap give the
 * AVX2 table's bits (the same operations, 16 lanes at a time); measured on smollm2-135m's 512-row
 * prefill, the AVX2 ones took 4.0% (quantizing) and 3.6% (SwiGLU) of the samples. Argmax, for
 * greedy sampling, gives the generic scan's index. The other row operations come from the AVX2
 * table. */
#if defined(__x86_64__)

#include "kernels/x86_avx512.h"

#include <math.h>

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

/* The sums of 16 lanes of each of q[0..3] in the int32 lanes 0..3 of the result: pairs of
 * vectors interleaved and added twice within 128-bit lanes, then the four 128-bit lanes added
 * (fewer shuffles than four separate reductions). */
FX_INLINE __m128i sums16_x4(const __m512i q[4]) {
    __m512i a =
        _mm512_add_epi32(_mm512_unpacklo_epi32(q[0], q[1]), _mm512_unpackhi_epi32(q[0], q[1]));
    __m512i b =
        _mm512_add_epi32(_mm512_unpacklo_epi32(q[2], q[3]), _mm512_unpackhi_epi32(q[2], q[3]));
    __m512i v = _mm512_add_epi32(_mm512_unpacklo_epi64(a, b), _mm512_unpackhi_epi64(a, b));
    __m256i h = _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
    return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

/* Q8_K: the value of largest magnitude (the first of equals) maps to -127; bit-identical to
 * fx_q8_K_quantize_act for finite input, as the AVX2 encoder is. */
void fx_avx512_quantize_act_q8_K(const float *restrict src, void *restrict dst, int64_t n) {
    struct fx_block_q8_K *b = dst;
    const __m512 sign_bit = _mm512_set1_ps(-0.0f);
    for (int64_t i = 0; i < n / FX_QK_K; i++, b++, src += FX_QK_K) {
        __m512 amax = _mm512_setzero_ps();
        for (int k = 0; k < FX_QK_K; k += 16)
            amax = _mm512_max_ps(_mm512_andnot_ps(sign_bit, _mm512_loadu_ps(src + k)), amax);
        float am = _mm512_reduce_max_ps(amax);
        if (!(am > 0.0f)) {
            memset(b, 0, sizeof *b);
            continue;
        }
        float max = 0.0f; /* the first element whose magnitude is am */
        for (int k = 0; k < FX_QK_K; k += 16) {
            __mmask16 hit = _mm512_cmp_ps_mask(_mm512_andnot_ps(sign_bit, _mm512_loadu_ps(src + k)),
                                               _mm512_set1_ps(am), _CMP_EQ_OQ);
            if (hit) {
                max = src[k + __builtin_ctz((unsigned)hit)];
                break;
            }
        }
        float iscale = -127.f / max;
        __m512 is = _mm512_set1_ps(iscale);
        for (int k = 0; k < FX_QK_K; k += 64) {
            __m512i q[4];
#pragma GCC unroll 4
            for (int l = 0; l < 4; l++) {
                __m512i v =
                    _mm512_cvtps_epi32(_mm512_mul_ps(is, _mm512_loadu_ps(src + k + 16 * l)));
                q[l] = _mm512_min_epi32(_mm512_max_epi32(v, _mm512_set1_epi32(-127)),
                                        _mm512_set1_epi32(127));
                _mm_storeu_si128((__m128i *)(b->qs + k + 16 * l), _mm512_cvtepi32_epi8(q[l]));
            }
            __m128i sums = sums16_x4(q);
            _mm_storel_epi64((__m128i *)(b->bsums + k / 16), _mm_packs_epi32(sums, sums));
        }
        b->d = 1 / iscale;
    }
}

/* x / (1 + e^-x) */
FX_INLINE __m512 silu_f32x16(__m512 x) {
    __m512 e = exp_f32x16(_mm512_sub_ps(_mm512_setzero_ps(), x));
    return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

/* One loop per shape, the activation as a parameter (inlined: the loops are always_inline and
 * each caller passes a constant). */
FX_INLINE void act_rows16(float *out, const float *x, int64_t n, __m512 (*f)(__m512)) {
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 k = lanes16(n - i);
        _mm512_mask_storeu_ps(out + i, k, f(_mm512_maskz_loadu_ps(k, x + i)));
    }
}

FX_INLINE void glu_rows16(float *out, const float *g, const float *u, int64_t n,
                          __m512 (*f)(__m512)) {
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 k = lanes16(n - i);
        __m512 y =
            _mm512_mul_ps(f(_mm512_maskz_loadu_ps(k, g + i)), _mm512_maskz_loadu_ps(k, u + i));
        _mm512_mask_storeu_ps(out + i, k, y);
    }
}

void fx_avx512_silu(float *out, const float *x, int64_t n) {
    act_rows16(out, x, n, silu_f32x16);
}

void fx_avx512_swiglu(float *out, const float *g, const float *u, int64_t n) {
    glu_rows16(out, g, u, n, silu_f32x16);
}

/* 1 / (1 + e^-x) (fx_avx2_sigmoid) */
FX_INLINE __m512 sigmoid_f32x16(__m512 x) {
    __m512 e = exp_f32x16(_mm512_sub_ps(_mm512_setzero_ps(), x));
    return _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

void fx_avx512_sigmoid(float *out, const float *x, int64_t n) {
    act_rows16(out, x, n, sigmoid_f32x16);
}

void fx_avx512_sigmoid_glu(float *out, const float *g, const float *u, int64_t n) {
    glu_rows16(out, g, u, n, sigmoid_f32x16);
}

/* The tanh-approximate GELU as x / (1 + e^(-2z)) (fx_avx2_gelu). */
FX_INLINE __m512 gelu_f32x16(__m512 x) {
    __m512 inner =
        _mm512_fmadd_ps(_mm512_mul_ps(x, x), _mm512_set1_ps(0.044715f), _mm512_set1_ps(1.0f));
    __m512 minus_2z = _mm512_mul_ps(_mm512_mul_ps(x, _mm512_set1_ps(-1.59576912160573071f)), inner);
    return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), exp_f32x16(minus_2z)));
}

void fx_avx512_gelu(float *out, const float *x, int64_t n) {
    act_rows16(out, x, n, gelu_f32x16);
}

void fx_avx512_geglu(float *out, const float *g, const float *u, int64_t n) {
    glu_rows16(out, g, u, n, gelu_f32x16);
}

/* cap tanh(x / cap) (fx_avx2_softcap). */
void fx_avx512_softcap(float *x, int64_t n, float cap) {
    const __m512 sign_bit = _mm512_set1_ps(-0.0f), one = _mm512_set1_ps(1.0f);
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 k = lanes16(n - i);
        __m512 y = _mm512_div_ps(_mm512_maskz_loadu_ps(k, x + i), _mm512_set1_ps(cap));
        __m512 e = exp_f32x16(_mm512_mul_ps(_mm512_set1_ps(-2.0f), _mm512_andnot_ps(sign_bit, y)));
        __m512 t = _mm512_div_ps(_mm512_sub_ps(one, e), _mm512_add_ps(one, e));
        t = _mm512_or_ps(t, _mm512_and_ps(sign_bit, y));
        _mm512_mask_storeu_ps(x + i, k, _mm512_mul_ps(_mm512_set1_ps(cap), t));
    }
}

/* gpt-oss's gated activation, the generic kernel's formula: x = min(g, limit), y = u clamped to
 * [-limit, limit], x / (1 + e^(alpha * -x)) * (y + 1). */
void fx_avx512_swiglu_oai(float *out, const float *g, const float *u, int64_t n, float alpha,
                          float limit) {
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 k = lanes16(n - i);
        __m512 x = _mm512_min_ps(_mm512_maskz_loadu_ps(k, g + i), _mm512_set1_ps(limit));
        __m512 y =
            _mm512_min_ps(_mm512_max_ps(_mm512_maskz_loadu_ps(k, u + i), _mm512_set1_ps(-limit)),
                          _mm512_set1_ps(limit));
        __m512 e =
            exp_f32x16(_mm512_mul_ps(_mm512_set1_ps(alpha), _mm512_sub_ps(_mm512_setzero_ps(), x)));
        __m512 s = _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
        _mm512_mask_storeu_ps(out + i, k, _mm512_mul_ps(s, _mm512_add_ps(y, _mm512_set1_ps(1.0f))));
    }
}

/* The generic argmax's answer in two passes of 16 lanes: the largest value (vmaxps keeps its
 * second operand, the running maximum, where x is NaN, so NaN never wins), then the first element
 * equal to it (+0 and -0 compare equal, as in the generic scan). A row of NaN only has no equal
 * element, and the generic scan answers 0 for it. Greedy sampling scans a 49,152-152,064 logit row
 * for every token, 10-20 us in scalar code. */
int64_t fx_avx512_argmax(const float *x, int64_t n) {
    __m512 m = _mm512_set1_ps(-INFINITY);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        m = _mm512_max_ps(_mm512_loadu_ps(x + i), m);
    __mmask16 tail = (__mmask16)((1u << (n - i)) - 1);
    m = _mm512_max_ps(_mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), tail, x + i), m);
    __m512 best = _mm512_set1_ps(_mm512_reduce_max_ps(m));
    for (i = 0; i + 16 <= n; i += 16) {
        __mmask16 eq = _mm512_cmp_ps_mask(_mm512_loadu_ps(x + i), best, _CMP_EQ_OQ);
        if (eq)
            return i + __builtin_ctz(eq);
    }
    __mmask16 eq =
        _mm512_mask_cmp_ps_mask(tail, _mm512_maskz_loadu_ps(tail, x + i), best, _CMP_EQ_OQ);
    return eq ? i + __builtin_ctz(eq) : 0;
}

#endif
