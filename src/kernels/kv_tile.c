/* Key tiles by element (kernels/kv_tile.h): f32 and f16 elements of slot jj at [i][jj], q8_0
 * codes at [i][jj] and the blocks' scales after all dim * 16 codes at [s][jj]. */
#include "kernels/kv_tile.h"

#include <string.h>

#include "core/error.h"

/* One slot's elements between a row and a tile: elem bytes each, dim of them, at [i][16] in the
 * tile; to_tile says which way. */
static void move_elems(uint8_t *tile, int jj, uint8_t *row, int64_t dim, size_t elem, int to_tile) {
    for (int64_t i = 0; i < dim; i++) {
        uint8_t *t = tile + ((size_t)i * 16 + (size_t)jj) * elem, *r = row + (size_t)i * elem;
        memcpy(to_tile ? t : r, to_tile ? r : t, elem);
    }
}

/* q8_0: per block of 32, the fp16 scale, then the 32 codes. */
static void move_q8_0(uint8_t *tile, int jj, uint8_t *row, int64_t dim, int to_tile) {
    uint8_t *scales = tile + (size_t)dim * 16;
    for (int64_t s = 0; s < dim / FX_QK; s++) {
        uint8_t *blk = row + (size_t)s * sizeof(struct fx_block_q8_0);
        uint8_t *d = scales + ((size_t)s * 16 + (size_t)jj) * 2;
        memcpy(to_tile ? d : blk, to_tile ? blk : d, 2);
        move_elems(tile + (size_t)s * FX_QK * 16, jj, blk + 2, FX_QK, 1, to_tile);
    }
}

static void move_row(enum fx_type type, int64_t dim, uint8_t *tile, int jj, uint8_t *row,
                     int to_tile) {
    FX_ASSERT(jj >= 0 && jj < 16);
    switch (type) {
    case FX_TYPE_F32:
        move_elems(tile, jj, row, dim, sizeof(float), to_tile);
        return;
    case FX_TYPE_F16:
        move_elems(tile, jj, row, dim, sizeof(uint16_t), to_tile);
        return;
    case FX_TYPE_Q8_0:
        move_q8_0(tile, jj, row, dim, to_tile);
        return;
    default:
        FX_ASSERT(!"not a KV cache type");
    }
}

void fx_kv_tile_put(enum fx_type type, int64_t dim, uint8_t *tile, int jj, const uint8_t *row) {
    move_row(type, dim, tile, jj, (uint8_t *)row, 1);
}

void fx_kv_tile_get(enum fx_type type, int64_t dim, const uint8_t *tile, int jj, uint8_t *row) {
    move_row(type, dim, (uint8_t *)tile, jj, row, 0);
}
