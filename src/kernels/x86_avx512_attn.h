/* AVX-512 attention kernels (x86_avx512_attn.c), entries of the avx512 table. */
#ifndef FX_KERNELS_X86_AVX512_ATTN_H
#define FX_KERNELS_X86_AVX512_ATTN_H

#include <stdint.h>

#include "kernels/kernels.h"

void fx_attn_run_avx512(struct fx_attn_state *st, const int32_t *first, const int32_t *last,
                        const float *keys, int64_t k_stride, const float *values, int64_t v_stride,
                        int64_t n_keys, float scale, float softcap);

#endif
