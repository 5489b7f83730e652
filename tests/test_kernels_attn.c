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

FX_TEST(kernels_attn_values_match_float64_and_split_ranges) {
    struct fx_test_rng rng = {11};
    static const int dims[] = {64, 128, 80, 300, 8, 17};
    enum { N = 37, STRIDE = 301 };
    float *values = malloc(sizeof(float) * N * STRIDE);
    float p[N], whole[300], split[300], init[300];
    assert_non_null(values);
    for (int i = 0; i < N * STRIDE; i++)
        values[i] = (float)fx_test_rng_normal(&rng);
    for (int j = 0; j < N; j++)
        p[j] = (float)fx_test_rng_f64(&rng);
    for (size_t t = 0; t < sizeof tables / sizeof tables[0]; t++) {
        const struct fx_kernels *k = fx_kernels_named(tables[t]);
        if (!k)
            continue;
        for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++) {
            int dim = dims[d];
            for (int i = 0; i < dim; i++)
                init[i] = (float)fx_test_rng_normal(&rng);
            memcpy(whole, init, sizeof(float) * (size_t)dim);
            k->attn_values(whole, p, values, STRIDE, N, dim);
            for (int i = 0; i < dim; i++) {
                double ref = init[i], mag = fabs(init[i]);
                for (int j = 0; j < N; j++) {
                    ref += (double)p[j] * values[j * STRIDE + i];
                    mag += fabs((double)p[j] * values[j * STRIDE + i]);
                }
                if (fabs(whole[i] - ref) > 1e-6 * mag)
                    fail_msg("%s dim %d element %d: %g, float64 %g", k->name, dim, i, whole[i],
                             ref);
            }
            for (int cut = 0; cut <= N; cut += 6) {
                memcpy(split, init, sizeof(float) * (size_t)dim);
                k->attn_values(split, p, values, STRIDE, cut, dim);
                k->attn_values(split, p + cut, values + cut * STRIDE, STRIDE, N - cut, dim);
                assert_memory_equal(split, whole, sizeof(float) * (size_t)dim);
            }
        }
    }
    free(values);
}
