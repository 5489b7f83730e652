/* AVX-512 attention kernels (x86_avx512_attn.c), entries of the avx512 table. */
#ifndef FX_KERNELS_X86_AVX512_ATTN_H
#define FX_KERNELS_X86_AVX512_ATTN_H

#include <stdint.h>

void fx_attn_run_avx512(float *acc, float *m, float *l, const float *q, int64_t q_stride,
                        int64_t n_q, const float *keys, int64_t k_stride, const float *values,
                        int64_t v_stride, int64_t n_keys, int64_t dim_k, int64_t dim_v, float scale,
                        float softcap);

#endif
