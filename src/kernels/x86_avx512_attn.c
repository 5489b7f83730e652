/* Attention scores with AVX-512: 16 keys at a time, each key's dot product accumulated in its own
 * register (a multiply, then fused multiply-adds over the head's 16-float chunks in order), then
 * the 16 registers reduced together by a transposing tree. Every key goes through the same
 * operations whatever its place among the 16 (the tree adds the same lanes in the same order for
 * each register), and missing keys of a last group are zeros that never mix with the others, so a
 * key's score does not depend on the range it is computed in (the kernels.h contract). */
#include <immintrin.h>

#include "kernels/x86_avx512_attn.h"

/* Lane sums of 16 registers: lane j of the result is the sum of r[j]'s lanes. */
static inline __m512 hsum_16x16(const __m512 *r) {
    __m512 s[8], t[4], w[2];
    for (int i = 0; i < 8; i++) /* [r 128-bit blocks 0,1 | r' blocks 0,1] + [blocks 2,3 | ...] */
        s[i] = _mm512_add_ps(_mm512_shuffle_f32x4(r[2 * i], r[2 * i + 1], 0x44),
                             _mm512_shuffle_f32x4(r[2 * i], r[2 * i + 1], 0xee));
    for (int i = 0; i < 4; i++) /* one key per 128-bit block */
        t[i] = _mm512_add_ps(_mm512_shuffle_f32x4(s[2 * i], s[2 * i + 1], 0x88),
                             _mm512_shuffle_f32x4(s[2 * i], s[2 * i + 1], 0xdd));
    for (int i = 0; i < 2; i++)
        w[i] = _mm512_add_ps(_mm512_unpacklo_ps(t[2 * i], t[2 * i + 1]),
                             _mm512_unpackhi_ps(t[2 * i], t[2 * i + 1]));
    __m512 sum =
        _mm512_add_ps(_mm512_shuffle_ps(w[0], w[1], 0x44), _mm512_shuffle_ps(w[0], w[1], 0xee));
    /* Lane 4b + p now holds key b + 4p; put key j in lane j. */
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    return _mm512_permutexvar_ps(order, sum);
}

void fx_attn_scores_avx512(float *out, const float *q, const float *keys, int64_t key_stride,
                           int64_t n_keys, int64_t dim, float scale) {
    int64_t n_chunks = (dim + 15) / 16;
    __mmask16 last = (__mmask16)(dim % 16 ? (1u << (dim % 16)) - 1 : 0xffff);
    const __m512 vscale = _mm512_set1_ps(scale);
    for (int64_t j0 = 0; j0 < n_keys; j0 += 16) {
        int64_t nj = n_keys - j0 < 16 ? n_keys - j0 : 16;
        __m512 acc[16];
        for (int jj = 0; jj < 16; jj++)
            acc[jj] = _mm512_setzero_ps();
        for (int64_t c = 0; c < n_chunks; c++) {
            __mmask16 m = c == n_chunks - 1 ? last : 0xffff;
            __m512 qc = _mm512_maskz_loadu_ps(m, q + c * 16);
            for (int jj = 0; jj < nj; jj++) {
                __m512 kc = _mm512_maskz_loadu_ps(m, keys + (j0 + jj) * key_stride + c * 16);
                acc[jj] = _mm512_fmadd_ps(qc, kc, acc[jj]);
            }
        }
        __m512 scores = _mm512_mul_ps(hsum_16x16(acc), vscale);
        _mm512_mask_storeu_ps(out + j0, (__mmask16)((1u << nj) - 1), scores);
    }
}

/* The head's output stays in registers (up to 256 floats, 16 zmm) while the values stream by;
 * longer heads go through in 256-float slices, which does not change any element's sum. */
void fx_attn_values_avx512(float *out, const float *p, const float *values, int64_t value_stride,
                           int64_t n, int64_t dim) {
    for (int64_t d0 = 0; d0 < dim; d0 += 256) {
        int64_t n_chunks = (dim - d0 + 15) / 16 < 16 ? (dim - d0 + 15) / 16 : 16;
        int64_t rest = dim - d0 - (n_chunks - 1) * 16;
        __mmask16 last = (__mmask16)(rest >= 16 ? 0xffff : (1u << rest) - 1);
        __m512 acc[16];
        for (int64_t c = 0; c < n_chunks; c++)
            acc[c] = _mm512_maskz_loadu_ps(c == n_chunks - 1 ? last : 0xffff, out + d0 + c * 16);
        for (int64_t j = 0; j < n; j++) {
            __m512 pj = _mm512_set1_ps(p[j]);
            const float *v = values + j * value_stride + d0;
            for (int64_t c = 0; c < n_chunks; c++)
                acc[c] = _mm512_fmadd_ps(
                    pj, _mm512_maskz_loadu_ps(c == n_chunks - 1 ? last : 0xffff, v + c * 16),
                    acc[c]);
        }
        for (int64_t c = 0; c < n_chunks; c++)
            _mm512_mask_storeu_ps(out + d0 + c * 16, c == n_chunks - 1 ? last : 0xffff, acc[c]);
    }
}
