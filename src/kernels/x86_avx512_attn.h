/* AVX-512 attention kernels (x86_avx512_attn.c), entries of the avx512 table. */
#ifndef FX_KERNELS_X86_AVX512_ATTN_H
#define FX_KERNELS_X86_AVX512_ATTN_H

#include <stdint.h>

#include "kernels/kernels.h"
#include "kernels/types.h"

void fx_attn_begin_avx512(struct fx_attn_state *st, float *mem, const float *q,
                          int64_t q_row_stride, int64_t n_rows, int64_t group, int64_t dim_k,
                          int64_t dim_v);
void fx_attn_finish_avx512(float *out, int64_t out_stride, const float *acc, const float *m,
                           const float *l, const float *sinks, int64_t n_q, int64_t dim_v);
void fx_attn_run_avx512(struct fx_attn_state *st, const int32_t *first, const int32_t *last,
                        const struct fx_kv_run *keys, const struct fx_kv_run *values,
                        int64_t n_keys, float scale, float softcap);

/* The key-lane kernel reads a run's keys as key tiles (kernels.h), one per block of 16: the
 * cache's own when the run is tiled, else x86_avx512_attn_kt.c's transposition of its rows into
 * st->kt (block b at byte b * fx_avx512_tile_bytes). The scores widen them as kv_load does. */
enum fx_avx512_kt_form { FX_KT_F32, FX_KT_F16, FX_KT_Q8 };

/* Bytes of a key tile of type t (f32, f16 or q8_0) and dim elements: 16 rows' bytes. */
static inline int64_t fx_avx512_tile_bytes(enum fx_type t, int64_t dim) {
    return t == FX_TYPE_F32 ? 64 * dim : t == FX_TYPE_F16 ? 32 * dim : 17 * dim;
}

/* The next run's groups g0 .. g1 - 1 of keys and values (fx_kv_run.next), prefetched while a
 * block of key rows is transposed, a share at each of the block's `parts` steps: spread between
 * the shuffles the lines arrive while the core works, where a burst of a whole run's lines (some
 * 270 with head size 128 and q8_0, 500 with f16) would stall it until most of them came. (Runs
 * read from the cache's key tiles ask for rows half a run ahead instead: x86_avx512_attn.c.) */
struct fx_avx512_ahead {
    const struct fx_kv_ahead *kv[2];
    int g0, g1;
};

static inline __attribute__((always_inline)) void
fx_avx512_ahead_part(const struct fx_avx512_ahead *a, int64_t part, int64_t parts) {
    for (int g = a->g0; g < a->g1; g++)
        for (int kind = 0; kind < 2; kind++) {
            uintptr_t p = (uintptr_t)a->kv[kind]->at[g], first = p & ~(uintptr_t)63;
            uint32_t bytes = a->kv[kind]->bytes[g];
            uint64_t lines = bytes ? (p + bytes - first + 63) / 64 : 0;
            for (uint64_t l = lines * part / parts; l < lines * (part + 1) / parts; l++)
                __builtin_prefetch((const void *)(first + 64 * l), 0, 3);
        }
}

/* x86_avx512_attn_kt.c: blocks b0 .. b1 of 16 key rows of the run into kt as key tiles, slots
 * past j1 as 0 (they may lie past the run). kt: the memory of [dim][FX_ATTN_RUN] floats.
 * Prefetches keys->next and values->next a little at a time as it goes. */
void fx_avx512_attn_keys_t(float *kt, const struct fx_kv_run *keys, const struct fx_kv_run *values,
                           int64_t dim, int64_t b0, int64_t b1, int64_t j1);

#endif
