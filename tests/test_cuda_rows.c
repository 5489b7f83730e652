/* cuda: RMSNorm, rope and SwiGLU against the generic CPU table.
 *
 * Tolerances. Rope: exact (the same f32 operations without fused multiply-adds, on angles the
 * host computed with fx_rope_cache), so bytes are compared, for both modes and the scaled
 * variants (linear, YaRN, llama3 frequency factors), whose differences all live in the angles.
 * RMSNorm: the double sum of squares is added in another order, which can move the f32 mean by
 * an ulp; 1e-6 relative, the CPU tables' bound against float64 (tests/test_kernels_rows.c). The
 * device's order is emulated on the host too (emulate_rms_norm), and that it must match exactly.
 * SwiGLU: the device's expf is within 2 ulp of the correctly rounded value (CUDA's documented
 * bound) and the CPU's libm within 1, so silu(g) * u agrees within a few ulp: 1e-6 relative. */
#include "fx_test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_test.h"
#include "kernels/generic.h"
#include "kernels_ref.h"

#define REL 1e-6

static void check_close(const char *what, int64_t i, float got, float want) {
    double tol = REL * fabs((double)want) + 1e-30;
    if (!(fabs((double)got - want) <= tol))
        fail_msg("%s element %lld: device %.9g, generic %.9g", what, (long long)i, got, want);
}

/* What rows.cu's rms_norm_kernel computes for one row: thread t (of 256) sums the f32 squares
 * of elements t, t + 256, ... in double, a shared-memory tree adds thread t + half into t for
 * half = 128 .. 1, then the CPU's scale and products. */
static void emulate_rms_norm(float *out, const float *x, const float *w, int64_t n, float eps) {
    enum { THREADS = 256 };
    double part[THREADS];
    for (int t = 0; t < THREADS; t++) {
        part[t] = 0;
        for (int64_t i = t; i < n; i += THREADS)
            part[t] += (double)(x[i] * x[i]);
    }
    for (int half = THREADS / 2; half > 0; half >>= 1)
        for (int t = 0; t < half; t++)
            part[t] += part[t + half];
    float mean = (float)(part[0] / (double)n);
    float scale = 1.0f / sqrtf(mean + eps);
    for (int64_t i = 0; i < n; i++)
        out[i] = w ? (x[i] * scale) * w[i] : x[i] * scale;
}

FX_TEST(cuda_rms_norm_matches_generic) {
    cuda_test_require();
    static const int64_t lengths[] = {1, 7, 64, 255, 4096};
    struct fx_test_rng rng = {1811};
    for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++) {
        int64_t n = lengths[li], n_rows = 3, stride = n + 5;
        size_t bytes = (size_t)(n_rows * stride) * 4;
        float *x = malloc(bytes), *w = malloc((size_t)n * 4), *want = malloc(bytes),
              *got = malloc(bytes);
        assert_true(x && w && want && got);
        kref_normal(x, n_rows * stride, &rng);
        for (int64_t i = 0; i < n; i++)
            w[i] = 1.0f + 0.1f * (float)fx_test_rng_normal(&rng);
        float *d_x = cuda_test_upload(x, bytes), *d_w = cuda_test_upload(w, (size_t)n * 4);
        float *d_out = cuda_test_upload(NULL, bytes);
        for (int with_w = 0; with_w < 2; with_w++) {
            struct fx_error err = {0};
            cuda_test_ok(fx_cuda_rms_norm(d_out, d_x, with_w ? d_w : NULL, n_rows, n, stride, 1e-5f,
                                          NULL, &err),
                         &err);
            cuda_test_download(got, d_out, bytes);
            for (int64_t r = 0; r < n_rows; r++) {
                fx_rms_norm_generic(want + r * stride, x + r * stride, with_w ? w : NULL, n, 1e-5f);
                for (int64_t i = 0; i < n; i++)
                    check_close("rms_norm", r * stride + i, got[r * stride + i],
                                want[r * stride + i]);
                float *emu = malloc((size_t)n * 4);
                assert_non_null(emu);
                emulate_rms_norm(emu, x + r * stride, with_w ? w : NULL, n, 1e-5f);
                if (memcmp(emu, got + r * stride, (size_t)n * 4) != 0)
                    fail_msg("rms_norm row %lld of %lld: the device differs from its emulation",
                             (long long)r, (long long)n);
                free(emu);
            }
        }
        /* In place gives the same bits as out of place. */
        struct fx_error err = {0};
        cuda_test_ok(fx_cuda_rms_norm(d_x, d_x, d_w, n_rows, n, stride, 1e-5f, NULL, &err), &err);
        float *in_place = malloc(bytes);
        assert_non_null(in_place);
        cuda_test_download(in_place, d_x, bytes);
        for (int64_t r = 0; r < n_rows; r++)
            assert_memory_equal(in_place + r * stride, got + r * stride, (size_t)n * 4);
        fx_cuda_free(d_x), fx_cuda_free(d_w), fx_cuda_free(d_out);
        free(x), free(w), free(want), free(got), free(in_place);
    }
}

FX_TEST(cuda_rope_matches_generic_bits) {
    cuda_test_require();
    enum { N_ROWS = 3, N_HEADS = 5, HEAD = 128 };
    static const float positions[N_ROWS] = {0, 17, 4097};
    float factors[HEAD / 2];
    for (int i = 0; i < HEAD / 2; i++)
        factors[i] = 1.0f + (float)i / 8;
    struct fx_rope_params variants[] = {
        {.n_dims = HEAD, .freq_base = 10000, .freq_scale = 1, .attn_factor = 1},
        {.n_dims = 64, .freq_base = 1e6f, .freq_scale = 0.25f, .attn_factor = 1}, /* partial */
        {.n_dims = HEAD,
         .freq_base = 10000,
         .freq_scale = 0.25f,
         .ext_factor = 1,
         .attn_factor = 1,
         .beta_fast = 32,
         .beta_slow = 1,
         .n_ctx_orig = 4096}, /* YaRN */
        {.n_dims = HEAD,
         .freq_base = 500000,
         .freq_scale = 1,
         .attn_factor = 1,
         .freq_factors = factors}, /* llama3 */
    };
    struct fx_test_rng rng = {1812};
    size_t bytes = (size_t)N_ROWS * N_HEADS * HEAD * 4;
    float *x = malloc(bytes), *want = malloc(bytes), *got = malloc(bytes);
    float cs[N_ROWS][HEAD];
    assert_true(x && want && got);
    for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
        for (int neox = 0; neox < 2; neox++) {
            kref_normal(x, N_ROWS * N_HEADS * HEAD, &rng);
            memcpy(want, x, bytes);
            for (int r = 0; r < N_ROWS; r++) {
                fx_rope_cache(&variants[v], positions[r], cs[r]);
                fx_rope_generic(want + r * N_HEADS * HEAD, N_HEADS, HEAD, variants[v].n_dims,
                                neox ? FX_ROPE_NEOX : FX_ROPE_NORMAL, cs[r]);
            }
            /* The device reads row r's angles from a table: entry r (no positions), or, for
             * neox, entry pos[r] of a table stored in reverse (positions on the device). */
            float table[N_ROWS * HEAD];
            int32_t pos[N_ROWS];
            for (int r = 0; r < N_ROWS; r++) {
                pos[r] = neox ? N_ROWS - 1 - r : r;
                memcpy(table + pos[r] * variants[v].n_dims, cs[r], (size_t)variants[v].n_dims * 4);
            }
            float *d_x = cuda_test_upload(x, bytes), *d_cs = cuda_test_upload(table, sizeof table);
            int32_t *d_pos = cuda_test_upload(pos, sizeof pos);
            struct fx_error err = {0};
            cuda_test_ok(fx_cuda_rope(d_x, N_ROWS, N_HEADS * HEAD, N_HEADS, HEAD,
                                      variants[v].n_dims, neox, d_cs, neox ? d_pos : NULL, NULL,
                                      &err),
                         &err);
            cuda_test_download(got, d_x, bytes);
            for (int64_t i = 0; i < N_ROWS * N_HEADS * HEAD; i++)
                if (memcmp(&got[i], &want[i], 4) != 0)
                    fail_msg("rope variant %zu %s element %lld: device %.9g, generic %.9g", v,
                             neox ? "neox" : "normal", (long long)i, got[i], want[i]);
            fx_cuda_free(d_x), fx_cuda_free(d_cs), fx_cuda_free(d_pos);
        }
    }
    free(x), free(want), free(got);
}

FX_TEST(cuda_swiglu_matches_generic) {
    cuda_test_require();
    enum { N = 10007 };
    struct fx_test_rng rng = {1813};
    float *g = malloc(N * 4), *u = malloc(N * 4), *want = malloc(N * 4), *got = malloc(N * 4);
    assert_true(g && u && want && got);
    kref_normal(g, N, &rng);
    kref_normal(u, N, &rng);
    for (int i = 0; i < N; i += 97)
        g[i] *= 30.0f; /* the saturated ends of the sigmoid too */
    fx_swiglu_generic(want, g, u, N);
    float *d_g = cuda_test_upload(g, N * 4), *d_u = cuda_test_upload(u, N * 4);
    float *d_out = cuda_test_upload(NULL, N * 4);
    struct fx_error err = {0};
    cuda_test_ok(fx_cuda_swiglu(d_out, d_g, d_u, N, NULL, &err), &err);
    cuda_test_download(got, d_out, N * 4);
    for (int i = 0; i < N; i++)
        check_close("swiglu", i, got[i], want[i]);
    /* In place over g. */
    cuda_test_ok(fx_cuda_swiglu(d_g, d_g, d_u, N, NULL, &err), &err);
    float *in_place = malloc(N * 4);
    assert_non_null(in_place);
    cuda_test_download(in_place, d_g, N * 4);
    assert_memory_equal(in_place, got, N * 4);
    fx_cuda_free(d_g), fx_cuda_free(d_u), fx_cuda_free(d_out);
    free(g), free(u), free(want), free(got), free(in_place);
}

/* The emulation of the device's RMSNorm against the generic table, within the tolerance the
 * device test uses: that the two checks of the device cannot contradict each other, on any
 * machine. */
FX_TEST(cuda_rms_norm_emulation_within_bound) {
    static const int64_t lengths[] = {1, 7, 64, 255, 4096};
    struct fx_test_rng rng = {1814};
    for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++) {
        int64_t n = lengths[li];
        float *x = malloc((size_t)n * 4), *w = malloc((size_t)n * 4);
        float *want = malloc((size_t)n * 4), *emu = malloc((size_t)n * 4);
        assert_true(x && w && want && emu);
        kref_normal(x, n, &rng);
        for (int64_t i = 0; i < n; i++)
            w[i] = 1.0f + 0.1f * (float)fx_test_rng_normal(&rng);
        fx_rms_norm_generic(want, x, w, n, 1e-5f);
        emulate_rms_norm(emu, x, w, n, 1e-5f);
        for (int64_t i = 0; i < n; i++)
            check_close("rms_norm emulation", i, emu[i], want[i]);
        free(x), free(w), free(want), free(emu);
    }
}
