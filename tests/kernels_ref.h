/* Test support for the kernel tests: an independent float64 decoder of every block format (one
 * element at a time, written from the format definitions, sharing no code with the kernels),
 * random rows of valid blocks, offset buffers, and the list of tables this host supports. */
#ifndef FX_TESTS_KERNELS_REF_H
#define FX_TESTS_KERNELS_REF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ferrox.h"
#include "fx_test.h"
#include "kernels/kernels.h"

/* Every table this CPU supports, generic first; returns the count. */
int kref_tables(const struct fx_kernels *out[3]);

/* fp16 and bf16 decoded in double, without the kernels' helpers. */
double kref_fp16(uint16_t h);
double kref_bf16(uint16_t h);

/* Element i of a row of `type`, in double. *mag (may be NULL) receives the sum of the magnitudes
 * of the terms that make it up (|d*sc*q| + |dmin*m| for the affine formats), the scale against
 * which f32 rounding of the kernels is measured. */
double kref_elem(enum fx_type type, const void *row, int64_t i, double *mag);

/* Fills a row of n elements of `type` with random valid content: random codes, and scales in a
 * range that keeps every value finite. */
void kref_random_row(enum fx_type type, void *row, int64_t n, struct fx_test_rng *rng);

/* n standard normal floats. */
void kref_normal(float *x, int64_t n, struct fx_test_rng *rng);

/* A buffer of `size` bytes whose start is `offset` bytes past a 64-byte boundary (use the
 * format's natural alignment, so that SIMD code meets pointers that are not vector-aligned).
 * kref_free() releases it. */
void *kref_alloc(size_t size, size_t offset);
void kref_free(void *p);

/* The alignment a row of `type` keeps (that of its block struct). */
size_t kref_align(enum fx_type type);

/* Bytes of a row of n elements of `type` (n a whole number of blocks). */
size_t kref_row_bytes(enum fx_type type, int64_t n);

/* An activation row of n elements in `type`, quantized by table k from x; fails the test unless
 * the bytes equal the generic table's (quantize_act is exact across tables). A kref_alloc'd row
 * at an offset of the format's alignment. */
void *kref_act(const struct fx_kernels *k, enum fx_type type, const float *x, int64_t n);

/* The float64 reference of dot(weight row w of type wt, activation row act of type at; x: the f32
 * activations when at is F32), and in *mag the scale its f32 rounding is measured against
 * (the sum of |w_i| |a_i|, counting both terms of d*q - m). */
double kref_dot(enum fx_type wt, const void *w, enum fx_type at, const void *act, const float *x,
                int64_t n, double *mag);

#endif
