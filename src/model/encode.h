/* Writing tensor rows in a file's types, in parallel: the shared engine of `ferrox quantize`
 * (rows read from another file) and `ferrox synth` (rows generated from a seed). Each row is
 * produced as f32 by a caller's source and encoded with the kernels' reference encoder
 * (from_float), byte for byte what llama.cpp's quantizer writes. */
#ifndef FX_MODEL_ENCODE_H
#define FX_MODEL_ENCODE_H

#include <stdint.h>

#include "ferrox.h"

/* Writes row `row` of a tensor (ne0 values) into out as f32. Called from several workers at
 * once for different rows, so it must only read shared state; it cannot fail (whatever could
 * fail is checked before encoding starts). */
typedef void (*fx_row_source_fn)(const void *user, int64_t row, float *out);

struct fx_encoder;

/* An encoder with n_threads workers (0: one per CPU), for rows of up to max_row elements. */
fx_status fx_encoder_create(int n_threads, int64_t max_row, struct fx_encoder **out,
                            struct fx_error *err);
void fx_encoder_free(struct fx_encoder *e);
int fx_encoder_threads(const struct fx_encoder *e);

/* Encodes rows row0 .. row0 + n_rows - 1 (ne0 <= max_row elements each, a whole number of the
 * type's blocks) from `source` into dst, back to back in `type` (one that has from_float: F32,
 * F16, BF16, the Q types, MXFP4). The rows are shared among the workers. */
fx_status fx_encoder_run(struct fx_encoder *e, enum fx_type type, int64_t ne0, int64_t row0,
                         int64_t n_rows, fx_row_source_fn source, const void *user, void *dst,
                         struct fx_error *err);

#endif
