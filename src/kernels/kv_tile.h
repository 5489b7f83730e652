/* Rows in and out of key tiles (kernels.h, fx_kv_tile_bytes): the one place that knows where
 * element i of slot jj lies, for the KV cache's writes and its row-layout copies (saved state,
 * device uploads). Byte moves only: a row's encoding is kv_store's, unchanged. */
#ifndef FX_KERNELS_KV_TILE_H
#define FX_KERNELS_KV_TILE_H

#include <stdint.h>

#include "kernels/types.h"

/* Writes one row of dim elements of `type` (kv_store's encoding, row_bytes of it) into slot jj
 * (0..15) of tile. */
void fx_kv_tile_put(enum fx_type type, int64_t dim, uint8_t *tile, int jj, const uint8_t *row);
/* Reads slot jj of tile back as that row. */
void fx_kv_tile_get(enum fx_type type, int64_t dim, const uint8_t *tile, int jj, uint8_t *row);

#endif
