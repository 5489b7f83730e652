/* kernels: attention scores, in every table this CPU runs, against float64, and the contract
 * that a key's score does not depend on the range it is computed in. */
#include "fx_test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"

static const char *const tables[] = {"generic", "avx2", "avx512"};

FX_TEST(kernels_attn_scores_match_float64_and_any_range) {
    struct fx_test_rng rng = {7};
    static const int dims[] = {64, 128, 80, 40, 8, 17};
    enum { N_KEYS = 75, STRIDE = 3 * 128 + 5 };
    float *keys = malloc(sizeof(float) * N_KEYS * STRIDE);
    float q[128], full[N_KEYS], part[N_KEYS];
    assert_non_null(keys);
    for (int i = 0; i < N_KEYS * STRIDE; i++)
        keys[i] = (float)fx_test_rng_normal(&rng);
    for (size_t t = 0; t < sizeof tables / sizeof tables[0]; t++) {
        const struct fx_kernels *k = fx_kernels_named(tables[t]);
        if (!k)
            continue;
        for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++) {
            int dim = dims[d];
            for (int i = 0; i < dim; i++)
                q[i] = (float)fx_test_rng_normal(&rng);
            k->attn_scores(full, q, keys, STRIDE, N_KEYS, dim, 0.125f);
            for (int j = 0; j < N_KEYS; j++) {
                double ref = 0.0, mag = 0.0;
                for (int i = 0; i < dim; i++) {
                    ref += (double)q[i] * keys[j * STRIDE + i];
                    mag += fabs((double)q[i] * keys[j * STRIDE + i]);
                }
                /* f32 accumulation of dim products: within a few ulps of their magnitude. */
                if (fabs(full[j] - 0.125 * ref) > 1e-6 * 0.125 * mag + 1e-30)
                    fail_msg("%s dim %d key %d: %g, float64 %g", k->name, dim, j, full[j],
                             0.125 * ref);
            }
            /* Any sub-range, starting anywhere, gives the same bits. */
            for (int a = 0; a < N_KEYS; a += 7)
                for (int n = 1; a + n <= N_KEYS; n += 5) {
                    k->attn_scores(part, q, keys + a * STRIDE, STRIDE, n, dim, 0.125f);
                    assert_memory_equal(part, full + a, sizeof(float) * (size_t)n);
                }
        }
    }
    free(keys);
}

FX_TEST(kernels_attn_values_match_float64_any_grouping_and_split) {
    struct fx_test_rng rng = {11};
    static const int dims[] = {64, 128, 80, 300, 8, 17};
    enum { N = 37, STRIDE = 301, N_OUT = 6, MAX_DIM = 300 };
    float *values = malloc(sizeof(float) * N * STRIDE);
    static float p[N_OUT][N], init[N_OUT][MAX_DIM], whole[N_OUT][MAX_DIM], part[N_OUT][MAX_DIM];
    assert_non_null(values);
    for (int i = 0; i < N * STRIDE; i++)
        values[i] = (float)fx_test_rng_normal(&rng);
    for (int o = 0; o < N_OUT; o++)
        for (int j = 0; j < N; j++)
            p[o][j] = (float)fx_test_rng_f64(&rng);
    for (size_t t = 0; t < sizeof tables / sizeof tables[0]; t++) {
        const struct fx_kernels *k = fx_kernels_named(tables[t]);
        if (!k)
            continue;
        for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++) {
            int dim = dims[d];
            for (int o = 0; o < N_OUT; o++)
                for (int i = 0; i < dim; i++)
                    init[o][i] = (float)fx_test_rng_normal(&rng);
            memcpy(whole, init, sizeof whole);
            k->attn_values(whole[0], MAX_DIM, p[0], N, N_OUT, values, STRIDE, N, dim);
            for (int o = 0; o < N_OUT; o++)
                for (int i = 0; i < dim; i++) {
                    double ref = init[o][i], mag = fabs(init[o][i]);
                    for (int j = 0; j < N; j++) {
                        ref += (double)p[o][j] * values[j * STRIDE + i];
                        mag += fabs((double)p[o][j] * values[j * STRIDE + i]);
                    }
                    if (fabs(whole[o][i] - ref) > 1e-6 * mag)
                        fail_msg("%s dim %d output %d element %d: %g, float64 %g", k->name, dim, o,
                                 i, whole[o][i], ref);
                }
            /* Each output alone, and every range split in two, give the same bits. */
            for (int cut = 0; cut <= N; cut += 6) {
                memcpy(part, init, sizeof part);
                for (int o = 0; o < N_OUT; o++) {
                    k->attn_values(part[o], MAX_DIM, p[o], N, 1, values, STRIDE, cut, dim);
                    k->attn_values(part[o], MAX_DIM, p[o] + cut, N, 1, values + cut * STRIDE,
                                   STRIDE, N - cut, dim);
                }
                for (int o = 0; o < N_OUT; o++)
                    assert_memory_equal(part[o], whole[o], sizeof(float) * (size_t)dim);
            }
        }
    }
    free(values);
}
