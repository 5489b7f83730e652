/* Reference kernels of the Gated DeltaNet layers (qwen35): the sigmoid gates, the L2 norm of q
 * and k, the causal conv step and the chunked delta rule (kernels.h). The first three compute
 * what llama.cpp's CPU backend computes (ggml's l2_norm keeps its sum of squares in double; the
 * conv sums its taps oldest first); the delta rule is its recurrence in the chunked form, the
 * same values in another rounding. */
#include <math.h>
#include <string.h>

#include "kernels/generic.h"

static float sigmoid(float x) {
    return 1.0f / (1.0f + expf(-x));
}

void fx_sigmoid_generic(float *out, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        out[i] = sigmoid(x[i]);
}

void fx_sigmoid_glu_generic(float *out, const float *g, const float *u, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        out[i] = sigmoid(g[i]) * u[i];
}

void fx_l2_norm_generic(float *out, const float *x, int64_t n, float eps) {
    double sum = 0;
    for (int64_t i = 0; i < n; i++)
        sum += (double)(x[i] * x[i]);
    float scale = 1.0f / fmaxf(sqrtf((float)sum), eps);
    for (int64_t i = 0; i < n; i++)
        out[i] = x[i] * scale;
}

void fx_conv_rows_generic(float *out, float *win, const float *x, int64_t n, int64_t stride,
                          const float *w, int64_t n_ch, int32_t d_conv) {
    int32_t keep = d_conv - 1;
    for (int64_t r = 0; r < n; r++)
        for (int64_t c = 0; c < n_ch; c++) {
            float *h = win + c * keep, xc = x[r * stride + c];
            const float *wc = w + c * d_conv;
            float sum = 0.0f;
            for (int32_t t = 0; t < keep; t++)
                sum += wc[t] * h[t];
            sum += wc[keep] * xc;
            for (int32_t t = 0; t + 1 < keep; t++)
                h[t] = h[t + 1];
            if (keep > 0)
                h[keep - 1] = xc;
            out[r * stride + c] = sum;
        }
}

static float dot(const float *a, const float *b, int64_t n) {
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i++)
        sum += a[i] * b[i];
    return sum;
}

/* y += a * x */
static void axpy(float *y, const float *x, float a, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        y[i] += a * x[i];
}

/* The chunk's rows folded into M0 (kernels.h): M0 <- e^G_last M0 + sum_s e^(G_last - G_s) k_s
 * u_s^T, row by row. */
static void fold_chunk(const struct fx_delta_state *st, int64_t d) {
    float g_last = st->gs[FX_DELTA_CHUNK - 1], decay = expf(g_last);
    for (int64_t i = 0; i < d; i++) {
        float *m = st->m0 + i * d;
        for (int64_t j = 0; j < d; j++)
            m[j] *= decay;
        for (int32_t s = 0; s < FX_DELTA_CHUNK; s++)
            axpy(m, st->us + s * d, expf(g_last - st->gs[s]) * st->ks[s * d + i], d);
    }
}

void fx_delta_rows_generic(const struct fx_delta_state *st, int32_t r0, int32_t n, const float *q,
                           const float *k, const float *v, int64_t in_stride, const float *g,
                           const float *beta, float scale, float *out, int64_t out_stride,
                           float *work, int64_t d) {
    /* work[r] = [M0^T k_r | M0^T q_r]: M0's rows in order, each scaled into every row's sums. */
    memset(work, 0, (size_t)(n * 2 * d) * sizeof(float));
    for (int64_t i = 0; i < d; i++) {
        const float *m = st->m0 + i * d;
        for (int32_t r = 0; r < n; r++) {
            axpy(work + r * 2 * d, m, k[r * in_stride + i], d);
            axpy(work + r * 2 * d + d, m, q[r * in_stride + i], d);
        }
    }
    for (int32_t r = 0; r < n; r++) {
        int32_t c = r0 + r; /* the row's place in the chunk */
        const float *kr = k + r * in_stride, *qr = q + r * in_stride, *vr = v + r * in_stride;
        const float *mk = work + r * 2 * d, *mq = mk + d;
        float gc = (c == 0 ? 0.0f : st->gs[c - 1]) + g[r], e = expf(gc);
        float *u = st->us + c * d, *o = out + r * out_stride;
        for (int64_t j = 0; j < d; j++)
            u[j] = vr[j] - e * mk[j];
        for (int32_t s = 0; s < c; s++)
            axpy(u, st->us + s * d, -(dot(kr, st->ks + s * d, d) * expf(gc - st->gs[s])), d);
        for (int64_t j = 0; j < d; j++)
            u[j] *= beta[r];
        memcpy(st->ks + c * d, kr, (size_t)d * sizeof(float));
        st->gs[c] = gc;
        for (int64_t j = 0; j < d; j++)
            o[j] = e * mq[j];
        for (int32_t s = 0; s <= c; s++)
            axpy(o, st->us + s * d, dot(qr, st->ks + s * d, d) * expf(gc - st->gs[s]), d);
        for (int64_t j = 0; j < d; j++)
            o[j] *= scale;
        if (c == FX_DELTA_CHUNK - 1)
            fold_chunk(st, d);
    }
}
