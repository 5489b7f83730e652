/* Reference kernels of the Gated DeltaNet layers (qwen35): the sigmoid gates, the L2 norm of q
 * and k, the causal conv step and the delta-rule step. They compute what llama.cpp's CPU backend
 * computes (ggml's l2_norm keeps its sum of squares in double; the conv sums its taps oldest
 * first), in plain C. */
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

void fx_conv_step_generic(float *out, float *win, const float *x, const float *w, int64_t n_ch,
                          int32_t d_conv) {
    int32_t keep = d_conv - 1;
    for (int64_t c = 0; c < n_ch; c++) {
        float *h = win + c * keep;
        const float *wc = w + c * d_conv;
        float sum = 0.0f;
        for (int32_t t = 0; t < keep; t++)
            sum += wc[t] * h[t];
        sum += wc[keep] * x[c];
        if (keep > 0) {
            memmove(h, h + 1, (size_t)(keep - 1) * sizeof(float));
            h[keep - 1] = x[c];
        }
        out[c] = sum;
    }
}

void fx_delta_step_generic(float *state, const float *q, const float *k, const float *v,
                           float decay, float beta, float scale, float *out, int64_t d) {
    for (int64_t j = 0; j < d; j++) {
        float *m = state + j * d; /* column j of M: M[i][j] for every key index i */
        float mk = 0.0f;
        for (int64_t i = 0; i < d; i++) {
            m[i] *= decay;
            mk += m[i] * k[i];
        }
        float delta = (v[j] - mk) * beta;
        float mq = 0.0f;
        for (int64_t i = 0; i < d; i++) {
            m[i] += k[i] * delta;
            mq += m[i] * q[i];
        }
        out[j] = mq * scale;
    }
}
