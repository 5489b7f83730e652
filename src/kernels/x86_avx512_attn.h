/* AVX-512 attention kernels (x86_avx512_attn.c), entries of the avx512 table. */
#ifndef FX_KERNELS_X86_AVX512_ATTN_H
#define FX_KERNELS_X86_AVX512_ATTN_H

#include <stdint.h>

#include "kernels/kernels.h"

void fx_attn_run_avx512(struct fx_attn_state *st, const int32_t *first, const int32_t *last,
                        const struct fx_kv_run *keys, const struct fx_kv_run *values,
                        int64_t n_keys, float scale, float softcap);

/* x86_avx512_attn_kt.c: kt[i][16 b + jj] = element i of key 16 b + jj of the run, as f32 (f16
 * keys: as f16, kt then uint16_t [dim][FX_ATTN_RUN]), for blocks b0 .. b1 of 16 keys, keys past
 * j1 as 0 (they may lie past the run). kt: [dim][FX_ATTN_RUN]. */
void fx_avx512_attn_keys_t(float *kt, const struct fx_kv_run *keys, int64_t dim, int64_t b0,
                           int64_t b1, int64_t j1);

#endif
