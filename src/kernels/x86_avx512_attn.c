/* Attention with AVX-512 (kernels.h, attn_run), online softmax, in two layouts that give the
 * same bits.
 *
 * Query lanes (many queries: prefill, batches): the state keeps the queries transposed
 * (qt[i][o]), so 16 queries' scores for key j are bcast(k_j[i]) * qt[i][16 queries] summed over
 * i = 0 .. dim - 1 in order: each query's dot product is its own lane's chain of fused
 * multiply-adds, the same whichever queries share the vector, and no horizontal sums are needed.
 * Blocks of keys (16 keys of one vector of queries, or 8 keys of two) keep 16 independent chains
 * going. Softmax lane by lane; the weights are summed into sixteen partials by key mod 16, then
 * pairwise (the contract's order).
 *
 * Key lanes (at most 8 queries: decode, where a KV head's 2-8 query heads would fill a quarter
 * of a vector of query lanes and each key would cost a full vector of work per element): the
 * run's keys are transposed 16 at a time from the cache rows into st->kt (element i of 16 keys
 * in one vector, as f32, halves or q8_0 codes: x86_avx512_attn.h, x86_avx512_attn_kt.c), and each
 * query's scores for 16 keys are bcast(q[i]) * kt[i][16 keys] summed over i in order, the same
 * chain of fused multiply-adds as in query lanes. Softmax and the weight sums work on 16 keys a
 * vector: the partial of key j mod 16 is lane j mod 16, added over the run's vectors in key order
 * and then pairwise by shuffles, the contract's order again.
 *
 * In both, a key a query does not see scores -inf, so its weight is +0, and adding +0 changes
 * no sum: a query's bits depend on its own keys and runs only. Values: each output's
 * accumulators stay in registers while the value rows stream by, one fused multiply-add per key
 * and chunk, keys in order; tiles of 6 outputs x 64 elements (24 accumulators) share each load
 * of a value row's 64 elements, widened from f16 or q8_0 in registers. Every key and value row of a
 * run is read once for all the queries of the state (the query heads of one KV head, of one or more
 * rows).
 *
 * Head sizes 64, 128 and 256 (with dim_k == dim_v); other sizes use the generic kernel. */
#include <math.h>

#include "kernels/generic.h"
#include "kernels/types.h"
#include "kernels/x86_avx512.h"
#include "kernels/x86_avx512_attn.h"

#define FORCE_INLINE static inline __attribute__((always_inline))
#define NOINLINE     static __attribute__((noinline))

/* cap * tanh(x / cap), through e = e^(-2|y|): tanh(|y|) = (1 - e) / (1 + e). */
FORCE_INLINE __m512 softcap16(__m512 x, float cap) {
    __m512 y = _mm512_mul_ps(x, _mm512_set1_ps(1.0f / cap));
    __m512 a = _mm512_abs_ps(y);
    __m512 e = exp_f32x16(_mm512_mul_ps(a, _mm512_set1_ps(-2.0f)));
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
SCORES(scores_d256_r1_k16, 256, 1, 16)
SCORES(scores_d256_r2_k8, 256, 2, 8)
SCORES(scores_d256_r1_k1, 256, 1, 1)
SCORES(scores_d256_r2_k1, 256, 2, 1)
#undef SCORES

/* The query-lane kernels by head size: [dim / 64 - 1 ... as 64, 128, 256][two vectors][block] */
static scores_fn scores_for(int64_t dim, int qr, bool block) {
    static const scores_fn fns[3][2][2] = {
        {{scores_d64_r1_k1, scores_d64_r1_k16}, {scores_d64_r2_k1, scores_d64_r2_k8}},
        {{scores_d128_r1_k1, scores_d128_r1_k16}, {scores_d128_r2_k1, scores_d128_r2_k8}},
        {{scores_d256_r1_k1, scores_d256_r1_k16}, {scores_d256_r2_k1, scores_d256_r2_k8}}};
    return fns[dim == 64 ? 0 : dim == 128 ? 1 : 2][qr - 1][block];
}

/* The scale of the q8_0 block that holds element e of a row, in every lane. */
FORCE_INLINE __m512 q8_0_scale16(const uint8_t *row, int64_t e) {
    int16_t d;
    memcpy(&d, row + e / FX_QK * sizeof(struct fx_block_q8_0), 2);
    return _mm512_cvtph_ps(_mm256_set1_epi16(d)); /* a broadcast load and one conversion */
}

/* Elements e .. e + 15 of a value row of type T as f32, as kv_load widens them (exact); q8_0:
 * d16 is the scale of their block (q8_0_scale16). */
FORCE_INLINE __m512 value16(const uint8_t *row, int64_t e, __m512 d16, const enum fx_type T) {
    if (T == FX_TYPE_F32)
        return _mm512_loadu_ps((const float *)row + e);
    if (T == FX_TYPE_F16)
        return fp16x16(row + 2 * e);
    const uint8_t *b = row + e / FX_QK * sizeof(struct fx_block_q8_0);
    __m512 q = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(load128(b + 2 + e % FX_QK)));
    return _mm512_mul_ps(q, d16);
}

/* Rows a pass asks the memory for while it reads others, a share at each step, so that the
 * requests keep the memory busy while the core works (a burst would fill the core's miss buffers
 * and stall it): groups of 16 rows or key tiles at at->at[g], at->bytes[g] bytes each, `row` bytes
 * per row of a group (a key tile's bytes / 16). */
struct ahead_rows {
    const struct fx_kv_ahead *at;
    int64_t row;
};

/* acc[o] = acc[o] * c[o] + sum_j p[j][o] v_j over NC chunks of 16 floats from element e0 (a
 * multiple of 32) for NQ outputs (rows of dim floats at acc; v_j row j of the run `values`, of
 * type T), keys j0 .. j1 in order (weight p[j][o] at p + j * pj + o * po: query lanes
 * [j][n_pad], key lanes [o][64]). Converting in registers as the rows stream by costs no tile in
 * between. As row j goes by, the share of row j of each group of `pre` (NULL for none) that goes
 * with these elements is prefetched. */
FORCE_INLINE void values_tile(float *acc, int64_t dim, const float *c, const float *p, int64_t pj,
                              int64_t po, const struct fx_kv_run *values,
                              const struct ahead_rows *pre, int64_t e0, int64_t j0, int64_t j1,
                              const int NQ, const int NC, const enum fx_type T) {
    const int64_t stride = (int64_t)values->stride; /* a row's bytes */
    const struct fx_kv_ahead *ahead = pre ? pre->at : NULL;
    /* the share of a row of pre that goes with elements e0 .. e0 + 16 NC - 1 */
    const int64_t prow = pre ? pre->row : 0, pf0 = prow * e0 / dim,
                  pf1 = prow * (e0 + 16 * NC) / dim;
    __m512 a[6][8];
#pragma GCC unroll 6
    for (int o = 0; o < NQ; o++)
#pragma GCC unroll 8
        for (int k = 0; k < NC; k++)
            a[o][k] = _mm512_mul_ps(_mm512_loadu_ps(acc + o * dim + k * 16), _mm512_set1_ps(c[o]));
    for (int64_t j = j0; j <= j1;) {
        /* the rows of j's group of 16 lie stride bytes apart; pre's rows prow apart, up to the
         * end of their group (pre_end) */
        int64_t g = j / 16, end = (j | 15) < j1 ? (j | 15) : j1;
        const uint8_t *v = values->grp[g] + (j % 16) * stride;
        uintptr_t pre_row = ahead ? (uintptr_t)ahead->at[g] + (uintptr_t)((j % 16) * prow) : 0,
                  pre_end = ahead ? (uintptr_t)ahead->at[g] + ahead->bytes[g] : 0;
        for (; j <= end; j++, v += stride, pre_row += (uintptr_t)prow) {
            for (uintptr_t l = pre_row + (uintptr_t)pf0;
                 l < pre_row + (uintptr_t)pf1 && l < pre_end; l += 64)
                __builtin_prefetch((const void *)l, 0, 3);
            const float *w = p + j * pj;
            __m512 d16 = _mm512_setzero_ps();
#pragma GCC unroll 8
            for (int k = 0; k < NC; k++) {
                if (T == FX_TYPE_Q8_0 && k % 2 == 0) /* chunks 2 m and 2 m + 1 share a block */
                    d16 = q8_0_scale16(v, e0 + k * 16);
                __m512 vk = value16(v, e0 + k * 16, d16, T);
#pragma GCC unroll 6
                for (int o = 0; o < NQ; o++)
                    a[o][k] = _mm512_fmadd_ps(_mm512_set1_ps(w[o * po]), vk, a[o][k]);
            }
        }
    }
#pragma GCC unroll 6
    for (int o = 0; o < NQ; o++)
#pragma GCC unroll 8
        for (int k = 0; k < NC; k++)
            _mm512_storeu_ps(acc + o * dim + k * 16, a[o][k]);
}

typedef void (*values_fn)(float *acc, int64_t dim, const float *c, const float *p, int64_t pj,
                          int64_t po, const struct fx_kv_run *values, const struct ahead_rows *pre,
                          int64_t e0, int64_t j0, int64_t j1);

/* Tiles of up to 6 outputs x 64 elements (24 accumulators): each load of a value row's 64
 * elements serves 6 outputs. Up to 3 outputs (decode with 2-3 query heads per KV head) take 128
 * elements a tile (up to 24 accumulators again): half the passes over the rows, each row's
 * weights loaded and its next-run lines asked for once. Each accumulator sees the same keys in
 * the same order either way, so the bits are the same. */
#define VALUES(NAME, NQ, NC, T)                                                                    \
    NOINLINE void NAME(float *acc, int64_t dim, const float *c, const float *p, int64_t pj,        \
                       int64_t po, const struct fx_kv_run *values, const struct ahead_rows *pre,   \
                       int64_t e0, int64_t j0, int64_t j1) {                                       \
        values_tile(acc, dim, c, p, pj, po, values, pre, e0, j0, j1, NQ, NC, T);                   \
    }
#define VALUES_NQ(NAME, T)                                                                         \
    VALUES(NAME##_q1, 1, 4, T)                                                                     \
    VALUES(NAME##_q2, 2, 4, T)                                                                     \
    VALUES(NAME##_q3, 3, 4, T)                                                                     \
    VALUES(NAME##_q4, 4, 4, T)                                                                     \
    VALUES(NAME##_q5, 5, 4, T)                                                                     \
    VALUES(NAME##_q6, 6, 4, T)                                                                     \
    VALUES(NAME##_w1, 1, 8, T) VALUES(NAME##_w2, 2, 8, T) VALUES(NAME##_w3, 3, 8, T)
VALUES_NQ(values_f32, FX_TYPE_F32)
VALUES_NQ(values_f16, FX_TYPE_F16)
VALUES_NQ(values_q8_0, FX_TYPE_Q8_0)
#undef VALUES_NQ
#undef VALUES

#define BY_NQ(NAME)                                                                                \
    {                                                                                              \
        {NULL, NAME##_q1, NAME##_q2, NAME##_q3, NAME##_q4, NAME##_q5, NAME##_q6}, {                \
            NULL, NAME##_w1, NAME##_w2, NAME##_w3, NULL, NULL, NULL                                \
        }                                                                                          \
    }
/* [f32, f16, q8_0][64 or 128 elements a tile][outputs] */
static const values_fn values_by[3][2][7] = {BY_NQ(values_f32), BY_NQ(values_f16),
                                             BY_NQ(values_q8_0)};
#undef BY_NQ

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

/* A score s (16 of them) scaled, capped, and -inf where the key is not seen. */
FORCE_INLINE __m512 score16(__m512 s, __mmask16 seen, float scale, float softcap) {
    s = _mm512_mul_ps(s, _mm512_set1_ps(scale));
    if (softcap > 0.0f)
        s = softcap16(s, softcap);
    return _mm512_mask_blend_ps(seen, _mm512_set1_ps(-INFINITY), s);
}

/* What a run's weights are taken relative to: the new maximum, or 0 for a query that has seen
 * no key yet (m = -inf), so that its weights and rescale come out 0 rather than NaN. */
FORCE_INLINE __m512 subtrahend16(__m512 m_new) {
    __mmask16 live = _mm512_cmp_ps_mask(m_new, _mm512_set1_ps(-INFINITY), _CMP_NEQ_OQ);
    return _mm512_maskz_mov_ps(live, m_new);
}

/* Folds a run into the 16 queries from o0: c = e^(m - m_sub), l = l * c + sum, m = m_new. */
FORCE_INLINE void fold16(struct fx_attn_state *st, int64_t o0, __m512 m_old, __m512 m_new,
                         __m512 m_sub, __m512 sum) {
    __m512 c = exp_f32x16(_mm512_sub_ps(m_old, m_sub));
    _mm512_store_ps(st->c + o0, c);
    _mm512_store_ps(st->l + o0, _mm512_fmadd_ps(_mm512_load_ps(st->l + o0), c, sum));
    _mm512_store_ps(st->m + o0, m_new);
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
        __m512 s = score16(_mm512_load_ps(p + j * st->n_pad), seen, scale, softcap);
        run_max = _mm512_max_ps(run_max, s);
        _mm512_store_ps(p + j * st->n_pad, s);
    }
    __m512 m_old = _mm512_load_ps(st->m + o0), m_new = _mm512_max_ps(m_old, run_max);
    __m512 m_sub = subtrahend16(m_new);
    /* part[j % 16]: the contract's partial sums, in registers: the keys go by aligned groups of
     * 16, so that each key's partial is known when the loop is unrolled (an index known only at
     * run time would keep the partials on the stack, every add a store and a reload). */
    __m512 part[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++)
        part[i] = _mm512_setzero_ps();
    for (int64_t g = j0 - j0 % 16; g <= j1; g += 16)
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++) {
            int64_t j = g + i;
            if (j < j0 || j > j1)
                continue;
            __m512 e = exp_f32x16(_mm512_sub_ps(_mm512_load_ps(p + j * st->n_pad), m_sub));
            part[i] = _mm512_add_ps(part[i], e);
            _mm512_store_ps(p + j * st->n_pad, e);
        }
#pragma GCC unroll 4
    for (int w = 8; w >= 1; w /= 2)
#pragma GCC unroll 8
        for (int i = 0; i < w; i++)
            part[i] = _mm512_add_ps(part[i], part[i + w]);
    fold16(st, o0, m_old, m_new, m_sub, part[0]);
}

/* Lane 0 of the result: lane i + lane i + 8, + i + 4, + i + 2, + i + 1 (the contract's pairwise
 * sum of the partials of keys mod 16, held in lanes). */
FORCE_INLINE float sum_partials16(__m512 v) {
    v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(1, 0, 3, 2)));
    v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(2, 3, 0, 1)));
    v = _mm512_add_ps(v, _mm512_permute_ps(v, _MM_SHUFFLE(1, 0, 3, 2)));
    v = _mm512_add_ps(v, _mm512_permute_ps(v, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm512_cvtss_f32(v);
}

/* Element i of the 16 keys of a key tile (kernels.h) in form F, widened as kv_load widens them;
 * dv: the tile's q8_0 scales for element i. Tiles in a cache need not be 64-byte aligned. */
FORCE_INLINE __m512 kt16(const uint8_t *tile, int64_t i, __m512 dv,
                         const enum fx_avx512_kt_form F) {
    if (F == FX_KT_F32)
        return _mm512_loadu_ps((const float *)tile + i * 16);
    if (F == FX_KT_F16)
        return fp16x16(tile + i * 32);
    __m512 q = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(load128(tile + i * 16)));
    return _mm512_mul_ps(q, dv);
}

/* The share of each group of rows at `ahead` (struct ahead_rows) that goes with element i of a
 * key tile: the line at byte i * bpe of the group (bpe: its bytes per element, 16 rows' bytes /
 * dim), where that byte begins a line, so that each line is asked for once. */
FORCE_INLINE void ahead_at_element(const struct fx_kv_ahead *ahead, int64_t i, int64_t bpe) {
    int64_t off = i * bpe;
    if ((off & 63) >= bpe)
        return;
#pragma GCC unroll 4
    for (int g = 0; g < FX_ATTN_RUN / 16; g++)
        if (off < ahead->bytes[g])
            __builtin_prefetch(ahead->at[g] + off, 0, 3);
}

/* s[q][16 b ..] = the scores of QG queries (qt + q, rows of n_pad floats) for NB blocks of 16
 * keys (key tiles tile[0 .. NB - 1] in form F): NB x QG chains of fused multiply-adds over the
 * elements in order. s: rows of FX_ATTN_RUN floats. Prefetches the rows of pre (NULL for none)
 * as it goes (ahead_at_element). */
FORCE_INLINE void scores_keys(float *s, const float *qt, int64_t n_pad, const uint8_t *const *tile,
                              int64_t dim, const struct ahead_rows *pre, const int QG, const int NB,
                              const enum fx_avx512_kt_form F) {
    const int64_t bpe = pre ? 16 * pre->row / dim : 0;
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (int q = 0; q < QG; q++)
#pragma GCC unroll 4
        for (int b = 0; b < NB; b++)
            acc[q][b] = _mm512_setzero_ps();
    for (int64_t i0 = 0; i0 < dim; i0 += FX_QK) {
        /* the q8_0 scales of elements i0 .. i0 + 31 (after the tile's dim * 16 codes) */
        __m512 dv[4];
#pragma GCC unroll 4
        for (int b = 0; b < NB; b++)
            dv[b] =
                F == FX_KT_Q8 ? fp16x16(tile[b] + dim * 16 + i0 / FX_QK * 32) : _mm512_setzero_ps();
        for (int64_t i = i0; i < i0 + FX_QK; i++) {
            if (pre)
                ahead_at_element(pre->at, i, bpe);
            __m512 k[4];
#pragma GCC unroll 4
            for (int b = 0; b < NB; b++)
                k[b] = kt16(tile[b], i, dv[b], F);
#pragma GCC unroll 4
            for (int q = 0; q < QG; q++) {
                __m512 qi = _mm512_set1_ps(qt[i * n_pad + q]);
#pragma GCC unroll 4
                for (int b = 0; b < NB; b++)
                    acc[q][b] = _mm512_fmadd_ps(qi, k[b], acc[q][b]);
            }
        }
    }
#pragma GCC unroll 4
    for (int q = 0; q < QG; q++)
#pragma GCC unroll 4
        for (int b = 0; b < NB; b++)
            _mm512_store_ps(s + q * FX_ATTN_RUN + 16 * b, acc[q][b]);
}

typedef void (*scores_keys_fn)(float *s, const float *qt, int64_t n_pad, const uint8_t *const *tile,
                               int64_t dim, const struct ahead_rows *pre);

#define SCORES_KEYS(NAME, QG, NB, F)                                                               \
    NOINLINE void NAME##_q##QG##_b##NB(float *s, const float *qt, int64_t n_pad,                   \
                                       const uint8_t *const *tile, int64_t dim,                    \
                                       const struct ahead_rows *pre) {                             \
        scores_keys(s, qt, n_pad, tile, dim, pre, QG, NB, F);                                      \
    }
#define SCORES_KEYS_NB(NAME, QG, F)                                                                \
    SCORES_KEYS(NAME, QG, 1, F)                                                                    \
    SCORES_KEYS(NAME, QG, 2, F) SCORES_KEYS(NAME, QG, 3, F) SCORES_KEYS(NAME, QG, 4, F)
#define SCORES_KEYS_QG(NAME, F)                                                                    \
    SCORES_KEYS_NB(NAME, 1, F)                                                                     \
    SCORES_KEYS_NB(NAME, 2, F) SCORES_KEYS_NB(NAME, 3, F) SCORES_KEYS_NB(NAME, 4, F)
SCORES_KEYS_QG(scores_f32, FX_KT_F32)
SCORES_KEYS_QG(scores_f16, FX_KT_F16)
SCORES_KEYS_QG(scores_q8_0, FX_KT_Q8)
#undef SCORES_KEYS_QG
#undef SCORES_KEYS_NB
#undef SCORES_KEYS

#define BY_NB(NAME, QG)                                                                            \
    { NAME##_q##QG##_b1, NAME##_q##QG##_b2, NAME##_q##QG##_b3, NAME##_q##QG##_b4 }
/* [kt form][queries - 1][blocks - 1] */
static const scores_keys_fn scores_keys_by[3][4][4] = {
    {BY_NB(scores_f32, 1), BY_NB(scores_f32, 2), BY_NB(scores_f32, 3), BY_NB(scores_f32, 4)},
    {BY_NB(scores_f16, 1), BY_NB(scores_f16, 2), BY_NB(scores_f16, 3), BY_NB(scores_f16, 4)},
    {BY_NB(scores_q8_0, 1), BY_NB(scores_q8_0, 2), BY_NB(scores_q8_0, 3), BY_NB(scores_q8_0, 4)}};
#undef BY_NB

/* Values for the queries o0 .. end - 1 (one vector of queries, whose softmax covered every key
 * any of them sees): tiles of outputs x 64 elements that keep every accumulator in a register.
 * Weight p[j][o] at st->p + j * pj + o * po. */
static void values_range(struct fx_attn_state *st, const int32_t *first, const int32_t *last,
                         int64_t v0, int64_t end, int64_t pj, int64_t po,
                         const struct fx_kv_run *values, const struct ahead_rows *pre) {
    /* up to 3 outputs: tiles of 128 elements where the rows hold whole ones */
    const int wide = end - v0 <= 3 && st->dim_v % 128 == 0;
    const values_fn *by_nq = values_by[values->type == FX_TYPE_F32   ? 0
                                       : values->type == FX_TYPE_F16 ? 1
                                                                     : 2][wide];
    for (int64_t e0 = 0; e0 < st->dim_v; e0 += wide ? 128 : 64)
        for (int64_t o0 = v0; o0 < end; o0 += 6) {
            int64_t nq = end - o0 < 6 ? end - o0 : 6, j0, j1;
            span(st, first, last, o0, o0 + nq, &j0, &j1);
            if (j0 <= j1)
                by_nq[nq](st->acc + o0 * st->dim_v + e0, st->dim_v, st->c + o0, st->p + o0 * po, pj,
                          po, values, o0 == v0 ? pre : NULL, e0, j0, j1);
        }
}

/* At most 8 queries, key lanes (the file's comment): the same bits as query lanes. */
static void run_key_lanes(struct fx_attn_state *st, const int32_t *first, const int32_t *last,
                          const struct fx_kv_run *keys, const struct fx_kv_run *values, float scale,
                          float softcap) {
    const int64_t dim = st->dim_k, n_q = st->n_q;
    int64_t j0, j1;
    span(st, first, last, 0, n_q, &j0, &j1);
    if (j0 > j1)
        return;
    /* Scores of blocks b0 .. b1 of 16 keys, [o][FX_ATTN_RUN] in p (which holds 16 x 64), from
     * the cache's key tiles, or from rows transposed into st->kt (which then prefetches the next
     * run's keys and values). Reading tiles, the scores ask for this run's value rows and the
     * values for the next run's keys: half a run ahead, what was asked for is still in L1 when it
     * is read, where a whole run ahead (with head size 128 and f16, a run's keys and values and
     * the next run's are 64 KiB, against 48 of L1) the scores stalled on the loads of keys that
     * had been asked for. */
    int64_t b0 = j0 / 16, b1 = j1 / 16;
    const uint8_t *tile[FX_ATTN_RUN / 16];
    struct fx_kv_ahead values_now = {0};
    const struct ahead_rows values_ahead = {&values_now, (int64_t)values->stride},
                            keys_ahead = {&keys->next, (int64_t)keys->stride};
    const struct ahead_rows *scores_ask = NULL, *values_ask = NULL;
    if (keys->tiled) {
        for (int64_t b = b0; b <= b1; b++) {
            int64_t rows = j1 + 1 - 16 * b < 16 ? j1 + 1 - 16 * b : 16;
            tile[b - b0] = keys->grp[b];
            values_now.at[b] = values->grp[b];
            values_now.bytes[b] = (uint32_t)(rows * (int64_t)values->stride);
        }
        scores_ask = &values_ahead, values_ask = &keys_ahead;
    } else {
        fx_avx512_attn_keys_t(st->kt, keys, values, dim, b0, b1, j1);
        for (int64_t b = b0; b <= b1; b++)
            tile[b - b0] = (const uint8_t *)st->kt + b * fx_avx512_tile_bytes(keys->type, dim);
    }
    enum fx_avx512_kt_form form = keys->type == FX_TYPE_F32   ? FX_KT_F32
                                  : keys->type == FX_TYPE_F16 ? FX_KT_F16
                                                              : FX_KT_Q8;
    for (int64_t o0 = 0; o0 < n_q; o0 += 4) {
        int64_t qg = n_q - o0 < 4 ? n_q - o0 : 4;
        scores_keys_by[form][qg - 1][b1 - b0](st->p + o0 * FX_ATTN_RUN + 16 * b0, st->qt + o0,
                                              st->n_pad, tile, dim, scores_ask);
        scores_ask = NULL; /* the first queries' pass asked for them */
    }
    /* Masked scores and each query's maximum, then the weights and their sums. */
    float run_max[16], sums[16], m_sub[16];
    for (int64_t o = 0; o < 16; o++)
        run_max[o] = -INFINITY, sums[o] = 0.0f;
    const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    for (int64_t o = 0; o < n_q; o++) {
        __m512i fv = _mm512_set1_epi32(first[o / st->group]);
        __m512i lv = _mm512_set1_epi32(last[o / st->group]);
        __m512 mx = _mm512_set1_ps(-INFINITY);
        for (int64_t b = b0; b <= b1; b++) {
            float *s = st->p + o * FX_ATTN_RUN + 16 * b;
            __m512i jv = _mm512_add_epi32(iota, _mm512_set1_epi32((int32_t)(16 * b)));
            __mmask16 seen = _mm512_cmple_epi32_mask(fv, jv) & _mm512_cmpge_epi32_mask(lv, jv);
            __m512 sc = score16(_mm512_load_ps(s), seen, scale, softcap);
            mx = _mm512_max_ps(mx, sc);
            _mm512_store_ps(s, sc);
        }
        run_max[o] = _mm512_reduce_max_ps(mx); /* a maximum is exact in any order */
    }
    __m512 m_old = _mm512_load_ps(st->m), m_new = _mm512_max_ps(m_old, _mm512_loadu_ps(run_max));
    __m512 m_subv = subtrahend16(m_new);
    _mm512_storeu_ps(m_sub, m_subv);
    for (int64_t o = 0; o < n_q; o++) {
        __m512 part = _mm512_setzero_ps(), ms = _mm512_set1_ps(m_sub[o]);
        for (int64_t b = b0; b <= b1; b++) {
            float *s = st->p + o * FX_ATTN_RUN + 16 * b;
            __m512 e = exp_f32x16(_mm512_sub_ps(_mm512_load_ps(s), ms));
            part = _mm512_add_ps(part, e);
            _mm512_store_ps(s, e);
        }
        sums[o] = sum_partials16(part);
    }
    fold16(st, 0, m_old, m_new, m_subv, _mm512_loadu_ps(sums));
    values_range(st, first, last, 0, n_q, 1, FX_ATTN_RUN, values, values_ask);
}

/* Keys for query lanes: f32 rows in place when the run's groups lie one after another at one
 * stride, else converted into st->rows ([n_keys][dim]). */
static const float *keys_f32(struct fx_attn_state *st, const struct fx_kv_run *keys, int64_t n_keys,
                             int64_t *k_stride) {
    bool in_place = keys->type == FX_TYPE_F32 && !keys->tiled;
    for (int64_t b = 1; b * 16 < n_keys && in_place; b++)
        in_place = keys->grp[b] == keys->grp[0] + 16 * b * keys->stride;
    if (in_place) {
        *k_stride = (int64_t)(keys->stride / sizeof(float));
        return (const float *)keys->grp[0];
    }
    fx_attn_rows_f32(fx_avx512_kv_load, fx_avx512_kv_load_tile, keys, n_keys, st->dim_k, st->rows);
    *k_stride = st->dim_k;
    return st->rows;
}

/* Values for query lanes: a run of q8_0 rows converted into st->rows after the keys
 * ([n_keys][dim_v] from FX_ATTN_RUN * dim_k), described in *f32; f32 and f16 rows are read in
 * place. Every tile of outputs re-reads each value row (a block of 32 rows x 4 heads: 24 times),
 * and widening q8_0 codes takes three operations per 16 elements: once, as kv_load does (the
 * same f32), keeps them off the FMA pipes. An f16 row widens in one, and its f32 copy (twice the
 * bytes, beside the keys' f32 rows) measured slower with head size 128. */
static const struct fx_kv_run *values_f32(struct fx_attn_state *st, const struct fx_kv_run *values,
                                          int64_t n_keys, struct fx_kv_run *f32) {
    if (values->type != FX_TYPE_Q8_0)
        return values;
    float *dst = st->rows + FX_ATTN_RUN * st->dim_k;
    fx_attn_rows_f32(fx_avx512_kv_load, fx_avx512_kv_load_tile, values, n_keys, st->dim_v, dst);
    *f32 = (struct fx_kv_run){.type = FX_TYPE_F32, .stride = (uint64_t)st->dim_v * sizeof(float)};
    for (int b = 0; b < FX_ATTN_RUN / 16; b++)
        f32->grp[b] = (const uint8_t *)(dst + 16 * b * st->dim_v);
    return f32;
}

void fx_attn_run_avx512(struct fx_attn_state *st, const int32_t *first, const int32_t *last,
                        const struct fx_kv_run *key_run, const struct fx_kv_run *values,
                        int64_t n_keys, float scale, float softcap) {
    const int64_t dim = st->dim_k;
    if (!(dim == st->dim_v && (dim == 64 || dim == 128 || dim == 256))) {
        fx_attn_run_generic(st, first, last, key_run, values, n_keys, scale, softcap);
        return;
    }
    if (st->n_q <= 8) {
        run_key_lanes(st, first, last, key_run, values, scale, softcap);
        return;
    }
    fx_attn_prefetch_next(key_run, values);
    int64_t k_stride;
    const float *keys = keys_f32(st, key_run, n_keys, &k_stride);
    /* Scores, two vectors of queries at a time where there are two. */
    for (int64_t o0 = 0; o0 < st->n_q; o0 += 32) {
        int qr = st->n_pad - o0 >= 32 ? 2 : 1;
        int64_t j0, j1;
        span(st, first, last, o0, o0 + 16 * qr, &j0, &j1);
        scores_fn block = scores_for(dim, qr, true), single = scores_for(dim, qr, false);
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
    struct fx_kv_run converted;
    const struct fx_kv_run *value_rows = values_f32(st, values, n_keys, &converted);
    for (int64_t v0 = 0; v0 < st->n_q; v0 += 16)
        values_range(st, first, last, v0, v0 + 16 < st->n_q ? v0 + 16 : st->n_q, st->n_pad, 1,
                     value_rows, NULL);
}

/* attn_begin with the queries moved into their lanes 16 x 16 floats at a time (a load of 16 of a
 * query's elements each, transposed in registers: 16 aligned stores of 16 lanes), padding lanes
 * included, instead of one scalar store per element, which took 2.5% of a 512-row prefill of
 * smollm2-135m. Head sizes that are not a multiple of 16 take the generic placement. */
void fx_attn_begin_avx512(struct fx_attn_state *st, float *mem, const float *q,
                          int64_t q_row_stride, int64_t n_rows, int64_t group, int64_t dim_k,
                          int64_t dim_v) {
    if (dim_k % 16 != 0) {
        fx_attn_begin_generic(st, mem, q, q_row_stride, n_rows, group, dim_k, dim_v);
        return;
    }
    fx_attn_layout(st, mem, n_rows, group, dim_k, dim_v);
    for (int64_t o0 = 0; o0 < st->n_pad; o0 += 16)
        for (int64_t i0 = 0; i0 < dim_k; i0 += 16) {
            __m512 r[16];
#pragma GCC unroll 16
            for (int t = 0; t < 16; t++) {
                int64_t o = o0 + t;
                r[t] = o < st->n_q
                           ? _mm512_loadu_ps(q + o / group * q_row_stride + o % group * dim_k + i0)
                           : _mm512_setzero_ps();
            }
            transpose16(r);
#pragma GCC unroll 16
            for (int t = 0; t < 16; t++)
                _mm512_store_ps(st->qt + (i0 + t) * st->n_pad + o0, r[t]);
        }
}

void fx_attn_finish_avx512(float *out, int64_t out_stride, const float *acc, const float *m,
                           const float *l, const float *sinks, int64_t n_q, int64_t dim_v) {
    for (int64_t o = 0; o < n_q; o++) {
        __m512 f = _mm512_set1_ps(fx_attn_finish_factor(m[o], l[o], sinks ? sinks + o : NULL));
        for (int64_t i = 0; i < dim_v; i += 16) {
            __mmask16 k = lanes16(dim_v - i);
            _mm512_mask_storeu_ps(out + o * out_stride + i, k,
                                  _mm512_mul_ps(_mm512_maskz_loadu_ps(k, acc + o * dim_v + i), f));
        }
    }
}
