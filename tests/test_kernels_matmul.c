/* kernels: matvec and matmul of every weight format on every table this CPU supports, with and
 * without packed weights (fx_mat_pack), against the table's vec_dot (bit for bit), the generic
 * table and the float64 reference; and the packing API itself.
 *
 * Sizes: rows of one block and of many blocks (more than one run of the R16 driver: 67 blocks
 * of 32, 9 of 256, an odd f32 length), 37 weight rows (two whole panels of 16 and a partial
 * one), 19 activation rows (tiles of 8, 8, 2 and 1), worker splits of 1 and 3, weights,
 * activations and packed copies at their formats' natural alignment rather than a vector's.
 * Tolerance against float64: that of vec_dot (test_kernels_dot.c), 1e-6 of the sum of
 * |w_i| |a_i|; the generic table and the SIMD tables each stay within it. */
#include "fx_test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/types.h"
#include "kernels_ref.h"

#define DOT_TOL  1e-6
#define SENTINEL -12345.0f

static const enum fx_type weight_types[] = {
    FX_TYPE_F32,  FX_TYPE_F16,   FX_TYPE_BF16,   FX_TYPE_Q4_0,   FX_TYPE_Q4_1, FX_TYPE_Q5_0,
    FX_TYPE_Q5_1, FX_TYPE_Q8_0,  FX_TYPE_Q2_K,   FX_TYPE_Q3_K,   FX_TYPE_Q4_K, FX_TYPE_Q5_K,
    FX_TYPE_Q6_K, FX_TYPE_MXFP4, FX_TYPE_IQ4_NL, FX_TYPE_IQ4_XS,
};
#define N_WEIGHT_TYPES (sizeof weight_types / sizeof weight_types[0])

/* Row lengths: one block, and many (several runs of the R16 driver, an odd f32 length). */
static int64_t row_len(enum fx_type t, int which) {
    int64_t qk = fx_type_block_elems(t);
    if (qk == 1)
        return which ? 2144 + 5 : 32;
    return which ? qk * (qk == 32 ? 67 : 9) : qk;
}

/* A weight matrix of n_rows random rows at the format's natural alignment. */
static struct fx_mat random_mat(enum fx_type t, int64_t k, int64_t n_rows,
                                struct fx_test_rng *rng) {
    size_t row_bytes = kref_row_bytes(t, k);
    uint8_t *data = kref_alloc(row_bytes * (size_t)n_rows, kref_align(t));
    for (int64_t r = 0; r < n_rows; r++)
        kref_random_row(t, data + (size_t)r * row_bytes, k, rng);
    return (struct fx_mat){
        .type = t, .ne0 = k, .ne1 = n_rows, .row_bytes = row_bytes, .data = data};
}

/* n_act activation rows for w's format, quantized by table k (the bytes equal generic's). */
static uint8_t *make_acts(const struct fx_kernels *k, enum fx_type at, const float *x, int64_t n,
                          int64_t n_act, uint64_t *stride) {
    *stride = kref_row_bytes(at, n);
    uint8_t *act = kref_alloc(*stride * (size_t)n_act, kref_align(at));
    fx_quantize_act(k, at, x, n, n_act, n, act, *stride, 0, 1);
    return act;
}

/* out = act * w^T by every worker of an nth split (in reverse order: shares are independent),
 * out_stride = w->ne1 + 3, everything else left as SENTINEL; meta: NULL or the activations'
 * metadata. */
static void run_matmul(const struct fx_kernels *k, const struct fx_mat *w, const void *act,
                       uint64_t act_stride, int64_t n_act, float *out, int nth, const void *meta) {
    int64_t out_stride = w->ne1 + 3;
    for (int64_t i = 0; i < out_stride * n_act; i++)
        out[i] = SENTINEL;
    for (int ith = nth - 1; ith >= 0; ith--)
        fx_matmul(k, w, act, act_stride, n_act, out, out_stride, ith, nth, meta);
}

static bool same_bits(float a, float b) {
    return memcmp(&a, &b, sizeof a) == 0;
}

/* For one weight format and row length on table k: matmul, packed and not, split 1 and 3 ways,
 * equals the table's vec_dot bit for bit for every pair and writes nothing else; one activation
 * row alone gives the same bits; selected pairs agree with float64 and with generic. */
static void check_matmul(const struct fx_kernels *k, enum fx_type wt, int64_t n, int64_t n_rows,
                         int64_t n_act, struct fx_test_rng *rng) {
    const struct fx_kernels *g = fx_kernels_named("generic");
    const int64_t out_stride = n_rows + 3;
    enum fx_type at = k->types[wt].vec_dot_type;
    struct fx_mat w = random_mat(wt, n, n_rows, rng);
    float *x = malloc((size_t)(n * n_act) * sizeof *x);
    float *out = malloc((size_t)(out_stride * n_act) * sizeof *out);
    float *gen = malloc((size_t)(out_stride * n_act) * sizeof *gen);
    float *dots = malloc((size_t)(n_rows * n_act) * sizeof *dots);
    assert_non_null(x);
    assert_non_null(out);
    assert_non_null(gen);
    assert_non_null(dots);
    kref_normal(x, n * n_act, rng);
    uint64_t stride;
    uint8_t *act = at == FX_TYPE_F32 ? NULL : make_acts(k, at, x, n, n_act, &stride);
    const void *a = act ? (const void *)act : (const void *)x;
    if (!act)
        stride = (uint64_t)n * sizeof(float);
    for (int64_t j = 0; j < n_act; j++)
        for (int64_t r = 0; r < n_rows; r++)
            k->types[wt].vec_dot(n, &dots[j * n_rows + r],
                                 (const uint8_t *)w.data + r * w.row_bytes,
                                 (const uint8_t *)a + j * stride);
    run_matmul(g, &w, a, stride, n_act, gen, 1, NULL);

    /* The packed copy, when the table has a layout for this format. */
    uint64_t pbytes = fx_mat_pack_bytes(k, &w);
    void *packed = pbytes ? kref_alloc(pbytes, 4) : NULL;
    if (packed)
        fx_mat_pack(k, &w, packed, 0, 1);
    /* The activations' metadata made once, as the decoder passes it to its matmuls' pieces. */
    uint8_t *meta = NULL;
    if (k->types[wt].act_meta) {
        meta = malloc((size_t)(n_act * fx_act_meta_bytes(n)));
        assert_non_null(meta);
        for (int64_t j = 0; j < n_act; j++)
            k->types[wt].act_meta((const uint8_t *)a + j * stride, n,
                                  meta + j * fx_act_meta_bytes(n));
    }
    for (int pk = 0; pk < (packed ? 2 : 1); pk++) {
        struct fx_mat m = w;
        if (pk)
            fx_mat_set_packed(k, &m, packed);
        /* Split 1 and 3 ways, then 3 ways with the metadata given. */
        for (int v = 0; v < (meta ? 3 : 2); v++) {
            int nth = v == 0 ? 1 : 3;
            run_matmul(k, &m, a, stride, n_act, out, nth, v == 2 ? meta : NULL);
            for (int64_t j = 0; j < n_act; j++)
                for (int64_t r = 0; r < out_stride; r++) {
                    float got = out[j * out_stride + r];
                    if (r >= n_rows) {
                        if (!same_bits(got, SENTINEL))
                            fail_msg("%s %s: wrote outside its rows", k->name, fx_type_name(wt));
                        continue;
                    }
                    if (!same_bits(got, dots[j * n_rows + r]))
                        fail_msg("%s %s n=%lld packed=%d nth=%d meta=%d row %lld act %lld: "
                                 "matmul %a, vec_dot %a",
                                 k->name, fx_type_name(wt), (long long)n, pk, nth, v == 2,
                                 (long long)r, (long long)j, (double)got,
                                 (double)dots[j * n_rows + r]);
                }
            /* One activation row alone (the decode path) gives the same bits. */
            float *one = malloc((size_t)n_rows * sizeof *one);
            assert_non_null(one);
            int64_t jj = n_act / 2;
            const uint8_t *meta_jj = v == 2 ? meta + jj * fx_act_meta_bytes(n) : NULL;
            for (int ith = 0; ith < nth; ith++)
                fx_matmul(k, &m, (const uint8_t *)a + jj * stride, stride, 1, one, 0, ith, nth,
                          meta_jj);
            for (int64_t r = 0; r < n_rows; r++)
                if (!same_bits(one[r], out[jj * out_stride + r]))
                    fail_msg("%s %s packed=%d: one row %a, batched %a", k->name, fx_type_name(wt),
                             pk, (double)one[r], (double)out[jj * out_stride + r]);
            free(one);
        }
    }
    /* Against float64 and generic, for the first and the last activation row. */
    for (int64_t j = 0; j < n_act; j += n_act - 1)
        for (int64_t r = 0; r < n_rows; r++) {
            double mag, want = kref_dot(wt, (const uint8_t *)w.data + r * w.row_bytes, at,
                                        act ? act + j * stride : NULL, x + j * n, n, &mag);
            double got = out[j * out_stride + r], ref_g = gen[j * out_stride + r];
            if (fabs(got - want) > DOT_TOL * mag || fabs(ref_g - want) > DOT_TOL * mag)
                fail_msg("%s %s n=%lld row %lld act %lld: got %.9g, generic %.9g, want %.9g "
                         "(scale %.3g)",
                         k->name, fx_type_name(wt), (long long)n, (long long)r, (long long)j, got,
                         ref_g, want, mag);
        }
    free(meta);
    kref_free(packed);
    kref_free(act);
    kref_free((void *)w.data);
    free(x);
    free(out);
    free(gen);
    free(dots);
}

FX_TEST(kernels_matmul_matches_vec_dot_packed_and_reference) {
    const struct fx_kernels *tables[3];
    int n_tables = kref_tables(tables);
    struct fx_test_rng rng = {31};
    for (int k = 0; k < n_tables; k++)
        for (size_t ti = 0; ti < N_WEIGHT_TYPES; ti++)
            for (int which = 0; which < 2; which++)
                check_matmul(tables[k], weight_types[ti], row_len(weight_types[ti], which), 37, 19,
                             &rng);
}

/* A few activation rows (one tile) against long rows: the driver keeps the activations'
 * metadata for a span of 256 blocks at 8 rows, so 300 blocks take two spans. */
FX_TEST(kernels_matmul_long_rows_few_activations) {
    static const enum fx_type types[] = {FX_TYPE_Q8_0, FX_TYPE_Q4_1, FX_TYPE_Q6_K};
    const struct fx_kernels *tables[3];
    int n_tables = kref_tables(tables);
    struct fx_test_rng rng = {35};
    for (int k = 0; k < n_tables; k++)
        for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
            check_matmul(tables[k], types[ti], fx_type_block_elems(types[ti]) * 300, 20, 8, &rng);
}

/* Big batches: pairs of panels run as wide tiles (two panels against 4 activation rows, 6 for
 * the K formats on AVX-512), the second panel of a pair partial (57 rows: the pair of rows 32..56
 * has 25), and more activation rows than one chunk of the driver holds (70: 64 and 6 for the
 * 32-wide formats, 60 and 10 for tiles of 6, the last 4 in one-panel tiles); 200 rows are two
 * groups of the driver (128 and 72 rows, the last panel alone and partial). */
FX_TEST(kernels_matmul_wide_tiles_partial_pairs_and_chunks) {
    const struct fx_kernels *tables[3];
    int n_tables = kref_tables(tables);
    struct fx_test_rng rng = {36};
    for (int k = 0; k < n_tables; k++)
        for (size_t ti = 0; ti < N_WEIGHT_TYPES; ti++)
            if (fx_type_block_elems(weight_types[ti]) > 1)
                for (int rows = 57; rows <= 200; rows += 143)
                    check_matmul(tables[k], weight_types[ti], row_len(weight_types[ti], 1), rows,
                                 70, &rng);
}

/* The SIMD tables run the same float sequence for the quantized formats (r16.h), so where both
 * exist they agree bit for bit: a quantized model gives the same numbers on AVX2 and AVX-512.
 * Activation rows 1, 2, 4 and 8 are one tile of each width; 7 is tiles of 4, 2 and 1; 9 and 23
 * are wide tiles (two panels, the second partial at 21 weight rows) and the rest in tiles. */
FX_TEST(kernels_simd_tables_agree_on_quantized_formats) {
    const struct fx_kernels *avx2 = fx_kernels_named("avx2"), *avx512 = fx_kernels_named("avx512");
    if (!avx2 || !avx512)
        skip();
    static const int64_t act_rows[] = {1, 2, 4, 7, 8, 9, 23};
    struct fx_test_rng rng = {37};
    const int64_t n_rows = 21, max_act = 23;
    for (size_t ti = 0; ti < N_WEIGHT_TYPES; ti++) {
        enum fx_type wt = weight_types[ti];
        if (fx_type_block_elems(wt) == 1)
            continue; /* float formats: 8 against 16 lanes */
        int64_t n = row_len(wt, 1);
        struct fx_mat w = random_mat(wt, n, n_rows, &rng);
        float *x = malloc((size_t)(n * max_act) * sizeof *x);
        float *o2 = malloc((size_t)((n_rows + 3) * max_act) * sizeof *o2);
        float *o5 = malloc((size_t)((n_rows + 3) * max_act) * sizeof *o5);
        assert_non_null(x);
        assert_non_null(o2);
        assert_non_null(o5);
        kref_normal(x, n * max_act, &rng);
        uint64_t stride;
        uint8_t *act = make_acts(avx2, avx2->types[wt].vec_dot_type, x, n, max_act, &stride);
        for (size_t i = 0; i < sizeof act_rows / sizeof act_rows[0]; i++) {
            int64_t n_act = act_rows[i];
            run_matmul(avx2, &w, act, stride, n_act, o2, 2, NULL);
            run_matmul(avx512, &w, act, stride, n_act, o5, 1, NULL);
            if (memcmp(o2, o5, (size_t)((n_rows + 3) * n_act) * sizeof *o2) != 0)
                fail_msg("%s, %lld activation rows: avx2 and avx512 differ", fx_type_name(wt),
                         (long long)n_act);
        }
        kref_free(act);
        kref_free((void *)w.data);
        free(x);
        free(o2);
        free(o5);
    }
}

/* Packing: the size, shares that add up to the whole copy whatever the split, nothing read past
 * the last row, and tables without a layout saying so. */
FX_TEST(kernels_mat_pack_sizes_and_splits) {
    const struct fx_kernels *tables[3];
    int n_tables = kref_tables(tables);
    struct fx_test_rng rng = {33};
    for (int k = 0; k < n_tables; k++) {
        const struct fx_kernels *t = tables[k];
        for (size_t ti = 0; ti < N_WEIGHT_TYPES; ti++) {
            enum fx_type wt = weight_types[ti];
            int64_t n = row_len(wt, 0) * 3, n_rows = 21;
            struct fx_mat w = random_mat(wt, n, n_rows, &rng);
            uint64_t bytes = fx_mat_pack_bytes(t, &w);
            if (t->types[wt].pack_kind == FX_PACK_NONE) {
                assert_int_equal(bytes, 0);
                kref_free((void *)w.data);
                continue;
            }
            assert_int_equal(t->types[wt].pack_kind, FX_PACK_R16);
            /* 2 panels of 16 rows, no more than 4% over the rows' own bytes per panel */
            assert_true(bytes >= 32 * w.row_bytes && bytes <= 32 * w.row_bytes * 104 / 100);
            uint8_t *one = malloc(bytes), *split = malloc(bytes);
            assert_non_null(one);
            assert_non_null(split);
            memset(one, 0xa5, bytes);
            memset(split, 0x5a, bytes);
            fx_mat_pack(t, &w, one, 0, 1);
            for (int ith = 4; ith >= 0; ith--)
                fx_mat_pack(t, &w, split, ith, 5);
            assert_memory_equal(one, split, bytes);
            /* Rows 21..31 do not exist: what lies past the last row is never read. */
            struct fx_mat w32 = random_mat(wt, n, 32, &rng);
            memcpy((void *)w32.data, w.data, w.row_bytes * (size_t)n_rows);
            w32.ne1 = n_rows;
            fx_mat_pack(t, &w32, split, 0, 1);
            assert_memory_equal(one, split, bytes);
            struct fx_mat m = w;
            fx_mat_set_packed(t, &m, one);
            assert_ptr_equal(m.packed, one);
            assert_int_equal(m.pack_kind, FX_PACK_R16);
            fx_mat_set_packed(t, &m, NULL);
            assert_null(m.packed);
            assert_int_equal(m.pack_kind, FX_PACK_NONE);
            free(one);
            free(split);
            kref_free((void *)w.data);
            kref_free((void *)w32.data);
        }
    }
    /* The generic table reads the file's layout only. */
    struct fx_mat w = {.type = FX_TYPE_Q4_0, .ne0 = 32, .ne1 = 16, .row_bytes = 18};
    assert_int_equal(fx_mat_pack_bytes(fx_kernels_named("generic"), &w), 0);
}

/* bench-kernels runs a tiny case end to end and prints its table. */
FX_TEST(kernels_bench_kernels_prints_cases) {
    const char *args[] = {"bench-kernels", "-t",        "q4_0,f16", "-s",     "64x40", "-r",
                          "1,9",           "-j",        "1,2",      "--runs", "1",     "--min-time",
                          "0.001",         "--cold-mb", "1",        "--pack", "both",  NULL};
    char *out, *err;
    int rc = fx_test_run_cli(args, NULL, &out, &err);
    if (rc != 0)
        fail_msg("exit %d: %s", rc, err);
    assert_non_null(strstr(out, "bandwidth  threads 2"));
    const char *table = fx_kernels_name();
    char line[64];
    snprintf(line, sizeof line, "%-8s %-6s %-11s %5d %3d", table, "Q4_0", "64x40", 9, 2);
    assert_non_null(strstr(out, line));
    snprintf(line, sizeof line, "%-8s %-6s %-11s %5d %3d", table, "F16", "64x40", 1, 1);
    assert_non_null(strstr(out, line));
    free(out);
    free(err);
    /* Timed in the workers' CPU time instead: the same table. */
    const char *cpu[] = {
        "bench-kernels", "-t", "q8_0",       "-s",    "64x40",     "-r", "16",         "-j", "2",
        "--runs",        "1",  "--min-time", "0.001", "--cold-mb", "1",  "--cpu-time", NULL};
    rc = fx_test_run_cli(cpu, NULL, &out, &err);
    if (rc != 0)
        fail_msg("exit %d: %s", rc, err);
    assert_non_null(strstr(out, "of the largest worker CPU time"));
    assert_non_null(strstr(out, "bandwidth  threads 2"));
    snprintf(line, sizeof line, "%-8s %-6s %-11s %5d %3d", table, "Q8_0", "64x40", 16, 2);
    assert_non_null(strstr(out, line));
    free(out);
    free(err);
    const char *bad[] = {"bench-kernels", "-s", "64y40", NULL};
    rc = fx_test_run_cli(bad, NULL, &out, &err);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(err, "bad value '64y40'"));
    free(out);
    free(err);
}
