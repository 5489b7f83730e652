/* The plain C reference kernels (generic*.c), shared with the table builders: generic.c fills
 * the generic table from these, and the per-ISA files may call them for what they leave to C.
 * The functions have the shapes of the typedefs in kernels.h. */
#ifndef FX_KERNELS_GENERIC_H
#define FX_KERNELS_GENERIC_H

#include <stdint.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/types.h"

/* The complete generic table. */
extern const struct fx_kernels fx_kernels_generic;

/* Rounds to the nearest integer, ties to even, for |x| < 2^22: adding 1.5 * 2^23 leaves a float
 * whose unit is 1, so the addition itself rounds, and the integer sits in the low mantissa bits.
 * Outside that range the result is meaningless but defined (no undefined conversion), which is
 * what the quantizers' clamps expect. ggml's quantizers round the same way. */
static inline int fx_round_even(float x) {
    float t = x + 12582912.0f;
    int32_t i;
    memcpy(&i, &t, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

/* ---- generic_quant.c: plain and 32-wide formats -------------------------------------------- */

void fx_f32_to_float(const void *restrict src, float *restrict dst, int64_t n);
void fx_f32_from_float(const float *restrict src, void *restrict dst, int64_t n);
void fx_f16_to_float(const void *restrict src, float *restrict dst, int64_t n);
void fx_f16_from_float(const float *restrict src, void *restrict dst, int64_t n);
void fx_bf16_to_float(const void *restrict src, float *restrict dst, int64_t n);
void fx_bf16_from_float(const float *restrict src, void *restrict dst, int64_t n);
void fx_q4_0_to_float(const void *restrict src, float *restrict dst, int64_t n);
void fx_q4_0_from_float(const float *restrict src, void *restrict dst, int64_t n);
void fx_q4_1_to_float(const void *restrict src, float *restrict dst, int64_t n);
void fx_q4_1_from_float(const float *restrict src, void *restrict dst, int64_t n);
void fx_q5_0_to_float(const void *restrict src, float *restrict dst, int64_t n);
void fx_q5_0_from_float(const float *restrict src, void *restrict dst, int64_t n);
void fx_q5_1_to_float(const void *restrict src, float *restrict dst, int64_t n);
void fx_q5_1_from_float(const float *restrict src, void *restrict dst, int64_t n);
void fx_q8_0_to_float(const void *restrict src, float *restrict dst, int64_t n);
void fx_q8_0_from_float(const float *restrict src, void *restrict dst, int64_t n);
void fx_q8_0_quantize_act(const float *restrict src, void *restrict dst, int64_t n);
void fx_q8_1_to_float(const void *restrict src, float *restrict dst, int64_t n);
void fx_q8_1_quantize_act(const float *restrict src, void *restrict dst, int64_t n);
void fx_mxfp4_to_float(const void *restrict src, float *restrict dst, int64_t n);
void fx_mxfp4_from_float(const float *restrict src, void *restrict dst, int64_t n);

/* MXFP4's E2M1 code points, doubled so that they are integers: code c stands for
 * fx_mxfp4_values[c] * 2^(e-128) (fx_e8m0_to_f32_half). */
extern const int8_t fx_mxfp4_values[16];

/* ---- generic_quant_k.c: the 256-wide K formats --------------------------------------------- */

void fx_q2_K_to_float(const void *restrict src, float *restrict dst, int64_t n);
void fx_q2_K_from_float(const float *restrict src, void *restrict dst, int64_t n);
void fx_q3_K_to_float(const void *restrict src, float *restrict dst, int64_t n);
void fx_q3_K_from_float(const float *restrict src, void *restrict dst, int64_t n);
void fx_q4_K_to_float(const void *restrict src, float *restrict dst, int64_t n);
void fx_q4_K_from_float(const float *restrict src, void *restrict dst, int64_t n);
void fx_q5_K_to_float(const void *restrict src, float *restrict dst, int64_t n);
void fx_q5_K_from_float(const float *restrict src, void *restrict dst, int64_t n);
void fx_q6_K_to_float(const void *restrict src, float *restrict dst, int64_t n);
void fx_q6_K_from_float(const float *restrict src, void *restrict dst, int64_t n);
void fx_q8_K_to_float(const void *restrict src, float *restrict dst, int64_t n);
void fx_q8_K_quantize_act(const float *restrict src, void *restrict dst, int64_t n);

/* The 6-bit scale j (0..7) and min of a Q4_K / Q5_K block's packed 12 bytes. */
static inline void fx_k_scale_min(const uint8_t *q, int j, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* The 16 6-bit scales of a Q3_K block (biased by 32) from its packed 12 bytes. */
static inline int fx_q3_K_scale(const uint8_t *q, int j) {
    int lo = j < 8 ? q[j] & 0x0f : q[j - 8] >> 4;
    int hi = (q[8 + j % 4] >> (2 * (j / 4))) & 3;
    return (lo | (hi << 4)) - 32;
}

/* ---- generic_quant_iq4.c: the non-linear 4-bit formats ------------------------------------- */

void fx_iq4_nl_to_float(const void *restrict src, float *restrict dst, int64_t n);
void fx_iq4_nl_from_float(const float *restrict src, void *restrict dst, int64_t n);
void fx_iq4_xs_to_float(const void *restrict src, float *restrict dst, int64_t n);
void fx_iq4_xs_from_float(const float *restrict src, void *restrict dst, int64_t n);

/* The 16 levels a code of IQ4_NL or IQ4_XS stands for, in units of the (sub-)block's scale. */
extern const int8_t fx_iq4nl_values[16];

/* ---- generic_dot.c: dot products ----------------------------------------------------------- */

void fx_f32_vec_dot(int64_t n, float *restrict s, const void *restrict x, const void *restrict y);
void fx_f16_vec_dot(int64_t n, float *restrict s, const void *restrict x, const void *restrict y);
void fx_bf16_vec_dot(int64_t n, float *restrict s, const void *restrict x, const void *restrict y);
void fx_q4_0_vec_dot(int64_t n, float *restrict s, const void *restrict x, const void *restrict y);
void fx_q4_1_vec_dot(int64_t n, float *restrict s, const void *restrict x, const void *restrict y);
void fx_q5_0_vec_dot(int64_t n, float *restrict s, const void *restrict x, const void *restrict y);
void fx_q5_1_vec_dot(int64_t n, float *restrict s, const void *restrict x, const void *restrict y);
void fx_q8_0_vec_dot(int64_t n, float *restrict s, const void *restrict x, const void *restrict y);
void fx_mxfp4_vec_dot(int64_t n, float *restrict s, const void *restrict x, const void *restrict y);
void fx_q2_K_vec_dot(int64_t n, float *restrict s, const void *restrict x, const void *restrict y);
void fx_q3_K_vec_dot(int64_t n, float *restrict s, const void *restrict x, const void *restrict y);
void fx_q4_K_vec_dot(int64_t n, float *restrict s, const void *restrict x, const void *restrict y);
void fx_q5_K_vec_dot(int64_t n, float *restrict s, const void *restrict x, const void *restrict y);
void fx_q6_K_vec_dot(int64_t n, float *restrict s, const void *restrict x, const void *restrict y);
void fx_iq4_nl_vec_dot(int64_t n, float *restrict s, const void *restrict x,
                       const void *restrict y);
void fx_iq4_xs_vec_dot(int64_t n, float *restrict s, const void *restrict x,
                       const void *restrict y);

/* ---- generic_rows.c: row operations -------------------------------------------------------- */

void fx_rms_norm_generic(float *out, const float *x, const float *w, int64_t n, float eps);
void fx_softcap_generic(float *x, int64_t n, float cap);
void fx_softmax_generic(float *x, int64_t n, float sink);
void fx_rope_generic(float *x, int64_t n_heads, int64_t head_stride, int32_t n_dims,
                     enum fx_rope_mode mode, const float *cs);
void fx_silu_generic(float *out, const float *x, int64_t n);
void fx_gelu_generic(float *out, const float *x, int64_t n);
void fx_gelu_f16_generic(float *out, const float *x, int64_t n);
void fx_swiglu_generic(float *out, const float *g, const float *u, int64_t n);
void fx_geglu_generic(float *out, const float *g, const float *u, int64_t n);
void fx_geglu_f16_generic(float *out, const float *g, const float *u, int64_t n);
void fx_swiglu_oai_generic(float *out, const float *g, const float *u, int64_t n, float alpha,
                           float limit);
void fx_add_generic(float *out, const float *a, const float *b, int64_t n);
void fx_scale_generic(float *out, const float *x, float s, int64_t n);
void fx_axpy_generic(float *y, const float *x, float a, int64_t n);
/* generic_kv.c */
void fx_kv_store_generic(enum fx_type type, const float *src, int64_t dim, void *dst);
void fx_kv_load_generic(enum fx_type type, const void *src, uint64_t src_stride, int64_t n,
                        int64_t dim, float *dst, int64_t dst_stride);
void fx_kv_load_tile_generic(enum fx_type type, const void *tile, int64_t j0, int64_t n,
                             int64_t dim, float *dst, int64_t dst_stride);

/* generic_attn.c */
/* A table's kv_load and kv_load_tile (kernels.h). */
typedef void (*fx_kv_load_fn)(enum fx_type type, const void *src, uint64_t src_stride, int64_t n,
                              int64_t dim, float *dst, int64_t dst_stride);
typedef void (*fx_kv_load_tile_fn)(enum fx_type type, const void *tile, int64_t j0, int64_t n,
                                   int64_t dim, float *dst, int64_t dst_stride);
/* Rows 0 .. n - 1 of a run (rows or key tiles) as f32 rows of dim floats at dst ([n][dim]),
 * through load or load_tile. */
void fx_attn_rows_f32(fx_kv_load_fn load, fx_kv_load_tile_fn load_tile, const struct fx_kv_run *r,
                      int64_t n, int64_t dim, float *dst);
/* Asks for all of keys->next and values->next into L1 at once (struct fx_kv_ahead). */
void fx_attn_prefetch_next(const struct fx_kv_run *keys, const struct fx_kv_run *values);
void fx_attn_run_generic(struct fx_attn_state *st, const int32_t *first, const int32_t *last,
                         const struct fx_kv_run *keys, const struct fx_kv_run *values,
                         int64_t n_keys, float scale, float softcap);
void fx_attn_begin_generic(struct fx_attn_state *st, float *mem, const float *q,
                           int64_t q_row_stride, int64_t n_rows, int64_t group, int64_t dim_k,
                           int64_t dim_v);
/* What attn_finish multiplies output o's accumulators by: 1 / l, or with a sink (NULL: none)
 * e^(m - top) / (l e^(m - top) + e^(sink - top)), top the larger of m and the sink; 0 for an
 * output that saw nothing. */
float fx_attn_finish_factor(float m, float l, const float *sink);
void fx_attn_finish_generic(float *out, int64_t out_stride, const float *acc, const float *m,
                            const float *l, const float *sinks, int64_t n_q, int64_t dim_v);
int64_t fx_argmax_generic(const float *x, int64_t n);

/* generic_ssm.c */
void fx_sigmoid_generic(float *out, const float *x, int64_t n);
void fx_sigmoid_glu_generic(float *out, const float *g, const float *u, int64_t n);
void fx_l2_norm_generic(float *out, const float *x, int64_t n, float eps);
void fx_conv_rows_generic(float *out, float *win, const float *x, int64_t n, int64_t stride,
                          const float *w, int64_t n_ch, int32_t d_conv);
void fx_delta_rows_generic(const struct fx_delta_state *st, int32_t r0, int32_t n, const float *q,
                           const float *k, const float *v, int64_t in_stride, const float *g,
                           const float *beta, float scale, float *out, int64_t out_stride,
                           float *work, int64_t d);

#endif
