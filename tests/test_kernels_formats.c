/* kernels: the number formats. fp16 and bf16 conversion (exhaustively where the space allows),
 * dequantization of every block format against an independent float64 decoder, and the
 * quantize -> dequantize error of every file encoding against its known bound. */
#include "fx_test.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/cpu.h"
#include "kernels/half.h"
#include "kernels/kernels.h"
#include "kernels/types.h"
#include "kernels_ref.h"

/* ---- fp16 ---------------------------------------------------------------------------------- */

static bool fp16_is_nan(uint16_t h) {
    return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
}

FX_TEST(kernels_fp16_decodes_every_value) {
    for (uint32_t h = 0; h < 65536; h++) {
        float got = fx_fp16_to_f32((uint16_t)h);
        double want = kref_fp16((uint16_t)h);
        if (isnan(want))
            assert_true(isnan(got));
        else if ((double)got != want || !signbit(got) != !signbit(want))
            fail_msg("fp16 %04x: got %a, want %a", h, (double)got, want);
    }
}

FX_TEST(kernels_fp16_round_trips_every_value) {
    for (uint32_t h = 0; h < 65536; h++) {
        uint16_t back = fx_f32_to_fp16(fx_fp16_to_f32((uint16_t)h));
        if (fp16_is_nan((uint16_t)h))
            assert_true(fp16_is_nan(back) && (back & 0x8000) == (h & 0x8000) && (back & 0x200));
        else if (back != h)
            fail_msg("fp16 %04x comes back as %04x", h, back);
    }
}

/* Every pair of neighbouring finite halves a < b: their midpoint goes to the one with an even
 * mantissa, anything above it to b and anything below to a; 65520 and up is infinity. */
FX_TEST(kernels_fp16_rounds_to_nearest_even) {
    for (uint32_t h = 0; h < 0x7c00; h++) {
        for (int neg = 0; neg < 2; neg++) {
            uint16_t s = neg ? 0x8000 : 0;
            uint16_t a = (uint16_t)(h | s), b = (uint16_t)((h + 1) | s); /* h + 1 may be inf */
            double mid =
                (kref_fp16(a) + (h + 1 == 0x7c00 ? (neg ? -65536.0 : 65536.0) : kref_fp16(b))) / 2;
            float fm = (float)mid;
            assert_true((double)fm == mid); /* midpoints of halves are exact in f32 */
            uint16_t even = (h & 1) ? b : a;
            assert_int_equal(fx_f32_to_fp16(fm), even);
            assert_int_equal(fx_f32_to_fp16(nextafterf(fm, neg ? -INFINITY : INFINITY)), b);
            assert_int_equal(fx_f32_to_fp16(nextafterf(fm, 0.0f)), a);
        }
    }
    assert_int_equal(fx_f32_to_fp16(1e9f), 0x7c00);
    assert_int_equal(fx_f32_to_fp16(-INFINITY), 0xfc00);
    assert_int_equal(fx_f32_to_fp16(0x1p-26f), 0x0000);
    assert_int_equal(fx_f32_to_fp16(-0.0f), 0x8000);
    assert_int_equal(fx_f32_to_fp16(NAN) & 0x7e00, 0x7e00);
}

#if defined(__x86_64__)
#include <immintrin.h>
/* The hardware conversion, for this test only (the library's F16C use is in the ISA files). */
__attribute__((target("f16c"))) static uint16_t f16c_convert(float f) {
    return (uint16_t)_cvtss_sh(f, 0); /* 0: round to nearest even */
}
#endif

/* The F16C instruction on random f32 bit patterns of every magnitude (NaN payloads aside). */
FX_TEST(kernels_fp16_matches_f16c) {
#if defined(__x86_64__)
    if (!fx_cpu_features()->f16c)
        skip();
    struct fx_test_rng rng = {42};
    for (int i = 0; i < 2000000; i++) {
        uint32_t u = (uint32_t)fx_test_rng_u64(&rng);
        float f = fx_f32_from_bits(u);
        if (isnan(f))
            continue;
        uint16_t want = f16c_convert(f), got = fx_f32_to_fp16(f);
        if (got != want)
            fail_msg("f32 %08x: got %04x, F16C %04x", u, got, want);
    }
#else
    skip();
#endif
}

/* ---- bf16 ---------------------------------------------------------------------------------- */

FX_TEST(kernels_bf16_decodes_and_rounds_to_nearest_even) {
    for (uint32_t h = 0; h < 65536; h++) {
        float got = fx_bf16_to_f32((uint16_t)h);
        double want = kref_bf16((uint16_t)h);
        if (isnan(want)) {
            assert_true(isnan(got));
            continue;
        }
        assert_true((double)got == want);
        assert_int_equal(fx_f32_to_bf16(got), h);
        if ((h & 0x7fff) >= 0x7f80)
            continue; /* no finite neighbour above */
        /* The f32 halfway to the next bf16 up (in magnitude) has the low 16 bits 0x8000. */
        uint32_t mid = h << 16 | 0x8000;
        uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
        assert_int_equal(fx_f32_to_bf16(fx_f32_from_bits(mid)), even);
        assert_int_equal(fx_f32_to_bf16(fx_f32_from_bits(mid + 1)), h + 1);
        assert_int_equal(fx_f32_to_bf16(fx_f32_from_bits(mid - 1)), h);
    }
    /* NaN stays NaN (quiet), even when only low mantissa bits are set. */
    uint16_t q = fx_f32_to_bf16(fx_f32_from_bits(0x7f800001));
    assert_true((q & 0x7f80) == 0x7f80 && (q & 0x7f) != 0);
}

/* ---- dequantization ------------------------------------------------------------------------ */

static const enum fx_type weight_types[] = {
    FX_TYPE_F32,  FX_TYPE_F16,   FX_TYPE_BF16,   FX_TYPE_Q4_0,   FX_TYPE_Q4_1, FX_TYPE_Q5_0,
    FX_TYPE_Q5_1, FX_TYPE_Q8_0,  FX_TYPE_Q2_K,   FX_TYPE_Q3_K,   FX_TYPE_Q4_K, FX_TYPE_Q5_K,
    FX_TYPE_Q6_K, FX_TYPE_MXFP4, FX_TYPE_IQ4_NL, FX_TYPE_IQ4_XS,
};
#define N_WEIGHT_TYPES (sizeof weight_types / sizeof weight_types[0])

/* Row lengths: one block, odd block counts and a long row. */
static int64_t test_len(enum fx_type t, int which) {
    static const int64_t blocks[] = {1, 3, 7, 33};
    int64_t qk = fx_type_block_elems(t);
    return (qk == 1 ? 32 : qk) * blocks[which] + (qk == 1 ? which : 0); /* odd f32 lengths too */
}

/* Each element as the format defines it: f32 rounding of d * q (and - m) is the only error,
 * at most two roundings of the terms' magnitude. */
FX_TEST(kernels_dequantize_matches_reference) {
    static const enum fx_type extra[] = {FX_TYPE_Q8_1, FX_TYPE_Q8_K};
    const struct fx_kernels *tables[3];
    int n_tables = kref_tables(tables);
    struct fx_test_rng rng = {7};
    for (size_t ti = 0; ti < N_WEIGHT_TYPES + 2; ti++) {
        enum fx_type t = ti < N_WEIGHT_TYPES ? weight_types[ti] : extra[ti - N_WEIGHT_TYPES];
        for (int w = 0; w < 4; w++) {
            int64_t n = test_len(t, w);
            size_t bytes = kref_row_bytes(t, n);
            void *row = kref_alloc(bytes, kref_align(t));
            float *out = kref_alloc((size_t)n * sizeof(float), 4);
            kref_random_row(t, row, n, &rng);
            for (int k = 0; k < n_tables; k++) {
                tables[k]->types[t].to_float(row, out, n);
                for (int64_t i = 0; i < n; i++) {
                    double mag, want = kref_elem(t, row, i, &mag);
                    if (fabs((double)out[i] - want) > 0x1p-23 * mag)
                        fail_msg("%s %s n=%lld element %lld: got %.9g, want %.9g", tables[k]->name,
                                 fx_type_name(t), (long long)n, (long long)i, (double)out[i], want);
                }
            }
            kref_free(row);
            kref_free(out);
        }
    }
}

/* ---- quantize -> dequantize ---------------------------------------------------------------- */

/* Test rows: Gaussian, plus blocks that stress the encoders (all zero, constant, one spike, all
 * negative, tiny values), as many as the row has room for. */
static void stress_row(float *x, int64_t n, struct fx_test_rng *rng) {
    const int64_t seg = 32; /* one 32-wide block, or two sub-blocks of a K super-block */
    kref_normal(x, n, rng);
    for (int c = 0; c < 6 && (8 * c + 1) * seg <= n; c++) {
        float *b = x + 8 * c * seg; /* at the start of super-block c */
        for (int64_t i = 0; i < seg; i++) {
            switch (c) {
            case 0:
                b[i] = 0.0f;
                break;
            case 1:
                b[i] = 0.75f;
                break;
            case 2:
                b[i] = i == 5 ? 40.0f : 0.01f * (float)fx_test_rng_normal(rng);
                break;
            case 3:
                b[i] = -fabsf(b[i]) - 0.5f;
                break;
            default:
                b[i] *= 1e-6f;
            }
        }
    }
}

/* The largest rounding error of an fp16: half an ulp, 2^-11 relative, or 2^-25 absolute among
 * the subnormals (tiny blocks have subnormal scales). */
static double fp16_err(double v) {
    return fmax(0x1p-11 * fabs(v), 0x1p-25);
}

/* The largest error a 32-wide or plain format allows for element i of block x (derived from the
 * encoding, see each case); 0 tolerance means "compare exactly". */
static double element_bound(enum fx_type t, const float *x, int i, const void *block) {
    const uint8_t *b = block;
    double f32_eps = 0x1p-22 * fabs(x[i]); /* f32 rounding in decode */
    switch (t) {
    case FX_TYPE_F32:
        return 0;
    case FX_TYPE_F16:
        return fp16_err(x[i]);
    case FX_TYPE_BF16:
        return 0x1p-8 * fabs(x[i]);
    case FX_TYPE_Q8_0: { /* |q d16 - x| <= d/2 + 127 |d16 - d| */
        double d = fabs(kref_fp16((uint16_t)(b[0] | b[1] << 8)));
        return 0.5 * (d + fp16_err(d)) + 127 * fp16_err(d) + f32_eps;
    }
    case FX_TYPE_Q4_0:
    case FX_TYPE_Q5_0: {
        /* Codes -n..n-1 with the block's extreme on -n: half a step, except values of the
         * extreme's opposite sign beyond n - 1/2 steps, which clamp to n - 1 (at most one
         * step, as |x| <= n steps). */
        double nmax = t == FX_TYPE_Q4_0 ? 8 : 16;
        double d = fabs(kref_fp16((uint16_t)(b[0] | b[1] << 8)));
        double amax = 0, max = 0;
        for (int j = 0; j < 32; j++)
            if (fabs(x[j]) > amax)
                amax = fabs(x[j]), max = x[j];
        bool clamped = x[i] * max < 0 && fabs(x[i]) > (nmax - 0.5) * amax / nmax;
        return (clamped ? 1.0 : 0.5) * (d + fp16_err(d)) + nmax * fp16_err(d) + f32_eps;
    }
    case FX_TYPE_Q4_1:
    case FX_TYPE_Q5_1: {
        /* Codes 0..n over [min, max]: half a step plus the fp16 rounding of d (times the code)
         * and of min. */
        double nmax = t == FX_TYPE_Q4_1 ? 15 : 31;
        double d = fabs(kref_fp16((uint16_t)(b[0] | b[1] << 8)));
        double m = fabs(kref_fp16((uint16_t)(b[2] | b[3] << 8)));
        return 0.5 * (d + fp16_err(d)) + nmax * fp16_err(d) + fp16_err(m) + f32_eps;
    }
    case FX_TYPE_MXFP4: {
        /* Code points 0, .5, 1, 1.5, 2, 3, 4, 6 units u = 2^(e-127): half the gap around |x|,
         * or the distance past 6 (the block maximum is below 8 units). */
        double u = ldexp(1.0, b[0] - 127), a = fabs(x[i]);
        if (a <= 2 * u)
            return 0.25 * u + f32_eps;
        if (a <= 4 * u)
            return 0.5 * u + f32_eps;
        if (a <= 6 * u)
            return u + f32_eps;
        return a - 6 * u + f32_eps;
    }
    default:
        return -1;
    }
}

/* The K and IQ4 encodings search their scales, so their bounds are measured on this test's rows
 * (with a margin of 1.25) rather than derived: the relative RMS error (error RMS / data RMS; each
 * is about a grid step over the sub-block's range divided by sqrt(12)), and the largest single
 * error in units of the largest grid step (range / nmax) among the super-block's sub-blocks -
 * half a step from rounding plus the coding of the sub-block scales relative to the largest
 * one (measured at most 0.73; the bound is one step). */
#define FX_QK_K_TEST 256
struct k_bound {
    enum fx_type t;
    int sub, nmax;
    bool symmetric;
    double rel_rmse, max_steps;
};
static const struct k_bound k_bounds[] = {
    {FX_TYPE_Q2_K, 16, 3, false, 0.34, 1.0},   /* measured 0.268 */
    {FX_TYPE_Q3_K, 16, 7, true, 0.165, 1.0},   /* measured 0.130 */
    {FX_TYPE_Q4_K, 32, 15, false, 0.078, 1.0}, /* measured 0.0622 */
    {FX_TYPE_Q5_K, 32, 31, false, 0.039, 1.0}, /* measured 0.0311 */
    {FX_TYPE_Q6_K, 16, 63, true, 0.0193, 1.0}, /* measured 0.0154 */
    /* 16 non-uniform levels over [-127, 113]: "steps" of 2 amax / 15, the mean gap; IQ4_NL's
     * blocks of 32 have scales of their own, so its step is a bound, not an estimate. */
    {FX_TYPE_IQ4_NL, 32, 15, true, 0.089, 1.0}, /* measured 0.0708 */
    {FX_TYPE_IQ4_XS, 32, 15, true, 0.094, 1.0}, /* measured 0.0747 */
};

FX_TEST(kernels_quantize_round_trip_within_bounds) {
    const struct fx_kernels *g = fx_kernels_named("generic");
    const struct fx_kernels *tables[3];
    int n_tables = kref_tables(tables);
    struct fx_test_rng rng = {11};
    const int64_t n = 256 * 16;
    float *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y);
    assert_non_null(x);
    assert_non_null(y);
    for (size_t ti = 0; ti < N_WEIGHT_TYPES; ti++) {
        enum fx_type t = weight_types[ti];
        size_t bytes = kref_row_bytes(t, n);
        uint8_t *q = malloc(bytes), *q2 = malloc(bytes);
        assert_non_null(q);
        assert_non_null(q2);
        for (int rep = 0; rep < 8; rep++) {
            stress_row(x, n, &rng);
            if (rep & 1)
                for (int64_t i = 0; i < n; i++)
                    x[i] *= 37.0f; /* scale invariance */
            g->types[t].from_float(x, q, n);
            /* Every table encodes files the same way. */
            for (int k = 1; k < n_tables; k++) {
                tables[k]->types[t].from_float(x, q2, n);
                assert_memory_equal(q, q2, bytes);
            }
            g->types[t].to_float(q, y, n);
            int64_t qk = fx_type_block_elems(t);
            int64_t block_bytes = fx_type_block_bytes(t);
            if (qk <= 32 && t != FX_TYPE_IQ4_NL) {
                for (int64_t i = 0; i < n; i++) {
                    int64_t blk = qk == 1 ? 0 : i / qk;
                    const float *xb = qk == 1 ? x : x + blk * qk;
                    int j = qk == 1 ? (int)i : (int)(i % qk);
                    double bound = element_bound(t, xb, j, q + blk * block_bytes);
                    double err = fabs((double)y[i] - (double)x[i]);
                    if (err > bound)
                        fail_msg("%s element %lld: %.9g -> %.9g, error %.3g > bound %.3g",
                                 fx_type_name(t), (long long)i, (double)x[i], (double)y[i], err,
                                 bound);
                }
                continue;
            }
            const struct k_bound *kb = NULL;
            for (size_t k = 0; k < sizeof k_bounds / sizeof k_bounds[0]; k++)
                if (k_bounds[k].t == t)
                    kb = &k_bounds[k];
            assert_non_null(kb);
            double se = 0, sx = 0, worst = 0;
            for (int64_t sb = 0; sb < n; sb += FX_QK_K_TEST) {
                /* The super-block's largest sub-block grid step: sub-block scales are coded
                 * relative to the largest one, so a small sub-block's error is bounded by that,
                 * not by its own range. */
                double step = 0;
                for (int64_t s = sb; s < sb + FX_QK_K_TEST; s += kb->sub) {
                    float lo = 0, hi = 0;
                    for (int j = 0; j < kb->sub; j++) {
                        lo = fminf(lo, x[s + j]);
                        hi = fmaxf(hi, x[s + j]);
                    }
                    double st = kb->symmetric ? 2 * fmax(-lo, hi) / kb->nmax
                                              : ((double)hi - (double)lo) / kb->nmax;
                    step = fmax(step, st);
                }
                for (int64_t i = sb; i < sb + FX_QK_K_TEST; i++) {
                    double e = fabs((double)y[i] - (double)x[i]);
                    se += e * e;
                    sx += (double)x[i] * x[i];
                    if (step == 0 ? e != 0 : e / step > worst)
                        worst = step == 0 ? INFINITY : e / step;
                }
            }
            if (sqrt(se / sx) > kb->rel_rmse || worst > kb->max_steps)
                fail_msg("%s: relative RMS error %.4f (bound %.4f), worst error %.3f steps "
                         "(bound %.2f)",
                         fx_type_name(t), sqrt(se / sx), kb->rel_rmse, worst, kb->max_steps);
        }
        free(q);
        free(q2);
    }
    free(x);
    free(y);
}

/* Encoding works block by block: a NaN, an infinity or a huge value in one block neither crashes
 * an encoder (the sanitizer build checks for undefined behaviour) nor changes the other blocks'
 * bytes. */
FX_TEST(kernels_quantize_tolerates_non_finite_input) {
    const struct fx_kernels *g = fx_kernels_named("generic");
    struct fx_test_rng rng = {13};
    const int64_t n = 256 * 3;
    static const float poison[] = {NAN, INFINITY, -INFINITY, 3e38f, -1e-40f};
    float x[256 * 3], y[256 * 3];
    for (size_t ti = 0; ti < N_WEIGHT_TYPES; ti++) {
        enum fx_type t = weight_types[ti];
        int64_t qk = fx_type_block_elems(t) == 1 ? 32 : fx_type_block_elems(t);
        size_t bytes = kref_row_bytes(t, n);
        uint8_t *clean = malloc(bytes), *dirty = malloc(bytes);
        assert_non_null(clean);
        assert_non_null(dirty);
        for (size_t p = 0; p < sizeof poison / sizeof poison[0]; p++) {
            kref_normal(x, n, &rng);
            memcpy(y, x, sizeof x);
            for (int64_t i = qk; i < 2 * qk; i += 7) /* the second block only */
                y[i] = poison[p];
            g->types[t].from_float(x, clean, n);
            g->types[t].from_float(y, dirty, n);
            size_t block = (size_t)kref_row_bytes(t, qk);
            if (fx_type_block_elems(t) == 1) /* plain formats: elements, not blocks */
                for (int64_t i = 0; i < n; i++)
                    assert_true(x[i] != y[i] ||
                                memcmp(clean + i * (int64_t)block / qk,
                                       dirty + i * (int64_t)block / qk, block / (size_t)qk) == 0);
            else {
                assert_memory_equal(clean, dirty, block);
                assert_memory_equal(clean + 2 * block, dirty + 2 * block, bytes - 2 * block);
            }
            g->types[t].to_float(dirty, y, n); /* decoding any bytes is defined too */
        }
        free(clean);
        free(dirty);
    }
    /* The activation quantizers of every table, on the same kind of row. */
    static const enum fx_type acts[] = {FX_TYPE_Q8_0, FX_TYPE_Q8_1, FX_TYPE_Q8_K};
    const struct fx_kernels *tables[3];
    int n_tables = kref_tables(tables);
    uint8_t act[sizeof(struct fx_block_q8_K) * 3];
    for (int k = 0; k < n_tables; k++)
        for (size_t a = 0; a < 3; a++)
            for (size_t p = 0; p < sizeof poison / sizeof poison[0]; p++) {
                kref_normal(y, n, &rng);
                y[300] = poison[p];
                tables[k]->types[acts[a]].quantize_act(y, act, n);
                tables[k]->types[acts[a]].to_float(act, x, n);
            }
}
