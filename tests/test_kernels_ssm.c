/* kernels/: the Gated DeltaNet operations (sigmoid and its gated product, L2 norm, the causal
 * conv step, the delta-rule step) in every table this CPU runs, against double-precision
 * references written from their definitions in kernels.h, on awkward sizes and unaligned
 * pointers. */
#include "fx_test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels_ref.h"

static void check_close(const char *what, const char *table, int64_t i, double got, double want,
                        double tol) {
    if (!(fabs(got - want) <= tol))
        fail_msg("%s (%s) [%lld]: %.9g, expected %.9g (tol %.3g)", what, table, (long long)i, got,
                 want, tol);
}

static float *randn(struct fx_test_rng *rng, int64_t n, double s) {
    float *x = malloc(sizeof(float) * (size_t)(n + 1)); /* +1: room for an unaligned view */
    assert_non_null(x);
    for (int64_t i = 0; i <= n; i++)
        x[i] = (float)(s * fx_test_rng_normal(rng));
    return x;
}

FX_TEST(kernels_ssm_sigmoid_and_l2_norm_match_double) {
    const struct fx_kernels *tables[3];
    int n_tables = kref_tables(tables);
    struct fx_test_rng rng = {1601};
    const int64_t sizes[] = {1, 7, 32, 33, 128, 1001};
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        int64_t n = sizes[si];
        float *g = randn(&rng, n, 6.0), *u = randn(&rng, n, 2.0), *y = randn(&rng, n, 1.0);
        for (int k = 0; k < n_tables; k++) {
            const struct fx_kernels *t = tables[k];
            t->act[FX_ACT_SIGMOID](y, g + 1, n);
            for (int64_t i = 0; i < n; i++)
                check_close("sigmoid", t->name, i, y[i], 1 / (1 + exp(-(double)g[i + 1])), 1e-6);
            t->glu[FX_ACT_SIGMOID](y, g + 1, u, n);
            for (int64_t i = 0; i < n; i++)
                check_close("sigmoid_glu", t->name, i, y[i], u[i] / (1 + exp(-(double)g[i + 1])),
                            1e-6 * fabs(u[i]) + 1e-30);
            double sq = 0;
            for (int64_t i = 0; i < n; i++)
                sq += (double)u[i] * u[i];
            t->l2_norm(y, u, n, 1e-6f);
            for (int64_t i = 0; i < n; i++)
                check_close("l2_norm", t->name, i, y[i], u[i] / fmax(sqrt(sq), 1e-6),
                            2e-7 * fabs(u[i] / sqrt(sq)) + 1e-30);
        }
        free(g);
        free(u);
        free(y);
    }
    /* A zero row is divided by eps, not by zero. */
    float z[5] = {0}, out[5];
    for (int k = 0; k < n_tables; k++) {
        tables[k]->l2_norm(out, z, 5, 1e-6f);
        for (int i = 0; i < 5; i++)
            assert_true(out[i] == 0.0f);
    }
}

/* Several steps of the conv over a channel count that is not a multiple of any vector width:
 * the outputs against double sums of the taps, and the window after them (the last d_conv - 1
 * inputs, oldest first) exactly. */
FX_TEST(kernels_ssm_conv_step_matches_double) {
    const struct fx_kernels *tables[3];
    int n_tables = kref_tables(tables);
    struct fx_test_rng rng = {1602};
    const int64_t n_ch = 37;
    const int32_t convs[] = {2, 4};
    for (size_t ci = 0; ci < 2; ci++) {
        int32_t d_conv = convs[ci], keep = d_conv - 1;
        const int n_steps = 6;
        float *w = randn(&rng, n_ch * d_conv, 0.5), *x = randn(&rng, n_steps * n_ch, 1.0);
        for (int k = 0; k < n_tables; k++) {
            float *win = calloc((size_t)(n_ch * keep), sizeof(float)), out[37];
            assert_non_null(win);
            for (int step = 0; step < n_steps; step++) {
                tables[k]->conv_step(out, win, x + step * n_ch, w, n_ch, d_conv);
                for (int64_t c = 0; c < n_ch; c++) {
                    double want = 0;
                    for (int32_t t = 0; t < d_conv; t++) {
                        int s = step - keep + t; /* the input tap t multiplies */
                        if (s >= 0)
                            want += (double)w[c * d_conv + t] * x[s * n_ch + c];
                    }
                    check_close("conv_step", tables[k]->name, c, out[c], want, 1e-6);
                    for (int32_t t = 0; t < keep; t++) {
                        int s = step - keep + 1 + t;
                        assert_true(win[c * keep + t] == (s >= 0 ? x[s * n_ch + c] : 0.0f));
                    }
                }
            }
            free(win);
        }
        free(w);
        free(x);
    }
}

/* The delta rule over a run of tokens against a double-precision recurrence of the same
 * definition, outputs and state, for head sizes around the vector widths (tails under masks).
 * q and k are L2-normed as the layer feeds them; the decays are in (0, 1). */
FX_TEST(kernels_ssm_delta_step_matches_double) {
    const struct fx_kernels *tables[3];
    int n_tables = kref_tables(tables);
    struct fx_test_rng rng = {1603};
    const int64_t sizes[] = {1, 7, 16, 31, 32, 33, 128};
    const int n_steps = 12;
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        int64_t d = sizes[si];
        float *q = randn(&rng, n_steps * d, 1.0), *kk = randn(&rng, n_steps * d, 1.0);
        float *v = randn(&rng, n_steps * d, 1.0);
        float decay[12], beta[12];
        for (int s = 0; s < n_steps; s++) {
            decay[s] = (float)(0.3 + 0.7 * fx_test_rng_f64(&rng));
            beta[s] = (float)fx_test_rng_f64(&rng);
            for (float *x = q; x; x = x == q ? kk : NULL) {
                double sq = 0;
                for (int64_t i = 0; i < d; i++)
                    sq += (double)x[s * d + i] * x[s * d + i];
                for (int64_t i = 0; i < d; i++)
                    x[s * d + i] = (float)(x[s * d + i] / sqrt(sq));
            }
        }
        double *m = calloc((size_t)(d * d), sizeof(double)),
               *want = malloc(sizeof(double) * (size_t)(n_steps * d));
        assert_non_null(m);
        assert_non_null(want);
        double scale = 1 / sqrt((double)d);
        for (int s = 0; s < n_steps; s++) /* m[i * d + j] = M[i][j] */
            for (int64_t j = 0; j < d; j++) {
                double mk = 0;
                for (int64_t i = 0; i < d; i++) {
                    m[i * d + j] *= decay[s];
                    mk += m[i * d + j] * kk[s * d + i];
                }
                double delta = (v[s * d + j] - mk) * beta[s], o = 0;
                for (int64_t i = 0; i < d; i++) {
                    m[i * d + j] += kk[s * d + i] * delta;
                    o += m[i * d + j] * q[s * d + i];
                }
                want[s * d + j] = o * scale;
            }
        for (int k = 0; k < n_tables; k++) {
            float *mem = calloc((size_t)(d * d + 1), sizeof(float)),
                  *out = malloc(sizeof(float) * 129);
            assert_non_null(mem);
            assert_non_null(out);
            float *st = mem + 1; /* unaligned */
            for (int s = 0; s < n_steps; s++) {
                tables[k]->delta_step(st, q + s * d, kk + s * d, v + s * d, decay[s], beta[s],
                                      (float)scale, out + 1, d);
                for (int64_t j = 0; j < d; j++)
                    check_close("delta_step", tables[k]->name, s * d + j, out[1 + j],
                                want[s * d + j], 1e-5 * (1 + fabs(want[s * d + j])));
            }
            /* The state itself: column j of M is row j of the kernel's layout. */
            for (int64_t j = 0; j < d; j++)
                for (int64_t i = 0; i < d; i++)
                    check_close("delta_step state", tables[k]->name, j * d + i, st[j * d + i],
                                m[i * d + j], 1e-5 * (1 + fabs(m[i * d + j])));
            free(mem);
            free(out);
        }
        free(m);
        free(want);
        free(q);
        free(kk);
        free(v);
    }
}
