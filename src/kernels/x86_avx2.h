/* Helpers shared by the AVX2 kernel files (x86_avx2*.c), which alone are built with the AVX2
 * -m flags; nothing else may include this header. */
#ifndef FX_KERNELS_X86_AVX2_H
#define FX_KERNELS_X86_AVX2_H

#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "kernels/r16.h"

/* The tile kernels are written once for every tile width and format and specialised by the
 * compiler: `width` and `type` are constants at every call of an always-inline body. */
#define FX_INLINE static inline __attribute__((always_inline))

/* 8 fp16 values at p as f32. */
FX_INLINE __m256 fp16x8(const uint8_t *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

FX_INLINE __m256i load256(const uint8_t *p) {
    return _mm256_loadu_si256((const __m256i *)p);
}

/* 8 bytes at p in the low half of an xmm. */
FX_INLINE __m128i load64(const uint8_t *p) {
    return _mm_loadl_epi64((const __m128i *)p);
}

/* The 4 bytes at p in every 32-bit lane. */
FX_INLINE __m256i bcast4(const uint8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

FX_INLINE float load_f32(const uint8_t *p) {
    float v;
    memcpy(&v, p, 4);
    return v;
}

FX_INLINE uint32_t load_u32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

FX_INLINE __m256i nib_lo(__m256i x) {
    return _mm256_and_si256(x, _mm256_set1_epi8(0x0f));
}

FX_INLINE __m256i nib_hi(__m256i x) {
    return _mm256_and_si256(_mm256_srli_epi16(x, 4), _mm256_set1_epi8(0x0f));
}

/* Sums of 4 products of unsigned u (at most 128) and signed a bytes, per 32-bit lane. */
FX_INLINE __m256i dot_u8i8(__m256i u, __m256i a) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, a), _mm256_set1_epi16(1));
}

/* Byte i is 0xff where bit i of `bits` is set. */
FX_INLINE __m256i expand_bits(uint32_t bits) {
    const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2,
                                            2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i select = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    __m256i b = _mm256_shuffle_epi8(_mm256_set1_epi32((int32_t)bits), spread);
    return _mm256_cmpeq_epi8(_mm256_and_si256(b, select), select);
}

/* x + add in the bytes whose bit is set in `bits`. */
FX_INLINE __m256i add_where(__m256i x, uint32_t bits, int8_t add) {
    return _mm256_add_epi8(x, _mm256_and_si256(expand_bits(bits), _mm256_set1_epi8(add)));
}

/* The first n of 8 lanes, as a maskload/maskstore mask. */
FX_INLINE __m256i lanes8(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* A tile's accumulators for rows 8h..8h+7: zero at the start of a row, else what the previous
 * run left in out. */
FX_INLINE __m256 acc_load(const struct fx_r16_tile *t, int h, int j) {
    if (t->first)
        return _mm256_setzero_ps();
    return _mm256_maskload_ps(t->out + j * t->out_stride + 8 * h, lanes8(t->n_rows - 8 * h));
}

FX_INLINE void acc_store(const struct fx_r16_tile *t, int h, int j, __m256 f) {
    _mm256_maskstore_ps(t->out + j * t->out_stride + 8 * h, lanes8(t->n_rows - 8 * h), f);
}

/* The tile and metadata kernels of the AVX2 table's R16 formats (x86_avx2_r16.c). */
void fx_avx2_tile_q8_0(const struct fx_r16_tile *t);
void fx_avx2_tile_q4_0(const struct fx_r16_tile *t);
void fx_avx2_tile_q4_1(const struct fx_r16_tile *t);
void fx_avx2_tile_q5_0(const struct fx_r16_tile *t);
void fx_avx2_tile_q5_1(const struct fx_r16_tile *t);
void fx_avx2_tile_mxfp4(const struct fx_r16_tile *t);
void fx_avx2_tile_q2_K(const struct fx_r16_tile *t);
void fx_avx2_tile_q3_K(const struct fx_r16_tile *t);
void fx_avx2_tile_q4_K(const struct fx_r16_tile *t);
void fx_avx2_tile_q5_K(const struct fx_r16_tile *t);
void fx_avx2_tile_q6_K(const struct fx_r16_tile *t);
void fx_avx2_tile_iq4_nl(const struct fx_r16_tile *t);
void fx_avx2_tile_iq4_xs(const struct fx_r16_tile *t);
void fx_avx2_meta_q8_0(const uint8_t *act, int64_t n_blocks, int32_t bias,
                       struct fx_r16_meta *meta);

/* Row operations (x86_avx2_rows.c), with the shapes of kernels.h's entries. */
void fx_avx2_rms_norm(float *out, const float *x, const float *w, int64_t n, float eps);
void fx_avx2_softmax(float *x, int64_t n, float sink);
void fx_avx2_silu(float *out, const float *x, int64_t n);
void fx_avx2_swiglu(float *out, const float *g, const float *u, int64_t n);
void fx_avx2_sigmoid(float *out, const float *x, int64_t n);
void fx_avx2_sigmoid_glu(float *out, const float *g, const float *u, int64_t n);
void fx_avx2_l2_norm(float *out, const float *x, int64_t n, float eps);
void fx_avx2_gelu(float *out, const float *x, int64_t n);
void fx_avx2_geglu(float *out, const float *g, const float *u, int64_t n);
void fx_avx2_softcap(float *x, int64_t n, float cap);
void fx_avx2_swiglu_oai(float *out, const float *g, const float *u, int64_t n, float alpha,
                        float limit);
void fx_avx2_add(float *out, const float *a, const float *b, int64_t n);
void fx_avx2_rope(float *x, int64_t n_heads, int64_t head_stride, int32_t n_dims,
                  enum fx_rope_mode mode, const float *cs);
void fx_avx2_scale(float *out, const float *x, float s, int64_t n);
void fx_avx2_axpy(float *y, const float *x, float a, int64_t n);
int64_t fx_avx2_argmax(const float *x, int64_t n);
/* The chunked delta rule (x86_avx2_ssm.c). */
void fx_avx2_delta_rows(const struct fx_delta_state *st, int32_t r0, int32_t n, const float *q,
                        const float *k, const float *v, int64_t in_stride, const float *g,
                        const float *beta, float scale, float *out, int64_t out_stride, float *work,
                        int64_t d);

/* The Q8_0 activation quantizer (x86_avx2.c; bit-identical to fx_q8_0_quantize_act), and the
 * KV cache rows that use it (x86_avx2_kv.c). */
void fx_avx2_quantize_act_q8_0(const float *restrict src, void *restrict dst, int64_t n);
void fx_avx2_kv_store(enum fx_type type, const float *src, int64_t dim, void *dst);
void fx_avx2_kv_load(enum fx_type type, const void *src, uint64_t src_stride, int64_t n,
                     int64_t dim, float *dst, int64_t dst_stride);

#endif
