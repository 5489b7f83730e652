/* AVX-512 (F, BW, VL, DQ) and VNNI kernels. Built with the AVX-512 -m flags and only called
 * after dispatch.c has seen those features. This table fills only what it speeds up; the rest
 * comes from the avx2 table, and what that leaves from the generic one. */
#if defined(__x86_64__)

#include <immintrin.h>

#include "kernels/x86_avx512_attn.h"

#include "kernels/generic.h"

/* ---- F32 ----------------------------------------------------------------------------------- */

static void vec_dot_f32(int64_t n, float *restrict s, const void *restrict x,
                        const void *restrict y) {
    const float *a = x, *b = y;
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    __m512 acc2 = _mm512_setzero_ps(), acc3 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
        acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), acc1);
        acc2 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 32), _mm512_loadu_ps(b + i + 32), acc2);
        acc3 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 48), _mm512_loadu_ps(b + i + 48), acc3);
    }
    for (; i + 16 <= n; i += 16)
        acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
    if (i < n) { /* the last 1..15 elements under a mask: masked-off lanes load as zero */
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        acc1 =
            _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), acc1);
    }
    *s = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc0, acc1), _mm512_add_ps(acc2, acc3)));
}

/* ---- Q8_0 ---------------------------------------------------------------------------------- */

/* Sum of 32 signed byte products as 8 int32 lanes with VNNI: vpdpbusd multiplies unsigned by
 * signed bytes, so x gives its magnitude and y takes x's sign (|y| <= 127 keeps that exact). */
static inline __m256i dot_i8x32(__m256i x, __m256i y) {
    __m256i ax = _mm256_abs_epi8(x);
    __m256i sy = _mm256_sign_epi8(y, x);
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), ax, sy);
}

static void vec_dot_q8_0(int64_t n, float *restrict s, const void *restrict x,
                         const void *restrict y) {
    const struct fx_block_q8_0 *a = x, *b = y;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / FX_QK; i++) {
        __m256i qa = _mm256_loadu_si256((const __m256i *)a[i].qs);
        __m256i qb = _mm256_loadu_si256((const __m256i *)b[i].qs);
        __m256 d = _mm256_set1_ps(_cvtsh_ss(a[i].d) * _cvtsh_ss(b[i].d));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_i8x32(qa, qb)), acc);
    }
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    *s = _mm_cvtss_f32(h);
}

const struct fx_kernels fx_kernels_avx512_part = {
    .name = "avx512",
    .types =
        {
            [FX_TYPE_F32] = {.vec_dot = vec_dot_f32},
            [FX_TYPE_Q8_0] = {.vec_dot = vec_dot_q8_0},
        },
    .attn_scores = fx_attn_scores_avx512,
    .attn_values = fx_attn_values_avx512,
};

#endif
