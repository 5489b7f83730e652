/* kernels: dot products, matmul and the drivers, for every table this CPU supports, and the
 * table dispatch itself.
 *
 * Tolerances. A dot product's float64 reference is the sum of the decoded weights times the
 * decoded activations. The kernels differ from it only by f32 rounding: a few roundings per
 * block or sub-block (scale products, the conversion of the exact integer sum) and the f32
 * accumulation of the blocks or SIMD partial sums. Measured against the scale
 * sum(|w_i| |a_i|) (with |w_i| counting both terms of d*q - m, against which the subtraction's
 * cancellation is measured) the error is at most 2.2e-8 on this data for every format and
 * table; the bound is 1e-6. A single wrong integer product in one block shows at about 1e-5.
 */
#include "fx_test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/half.h"
#include "kernels/kernels.h"
#include "kernels/types.h"
#include "kernels_ref.h"

#define DOT_TOL 1e-6

static const enum fx_type weight_types[] = {
    FX_TYPE_F32,  FX_TYPE_F16,   FX_TYPE_BF16,   FX_TYPE_Q4_0,   FX_TYPE_Q4_1, FX_TYPE_Q5_0,
    FX_TYPE_Q5_1, FX_TYPE_Q8_0,  FX_TYPE_Q2_K,   FX_TYPE_Q3_K,   FX_TYPE_Q4_K, FX_TYPE_Q5_K,
    FX_TYPE_Q6_K, FX_TYPE_MXFP4, FX_TYPE_IQ4_NL, FX_TYPE_IQ4_XS,
};
#define N_WEIGHT_TYPES (sizeof weight_types / sizeof weight_types[0])

static enum fx_type act_type(enum fx_type w) {
    return fx_kernels_named("generic")->types[w].vec_dot_type;
}

FX_TEST(kernels_vec_dot_matches_reference) {
    static const int64_t blocks[] = {1, 3, 7, 33};
    const struct fx_kernels *tables[3];
    int n_tables = kref_tables(tables);
    struct fx_test_rng rng = {3};
    for (size_t ti = 0; ti < N_WEIGHT_TYPES; ti++) {
        enum fx_type wt = weight_types[ti], at = act_type(wt);
        int64_t qk = fx_type_block_elems(wt) == 1 ? 32 : fx_type_block_elems(wt);
        for (int bi = 0; bi < 4; bi++) {
            int64_t n = qk * blocks[bi] + (fx_type_block_elems(wt) == 1 ? bi : 0);
            void *w = kref_alloc(kref_row_bytes(wt, n), kref_align(wt));
            float *x = kref_alloc((size_t)n * sizeof(float), 4);
            kref_random_row(wt, w, n, &rng);
            kref_normal(x, n, &rng);
            for (int k = 0; k < n_tables; k++) {
                void *act = at == FX_TYPE_F32 ? x : kref_act(tables[k], at, x, n);
                double mag, want = kref_dot(wt, w, at, act, x, n, &mag);
                float got = -1;
                tables[k]->types[wt].vec_dot(n, &got, w, act);
                if (fabs((double)got - want) > DOT_TOL * mag)
                    fail_msg("%s %s n=%lld: got %.9g, want %.9g (scale %.3g)", tables[k]->name,
                             fx_type_name(wt), (long long)n, (double)got, want, mag);
                if (act != x)
                    kref_free(act);
            }
            kref_free(w);
            kref_free(x);
        }
    }
}

/* Round half to even, the scale from amax, zero blocks, and ties that round half away from
 * zero would settle the other way. */
FX_TEST(kernels_quantize_act_q8_0_rounds_half_to_even) {
    float x[64] = {127.0f, 2.5f, -3.5f, 0.5f, -0.5f, 1.5f, 126.5f, -127.0f};
    for (int i = 8; i < 32; i++)
        x[i] = (float)(i - 20) + 0.5f;
    /* x[32..63]: all zero */
    const int8_t want[8] = {127, 2, -4, 0, 0, 2, 126, -127};
    const struct fx_kernels *tables[3];
    int n_tables = kref_tables(tables);
    for (int k = 0; k < n_tables; k++) {
        struct fx_block_q8_0 q[2];
        tables[k]->types[FX_TYPE_Q8_0].quantize_act(x, q, 64);
        assert_float_equal(fx_fp16_to_f32(q[0].d), 1.0f, 0.0f);
        assert_memory_equal(q[0].qs, want, sizeof want);
        for (int i = 8; i < 32; i++)
            assert_int_equal(q[0].qs[i], (i - 20) % 2 == 0 ? i - 20 : i - 19);
        assert_int_equal(q[1].d, 0);
        for (int i = 0; i < 32; i++)
            assert_int_equal(q[1].qs[i], 0);
        struct fx_block_q8_1 q1[2];
        tables[k]->types[FX_TYPE_Q8_1].quantize_act(x, q1, 64);
        assert_memory_equal(q1[0].qs, q[0].qs, sizeof q[0].qs);
        int sum = 0;
        for (int i = 0; i < 32; i++)
            sum += q[0].qs[i];
        assert_int_equal(q1[0].s, fx_f32_to_fp16((float)sum));
    }
}

/* Q8_K: the value of largest magnitude maps to -127, d = 1 / iscale, bsums add up. */
FX_TEST(kernels_quantize_act_q8_k_scale_and_bsums) {
    struct fx_test_rng rng = {5};
    float x[512];
    kref_normal(x, 512, &rng);
    x[17] = 9.0f;
    memset(x + 256, 0, 256 * sizeof(float));
    const struct fx_kernels *tables[3];
    int n_tables = kref_tables(tables);
    for (int k = 0; k < n_tables; k++) {
        struct fx_block_q8_K q[2];
        tables[k]->types[FX_TYPE_Q8_K].quantize_act(x, q, 512);
        assert_int_equal(q[0].qs[17], -127);
        assert_float_equal(q[0].d, 1.0f / (-127.0f / 9.0f), 0.0f);
        for (int j = 0; j < 16; j++) {
            int sum = 0;
            for (int l = 0; l < 16; l++)
                sum += q[0].qs[16 * j + l];
            assert_int_equal(q[0].bsums[j], sum);
        }
        for (int i = 0; i < 256; i++)
            assert_true(fabsf((float)q[0].qs[i] * q[0].d - x[i]) <= 0.5f * fabsf(q[0].d) + 1e-6f);
        assert_float_equal(q[1].d, 0.0f, 0.0f);
        for (int j = 0; j < 16; j++)
            assert_int_equal(q[1].bsums[j], 0);
    }
}

/* Many rows through the driver, split among workers (more workers than blocks, too), give the
 * bytes of quantizing each row alone. */
FX_TEST(kernels_quantize_act_driver_splits_rows_and_blocks) {
    static const enum fx_type acts[] = {FX_TYPE_F32, FX_TYPE_Q8_0, FX_TYPE_Q8_1, FX_TYPE_Q8_K};
    const struct fx_kernels *k = fx_kernels();
    struct fx_test_rng rng = {9};
    for (size_t a = 0; a < 4; a++) {
        enum fx_type t = acts[a];
        int64_t n = 3 * (t == FX_TYPE_Q8_K ? 256 : 32), rows = 5, src_stride = n + 5;
        size_t row_bytes = kref_row_bytes(t, n), dst_stride = row_bytes + 8; /* keeps alignment */
        float *x = malloc((size_t)(rows * src_stride) * sizeof *x);
        uint8_t *want = calloc((size_t)rows, dst_stride), *got = malloc((size_t)rows * dst_stride);
        assert_non_null(x);
        assert_non_null(want);
        assert_non_null(got);
        kref_normal(x, rows * src_stride, &rng);
        for (int64_t r = 0; r < rows; r++)
            k->types[t].quantize_act(x + r * src_stride, want + r * dst_stride, n);
        for (int nth = 1; nth <= 17; nth += 4) {
            memset(got, 0, (size_t)rows * dst_stride);
            for (int ith = nth - 1; ith >= 0; ith--) /* any order */
                fx_quantize_act(k, t, x, src_stride, rows, n, got, dst_stride, ith, nth);
            assert_memory_equal(got, want, (size_t)rows * dst_stride);
        }
        free(x);
        free(want);
        free(got);
    }
}

/* The determinism contract: every (weight row, activation row) result of a matmul equals the
 * table's vec_dot bit for bit, whatever the number of activation rows and the worker split;
 * and the matmul writes exactly its outputs. */
FX_TEST(kernels_matmul_is_vec_dot_bit_for_bit) {
    const struct fx_kernels *tables[3];
    int n_tables = kref_tables(tables);
    struct fx_test_rng rng = {21};
    const int64_t n_rows = 37, n_act = 5, out_stride = n_rows + 3;
    for (size_t ti = 0; ti < N_WEIGHT_TYPES; ti++) {
        enum fx_type wt = weight_types[ti], at = act_type(wt);
        int64_t qk = fx_type_block_elems(wt) == 1 ? 32 : fx_type_block_elems(wt);
        int64_t n = 3 * qk;
        size_t row_bytes = kref_row_bytes(wt, n), act_bytes = kref_row_bytes(at, n);
        uint8_t *w = kref_alloc(row_bytes * n_rows, kref_align(wt));
        for (int64_t r = 0; r < n_rows; r++)
            kref_random_row(wt, w + r * row_bytes, n, &rng);
        float *x = malloc((size_t)(n * n_act) * sizeof *x);
        assert_non_null(x);
        kref_normal(x, n * n_act, &rng);
        struct fx_mat mat = {
            .type = wt, .ne0 = n, .ne1 = n_rows, .row_bytes = row_bytes, .data = w};
        float *out = malloc((size_t)(out_stride * n_act) * sizeof *out);
        float *one = malloc((size_t)out_stride * sizeof *one);
        assert_non_null(out);
        assert_non_null(one);
        for (int k = 0; k < n_tables; k++) {
            const struct fx_kernels *t = tables[k];
            uint8_t *act = kref_alloc(act_bytes * (size_t)n_act, kref_align(at));
            fx_quantize_act(t, at, x, n, n_act, n, act, act_bytes, 0, 1);
            for (int nth = 1; nth <= 4; nth++) {
                for (int64_t i = 0; i < out_stride * n_act; i++)
                    out[i] = -12345.0f; /* sentinel */
                for (int ith = 0; ith < nth; ith++)
                    fx_matmul(t, &mat, act, act_bytes, n_act, out, out_stride, ith, nth, NULL);
                for (int64_t j = 0; j < n_act; j++) {
                    for (int ith = 0; ith < nth; ith++)
                        fx_matmul(t, &mat, act + j * act_bytes, act_bytes, 1, one, 0, ith, nth,
                                  NULL);
                    for (int64_t r = 0; r < out_stride; r++) {
                        float got = out[j * out_stride + r];
                        if (r >= n_rows) {
                            assert_true(got == -12345.0f);
                            continue;
                        }
                        float dot;
                        t->types[wt].vec_dot(n, &dot, w + r * row_bytes, act + j * act_bytes);
                        if (memcmp(&got, &dot, sizeof dot) != 0 ||
                            memcmp(&got, &one[r], sizeof dot) != 0)
                            fail_msg("%s %s nth=%d row %lld act %lld: matmul %a, n_act=1 %a, "
                                     "vec_dot %a",
                                     t->name, fx_type_name(wt), nth, (long long)r, (long long)j,
                                     (double)got, (double)one[r], (double)dot);
                    }
                }
            }
            kref_free(act);
        }
        kref_free(w);
        free(x);
        free(out);
        free(one);
    }
}

/* ---- dispatch ------------------------------------------------------------------------------ */

FX_TEST(kernels_named_knows_the_tables) {
    assert_non_null(fx_kernels_named("generic"));
    assert_string_equal(fx_kernels_named("generic")->name, "generic");
    assert_null(fx_kernels_named("bogus"));
    assert_null(fx_kernels_named(""));
    assert_null(fx_kernels_named(NULL));
    const struct fx_kernels *tables[3];
    int n_tables = kref_tables(tables);
    for (int k = 0; k < n_tables; k++)
        assert_ptr_equal(fx_kernels_named(tables[k]->name), tables[k]);
}

/* Every supported table is complete (the ISA tables are filled up from generic), and agrees
 * with generic on which types support what and on the activation formats. */
FX_TEST(kernels_tables_are_complete) {
    const struct fx_kernels *g = fx_kernels_named("generic");
    const struct fx_kernels *tables[3];
    int n_tables = kref_tables(tables);
    for (int k = 0; k < n_tables; k++) {
        const struct fx_kernels *t = tables[k];
        assert_non_null(t->rms_norm);
        assert_non_null(t->softcap);
        assert_non_null(t->softmax);
        assert_non_null(t->rope);
        assert_non_null(t->swiglu_oai);
        assert_non_null(t->add);
        assert_non_null(t->scale);
        assert_non_null(t->axpy);
        assert_non_null(t->argmax);
        for (int a = 0; a < FX_ACT_COUNT; a++) {
            assert_non_null(t->act[a]);
            assert_non_null(t->glu[a]);
        }
        for (int ty = 0; ty < FX_TYPE_COUNT; ty++) {
            const struct fx_type_ops *o = &t->types[ty], *go = &g->types[ty];
            assert_int_equal(o->vec_dot_type, go->vec_dot_type);
            assert_int_equal(!o->to_float, !go->to_float);
            assert_int_equal(!o->from_float, !go->from_float);
            assert_int_equal(!o->quantize_act, !go->quantize_act);
            assert_int_equal(!o->vec_dot, !go->vec_dot);
        }
    }
    for (size_t ti = 0; ti < N_WEIGHT_TYPES; ti++)
        assert_non_null(g->types[weight_types[ti]].vec_dot);
}

/* fx_kernels() is FERROX_CPU's table when that is set and supported, else the best one. */
FX_TEST(kernels_choice_follows_cpu_and_env) {
    const struct fx_kernels *tables[3];
    int n_tables = kref_tables(tables);
    const char *env = getenv("FERROX_CPU");
    const struct fx_kernels *want =
        env && fx_kernels_named(env) ? fx_kernels_named(env) : tables[n_tables - 1];
    assert_ptr_equal(fx_kernels(), want);
    assert_string_equal(fx_kernels_name(), want->name);
}

static char *version_with_cpu(const char *value, char **err) {
    const char *old = getenv("FERROX_CPU");
    char *saved = old ? strdup(old) : NULL;
    setenv("FERROX_CPU", value, 1);
    char *out = NULL;
    const char *args[] = {"--version", NULL};
    int rc = fx_test_run_cli(args, NULL, &out, err);
    if (saved) {
        setenv("FERROX_CPU", saved, 1);
        free(saved);
    } else {
        unsetenv("FERROX_CPU");
    }
    assert_int_equal(rc, 0);
    return out;
}

FX_TEST(kernels_version_prints_the_table) {
    const struct fx_kernels *tables[3];
    int n_tables = kref_tables(tables);
    const char *best = tables[n_tables - 1]->name;
    char line[64], *out, *err;
    for (int k = 0; k < n_tables; k++) {
        out = version_with_cpu(tables[k]->name, &err);
        snprintf(line, sizeof line, "kernels: %s\n", tables[k]->name);
        assert_non_null(strstr(out, line));
        assert_string_equal(err, "");
        free(out);
        free(err);
    }
    /* An unknown name: an error naming it, then the best table. */
    out = version_with_cpu("sse9", &err);
    snprintf(line, sizeof line, "kernels: %s\n", best);
    assert_non_null(strstr(out, line));
    assert_non_null(strstr(err, "FERROX_CPU=sse9 is not a kernel table"));
    free(out);
    free(err);
    /* A table this CPU lacks, when there is one. */
    if (n_tables < 3) {
        out = version_with_cpu("avx512", &err);
        assert_non_null(strstr(out, line));
        assert_non_null(strstr(err, "this CPU lacks"));
        free(out);
        free(err);
    }
}
