/* cuda: dequantization and matmul of every weight format with device kernels, against the
 * generic CPU table.
 *
 * Tolerances.
 *  - Dequantization: exact. The device decoder does the generic to_float's f32 operations in the
 *    same order without fused multiply-adds (src/cuda/blocks.cuh), so the bytes are compared.
 *  - Matmul against float64: the device decodes each weight in f32 (at most 4 roundings for
 *    d * sc * q - dmin * m, each within 2^-24 of the magnitudes kref_dot counts), then sums the
 *    products with the f32 activations, one FMA per element into 32 lane sums of ne0/32 terms
 *    each, then a 5-level butterfly. That is at most ne0/32 + 9 roundings of 2^-24 relative to
 *    sum(|w_i x_i|); the bound allows ne0/32 + 10. Derived rather than measured (no GPU was at
 *    hand when it was written; a run on one may show it loose, never exceeded).
 *  - Matmul against the generic table's vec_dot: the CPU dots the weights with activations
 *    quantized to the weight's vec_dot_type (Q8_0, Q8_1 or Q8_K) and the device does not, so
 *    the two differ by what that quantization changes on this data, computed exactly in
 *    float64 (sum(w_i x_i) - sum(w_i a_i)), plus the device bound, plus the CPU table's own
 *    1e-6 of sum(|w_i| |a_i|) (tests/test_kernels_dot.c).
 *  - Row j of a matmul is bit for bit the matvec of activation row j (cuda.h's contract).
 *  - Exactly: the device's sum is emulated on the host operation for operation (emulate_dot:
 *    the lanes' FMAs, then the butterfly), so the device must give those bits; on the host the
 *    emulation is checked against the float64 bound above, which checks the bound's derivation
 *    on this data without a GPU (its worst here is 0.75 units of 2^-24: the bound is loose). */
#include "fx_test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_test.h"
#include "kernels/kernels.h"
#include "kernels_ref.h"

static const enum fx_type types[] = {
    FX_TYPE_F32,  FX_TYPE_F16,  FX_TYPE_BF16, FX_TYPE_Q4_0,  FX_TYPE_Q4_1,
    FX_TYPE_Q5_0, FX_TYPE_Q5_1, FX_TYPE_Q8_0, FX_TYPE_Q2_K,  FX_TYPE_Q3_K,
    FX_TYPE_Q4_K, FX_TYPE_Q5_K, FX_TYPE_Q6_K, FX_TYPE_MXFP4,
};
#define N_TYPES (sizeof types / sizeof types[0])

/* Row lengths: one K super-block, an odd count of them, a model's hidden size. Row counts: not
 * a multiple of the kernel's 4 rows per block. */
static const int64_t lengths[] = {256, 768, 4096};
#define N_LENGTHS (sizeof lengths / sizeof lengths[0])
#define N_ROWS    37
#define N_ACT     13 /* activation rows: one full group of 8 and a partial one */

static double device_bound(int64_t ne0) {
    return (double)(ne0 / 32 + 10) * 0x1p-24;
}

/* What the device's matmul computes for one (weight row, activation row) pair (matmul.cu): lane
 * l sums w_i x_i for i = l, l + 32, ... with one FMA each, then lane l adds lane l ^ o for
 * o = 16, 8, 4, 2, 1; lane 0's sum is written. w is the row decoded by the generic to_float,
 * which the device decoders equal bit for bit. */
static float emulate_dot(const float *w, const float *x, int64_t n) {
    float lane[32];
    for (int l = 0; l < 32; l++) {
        lane[l] = 0.0f;
        for (int64_t i = l; i < n; i += 32)
            lane[l] = fmaf(w[i], x[i], lane[l]);
    }
    for (int o = 16; o > 0; o >>= 1) {
        float next[32];
        for (int l = 0; l < 32; l++)
            next[l] = lane[l] + lane[l ^ o];
        memcpy(lane, next, sizeof lane);
    }
    return lane[0];
}

/* ne1 random rows of `type`, row_bytes apart. */
static uint8_t *random_rows(enum fx_type type, int64_t ne0, int64_t ne1, size_t *row_bytes,
                            struct fx_test_rng *rng) {
    *row_bytes = kref_row_bytes(type, ne0);
    uint8_t *w = malloc(*row_bytes * (size_t)ne1);
    assert_non_null(w);
    for (int64_t r = 0; r < ne1; r++)
        kref_random_row(type, w + (size_t)r * *row_bytes, ne0, rng);
    return w;
}

FX_TEST(cuda_dequantize_matches_generic_bits) {
    cuda_test_require();
    const struct fx_kernels *g = fx_kernels_named("generic");
    struct fx_test_rng rng = {1801};
    for (size_t t = 0; t < N_TYPES; t++) {
        for (size_t li = 0; li < N_LENGTHS; li++) {
            int64_t n = lengths[li] * 3; /* three rows' worth as one run of blocks */
            size_t bytes;
            uint8_t *w = random_rows(types[t], n, 1, &bytes, &rng);
            float *want = malloc((size_t)n * 4), *got = malloc((size_t)n * 4);
            assert_true(want && got);
            g->types[types[t]].to_float(w, want, n);
            void *d_w = cuda_test_upload(w, bytes);
            float *d_out = cuda_test_upload(NULL, (size_t)n * 4);
            struct fx_error err = {0};
            cuda_test_ok(fx_cuda_dequantize(types[t], d_w, n, d_out, NULL, &err), &err);
            cuda_test_download(got, d_out, (size_t)n * 4);
            for (int64_t i = 0; i < n; i++)
                if (memcmp(&got[i], &want[i], 4) != 0)
                    fail_msg("%s element %lld of %lld: device %.9g, generic %.9g",
                             fx_type_name(types[t]), (long long)i, (long long)n, got[i], want[i]);
            fx_cuda_free(d_w);
            fx_cuda_free(d_out);
            free(w), free(want), free(got);
        }
    }
}

FX_TEST(cuda_matmul_matches_generic) {
    cuda_test_require();
    const struct fx_kernels *g = fx_kernels_named("generic");
    struct fx_test_rng rng = {1802};
    for (size_t t = 0; t < N_TYPES; t++) {
        enum fx_type wt = types[t], at = g->types[wt].vec_dot_type;
        for (size_t li = 0; li < N_LENGTHS; li++) {
            int64_t ne0 = lengths[li];
            size_t row_bytes;
            uint8_t *w = random_rows(wt, ne0, N_ROWS, &row_bytes, &rng);
            float *x = malloc((size_t)(N_ACT * ne0) * 4);
            assert_non_null(x);
            kref_normal(x, N_ACT * ne0, &rng);

            /* One launch for all N_ACT rows, outputs padded to show the stride is honoured, and
             * one launch per row (the matvec). */
            int64_t out_stride = N_ROWS + 3;
            size_t out_bytes = (size_t)(N_ACT * out_stride) * 4;
            float *got = malloc(out_bytes), *one = malloc(N_ROWS * 4);
            float *wdec = malloc((size_t)ne0 * 4);
            assert_true(got && one && wdec);
            void *d_w = cuda_test_upload(w, row_bytes * N_ROWS);
            float *d_x = cuda_test_upload(x, (size_t)(N_ACT * ne0) * 4);
            float *d_out = cuda_test_upload(NULL, out_bytes);
            float *d_one = cuda_test_upload(NULL, N_ROWS * 4);
            struct fx_cuda_mat m = {wt, ne0, N_ROWS, row_bytes, d_w};
            struct fx_error err = {0};
            cuda_test_ok(fx_cuda_matmul(&m, d_x, ne0, N_ACT, d_out, out_stride, NULL, &err), &err);
            cuda_test_download(got, d_out, out_bytes);

            for (int64_t j = 0; j < N_ACT; j++) {
                const float *xj = x + j * ne0;
                cuda_test_ok(fx_cuda_matmul(&m, d_x + j * ne0, ne0, 1, d_one, N_ROWS, NULL, &err),
                             &err);
                cuda_test_download(one, d_one, N_ROWS * 4);
                void *act = kref_act(g, at, xj, ne0);
                for (int64_t r = 0; r < N_ROWS; r++) {
                    const uint8_t *wr = w + (size_t)r * row_bytes;
                    float dev = got[j * out_stride + r];
                    if (memcmp(&dev, &one[r], 4) != 0)
                        fail_msg("%s n=%lld row %lld act %lld: matmul %.9g, matvec %.9g",
                                 fx_type_name(wt), (long long)ne0, (long long)r, (long long)j, dev,
                                 one[r]);
                    for (int64_t p = N_ROWS; p < out_stride; p++)
                        assert_true(got[j * out_stride + p] == 0.0f);

                    g->types[wt].to_float(wr, wdec, ne0);
                    float emu = emulate_dot(wdec, xj, ne0);
                    if (memcmp(&dev, &emu, 4) != 0)
                        fail_msg("%s n=%lld row %lld act %lld: device %.9g, host emulation %.9g",
                                 fx_type_name(wt), (long long)ne0, (long long)r, (long long)j, dev,
                                 emu);
                    double mag_x, mag_a;
                    double ref_x = kref_dot(wt, wr, FX_TYPE_F32, xj, xj, ne0, &mag_x);
                    double ref_a = kref_dot(wt, wr, at, act, xj, ne0, &mag_a);
                    double tol = device_bound(ne0) * mag_x;
                    if (!(fabs(dev - ref_x) <= tol))
                        fail_msg("%s n=%lld row %lld act %lld: device %.9g, float64 %.9g "
                                 "(tolerance %.3g)",
                                 fx_type_name(wt), (long long)ne0, (long long)r, (long long)j, dev,
                                 ref_x, tol);
                    float cpu;
                    g->types[wt].vec_dot(ne0, &cpu, wr, act);
                    double tol_cpu = fabs(ref_x - ref_a) + tol + 1e-6 * mag_a;
                    if (!(fabs(dev - cpu) <= tol_cpu))
                        fail_msg("%s n=%lld row %lld act %lld: device %.9g, generic %.9g "
                                 "(tolerance %.3g)",
                                 fx_type_name(wt), (long long)ne0, (long long)r, (long long)j, dev,
                                 cpu, tol_cpu);
                }
                kref_free(act);
            }
            fx_cuda_free(d_w), fx_cuda_free(d_x), fx_cuda_free(d_out), fx_cuda_free(d_one);
            free(w), free(x), free(got), free(one), free(wdec);
        }
    }
}

/* The device decoders compiled for the host: the check a machine without a GPU can make of the
 * block layouts (every format, every element, bit for bit). */
FX_TEST(cuda_decoders_on_host_match_generic_bits) {
    const struct fx_kernels *g = fx_kernels_named("generic");
    struct fx_test_rng rng = {1803};
    for (size_t t = 0; t < N_TYPES; t++) {
        for (size_t li = 0; li < N_LENGTHS; li++) {
            int64_t n = lengths[li] * 3;
            size_t bytes;
            uint8_t *w = random_rows(types[t], n, 1, &bytes, &rng);
            float *want = malloc((size_t)n * 4), *got = malloc((size_t)n * 4);
            assert_true(want && got);
            g->types[types[t]].to_float(w, want, n);
            struct fx_error err = {0};
            cuda_test_ok(fx_cuda_dequantize_host(types[t], w, n, got, &err), &err);
            for (int64_t i = 0; i < n; i++)
                if (memcmp(&got[i], &want[i], 4) != 0)
                    fail_msg("%s element %lld of %lld: decoder %.9g, generic %.9g",
                             fx_type_name(types[t]), (long long)i, (long long)n, got[i], want[i]);
            free(w), free(want), free(got);
        }
    }
}

/* The host emulation of the device's sums against float64, within the bound the device test
 * uses: the bound's derivation checked on this data, on any machine. */
FX_TEST(cuda_matmul_emulation_within_bound) {
    const struct fx_kernels *g = fx_kernels_named("generic");
    struct fx_test_rng rng = {1804};
    double worst = 0;
    for (size_t t = 0; t < N_TYPES; t++) {
        for (size_t li = 0; li < N_LENGTHS; li++) {
            int64_t ne0 = lengths[li];
            size_t row_bytes;
            uint8_t *w = random_rows(types[t], ne0, N_ROWS, &row_bytes, &rng);
            float *x = malloc((size_t)ne0 * 4), *wdec = malloc((size_t)ne0 * 4);
            assert_true(x && wdec);
            kref_normal(x, ne0, &rng);
            for (int64_t r = 0; r < N_ROWS; r++) {
                const uint8_t *wr = w + (size_t)r * row_bytes;
                g->types[types[t]].to_float(wr, wdec, ne0);
                double mag;
                double ref = kref_dot(types[t], wr, FX_TYPE_F32, x, x, ne0, &mag);
                double err = fabs(emulate_dot(wdec, x, ne0) - ref);
                if (!(err <= device_bound(ne0) * mag))
                    fail_msg("%s n=%lld row %lld: emulation off float64 by %.3g, bound %.3g",
                             fx_type_name(types[t]), (long long)ne0, (long long)r, err,
                             device_bound(ne0) * mag);
                if (mag > 0 && err / mag / 0x1p-24 > worst)
                    worst = err / mag / 0x1p-24;
            }
            free(w), free(x), free(wdec);
        }
    }
    print_message("worst emulated error: %.2f units of 2^-24 of sum|w x| (bound ne0/32 + 10)\n",
                  worst);
}
