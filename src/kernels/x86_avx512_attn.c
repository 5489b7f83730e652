/* Attention with AVX-512 (kernels.h, attn_run / attn_finish), online softmax.
 *
 * Scores: 16 keys at a time, each key's dot product accumulated in its own register (fused
 * multiply-adds over the head's 16-float chunks in order), then the 16 registers reduced
 * together by a transposing tree. Every key goes through the same operations whatever its place
 * among the 16, and missing keys of a last group are zeros that never mix with the others, so a
 * key's score does not depend on how a run is grouped.
 * Values: each output's accumulator stays in registers while the value rows stream by, one
 * fused multiply-add per key and chunk, keys in order; outputs that share the value rows are
 * done together (independent chains), which changes no output's arithmetic.
 *
 * Head sizes 64 and 128 get copies with the chunk counts known at compile time (accumulators
 * in registers); other sizes use the generic kernels. */
#include <immintrin.h>
#include <math.h>
#include <stdbool.h>

#include "kernels/generic.h"
#include "kernels/x86_avx512_attn.h"

#define FORCE_INLINE static inline __attribute__((always_inline))
#define RUN          64 /* keys scored per step: 4 registers of 16 */

/* Lane sums of 16 registers: lane j of the result is the sum of r[j]'s lanes. */
FORCE_INLINE __m512 hsum_16x16(const __m512 *r) {
    __m512 s[8], t[4], w[2];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) /* [r 128-bit blocks 0,1 | r' blocks 0,1] + [blocks 2,3 | ...] */
        s[i] = _mm512_add_ps(_mm512_shuffle_f32x4(r[2 * i], r[2 * i + 1], 0x44),
                             _mm512_shuffle_f32x4(r[2 * i], r[2 * i + 1], 0xee));
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) /* one key per 128-bit block */
        t[i] = _mm512_add_ps(_mm512_shuffle_f32x4(s[2 * i], s[2 * i + 1], 0x88),
                             _mm512_shuffle_f32x4(s[2 * i], s[2 * i + 1], 0xdd));
#pragma GCC unroll 2
    for (int i = 0; i < 2; i++)
        w[i] = _mm512_add_ps(_mm512_unpacklo_ps(t[2 * i], t[2 * i + 1]),
                             _mm512_unpackhi_ps(t[2 * i], t[2 * i + 1]));
    __m512 sum =
        _mm512_add_ps(_mm512_shuffle_ps(w[0], w[1], 0x44), _mm512_shuffle_ps(w[0], w[1], 0xee));
    /* Lane 4b + p now holds key b + 4p; put key j in lane j. */
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    return _mm512_permutexvar_ps(order, sum);
}

/* e^x in every lane (Cephes' expf: x = n ln2 + r, a degree-7 polynomial for e^r, within 2 ulp).
 * x below -104 gives +0 (so -inf does), above 88.7 +inf. */
FORCE_INLINE __m512 exp16(__m512 x) {
    x = _mm512_min_ps(_mm512_set1_ps(88.8f), _mm512_max_ps(_mm512_set1_ps(-104.0f), x));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    /* 2^n in two halves, so that results among the subnormals never flush. */
    __m512i ni = _mm512_cvtps_epi32(n);
    __m512i n1 = _mm512_srai_epi32(ni, 1), n2 = _mm512_sub_epi32(ni, n1);
    __m512 s1 =
        _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n1, _mm512_set1_epi32(127)), 23));
    __m512 s2 =
        _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n2, _mm512_set1_epi32(127)), 23));
    return _mm512_mul_ps(_mm512_mul_ps(p, s1), s2);
}

/* cap * tanh(x / cap), through e = e^(-2|y|): tanh(|y|) = (1 - e) / (1 + e). */
FORCE_INLINE __m512 softcap16(__m512 x, float cap) {
    __m512 y = _mm512_mul_ps(x, _mm512_set1_ps(1.0f / cap));
    __m512 a = _mm512_abs_ps(y);
    __m512 e = exp16(_mm512_mul_ps(a, _mm512_set1_ps(-2.0f)));
    __m512 t = _mm512_div_ps(_mm512_sub_ps(_mm512_set1_ps(1.0f), e),
                             _mm512_add_ps(_mm512_set1_ps(1.0f), e));
    /* give t the sign of y */
    t = _mm512_castsi512_ps(_mm512_or_si512(
        _mm512_castps_si512(t),
        _mm512_and_si512(_mm512_castps_si512(y), _mm512_set1_epi32((int)0x80000000u))));
    return _mm512_mul_ps(t, _mm512_set1_ps(cap));
}

/* out[0..16) = q . keys[j * stride] for 16 keys (nj of them valid; the others load as zeros and
 * are not stored), NC chunks of 16 floats per key. */
FORCE_INLINE void scores_16(float *out, const float *q, const float *keys, int64_t stride,
                            int64_t nj, const int NC) {
    __m512 acc[16], qc[8];
#pragma GCC unroll 8
    for (int c = 0; c < NC; c++)
        qc[c] = _mm512_loadu_ps(q + c * 16);
#pragma GCC unroll 16
    for (int jj = 0; jj < 16; jj++)
        acc[jj] = _mm512_setzero_ps();
    /* Key by key (its chunks in order), so that each load is one row pointer plus a constant:
     * looping over chunks first made GCC keep 16 x NC addresses live and spill them. */
    if (nj == 16) {
#pragma GCC unroll 16
        for (int jj = 0; jj < 16; jj++) {
            const float *kp = keys + jj * stride;
#pragma GCC unroll 8
            for (int c = 0; c < NC; c++)
                acc[jj] = _mm512_fmadd_ps(qc[c], _mm512_loadu_ps(kp + c * 16), acc[jj]);
        }
    } else {
        for (int jj = 0; jj < nj; jj++) {
            const float *kp = keys + jj * stride;
#pragma GCC unroll 8
            for (int c = 0; c < NC; c++)
                acc[jj] = _mm512_fmadd_ps(qc[c], _mm512_loadu_ps(kp + c * 16), acc[jj]);
        }
    }
    _mm512_mask_storeu_ps(out, (__mmask16)((1u << nj) - 1), hsum_16x16(acc));
}

/* acc[o] = acc[o] * c[o] + sum_j p[o][j] v_j for NQ outputs of NC chunks (NQ * NC <= 16
 * accumulators, all in registers), keys in order. */
FORCE_INLINE void values_nq(float *acc, int64_t dim_v, const float *p, const float *c,
                            const float *values, int64_t stride, int64_t nk, const int NQ,
                            const int NC) {
    __m512 a[4][8];
#pragma GCC unroll 4
    for (int o = 0; o < NQ; o++)
#pragma GCC unroll 8
        for (int k = 0; k < NC; k++)
            a[o][k] =
                _mm512_mul_ps(_mm512_loadu_ps(acc + o * dim_v + k * 16), _mm512_set1_ps(c[o]));
    for (int64_t j = 0; j < nk; j++) {
        const float *v = values + j * stride;
        __m512 pj[4];
#pragma GCC unroll 4
        for (int o = 0; o < NQ; o++)
            pj[o] = _mm512_set1_ps(p[o * RUN + j]);
#pragma GCC unroll 8
        for (int k = 0; k < NC; k++) {
            __m512 vk = _mm512_loadu_ps(v + k * 16);
#pragma GCC unroll 4
            for (int o = 0; o < NQ; o++)
                a[o][k] = _mm512_fmadd_ps(pj[o], vk, a[o][k]);
        }
    }
#pragma GCC unroll 4
    for (int o = 0; o < NQ; o++)
#pragma GCC unroll 8
        for (int k = 0; k < NC; k++)
            _mm512_storeu_ps(acc + o * dim_v + k * 16, a[o][k]);
}

#define NOINLINE static __attribute__((noinline))

NOINLINE void scores_16_d64(float *out, const float *q, const float *keys, int64_t stride,
                            int64_t nj) {
    scores_16(out, q, keys, stride, nj, 4);
}

NOINLINE void scores_16_d128(float *out, const float *q, const float *keys, int64_t stride,
                             int64_t nj) {
    scores_16(out, q, keys, stride, nj, 8);
}

#define VALUES(NAME, NQ, NC)                                                                       \
    NOINLINE void NAME(float *acc, int64_t dim_v, const float *p, const float *c,                  \
                       const float *values, int64_t stride, int64_t nk) {                          \
        values_nq(acc, dim_v, p, c, values, stride, nk, NQ, NC);                                   \
    }
VALUES(values_d64_q1, 1, 4)
VALUES(values_d64_q2, 2, 4)
VALUES(values_d64_q3, 3, 4)
VALUES(values_d64_q4, 4, 4)
VALUES(values_d128_q1, 1, 8)
VALUES(values_d128_q2, 2, 8)
#undef VALUES

typedef void (*values_fn)(float *acc, int64_t dim_v, const float *p, const float *c,
                          const float *values, int64_t stride, int64_t nk);

/* One run of at most RUN keys for n_q outputs. */
static void run_keys(float *acc, float *m, float *l, const float *q, int64_t q_stride, int64_t n_q,
                     const float *keys, int64_t k_stride, const float *values, int64_t v_stride,
                     int64_t nk, int64_t dim, float scale, float softcap) {
    float p[4 * RUN] __attribute__((aligned(64)));
    float c[4];
    int ng = (int)((nk + 15) / 16);
    for (int64_t o0 = 0; o0 < n_q; o0 += 4) {
        int64_t nq = n_q - o0 < 4 ? n_q - o0 : 4;
        for (int64_t o = 0; o < nq; o++) {
            float *po = p + o * RUN;
            __m512 vmax = _mm512_set1_ps(-INFINITY);
            for (int g = 0; g < ng; g++) {
                int64_t nj = nk - g * 16 < 16 ? nk - g * 16 : 16;
                if (dim == 64)
                    scores_16_d64(po + g * 16, q + (o0 + o) * q_stride, keys + g * 16 * k_stride,
                                  k_stride, nj);
                else
                    scores_16_d128(po + g * 16, q + (o0 + o) * q_stride, keys + g * 16 * k_stride,
                                   k_stride, nj);
                __m512 sg = _mm512_mul_ps(_mm512_load_ps(po + g * 16), _mm512_set1_ps(scale));
                if (softcap > 0.0f)
                    sg = softcap16(sg, softcap);
                sg = _mm512_mask_blend_ps((__mmask16)((1u << nj) - 1), _mm512_set1_ps(-INFINITY),
                                          sg);
                vmax = _mm512_max_ps(vmax, sg);
                _mm512_store_ps(po + g * 16, sg);
            }
            float run_max = _mm512_reduce_max_ps(vmax);
            float *mo = m + o0 + o, m_new = *mo > run_max ? *mo : run_max;
            __m512 vsum = _mm512_setzero_ps();
            for (int g = 0; g < ng; g++) {
                __m512 e = exp16(_mm512_sub_ps(_mm512_load_ps(po + g * 16), _mm512_set1_ps(m_new)));
                vsum = _mm512_add_ps(vsum, e);
                _mm512_store_ps(po + g * 16, e);
            }
            c[o] = expf(*mo - m_new);
            l[o0 + o] = l[o0 + o] * c[o] + _mm512_reduce_add_ps(vsum);
            *mo = m_new;
        }
        /* Values: outputs in groups that keep every accumulator in a register. */
        float *ao = acc + o0 * dim;
        if (dim == 64) {
            static const values_fn by_nq[5] = {NULL, values_d64_q1, values_d64_q2, values_d64_q3,
                                               values_d64_q4};
            by_nq[nq](ao, dim, p, c, values, v_stride, nk);
        } else {
            for (int64_t o = 0; o < nq; o += 2)
                (nq - o >= 2 ? values_d128_q2 : values_d128_q1)(ao + o * dim, dim, p + o * RUN,
                                                                c + o, values, v_stride, nk);
        }
    }
}

void fx_attn_run_avx512(float *acc, float *m, float *l, const float *q, int64_t q_stride,
                        int64_t n_q, const float *keys, int64_t k_stride, const float *values,
                        int64_t v_stride, int64_t n_keys, int64_t dim_k, int64_t dim_v, float scale,
                        float softcap) {
    if (!(dim_k == dim_v && (dim_k == 64 || dim_k == 128))) {
        fx_attn_run_generic(acc, m, l, q, q_stride, n_q, keys, k_stride, values, v_stride, n_keys,
                            dim_k, dim_v, scale, softcap);
        return;
    }
    for (int64_t j0 = 0; j0 < n_keys; j0 += RUN) {
        int64_t nk = n_keys - j0 < RUN ? n_keys - j0 : RUN;
        run_keys(acc, m, l, q, q_stride, n_q, keys + j0 * k_stride, k_stride,
                 values + j0 * v_stride, v_stride, nk, dim_k, scale, softcap);
    }
}
