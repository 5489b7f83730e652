/* AVX-512 attention kernels (x86_avx512_attn.c), entries of the avx512 table. */
#ifndef FX_KERNELS_X86_AVX512_ATTN_H
#define FX_KERNELS_X86_AVX512_ATTN_H

#include <stdint.h>

void fx_attn_scores_avx512(float *out, const float *q, const float *keys, int64_t key_stride,
                           int64_t n_keys, int64_t dim, float scale);

void fx_attn_values_avx512(float *out, const float *p, const float *values, int64_t value_stride,
                           int64_t n, int64_t dim);

#endif
