/* Key tiles by element (kernels/kv_tile.h): f32 and f16 elements of slot jj at [i][jj], q8_0
 * codes at [i][jj] and the blocks' scales after all dim * 16 codes at [s][jj]. */
#include "kernels/kv_tile.h"

#include <string.h>

#include "core/error.h"

/* Elements e0 .. e0 + n - 1 of one slot between a row's part and a tile, elem bytes each, at
 * [i][16] in the tile; to_tile says which way. */
static inline __attribute__((always_inline)) void
move_elems(uint8_t *tile, int jj, uint8_t *part, int64_t e0, int64_t n, size_t elem, int to_tile) {
    for (int64_t i = 0; i < n; i++) {
        uint8_t *t = tile + ((size_t)(e0 + i) * 16 + (size_t)jj) * elem,
                *r = part + (size_t)i * elem;
        memcpy(to_tile ? t : r, to_tile ? r : t, elem);
    }
}

/* q8_0: per block of 32, the fp16 scale, then the 32 codes. */
static void move_q8_0(uint8_t *tile, int64_t dim, int jj, uint8_t *part, int64_t e0, int64_t n,
                      int to_tile) {
    FX_ASSERT(e0 % FX_QK == 0 && n % FX_QK == 0);
    uint8_t *scales = tile + (size_t)dim * 16;
    for (int64_t s = e0 / FX_QK; s < (e0 + n) / FX_QK; s++) {
        uint8_t *blk = part + (size_t)(s - e0 / FX_QK) * sizeof(struct fx_block_q8_0);
        uint8_t *d = scales + ((size_t)s * 16 + (size_t)jj) * 2;
        memcpy(to_tile ? d : blk, to_tile ? blk : d, 2);
        move_elems(tile, jj, blk + 2, s * FX_QK, FX_QK, 1, to_tile);
    }
}

static void move_part(enum fx_type type, int64_t dim, uint8_t *tile, int jj, int64_t e0, int64_t n,
                      uint8_t *part, int to_tile) {
    FX_ASSERT(jj >= 0 && jj < 16 && e0 >= 0 && e0 + n <= dim);
    switch (type) {
    case FX_TYPE_F32:
        move_elems(tile, jj, part, e0, n, sizeof(float), to_tile);
        return;
    case FX_TYPE_F16:
        move_elems(tile, jj, part, e0, n, sizeof(uint16_t), to_tile);
        return;
    case FX_TYPE_Q8_0:
        move_q8_0(tile, dim, jj, part, e0, n, to_tile);
        return;
    default:
        FX_ASSERT(!"not a KV cache type");
    }
}

void fx_kv_tile_put(enum fx_type type, int64_t dim, uint8_t *tile, int jj, int64_t e0, int64_t n,
                    const uint8_t *part) {
    move_part(type, dim, tile, jj, e0, n, (uint8_t *)part, 1);
}

void fx_kv_tile_get(enum fx_type type, int64_t dim, const uint8_t *tile, int jj, int64_t e0,
                    int64_t n, uint8_t *part) {
    move_part(type, dim, (uint8_t *)tile, jj, e0, n, part, 0);
}
