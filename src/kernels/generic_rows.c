/* Reference row operations: norms, softmax, rope, activations, elementwise arithmetic, argmax;
 * and the rope angle cache. They compute what llama.cpp's CPU backend computes (the fixtures
 * README, "What llama.cpp computes"), in f32 with the sums that ggml keeps in double kept in
 * double here too. */
#include <math.h>

#include "kernels/generic.h"
#include "kernels/half.h"

void fx_rms_norm_generic(float *out, const float *x, const float *w, int64_t n, float eps) {
    double sum = 0;
    for (int64_t i = 0; i < n; i++)
        sum += (double)(x[i] * x[i]);
    float mean = (float)(sum / (double)n);
    float scale = 1.0f / sqrtf(mean + eps);
    for (int64_t i = 0; i < n; i++)
        out[i] = w ? (x[i] * scale) * w[i] : x[i] * scale;
}

void fx_softcap_generic(float *x, int64_t n, float cap) {
    for (int64_t i = 0; i < n; i++)
        x[i] = cap * tanhf(x[i] / cap);
}

void fx_softmax_generic(float *x, int64_t n, float sink) {
    float max = sink;
    for (int64_t i = 0; i < n; i++)
        if (x[i] > max)
            max = x[i];
    if (max == -INFINITY) { /* everything masked */
        for (int64_t i = 0; i < n; i++)
            x[i] = 0.0f;
        return;
    }
    double sum = 0;
    for (int64_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - max); /* exp(-inf) = 0 for masked entries */
        sum += (double)x[i];
    }
    if (sink != -INFINITY)
        sum += (double)expf(sink - max);
    float inv = (float)(1.0 / sum);
    for (int64_t i = 0; i < n; i++)
        x[i] *= inv;
}

void fx_rope_generic(float *x, int64_t n_heads, int64_t head_stride, int32_t n_dims,
                     enum fx_rope_mode mode, const float *cs) {
    int32_t half = n_dims / 2;
    for (int64_t h = 0; h < n_heads; h++) {
        float *v = x + h * head_stride;
        for (int32_t i = 0; i < half; i++) {
            /* normal: the adjacent pair (2i, 2i+1); neox: the pair (i, i + n_dims/2) */
            int32_t a = mode == FX_ROPE_NEOX ? i : 2 * i;
            int32_t b = mode == FX_ROPE_NEOX ? i + half : 2 * i + 1;
            float c = cs[2 * i], s = cs[2 * i + 1];
            float x0 = v[a], x1 = v[b];
            v[a] = x0 * c - x1 * s;
            v[b] = x0 * s + x1 * c;
        }
    }
}

/* ---- activations --------------------------------------------------------------------------- */

static float silu(float x) {
    return x / (1.0f + expf(-x));
}

static float gelu(float x) {
    const float sqrt_2_over_pi = 0.79788456080286535587989211986876f;
    const float coef_a = 0.044715f;
    return 0.5f * x * (1.0f + tanhf(sqrt_2_over_pi * x * (1.0f + coef_a * x * x)));
}

/* ggml evaluates GELU on CPU through a table indexed by the fp16 bits of x, holding the GELU of
 * each fp16 value rounded to fp16; outside [-10, 10] it returns 0 or x. Computing the entry
 * directly gives the same value as the table. */
static float gelu_f16(float x) {
    if (x <= -10.0f)
        return 0.0f;
    if (x >= 10.0f)
        return x;
    return fx_fp16_to_f32(fx_f32_to_fp16(gelu(fx_fp16_to_f32(fx_f32_to_fp16(x)))));
}

/* One loop per shape, the activation as a parameter; the compiler inlines the static ones. */
static inline void unary_loop(float *out, const float *x, int64_t n, float (*f)(float)) {
    for (int64_t i = 0; i < n; i++)
        out[i] = f(x[i]);
}

static inline void glu_loop(float *out, const float *g, const float *u, int64_t n,
                            float (*f)(float)) {
    for (int64_t i = 0; i < n; i++)
        out[i] = f(g[i]) * u[i];
}

void fx_silu_generic(float *out, const float *x, int64_t n) {
    unary_loop(out, x, n, silu);
}

void fx_gelu_generic(float *out, const float *x, int64_t n) {
    unary_loop(out, x, n, gelu);
}

void fx_gelu_f16_generic(float *out, const float *x, int64_t n) {
    unary_loop(out, x, n, gelu_f16);
}

void fx_swiglu_generic(float *out, const float *g, const float *u, int64_t n) {
    glu_loop(out, g, u, n, silu);
}

void fx_geglu_generic(float *out, const float *g, const float *u, int64_t n) {
    glu_loop(out, g, u, n, gelu);
}

void fx_geglu_f16_generic(float *out, const float *g, const float *u, int64_t n) {
    glu_loop(out, g, u, n, gelu_f16);
}

void fx_swiglu_oai_generic(float *out, const float *g, const float *u, int64_t n, float alpha,
                           float limit) {
    for (int64_t i = 0; i < n; i++) {
        float x = fminf(g[i], limit);
        float y = fminf(fmaxf(u[i], -limit), limit);
        out[i] = x / (1.0f + expf(alpha * -x)) * (y + 1.0f);
    }
}

/* ---- elementwise and reductions ------------------------------------------------------------ */

void fx_add_generic(float *out, const float *a, const float *b, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        out[i] = a[i] + b[i];
}

void fx_scale_generic(float *out, const float *x, float s, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        out[i] = x[i] * s;
}

void fx_axpy_generic(float *y, const float *x, float a, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        y[i] += a * x[i];
}

int64_t fx_argmax_generic(const float *x, int64_t n) {
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best] || (x[best] != x[best] && x[i] == x[i])) /* NaN never wins */
            best = i;
    return best;
}

/* ---- rope angles --------------------------------------------------------------------------- */

/* YaRN's correction range: the dimension whose wavelength fits n_rot times into the original
 * context, for n_rot = beta_fast (start) and beta_slow (end). */
static float yarn_corr_dim(int32_t n_dims, int32_t n_ctx_orig, float n_rot, float base) {
    return (float)n_dims * logf((float)n_ctx_orig / (n_rot * 2 * (float)M_PI)) / (2 * logf(base));
}

void fx_rope_cache(const struct fx_rope_params *p, float pos, float *cs) {
    float theta_scale = powf(p->freq_base, -2.0f / (float)p->n_dims);
    float corr_lo = 0, corr_hi = 0;
    if (p->ext_factor != 0.0f) {
        float start = floorf(yarn_corr_dim(p->n_dims, p->n_ctx_orig, p->beta_fast, p->freq_base));
        float end = ceilf(yarn_corr_dim(p->n_dims, p->n_ctx_orig, p->beta_slow, p->freq_base));
        corr_lo = fmaxf(0.0f, start);
        corr_hi = fminf((float)(p->n_dims - 1), end);
    }
    float theta = pos; /* theta_i = pos * theta_scale^i, advanced by multiplication as ggml */
    for (int32_t i = 0; i < p->n_dims / 2; i++) {
        float ff = p->freq_factors ? p->freq_factors[i] : 1.0f;
        float extrap = theta / ff;
        float interp = p->freq_scale * extrap;
        float angle = interp, mscale = p->attn_factor;
        if (p->ext_factor != 0.0f) {
            /* ramp: 1 below the correction range (keep the original frequency), 0 above it */
            float y = ((float)i - corr_lo) / fmaxf(0.001f, corr_hi - corr_lo);
            float ramp = 1 - fminf(1, fmaxf(0, y));
            float mix = ramp * p->ext_factor;
            angle = interp * (1 - mix) + extrap * mix;
            mscale *= 1.0f + 0.1f * logf(1.0f / p->freq_scale);
        }
        cs[2 * i] = cosf(angle) * mscale;
        cs[2 * i + 1] = sinf(angle) * mscale;
        theta *= theta_scale;
    }
}
