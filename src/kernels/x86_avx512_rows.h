/* AVX-512 row operations (x86_avx512_rows.c), entries of the avx512 table. */
#ifndef FX_KERNELS_X86_AVX512_ROWS_H
#define FX_KERNELS_X86_AVX512_ROWS_H

#include <stdint.h>

void fx_avx512_quantize_act_q8_0(const float *restrict src, void *restrict dst, int64_t n);
void fx_avx512_quantize_act_q8_1(const float *restrict src, void *restrict dst, int64_t n);
void fx_avx512_quantize_act_q8_K(const float *restrict src, void *restrict dst, int64_t n);
void fx_avx512_silu(float *out, const float *x, int64_t n);
void fx_avx512_swiglu(float *out, const float *g, const float *u, int64_t n);
void fx_avx512_sigmoid(float *out, const float *x, int64_t n);
void fx_avx512_sigmoid_glu(float *out, const float *g, const float *u, int64_t n);
void fx_avx512_gelu(float *out, const float *x, int64_t n);
void fx_avx512_geglu(float *out, const float *g, const float *u, int64_t n);
void fx_avx512_softcap(float *x, int64_t n, float cap);
void fx_avx512_swiglu_oai(float *out, const float *g, const float *u, int64_t n, float alpha,
                          float limit);
int64_t fx_avx512_argmax(const float *x, int64_t n);

#endif
