/* AVX-512 chunked delta rule of the Gated DeltaNet layers (kernels.h, delta_rows): the AVX2
 * kernel's steps sixteen keys or values at a time, tails under masks. Every dot has one
 * accumulation order whatever the number of rows of the call, so a row gets the same bits alone
 * or in a batch. */
#if defined(__x86_64__)

#include <math.h>
#include <string.h>

#include "kernels/x86_avx512_ssm.h"

#include <immintrin.h>

/* The first n (0..16) lanes. */
static inline __mmask16 lanes16(int64_t n) {
    return (__mmask16)((1u << n) - 1);
}

static inline float dot(const float *a, const float *b, int64_t n) {
    __m512 acc = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc);
    if (i < n) {
        __mmask16 m = lanes16(n - i);
        acc =
            _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), acc);
    }
    return _mm512_reduce_add_ps(acc);
}

/* y = y * s + a * x (s = 1: a scaled add). */
static inline void scale_add(float *y, float s, const float *x, float a, int64_t n) {
    __m512 vs = _mm512_set1_ps(s), va = _mm512_set1_ps(a);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_fmadd_ps(_mm512_loadu_ps(x + i), va,
                                                _mm512_mul_ps(_mm512_loadu_ps(y + i), vs)));
    if (i < n) {
        __mmask16 m = lanes16(n - i);
        _mm512_mask_storeu_ps(y + i, m,
                              _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, x + i), va,
                                              _mm512_mul_ps(_mm512_maskz_loadu_ps(m, y + i), vs)));
    }
}

/* The chunk folded into M0, column by column (see the generic fold_chunk). */
static void fold_chunk(const struct fx_delta_state *st, int64_t d) {
    float g_last = st->gs[FX_DELTA_CHUNK - 1], decay = expf(g_last);
    float w[FX_DELTA_CHUNK];
    for (int32_t s = 0; s < FX_DELTA_CHUNK; s++)
        w[s] = expf(g_last - st->gs[s]);
    for (int64_t j = 0; j < d; j++) {
        float *m = st->m0 + j * d;
        scale_add(m, decay, st->ks, w[0] * st->us[j], d);
        for (int32_t s = 1; s < FX_DELTA_CHUNK; s++)
            scale_add(m, 1.0f, st->ks + s * d, w[s] * st->us[s * d + j], d);
    }
}

void fx_avx512_delta_rows(const struct fx_delta_state *st, int32_t r0, int32_t n, const float *q,
                          const float *k, const float *v, int64_t in_stride, const float *g,
                          const float *beta, float scale, float *out, int64_t out_stride,
                          float *work, int64_t d) {
    for (int64_t j = 0; j < d; j++) {
        const float *m = st->m0 + j * d;
        for (int32_t r = 0; r < n; r++) {
            work[r * 2 * d + j] = dot(m, k + r * in_stride, d);
            work[r * 2 * d + d + j] = dot(m, q + r * in_stride, d);
        }
    }
    for (int32_t r = 0; r < n; r++) {
        int32_t c = r0 + r;
        const float *kr = k + r * in_stride, *qr = q + r * in_stride, *vr = v + r * in_stride;
        const float *mk = work + r * 2 * d, *mq = mk + d;
        float gc = (c == 0 ? 0.0f : st->gs[c - 1]) + g[r], e = expf(gc);
        float *u = st->us + c * d, *o = out + r * out_stride;
        memcpy(u, vr, (size_t)d * sizeof(float));
        scale_add(u, 1.0f, mk, -e, d);
        for (int32_t s = 0; s < c; s++)
            scale_add(u, 1.0f, st->us + s * d, -(dot(kr, st->ks + s * d, d) * expf(gc - st->gs[s])),
                      d);
        scale_add(u, beta[r], u, 0.0f, d);
        memcpy(st->ks + c * d, kr, (size_t)d * sizeof(float));
        st->gs[c] = gc;
        memset(o, 0, (size_t)d * sizeof(float));
        scale_add(o, 1.0f, mq, e, d);
        for (int32_t s = 0; s <= c; s++)
            scale_add(o, 1.0f, st->us + s * d, dot(qr, st->ks + s * d, d) * expf(gc - st->gs[s]),
                      d);
        scale_add(o, scale, o, 0.0f, d);
        if (c == FX_DELTA_CHUNK - 1)
            fold_chunk(st, d);
    }
}

#endif
