/* Helpers shared by the AVX-512 kernel files (x86_avx512*.c), which alone are built with the
 * AVX-512 -m flags; nothing else may include this header. */
#ifndef FX_KERNELS_X86_AVX512_H
#define FX_KERNELS_X86_AVX512_H

#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "kernels/r16.h"

/* The tile kernels are written once for every tile width and format and specialised by the
 * compiler: `width` and `type` are constants at every call of an always-inline body. */
#define FX_INLINE static inline __attribute__((always_inline))

/* 16 fp16 values at p (any alignment) as f32. */
FX_INLINE __m512 fp16x16(const uint8_t *p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}

FX_INLINE __m512i load512(const uint8_t *p) {
    return _mm512_loadu_si512((const void *)p);
}

FX_INLINE __m128i load128(const uint8_t *p) {
    return _mm_loadu_si128((const __m128i *)p);
}

/* The 4 bytes at p in every 32-bit lane (the activation operand of vpdpbusd). */
FX_INLINE __m512i bcast4(const uint8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

FX_INLINE float load_f32(const uint8_t *p) {
    float v;
    memcpy(&v, p, 4);
    return v;
}

FX_INLINE __mmask64 load_mask64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return (__mmask64)v;
}

/* e^x in every lane (Cephes' expf: x = n ln2 + r, a degree-7 polynomial for e^r, within 2 ulp):
 * the bits of the AVX2 table's exp_f32x8. x below -104 gives +0 (so -inf does), above 88.7
 * +inf. */
FX_INLINE __m512 exp_f32x16(__m512 x) {
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
    /* p * 2^n rounded once, subnormal results included: the bits of p * 2^(n / 2) * 2^(n - n / 2)
     * (the exact first product, then one rounding), which this used to compute in 9 operations;
     * the two were compared on all 2^32 inputs. */
    return _mm512_scalef_ps(p, n);
}

/* Low and high nibbles of every byte. */
FX_INLINE __m512i nib_lo(__m512i x) {
    return _mm512_and_si512(x, _mm512_set1_epi8(0x0f));
}

FX_INLINE __m512i nib_hi(__m512i x) {
    return _mm512_and_si512(_mm512_srli_epi16(x, 4), _mm512_set1_epi8(0x0f));
}

/* The 16 levels of IQ4_NL and IQ4_XS plus 128 (their bias: 1..241, unsigned for vpdpbusd), in
 * each 128-bit lane for vpshufb. */
FX_INLINE __m512i iq4nl_lut(void) {
    return _mm512_broadcast_i32x4(_mm_setr_epi8(
        (char)1, (char)24, (char)45, (char)63, (char)79, (char)93, (char)106, (char)118, (char)129,
        (char)141, (char)153, (char)166, (char)181, (char)197, (char)217, (char)241));
}

/* Asks for the packed block `ahead` blocks past p, a line at a time. A K-format tile of one or
 * two activation rows computes too little per byte for the hardware prefetchers alone to keep
 * enough of the weight stream in flight (measured: +40% on cold Q4_K and Q6_K weights; the
 * 32-wide formats lost 10% with it). Prefetching past the end of the weights is harmless. */
FX_INLINE void prefetch_block(const uint8_t *p, size_t block_bytes, int ahead) {
    const uint8_t *q = p + (size_t)ahead * block_bytes;
    for (size_t off = 0; off < block_bytes; off += 64)
        _mm_prefetch((const char *)q + off, _MM_HINT_T0);
}

/* r[i] = the transpose of r: r[i] held row i of a 16 x 16 block of f32, now column i. */
FX_INLINE void transpose16(__m512 r[16]) {
    __m512 t[16];
#pragma GCC unroll 8
    for (int k = 0; k < 16; k += 2) {
        t[k] = _mm512_unpacklo_ps(r[k], r[k + 1]);
        t[k + 1] = _mm512_unpackhi_ps(r[k], r[k + 1]);
    }
#pragma GCC unroll 4
    for (int k = 0; k < 16; k += 4)
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            __m512d a = _mm512_castps_pd(t[k + h]), b = _mm512_castps_pd(t[k + h + 2]);
            r[k + 2 * h] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
            r[k + 2 * h + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
        }
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        t[k] = _mm512_shuffle_f32x4(r[k], r[k + 4], 0x88);
        t[k + 4] = _mm512_shuffle_f32x4(r[k], r[k + 4], 0xdd);
        t[k + 8] = _mm512_shuffle_f32x4(r[k + 8], r[k + 12], 0x88);
        t[k + 12] = _mm512_shuffle_f32x4(r[k + 8], r[k + 12], 0xdd);
    }
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++) {
        r[k] = _mm512_shuffle_f32x4(t[k], t[k + 8], 0x88);
        r[k + 8] = _mm512_shuffle_f32x4(t[k], t[k + 8], 0xdd);
    }
}

/* The first n lanes of 16 (n clamped to 0 .. 16). */
FX_INLINE __mmask16 lanes16(int64_t n) {
    return n >= 16 ? (__mmask16)0xffff : n <= 0 ? 0 : (__mmask16)((1u << n) - 1);
}

/* The lanes of panel p (0, or 1 in a wide tile) that hold valid rows: rows 16p.. of the tile. */
FX_INLINE __mmask16 panel_lanes(const struct fx_r16_tile *t, int p) {
    return lanes16(t->n_rows - FX_R16_ROWS * p);
}

/* A tile's accumulators for panel p and activation row j: zero at the start of a row, else what
 * the previous run left in out. */
FX_INLINE __m512 acc_load(const struct fx_r16_tile *t, int p, int j) {
    if (t->first)
        return _mm512_setzero_ps();
    return _mm512_maskz_loadu_ps(panel_lanes(t, p), t->out + j * t->out_stride + FX_R16_ROWS * p);
}

FX_INLINE void acc_store(const struct fx_r16_tile *t, int p, int j, __m512 f) {
    _mm512_mask_storeu_ps(t->out + j * t->out_stride + FX_R16_ROWS * p, panel_lanes(t, p), f);
}

/* The tile and metadata kernels of the AVX-512 table's R16 formats (x86_avx512_q32.c and
 * x86_avx512_qk.c); x86_avx512.c puts them in the table. */
/* Activation rows of the wide tiles (r16.h): the 32-wide formats keep 2 panels x 4 rows of sums
 * in registers (2 x 8 measured 15-20% slower for Q8_0); the K formats take 6, so that a
 * sub-block's 2 x 6 integer sums and the super-block's 2 x 6 fit in the 32 vector registers
 * with the codes (2 x 8 measured 6-10% faster than 2 x 4, but kept the super-block's sums on the
 * stack, a load and a store per sub-block each; 2 x 6 is faster again by 5-10% for Q4_K, Q5_K,
 * IQ4_XS and Q2_K, the same for Q3_K and Q6_K). */
#define FX_AVX512_Q32_WIDE_ACT 4
#define FX_AVX512_K_WIDE_ACT   6

void fx_avx512_tile_q8_0(const struct fx_r16_tile *t);
void fx_avx512_tile_q4_0(const struct fx_r16_tile *t);
void fx_avx512_tile_q4_1(const struct fx_r16_tile *t);
void fx_avx512_tile_q5_0(const struct fx_r16_tile *t);
void fx_avx512_tile_q5_1(const struct fx_r16_tile *t);
void fx_avx512_tile_mxfp4(const struct fx_r16_tile *t);
void fx_avx512_meta_q8_0(const uint8_t *act, int64_t n_blocks, int32_t bias,
                         struct fx_r16_meta *meta);
void fx_avx512_wide_q8_0(const struct fx_r16_tile *t);
void fx_avx512_wide_q4_0(const struct fx_r16_tile *t);
void fx_avx512_wide_q4_1(const struct fx_r16_tile *t);
void fx_avx512_wide_q5_0(const struct fx_r16_tile *t);
void fx_avx512_wide_q5_1(const struct fx_r16_tile *t);
void fx_avx512_wide_mxfp4(const struct fx_r16_tile *t);
void fx_avx512_tile_iq4_nl(const struct fx_r16_tile *t);
void fx_avx512_wide_iq4_nl(const struct fx_r16_tile *t);
void fx_avx512_tile_q2_K(const struct fx_r16_tile *t);
void fx_avx512_tile_q3_K(const struct fx_r16_tile *t);
void fx_avx512_tile_q4_K(const struct fx_r16_tile *t);
void fx_avx512_tile_q5_K(const struct fx_r16_tile *t);
void fx_avx512_tile_q6_K(const struct fx_r16_tile *t);
void fx_avx512_wide_q2_K(const struct fx_r16_tile *t);
void fx_avx512_wide_q3_K(const struct fx_r16_tile *t);
void fx_avx512_wide_q4_K(const struct fx_r16_tile *t);
void fx_avx512_wide_q5_K(const struct fx_r16_tile *t);
void fx_avx512_wide_q6_K(const struct fx_r16_tile *t);
void fx_avx512_tile_iq4_xs(const struct fx_r16_tile *t);
void fx_avx512_wide_iq4_xs(const struct fx_r16_tile *t);

/* KV cache rows (x86_avx512_kv.c), with the shapes of kernels.h's entries. */
void fx_avx512_kv_store(enum fx_type type, const float *src, int64_t dim, void *dst);
void fx_avx512_kv_load_tile(enum fx_type type, const void *tile, int64_t j0, int64_t n, int64_t dim,
                            float *dst, int64_t dst_stride);
void fx_avx512_kv_load(enum fx_type type, const void *src, uint64_t src_stride, int64_t n,
                       int64_t dim, float *dst, int64_t dst_stride);

#endif
