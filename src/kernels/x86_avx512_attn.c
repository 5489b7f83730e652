/* Attention kernels with AVX-512.
 *
 * Scores: 16 keys at a time, each key's dot product accumulated in its own register (fused
 * multiply-adds over the head's 16-float chunks in order), then the 16 registers reduced
 * together by a transposing tree. Every key goes through the same operations whatever its place
 * among the 16 (the tree adds the same lanes in the same order for each register), and missing
 * keys of a last group are zeros that never mix with the others, so a key's score does not depend
 * on the range it is computed in (the kernels.h contract).
 *
 * Values: the head's output stays in registers while the value rows stream by, one fused
 * multiply-add per key and chunk, keys in order.
 *
 * The common head sizes (64, 128) get copies with the chunk count known at compile time, so
 * that the accumulators live in registers; other sizes take the same code with a run-time count. */
#include <immintrin.h>
#include <stdbool.h>

#include "kernels/x86_avx512_attn.h"

#define FORCE_INLINE static inline __attribute__((always_inline))

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

/* Mask of the c-th 16-float chunk of a dim-float row. */
FORCE_INLINE __mmask16 chunk_mask(int64_t dim, int64_t c) {
    int64_t rest = dim - c * 16;
    return (__mmask16)(rest >= 16 ? 0xffff : (1u << rest) - 1);
}

/* Scores of 16 keys starting at keys (nj of them valid; the others load as zeros). With
 * full = true every key is valid and every chunk whole (dim a multiple of 16): no masks. */
FORCE_INLINE __m512 scores_16(const __m512 *qc, const float *keys, int64_t stride, int64_t dim,
                              int64_t n_chunks, int64_t nj, bool full) {
    __m512 acc[16];
#pragma GCC unroll 16
    for (int jj = 0; jj < 16; jj++)
        acc[jj] = _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int64_t c = 0; c < n_chunks; c++) {
        __mmask16 m = chunk_mask(dim, c);
#pragma GCC unroll 16
        for (int jj = 0; jj < 16; jj++) {
            const float *kc = keys + jj * stride + c * 16;
            __m512 k = full ? _mm512_loadu_ps(kc) : _mm512_maskz_loadu_ps(jj < nj ? m : 0, kc);
            acc[jj] = _mm512_fmadd_ps(qc[c], k, acc[jj]);
        }
    }
    return hsum_16x16(acc);
}

FORCE_INLINE void scores_kernel(float *out, const float *q, const float *keys, int64_t stride,
                                int64_t n_keys, int64_t dim, float scale, int64_t n_chunks) {
    const __m512 vscale = _mm512_set1_ps(scale);
    __m512 qc[16];
#pragma GCC unroll 16
    for (int64_t c = 0; c < n_chunks; c++)
        qc[c] = _mm512_maskz_loadu_ps(chunk_mask(dim, c), q + c * 16);
    int64_t j0 = 0;
    if (dim % 16 == 0)
        for (; j0 + 16 <= n_keys; j0 += 16)
            _mm512_storeu_ps(out + j0, _mm512_mul_ps(scores_16(qc, keys + j0 * stride, stride, dim,
                                                               n_chunks, 16, true),
                                                     vscale));
    for (; j0 < n_keys; j0 += 16) {
        int64_t nj = n_keys - j0 < 16 ? n_keys - j0 : 16;
        __m512 sc = scores_16(qc, keys + j0 * stride, stride, dim, n_chunks, nj, false);
        _mm512_mask_storeu_ps(out + j0, (__mmask16)((1u << nj) - 1), _mm512_mul_ps(sc, vscale));
    }
}

void fx_attn_scores_avx512(float *out, const float *q, const float *keys, int64_t key_stride,
                           int64_t n_keys, int64_t dim, float scale) {
    if (dim == 64)
        scores_kernel(out, q, keys, key_stride, n_keys, 64, scale, 4);
    else if (dim == 128)
        scores_kernel(out, q, keys, key_stride, n_keys, 128, scale, 8);
    else
        scores_kernel(out, q, keys, key_stride, n_keys, dim, scale, (dim + 15) / 16);
}

/* n_out (<= 4) outputs of one slice of n_chunks (<= 4) chunks, or one output of up to 16
 * chunks: every accumulator in a register, the outputs' chains independent of each other. */
FORCE_INLINE void values_kernel(float *out, int64_t out_stride, const float *p, int64_t p_stride,
                                int64_t n_out, const float *values, int64_t stride, int64_t n,
                                int64_t dim, int64_t n_chunks) {
    __m512 acc[4][16];
#pragma GCC unroll 4
    for (int o = 0; o < 4; o++)
#pragma GCC unroll 16
        for (int c = 0; c < 16; c++)
            acc[o][c] = _mm512_setzero_ps();
#pragma GCC unroll 4
    for (int64_t o = 0; o < n_out; o++)
#pragma GCC unroll 16
        for (int64_t c = 0; c < n_chunks; c++)
            acc[o][c] = _mm512_maskz_loadu_ps(chunk_mask(dim, c), out + o * out_stride + c * 16);
    for (int64_t j = 0; j < n; j++) {
        const float *v = values + j * stride;
#pragma GCC unroll 16
        for (int64_t c = 0; c < n_chunks; c++) {
            __m512 vc = _mm512_maskz_loadu_ps(chunk_mask(dim, c), v + c * 16);
#pragma GCC unroll 4
            for (int64_t o = 0; o < n_out; o++)
                acc[o][c] = _mm512_fmadd_ps(_mm512_set1_ps(p[o * p_stride + j]), vc, acc[o][c]);
        }
    }
#pragma GCC unroll 4
    for (int64_t o = 0; o < n_out; o++)
#pragma GCC unroll 16
        for (int64_t c = 0; c < n_chunks; c++)
            _mm512_mask_storeu_ps(out + o * out_stride + c * 16, chunk_mask(dim, c), acc[o][c]);
}

void fx_attn_values_avx512(float *out, int64_t out_stride, const float *p, int64_t p_stride,
                           int64_t n_out, const float *values, int64_t value_stride, int64_t n,
                           int64_t dim) {
    for (int64_t o = 0; o < n_out; o += 4) {
        int64_t no = n_out - o < 4 ? n_out - o : 4;
        float *oo = out + o * out_stride;
        const float *po = p + o * p_stride;
        /* Slices of 64 floats (4 chunks) for up to 4 outputs at once; the compile-time shapes
         * cover head size 64 with 1..4 outputs. */
        for (int64_t d0 = 0; d0 < dim; d0 += 64) {
            int64_t slice = dim - d0 < 64 ? dim - d0 : 64;
            if (slice == 64 && no == 4)
                values_kernel(oo + d0, out_stride, po, p_stride, 4, values + d0, value_stride, n,
                              64, 4);
            else if (slice == 64 && no == 3)
                values_kernel(oo + d0, out_stride, po, p_stride, 3, values + d0, value_stride, n,
                              64, 4);
            else if (slice == 64 && no == 2)
                values_kernel(oo + d0, out_stride, po, p_stride, 2, values + d0, value_stride, n,
                              64, 4);
            else if (slice == 64)
                values_kernel(oo + d0, out_stride, po, p_stride, 1, values + d0, value_stride, n,
                              64, 4);
            else
                values_kernel(oo + d0, out_stride, po, p_stride, no, values + d0, value_stride, n,
                              slice, (slice + 15) / 16);
        }
    }
}
