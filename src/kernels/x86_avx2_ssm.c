/* AVX2 chunked delta rule of the Gated DeltaNet layers (kernels.h, delta_rows): the generic
 * kernel's steps, each dot product and scaled add eight keys or values at a time with fused
 * multiply-adds (tails under masks). Every dot has one accumulation order whatever the number of
 * rows of the call, so a row gets the same bits alone or in a batch; the order differs from the
 * generic kernel's, so the tables agree within the kernel tests' tolerance. */
#if defined(__x86_64__)

#include <math.h>

#include "kernels/x86_avx2.h"

FX_INLINE float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

FX_INLINE float dot(const float *a, const float *b, int64_t n) {
    __m256 acc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
    if (i < n) {
        __m256i m = lanes8((int)(n - i));
        acc = _mm256_fmadd_ps(_mm256_maskload_ps(a + i, m), _mm256_maskload_ps(b + i, m), acc);
    }
    return hsum8(acc);
}

/* y = y * s + a * x (s = 1: a scaled add). */
FX_INLINE void scale_add(float *y, float s, const float *x, float a, int64_t n) {
    __m256 vs = _mm256_set1_ps(s), va = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(_mm256_loadu_ps(x + i), va,
                                                _mm256_mul_ps(_mm256_loadu_ps(y + i), vs)));
    if (i < n) {
        __m256i m = lanes8((int)(n - i));
        _mm256_maskstore_ps(y + i, m,
                            _mm256_fmadd_ps(_mm256_maskload_ps(x + i, m), va,
                                            _mm256_mul_ps(_mm256_maskload_ps(y + i, m), vs)));
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

void fx_avx2_delta_rows(const struct fx_delta_state *st, int32_t r0, int32_t n, const float *q,
                        const float *k, const float *v, int64_t in_stride, const float *g,
                        const float *beta, float scale, float *out, int64_t out_stride, float *work,
                        int64_t d) {
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
