/* The chunked delta rule's steps (kernels.h, delta_rows; generic_ssm.c has the readable
 * form), written once for the SIMD tables. The file that includes this defines, with its own
 * vectors, dot(a, b, n) and scale_add(y, s, x, a, n) (y = y * s + a * x), and its table's
 * delta_rows as a call of delta_rows_simd; only files compiled with their ISA's flags include
 * it. */
#ifndef FX_KERNELS_X86_DELTA_ROWS_H
#define FX_KERNELS_X86_DELTA_ROWS_H

#include <math.h>
#include <string.h>

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

static void delta_rows_simd(const struct fx_delta_state *st, int32_t r0, int32_t n, const float *q,
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
