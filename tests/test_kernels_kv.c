/* kernels: the KV cache rows (kv_store, kv_load) of every table this CPU runs.
 *
 * The SIMD tables must give the generic table's bytes and floats exactly (kernels.h), on rows of
 * awkward values (fp16 overflow and subnormals, rounding ties, zeros, equal values), at pointers
 * that are not vector-aligned and with strides longer than a row. The generic entries are
 * checked against float64: F16 is round to nearest even, computed here from the ulp of the
 * value's binade; a Q8_0 value is within half a step d of its input, plus what rounding d to
 * fp16 costs; loads decode exactly (kernels_ref.c's independent decoder). NaN is left out: its
 * payload is the one thing the tables may encode differently. */
#include "fx_test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/kv_tile.h"
#include "kernels_ref.h"

static const enum fx_type kv_types[] = {FX_TYPE_F32, FX_TYPE_F16, FX_TYPE_Q8_0};
#define N_TYPES (sizeof kv_types / sizeof kv_types[0])

/* Head sizes; F32 and F16 (blocks of one element) also take the odd ones, to reach the SIMD
 * tails. */
static const int64_t dims[] = {32, 64, 96, 128, 256, 512, 1, 7, 33, 100};
#define N_DIMS       (sizeof dims / sizeof dims[0])
#define N_BLOCK_DIMS 6 /* the first ones, multiples of 32 */

static const int64_t row_counts[] = {1, 7, 64};
#define N_ROW_COUNTS (sizeof row_counts / sizeof row_counts[0])

static int n_dims_of(enum fx_type type) {
    return type == FX_TYPE_Q8_0 ? N_BLOCK_DIMS : (int)N_DIMS;
}

/* ---- rows of awkward values ---------------------------------------------------------------- */

enum row_kind {
    ROW_NORMAL, /* normal, at scales 1e-3, 1 and 300 */
    ROW_LARGE,  /* 1000 .. 65504, and past it to fp16 overflow */
    ROW_TINY,   /* 2^-27 .. 2^-13: fp16 subnormals, and ties among them */
    ROW_ZERO,   /* +0 and -0 */
    ROW_EQUAL,  /* one value throughout */
    ROW_TIES,   /* midpoints between neighbouring fp16 values */
    ROW_MIXED,  /* each element of one of the kinds above */
    N_KINDS
};

static float rng_sign(struct fx_test_rng *rng) {
    return fx_test_rng_u64(rng) & 1 ? -1.0f : 1.0f;
}

/* A midpoint between two neighbouring finite fp16 values (exact in f32). */
static float fp16_tie(struct fx_test_rng *rng) {
    uint16_t h = (uint16_t)(fx_test_rng_u64(rng) % 0x7bff); /* up to the one below 65504 */
    return rng_sign(rng) * (float)((kref_fp16(h) + kref_fp16((uint16_t)(h + 1))) / 2);
}

static float awkward_value(enum row_kind kind, struct fx_test_rng *rng) {
    static const float scales[] = {1e-3f, 1.0f, 300.0f};
    static const float big[] = {65504.0f, 65519.99f, 65520.0f, 70000.0f, 1e5f};
    static const float tiny[] = {0x1p-24f, 0x1p-25f, 0x3p-25f, 0x5p-25f, 0x1p-14f, 0x1.ffcp-15f};
    switch (kind) {
    case ROW_NORMAL:
        return (float)fx_test_rng_normal(rng) * scales[fx_test_rng_u64(rng) % 3];
    case ROW_LARGE:
        if (fx_test_rng_u64(rng) % 8 == 0)
            return rng_sign(rng) * big[fx_test_rng_u64(rng) % 5];
        return rng_sign(rng) * (float)(1000.0 + fx_test_rng_f64(rng) * 64504.0);
    case ROW_TINY:
        if (fx_test_rng_u64(rng) % 4 == 0)
            return rng_sign(rng) * tiny[fx_test_rng_u64(rng) % 6];
        return rng_sign(rng) *
               (float)ldexp(1.0 + fx_test_rng_f64(rng), -27 + (int)(fx_test_rng_u64(rng) % 14));
    case ROW_ZERO:
        return fx_test_rng_u64(rng) & 1 ? -0.0f : 0.0f;
    case ROW_TIES:
        return fp16_tie(rng);
    default:
        return awkward_value((enum row_kind)(fx_test_rng_u64(rng) % ROW_EQUAL), rng);
    }
}

static void awkward_row(float *x, int64_t dim, enum row_kind kind, struct fx_test_rng *rng) {
    if (kind == ROW_EQUAL) {
        float c = (float)fx_test_rng_normal(rng) * 10.0f;
        for (int64_t i = 0; i < dim; i++)
            x[i] = c;
        return;
    }
    if (kind == ROW_MIXED)
        for (int64_t i = 0; i < dim; i++)
            x[i] = awkward_value((enum row_kind)(fx_test_rng_u64(rng) % ROW_EQUAL), rng);
    else
        for (int64_t i = 0; i < dim; i++)
            x[i] = awkward_value(kind, rng);
}

/* A random finite fp16 (infinities included, NaN not). */
static uint16_t random_fp16(struct fx_test_rng *rng) {
    uint16_t h = (uint16_t)fx_test_rng_u64(rng);
    return (h & 0x7c00) == 0x7c00 ? (uint16_t)(h & 0xfc00) : h;
}

/* One cached row of `type`: a generic kv_store of an awkward row, or (odd `variant`) random
 * content that kv_store may never write (any finite fp16, Q8_0 code -128, subnormal scales). */
static void cached_row(enum fx_type type, int variant, void *row, int64_t dim, float *scratch,
                       struct fx_test_rng *rng) {
    if (variant % 2 == 0 || type == FX_TYPE_F32) {
        awkward_row(scratch, dim, (enum row_kind)(variant % N_KINDS), rng);
        fx_kernels_named("generic")->kv_store(type, scratch, dim, row);
        return;
    }
    if (type == FX_TYPE_F16) {
        for (int64_t i = 0; i < dim; i++) {
            uint16_t h = random_fp16(rng);
            memcpy((uint8_t *)row + 2 * i, &h, 2);
        }
        return;
    }
    kref_random_row(type, row, dim, rng);
    if (variant % 4 == 3) /* subnormal scales */
        for (int64_t b = 0; b < dim / 32; b++) {
            uint16_t d = (uint16_t)(fx_test_rng_u64(rng) & 0x83ff);
            memcpy((uint8_t *)row + 34 * b, &d, 2);
        }
}

/* ---- float64 references -------------------------------------------------------------------- */

/* x rounded to fp16, to nearest with ties to even, in double: the ulp is that of x's binade
 * (2^-24 among the subnormals), and past the largest finite fp16 the result is infinite. */
static double ref_fp16_round(float xf) {
    double x = xf, a = fabs(x);
    if (a == 0)
        return x;
    int e;
    frexp(a, &e); /* a in [2^(e-1), 2^e) */
    int ex = e - 1 < -14 ? -14 : e - 1;
    double ulp = ldexp(1.0, ex - 10);
    double r = nearbyint(a / ulp) * ulp; /* a / ulp is exact; nearbyint rounds half to even */
    return copysign(r > 65504.0 ? INFINITY : r, x);
}

static void expect_same_double(const char *what, int64_t i, double got, double want) {
    if (!(got == want && signbit(got) == signbit(want)))
        fail_msg("%s element %lld: got %.17g, want %.17g", what, (long long)i, got, want);
}

static uint16_t rd16(const uint8_t *p) {
    return (uint16_t)(p[0] | p[1] << 8);
}

/* Element i of a cached row in double, signed zeros included (kref_elem adds a zero offset,
 * which turns -0 into +0): an fp16, or d * q with d an fp16 (an exact product in double, with
 * the sign f32 gives it). */
static double ref_elem(enum fx_type type, const uint8_t *row, int64_t i) {
    if (type == FX_TYPE_F16)
        return kref_fp16(rd16(row + 2 * i));
    const uint8_t *blk = row + 34 * (i / 32);
    return kref_fp16(rd16(blk)) * (double)(int8_t)blk[2 + i % 32];
}

/* ---- the generic table against float64 ----------------------------------------------------- */

FX_TEST(kernels_kv_generic_f16_store_rounds_to_nearest_even) {
    const struct fx_kernels *g = fx_kernels_named("generic");
    struct fx_test_rng rng = {701};
    float x[512];
    uint16_t h[512];
    for (int kind = 0; kind < N_KINDS; kind++) {
        for (int rep = 0; rep < 8; rep++) {
            awkward_row(x, 512, (enum row_kind)kind, &rng);
            g->kv_store(FX_TYPE_F16, x, 512, h);
            for (int64_t i = 0; i < 512; i++) {
                double got = kref_fp16(h[i]), a = fabs((double)x[i]);
                expect_same_double("f16 store", i, got, ref_fp16_round(x[i]));
                /* the stated bound, for what it is worth beside the exact value */
                if (a >= 0x1p-14 && a <= 65504.0)
                    assert_true(fabs(got - x[i]) <= 0x1p-11 * a);
                else if (a < 0x1p-14)
                    assert_true(fabs(got - x[i]) <= 0x1p-25);
            }
        }
    }
}

FX_TEST(kernels_kv_generic_q8_0_store_within_half_step) {
    const struct fx_kernels *g = fx_kernels_named("generic");
    struct fx_test_rng rng = {702};
    float x[512];
    uint8_t row[16 * 34];
    for (int kind = 0; kind < N_KINDS; kind++) {
        for (int rep = 0; rep < 8; rep++) {
            awkward_row(x, 512, (enum row_kind)kind, &rng);
            g->kv_store(FX_TYPE_Q8_0, x, 512, row);
            for (int b = 0; b < 16; b++) {
                const uint8_t *blk = row + 34 * b;
                double amax = 0;
                for (int j = 0; j < 32; j++)
                    amax = fmax(amax, fabs((double)x[32 * b + j]));
                double d = amax / 127, d16 = kref_fp16(rd16(blk));
                /* d as fp16: within half an fp16 ulp (2^-25 among the subnormals) of the f32
                 * quotient amax / 127, itself within 2^-24 d of d */
                double d_err = fabs(d16 - d);
                assert_true(d_err <= fmax(0x1p-11 * d, 0x1p-25) + 0x1p-23 * d);
                for (int j = 0; j < 32; j++) {
                    int64_t i = 32 * b + j;
                    assert_true((int8_t)blk[2 + j] != -128);
                    double y = kref_elem(FX_TYPE_Q8_0, row, i, NULL);
                    /* half a step, f32 rounding of x * (127 / amax) (a few 2^-24 of 127 steps),
                     * and up to 127 times the error of d */
                    double tol = d * (0.5 + 1e-4) + 127 * d_err;
                    if (!(fabs(y - x[i]) <= tol))
                        fail_msg("q8_0 store (kind %d) element %lld: x %.9g, decoded %.9g, d %.9g",
                                 kind, (long long)i, x[i], y, d);
                    if (amax == 0)
                        assert_true(y == 0);
                }
            }
        }
    }
}

FX_TEST(kernels_kv_generic_load_decodes_exactly) {
    const struct fx_kernels *g = fx_kernels_named("generic");
    struct fx_test_rng rng = {703};
    enum { DIM = 256, N = 16 };
    float scratch[DIM], out[N * DIM];
    uint8_t rows[N][DIM * 4];
    for (size_t t = 0; t < N_TYPES; t++) {
        enum fx_type type = kv_types[t];
        size_t bytes = kref_row_bytes(type, DIM);
        for (int r = 0; r < N; r++)
            cached_row(type, r, rows[r], DIM, scratch, &rng);
        g->kv_load(type, rows, sizeof rows[0], N, DIM, out, DIM);
        for (int r = 0; r < N; r++) {
            if (type == FX_TYPE_F32) {
                assert_memory_equal(out + r * DIM, rows[r], bytes);
                continue;
            }
            for (int64_t i = 0; i < DIM; i++)
                expect_same_double(fx_type_name(type), i, out[r * DIM + i],
                                   ref_elem(type, rows[r], i));
        }
    }
}

/* ---- every table against the generic one --------------------------------------------------- */

FX_TEST(kernels_kv_simd_tables_have_their_own) {
    const struct fx_kernels *tables[3];
    int n_tables = kref_tables(tables);
    for (int k = 1; k < n_tables; k++) {
        assert_true(tables[k]->kv_store != tables[0]->kv_store);
        assert_true(tables[k]->kv_load != tables[0]->kv_load);
        for (int l = 1; l < k; l++) /* avx512 brings its own, not avx2's */
            assert_true(tables[k]->kv_load != tables[l]->kv_load);
    }
}

FX_TEST(kernels_kv_store_matches_generic) {
    const struct fx_kernels *tables[3];
    int n_tables = kref_tables(tables);
    struct fx_test_rng rng = {704};
    for (size_t t = 0; t < N_TYPES; t++) {
        enum fx_type type = kv_types[t];
        size_t align = kref_align(type);
        for (int di = 0; di < n_dims_of(type); di++) {
            int64_t dim = dims[di];
            size_t bytes = kref_row_bytes(type, dim);
            for (int kind = 0; kind < N_KINDS; kind++) {
                /* source and destination at offsets that no vector width divides */
                float *x = kref_alloc((size_t)dim * 4, 4 * (size_t)(1 + 2 * kind));
                uint8_t *want = kref_alloc(bytes + 32, align * (size_t)(1 + 2 * kind));
                uint8_t *got = kref_alloc(bytes + 32, align * (size_t)(3 + 2 * kind));
                awkward_row(x, dim, (enum row_kind)kind, &rng);
                memset(want, 0xa5, bytes + 32);
                tables[0]->kv_store(type, x, dim, want);
                for (int k = 1; k < n_tables; k++) {
                    memset(got, 0xa5, bytes + 32); /* the 32 bytes past the row stay */
                    tables[k]->kv_store(type, x, dim, got);
                    if (memcmp(got, want, bytes + 32) != 0)
                        fail_msg("%s kv_store %s dim %lld (row kind %d) differs from generic",
                                 tables[k]->name, fx_type_name(type), (long long)dim, kind);
                }
                kref_free(x);
                kref_free(want);
                kref_free(got);
            }
        }
    }
}

FX_TEST(kernels_kv_load_matches_generic) {
    const struct fx_kernels *tables[3];
    int n_tables = kref_tables(tables);
    struct fx_test_rng rng = {705};
    float scratch[512];
    for (size_t t = 0; t < N_TYPES; t++) {
        enum fx_type type = kv_types[t];
        size_t align = kref_align(type);
        for (int di = 0; di < n_dims_of(type); di++) {
            int64_t dim = dims[di];
            /* rows a few alignment units apart beyond their length, so that every row starts
             * at a different offset from a vector boundary */
            uint64_t src_stride = kref_row_bytes(type, dim) + 3 * align;
            int64_t dst_stride = dim + 3;
            for (size_t ni = 0; ni < N_ROW_COUNTS; ni++) {
                int64_t n = row_counts[ni];
                uint8_t *src = kref_alloc((size_t)(src_stride * (uint64_t)n), align * (1 + ni));
                for (int64_t j = 0; j < n; j++) {
                    uint8_t *row = src + (uint64_t)j * src_stride;
                    cached_row(type, (int)j, row, dim, scratch, &rng);
                    for (uint64_t p = kref_row_bytes(type, dim); p < src_stride; p++)
                        row[p] = (uint8_t)fx_test_rng_u64(&rng);
                }
                /* the whole output area, gaps between rows and 16 floats past the end
                 * included, must come out the same as generic's */
                size_t out_bytes = (size_t)(n * dst_stride + 16) * 4;
                float *want = kref_alloc(out_bytes, 4), *got = kref_alloc(out_bytes, 4 + 8 * ni);
                memset(want, 0xa5, out_bytes);
                tables[0]->kv_load(type, src, src_stride, n, dim, want, dst_stride);
                for (int k = 1; k < n_tables; k++) {
                    memset(got, 0xa5, out_bytes);
                    tables[k]->kv_load(type, src, src_stride, n, dim, got, dst_stride);
                    if (memcmp(got, want, out_bytes) != 0)
                        fail_msg("%s kv_load %s dim %lld n %lld differs from generic",
                                 tables[k]->name, fx_type_name(type), (long long)dim, (long long)n);
                }
                kref_free(src);
                kref_free(want);
                kref_free(got);
            }
        }
    }
}

/* F32 is a copy both ways; an F16 row of values fp16 holds comes back bit for bit as well. */
FX_TEST(kernels_kv_round_trip) {
    const struct fx_kernels *tables[3];
    int n_tables = kref_tables(tables);
    struct fx_test_rng rng = {706};
    for (int k = 0; k < n_tables; k++) {
        for (int di = 0; di < (int)N_DIMS; di++) {
            int64_t dim = dims[di];
            float *x = kref_alloc((size_t)dim * 4, 4), *y = kref_alloc((size_t)dim * 4, 8);
            uint8_t *row = kref_alloc((size_t)dim * 4, 12);
            uint16_t *h = kref_alloc((size_t)dim * 2, 2), *h2 = kref_alloc((size_t)dim * 2, 6);
            for (int kind = 0; kind < N_KINDS; kind++) {
                awkward_row(x, dim, (enum row_kind)kind, &rng);
                tables[k]->kv_store(FX_TYPE_F32, x, dim, row);
                tables[k]->kv_load(FX_TYPE_F32, row, 0, 1, dim, y, 0);
                assert_memory_equal(y, x, (size_t)dim * 4);
            }
            for (int64_t i = 0; i < dim; i++)
                h[i] = random_fp16(&rng);
            tables[k]->kv_load(FX_TYPE_F16, h, 0, 1, dim, y, 0);
            tables[k]->kv_store(FX_TYPE_F16, y, dim, h2);
            assert_memory_equal(h2, h, (size_t)dim * 2);
            kref_free(x);
            kref_free(y);
            kref_free(row);
            kref_free(h);
            kref_free(h2);
        }
    }
}

/* Key tiles (kernels.h): 16 cached rows put into a tile's slots (in reverse order, at an
 * unaligned address) come back as the same bytes, and every table's kv_load_tile of any slots
 * gives the floats generic kv_load gives for those rows, the output's gaps untouched. */
FX_TEST(kernels_kv_tiles_hold_rows_and_load_as_them) {
    const struct fx_kernels *tables[3];
    int n_tables = kref_tables(tables);
    struct fx_test_rng rng = {707};
    float scratch[512];
    for (size_t t = 0; t < N_TYPES; t++) {
        enum fx_type type = kv_types[t];
        size_t align = kref_align(type);
        for (int di = 0; di < n_dims_of(type); di++) {
            int64_t dim = dims[di];
            uint64_t row_bytes = kref_row_bytes(type, dim);
            uint8_t *rows = kref_alloc((size_t)(16 * row_bytes), align);
            uint8_t *tile = kref_alloc((size_t)fx_kv_tile_bytes(row_bytes), align + 4);
            uint8_t *back = kref_alloc((size_t)row_bytes, align);
            for (int jj = 0; jj < 16; jj++)
                cached_row(type, jj, rows + jj * row_bytes, dim, scratch, &rng);
            for (int jj = 15; jj >= 0; jj--)
                fx_kv_tile_put(type, dim, tile, jj, 0, dim, rows + jj * row_bytes);
            for (int jj = 0; jj < 16; jj++) {
                fx_kv_tile_get(type, dim, tile, jj, 0, dim, back);
                assert_memory_equal(back, rows + jj * row_bytes, (size_t)row_bytes);
            }
            /* slots j0 .. j0 + n - 1 */
            static const int64_t slots[][2] = {{0, 1}, {0, 7}, {0, 16}, {5, 7}, {9, 7}, {15, 1}};
            int64_t dst_stride = dim + 3;
            size_t out_bytes = (size_t)(16 * dst_stride + 16) * 4;
            float *want = kref_alloc(out_bytes, 4), *got = kref_alloc(out_bytes, 8);
            for (size_t si = 0; si < sizeof slots / sizeof slots[0]; si++) {
                int64_t j0 = slots[si][0], n = slots[si][1];
                memset(want, 0xa5, out_bytes);
                tables[0]->kv_load(type, rows + j0 * row_bytes, row_bytes, n, dim, want,
                                   dst_stride);
                for (int k = 0; k < n_tables; k++) {
                    memset(got, 0xa5, out_bytes);
                    tables[k]->kv_load_tile(type, tile, j0, n, dim, got, dst_stride);
                    if (memcmp(got, want, out_bytes) != 0)
                        fail_msg("%s kv_load_tile %s dim %lld slots %lld+%lld differ from kv_load",
                                 tables[k]->name, fx_type_name(type), (long long)dim, (long long)j0,
                                 (long long)n);
                }
            }
            kref_free(rows);
            kref_free(tile);
            kref_free(back);
            kref_free(want);
            kref_free(got);
        }
    }
}
