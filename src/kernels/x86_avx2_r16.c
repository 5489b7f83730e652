/* AVX2 tile kernels of every R16 format (r16.h), and the activation metadata of the 32-wide
 * ones. The layout and the float sequence are those of the AVX-512 tiles, so results match
 * them; without VNNI the integer sums come from vpmaddubsw + vpmaddwd, 8 weight rows (half a
 * panel) per register. vpmaddubsw saturates its int16 pair sums, which the codes below keep
 * clear of: every format's unsigned codes are at most 63 except those of Q8_0, IQ4_NL and
 * IQ4_XS, which this file keeps as signed bytes (the IQ4 levels, -127..113, straight from a
 * vpshufb) and multiplies by magnitude and sign (at most 2 * 127 * 127); they then need no
 * bias. */
#if defined(__x86_64__)

#include "kernels/x86_avx2.h"

#include "kernels/generic.h"

/* A tile of more than 4 activation rows runs as tiles of 4 (16 registers). */
#define AVX2_MAX_WIDTH 4

/* The formats whose codes are multiplied as signed bytes (see above). */
FX_INLINE bool signed_codes(enum fx_type type) {
    return type == FX_TYPE_Q8_0 || type == FX_TYPE_IQ4_NL || type == FX_TYPE_IQ4_XS;
}

/* The 16 levels of IQ4_NL and IQ4_XS, signed, in each 128-bit lane for vpshufb. */
FX_INLINE __m256i iq4nl_levels(void) {
    return _mm256_broadcastsi128_si256(
        _mm_setr_epi8(-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113));
}

/* Sums of 4 products of signed q and signed a bytes per 32-bit lane (|q|, |a| <= 127). */
FX_INLINE __m256i dot_i8i8(__m256i q, __m256i a) {
    return dot_u8i8(_mm256_sign_epi8(q, q), _mm256_sign_epi8(a, q));
}

/* ---- 32-wide formats ----------------------------------------------------------------------- */

/* Offsets in a packed block: of qs and of the fifth-bit masks (0: none). */
FX_INLINE size_t q32_qs(enum fx_type type) {
    switch (type) {
    case FX_TYPE_MXFP4:
        return 16;
    case FX_TYPE_Q4_1:
        return 64;
    case FX_TYPE_Q5_0:
        return 96;
    case FX_TYPE_Q5_1:
        return 128;
    default:
        return 32;
    }
}

FX_INLINE size_t q32_hmask(enum fx_type type) {
    return type == FX_TYPE_Q5_0 ? 32 : type == FX_TYPE_Q5_1 ? 64 : 0;
}

/* 8 E8M0 exponents as f32 half-scales 2^(e-128) (fx_e8m0_to_f32_half). */
FX_INLINE __m256 e8m0_half_x8(const uint8_t *p) {
    __m256i e = _mm256_cvtepu8_epi32(load64(p));
    __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
    __m256i sub = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
    __m256i small = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
    return _mm256_castsi256_ps(_mm256_blendv_epi8(normal, sub, small));
}

/* The codes of group g (elements 4g..4g+3) of rows 8h..8h+7: unsigned, or for Q8_0 and IQ4_NL
 * signed. */
FX_INLINE __m256i q32_codes(enum fx_type type, const uint8_t *p, int h, int g) {
    if (type == FX_TYPE_Q8_0)
        return _mm256_xor_si256(load256(p + 32 + 64 * g + 32 * h), _mm256_set1_epi8(-128));
    __m256i x = load256(p + q32_qs(type) + 64 * (g % 4) + 32 * h);
    __m256i q = g < 4 ? nib_lo(x) : nib_hi(x);
    if (q32_hmask(type)) { /* bit g of each plane byte to bit 4 (see x86_avx512_q32.c) */
        __m256i planes = load256(p + q32_hmask(type) + 32 * h);
        __m256i moved = g < 4   ? _mm256_slli_epi16(planes, 4 - g)
                        : g > 4 ? _mm256_srli_epi16(planes, g - 4)
                                : planes;
        q = _mm256_or_si256(q, _mm256_and_si256(moved, _mm256_set1_epi8(0x10)));
    }
    if (type == FX_TYPE_MXFP4) /* doubled E2M1 values plus 12 */
        q = _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_setr_epi8(
                                    12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0)),
                                q);
    if (type == FX_TYPE_IQ4_NL)
        q = _mm256_shuffle_epi8(iq4nl_levels(), q);
    return q;
}

/* Rows 8h..8h+7 of a tile of `width` (<= 4) activation rows starting at row j0. */
FX_INLINE void q32_half(enum fx_type type, int width, const struct fx_r16_tile *t, int h, int j0) {
    const bool affine = fx_r16_affine(type);
    const uint64_t ablock = affine ? sizeof(struct fx_block_q8_1) : sizeof(struct fx_block_q8_0);
    const uint8_t *codes = t->act + (uint64_t)j0 * t->act_stride + (affine ? 4 : 2);
    const struct fx_r16_meta *meta = t->meta + j0 * t->meta_stride;
    const size_t pbytes = fx_r16_block_bytes(type);
    __m256 f[AVX2_MAX_WIDTH];
#pragma GCC unroll 16
    for (int j = 0; j < width; j++)
        f[j] = acc_load(t, h, j0 + j);
    for (int64_t b = 0; b < t->n_blocks; b++) {
        const uint8_t *p = t->w + (size_t)b * pbytes;
        const uint8_t *a = codes + (uint64_t)b * ablock;
        __m256i isum[AVX2_MAX_WIDTH];
#pragma GCC unroll 16
        for (int j = 0; j < width; j++) /* signed codes: no bias to remove */
            isum[j] = _mm256_set1_epi32(signed_codes(type) ? 0 : meta[j * t->meta_stride + b].c);
#pragma GCC unroll 16
        for (int g = 0; g < 8; g++) {
            __m256i q = q32_codes(type, p, h, g);
            __m256i mag = signed_codes(type) ? _mm256_sign_epi8(q, q) : q;
#pragma GCC unroll 16
            for (int j = 0; j < width; j++) {
                __m256i x = bcast4(a + (uint64_t)j * t->act_stride + 4 * g);
                if (signed_codes(type))
                    x = _mm256_sign_epi8(x, q);
                isum[j] = _mm256_add_epi32(isum[j], dot_u8i8(mag, x));
            }
        }
        __m256 d = type == FX_TYPE_MXFP4 ? e8m0_half_x8(p + 8 * h) : fp16x8(p + 16 * h);
#pragma GCC unroll 16
        for (int j = 0; j < width; j++) {
            const struct fx_r16_meta *m = &meta[j * t->meta_stride + b];
            __m256 scale = _mm256_mul_ps(d, _mm256_set1_ps(m->d));
            f[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[j]), scale, f[j]);
            if (affine)
                f[j] = _mm256_fmadd_ps(fp16x8(p + 32 + 16 * h), _mm256_set1_ps(m->s), f[j]);
        }
    }
#pragma GCC unroll 16
    for (int j = 0; j < width; j++)
        acc_store(t, h, j0 + j, f[j]);
}

/* ---- K formats ----------------------------------------------------------------------------- */

/* 8 signed bytes each as int16 pairs (a[r], b[r]) in lane r. */
FX_INLINE __m256i pair_i8(const uint8_t *a, const uint8_t *b) {
    return _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(load64(a), load64(b)));
}

/* The scale of sub-block s of rows 8h..8h+7, as int32. */
FX_INLINE __m256i k_scale(enum fx_type type, const uint8_t *p, int h, int s) {
    switch (type) {
    case FX_TYPE_Q2_K: {
        __m256i x = _mm256_cvtepu8_epi16(
            _mm_loadu_si128((const __m128i *)(p + 64 + 32 * (s / 2) + 16 * h)));
        if (s % 2)
            x = _mm256_srli_epi32(x, 16);
        return _mm256_and_si256(x, _mm256_set1_epi32(0x0f));
    }
    case FX_TYPE_Q4_K:
    case FX_TYPE_Q5_K:
        return _mm256_cvtepu8_epi32(load64(p + 64 + 16 * s + 8 * h));
    default:
        return _mm256_cvtepi8_epi32(load64(p + 32 + 16 * s + 8 * h));
    }
}

/* The int16 pairs that multiply the activation's sums of 16 (see x86_avx512_qk.c). */
FX_INLINE __m256i k_pairs(enum fx_type type, const uint8_t *p, int h, int t) {
    switch (type) {
    case FX_TYPE_Q2_K:
        return _mm256_srli_epi16(
            _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(p + 64 + 32 * t + 16 * h))), 4);
    case FX_TYPE_Q4_K:
    case FX_TYPE_Q5_K: {
        __m256i m = _mm256_cvtepu8_epi32(load64(p + 192 + 16 * t + 8 * h));
        return _mm256_or_si256(m, _mm256_slli_epi32(m, 16));
    }
    default:
        return pair_i8(p + 32 + 32 * t + 8 * h, p + 32 + 32 * t + 16 + 8 * h);
    }
}

FX_INLINE __m256i q6_codes(int qt, __m256i ql, __m256i qh) {
    __m256i low = qt < 2 ? nib_lo(ql) : nib_hi(ql);
    __m256i high;
    switch (qt) {
    case 0:
        high = _mm256_slli_epi16(qh, 4);
        break;
    case 1:
        high = _mm256_slli_epi16(qh, 2);
        break;
    case 2:
        high = qh;
        break;
    default:
        high = _mm256_srli_epi16(qh, 2);
        break;
    }
    return _mm256_or_si256(low, _mm256_and_si256(high, _mm256_set1_epi8(0x30)));
}

/* Codes of group gg of sub-block s, rows 8h..8h+7: unsigned, or for IQ4_XS its signed levels. */
FX_INLINE __m256i k_codes(enum fx_type type, const uint8_t *p, int h, int s, int gg) {
    switch (type) {
    case FX_TYPE_IQ4_XS: {
        __m256i x = load256(p + 160 + 64 * (4 * s + gg % 4) + 32 * h);
        return _mm256_shuffle_epi8(iq4nl_levels(), gg < 4 ? nib_lo(x) : nib_hi(x));
    }
    case FX_TYPE_Q4_K:
    case FX_TYPE_Q5_K: {
        bool five = type == FX_TYPE_Q5_K;
        __m256i x = load256(p + (five ? 832 : 320) + 64 * (8 * (s / 2) + gg) + 32 * h);
        __m256i q = s % 2 ? nib_hi(x) : nib_lo(x);
        if (five)
            q = add_where(q, load_u32(p + 320 + 8 * (8 * s + gg) + 4 * h), 16);
        return q;
    }
    case FX_TYPE_Q2_K:
    case FX_TYPE_Q3_K: {
        int n = s / 8, j = (s % 8) / 2, g = 4 * (s % 2) + gg;
        bool three = type == FX_TYPE_Q3_K;
        __m256i x = load256(p + (three ? 288 : 320) + 64 * (8 * n + g) + 32 * h);
        __m256i q = _mm256_and_si256(_mm256_srli_epi16(x, 2 * j), _mm256_set1_epi8(3));
        if (three)
            q = add_where(q, load_u32(p + 1312 + 8 * (8 * (4 * n + j) + g) + 4 * h), 4);
        return q;
    }
    default: {
        int hh = s / 8, qt = (s % 8) / 2, g = 4 * (s % 2) + gg;
        __m256i ql = load256(p + 288 + 64 * (8 * (2 * hh + qt % 2) + g) + 32 * h);
        __m256i qh = load256(p + 2336 + 64 * (8 * hh + g) + 32 * h);
        return q6_codes(qt, ql, qh);
    }
    }
}

FX_INLINE void k_half(enum fx_type type, int width, const struct fx_r16_tile *t, int h, int j0) {
    const int subs = fx_r16_k_subs(type), sub_len = 256 / subs, groups = sub_len / 4;
    const size_t pbytes = fx_r16_block_bytes(type);
    const uint8_t *act = t->act + (uint64_t)j0 * t->act_stride;
    __m256 f[AVX2_MAX_WIDTH];
#pragma GCC unroll 16
    for (int j = 0; j < width; j++)
        f[j] = acc_load(t, h, j0 + j);
    for (int64_t b = 0; b < t->n_blocks; b++) {
        const uint8_t *p = t->w + (size_t)b * pbytes;
        const uint8_t *a = act + (uint64_t)b * FX_Q8K_BYTES;
        __m256i sumi[AVX2_MAX_WIDTH], isum[AVX2_MAX_WIDTH];
#pragma GCC unroll 16
        for (int j = 0; j < width; j++)
            sumi[j] = _mm256_setzero_si256();
        for (int s = 0; s < subs; s++) {
#pragma GCC unroll 16
            for (int j = 0; j < width; j++)
                isum[j] = _mm256_setzero_si256();
#pragma GCC unroll 16
            for (int gg = 0; gg < groups; gg++) {
                __m256i q = k_codes(type, p, h, s, gg);
#pragma GCC unroll 16
                for (int j = 0; j < width; j++) {
                    __m256i x =
                        bcast4(a + (uint64_t)j * t->act_stride + FX_Q8K_QS + sub_len * s + 4 * gg);
                    isum[j] = _mm256_add_epi32(isum[j], signed_codes(type) ? dot_i8i8(q, x)
                                                                           : dot_u8i8(q, x));
                }
            }
            __m256i sc = k_scale(type, p, h, s);
#pragma GCC unroll 16
            for (int j = 0; j < width; j++)
                sumi[j] = _mm256_add_epi32(sumi[j], _mm256_mullo_epi32(isum[j], sc));
        }
#pragma GCC unroll 16
        for (int j = 0; j < width; j++)
            isum[j] = _mm256_setzero_si256();
        /* The second sum (none for signed codes). */
        const int n_pairs = signed_codes(type) ? 0 : 8;
#pragma GCC unroll 16
        for (int pt = 0; pt < n_pairs; pt++) {
            __m256i pairs = k_pairs(type, p, h, pt);
#pragma GCC unroll 16
            for (int j = 0; j < width; j++)
                isum[j] = _mm256_add_epi32(
                    isum[j], _mm256_madd_epi16(pairs, bcast4(a + (uint64_t)j * t->act_stride +
                                                             FX_Q8K_BSUMS + 4 * pt)));
        }
        __m256 d = fp16x8(p + 16 * h);
#pragma GCC unroll 16
        for (int j = 0; j < width; j++) {
            __m256 da = _mm256_set1_ps(load_f32(a + (uint64_t)j * t->act_stride));
            if (!fx_r16_k_has_min(type) && !signed_codes(type))
                sumi[j] = _mm256_sub_epi32(
                    sumi[j], _mm256_slli_epi32(isum[j], type == FX_TYPE_Q3_K ? 2 : 5));
            f[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi[j]), _mm256_mul_ps(d, da), f[j]);
            if (fx_r16_k_has_min(type))
                f[j] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(isum[j]),
                                        _mm256_mul_ps(fp16x8(p + 32 + 16 * h), da), f[j]);
        }
    }
#pragma GCC unroll 16
    for (int j = 0; j < width; j++)
        acc_store(t, h, j0 + j, f[j]);
}

/* ---- tiles: both halves of the panel, activation rows 4 at a time -------------------------- */

FX_INLINE void tile_rows(enum fx_type type, int width, const struct fx_r16_tile *t, int j0) {
    for (int h = 0; h < 2 && 8 * h < t->n_rows; h++) {
        if (fx_type_block_elems(type) == FX_QK_K)
            k_half(type, width, t, h, j0);
        else
            q32_half(type, width, t, h, j0);
    }
}

FX_INLINE void tile_any(enum fx_type type, const struct fx_r16_tile *t) {
    switch (t->n_act) {
    case 8:
        tile_rows(type, 4, t, 0);
        tile_rows(type, 4, t, 4);
        break;
    case 4:
        tile_rows(type, 4, t, 0);
        break;
    case 2:
        tile_rows(type, 2, t, 0);
        break;
    default:
        tile_rows(type, 1, t, 0);
        break;
    }
}

void fx_avx2_tile_q8_0(const struct fx_r16_tile *t) {
    tile_any(FX_TYPE_Q8_0, t);
}

void fx_avx2_tile_q4_0(const struct fx_r16_tile *t) {
    tile_any(FX_TYPE_Q4_0, t);
}

void fx_avx2_tile_q4_1(const struct fx_r16_tile *t) {
    tile_any(FX_TYPE_Q4_1, t);
}

void fx_avx2_tile_q5_0(const struct fx_r16_tile *t) {
    tile_any(FX_TYPE_Q5_0, t);
}

void fx_avx2_tile_q5_1(const struct fx_r16_tile *t) {
    tile_any(FX_TYPE_Q5_1, t);
}

void fx_avx2_tile_mxfp4(const struct fx_r16_tile *t) {
    tile_any(FX_TYPE_MXFP4, t);
}

void fx_avx2_tile_q2_K(const struct fx_r16_tile *t) {
    tile_any(FX_TYPE_Q2_K, t);
}

void fx_avx2_tile_q3_K(const struct fx_r16_tile *t) {
    tile_any(FX_TYPE_Q3_K, t);
}

void fx_avx2_tile_q4_K(const struct fx_r16_tile *t) {
    tile_any(FX_TYPE_Q4_K, t);
}

void fx_avx2_tile_q5_K(const struct fx_r16_tile *t) {
    tile_any(FX_TYPE_Q5_K, t);
}

void fx_avx2_tile_q6_K(const struct fx_r16_tile *t) {
    tile_any(FX_TYPE_Q6_K, t);
}

void fx_avx2_tile_iq4_nl(const struct fx_r16_tile *t) {
    tile_any(FX_TYPE_IQ4_NL, t);
}

void fx_avx2_tile_iq4_xs(const struct fx_r16_tile *t) {
    tile_any(FX_TYPE_IQ4_XS, t);
}

/* ---- activation metadata ------------------------------------------------------------------- */

FX_INLINE int32_t hsum_i32x8(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

void fx_avx2_meta_q8_0(const uint8_t *act, int64_t n_blocks, int32_t bias,
                       struct fx_r16_meta *meta) {
    for (int64_t b = 0; b < n_blocks; b++, act += sizeof(struct fx_block_q8_0)) {
        uint16_t d;
        memcpy(&d, act, 2);
        meta[b].d = _cvtsh_ss(d);
        meta[b].s = 0.0f;
        meta[b].c = -bias * hsum_i32x8(dot_u8i8(_mm256_set1_epi8(1), load256(act + 2)));
    }
}

#endif
