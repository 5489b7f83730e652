/* The generic table (complete, plain C) and the drivers that split whole operations into the
 * (ith, nth) shares of workers. */
#include "kernels/generic.h"

#include "core/error.h"
#include "core/par.h"

#define WEIGHT(T, vdt, prefix)                                                                     \
    [T] = {.vec_dot_type = vdt,                                                                    \
           .to_float = prefix##_to_float,                                                          \
           .from_float = prefix##_from_float,                                                      \
           .vec_dot = prefix##_vec_dot}

const struct fx_kernels fx_kernels_generic = {
    .name = "generic",
    .types =
        {
            /* F32 and Q8_0 are activation formats too. */
            [FX_TYPE_F32] = {.vec_dot_type = FX_TYPE_F32,
                             .to_float = fx_f32_to_float,
                             .from_float = fx_f32_from_float,
                             .quantize_act = fx_f32_from_float,
                             .vec_dot = fx_f32_vec_dot},
            [FX_TYPE_Q8_0] = {.vec_dot_type = FX_TYPE_Q8_0,
                              .to_float = fx_q8_0_to_float,
                              .from_float = fx_q8_0_from_float,
                              .quantize_act = fx_q8_0_quantize_act,
                              .vec_dot = fx_q8_0_vec_dot},
            WEIGHT(FX_TYPE_F16, FX_TYPE_F32, fx_f16),
            WEIGHT(FX_TYPE_BF16, FX_TYPE_F32, fx_bf16),
            WEIGHT(FX_TYPE_Q4_0, FX_TYPE_Q8_0, fx_q4_0),
            WEIGHT(FX_TYPE_Q4_1, FX_TYPE_Q8_1, fx_q4_1),
            WEIGHT(FX_TYPE_Q5_0, FX_TYPE_Q8_0, fx_q5_0),
            WEIGHT(FX_TYPE_Q5_1, FX_TYPE_Q8_1, fx_q5_1),
            WEIGHT(FX_TYPE_MXFP4, FX_TYPE_Q8_0, fx_mxfp4),
            WEIGHT(FX_TYPE_Q2_K, FX_TYPE_Q8_K, fx_q2_K),
            WEIGHT(FX_TYPE_Q3_K, FX_TYPE_Q8_K, fx_q3_K),
            WEIGHT(FX_TYPE_Q4_K, FX_TYPE_Q8_K, fx_q4_K),
            WEIGHT(FX_TYPE_Q5_K, FX_TYPE_Q8_K, fx_q5_K),
            WEIGHT(FX_TYPE_Q6_K, FX_TYPE_Q8_K, fx_q6_K),
            WEIGHT(FX_TYPE_IQ4_NL, FX_TYPE_Q8_0, fx_iq4_nl),
            WEIGHT(FX_TYPE_IQ4_XS, FX_TYPE_Q8_K, fx_iq4_xs),
            /* Activation-only formats: decoding (for tests and debugging) and quantize_act. */
            [FX_TYPE_Q8_1] = {.to_float = fx_q8_1_to_float, .quantize_act = fx_q8_1_quantize_act},
            [FX_TYPE_Q8_K] = {.to_float = fx_q8_K_to_float, .quantize_act = fx_q8_K_quantize_act},
        },
    .rms_norm = fx_rms_norm_generic,
    .softcap = fx_softcap_generic,
    .softmax = fx_softmax_generic,
    .rope = fx_rope_generic,
    .act = {[FX_ACT_SILU] = fx_silu_generic,
            [FX_ACT_GELU] = fx_gelu_generic,
            [FX_ACT_GELU_F16] = fx_gelu_f16_generic,
            [FX_ACT_SIGMOID] = fx_sigmoid_generic},
    .glu = {[FX_ACT_SILU] = fx_swiglu_generic,
            [FX_ACT_GELU] = fx_geglu_generic,
            [FX_ACT_GELU_F16] = fx_geglu_f16_generic,
            [FX_ACT_SIGMOID] = fx_sigmoid_glu_generic},
    .swiglu_oai = fx_swiglu_oai_generic,
    .add = fx_add_generic,
    .scale = fx_scale_generic,
    .axpy = fx_axpy_generic,
    .attn_run = fx_attn_run_generic,
    .attn_begin = fx_attn_begin_generic,
    .attn_finish = fx_attn_finish_generic,
    .kv_store = fx_kv_store_generic,
    .kv_load = fx_kv_load_generic,
    .kv_load_tile = fx_kv_load_tile_generic,
    .argmax = fx_argmax_generic,
    .l2_norm = fx_l2_norm_generic,
    .conv_rows = fx_conv_rows_generic,
    .delta_rows = fx_delta_rows_generic,
};

/* Loops the table's vec_dot over a share: weight row r against every activation row, so the
 * row is read from memory once and reused from cache. */
static void matmul_by_vec_dot(fx_vec_dot_fn vec_dot, const struct fx_mat *w, int64_t r0, int64_t r1,
                              const void *act, uint64_t act_stride, int64_t n_act, float *out,
                              int64_t out_stride) {
    const char *row = (const char *)w->data + (uint64_t)r0 * w->row_bytes;
    for (int64_t r = r0; r < r1; r++, row += w->row_bytes)
        for (int64_t j = 0; j < n_act; j++)
            vec_dot(w->ne0, &out[j * out_stride + r], row,
                    (const char *)act + (uint64_t)j * act_stride);
}

void fx_matmul_rows(const struct fx_kernels *k, const struct fx_mat *w, int64_t r0, int64_t r1,
                    const void *act, uint64_t act_stride, int64_t n_act, float *out,
                    int64_t out_stride, const void *meta, const struct fx_mat_piece *then) {
    const struct fx_type_ops *ops = &k->types[w->type];
    if (r1 > w->ne1)
        r1 = w->ne1;
    if (r0 >= r1 || n_act <= 0)
        return;
    FX_ASSERT(ops->vec_dot != NULL && r0 % FX_MATMUL_ROW_UNIT == 0);
    if (ops->matmul)
        ops->matmul(w, r0, r1, act, act_stride, n_act, out, out_stride, meta, then);
    else
        matmul_by_vec_dot(ops->vec_dot, w, r0, r1, act, act_stride, n_act, out, out_stride);
}

void fx_matmul(const struct fx_kernels *k, const struct fx_mat *w, const void *act,
               uint64_t act_stride, int64_t n_act, float *out, int64_t out_stride, int ith, int nth,
               const void *meta) {
    int64_t r0, r1;
    fx_par_range(w->ne1, ith, nth, FX_MATMUL_ROW_UNIT, &r0, &r1);
    fx_matmul_rows(k, w, r0, r1, act, act_stride, n_act, out, out_stride, meta, NULL);
}

void fx_quantize_act(const struct fx_kernels *k, enum fx_type type, const float *src,
                     int64_t src_stride, int64_t n_rows, int64_t n, void *dst, uint64_t dst_stride,
                     int ith, int nth) {
    fx_from_float_fn quantize = k->types[type].quantize_act;
    int64_t qk = fx_type_block_elems(type);
    uint64_t block_bytes = (uint64_t)fx_type_block_bytes(type);
    FX_ASSERT(quantize != NULL && n % qk == 0);
    /* The blocks of all rows, numbered row-major; this worker takes a contiguous range and
     * converts it one row-piece at a time. */
    int64_t per_row = n / qk, b0, b1;
    fx_par_range(n_rows * per_row, ith, nth, 1, &b0, &b1);
    while (b0 < b1) {
        int64_t row = b0 / per_row, first = b0 % per_row;
        int64_t count = per_row - first < b1 - b0 ? per_row - first : b1 - b0;
        quantize(src + row * src_stride + first * qk,
                 (char *)dst + (uint64_t)row * dst_stride + (uint64_t)first * block_bytes,
                 count * qk);
        b0 += count;
    }
}
