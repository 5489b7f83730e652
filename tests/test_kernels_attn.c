/* kernels: attention (attn_begin / attn_run / attn_finish), in every table this CPU runs,
 * against a float64 softmax attention, and the contract that an output's bits depend only on its
 * query, its keys and the runs they are fed in (not on which other queries share the state, nor
 * on the keys those see). */
#include "fx_test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/kv_tile.h"

static const char *const tables[] = {"generic", "avx2", "avx512"};

enum { N_KEYS = 150, MAX_DIM = 256, N_Q = 40 };

struct case_data {
    float q[N_Q][MAX_DIM];
    float keys[N_KEYS][MAX_DIM];
    float values[N_KEYS][MAX_DIM];
    float sinks[N_Q];
};

enum { N_GROUPS = (N_KEYS + 15) / 16 };

/* Keys and values stored as `type` (row bytes per row), each group of 16 rows at its own place
 * and the groups in reverse order, as a paged cache hands them to the kernel; the keys as key
 * tiles (kernels.h) when tiled, a group's tile where its rows would be. */
struct typed_cache {
    enum fx_type type;
    bool tiled;
    uint64_t row;
    uint8_t k[N_GROUPS * 16 * MAX_DIM * 4], v[N_GROUPS * 16 * MAX_DIM * 4]; /* f32 the largest */
};

/* Where row j of the typed cache lies (bytes from k or v). */
static uint64_t typed_at(const struct typed_cache *c, int j) {
    return (uint64_t)((N_GROUPS - 1 - j / 16) * 16 + j % 16) * c->row;
}

/* Queries q0 .. q0 + n_rows * group - 1 as n_rows rows of `group` heads; row r sees keys
 * lo[r] .. hi[r] (absolute) of the first n_keys, fed in runs cut at multiples of FX_ATTN_RUN as
 * the decoder feeds them: d's f32 keys and values, or tc's (not NULL). out:
 * [n_rows * group][MAX_DIM]. */
static void attend(const struct fx_kernels *k, const struct case_data *d,
                   const struct typed_cache *tc, int q0, int n_rows, int group, const int *lo,
                   const int *hi, int dim, float softcap, bool sinks, float *out) {
    int64_t floats = fx_attn_state_floats(n_rows * group, dim, dim);
    float *mem = aligned_alloc(64, (size_t)(floats * (int64_t)sizeof(float) + 63) / 64 * 64);
    assert_non_null(mem);
    /* the decoder's layout: a row's heads side by side, dim floats each */
    static float q[N_Q * MAX_DIM];
    for (int o = 0; o < n_rows * group; o++)
        memcpy(q + o * dim, d->q[q0 + o], sizeof(float) * (size_t)dim);
    struct fx_attn_state st;
    k->attn_begin(&st, mem, q, group * dim, n_rows, group, dim, dim);
    for (int t0 = 0; t0 < N_KEYS; t0 += FX_ATTN_RUN) {
        int32_t first[N_Q], last[N_Q], n_keys = 0;
        for (int r = 0; r < n_rows; r++) {
            first[r] = (lo[r] > t0 ? lo[r] : t0) - t0;
            last[r] = (hi[r] < t0 + FX_ATTN_RUN - 1 ? hi[r] : t0 + FX_ATTN_RUN - 1) - t0;
            if (first[r] <= last[r] && last[r] + 1 > n_keys)
                n_keys = last[r] + 1;
        }
        struct fx_kv_run kr = {.type = FX_TYPE_F32, .stride = MAX_DIM * sizeof(float)}, vr = kr;
        if (tc)
            kr.type = vr.type = tc->type, kr.stride = vr.stride = tc->row, kr.tiled = tc->tiled;
        for (int b = 0; b < FX_ATTN_RUN / 16 && t0 + 16 * b < N_KEYS; b++) {
            int j = t0 + 16 * b;
            kr.grp[b] = tc ? tc->k + typed_at(tc, j) : (const uint8_t *)d->keys[j];
            vr.grp[b] = tc ? tc->v + typed_at(tc, j) : (const uint8_t *)d->values[j];
        }
        if (n_keys)
            k->attn_run(&st, first, last, &kr, &vr, n_keys, 0.125f, softcap);
    }
    for (int r = 0; r < n_rows; r++)
        k->attn_finish(out + r * group * MAX_DIM, MAX_DIM, st.acc + r * group * dim,
                       st.m + r * group, st.l + r * group, sinks ? d->sinks + q0 + r * group : NULL,
                       group, dim);
    free(mem);
}

/* Query o's output against a float64 softmax over keys lo .. hi. */
static void check_float64(const struct case_data *d, const char *table, int o, int lo, int hi,
                          int dim, float softcap, bool sinks, const float *out) {
    double s[N_KEYS], top = sinks ? d->sinks[o] : -INFINITY, den = 0.0;
    for (int j = lo; j <= hi; j++) {
        double dot = 0.0;
        for (int i = 0; i < dim; i++)
            dot += (double)d->q[o][i] * d->keys[j][i];
        s[j] = 0.125 * dot;
        if (softcap > 0.0f)
            s[j] = softcap * tanh(s[j] / softcap);
        top = fmax(top, s[j]);
    }
    for (int j = lo; j <= hi; j++)
        den += exp(s[j] - top);
    if (sinks)
        den += exp(d->sinks[o] - top);
    for (int i = 0; i < dim; i++) {
        double ref = 0.0;
        for (int j = lo; j <= hi; j++)
            ref += exp(s[j] - top) / den * d->values[j][i];
        if (fabs(out[i] - ref) > 2e-5)
            fail_msg("%s dim %d keys %d..%d output %d [%d]: %g, float64 %g", table, dim, lo, hi, o,
                     i, out[i], ref);
    }
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
    static const int dims[] = {64, 128, 256, 80, 8};
    static const int lengths[] = {1, 15, 64, 65, 150};
    /* (rows, heads per row): queries as the decoder groups them - many rows of a prefill, the
     * 2-8 heads of one decode row or of a few rows, which the AVX-512 kernel holds in key lanes
     * rather than query lanes - each against one query alone */
    static const int shapes[][2] = {{5, 8}, {8, 5}, {20, 2}, {40, 1}, {1, 4},
                                    {1, 2}, {2, 4}, {1, 8},  {3, 3}};
    for (size_t t = 0; t < sizeof tables / sizeof tables[0]; t++) {
        const struct fx_kernels *k = fx_kernels_named(tables[t]);
        if (!k)
            continue;
        for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++)
            for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++)
                for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
                    for (int variant = 0; variant < 3; variant++) {
                        int dim = dims[di], n = lengths[li];
                        int n_rows = shapes[si][0], group = shapes[si][1];
                        float softcap = variant == 1 ? 5.0f : 0.0f;
                        bool sinks = variant == 2;
                        /* Rows see different keys: causal ends, some sliding-window starts,
                         * and (when n is short) some none at all. */
                        int lo[N_Q], hi[N_Q];
                        for (int r = 0; r < n_rows; r++) {
                            hi[r] = n - 1 - (r * 7) % 11;
                            lo[r] = r % 3 == 1 ? (r * 13) % 70 : 0;
                        }
                        static float all[N_Q][MAX_DIM], one[MAX_DIM];
                        attend(k, &d, NULL, 0, n_rows, group, lo, hi, dim, softcap, sinks, all[0]);
                        for (int o = 0; o < n_rows * group; o++) {
                            int r = o / group;
                            attend(k, &d, NULL, o, 1, 1, &lo[r], &hi[r], dim, softcap, sinks, one);
                            assert_memory_equal(one, all[o], sizeof(float) * (size_t)dim);
                            if (lo[r] <= hi[r])
                                check_float64(&d, k->name, o, lo[r], hi[r], dim, softcap, sinks,
                                              all[o]);
                        }
                    }
    }
}

/* Queries (scaled by 2), keys and values of a case drawn from seed. */
static void random_case(struct case_data *d, uint64_t seed) {
    struct fx_test_rng rng = {seed};
    for (int o = 0; o < N_Q; o++)
        for (int i = 0; i < MAX_DIM; i++)
            d->q[o][i] = (float)(2.0 * fx_test_rng_normal(&rng));
    for (int j = 0; j < N_KEYS; j++)
        for (int i = 0; i < MAX_DIM; i++) {
            d->keys[j][i] = (float)fx_test_rng_normal(&rng);
            d->values[j][i] = (float)fx_test_rng_normal(&rng);
        }
}

/* Every table's attention over a (a's cache, or its f32 rows when ca is NULL) and over b gives
 * the same bits, for runs of 1 to 150 keys and the row x group shapes given (one row: key
 * lanes; more: query lanes). */
static void expect_same_attention(const struct case_data *a, const struct typed_cache *ca,
                                  const struct case_data *b, const struct typed_cache *cb, int dim,
                                  const int (*shapes)[2], size_t n_shapes, const char *what) {
    static const int lengths[] = {1, 17, 64, 150};
    static float out_a[N_Q][MAX_DIM], out_b[N_Q][MAX_DIM];
    for (size_t t = 0; t < sizeof tables / sizeof tables[0]; t++) {
        const struct fx_kernels *k = fx_kernels_named(tables[t]);
        if (!k)
            continue;
        for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++)
            for (size_t si = 0; si < n_shapes; si++) {
                int n = lengths[li], n_rows = shapes[si][0], group = shapes[si][1];
                int lo[N_Q], hi[N_Q];
                for (int r = 0; r < n_rows; r++) {
                    hi[r] = n - 1 - (r * 7) % 11;
                    lo[r] = r % 3 == 1 ? (r * 13) % 70 : 0;
                }
                attend(k, a, ca, 0, n_rows, group, lo, hi, dim, 0.0f, false, out_a[0]);
                attend(k, b, cb, 0, n_rows, group, lo, hi, dim, 0.0f, false, out_b[0]);
                for (int o = 0; o < n_rows * group; o++)
                    if (memcmp(out_a[o], out_b[o], sizeof(float) * (size_t)dim))
                        fail_msg("%s %s dim %d keys %d shape %dx%d: %s", k->name,
                                 fx_type_name(ca ? ca->type : cb->type), dim, n, n_rows, group,
                                 what);
            }
    }
}

/* f16 and q8_0 rows read in place (key lanes transpose them, values widen them as they stream)
 * give the bits of the same rows loaded as f32 first, in key lanes and query lanes alike. */
FX_TEST(kernels_attention_reads_f16_and_q8_0_rows_as_their_f32) {
    static struct case_data d, loaded;
    static struct typed_cache tc;
    const struct fx_kernels *g = fx_kernels_named("generic");
    random_case(&d, 11);
    memcpy(loaded.q, d.q, sizeof d.q);
    static const enum fx_type types[] = {FX_TYPE_F16, FX_TYPE_Q8_0};
    static const int dims[] = {64, 128, 256, 96};
    static const int shapes[][2] = {{1, 4}, {1, 8}, {2, 3}, {5, 8}};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
        for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++) {
            int dim = dims[di];
            tc.type = types[ti];
            assert_true(fx_type_row_bytes(tc.type, dim, &tc.row));
            for (int j = 0; j < N_KEYS; j++) {
                g->kv_store(tc.type, d.keys[j], dim, tc.k + typed_at(&tc, j));
                g->kv_store(tc.type, d.values[j], dim, tc.v + typed_at(&tc, j));
                g->kv_load(tc.type, tc.k + typed_at(&tc, j), 0, 1, dim, loaded.keys[j], 0);
                g->kv_load(tc.type, tc.v + typed_at(&tc, j), 0, 1, dim, loaded.values[j], 0);
            }
            expect_same_attention(&d, &tc, &loaded, NULL, dim, shapes,
                                  sizeof shapes / sizeof shapes[0], "in place differs from f32");
        }
}

/* Keys read from key tiles give the bits of the same keys read as rows, for every cache type, in
 * key lanes (the tiles are the scores' operand) and query lanes (loaded as f32 rows) alike. The
 * tile slots past the last key hold NaN bytes: read, never seen. */
FX_TEST(kernels_attention_reads_key_tiles_as_their_rows) {
    static struct case_data d;
    static struct typed_cache rows, tiles;
    const struct fx_kernels *g = fx_kernels_named("generic");
    random_case(&d, 13);
    static const enum fx_type types[] = {FX_TYPE_F32, FX_TYPE_F16, FX_TYPE_Q8_0};
    static const int dims[] = {64, 128, 256, 96};
    static const int shapes[][2] = {{1, 2}, {1, 8}, {2, 3}, {5, 8}};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
        for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++) {
            int dim = dims[di];
            rows.type = tiles.type = types[ti];
            tiles.tiled = true;
            assert_true(fx_type_row_bytes(rows.type, dim, &rows.row));
            tiles.row = rows.row;
            memset(tiles.k, 0xff, sizeof tiles.k);
            for (int j = 0; j < N_KEYS; j++) {
                g->kv_store(rows.type, d.keys[j], dim, rows.k + typed_at(&rows, j));
                g->kv_store(rows.type, d.values[j], dim, rows.v + typed_at(&rows, j));
                fx_kv_tile_put(tiles.type, dim, tiles.k + typed_at(&tiles, j - j % 16), j % 16, 0,
                               dim, rows.k + typed_at(&rows, j));
                memcpy(tiles.v + typed_at(&tiles, j), rows.v + typed_at(&rows, j), rows.row);
            }
            expect_same_attention(&d, &tiles, &d, &rows, dim, shapes,
                                  sizeof shapes / sizeof shapes[0], "tiles differ from rows");
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
