/* AVX2 + FMA + F16C kernels. Built with -mavx2 -mfma -mf16c -mbmi2 and only called after
 * dispatch.c has seen those features. This table fills only what it speeds up; the rest comes
 * from the generic table. */
#if defined(__x86_64__)

#include <immintrin.h>
#include <math.h>

#include "kernels/generic.h"
#include "kernels/half.h"

/* ---- small helpers ------------------------------------------------------------------------- */

static inline float hsum_f32x8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline float fp16_to_f32_hw(uint16_t h) {
    return _cvtsh_ss(h);
}

/* Sum of 32 products of signed bytes, as 8 int32 lanes. maddubs wants one unsigned operand, so
 * x gives its magnitude and y takes x's sign; |x| <= 128 and |y| <= 127 keep the pairwise
 * int16 sums below 32767. */
static inline __m256i dot_i8x32(__m256i x, __m256i y) {
    __m256i ax = _mm256_sign_epi8(x, x);
    __m256i sy = _mm256_sign_epi8(y, x);
    __m256i pairs = _mm256_maddubs_epi16(ax, sy);
    return _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
}

/* ---- F32 ----------------------------------------------------------------------------------- */

static void vec_dot_f32(int64_t n, float *restrict s, const void *restrict x,
                        const void *restrict y) {
    const float *a = x, *b = y;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    __m256 acc2 = _mm256_setzero_ps(), acc3 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
        acc2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), acc2);
        acc3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), acc3);
    }
    for (; i + 8 <= n; i += 8)
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    float sum = hsum_f32x8(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
    for (; i < n; i++)
        sum += a[i] * b[i];
    *s = sum;
}

/* ---- Q8_0 ---------------------------------------------------------------------------------- */

static void vec_dot_q8_0(int64_t n, float *restrict s, const void *restrict x,
                         const void *restrict y) {
    const struct fx_block_q8_0 *a = x, *b = y;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / FX_QK; i++) {
        __m256i qa = _mm256_loadu_si256((const __m256i *)a[i].qs);
        __m256i qb = _mm256_loadu_si256((const __m256i *)b[i].qs);
        __m256 d = _mm256_set1_ps(fp16_to_f32_hw(a[i].d) * fp16_to_f32_hw(b[i].d));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_i8x32(qa, qb)), acc);
    }
    *s = hsum_f32x8(acc);
}

/* Bit-identical to fx_q8_0_quantize_act: the same amax (max is exact), the same product, the
 * same round-half-even, and F16C rounds d to nearest even like fx_f32_to_fp16. */
static void quantize_act_q8_0(const float *restrict src, void *restrict dst, int64_t n) {
    struct fx_block_q8_0 *b = dst;
    const __m256 sign_bit = _mm256_set1_ps(-0.0f);
    for (int64_t i = 0; i < n / FX_QK; i++, b++, src += FX_QK) {
        __m256 v[4];
        __m256 amax = _mm256_setzero_ps();
        for (int k = 0; k < 4; k++) {
            v[k] = _mm256_loadu_ps(src + 8 * k);
            amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign_bit, v[k]));
        }
        __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
        m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        m = _mm_max_ss(m, _mm_movehdup_ps(m));
        float max = _mm_cvtss_f32(m);
        b->d = _cvtss_sh(max / 127.0f, _MM_FROUND_TO_NEAREST_INT);
        __m256 id = _mm256_set1_ps(max != 0.0f ? 127.0f / max : 0.0f);
        __m256i q[4];
        for (int k = 0; k < 4; k++)
            q[k] = _mm256_cvtps_epi32(_mm256_round_ps(
                _mm256_mul_ps(v[k], id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        /* Pack 32 int32 to int8 (saturating; values are within -127..127 already). The packs
         * work per 128-bit lane, so the result comes out in lane order 0 4 1 5 2 6 3 7 of
         * 32-bit groups, which the permute puts back. */
        __m256i p =
            _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
        p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256((__m256i *)b->qs, p);
    }
}

const struct fx_kernels fx_kernels_avx2_part = {
    .name = "avx2",
    .types =
        {
            [FX_TYPE_F32] = {.vec_dot = vec_dot_f32},
            [FX_TYPE_Q8_0] = {.vec_dot = vec_dot_q8_0, .quantize_act = quantize_act_q8_0},
        },
};

#endif
