/* A run's key rows straight from the cache into the key-lane layout of x86_avx512_attn.c, key
 * tiles (kernels.h: element i of 16 keys in key order, as f32, halves, or q8_0 codes and fp16
 * scales), for runs whose cache does not keep its keys as tiles.
 *
 * Transposing before widening moves fewer bytes through the shuffles: 16 keys x 32 elements are
 * 16 registers of f16 or 8 of q8_0 codes, against 32 of f32, and neither needs a row-major f32
 * tile in between. Each transposition ends with element i of 16 keys in key order, widened as
 * kv_load widens (vcvtph2ps; (float)q * d, exact; both by the scores), so the scores see the
 * same floats as transposing kv_load's rows would give. */
#include "kernels/x86_avx512.h"

#include "core/error.h"
#include "kernels/types.h"
#include "kernels/x86_avx512_attn.h"

#define FORCE_INLINE static inline __attribute__((always_inline))

FORCE_INLINE const uint8_t *row_at(const struct fx_kv_run *r, int64_t j) {
    return r->grp[j / 16] + (uint64_t)(j % 16) * r->stride;
}

/* f32 keys, 16 elements a block: 16 rows of 16 in, 16 columns out (64 shuffles). kt: the
 * block's tile. */
static void block_f32(float *kt, const struct fx_kv_run *keys, int64_t j, int n, int64_t dim,
                      const struct fx_avx512_ahead *a) {
    for (int64_t i0 = 0; i0 < dim; i0 += 16) {
        fx_avx512_ahead_part(a, i0 / 16, dim / 16);
        __m512 r[16];
#pragma GCC unroll 16
        for (int jj = 0; jj < 16; jj++)
            r[jj] = jj < n ? _mm512_loadu_ps((const float *)row_at(keys, j + jj) + i0)
                           : _mm512_setzero_ps();
        transpose16(r);
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++)
            _mm512_store_ps(kt + (i0 + i) * 16, r[i]);
    }
}

/* Within each 128-bit lane, an 8 x 8 transpose of 16-bit elements: x[k] lane L held elements
 * 0..7 of row k; x[t] lane L now holds element t of rows 0..7 in order (24 shuffles). */
FORCE_INLINE void transpose8_epi16(__m512i x[8]) {
    __m512i a[8], b[8];
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        a[2 * k] = _mm512_unpacklo_epi16(x[2 * k], x[2 * k + 1]);     /* elements 0..3 */
        a[2 * k + 1] = _mm512_unpackhi_epi16(x[2 * k], x[2 * k + 1]); /* 4..7 */
    }
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) { /* rows 0..3, then 4..7 */
        __m512i *s = a + 4 * h, *d = b + 4 * h;
        d[0] = _mm512_unpacklo_epi32(s[0], s[2]); /* elements 0, 1 */
        d[1] = _mm512_unpackhi_epi32(s[0], s[2]); /* 2, 3 */
        d[2] = _mm512_unpacklo_epi32(s[1], s[3]); /* 4, 5 */
        d[3] = _mm512_unpackhi_epi32(s[1], s[3]); /* 6, 7 */
    }
#pragma GCC unroll 4
    for (int t = 0; t < 4; t++) {
        x[2 * t] = _mm512_unpacklo_epi64(b[t], b[t + 4]);
        x[2 * t + 1] = _mm512_unpackhi_epi64(b[t], b[t + 4]);
    }
}

/* f16 keys, 32 elements a block: a row's 32 halves are one register (lane L: elements 8 L ..
 * 8 L + 7); the in-lane transposes of keys 0..7 and 8..15, then one two-source permute per
 * register pairs their lanes, so that each 256-bit half is one element of 16 keys (64
 * shuffles). They stay halves in the block's tile kt (uint16_t [dim][16]): the scores widen them
 * as they load them, which costs no more than a load of f32 and stores half the bytes. */
static void block_f16(uint16_t *kt, const struct fx_kv_run *keys, int64_t j, int n, int64_t dim,
                      const struct fx_avx512_ahead *a) {
    const __m512i lo = _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11);
    const __m512i hi = _mm512_setr_epi64(4, 5, 12, 13, 6, 7, 14, 15);
    for (int64_t i0 = 0; i0 < dim; i0 += 32) {
        fx_avx512_ahead_part(a, i0 / 32, dim / 32);
        __m512i r[16];
#pragma GCC unroll 16
        for (int jj = 0; jj < 16; jj++)
            r[jj] = jj < n ? load512(row_at(keys, j + jj) + 2 * i0) : _mm512_setzero_si512();
        transpose8_epi16(r);
        transpose8_epi16(r + 8);
#pragma GCC unroll 8
        for (int t = 0; t < 8; t++) {
            __m512i e0 = _mm512_permutex2var_epi64(r[t], lo, r[t + 8]); /* elements t, 8 + t */
            __m512i e1 = _mm512_permutex2var_epi64(r[t], hi, r[t + 8]); /* 16 + t, 24 + t */
            uint16_t *k = kt + (i0 + t) * 16;
            _mm256_store_si256((__m256i *)k, _mm512_castsi512_si256(e0));
            _mm256_store_si256((__m256i *)(k + 8 * 16), _mm512_extracti64x4_epi64(e0, 1));
            _mm256_store_si256((__m256i *)(k + 16 * 16), _mm512_castsi512_si256(e1));
            _mm256_store_si256((__m256i *)(k + 24 * 16), _mm512_extracti64x4_epi64(e1, 1));
        }
    }
}

/* q8_0 keys, one block of 32 elements at a time: keys m and m + 8 share a register (lanes:
 * elements 0..15 and 16..31 of key m, then of key m + 8); an in-lane 8 x 16 byte transpose
 * leaves two elements of 8 keys per lane, and one two-source permute per register gathers the
 * codes of four consecutive elements of 16 keys (32 shuffles), stored as they are: the scores
 * widen them and multiply by the keys' scales, which go beside them as fp16. blk: the block's
 * tile, codes [dim][16] then scales [dim / FX_QK][16]. */
static void block_q8_0(int8_t *blk, const struct fx_kv_run *keys, int64_t j, int n, int64_t dim,
                       const struct fx_avx512_ahead *ah) {
    /* the qwords of unpacklo_epi32 (y0) and unpackhi_epi32 (y1) that hold elements 4 t .. 4 t + 3
     * of the 16 keys, then 16 + 4 t .. 16 + 4 t + 3 */
    const __m512i first = _mm512_setr_epi64(0, 4, 1, 5, 8, 12, 9, 13);
    const __m512i second = _mm512_setr_epi64(2, 6, 3, 7, 10, 14, 11, 15);
    const uint64_t bs = sizeof(struct fx_block_q8_0);
    for (int64_t qb = 0; qb < dim / FX_QK; qb++) {
        fx_avx512_ahead_part(ah, qb, dim / FX_QK);
        uint16_t *d = (uint16_t *)(blk + dim * 16) + qb * 16; /* the 16 keys' scales */
        __m512i x[8];
#pragma GCC unroll 8
        for (int m = 0; m < 8; m++) {
            const uint8_t *a = row_at(keys, j + m) + qb * bs,
                          *b = row_at(keys, j + m + 8) + qb * bs;
            __m256i ca = _mm256_setzero_si256(), cb = _mm256_setzero_si256();
            d[m] = d[m + 8] = 0;
            if (m < n) {
                ca = _mm256_loadu_si256((const __m256i *)(a + 2));
                memcpy(&d[m], a, 2);
            }
            if (m + 8 < n) {
                cb = _mm256_loadu_si256((const __m256i *)(b + 2));
                memcpy(&d[m + 8], b, 2);
            }
            x[m] = _mm512_inserti64x4(_mm512_castsi256_si512(ca), cb, 1);
        }
        __m512i a[8], b[8];
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            a[2 * k] = _mm512_unpacklo_epi8(x[2 * k], x[2 * k + 1]);     /* elements 0..7 */
            a[2 * k + 1] = _mm512_unpackhi_epi8(x[2 * k], x[2 * k + 1]); /* 8..15 */
        }
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) { /* rows 0..3, then 4..7 */
            __m512i *s = a + 4 * h, *o = b + 4 * h;
            o[0] = _mm512_unpacklo_epi16(s[0], s[2]); /* elements 0..3 */
            o[1] = _mm512_unpackhi_epi16(s[0], s[2]); /* 4..7 */
            o[2] = _mm512_unpacklo_epi16(s[1], s[3]); /* 8..11 */
            o[3] = _mm512_unpackhi_epi16(s[1], s[3]); /* 12..15 */
        }
        int8_t *codes = blk + qb * FX_QK * 16;
#pragma GCC unroll 4
        for (int t = 0; t < 4; t++) {
            __m512i y0 = _mm512_unpacklo_epi32(b[t], b[t + 4]); /* elements 4 t, 4 t + 1 */
            __m512i y1 = _mm512_unpackhi_epi32(b[t], b[t + 4]); /* 4 t + 2, 4 t + 3 */
            _mm512_store_si512(codes + 4 * t * 16, _mm512_permutex2var_epi64(y0, first, y1));
            _mm512_store_si512(codes + (16 + 4 * t) * 16,
                               _mm512_permutex2var_epi64(y0, second, y1));
        }
    }
}

void fx_avx512_attn_keys_t(float *kt, const struct fx_kv_run *keys, const struct fx_kv_run *values,
                           int64_t dim, int64_t b0, int64_t b1, int64_t j1) {
    const int nb = (int)(b1 - b0 + 1), ng = FX_ATTN_RUN / 16;
    for (int64_t b = b0; b <= b1; b++) {
        int n = j1 - 16 * b + 1 < 16 ? (int)(j1 - 16 * b + 1) : 16, k = (int)(b - b0);
        /* the next run's groups shared out over this run's blocks */
        struct fx_avx512_ahead a = {{&keys->next, &values->next}, ng * k / nb, ng * (k + 1) / nb};
        uint8_t *tile = (uint8_t *)kt + b * fx_avx512_tile_bytes(keys->type, dim);
        switch (keys->type) {
        case FX_TYPE_F32:
            block_f32((float *)tile, keys, 16 * b, n, dim, &a);
            break;
        case FX_TYPE_F16:
            block_f16((uint16_t *)tile, keys, 16 * b, n, dim, &a);
            break;
        case FX_TYPE_Q8_0:
            block_q8_0((int8_t *)tile, keys, 16 * b, n, dim, &a);
            break;
        default:
            FX_ASSERT(!"not a KV cache type");
        }
    }
}
