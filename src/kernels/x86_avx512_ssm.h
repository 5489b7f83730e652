/* AVX-512 Gated DeltaNet kernels (x86_avx512_ssm.c), entries of the avx512 table. */
#ifndef FX_KERNELS_X86_AVX512_SSM_H
#define FX_KERNELS_X86_AVX512_SSM_H

#include <stdint.h>

void fx_avx512_delta_step(float *state, const float *q, const float *k, const float *v, float decay,
                          float beta, float scale, float *out, int64_t d);

#endif
