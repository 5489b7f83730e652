/* kernels: attention (attn_run / attn_finish), in every table this CPU runs, against a float64
 * softmax attention, and the contract that an output's bits depend only on its query and on the
 * runs its keys are fed in (not on which other outputs share the call). */
#include "fx_test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"

static const char *const tables[] = {"generic", "avx2", "avx512"};

enum { N_KEYS = 150, MAX_DIM = 128, N_Q = 4 };

struct case_data {
    float q[N_Q][MAX_DIM];
    float keys[N_KEYS][MAX_DIM];
    float values[N_KEYS][MAX_DIM];
    float sinks[N_Q];
};

/* Runs of at most `run` keys cut at multiples of run, as the decoder feeds them. */
static void attend(const struct fx_kernels *k, const struct case_data *d, int n_q, int first,
                   int n_keys, int dim, int run, float softcap, bool sinks, float *out) {
    float acc[N_Q * MAX_DIM] = {0}, m[N_Q], l[N_Q];
    for (int o = 0; o < n_q; o++) {
        m[o] = -INFINITY;
        l[o] = 0.0f;
    }
    for (int t0 = 0; t0 < n_keys;) {
        int next = (t0 / run + 1) * run, t1 = next < n_keys ? next : n_keys;
        k->attn_run(acc, m, l, d->q[first], MAX_DIM, n_q, d->keys[t0], MAX_DIM, d->values[t0],
                    MAX_DIM, t1 - t0, dim, dim, 0.125f, softcap);
        t0 = next;
    }
    k->attn_finish(out, MAX_DIM, acc, m, l, sinks ? d->sinks + first : NULL, n_q, dim);
}

FX_TEST(kernels_attention_matches_float64_and_does_not_depend_on_grouping) {
    static struct case_data d;
    struct fx_test_rng rng = {5};
    for (int o = 0; o < N_Q; o++) {
        for (int i = 0; i < MAX_DIM; i++)
            d.q[o][i] = (float)(2.0 * fx_test_rng_normal(&rng));
        d.sinks[o] = (float)fx_test_rng_normal(&rng);
    }
    for (int j = 0; j < N_KEYS; j++)
        for (int i = 0; i < MAX_DIM; i++) {
            d.keys[j][i] = (float)fx_test_rng_normal(&rng);
            d.values[j][i] = (float)fx_test_rng_normal(&rng);
        }
    static const int dims[] = {64, 128, 80, 8};
    static const int lengths[] = {1, 15, 64, 65, 150};
    for (size_t t = 0; t < sizeof tables / sizeof tables[0]; t++) {
        const struct fx_kernels *k = fx_kernels_named(tables[t]);
        if (!k)
            continue;
        for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++)
            for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++)
                for (int variant = 0; variant < 3; variant++) {
                    int dim = dims[di], n = lengths[li];
                    float softcap = variant == 1 ? 5.0f : 0.0f;
                    bool sinks = variant == 2;
                    static float all[N_Q][MAX_DIM], one[N_Q][MAX_DIM];
                    attend(k, &d, N_Q, 0, n, dim, 64, softcap, sinks, all[0]);
                    for (int o = 0; o < N_Q; o++) {
                        attend(k, &d, 1, o, n, dim, 64, softcap, sinks, one[o]);
                        assert_memory_equal(one[o], all[o], sizeof(float) * (size_t)dim);
                        /* float64 reference */
                        double s[N_KEYS], top = sinks ? d.sinks[o] : -INFINITY, den = 0.0;
                        for (int j = 0; j < n; j++) {
                            double dot = 0.0;
                            for (int i = 0; i < dim; i++)
                                dot += (double)d.q[o][i] * d.keys[j][i];
                            s[j] = 0.125 * dot;
                            if (softcap > 0.0f)
                                s[j] = softcap * tanh(s[j] / softcap);
                            top = fmax(top, s[j]);
                        }
                        for (int j = 0; j < n; j++)
                            den += exp(s[j] - top);
                        if (sinks)
                            den += exp(d.sinks[o] - top);
                        for (int i = 0; i < dim; i++) {
                            double ref = 0.0;
                            for (int j = 0; j < n; j++)
                                ref += exp(s[j] - top) / den * d.values[j][i];
                            if (fabs(all[o][i] - ref) > 2e-5)
                                fail_msg("%s dim %d n %d variant %d output %d [%d]: %g, float64 "
                                         "%g",
                                         k->name, dim, n, variant, o, i, all[o][i], ref);
                        }
                    }
                }
    }
}

FX_TEST(kernels_attention_without_keys_is_zero_or_sink_only) {
    const struct fx_kernels *k = fx_kernels();
    float acc[64] = {0}, m[1] = {-INFINITY}, l[1] = {0.0f}, out[64], sink = 3.0f;
    k->attn_finish(out, 64, acc, m, l, NULL, 1, 64);
    for (int i = 0; i < 64; i++)
        assert_true(out[i] == 0.0f);
    k->attn_finish(out, 64, acc, m, l, &sink, 1, 64);
    for (int i = 0; i < 64; i++)
        assert_true(out[i] == 0.0f);
}
