/* AVX-512 VNNI tile kernels of the K formats in the R16 layout (r16.h): Q2_K, Q3_K, Q4_K, Q5_K,
 * Q6_K and IQ4_XS against Q8_K activations.
 *
 * Per super-block of 256 and activation row: for each sub-block (8 of 32 elements, or 16 of
 * 16), vpdpbusd sums unsigned codes times activation codes exactly per weight row (lane); the
 * sum times the sub-block's scale joins the super-block's integer sum (vpmulld). The codes'
 * bias (Q3_K's 4, Q6_K's 32, IQ4_XS's 128: its levels -127..113 enter vpdpbusd as 1..241) is
 * removed inside each sub-block's sum, which starts at -bias times the activation's sum over
 * the sub-block instead of 0: no multiply-add of its own. The second integer sum of Q2_K, Q4_K
 * and Q5_K, of the minimums times the activation's sums per sub-block, is one vpdpwssd per pair
 * of sub-blocks (Q4_K and Q5_K: sums of 32, made from the Q8_K sums of 16 once per activation
 * row). Then the f32 accumulators take the fixed sequence of r16.h. */
#if defined(__x86_64__)

#include "kernels/x86_avx512.h"

#include "kernels/generic.h"

/* 16 signed bytes as int16 pairs (a[r], b[r]) in lane r. */
FX_INLINE __m512i pair_i8(const uint8_t *a, const uint8_t *b) {
    __m128i x = load128(a), y = load128(b);
    __m256i xy = _mm256_set_m128i(_mm_unpackhi_epi8(x, y), _mm_unpacklo_epi8(x, y));
    return _mm512_cvtepi8_epi16(xy);
}

/* The scale of sub-block s in each lane, as int32. */
FX_INLINE __m512i k_scale(enum fx_type type, const uint8_t *p, int s) {
    switch (type) {
    case FX_TYPE_Q2_K: { /* scale bytes in pairs [t][r][2]: the low nibble */
        __m512i x =
            _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(p + 64 + 32 * (s / 2))));
        if (s % 2)
            x = _mm512_srli_epi32(x, 16);
        return _mm512_and_si512(x, _mm512_set1_epi32(0x0f));
    }
    case FX_TYPE_Q4_K:
    case FX_TYPE_Q5_K:
        return _mm512_cvtepu8_epi32(load128(p + 64 + 16 * s));
    default: /* Q3_K, Q6_K, IQ4_XS: int8 [s][r] */
        return _mm512_cvtepi8_epi32(load128(p + 32 + 16 * s));
    }
}

/* The int16 pairs of minimums (m_2t, m_2t+1) that multiply the activation's sums of sub-blocks
 * 2t and 2t+1 (Q2_K: sub-blocks of 16; Q4_K, Q5_K: of 32, their minimums 0..63). */
FX_INLINE __m512i k_min_pairs(enum fx_type type, const uint8_t *p, int t) {
    if (type == FX_TYPE_Q2_K)
        return _mm512_srli_epi16(
            _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(p + 64 + 32 * t))), 4);
    return pair_i8(p + 192 + 32 * t, p + 192 + 32 * t + 16);
}

/* The codes' bias of the formats without minimums, as a shift: Q3_K 4, Q6_K 32,
 * IQ4_XS 128. */
FX_INLINE int k_bias_shift(enum fx_type type) {
    return type == FX_TYPE_Q3_K ? 2 : type == FX_TYPE_Q6_K ? 5 : 7;
}

/* What a tile's second integer sum needs of its activation rows' super-block, per row j: the
 * formats with minimums, the activation's sums per sub-block as int16 (dword t of sums[j]
 * holds the pair 2t, 2t+1); the others, where each sub-block's sum starts from -bias times the
 * activation's sum over it instead of 0, those starts as int32. */
struct k_act {
    _Alignas(64) int32_t start[FX_R16_MAX_ACT][16];
    _Alignas(32) int16_t sums[FX_R16_MAX_ACT][16];
};

/* Row j's entries of struct k_act from its Q8_K block at a. Sums of 32 are exact in int16
 * (|sum| <= 32 * 127). */
FX_INLINE void k_act_fill(enum fx_type type, const uint8_t *a, struct k_act *ka, int j) {
    __m256i b = _mm256_loadu_si256((const __m256i *)(a + FX_Q8K_BSUMS));
    __m256i b32 = _mm256_madd_epi16(b, _mm256_set1_epi16(1)); /* sums of 32, as int32 */
    if (fx_r16_k_has_min(type)) {
        if (fx_r16_k_subs(type) == 8)
            b = _mm256_zextsi128_si256(
                _mm_packs_epi32(_mm256_castsi256_si128(b32), _mm256_extracti128_si256(b32, 1)));
        _mm256_store_si256((__m256i *)ka->sums[j], b);
        return;
    }
    __m512i s = fx_r16_k_subs(type) == 16 ? _mm512_cvtepi16_epi32(b) : _mm512_zextsi256_si512(b32);
    _mm512_store_si512(ka->start[j], _mm512_sub_epi32(_mm512_setzero_si512(),
                                                      _mm512_slli_epi32(s, k_bias_shift(type))));
}

/* The starting value of sub-block s's integer sum for activation row j. */
FX_INLINE __m512i k_sub_start(enum fx_type type, const struct k_act *ka, int j, int s) {
    if (fx_r16_k_has_min(type))
        return _mm512_setzero_si512();
    return bcast4((const uint8_t *)&ka->start[j][s]);
}

/* Q6_K: the 6-bit codes of quarter qt (0..3) from the low-nibble and high-bit registers. */
FX_INLINE __m512i q6_codes(int qt, __m512i ql, __m512i qh) {
    __m512i low = qt < 2 ? nib_lo(ql) : nib_hi(ql);
    __m512i high;
    switch (qt) {
    case 0:
        high = _mm512_slli_epi16(qh, 4);
        break;
    case 1:
        high = _mm512_slli_epi16(qh, 2);
        break;
    case 2:
        high = qh;
        break;
    default:
        high = _mm512_srli_epi16(qh, 2);
        break;
    }
    return _mm512_or_si512(low, _mm512_and_si512(high, _mm512_set1_epi8(0x30)));
}

/* Unsigned codes of group gg (elements 4gg..4gg+3 of the sub-block) of sub-block s. */
FX_INLINE __m512i k_codes(enum fx_type type, const uint8_t *p, int s, int gg) {
    /* Offsets as a part that depends on s plus one on gg alone, in size_t: where s is not a
     * compile-time constant (the wide tiles' loop over sub-blocks), the first is computed once
     * per sub-block and each group's load takes a constant displacement from it. In int
     * arithmetic GCC recomputed and sign-extended every group's offset (5 instructions per group
     * and panel). */
    size_t sb = (size_t)(unsigned)s;
    switch (type) {
    case FX_TYPE_Q4_K:
    case FX_TYPE_Q5_K: {
        bool five = type == FX_TYPE_Q5_K;
        __m512i x = load512(p + (five ? 832 : 320) + 512 * (sb / 2) + 64 * gg);
        __m512i q = s % 2 ? nib_hi(x) : nib_lo(x);
        if (five)
            q = _mm512_mask_add_epi8(q, load_mask64(p + 320 + 64 * sb + 8 * gg), q,
                                     _mm512_set1_epi8(16));
        return q;
    }
    case FX_TYPE_Q2_K:
    case FX_TYPE_Q3_K: {
        /* s = 8n + 2j + k: half n, 2-bit field j, group g = 4k + gg. */
        size_t n = sb / 8, k = sb % 2;
        int j = (s % 8) / 2;
        bool three = type == FX_TYPE_Q3_K;
        __m512i x = load512(p + (three ? 288 : 320) + 512 * n + 256 * k + 64 * gg);
        __m512i q = _mm512_and_si512(_mm512_srli_epi16(x, 2 * j), _mm512_set1_epi8(3));
        if (three)
            q = _mm512_mask_add_epi8(
                q, load_mask64(p + 1312 + 64 * (4 * n + (size_t)j) + 32 * k + 8 * gg), q,
                _mm512_set1_epi8(4));
        return q;
    }
    case FX_TYPE_IQ4_XS: { /* group gg of sub-block s: nibbles of qs line 4s + gg % 4 */
        __m512i x = load512(p + 160 + 256 * sb + 64 * (gg % 4));
        return _mm512_shuffle_epi8(iq4nl_lut(), gg < 4 ? nib_lo(x) : nib_hi(x));
    }
    default: { /* Q6_K: s = 8h + 2qt + lh, group g = 4lh + gg */
        size_t h = sb / 8, lh = sb % 2;
        int qt = (s % 8) / 2;
        __m512i ql = load512(p + 288 + 512 * (2 * h + (size_t)(qt % 2)) + 256 * lh + 64 * gg);
        __m512i qh = load512(p + 2336 + 512 * h + 256 * lh + 64 * gg);
        return q6_codes(qt, ql, qh);
    }
    }
}

/* Q6_K's first integer sum for narrow tiles (1 or 2 activation rows), in sumi: the three
 * registers of low nibbles and high bits of a group give the codes of all four quarters at
 * once, so they are loaded and shifted once (the general order decodes one quarter per load);
 * four partial sums per row, one per quarter, meet their scales at each sub-block's end. */
FX_INLINE void q6_narrow_sumi(int width, const struct fx_r16_tile *t, const uint8_t *p,
                              const uint8_t *a, const struct k_act *ka, __m512i *sumi) {
    for (int h = 0; h < 2; h++) {
        __m512i part[4][2];
#pragma GCC unroll 16
        for (int g = 0; g < 8; g++) {
            if (g % 4 == 0)
#pragma GCC unroll 16
                for (int qt = 0; qt < 4; qt++)
#pragma GCC unroll 16
                    for (int j = 0; j < width; j++)
                        part[qt][j] = k_sub_start(FX_TYPE_Q6_K, ka, j, 8 * h + 2 * qt + g / 4);
            __m512i ql_a = load512(p + 288 + 64 * (8 * (2 * h) + g));
            __m512i ql_b = load512(p + 288 + 64 * (8 * (2 * h + 1) + g));
            __m512i qh = load512(p + 2336 + 64 * (8 * h + g));
#pragma GCC unroll 16
            for (int qt = 0; qt < 4; qt++) {
                __m512i q = q6_codes(qt, qt % 2 ? ql_b : ql_a, qh);
#pragma GCC unroll 16
                for (int j = 0; j < width; j++)
                    part[qt][j] =
                        _mm512_dpbusd_epi32(part[qt][j], q,
                                            bcast4(a + (uint64_t)j * t->act_stride + FX_Q8K_QS +
                                                   128 * h + 32 * qt + 4 * g));
            }
            if (g % 4 == 3) /* the end of sub-blocks 8h + 2qt + g / 4 */
#pragma GCC unroll 16
                for (int qt = 0; qt < 4; qt++) {
                    __m512i sc = k_scale(FX_TYPE_Q6_K, p, 8 * h + 2 * qt + g / 4);
#pragma GCC unroll 16
                    for (int j = 0; j < width; j++)
                        sumi[j] = _mm512_add_epi32(sumi[j], _mm512_mullo_epi32(part[qt][j], sc));
                }
        }
    }
}

/* Sub-block s of a super-block, for np panels (w[0..np)): sumi[p][j] += its scale times the
 * integer sum of panel p's codes times activation row j's codes. Each broadcast of an activation
 * dword feeds the np panels' vpdpbusd. */
FX_INLINE void k_subblock(enum fx_type type, int np, int width, const struct fx_r16_tile *t,
                          const uint8_t *const *w, const uint8_t *a, const struct k_act *ka, int s,
                          __m512i sumi[2][FX_R16_MAX_ACT]) {
    const int sub_len = 256 / fx_r16_k_subs(type), groups = sub_len / 4;
    /* Few sums: a second partial sum halves the chains of dependent vpdpbusd. */
    const bool split = np * width < 4;
    __m512i isum[2][FX_R16_MAX_ACT], odd[2][FX_R16_MAX_ACT];
#pragma GCC unroll 2
    for (int p = 0; p < np; p++)
#pragma GCC unroll 16
        for (int j = 0; j < width; j++) {
            isum[p][j] = k_sub_start(type, ka, j, s);
            odd[p][j] = _mm512_setzero_si512();
        }
#pragma GCC unroll 16
    for (int gg = 0; gg < groups; gg++) {
        __m512i q[2];
#pragma GCC unroll 2
        for (int p = 0; p < np; p++)
            q[p] = k_codes(type, w[p], s, gg);
#pragma GCC unroll 16
        for (int j = 0; j < width; j++) {
            __m512i x = bcast4(a + (uint64_t)j * t->act_stride + FX_Q8K_QS + sub_len * s + 4 * gg);
#pragma GCC unroll 2
            for (int p = 0; p < np; p++) {
                if (split && gg % 2)
                    odd[p][j] = _mm512_dpbusd_epi32(odd[p][j], q[p], x);
                else
                    isum[p][j] = _mm512_dpbusd_epi32(isum[p][j], q[p], x);
            }
        }
    }
#pragma GCC unroll 2
    for (int p = 0; p < np; p++) {
        __m512i sc = k_scale(type, w[p], s);
#pragma GCC unroll 16
        for (int j = 0; j < width; j++) {
            if (split)
                isum[p][j] = _mm512_add_epi32(isum[p][j], odd[p][j]);
            sumi[p][j] = _mm512_add_epi32(sumi[p][j], _mm512_mullo_epi32(isum[p][j], sc));
        }
    }
}

/* A tile of np panels (1, or 2 for a wide tile at t->w and t->w + t->w_stride) against `width`
 * activation rows. Each panel's arithmetic is the same whether it goes alone or in a pair. */
FX_INLINE void k_tile(enum fx_type type, int np, int width, const struct fx_r16_tile *t) {
    const int subs = fx_r16_k_subs(type);
    const size_t pbytes = fx_r16_block_bytes(type);
    /* The f32 accumulators change once per super-block: they wait in memory, leaving the
     * registers to the integer sums. */
    _Alignas(64) float f[2][FX_R16_MAX_ACT][16];
    struct k_act ka;
#pragma GCC unroll 2
    for (int p = 0; p < np; p++)
#pragma GCC unroll 16
        for (int j = 0; j < width; j++)
            _mm512_store_ps(f[p][j], acc_load(t, p, j));
    for (int64_t b = 0; b < t->n_blocks; b++) {
        const uint8_t *w[2] = {t->w + (size_t)b * pbytes, t->w + t->w_stride + (size_t)b * pbytes};
        const uint8_t *a = t->act + (uint64_t)b * FX_Q8K_BYTES;
        if (np == 1 && width <= 2)
            prefetch_block(w[0], pbytes, 2);
#pragma GCC unroll 16
        for (int j = 0; j < width; j++)
            k_act_fill(type, a + (uint64_t)j * t->act_stride, &ka, j);
        __m512i sumi[2][FX_R16_MAX_ACT];
#pragma GCC unroll 2
        for (int p = 0; p < np; p++)
#pragma GCC unroll 16
            for (int j = 0; j < width; j++)
                sumi[p][j] = _mm512_setzero_si512();
        if (type == FX_TYPE_Q6_K && np == 1 && width <= 2)
            q6_narrow_sumi(width, t, w[0], a, &ka, sumi[0]);
        else if (np * width <= 2)
#pragma GCC unroll 16
            for (int s = 0; s < subs; s++)
                k_subblock(type, np, width, t, w, a, &ka, s, sumi);
        else /* not unrolled: GCC would defer every sub-block's vpmulld and spill the sums */
            for (int s = 0; s < subs; s++)
                k_subblock(type, np, width, t, w, a, &ka, s, sumi);
        /* The second sum, of the minimums times the activation's sums per sub-block, in summ. */
        __m512i summ[2][FX_R16_MAX_ACT];
#pragma GCC unroll 2
        for (int p = 0; p < np; p++)
#pragma GCC unroll 16
            for (int j = 0; j < width; j++)
                summ[p][j] = _mm512_setzero_si512();
        if (fx_r16_k_has_min(type))
#pragma GCC unroll 16
            for (int pt = 0; pt < subs / 2; pt++) {
                __m512i pairs[2];
#pragma GCC unroll 2
                for (int p = 0; p < np; p++)
                    pairs[p] = k_min_pairs(type, w[p], pt);
#pragma GCC unroll 16
                for (int j = 0; j < width; j++) {
                    __m512i x = bcast4((const uint8_t *)&ka.sums[j][2 * pt]);
#pragma GCC unroll 2
                    for (int p = 0; p < np; p++)
                        summ[p][j] = _mm512_dpwssd_epi32(summ[p][j], pairs[p], x);
                }
            }
#pragma GCC unroll 2
        for (int p = 0; p < np; p++) {
            __m512 d = fp16x16(w[p]);
#pragma GCC unroll 16
            for (int j = 0; j < width; j++) {
                __m512 da = _mm512_set1_ps(load_f32(a + (uint64_t)j * t->act_stride));
                __m512 acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi[p][j]), _mm512_mul_ps(d, da),
                                             _mm512_load_ps(f[p][j]));
                if (fx_r16_k_has_min(type))
                    acc = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(summ[p][j]),
                                           _mm512_mul_ps(fp16x16(w[p] + 32), da), acc);
                _mm512_store_ps(f[p][j], acc);
            }
        }
    }
#pragma GCC unroll 2
    for (int p = 0; p < np; p++)
#pragma GCC unroll 16
        for (int j = 0; j < width; j++)
            acc_store(t, p, j, _mm512_load_ps(f[p][j]));
}

FX_INLINE void k_tile_any(enum fx_type type, const struct fx_r16_tile *t) {
    switch (t->n_act) {
    case 8:
        k_tile(type, 1, 8, t);
        break;
    case 4:
        k_tile(type, 1, 4, t);
        break;
    case 2:
        k_tile(type, 1, 2, t);
        break;
    default:
        k_tile(type, 1, 1, t);
        break;
    }
}

void fx_avx512_tile_q2_K(const struct fx_r16_tile *t) {
    k_tile_any(FX_TYPE_Q2_K, t);
}

void fx_avx512_wide_q2_K(const struct fx_r16_tile *t) {
    k_tile(FX_TYPE_Q2_K, 2, FX_AVX512_K_WIDE_ACT, t);
}

void fx_avx512_tile_q3_K(const struct fx_r16_tile *t) {
    k_tile_any(FX_TYPE_Q3_K, t);
}

void fx_avx512_wide_q3_K(const struct fx_r16_tile *t) {
    k_tile(FX_TYPE_Q3_K, 2, FX_AVX512_K_WIDE_ACT, t);
}

void fx_avx512_tile_q4_K(const struct fx_r16_tile *t) {
    k_tile_any(FX_TYPE_Q4_K, t);
}

void fx_avx512_wide_q4_K(const struct fx_r16_tile *t) {
    k_tile(FX_TYPE_Q4_K, 2, FX_AVX512_K_WIDE_ACT, t);
}

void fx_avx512_tile_q5_K(const struct fx_r16_tile *t) {
    k_tile_any(FX_TYPE_Q5_K, t);
}

void fx_avx512_wide_q5_K(const struct fx_r16_tile *t) {
    k_tile(FX_TYPE_Q5_K, 2, FX_AVX512_K_WIDE_ACT, t);
}

void fx_avx512_tile_q6_K(const struct fx_r16_tile *t) {
    k_tile_any(FX_TYPE_Q6_K, t);
}

void fx_avx512_wide_q6_K(const struct fx_r16_tile *t) {
    k_tile(FX_TYPE_Q6_K, 2, FX_AVX512_K_WIDE_ACT, t);
}

void fx_avx512_tile_iq4_xs(const struct fx_r16_tile *t) {
    k_tile_any(FX_TYPE_IQ4_XS, t);
}

void fx_avx512_wide_iq4_xs(const struct fx_r16_tile *t) {
    k_tile(FX_TYPE_IQ4_XS, 2, FX_AVX512_K_WIDE_ACT, t);
}

#endif
