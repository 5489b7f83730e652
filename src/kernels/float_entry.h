/* The fx_kernels entry points of a SIMD table's float formats (F32, F16, BF16): matmul_<format>
 * and vec_dot_<format>, one function per format since the table's entries take no format
 * argument. Expanded in a table's file, after its own
 *   float_matmul(type, w, r0, r1, act, act_stride, n_act, out, out_stride) and
 *   float_tile(type, rows, acts, w, w_stride, act, act_stride, n, out, out_stride). */
#ifndef FX_KERNELS_FLOAT_ENTRY_H
#define FX_KERNELS_FLOAT_ENTRY_H

#define FX_FLOAT_ENTRY(name, TYPE)                                                                 \
    static void matmul_##name(const struct fx_mat *w, int64_t r0, int64_t r1, const void *act,     \
                              uint64_t act_stride, int64_t n_act, float *out, int64_t out_stride,  \
                              const void *meta, const struct fx_mat_piece *then) {                 \
        (void)meta; /* f32 activations have none */                                                \
        (void)then; /* float matmuls stream their weights without help */                          \
        float_matmul(FX_TYPE_##TYPE, w, r0, r1, act, act_stride, n_act, out, out_stride);          \
    }                                                                                              \
    static void vec_dot_##name(int64_t n, float *restrict s, const void *restrict x,               \
                               const void *restrict y) {                                           \
        float_tile(FX_TYPE_##TYPE, 1, 1, x, 0, y, 0, n, s, 0);                                     \
    }
#define FX_FLOAT_ENTRY_POINTS                                                                      \
    FX_FLOAT_ENTRY(f32, F32)                                                                       \
    FX_FLOAT_ENTRY(f16, F16)                                                                       \
    FX_FLOAT_ENTRY(bf16, BF16)

#endif
