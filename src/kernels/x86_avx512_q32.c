/* AVX-512 VNNI tile kernels of the 32-wide formats in the R16 layout (r16.h): Q8_0, Q4_0, Q4_1,
 * Q5_0, Q5_1, MXFP4 and IQ4_NL against Q8_0 or Q8_1 activations, and the activation metadata
 * they need.
 *
 * A tile holds, for each of its activation rows, one f32 accumulator per weight row (16 lanes).
 * Per block: the block's 16 rows are decoded once into 8 registers of unsigned codes (lane r:
 * elements 4g..4g+3 of row r), then for each activation row 8 vpdpbusd against its codes,
 * broadcast 4 at a time, give the 16 exact integer sums, which enter the accumulators by the
 * fixed sequence of r16.h. */
#if defined(__x86_64__)

#include "kernels/x86_avx512.h"

#include "kernels/generic.h"

/* MXFP4's 16 doubled E2M1 values plus 12 (its bias), in each 128-bit lane for vpshufb. */
FX_INLINE __m512i mxfp4_lut(void) {
    return _mm512_broadcast_i32x4(
        _mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
}

/* 16 E8M0 exponents as the f32 half-scales 2^(e-128) (fx_e8m0_to_f32_half): (e - 1) << 23 as
 * f32 bits, except e = 0 and 1, the subnormals 2^-128 and 2^-127. */
FX_INLINE __m512 e8m0_half_x16(const uint8_t *p) {
    __m512i e = _mm512_cvtepu8_epi32(load128(p));
    __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
    __m512i sub = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
    __mmask16 small = _mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2));
    return _mm512_castsi512_ps(_mm512_mask_blend_epi32(small, normal, sub));
}

/* x | bit 4 taken from bit g of each byte of planes (vpternlogd: A | (B & C)). A 16-bit shift
 * moves bit g of a byte to bit 4 of the same byte for every g in 0..7. */
FX_INLINE __m512i or_bit4(__m512i x, __m512i planes, int g) {
    __m512i moved = g < 4   ? _mm512_slli_epi16(planes, 4 - g)
                    : g > 4 ? _mm512_srli_epi16(planes, g - 4)
                            : planes;
    return _mm512_ternarylogic_epi32(x, moved, _mm512_set1_epi8(0x10), 0xf8);
}

/* The offsets in a packed block of the codes (qs) and of the fifth-bit planes (0: none). */
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
    default: /* Q8_0, Q4_0, IQ4_NL */
        return 32;
    }
}

FX_INLINE size_t q32_hmask(enum fx_type type) {
    return type == FX_TYPE_Q5_0 ? 32 : type == FX_TYPE_Q5_1 ? 64 : 0;
}

/* The unsigned codes of group g (elements 4g..4g+3 in lane r) of the packed block at p. The 4-bit
 * formats take groups g and g + 4 from one load (low and high nibbles): callers that want both
 * ask for both, and the compiler loads once. */
FX_INLINE __m512i q32_group(enum fx_type type, const uint8_t *p, int g) {
    if (type == FX_TYPE_Q8_0)
        return load512(p + 32 + 64 * g);
    __m512i x = load512(p + q32_qs(type) + 64 * (g % 4));
    __m512i q = g < 4 ? nib_lo(x) : nib_hi(x);
    if (q32_hmask(type))
        q = or_bit4(q, load512(p + q32_hmask(type)), g);
    if (type == FX_TYPE_MXFP4)
        q = _mm512_shuffle_epi8(mxfp4_lut(), q);
    if (type == FX_TYPE_IQ4_NL)
        q = _mm512_shuffle_epi8(iq4nl_lut(), q);
    return q;
}

/* The scales of the packed block at p, and for the affine formats the minimums. */
FX_INLINE void q32_scales(enum fx_type type, const uint8_t *p, __m512 *d, __m512 *m) {
    *d = type == FX_TYPE_MXFP4 ? e8m0_half_x16(p) : fp16x16(p);
    if (fx_r16_affine(type))
        *m = fp16x16(p + 32);
}

/* Block b's share of the tile's prefetch slice, in both panels (r16.h, struct fx_r16_tile). */
FX_INLINE void prefetch_slice(const struct fx_r16_tile *t, int64_t b) {
    const char *p = (const char *)t->prefetch + (uint64_t)b * t->prefetch_step;
    for (uint64_t o = 0; o < t->prefetch_step; o += 64) {
        _mm_prefetch(p + o, _MM_HINT_T0);
        _mm_prefetch(p + t->w_stride + o, _MM_HINT_T0);
    }
}

/* A tile: np panels (1, or 2 for a wide tile) against `width` activation rows. Group by group,
 * the codes of the panels meet each activation dword, broadcast once into a register (a wide
 * tile halves the loads per vpdpbusd, which bound the one-panel tiles: two vector loads per
 * cycle). Each pair keeps two partial sums, of groups 0-3 and 4-7, so that the chains of
 * dependent vpdpbusd are short (integer sums: the split changes nothing). At most 16 sums, 8
 * accumulators, 2 code registers and a broadcast: they fit the 32 registers. */
FX_INLINE void q32_tile(enum fx_type type, int np, int width, const struct fx_r16_tile *t) {
    const bool affine = fx_r16_affine(type);
    const uint64_t ablock = affine ? sizeof(struct fx_block_q8_1) : sizeof(struct fx_block_q8_0);
    const uint8_t *codes = t->act + (affine ? 4 : 2);
    const size_t pbytes = fx_r16_block_bytes(type);
    __m512 f[2][FX_R16_MAX_ACT];
#pragma GCC unroll 16
    for (int p = 0; p < np; p++)
#pragma GCC unroll 16
        for (int j = 0; j < width; j++)
            f[p][j] = acc_load(t, p, j);
    for (int64_t b = 0; b < t->n_blocks; b++) {
        const uint8_t *w[2] = {t->w + (size_t)b * pbytes, t->w + t->w_stride + (size_t)b * pbytes};
        const uint8_t *a = codes + (uint64_t)b * ablock;
        const struct fx_r16_meta *m = &t->meta[b];
        if (t->prefetch)
            prefetch_slice(t, b);
        __m512i lo[2][FX_R16_MAX_ACT], hi[2][FX_R16_MAX_ACT];
#pragma GCC unroll 16
        for (int p = 0; p < np; p++)
#pragma GCC unroll 16
            for (int j = 0; j < width; j++) {
                lo[p][j] = _mm512_set1_epi32(m[j * t->meta_stride].c);
                hi[p][j] = _mm512_setzero_si512();
            }
#pragma GCC unroll 16
        for (int i = 0; i < 4; i++)
#pragma GCC unroll 16
            for (int h = 0; h < 2; h++) {
                int g = i + 4 * h;
                __m512i q[2];
#pragma GCC unroll 16
                for (int p = 0; p < np; p++)
                    q[p] = q32_group(type, w[p], g);
#pragma GCC unroll 16
                for (int j = 0; j < width; j++) {
                    __m512i x = bcast4(a + (uint64_t)j * t->act_stride + 4 * g);
#pragma GCC unroll 16
                    for (int p = 0; p < np; p++)
                        if (h)
                            hi[p][j] = _mm512_dpbusd_epi32(hi[p][j], q[p], x);
                        else
                            lo[p][j] = _mm512_dpbusd_epi32(lo[p][j], q[p], x);
                }
            }
#pragma GCC unroll 16
        for (int p = 0; p < np; p++) {
            __m512 d, mw;
            q32_scales(type, w[p], &d, &mw);
#pragma GCC unroll 16
            for (int j = 0; j < width; j++) {
                const struct fx_r16_meta *mj = &m[j * t->meta_stride];
                __m512i isum = _mm512_add_epi32(lo[p][j], hi[p][j]);
                __m512 scale = _mm512_mul_ps(d, _mm512_set1_ps(mj->d));
                f[p][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), scale, f[p][j]);
                if (affine)
                    f[p][j] = _mm512_fmadd_ps(mw, _mm512_set1_ps(mj->s), f[p][j]);
            }
        }
    }
#pragma GCC unroll 16
    for (int p = 0; p < np; p++)
#pragma GCC unroll 16
        for (int j = 0; j < width; j++)
            acc_store(t, p, j, f[p][j]);
}

/* One specialisation per tile shape. */
FX_INLINE void q32_tile_any(enum fx_type type, const struct fx_r16_tile *t) {
    switch (t->n_act) {
    case 8:
        q32_tile(type, 1, 8, t);
        break;
    case 4:
        q32_tile(type, 1, 4, t);
        break;
    case 2:
        q32_tile(type, 1, 2, t);
        break;
    default:
        q32_tile(type, 1, 1, t);
        break;
    }
}

FX_INLINE void q32_wide(enum fx_type type, const struct fx_r16_tile *t) {
    q32_tile(type, 2, FX_AVX512_Q32_WIDE_ACT, t);
}

void fx_avx512_tile_q8_0(const struct fx_r16_tile *t) {
    q32_tile_any(FX_TYPE_Q8_0, t);
}

void fx_avx512_wide_q8_0(const struct fx_r16_tile *t) {
    q32_wide(FX_TYPE_Q8_0, t);
}

void fx_avx512_wide_q4_0(const struct fx_r16_tile *t) {
    q32_wide(FX_TYPE_Q4_0, t);
}

void fx_avx512_wide_q4_1(const struct fx_r16_tile *t) {
    q32_wide(FX_TYPE_Q4_1, t);
}

void fx_avx512_wide_q5_0(const struct fx_r16_tile *t) {
    q32_wide(FX_TYPE_Q5_0, t);
}

void fx_avx512_wide_q5_1(const struct fx_r16_tile *t) {
    q32_wide(FX_TYPE_Q5_1, t);
}

void fx_avx512_wide_mxfp4(const struct fx_r16_tile *t) {
    q32_wide(FX_TYPE_MXFP4, t);
}

void fx_avx512_tile_q4_0(const struct fx_r16_tile *t) {
    q32_tile_any(FX_TYPE_Q4_0, t);
}

void fx_avx512_tile_q4_1(const struct fx_r16_tile *t) {
    q32_tile_any(FX_TYPE_Q4_1, t);
}

void fx_avx512_tile_q5_0(const struct fx_r16_tile *t) {
    q32_tile_any(FX_TYPE_Q5_0, t);
}

void fx_avx512_tile_q5_1(const struct fx_r16_tile *t) {
    q32_tile_any(FX_TYPE_Q5_1, t);
}

void fx_avx512_tile_mxfp4(const struct fx_r16_tile *t) {
    q32_tile_any(FX_TYPE_MXFP4, t);
}

void fx_avx512_tile_iq4_nl(const struct fx_r16_tile *t) {
    q32_tile_any(FX_TYPE_IQ4_NL, t);
}

void fx_avx512_wide_iq4_nl(const struct fx_r16_tile *t) {
    q32_wide(FX_TYPE_IQ4_NL, t);
}

/* ---- activation metadata ------------------------------------------------------------------- */

/* Sum of the 8 int32 lanes. */
FX_INLINE int32_t hsum_i32x8(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

void fx_avx512_meta_q8_0(const uint8_t *act, int64_t n_blocks, int32_t bias,
                         struct fx_r16_meta *meta) {
    const __m256i ones = _mm256_set1_epi8(1);
    for (int64_t b = 0; b < n_blocks; b++, act += sizeof(struct fx_block_q8_0)) {
        uint16_t d;
        memcpy(&d, act, 2);
        __m256i q = _mm256_loadu_si256((const __m256i *)(act + 2));
        meta[b].d = _cvtsh_ss(d);
        meta[b].s = 0.0f;
        meta[b].c = -bias * hsum_i32x8(_mm256_dpbusd_epi32(_mm256_setzero_si256(), ones, q));
    }
}

#endif
