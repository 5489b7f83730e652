/* AVX-512 (F, BW, VL, DQ) and VNNI kernels. Built with the AVX-512 -m flags and only called
 * after dispatch.c has seen those features. This table fills only what it speeds up; the rest
 * comes from the avx2 table, and what that leaves from the generic one.
 *
 * Quantized formats: the R16 tiles (x86_avx512_q32.c, x86_avx512_qk.c) through the shared
 * driver of r16.c, for matmul and vec_dot alike. Float formats (F32, F16, BF16 against f32
 * activations): one 16-lane f32 accumulator per (weight row, activation row) pair, 16
 * elements at a time in order, the last 1..15 under a mask, then a fixed reduction; matmul
 * runs the same sequence for blocks of pairs. (AMX, which would suit the int8 tiles, is absent
 * on the machines this was measured on, so there is no AMX path.) */
#if defined(__x86_64__)

#include "kernels/x86_avx512.h"

#include "kernels/x86_avx512_attn.h"
#include "kernels/x86_avx512_rows.h"
#include "kernels/x86_avx512_ssm.h"

#include "kernels/float_entry.h"
#include "kernels/generic.h"

/* ---- float formats ------------------------------------------------------------------------- */

/* 16 (or the first `mask` of 16) weights from element i of a row, as f32. */
FX_INLINE __m512 float_w(enum fx_type type, const void *row, int64_t i, __mmask16 mask) {
    switch (type) {
    case FX_TYPE_F16:
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, (const uint16_t *)row + i));
    case FX_TYPE_BF16:
        return _mm512_castsi512_ps(_mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, (const uint16_t *)row + i)), 16));
    default:
        return _mm512_maskz_loadu_ps(mask, (const float *)row + i);
    }
}

/* rows x width pairs of a float matmul: out[j][r] for rows[r] (r < n_rows) and activation rows
 * act + j * act_stride (j < width), over n elements. */
FX_INLINE void float_tile(enum fx_type type, int n_rows, int width, const uint8_t *row0,
                          uint64_t row_bytes, const uint8_t *act, uint64_t act_stride, int64_t n,
                          float *out, int64_t out_stride) {
    __m512 acc[4][4];
#pragma GCC unroll 16
    for (int r = 0; r < n_rows; r++)
#pragma GCC unroll 16
        for (int j = 0; j < width; j++)
            acc[r][j] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 w[4];
#pragma GCC unroll 16
        for (int r = 0; r < n_rows; r++)
            w[r] = float_w(type, row0 + (uint64_t)r * row_bytes, i, 0xffff);
#pragma GCC unroll 16
        for (int j = 0; j < width; j++) {
            __m512 a = _mm512_loadu_ps((const float *)(act + (uint64_t)j * act_stride) + i);
#pragma GCC unroll 16
            for (int r = 0; r < n_rows; r++)
                acc[r][j] = _mm512_fmadd_ps(w[r], a, acc[r][j]);
        }
    }
    if (i < n) {
        __mmask16 m = lanes16((int)(n - i));
        __m512 w[4];
#pragma GCC unroll 16
        for (int r = 0; r < n_rows; r++)
            w[r] = float_w(type, row0 + (uint64_t)r * row_bytes, i, m);
#pragma GCC unroll 16
        for (int j = 0; j < width; j++) {
            __m512 a =
                _mm512_maskz_loadu_ps(m, (const float *)(act + (uint64_t)j * act_stride) + i);
#pragma GCC unroll 16
            for (int r = 0; r < n_rows; r++)
                acc[r][j] = _mm512_fmadd_ps(w[r], a, acc[r][j]);
        }
    }
#pragma GCC unroll 16
    for (int r = 0; r < n_rows; r++)
#pragma GCC unroll 16
        for (int j = 0; j < width; j++)
            out[j * out_stride + r] = _mm512_reduce_add_ps(acc[r][j]);
}

/* 4 rows by `width` (4, 2 or 1) activation rows. */
FX_INLINE void float_tile_4(enum fx_type type, int width, const uint8_t *row0, uint64_t row_bytes,
                            const uint8_t *act, uint64_t act_stride, int64_t n, float *out,
                            int64_t out_stride) {
    if (width == 4)
        float_tile(type, 4, 4, row0, row_bytes, act, act_stride, n, out, out_stride);
    else if (width == 2)
        float_tile(type, 4, 2, row0, row_bytes, act, act_stride, n, out, out_stride);
    else
        float_tile(type, 4, 1, row0, row_bytes, act, act_stride, n, out, out_stride);
}

/* Rows are taken in blocks small enough to stay in L2 while every activation row passes; rows
 * left over from groups of 4 go one pair at a time (each pair's sequence is the same). */
FX_INLINE void float_matmul(enum fx_type type, const struct fx_mat *w, int64_t r0, int64_t r1,
                            const void *act, uint64_t act_stride, int64_t n_act, float *out,
                            int64_t out_stride) {
    const uint8_t *data = w->data;
    int64_t block = (int64_t)(256 * 1024 / (w->row_bytes ? w->row_bytes : 1));
    block = block < 4 ? 4 : block > 64 ? 64 : block & ~(int64_t)3;
    for (int64_t b0 = r0; b0 < r1; b0 += block) {
        int64_t b1 = b0 + block < r1 ? b0 + block : r1;
        for (int64_t j = 0; j < n_act;) {
            int width = n_act - j >= 4 ? 4 : n_act - j >= 2 ? 2 : 1;
            const uint8_t *a = (const uint8_t *)act + (uint64_t)j * act_stride;
            int64_t r = b0;
            for (; r + 4 <= b1; r += 4)
                float_tile_4(type, width, data + (uint64_t)r * w->row_bytes, w->row_bytes, a,
                             act_stride, w->ne0, out + j * out_stride + r, out_stride);
            for (; r < b1; r++)
#pragma GCC unroll 16
                for (int jj = 0; jj < width; jj++)
                    float_tile(type, 1, 1, data + (uint64_t)r * w->row_bytes, 0,
                               a + (uint64_t)jj * act_stride, 0, w->ne0,
                               out + (j + jj) * out_stride + r, 0);
            j += width;
        }
    }
}

FX_FLOAT_ENTRY_POINTS

/* ---- quantized formats: R16 ---------------------------------------------------------------- */

static const struct fx_r16_kernel r16[FX_TYPE_COUNT] = {
    [FX_TYPE_Q8_0] = {FX_TYPE_Q8_0, fx_avx512_tile_q8_0, fx_avx512_meta_q8_0, fx_avx512_wide_q8_0,
                      FX_AVX512_Q32_WIDE_ACT},
    [FX_TYPE_Q4_0] = {FX_TYPE_Q4_0, fx_avx512_tile_q4_0, fx_avx512_meta_q8_0, fx_avx512_wide_q4_0,
                      FX_AVX512_Q32_WIDE_ACT},
    [FX_TYPE_Q4_1] = {FX_TYPE_Q4_1, fx_avx512_tile_q4_1, fx_r16_meta_q8_1, fx_avx512_wide_q4_1,
                      FX_AVX512_Q32_WIDE_ACT},
    [FX_TYPE_Q5_0] = {FX_TYPE_Q5_0, fx_avx512_tile_q5_0, fx_avx512_meta_q8_0, fx_avx512_wide_q5_0,
                      FX_AVX512_Q32_WIDE_ACT},
    [FX_TYPE_Q5_1] = {FX_TYPE_Q5_1, fx_avx512_tile_q5_1, fx_r16_meta_q8_1, fx_avx512_wide_q5_1,
                      FX_AVX512_Q32_WIDE_ACT},
    [FX_TYPE_MXFP4] = {FX_TYPE_MXFP4, fx_avx512_tile_mxfp4, fx_avx512_meta_q8_0,
                       fx_avx512_wide_mxfp4, FX_AVX512_Q32_WIDE_ACT},
    [FX_TYPE_Q2_K] = {FX_TYPE_Q2_K, fx_avx512_tile_q2_K, NULL, fx_avx512_wide_q2_K,
                      FX_AVX512_K_WIDE_ACT},
    [FX_TYPE_Q3_K] = {FX_TYPE_Q3_K, fx_avx512_tile_q3_K, NULL, fx_avx512_wide_q3_K,
                      FX_AVX512_K_WIDE_ACT},
    [FX_TYPE_Q4_K] = {FX_TYPE_Q4_K, fx_avx512_tile_q4_K, NULL, fx_avx512_wide_q4_K,
                      FX_AVX512_K_WIDE_ACT},
    [FX_TYPE_Q5_K] = {FX_TYPE_Q5_K, fx_avx512_tile_q5_K, NULL, fx_avx512_wide_q5_K,
                      FX_AVX512_K_WIDE_ACT},
    [FX_TYPE_Q6_K] = {FX_TYPE_Q6_K, fx_avx512_tile_q6_K, NULL, fx_avx512_wide_q6_K,
                      FX_AVX512_K_WIDE_ACT},
    [FX_TYPE_IQ4_NL] = {FX_TYPE_IQ4_NL, fx_avx512_tile_iq4_nl, fx_avx512_meta_q8_0,
                        fx_avx512_wide_iq4_nl, FX_AVX512_Q32_WIDE_ACT},
    [FX_TYPE_IQ4_XS] = {FX_TYPE_IQ4_XS, fx_avx512_tile_iq4_xs, NULL, fx_avx512_wide_iq4_xs,
                        FX_AVX512_K_WIDE_ACT},
};

FX_R16_ENTRY_POINTS(r16)

const struct fx_kernels fx_kernels_avx512_part = {
    .name = "avx512",
    .types =
        {
            [FX_TYPE_F32] = {.vec_dot = vec_dot_f32, .matmul = matmul_f32},
            [FX_TYPE_F16] = {.vec_dot = vec_dot_f16, .matmul = matmul_f16},
            [FX_TYPE_BF16] = {.vec_dot = vec_dot_bf16, .matmul = matmul_bf16},
            [FX_TYPE_Q8_0] = FX_R16_Q8_0_OPS(fx_avx512_quantize_act_q8_0),
            [FX_TYPE_Q8_1] = {.quantize_act = fx_avx512_quantize_act_q8_1},
            [FX_TYPE_Q8_K] = {.quantize_act = fx_avx512_quantize_act_q8_K},
            FX_R16_TYPES_BUT_Q8_0,
        },
    .softcap = fx_avx512_softcap,
    .act = {[FX_ACT_SILU] = fx_avx512_silu,
            [FX_ACT_GELU] = fx_avx512_gelu,
            [FX_ACT_SIGMOID] = fx_avx512_sigmoid},
    .glu = {[FX_ACT_SILU] = fx_avx512_swiglu,
            [FX_ACT_GELU] = fx_avx512_geglu,
            [FX_ACT_SIGMOID] = fx_avx512_sigmoid_glu},
    .swiglu_oai = fx_avx512_swiglu_oai,
    .argmax = fx_avx512_argmax,
    .attn_begin = fx_attn_begin_avx512,
    .attn_run = fx_attn_run_avx512,
    .attn_finish = fx_attn_finish_avx512,
    .kv_store = fx_avx512_kv_store,
    .kv_load = fx_avx512_kv_load,
    .kv_load_tile = fx_avx512_kv_load_tile,
    .conv_rows = fx_avx512_conv_rows,
    .delta_rows = fx_avx512_delta_rows,
};

#endif
