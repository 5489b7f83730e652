/* kernels/: the Gated DeltaNet operations (sigmoid and its gated product, L2 norm, the causal
 * conv step, the chunked delta rule) in every table this CPU runs, against double-precision
 * references written from their definitions in kernels.h, on awkward sizes (and unaligned rows
 * for the row operations). */
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

/* Several steps of the conv over a channel count that is not a multiple of any vector width, one
 * row per call: the outputs against double sums of the taps and, since every table sums the taps
 * as the generic kernel does, against its bits; the window after them (the last d_conv - 1
 * inputs, oldest first) exactly. Then all the steps in one call: the same outputs and window. */
FX_TEST(kernels_ssm_conv_rows_match_double) {
    const struct fx_kernels *tables[3];
    int n_tables = kref_tables(tables);
    struct fx_test_rng rng = {1602};
    const int64_t n_ch = 37;
    const int32_t convs[] = {2, 4};
    for (size_t ci = 0; ci < 2; ci++) {
        int32_t d_conv = convs[ci], keep = d_conv - 1;
        const int n_steps = 6;
        float *w = randn(&rng, n_ch * d_conv, 0.5), *x = randn(&rng, n_steps * n_ch, 1.0);
        float first[6][37]; /* [n_steps][n_ch] the generic table's outputs */
        for (int k = 0; k < n_tables; k++) {
            float *win = calloc((size_t)(n_ch * keep), sizeof(float)), out[37];
            float *win2 = calloc((size_t)(n_ch * keep), sizeof(float)), all[6][37];
            assert_true(win && win2);
            for (int step = 0; step < n_steps; step++) {
                tables[k]->conv_rows(out, win, x + step * n_ch, 1, n_ch, w, n_ch, d_conv);
                if (k == 0)
                    memcpy(first[step], out, sizeof out);
                assert_memory_equal(out, first[step], sizeof out);
                for (int64_t c = 0; c < n_ch; c++) {
                    double want = 0;
                    for (int32_t t = 0; t < d_conv; t++) {
                        int s = step - keep + t; /* the input tap t multiplies */
                        if (s >= 0)
                            want += (double)w[c * d_conv + t] * x[s * n_ch + c];
                    }
                    check_close("conv_rows", tables[k]->name, c, out[c], want, 1e-6);
                    for (int32_t t = 0; t < keep; t++) {
                        int s = step - keep + 1 + t;
                        assert_true(win[c * keep + t] == (s >= 0 ? x[s * n_ch + c] : 0.0f));
                    }
                }
            }
            tables[k]->conv_rows(all[0], win2, x, n_steps, n_ch, w, n_ch, d_conv);
            assert_memory_equal(all, first, sizeof all);
            assert_memory_equal(win2, win, sizeof(float) * (size_t)(n_ch * keep));
            free(win);
            free(win2);
        }
        free(w);
        free(x);
    }
}

/* Runs n_steps tokens of one head through delta_rows in calls of at most `len` rows that never
 * cross a chunk boundary; out: [n_steps][d]. */
static void run_delta(const struct fx_kernels *t, float *mem, const float *q, const float *k,
                      const float *v, const float *g, const float *beta, int n_steps, int len,
                      float *out, int64_t d) {
    struct fx_delta_state st = fx_delta_state_at(mem, d);
    float *work = malloc(sizeof(float) * (size_t)(FX_DELTA_CHUNK * 2 * d));
    assert_non_null(work);
    memset(st.m0, 0, sizeof(float) * (size_t)(d * d));
    for (int p = 0, n; p < n_steps; p += n) {
        int r0 = p % FX_DELTA_CHUNK;
        n = len < FX_DELTA_CHUNK - r0 ? len : FX_DELTA_CHUNK - r0;
        n = n < n_steps - p ? n : n_steps - p;
        t->delta_rows(&st, r0, n, q + p * d, k + p * d, v + p * d, d, g + p, beta + p,
                      (float)(1 / sqrt((double)d)), out + p * d, d, work, d);
    }
    free(work);
}

/* The chunked delta rule over 150 tokens (two chunk boundaries) against the recurrence of
 * kernels.h in double, for head sizes around the vector widths; and the same bits whether the
 * tokens come one per call, a chunk per call or in runs of 5 (calls never change a row's
 * arithmetic). q and k are L2-normed as the layer feeds them; decays in (e^-1.2, 1). */
FX_TEST(kernels_ssm_delta_rows_match_the_recurrence) {
    const struct fx_kernels *tables[3];
    int n_tables = kref_tables(tables);
    struct fx_test_rng rng = {1603};
    const int64_t sizes[] = {1, 7, 16, 32, 33};
    enum { N_STEPS = 150 };
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        int64_t d = sizes[si];
        float *q = randn(&rng, N_STEPS * d, 1.0), *kk = randn(&rng, N_STEPS * d, 1.0);
        float *v = randn(&rng, N_STEPS * d, 1.0);
        float g[N_STEPS], beta[N_STEPS];
        for (int s = 0; s < N_STEPS; s++) {
            g[s] = (float)(-1.2 * fx_test_rng_f64(&rng));
            beta[s] = (float)fx_test_rng_f64(&rng);
            for (float *x = q; x; x = x == q ? kk : NULL) {
                double sq = 0;
                for (int64_t i = 0; i < d; i++)
                    sq += (double)x[s * d + i] * x[s * d + i];
                for (int64_t i = 0; i < d; i++)
                    x[s * d + i] = (float)(x[s * d + i] / sqrt(sq));
            }
        }
        double *m = calloc((size_t)(d * d), sizeof(double));
        double *want = malloc(sizeof(double) * (size_t)(N_STEPS * d));
        assert_non_null(m);
        assert_non_null(want);
        double scale = 1 / sqrt((double)d);
        for (int s = 0; s < N_STEPS; s++) /* m[i * d + j] = M[i][j] */
            for (int64_t j = 0; j < d; j++) {
                double mk = 0, decay = exp((double)g[s]);
                for (int64_t i = 0; i < d; i++) {
                    m[i * d + j] *= decay;
                    mk += m[i * d + j] * kk[s * d + i];
                }
                double u = (v[s * d + j] - mk) * beta[s], o = 0;
                for (int64_t i = 0; i < d; i++) {
                    m[i * d + j] += kk[s * d + i] * u;
                    o += m[i * d + j] * q[s * d + i];
                }
                want[s * d + j] = o * scale;
            }
        size_t floats = (size_t)fx_delta_state_floats(d);
        float *mem = malloc(sizeof(float) * floats), *mem2 = malloc(sizeof(float) * floats);
        float *out = malloc(sizeof(float) * (size_t)(N_STEPS * d));
        float *out2 = malloc(sizeof(float) * (size_t)(N_STEPS * d));
        assert_true(mem && mem2 && out && out2);
        for (int k = 0; k < n_tables; k++) {
            const struct fx_kernels *t = tables[k];
            run_delta(t, mem, q, kk, v, g, beta, N_STEPS, FX_DELTA_CHUNK, out, d);
            for (int64_t i = 0; i < N_STEPS * d; i++)
                check_close("delta_rows", t->name, i, out[i], want[i], 2e-5 * (1 + fabs(want[i])));
            /* The state at the last boundary (position 128) is M after 128 tokens, which the
             * rows since then do not change. */
            for (int len = 1; len <= 5; len += 4) {
                run_delta(t, mem2, q, kk, v, g, beta, N_STEPS, len, out2, d);
                assert_memory_equal(out2, out, sizeof(float) * (size_t)(N_STEPS * d));
                assert_memory_equal(mem2, mem, sizeof(float) * floats);
            }
        }
        free(mem);
        free(mem2);
        free(out);
        free(out2);
        free(m);
        free(want);
        free(q);
        free(kk);
        free(v);
    }
}
