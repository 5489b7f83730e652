/* Attention with AVX-512 (kernels.h, attn_run), online softmax, one query per lane.
 *
 * Scores: the state keeps the queries transposed (qt[i][o]), so 16 queries' scores for key j
 * are bcast(k_j[i]) * qt[i][16 queries] summed over i = 0 .. dim - 1 in order: each query's
 * dot product is its own lane's chain of fused multiply-adds, the same whichever queries share
 * the vector, and no horizontal sums are needed. Blocks of keys (16 keys of one vector of
 * queries, or 8 keys of two) keep 16 independent chains going.
 * Softmax: lane by lane, keys in order. A key a query does not see scores -inf, so its weight
 * is +0, and adding +0 changes no sum: a query's bits depend on its own keys and runs only.
 * Values: each output's accumulators stay in registers while the value rows stream by, one
 * fused multiply-add per key and chunk, keys in order; tiles of 6 outputs x 64 elements (24
 * accumulators) share each load of a value row's 64 elements.
 *
 * Head sizes 64 and 128 (with dim_k == dim_v); other sizes use the generic kernel. */
#include <immintrin.h>
#include <math.h>
#include <stdbool.h>

#include "kernels/generic.h"
#include "kernels/x86_avx512_attn.h"

#define FORCE_INLINE static inline __attribute__((always_inline))
#define NOINLINE     static __attribute__((noinline))

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

/* p[jj][16 r ..] = the scores of keys jj = 0 .. KB - 1 (at keys + jj * k_stride) for QR
 * vectors of 16 queries (at qt, rows of n_pad floats), D elements each. */
FORCE_INLINE void scores_block(float *p, int64_t n_pad, const float *qt, const float *keys,
                               int64_t k_stride, const int D, const int QR, const int KB) {
    __m512 acc[16][2];
#pragma GCC unroll 16
    for (int jj = 0; jj < KB; jj++)
#pragma GCC unroll 2
        for (int r = 0; r < QR; r++)
            acc[jj][r] = _mm512_setzero_ps();
#pragma GCC unroll 2
    for (int i = 0; i < D; i++) {
        __m512 q[2];
#pragma GCC unroll 2
        for (int r = 0; r < QR; r++)
            q[r] = _mm512_load_ps(qt + i * n_pad + 16 * r);
#pragma GCC unroll 16
        for (int jj = 0; jj < KB; jj++) {
            __m512 k = _mm512_set1_ps(keys[jj * k_stride + i]);
#pragma GCC unroll 2
            for (int r = 0; r < QR; r++)
                acc[jj][r] = _mm512_fmadd_ps(k, q[r], acc[jj][r]);
        }
    }
#pragma GCC unroll 16
    for (int jj = 0; jj < KB; jj++)
#pragma GCC unroll 2
        for (int r = 0; r < QR; r++)
            _mm512_store_ps(p + jj * n_pad + 16 * r, acc[jj][r]);
}

typedef void (*scores_fn)(float *p, int64_t n_pad, const float *qt, const float *keys,
                          int64_t k_stride);

#define SCORES(NAME, D, QR, KB)                                                                    \
    NOINLINE void NAME(float *p, int64_t n_pad, const float *qt, const float *keys,                \
                       int64_t k_stride) {                                                         \
        scores_block(p, n_pad, qt, keys, k_stride, D, QR, KB);                                     \
    }
SCORES(scores_d64_r1_k16, 64, 1, 16)
SCORES(scores_d64_r2_k8, 64, 2, 8)
SCORES(scores_d64_r1_k1, 64, 1, 1)
SCORES(scores_d64_r2_k1, 64, 2, 1)
SCORES(scores_d128_r1_k16, 128, 1, 16)
SCORES(scores_d128_r2_k8, 128, 2, 8)
SCORES(scores_d128_r1_k1, 128, 1, 1)
SCORES(scores_d128_r2_k1, 128, 2, 1)
#undef SCORES

/* acc[o] = acc[o] * c[o] + sum_j p[j][o] v_j over NC chunks of 16 floats for NQ outputs (rows
 * of dim floats at acc; the chunks' values at `values`, rows of v_stride floats), keys j0 .. j1
 * in order (p: rows of n_pad floats). */
FORCE_INLINE void values_tile(float *acc, int64_t dim, const float *c, const float *p,
                              int64_t n_pad, const float *values, int64_t v_stride, int64_t j0,
                              int64_t j1, const int NQ, const int NC) {
    __m512 a[6][4];
#pragma GCC unroll 6
    for (int o = 0; o < NQ; o++)
#pragma GCC unroll 4
        for (int k = 0; k < NC; k++)
            a[o][k] = _mm512_mul_ps(_mm512_loadu_ps(acc + o * dim + k * 16), _mm512_set1_ps(c[o]));
    for (int64_t j = j0; j <= j1; j++) {
        const float *v = values + j * v_stride, *pj = p + j * n_pad;
#pragma GCC unroll 4
        for (int k = 0; k < NC; k++) {
            __m512 vk = _mm512_loadu_ps(v + k * 16);
#pragma GCC unroll 6
            for (int o = 0; o < NQ; o++)
                a[o][k] = _mm512_fmadd_ps(_mm512_set1_ps(pj[o]), vk, a[o][k]);
        }
    }
#pragma GCC unroll 6
    for (int o = 0; o < NQ; o++)
#pragma GCC unroll 4
        for (int k = 0; k < NC; k++)
            _mm512_storeu_ps(acc + o * dim + k * 16, a[o][k]);
}

typedef void (*values_fn)(float *acc, int64_t dim, const float *c, const float *p, int64_t n_pad,
                          const float *values, int64_t v_stride, int64_t j0, int64_t j1);

/* Tiles of up to 6 outputs x 64 elements (24 accumulators): each load of a value row's 64
 * elements serves 6 outputs. */
#define VALUES(NAME, NQ)                                                                           \
    NOINLINE void NAME(float *acc, int64_t dim, const float *c, const float *p, int64_t n_pad,     \
                       const float *values, int64_t v_stride, int64_t j0, int64_t j1) {            \
        values_tile(acc, dim, c, p, n_pad, values, v_stride, j0, j1, NQ, 4);                       \
    }
VALUES(values_q1, 1)
VALUES(values_q2, 2)
VALUES(values_q3, 3)
VALUES(values_q4, 4)
VALUES(values_q5, 5)
VALUES(values_q6, 6)
#undef VALUES

static const values_fn values_by_nq[7] = {NULL,      values_q1, values_q2, values_q3,
                                          values_q4, values_q5, values_q6};

/* The keys [*j0, *j1] that queries o0 .. o1 - 1 see between them (*j0 > *j1 when none). */
static void span(const struct fx_attn_state *st, const int32_t *first, const int32_t *last,
                 int64_t o0, int64_t o1, int64_t *j0, int64_t *j1) {
    *j0 = INT32_MAX, *j1 = -1;
    for (int64_t r = o0 / st->group; r < st->n_rows && r * st->group < o1; r++)
        if (first[r] <= last[r]) {
            *j0 = first[r] < *j0 ? first[r] : *j0;
            *j1 = last[r] > *j1 ? last[r] : *j1;
        }
}

/* Softmax of one vector of 16 queries (lanes o0 ..): mask, scale and cap the scores of keys
 * j0 .. j1, fold the run into m and l, leave the weights in p and the rescale in c. */
static void softmax_lanes(struct fx_attn_state *st, const int32_t *first, const int32_t *last,
                          int64_t o0, int64_t j0, int64_t j1, float scale, float softcap) {
    int32_t lane_first[16], lane_last[16];
    for (int64_t i = 0; i < 16; i++) {
        int64_t o = o0 + i;
        lane_first[i] = o < st->n_q ? first[o / st->group] : INT32_MAX;
        lane_last[i] = o < st->n_q ? last[o / st->group] : -1;
    }
    __m512i fv = _mm512_loadu_si512(lane_first), lv = _mm512_loadu_si512(lane_last);
    float *p = st->p + o0;
    __m512 run_max = _mm512_set1_ps(-INFINITY);
    for (int64_t j = j0; j <= j1; j++) {
        __m512i jv = _mm512_set1_epi32((int32_t)j);
        __mmask16 seen = _mm512_cmple_epi32_mask(fv, jv) & _mm512_cmpge_epi32_mask(lv, jv);
        __m512 s = _mm512_mul_ps(_mm512_load_ps(p + j * st->n_pad), _mm512_set1_ps(scale));
        if (softcap > 0.0f)
            s = softcap16(s, softcap);
        s = _mm512_mask_blend_ps(seen, _mm512_set1_ps(-INFINITY), s);
        run_max = _mm512_max_ps(run_max, s);
        _mm512_store_ps(p + j * st->n_pad, s);
    }
    __m512 m_old = _mm512_load_ps(st->m + o0), m_new = _mm512_max_ps(m_old, run_max);
    /* A lane that has seen no key yet keeps m = -inf; it subtracts 0 instead, so that its
     * weights and rescale come out 0 rather than NaN. */
    __mmask16 live = _mm512_cmp_ps_mask(m_new, _mm512_set1_ps(-INFINITY), _CMP_NEQ_OQ);
    __m512 m_sub = _mm512_maskz_mov_ps(live, m_new);
    __m512 sum = _mm512_setzero_ps();
    for (int64_t j = j0; j <= j1; j++) {
        __m512 e = exp16(_mm512_sub_ps(_mm512_load_ps(p + j * st->n_pad), m_sub));
        sum = _mm512_add_ps(sum, e);
        _mm512_store_ps(p + j * st->n_pad, e);
    }
    __m512 c = exp16(_mm512_sub_ps(m_old, m_sub));
    _mm512_store_ps(st->c + o0, c);
    _mm512_store_ps(st->l + o0, _mm512_fmadd_ps(_mm512_load_ps(st->l + o0), c, sum));
    _mm512_store_ps(st->m + o0, m_new);
}

void fx_attn_run_avx512(struct fx_attn_state *st, const int32_t *first, const int32_t *last,
                        const float *keys, int64_t k_stride, const float *values, int64_t v_stride,
                        int64_t n_keys, float scale, float softcap) {
    const int64_t dim = st->dim_k;
    if (!(dim == st->dim_v && (dim == 64 || dim == 128))) {
        fx_attn_run_generic(st, first, last, keys, k_stride, values, v_stride, n_keys, scale,
                            softcap);
        return;
    }
    const bool d64 = dim == 64;
    /* Scores, two vectors of queries at a time where there are two. */
    for (int64_t o0 = 0; o0 < st->n_q; o0 += 32) {
        int qr = st->n_pad - o0 >= 32 ? 2 : 1;
        int64_t j0, j1;
        span(st, first, last, o0, o0 + 16 * qr, &j0, &j1);
        scores_fn block = qr == 2 ? (d64 ? scores_d64_r2_k8 : scores_d128_r2_k8)
                                  : (d64 ? scores_d64_r1_k16 : scores_d128_r1_k16);
        scores_fn single = qr == 2 ? (d64 ? scores_d64_r2_k1 : scores_d128_r2_k1)
                                   : (d64 ? scores_d64_r1_k1 : scores_d128_r1_k1);
        int64_t kb = qr == 2 ? 8 : 16, j = j0;
        for (; j + kb <= j1 + 1; j += kb)
            block(st->p + j * st->n_pad + o0, st->n_pad, st->qt + o0, keys + j * k_stride,
                  k_stride);
        for (; j <= j1; j++)
            single(st->p + j * st->n_pad + o0, st->n_pad, st->qt + o0, keys + j * k_stride,
                   k_stride);
    }
    for (int64_t o0 = 0; o0 < st->n_q; o0 += 16) {
        int64_t j0, j1;
        span(st, first, last, o0, o0 + 16, &j0, &j1);
        if (j0 <= j1)
            softmax_lanes(st, first, last, o0, j0, j1, scale, softcap);
    }
    /* Values: tiles of outputs x 64 elements that keep every accumulator in a register, within
     * one vector of queries (whose softmax covered every key any of them sees). */
    for (int64_t v0 = 0; v0 < st->n_q; v0 += 16) {
        int64_t end = v0 + 16 < st->n_q ? v0 + 16 : st->n_q;
        for (int64_t e0 = 0; e0 < dim; e0 += 64)
            for (int64_t o0 = v0; o0 < end; o0 += 6) {
                int64_t nq = end - o0 < 6 ? end - o0 : 6, j0, j1;
                span(st, first, last, o0, o0 + nq, &j0, &j1);
                if (j0 <= j1)
                    values_by_nq[nq](st->acc + o0 * dim + e0, dim, st->c + o0, st->p + o0,
                                     st->n_pad, values + e0, v_stride, j0, j1);
            }
    }
}
