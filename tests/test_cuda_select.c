/* cuda: greedy argmax and top-k on device, exactly (a selection has no rounding): against a sort
 * on the host in the order (value descending, index ascending) without NaN, and argmax against
 * the generic table's. */
#include "fx_test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_test.h"
#include "kernels/generic.h"

static const float *sort_base;

static int by_rank(const void *a, const void *b) {
    int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    float x = sort_base[i], y = sort_base[j];
    if (x != y)
        return x > y ? -1 : 1;
    return i < j ? -1 : i > j;
}

/* Runs top-k of x on the device and compares it with the host's ranking. */
static void check_top_k(const float *x, int64_t n, int k) {
    int32_t *order = malloc((size_t)n * 4);
    assert_non_null(order);
    int64_t n_num = 0;
    for (int64_t i = 0; i < n; i++)
        if (x[i] == x[i])
            order[n_num++] = (int32_t)i;
    sort_base = x;
    qsort(order, (size_t)n_num, 4, by_rank);

    float *d_x = cuda_test_upload(x, (size_t)n * 4);
    int32_t *d_idx = cuda_test_upload(NULL, (size_t)k * 4);
    float *d_val = cuda_test_upload(NULL, (size_t)k * 4);
    struct fx_error err = {0};
    cuda_test_ok(fx_cuda_top_k(d_x, n, k, d_idx, d_val, NULL, &err), &err);
    int32_t idx[FX_CUDA_TOP_K_MAX];
    float val[FX_CUDA_TOP_K_MAX];
    cuda_test_download(idx, d_idx, (size_t)k * 4);
    cuda_test_download(val, d_val, (size_t)k * 4);
    for (int p = 0; p < k; p++) {
        int32_t want = p < n_num ? order[p] : -1;
        if (idx[p] != want)
            fail_msg("top-%d of %lld, pick %d: device index %d, host %d", k, (long long)n, p,
                     idx[p], want);
        if (want >= 0)
            assert_memory_equal(&val[p], &x[want], 4);
    }
    fx_cuda_free(d_x), fx_cuda_free(d_idx), fx_cuda_free(d_val);
    free(order);
}

FX_TEST(cuda_top_k_matches_host_ranking) {
    cuda_test_require();
    enum { N = 151937 }; /* a Qwen-sized vocabulary, not a multiple of anything */
    struct fx_test_rng rng = {1831};
    float *x = malloc(N * 4);
    assert_non_null(x);
    /* Values on a coarse grid, so that ties are common; some NaN and infinities. */
    for (int i = 0; i < N; i++)
        x[i] = (float)(int)(fx_test_rng_normal(&rng) * 20) / 4;
    for (int i = 0; i < N; i += 1009)
        x[i] = NAN;
    x[77] = INFINITY;
    x[N - 1] = INFINITY; /* a tie at the top: the lower index first */
    x[5] = -INFINITY;
    static const int ks[] = {1, 2, 40, FX_CUDA_TOP_K_MAX};
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++)
        check_top_k(x, N, ks[i]);

    /* Greedy: the generic argmax wherever some element is not NaN. */
    float *d_x = cuda_test_upload(x, N * 4);
    int32_t *d_idx = cuda_test_upload(NULL, 4);
    float *d_val = cuda_test_upload(NULL, 4);
    struct fx_error err = {0};
    cuda_test_ok(fx_cuda_top_k(d_x, N, 1, d_idx, d_val, NULL, &err), &err);
    int32_t best;
    cuda_test_download(&best, d_idx, 4);
    assert_int_equal(best, fx_argmax_generic(x, N));
    fx_cuda_free(d_x), fx_cuda_free(d_idx), fx_cuda_free(d_val);

    /* Fewer candidates than k: a short row, and one with NaN only. */
    float few[5] = {1, NAN, 3, 3, -2};
    check_top_k(few, 5, 8);
    float nan3[3] = {NAN, NAN, NAN};
    check_top_k(nan3, 3, 2);
    free(x);
}
