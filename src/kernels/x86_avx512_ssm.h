/* AVX-512 Gated DeltaNet kernels (x86_avx512_ssm.c), entries of the avx512 table. */
#ifndef FX_KERNELS_X86_AVX512_SSM_H
#define FX_KERNELS_X86_AVX512_SSM_H

#include <stdint.h>

#include "kernels/kernels.h"

void fx_avx512_conv_rows(float *out, float *win, const float *x, int64_t n, int64_t stride,
                         const float *w, int64_t n_ch, int32_t d_conv);
void fx_avx512_delta_rows(const struct fx_delta_state *st, int32_t r0, int32_t n, const float *q,
                          const float *k, const float *v, int64_t in_stride, const float *g,
                          const float *beta, float scale, float *out, int64_t out_stride,
                          float *work, int64_t d);

#endif
