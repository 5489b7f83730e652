/* Attention with an online softmax (kernels.h, attn_run / attn_finish): the plain C reference.
 * Each key's score is a dot product summed in element order; the values are accumulated in key
 * order, each step a multiply and an add. */
#include <math.h>

#include "kernels/generic.h"

/* The most keys one run may hold: the decoder's runs are at most 64. */
#define MAX_RUN 256

void fx_attn_run_generic(float *acc, float *m, float *l, const float *q, int64_t q_stride,
                         int64_t n_q, const float *keys, int64_t k_stride, const float *values,
                         int64_t v_stride, int64_t n_keys, int64_t dim_k, int64_t dim_v,
                         float scale, float softcap) {
    for (int64_t j0 = 0; j0 < n_keys; j0 += MAX_RUN) {
        int64_t nk = n_keys - j0 < MAX_RUN ? n_keys - j0 : MAX_RUN;
        for (int64_t o = 0; o < n_q; o++) {
            float s[MAX_RUN];
            float run_max = -INFINITY;
            for (int64_t j = 0; j < nk; j++) {
                const float *k = keys + (j0 + j) * k_stride;
                float dot = 0.0f;
                for (int64_t i = 0; i < dim_k; i++)
                    dot += q[o * q_stride + i] * k[i];
                s[j] = dot * scale;
                if (softcap > 0.0f)
                    s[j] = softcap * tanhf(s[j] / softcap);
                if (s[j] > run_max)
                    run_max = s[j];
            }
            float m_new = m[o] > run_max ? m[o] : run_max;
            float c = expf(m[o] - m_new); /* 0 for the first run (m = -inf) */
            float *a = acc + o * dim_v;
            float sum = 0.0f;
            for (int64_t i = 0; i < dim_v; i++)
                a[i] *= c;
            for (int64_t j = 0; j < nk; j++) {
                float p = expf(s[j] - m_new);
                sum += p;
                const float *v = values + (j0 + j) * v_stride;
                for (int64_t i = 0; i < dim_v; i++)
                    a[i] += p * v[i];
            }
            l[o] = l[o] * c + sum;
            m[o] = m_new;
        }
    }
}

void fx_attn_finish_generic(float *out, int64_t out_stride, const float *acc, const float *m,
                            const float *l, const float *sinks, int64_t n_q, int64_t dim_v) {
    for (int64_t o = 0; o < n_q; o++) {
        float *y = out + o * out_stride;
        const float *a = acc + o * dim_v;
        float mo = m[o], lo = l[o];
        if (sinks) { /* rescale to the larger of the two maxima so that nothing overflows */
            float top = sinks[o] > mo ? sinks[o] : mo;
            lo = lo * expf(mo - top) + expf(sinks[o] - top);
            float c = expf(mo - top);
            float inv = lo > 0.0f ? c / lo : 0.0f;
            for (int64_t i = 0; i < dim_v; i++)
                y[i] = a[i] * inv;
            continue;
        }
        float inv = lo > 0.0f ? 1.0f / lo : 0.0f;
        for (int64_t i = 0; i < dim_v; i++)
            y[i] = a[i] * inv;
    }
}
