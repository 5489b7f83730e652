/* kernels: the row operations and the rope angle cache, for every table this CPU supports,
 * against float64 references of the definitions in kernels.h (which are llama.cpp's, see the
 * fixtures README, "What llama.cpp computes").
 *
 * Tolerances: each operation is a handful of f32 operations per element and libm's expf, tanhf,
 * cosf, sinf (within an ulp or two), so results are within 1e-6 relative of float64 (a few
 * units of 2^-24); sums are kept in double. The rope angles are the exception: llama.cpp
 * advances the angle by i repeated f32 multiplications, so angle i carries about 2(i + 2)
 * roundings, and the bound scales with the angle. */
#include "fx_test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/half.h"
#include "kernels/kernels.h"
#include "kernels_ref.h"

#define REL 1e-6

static void check_close(const char *what, const char *table, int64_t i, double got, double want,
                        double tol) {
    if (!(fabs(got - want) <= tol))
        fail_msg("%s (%s) element %lld: got %.9g, want %.9g (tolerance %.3g)", what, table,
                 (long long)i, got, want, tol);
}

static const int64_t lengths[] = {1, 7, 64, 255, 4096};
#define N_LENGTHS (sizeof lengths / sizeof lengths[0])

FX_TEST(kernels_rms_norm_matches_double) {
    const struct fx_kernels *tables[3];
    int n_tables = kref_tables(tables);
    struct fx_test_rng rng = {101};
    for (size_t li = 0; li < N_LENGTHS; li++) {
        int64_t n = lengths[li];
        float *x = kref_alloc((size_t)n * 4, 4), *w = kref_alloc((size_t)n * 4, 4);
        float *out = kref_alloc((size_t)n * 4, 4);
        kref_normal(x, n, &rng);
        for (int64_t i = 0; i < n; i++)
            w[i] = 1.0f + 0.1f * (float)fx_test_rng_normal(&rng);
        for (int k = 0; k < n_tables; k++) {
            for (int with_w = 0; with_w < 2; with_w++) {
                float eps = with_w ? 1e-5f : 1e-6f;
                double ss = 0;
                for (int64_t i = 0; i < n; i++)
                    ss += (double)x[i] * x[i];
                double scale = 1.0 / sqrt(ss / (double)n + eps);
                tables[k]->rms_norm(out, x, with_w ? w : NULL, n, eps);
                for (int64_t i = 0; i < n; i++) {
                    double want = x[i] * scale * (with_w ? w[i] : 1.0);
                    check_close("rms_norm", tables[k]->name, i, out[i], want, REL * fabs(want));
                }
                /* In place gives the same. */
                float *y = malloc((size_t)n * 4);
                assert_non_null(y);
                memcpy(y, x, (size_t)n * 4);
                tables[k]->rms_norm(y, y, with_w ? w : NULL, n, eps);
                assert_memory_equal(y, out, (size_t)n * 4);
                free(y);
            }
        }
        kref_free(x);
        kref_free(w);
        kref_free(out);
    }
}

FX_TEST(kernels_softmax_masks_and_sinks) {
    const struct fx_kernels *tables[3];
    int n_tables = kref_tables(tables);
    struct fx_test_rng rng = {102};
    for (size_t li = 0; li < N_LENGTHS; li++) {
        int64_t n = lengths[li];
        float *x = kref_alloc((size_t)n * 4, 4), *y = kref_alloc((size_t)n * 4, 4);
        for (int variant = 0; variant < 4; variant++) {
            /* 0: plain; 1: masked entries; 2: masked and a sink; 3: everything masked + sink */
            for (int64_t i = 0; i < n; i++) {
                x[i] = 4.0f * (float)fx_test_rng_normal(&rng);
                if ((variant == 1 || variant == 2) && fx_test_rng_f64(&rng) < 0.3 && i > 0)
                    x[i] = -INFINITY;
                if (variant == 3)
                    x[i] = -INFINITY;
            }
            float sink = variant >= 2 ? 1.5f : -INFINITY;
            double max = sink, sum = 0;
            for (int64_t i = 0; i < n; i++)
                max = fmax(max, x[i]);
            for (int64_t i = 0; i < n; i++)
                sum += exp((double)x[i] - max);
            if (sink != -INFINITY)
                sum += exp((double)sink - max);
            for (int k = 0; k < n_tables; k++) {
                memcpy(y, x, (size_t)n * 4);
                tables[k]->softmax(y, n, sink);
                for (int64_t i = 0; i < n; i++) {
                    if (x[i] == -INFINITY) {
                        assert_true(y[i] == 0.0f);
                        continue;
                    }
                    double want = exp((double)x[i] - max) / sum;
                    check_close("softmax", tables[k]->name, i, y[i], want, 2 * REL * want + 1e-12);
                }
            }
        }
        kref_free(x);
        kref_free(y);
    }
    /* A row with nothing visible and no sink: zeros, not NaN. */
    for (int k = 0; k < n_tables; k++) {
        float z[3] = {-INFINITY, -INFINITY, -INFINITY};
        tables[k]->softmax(z, 3, -INFINITY);
        for (int i = 0; i < 3; i++)
            assert_true(z[i] == 0.0f);
    }
}

FX_TEST(kernels_softcap_matches_double) {
    const struct fx_kernels *tables[3];
    int n_tables = kref_tables(tables);
    struct fx_test_rng rng = {103};
    float x[255], y[255];
    for (int i = 0; i < 255; i++)
        x[i] = 30.0f * (float)fx_test_rng_normal(&rng);
    for (int k = 0; k < n_tables; k++) {
        for (int c = 0; c < 2; c++) {
            float cap = c ? 5.0f : 30.0f;
            memcpy(y, x, sizeof x);
            tables[k]->softcap(y, 255, cap);
            for (int i = 0; i < 255; i++)
                check_close("softcap", tables[k]->name, i, y[i], cap * tanh((double)x[i] / cap),
                            REL * cap);
        }
    }
}

/* ---- rope ---------------------------------------------------------------------------------- */

/* The definition in kernels.h, in double. */
static void rope_ref(const struct fx_rope_params *p, double pos, int32_t i, double *c, double *s) {
    double theta = pos * pow(p->freq_base, -2.0 * i / p->n_dims);
    double extrap = theta / (p->freq_factors ? p->freq_factors[i] : 1.0);
    double angle = p->freq_scale * extrap, mscale = p->attn_factor;
    if (p->ext_factor != 0) {
        double r_fast =
            p->n_dims * log(p->n_ctx_orig / (p->beta_fast * 2 * M_PI)) / (2 * log(p->freq_base));
        double r_slow =
            p->n_dims * log(p->n_ctx_orig / (p->beta_slow * 2 * M_PI)) / (2 * log(p->freq_base));
        double lo = fmax(0, floor(r_fast)), hi = fmin(p->n_dims - 1, ceil(r_slow));
        double ramp = 1 - fmin(1, fmax(0, (i - lo) / fmax(0.001, hi - lo)));
        double mix = ramp * p->ext_factor;
        angle = angle * (1 - mix) + extrap * mix;
        mscale *= 1 + 0.1 * log(1 / p->freq_scale);
    }
    *c = cos(angle) * mscale;
    *s = sin(angle) * mscale;
}

FX_TEST(kernels_rope_cache_matches_formula) {
    float ff[32];
    for (int i = 0; i < 32; i++)
        ff[i] = 1.0f + (float)(i % 8); /* llama3-style divisors */
    const struct fx_rope_params configs[] = {
        {.n_dims = 64, .freq_base = 10000, .freq_scale = 1, .attn_factor = 1},
        {.n_dims = 64, .freq_base = 1e6f, .freq_scale = 0.25f, .attn_factor = 1}, /* linear */
        {.n_dims = 64, .freq_base = 500000, .freq_scale = 1, .attn_factor = 1, .freq_factors = ff},
        {.n_dims = 32, .freq_base = 10000, .freq_scale = 1, .attn_factor = 0.5f}, /* partial */
        /* gpt-oss: YaRN x32 from 4096 */
        {.n_dims = 64,
         .freq_base = 150000,
         .freq_scale = 1.0f / 32,
         .ext_factor = 1,
         .attn_factor = 1,
         .beta_fast = 32,
         .beta_slow = 1,
         .n_ctx_orig = 4096},
    };
    static const float positions[] = {0, 1, 17, 255, 4095};
    float cs[64];
    for (size_t c = 0; c < sizeof configs / sizeof configs[0]; c++) {
        const struct fx_rope_params *p = &configs[c];
        for (size_t pi = 0; pi < sizeof positions / sizeof positions[0]; pi++) {
            fx_rope_cache(p, positions[pi], cs);
            for (int32_t i = 0; i < p->n_dims / 2; i++) {
                double wc, ws;
                rope_ref(p, positions[pi], i, &wc, &ws);
                double angle = positions[pi] * pow(p->freq_base, -2.0 * i / p->n_dims);
                double scale = fabs(wc) + fabs(ws);
                double tol = scale * (angle * (2 * i + 4) * 0x1p-24 + 4 * REL);
                check_close("rope cos", "cache", i, cs[2 * i], wc, tol);
                check_close("rope sin", "cache", i, cs[2 * i + 1], ws, tol);
            }
        }
    }
    /* gpt-oss at position 0: cos = 1 + 0.1 ln 32 (the fixtures README's 1.3466), sin = 0. */
    fx_rope_cache(&configs[4], 0, cs);
    assert_float_equal(cs[0], 1.0 + 0.1 * log(32.0), 1e-6);
    assert_float_equal(cs[1], 0.0f, 0.0f);
}

FX_TEST(kernels_rope_rotates_pairs) {
    const struct fx_kernels *tables[3];
    int n_tables = kref_tables(tables);
    struct fx_test_rng rng = {104};
    const int64_t n_heads = 3, stride = 80; /* heads of up to 64 dims, 80 floats apart */
    float *x = malloc((size_t)(n_heads * stride) * 4), *y = malloc((size_t)(n_heads * stride) * 4);
    float cs[64];
    assert_non_null(x);
    assert_non_null(y);
    kref_normal(x, n_heads * stride, &rng);
    for (int32_t n_dims = 32; n_dims <= 64; n_dims += 32) {
        struct fx_rope_params p = {
            .n_dims = n_dims, .freq_base = 10000, .freq_scale = 1, .attn_factor = 1};
        fx_rope_cache(&p, 37, cs);
        for (int mode = FX_ROPE_NORMAL; mode <= FX_ROPE_NEOX; mode++) {
            for (int k = 0; k < n_tables; k++) {
                memcpy(y, x, (size_t)(n_heads * stride) * 4);
                tables[k]->rope(y, n_heads, stride, n_dims, (enum fx_rope_mode)mode, cs);
                for (int64_t h = 0; h < n_heads; h++) {
                    const float *a = x + h * stride;
                    const float *b = y + h * stride;
                    for (int32_t i = 0; i < n_dims / 2; i++) {
                        int32_t i0 = mode == FX_ROPE_NEOX ? i : 2 * i;
                        int32_t i1 = mode == FX_ROPE_NEOX ? i + n_dims / 2 : 2 * i + 1;
                        double c = cs[2 * i], s = cs[2 * i + 1];
                        double tol = REL * (fabs(a[i0]) + fabs(a[i1]));
                        check_close("rope x0", tables[k]->name, i0, b[i0], a[i0] * c - a[i1] * s,
                                    tol);
                        check_close("rope x1", tables[k]->name, i1, b[i1], a[i0] * s + a[i1] * c,
                                    tol);
                    }
                    /* Dimensions past n_dims and the gap to the next head are untouched. */
                    assert_memory_equal(b + n_dims, a + n_dims, (size_t)(stride - n_dims) * 4);
                }
            }
        }
    }
    free(x);
    free(y);
}

/* Every table's rope gives the generic bits: the same products and sums in f32, for head sizes
 * that its vectors cover (multiples of 16) and for those that it hands to the generic loop. */
FX_TEST(kernels_rope_gives_the_generic_bits) {
    const struct fx_kernels *tables[3];
    int n_tables = kref_tables(tables);
    struct fx_test_rng rng = {105};
    const int64_t n_heads = 5, stride = 136; /* heads of up to 128 dims, 136 floats apart */
    float *x = malloc((size_t)(n_heads * stride) * 4),
          *want = malloc((size_t)(n_heads * stride) * 4),
          *got = malloc((size_t)(n_heads * stride) * 4);
    float cs[128];
    assert_non_null(x);
    assert_non_null(want);
    assert_non_null(got);
    kref_normal(x, n_heads * stride, &rng);
    const int32_t dims[] = {16, 24, 32, 40, 64, 128};
    for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++) {
        struct fx_rope_params p = {
            .n_dims = dims[d], .freq_base = 10000, .freq_scale = 1, .attn_factor = 1};
        fx_rope_cache(&p, 1234, cs);
        for (int mode = FX_ROPE_NORMAL; mode <= FX_ROPE_NEOX; mode++) {
            memcpy(want, x, (size_t)(n_heads * stride) * 4);
            fx_kernels_named("generic")->rope(want, n_heads, stride, dims[d],
                                              (enum fx_rope_mode)mode, cs);
            for (int k = 0; k < n_tables; k++) {
                memcpy(got, x, (size_t)(n_heads * stride) * 4);
                tables[k]->rope(got, n_heads, stride, dims[d], (enum fx_rope_mode)mode, cs);
                if (memcmp(got, want, (size_t)(n_heads * stride) * 4) != 0)
                    fail_msg("rope (%s), %d dims, mode %d: not the generic bits", tables[k]->name,
                             dims[d], mode);
            }
        }
    }
    free(x);
    free(want);
    free(got);
}

/* ---- activations --------------------------------------------------------------------------- */

static double silu_d(double x) {
    return x / (1 + exp(-x));
}

static double gelu_d(double x) {
    return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * x * (1 + 0.044715 * x * x)));
}

FX_TEST(kernels_activations_match_double) {
    const struct fx_kernels *tables[3];
    int n_tables = kref_tables(tables);
    struct fx_test_rng rng = {105};
    const int64_t n = 1000;
    float *g = malloc(n * 4), *u = malloc(n * 4), *y = malloc(n * 4);
    assert_non_null(g);
    assert_non_null(u);
    assert_non_null(y);
    for (int64_t i = 0; i < n; i++) {
        g[i] = 6.0f * (float)fx_test_rng_normal(&rng);
        u[i] = 6.0f * (float)fx_test_rng_normal(&rng);
    }
    for (int k = 0; k < n_tables; k++) {
        const struct fx_kernels *t = tables[k];
        t->act[FX_ACT_SILU](y, g, n);
        for (int64_t i = 0; i < n; i++)
            check_close("silu", t->name, i, y[i], silu_d(g[i]), REL * fabs(g[i]) + 1e-30);
        t->act[FX_ACT_GELU](y, g, n);
        for (int64_t i = 0; i < n; i++)
            check_close("gelu", t->name, i, y[i], gelu_d(g[i]), REL * fabs(g[i]) + 1e-30);
        t->glu[FX_ACT_SILU](y, g, u, n);
        for (int64_t i = 0; i < n; i++)
            check_close("swiglu", t->name, i, y[i], silu_d(g[i]) * u[i],
                        REL * fabs(g[i] * u[i]) + 1e-30);
        t->glu[FX_ACT_GELU](y, g, u, n);
        for (int64_t i = 0; i < n; i++)
            check_close("geglu", t->name, i, y[i], gelu_d(g[i]) * u[i],
                        REL * fabs(g[i] * u[i]) + 1e-30);
        /* gpt-oss: the gate clamped above at 7, the up projection to [-7, 7] plus one. */
        t->swiglu_oai(y, g, u, n, 1.702f, 7.0f);
        for (int64_t i = 0; i < n; i++) {
            double x = fmin(g[i], 7), v = fmin(fmax(u[i], -7), 7);
            double a = (double)1.702f; /* the f32 alpha the kernel multiplies by */
            double want = x / (1 + exp(-a * x)) * (v + 1);
            /* v + 1 is rounded in f32, which is relative to |v| + 1, not to |v + 1|; the f32
             * product alpha * x carries 2^-24 relative into exp, |alpha x| 2^-24 out of it. */
            double tol =
                (REL + fabs(a * x) * 0x1p-23) * fabs(x / (1 + exp(-a * x))) * (fabs(v) + 1) + 1e-30;
            check_close("swiglu_oai", t->name, i, y[i], want, tol);
        }
        /* In place on either operand. */
        float *a = malloc(n * 4);
        assert_non_null(a);
        memcpy(a, g, n * 4);
        t->glu[FX_ACT_SILU](a, a, u, n);
        t->glu[FX_ACT_SILU](y, g, u, n);
        assert_memory_equal(a, y, n * 4);
        free(a);
    }
    free(g);
    free(u);
    free(y);
}

/* The SIMD tables compute e^x themselves: SiLU, GELU, the softcap and softmax where it underflows
 * to subnormals and zero and where it overflows, against double. SiLU below x = -88.7 is x / (1 +
 * e^-x) with e^-x overflowing to infinity, so it may give 0 for values under 2^-120 (GELU, x / (1
 * + e^(-2z)), likewise); softmax may be off by a subnormal's last bit. GELU's f32 argument -2z
 * carries its rounding (|2z| 2^-23 relative) into the exponential. */
FX_TEST(kernels_exp_based_ops_hold_at_the_extremes) {
    const struct fx_kernels *tables[3];
    int n_tables = kref_tables(tables);
    const int64_t n = 2101;
    float *x = malloc(n * 4), *y = malloc(n * 4), *u = malloc(n * 4);
    assert_non_null(x);
    assert_non_null(y);
    assert_non_null(u);
    for (int64_t i = 0; i < n; i++) {
        x[i] = -110.0f + 0.1f * (float)i; /* -110 .. 100 */
        u[i] = 1.0f + 0.001f * (float)i;
    }
    for (int k = 0; k < n_tables; k++) {
        const struct fx_kernels *t = tables[k];
        t->act[FX_ACT_SILU](y, x, n);
        for (int64_t i = 0; i < n; i++)
            check_close("silu", t->name, i, y[i], silu_d(x[i]),
                        REL * fabs(silu_d(x[i])) + 0x1p-120);
        t->glu[FX_ACT_SILU](y, x, u, n);
        for (int64_t i = 0; i < n; i++)
            check_close("swiglu", t->name, i, y[i], silu_d(x[i]) * u[i],
                        2 * REL * fabs(silu_d(x[i]) * u[i]) + 0x1p-118);
        /* The generic GELU's 0.5 x (1 + tanh(z)) cancels where tanh(z) nears -1: |x| 2^-22. */
        bool tanh_form = strcmp(t->name, "generic") == 0;
        t->act[FX_ACT_GELU](y, x, n);
        for (int64_t i = 0; i < n; i++) {
            double z = 0.7978845608028654 * x[i] * (1 + 0.044715 * x[i] * x[i]);
            double want = x[i] / (1 + exp(-2 * z));
            double cancel = tanh_form ? fabs(x[i]) * 0x1p-22 : 0;
            check_close("gelu", t->name, i, y[i], want,
                        (REL + fabs(2 * z) * 0x1p-23) * fabs(want) + cancel + 0x1p-120);
        }
        t->glu[FX_ACT_GELU](y, x, u, n);
        for (int64_t i = 0; i < n; i++) {
            double z = 0.7978845608028654 * x[i] * (1 + 0.044715 * x[i] * x[i]);
            double want = x[i] / (1 + exp(-2 * z)) * u[i];
            double cancel = tanh_form ? fabs(x[i] * u[i]) * 0x1p-22 : 0;
            check_close("geglu", t->name, i, y[i], want,
                        (2 * REL + fabs(2 * z) * 0x1p-23) * fabs(want) + cancel + 0x1p-118);
        }
        memcpy(y, x, n * 4);
        t->softcap(y, n, 30.0f);
        for (int64_t i = 0; i < n; i++)
            check_close("softcap", t->name, i, y[i], 30 * tanh(x[i] / 30.0), REL * 30);
        /* softmax of a row spread over 210: most entries underflow */
        memcpy(y, x, n * 4);
        t->softmax(y, n, -INFINITY);
        double sum = 0;
        for (int64_t i = 0; i < n; i++)
            sum += exp((double)x[i] - 100.0);
        for (int64_t i = 0; i < n; i++) {
            double want = exp((double)x[i] - 100.0) / sum;
            check_close("softmax", t->name, i, y[i], want, 2 * REL * want + 0x1p-148);
        }
    }
    free(x);
    free(y);
    free(u);
}

/* The AVX-512 table's SiLU, GELU and sigmoid, their gated products, gpt-oss's clamped one and the
 * softcap run the AVX2 table's operations 16 lanes at a time, so a model's numbers do not depend
 * on which of the two a CPU picks: the same bits over the whole range of exp (-110 .. 100,
 * underflow and overflow included), NaN and infinities, and rows that end inside a vector. (The
 * L2 norm, a sum, is the AVX2 table's own function in both.) */
FX_TEST(kernels_simd_tables_agree_on_exp_based_ops) {
    const struct fx_kernels *avx2 = fx_kernels_named("avx2"), *avx512 = fx_kernels_named("avx512");
    if (!avx2 || !avx512)
        skip();
    assert_true(avx2->l2_norm == avx512->l2_norm);
    const int64_t n = 2105;
    float *x = malloc(n * 4), *u = malloc(n * 4), *y2 = malloc(n * 4), *y5 = malloc(n * 4);
    assert_non_null(x);
    assert_non_null(u);
    assert_non_null(y2);
    assert_non_null(y5);
    struct fx_test_rng rng = {53};
    for (int64_t i = 0; i < n; i++) {
        x[i] = -110.0f + 0.1f * (float)i + (float)fx_test_rng_normal(&rng) * 0.01f;
        u[i] = (float)fx_test_rng_normal(&rng);
    }
    x[7] = NAN;
    x[8] = INFINITY;
    x[9] = -INFINITY;
    for (int64_t len = 1; len <= n; len += len < 40 ? 1 : 411) {
        const enum fx_act acts[3] = {FX_ACT_SILU, FX_ACT_GELU, FX_ACT_SIGMOID};
        for (int a = 0; a < 3; a++) {
            avx2->act[acts[a]](y2, x, len);
            avx512->act[acts[a]](y5, x, len);
            assert_memory_equal(y2, y5, (size_t)len * 4);
            avx2->glu[acts[a]](y2, x, u, len);
            avx512->glu[acts[a]](y5, x, u, len);
            assert_memory_equal(y2, y5, (size_t)len * 4);
        }
        avx2->swiglu_oai(y2, x, u, len, 1.702f, 7.0f);
        avx512->swiglu_oai(y5, x, u, len, 1.702f, 7.0f);
        assert_memory_equal(y2, y5, (size_t)len * 4);
        for (int c = 0; c < 2; c++) {
            memcpy(y2, x, (size_t)len * 4);
            memcpy(y5, x, (size_t)len * 4);
            avx2->softcap(y2, len, c ? 5.0f : 30.0f);
            avx512->softcap(y5, len, c ? 5.0f : 30.0f);
            assert_memory_equal(y2, y5, (size_t)len * 4);
        }
    }
    free(x);
    free(u);
    free(y2);
    free(y5);
}

/* ggml's fp16 GELU is a table: entry h is the f32 tanh-GELU of fp16 value h, rounded to fp16.
 * Every fp16 input in (-10, 10) must give exactly that (with the generic f32 GELU, which is
 * ggml's formula), in every table; that is within an fp16 step of the exact GELU, plus the f32
 * formula's own error where 1 + tanh cancels (|x| 2^-22). Values that are not fp16 go through
 * the entry of their fp16 rounding; -10 and below give 0, 10 and above give x. */
FX_TEST(kernels_gelu_f16_emulates_the_table) {
    const struct fx_kernels *g = fx_kernels_named("generic");
    const struct fx_kernels *tables[3];
    int n_tables = kref_tables(tables);
    for (int k = 0; k < n_tables; k++) {
        const struct fx_kernels *t = tables[k];
        for (uint32_t h = 0; h < 0x10000; h++) {
            float x = fx_fp16_to_f32((uint16_t)h);
            if (!(fabsf(x) < 10.0f))
                continue;
            float y, entry;
            t->act[FX_ACT_GELU_F16](&y, &x, 1);
            g->act[FX_ACT_GELU](&entry, &x, 1);
            entry = fx_fp16_to_f32(fx_f32_to_fp16(entry));
            if (memcmp(&y, &entry, sizeof y) != 0)
                fail_msg("gelu_f16 (%s) %04x (%.9g): %.9g, table entry %.9g", t->name, h, (double)x,
                         (double)y, (double)entry);
            double want = gelu_d(x), step = fmax(fabs(want) * 0x1p-10, 0x1p-24);
            check_close("gelu_f16", t->name, h, y, want, step + fabs(x) * 0x1p-22);
            /* A nearby value that is not an fp16 goes through the same entry. */
            float near = nextafterf(x, INFINITY);
            if (fx_f32_to_fp16(near) == h) {
                float y2;
                t->act[FX_ACT_GELU_F16](&y2, &near, 1);
                assert_true(y2 == y);
            }
        }
        float edge[5] = {-10.0f, -25.0f, 10.0f, 12.5f, 1e6f}, out[5], u[5] = {2, 2, 2, 2, 2};
        t->act[FX_ACT_GELU_F16](out, edge, 5);
        assert_true(out[0] == 0.0f && out[1] == 0.0f);
        assert_true(out[2] == 10.0f && out[3] == 12.5f && out[4] == 1e6f);
        t->glu[FX_ACT_GELU_F16](out, edge, u, 5);
        assert_true(out[0] == 0.0f && out[2] == 20.0f && out[3] == 25.0f);
    }
}

/* ---- elementwise and argmax ---------------------------------------------------------------- */

FX_TEST(kernels_elementwise_match_double) {
    const struct fx_kernels *tables[3];
    int n_tables = kref_tables(tables);
    struct fx_test_rng rng = {106};
    for (size_t li = 0; li < N_LENGTHS; li++) {
        int64_t n = lengths[li];
        float *a = kref_alloc((size_t)n * 4, 4), *b = kref_alloc((size_t)n * 4, 4);
        float *y = kref_alloc((size_t)n * 4, 4);
        kref_normal(a, n, &rng);
        kref_normal(b, n, &rng);
        for (int k = 0; k < n_tables; k++) {
            const struct fx_kernels *t = tables[k];
            t->add(y, a, b, n);
            for (int64_t i = 0; i < n; i++)
                check_close("add", t->name, i, y[i], (double)a[i] + b[i],
                            REL * (fabs(a[i]) + fabs(b[i])));
            t->scale(y, a, -0.37f, n);
            for (int64_t i = 0; i < n; i++)
                check_close("scale", t->name, i, y[i], a[i] * -0.37, REL * fabs(a[i]));
            memcpy(y, b, (size_t)n * 4);
            t->axpy(y, a, 0.81f, n);
            for (int64_t i = 0; i < n; i++)
                check_close("axpy", t->name, i, y[i], b[i] + 0.81 * a[i],
                            REL * (fabs(a[i]) + fabs(b[i])));
        }
        kref_free(a);
        kref_free(b);
        kref_free(y);
    }
}

FX_TEST(kernels_argmax_ties_to_lowest) {
    const struct fx_kernels *tables[3];
    int n_tables = kref_tables(tables);
    struct fx_test_rng rng = {107};
    float *x = malloc(4099 * 4);
    assert_non_null(x);
    for (int k = 0; k < n_tables; k++) {
        const struct fx_kernels *t = tables[k];
        for (int64_t n = 1; n <= 4099; n = n * 3 + 1) {
            kref_normal(x, n, &rng);
            int64_t want = 0;
            for (int64_t i = 1; i < n; i++)
                if (x[i] > x[want])
                    want = i;
            assert_int_equal(t->argmax(x, n), want);
            /* A tie later in the row loses; a tie earlier wins. */
            x[n - 1] = x[want];
            assert_int_equal(t->argmax(x, n), want);
            x[0] = x[want];
            assert_int_equal(t->argmax(x, n), 0);
        }
        float special[6] = {NAN, -INFINITY, 2.0f, NAN, 2.0f, 1.0f};
        assert_int_equal(t->argmax(special, 6), 2); /* NaN never wins */
        float masked[3] = {-INFINITY, -INFINITY, -INFINITY};
        assert_int_equal(t->argmax(masked, 3), 0);
        /* Rows longer than a vector: only NaN gives 0; NaN then -inf gives the first -inf; +0
         * and -0 are equal, the first of them wins; the maximum in the tail is found. */
        float row[37];
        for (int i = 0; i < 37; i++)
            row[i] = NAN;
        assert_int_equal(t->argmax(row, 37), 0);
        row[20] = -INFINITY;
        row[30] = -INFINITY;
        assert_int_equal(t->argmax(row, 37), 20);
        row[25] = -0.0f;
        row[33] = 0.0f;
        assert_int_equal(t->argmax(row, 37), 25);
        row[36] = 1e-30f;
        assert_int_equal(t->argmax(row, 37), 36);
        row[3] = INFINITY;
        assert_int_equal(t->argmax(row, 37), 3);
    }
    free(x);
}
