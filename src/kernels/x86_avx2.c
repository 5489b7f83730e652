/* AVX2 + FMA + F16C kernels. Built with -mavx2 -mfma -mf16c -mbmi2 and only called after
 * dispatch.c has seen those features. This table fills only what it speeds up; the rest comes
 * from the generic table.
 *
 * Quantized formats: the R16 tiles of x86_avx2_r16.c through the shared driver of r16.c, for
 * matmul and vec_dot alike (the same fixed float sequence as the AVX-512 table). Float formats:
 * one 8-lane f32 accumulator per (weight row, activation row) pair, 8 elements at a time in
 * order, the last 1..7 zero-padded, then a fixed reduction. The activation quantizers produce
 * exactly the generic bytes (kernels.h). */
#if defined(__x86_64__)

#include "kernels/x86_avx2.h"

#include <math.h>

#include "kernels/float_entry.h"
#include "kernels/generic.h"

/* ---- small helpers ------------------------------------------------------------------------- */

static inline float hsum_f32x8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline float hmax_f32x8(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

static inline int32_t hsum_i32x8(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

/* 32 int32 (each within -127..127) to 32 int8 in order. The packs work per 128-bit lane, so
 * the result comes out in lane order 0 4 1 5 2 6 3 7 of 32-bit groups, which the permute puts
 * back. */
static inline __m256i pack_i32x32(const __m256i q[4]) {
    __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    return _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* ---- float formats ------------------------------------------------------------------------- */

/* 8 weights from element i of a row as f32; only the first `n` (1..8) are read, the rest are 0. */
FX_INLINE __m256 float_w(enum fx_type type, const void *row, int64_t i, int n) {
    if (type == FX_TYPE_F32)
        return n == 8 ? _mm256_loadu_ps((const float *)row + i)
                      : _mm256_maskload_ps((const float *)row + i, lanes8(n));
    uint16_t tail[8] = {0};
    const uint16_t *h = (const uint16_t *)row + i;
    if (n < 8) {
        memcpy(tail, h, (size_t)n * 2);
        h = tail;
    }
    __m128i x = _mm_loadu_si128((const __m128i *)h);
    if (type == FX_TYPE_F16)
        return _mm256_cvtph_ps(x);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(x), 16));
}

FX_INLINE __m256 float_a(const float *a, int64_t i, int n) {
    return n == 8 ? _mm256_loadu_ps(a + i) : _mm256_maskload_ps(a + i, lanes8(n));
}

/* rows x width pairs: out[j * out_stride + r] over n elements (see x86_avx512.c). */
FX_INLINE void float_tile(enum fx_type type, int n_rows, int width, const uint8_t *row0,
                          uint64_t row_bytes, const uint8_t *act, uint64_t act_stride, int64_t n,
                          float *out, int64_t out_stride) {
    __m256 acc[4][2];
#pragma GCC unroll 16
    for (int r = 0; r < n_rows; r++)
#pragma GCC unroll 16
        for (int j = 0; j < width; j++)
            acc[r][j] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n; i += 8) {
        int len = n - i < 8 ? (int)(n - i) : 8;
        __m256 w[4];
#pragma GCC unroll 16
        for (int r = 0; r < n_rows; r++)
            w[r] = float_w(type, row0 + (uint64_t)r * row_bytes, i, len);
#pragma GCC unroll 16
        for (int j = 0; j < width; j++) {
            __m256 a = float_a((const float *)(act + (uint64_t)j * act_stride), i, len);
#pragma GCC unroll 16
            for (int r = 0; r < n_rows; r++)
                acc[r][j] = _mm256_fmadd_ps(w[r], a, acc[r][j]);
        }
    }
#pragma GCC unroll 16
    for (int r = 0; r < n_rows; r++)
#pragma GCC unroll 16
        for (int j = 0; j < width; j++)
            out[j * out_stride + r] = hsum_f32x8(acc[r][j]);
}

/* Rows in blocks that stay in L2 while every activation row passes; 4 rows by 2 or 1
 * activation rows, left-over rows one pair at a time (each pair's sequence is the same). */
FX_INLINE void float_matmul(enum fx_type type, const struct fx_mat *w, int64_t r0, int64_t r1,
                            const void *act, uint64_t act_stride, int64_t n_act, float *out,
                            int64_t out_stride) {
    const uint8_t *data = w->data;
    int64_t block = (int64_t)(256 * 1024 / (w->row_bytes ? w->row_bytes : 1));
    block = block < 4 ? 4 : block > 64 ? 64 : block & ~(int64_t)3;
    for (int64_t b0 = r0; b0 < r1; b0 += block) {
        int64_t b1 = b0 + block < r1 ? b0 + block : r1;
        for (int64_t j = 0; j < n_act;) {
            int width = n_act - j >= 2 ? 2 : 1;
            const uint8_t *a = (const uint8_t *)act + (uint64_t)j * act_stride;
            int64_t r = b0;
            for (; r + 4 <= b1; r += 4) {
                if (width == 2)
                    float_tile(type, 4, 2, data + (uint64_t)r * w->row_bytes, w->row_bytes, a,
                               act_stride, w->ne0, out + j * out_stride + r, out_stride);
                else
                    float_tile(type, 4, 1, data + (uint64_t)r * w->row_bytes, w->row_bytes, a,
                               act_stride, w->ne0, out + j * out_stride + r, out_stride);
            }
            for (; r < b1; r++)
                for (int jj = 0; jj < width; jj++)
                    float_tile(type, 1, 1, data + (uint64_t)r * w->row_bytes, 0,
                               a + (uint64_t)jj * act_stride, 0, w->ne0,
                               out + (j + jj) * out_stride + r, 0);
            j += width;
        }
    }
}

FX_FLOAT_ENTRY_POINTS

/* ---- activation quantizers ----------------------------------------------------------------- */

/* One block of 32 as Q8_0 and Q8_1 activations (kernels.h): codes into qs, the sum of the codes
 * into *sum; returns d = amax / 127. Bit-identical to the generic encoder: the same amax (max is
 * exact; NaN is skipped as fmaxf does), the same product, the same round-half-even. */
static float quantize_block_32(const float *src, int8_t *qs, int32_t *sum) {
    const __m256 sign_bit = _mm256_set1_ps(-0.0f);
    __m256 v[4];
    __m256 amax = _mm256_setzero_ps();
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        v[k] = _mm256_loadu_ps(src + 8 * k);
        amax = _mm256_max_ps(_mm256_andnot_ps(sign_bit, v[k]), amax);
    }
    float max = hmax_f32x8(amax);
    __m256 id = _mm256_set1_ps(max != 0.0f ? 127.0f / max : 0.0f);
    __m256i q[4];
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        __m256 c = _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(v[k], id), _mm256_set1_ps(-127.0f)),
                                 _mm256_set1_ps(127.0f));
        q[k] = _mm256_cvtps_epi32(c);
    }
    *sum = hsum_i32x8(_mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3])));
    _mm256_storeu_si256((__m256i *)qs, pack_i32x32(q));
    return max / 127.0f;
}

void fx_avx2_quantize_act_q8_0(const float *restrict src, void *restrict dst, int64_t n) {
    struct fx_block_q8_0 *b = dst;
    for (int64_t i = 0; i < n / FX_QK; i++, b++, src += FX_QK) {
        int32_t sum;
        b->d = _cvtss_sh(quantize_block_32(src, b->qs, &sum), _MM_FROUND_TO_NEAREST_INT);
    }
}

static void quantize_act_q8_1(const float *restrict src, void *restrict dst, int64_t n) {
    struct fx_block_q8_1 *b = dst;
    for (int64_t i = 0; i < n / FX_QK; i++, b++, src += FX_QK) {
        int32_t sum;
        float d = quantize_block_32(src, b->qs, &sum);
        b->d = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
        b->s = _cvtss_sh(d * (float)sum, _MM_FROUND_TO_NEAREST_INT);
    }
}

/* Q8_K: the value of largest magnitude (the first of equals) maps to -127; bit-identical to
 * fx_q8_K_quantize_act for finite input. */
static void quantize_act_q8_K(const float *restrict src, void *restrict dst, int64_t n) {
    struct fx_block_q8_K *b = dst;
    const __m256 sign_bit = _mm256_set1_ps(-0.0f);
    for (int64_t i = 0; i < n / FX_QK_K; i++, b++, src += FX_QK_K) {
        __m256 amax = _mm256_setzero_ps();
        for (int k = 0; k < FX_QK_K; k += 8)
            amax = _mm256_max_ps(_mm256_andnot_ps(sign_bit, _mm256_loadu_ps(src + k)), amax);
        float am = hmax_f32x8(amax);
        if (!(am > 0.0f)) {
            memset(b, 0, sizeof *b);
            continue;
        }
        float max = 0.0f; /* the first element whose magnitude is am */
        for (int k = 0; k < FX_QK_K; k += 8) {
            __m256 hit = _mm256_cmp_ps(_mm256_andnot_ps(sign_bit, _mm256_loadu_ps(src + k)),
                                       _mm256_set1_ps(am), _CMP_EQ_OQ);
            int bits = _mm256_movemask_ps(hit);
            if (bits) {
                max = src[k + __builtin_ctz((unsigned)bits)];
                break;
            }
        }
        float iscale = -127.f / max;
        __m256 is = _mm256_set1_ps(iscale);
        for (int k = 0; k < FX_QK_K; k += 32) {
            __m256i q[4];
#pragma GCC unroll 4
            for (int l = 0; l < 4; l++) {
                __m256i v = _mm256_cvtps_epi32(_mm256_mul_ps(is, _mm256_loadu_ps(src + k + 8 * l)));
                q[l] = _mm256_min_epi32(_mm256_max_epi32(v, _mm256_set1_epi32(-127)),
                                        _mm256_set1_epi32(127));
            }
            /* sums of 16: lanes 0..7 of q[0] + q[1], then q[2] + q[3] */
            b->bsums[k / 16] = (int16_t)hsum_i32x8(_mm256_add_epi32(q[0], q[1]));
            b->bsums[k / 16 + 1] = (int16_t)hsum_i32x8(_mm256_add_epi32(q[2], q[3]));
            _mm256_storeu_si256((__m256i *)(b->qs + k), pack_i32x32(q));
        }
        b->d = 1 / iscale;
    }
}

/* ---- quantized formats: R16 ---------------------------------------------------------------- */

/* Q8_0 and IQ4_NL weights are summed as signed bytes here (x86_avx2_r16.c): their tiles need
 * only the activation scales. */
static void meta_scale_q8_0(const uint8_t *act, int64_t n_blocks, int32_t bias,
                            struct fx_r16_meta *meta) {
    (void)bias;
    for (int64_t b = 0; b < n_blocks; b++, act += sizeof(struct fx_block_q8_0)) {
        uint16_t d;
        memcpy(&d, act, 2);
        meta[b] = (struct fx_r16_meta){.d = _cvtsh_ss(d)};
    }
}

static const struct fx_r16_kernel r16[FX_TYPE_COUNT] = {
    [FX_TYPE_Q8_0] = {FX_TYPE_Q8_0, fx_avx2_tile_q8_0, meta_scale_q8_0},
    [FX_TYPE_Q4_0] = {FX_TYPE_Q4_0, fx_avx2_tile_q4_0, fx_avx2_meta_q8_0},
    [FX_TYPE_Q4_1] = {FX_TYPE_Q4_1, fx_avx2_tile_q4_1, fx_r16_meta_q8_1},
    [FX_TYPE_Q5_0] = {FX_TYPE_Q5_0, fx_avx2_tile_q5_0, fx_avx2_meta_q8_0},
    [FX_TYPE_Q5_1] = {FX_TYPE_Q5_1, fx_avx2_tile_q5_1, fx_r16_meta_q8_1},
    [FX_TYPE_MXFP4] = {FX_TYPE_MXFP4, fx_avx2_tile_mxfp4, fx_avx2_meta_q8_0},
    [FX_TYPE_Q2_K] = {FX_TYPE_Q2_K, fx_avx2_tile_q2_K, NULL},
    [FX_TYPE_Q3_K] = {FX_TYPE_Q3_K, fx_avx2_tile_q3_K, NULL},
    [FX_TYPE_Q4_K] = {FX_TYPE_Q4_K, fx_avx2_tile_q4_K, NULL},
    [FX_TYPE_Q5_K] = {FX_TYPE_Q5_K, fx_avx2_tile_q5_K, NULL},
    [FX_TYPE_Q6_K] = {FX_TYPE_Q6_K, fx_avx2_tile_q6_K, NULL},
    [FX_TYPE_IQ4_NL] = {FX_TYPE_IQ4_NL, fx_avx2_tile_iq4_nl, meta_scale_q8_0},
    [FX_TYPE_IQ4_XS] = {FX_TYPE_IQ4_XS, fx_avx2_tile_iq4_xs, NULL},
};

FX_R16_ENTRY_POINTS(r16)

const struct fx_kernels fx_kernels_avx2_part = {
    .name = "avx2",
    .types =
        {
            [FX_TYPE_F32] = {.vec_dot = vec_dot_f32, .matmul = matmul_f32},
            [FX_TYPE_F16] = {.vec_dot = vec_dot_f16, .matmul = matmul_f16},
            [FX_TYPE_BF16] = {.vec_dot = vec_dot_bf16, .matmul = matmul_bf16},
            [FX_TYPE_Q8_0] = FX_R16_Q8_0_OPS(fx_avx2_quantize_act_q8_0),
            [FX_TYPE_Q8_1] = {.quantize_act = quantize_act_q8_1},
            [FX_TYPE_Q8_K] = {.quantize_act = quantize_act_q8_K},
            FX_R16_TYPES_BUT_Q8_0,
        },
    .rms_norm = fx_avx2_rms_norm,
    .softmax = fx_avx2_softmax,
    .softcap = fx_avx2_softcap,
    .l2_norm = fx_avx2_l2_norm,
    .act = {[FX_ACT_SILU] = fx_avx2_silu,
            [FX_ACT_GELU] = fx_avx2_gelu,
            [FX_ACT_SIGMOID] = fx_avx2_sigmoid},
    .glu = {[FX_ACT_SILU] = fx_avx2_swiglu,
            [FX_ACT_GELU] = fx_avx2_geglu,
            [FX_ACT_SIGMOID] = fx_avx2_sigmoid_glu},
    .swiglu_oai = fx_avx2_swiglu_oai,
    .add = fx_avx2_add,
    .rope = fx_avx2_rope,
    .scale = fx_avx2_scale,
    .axpy = fx_avx2_axpy,
    .argmax = fx_avx2_argmax,
    .kv_store = fx_avx2_kv_store,
    .kv_load = fx_avx2_kv_load,
    .delta_rows = fx_avx2_delta_rows,
};

#endif
