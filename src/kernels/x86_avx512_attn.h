/* AVX-512 attention kernels (x86_avx512_attn.c), entries of the avx512 table. */
#ifndef FX_KERNELS_X86_AVX512_ATTN_H
#define FX_KERNELS_X86_AVX512_ATTN_H

#include <stdint.h>

#include "kernels/kernels.h"
#include "kernels/types.h"

void fx_attn_run_avx512(struct fx_attn_state *st, const int32_t *first, const int32_t *last,
                        const struct fx_kv_run *keys, const struct fx_kv_run *values,
                        int64_t n_keys, float scale, float softcap);

/* How x86_avx512_attn_kt.c lays out a run's keys in kt, by cache type. f32: kt[i][16 b + jj] =
 * element i of key 16 b + jj, as f32 ([dim][FX_ATTN_RUN] floats); f16: the same as halves
 * (uint16_t [dim][FX_ATTN_RUN]); q8_0: block b of 16 keys at byte fx_avx512_kt_q8_block(dim) * b,
 * its codes int8_t [dim][16] and then their scales as f32 [dim / FX_QK][16] (d of key jj for
 * elements 32 s .. 32 s + 31 at [s][jj]), so the scores widen them as kv_load does. */
enum fx_avx512_kt_form { FX_KT_F32, FX_KT_F16, FX_KT_Q8 };

/* Bytes of one block of 16 q8_0 keys in kt: 16 codes and 16 / FX_QK * 4 bytes of scale per
 * element (a multiple of 64 for every head size that is a multiple of FX_QK). */
static inline int64_t fx_avx512_kt_q8_block(int64_t dim) {
    return dim * 16 + dim / FX_QK * 16 * (int64_t)sizeof(float);
}

/* x86_avx512_attn_kt.c: blocks b0 .. b1 of 16 keys of the run into kt in their type's form,
 * keys past j1 as 0 (they may lie past the run). kt: the memory of [dim][FX_ATTN_RUN] floats.
 * Prefetches keys->next and values->next a little at a time as it goes. */
void fx_avx512_attn_keys_t(float *kt, const struct fx_kv_run *keys, const struct fx_kv_run *values,
                           int64_t dim, int64_t b0, int64_t b1, int64_t j1);

#endif
