/* Rows in and out of key tiles (kernels.h, fx_kv_tile_bytes): the one place that knows where
 * element i of slot jj lies, for the KV cache's writes and its row-layout copies (saved state,
 * device uploads). Byte moves only: a row's encoding is kv_store's, unchanged. */
#ifndef FX_KERNELS_KV_TILE_H
#define FX_KERNELS_KV_TILE_H

#include <stdint.h>

#include "kernels/types.h"

/* Writes elements e0 .. e0 + n - 1 of a row of `type` into slot jj (0..15) of a tile of dim
 * elements; part holds them in kv_store's encoding (q8_0: e0 and n whole blocks of 32). */
void fx_kv_tile_put(enum fx_type type, int64_t dim, uint8_t *tile, int jj, int64_t e0, int64_t n,
                    const uint8_t *part);
/* Reads those elements of slot jj back in that encoding. */
void fx_kv_tile_get(enum fx_type type, int64_t dim, const uint8_t *tile, int jj, int64_t e0,
                    int64_t n, uint8_t *part);

#endif
