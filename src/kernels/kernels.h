/* The kernel table: every numeric operation the decoder needs, as function pointers.
 *
 * kernels/generic.c fills the complete table in plain C; it is the reference for everything.
 * kernels/x86_avx2.c and kernels/x86_avx512.c fill only the entries they accelerate, and the rest
 * is taken from the generic table when the table is assembled. One table is chosen once at start
 * (fx_kernels()) from the CPU features, or forced with FERROX_CPU=generic|avx2|avx512.
 *
 * Kernels never create threads: work is split by the caller into (ith, nth) shares, and a kernel
 * computes its share only.
 *
 * Determinism contract (tests pin it, the decoder relies on it): within one table, row j of a
 * matmul over n_act activation rows is bit-identical to the same row computed with n_act = 1,
 * whatever n_act, j and the (ith, nth) split. Batching is scheduling, not a change of the maths.
 */
#ifndef FX_KERNELS_KERNELS_H
#define FX_KERNELS_KERNELS_H

#include <stdbool.h>
#include <stdint.h>

#include "ferrox.h"

/* A weight matrix: ne1 rows of ne0 elements of `type`, rows row_bytes apart. `packed` is an
 * optional copy in a layout a kernel prefers (interleaved rows, made once at load by
 * fx_mat_pack); kernels that do not know `pack_kind` read `data`. */
struct fx_mat {
    enum fx_type type;
    int64_t ne0, ne1;
    uint64_t row_bytes;
    const void *data;
    const void *packed;
    uint32_t pack_kind; /* 0: none */
};

/* Converts n elements (a whole number of blocks) of a row to f32. */
typedef void (*fx_to_float_fn)(const void *restrict src, float *restrict dst, int64_t n);
/* Encodes n f32 elements (a whole number of blocks). For weight formats this is the reference
 * encoding that llama.cpp's quantizer uses; for activation formats it is the activation
 * quantizer. */
typedef void (*fx_from_float_fn)(const float *restrict src, void *restrict dst, int64_t n);
/* *s = dot product of n elements of a weight row x and an activation row y (in the weight type's
 * vec_dot_type). */
typedef void (*fx_vec_dot_fn)(int64_t n, float *restrict s, const void *restrict x,
                              const void *restrict y);
/* One share of out = act * W^T: for weight rows r0 <= r < r1 and activation rows 0 <= j < n_act,
 * out[j * out_stride + r] = dot(W row r, act row j). Activation rows are in vec_dot_type,
 * act_stride bytes apart. */
typedef void (*fx_matmul_fn)(const struct fx_mat *w, int64_t r0, int64_t r1, const void *act,
                             uint64_t act_stride, int64_t n_act, float *out, int64_t out_stride);

struct fx_type_ops {
    enum fx_type vec_dot_type; /* the activation format this weight type is dotted with */
    fx_to_float_fn to_float;
    fx_from_float_fn from_float;
    fx_vec_dot_fn vec_dot;
    fx_matmul_fn matmul; /* NULL: the generic driver loops over vec_dot */
};

struct fx_kernels {
    const char *name; /* "generic", "avx2", "avx512" */
    struct fx_type_ops types[FX_TYPE_COUNT];
    /* Element-wise and row operations (norms, softmax, rope, activations, ...) are added here by
     * the kernels work; see generic.c for their reference definitions. */
};

/* The table chosen for this process (thread-safe, decided once). */
const struct fx_kernels *fx_kernels(void);
/* A table by name, or NULL when unknown or unsupported by this CPU. */
const struct fx_kernels *fx_kernels_named(const char *name);

#endif
