/* See kernels_ref.h. The decoder below is deliberately written element by element from the
 * block layouts (ggml-common.h's block_* and their documented meaning), not from the kernels'
 * loops, so that a wrong loop in a kernel does not hide behind the same mistake here. */
#include "kernels_ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/types.h"

int kref_tables(const struct fx_kernels *out[3]) {
    static const char *const names[] = {"generic", "avx2", "avx512"};
    int n = 0;
    for (int i = 0; i < 3; i++) {
        const struct fx_kernels *k = fx_kernels_named(names[i]);
        if (k)
            out[n++] = k;
    }
    return n;
}

double kref_fp16(uint16_t h) {
    int sign = h >> 15, exp = (h >> 10) & 31, man = h & 1023;
    double v;
    if (exp == 31)
        v = man ? NAN : INFINITY;
    else if (exp == 0)
        v = ldexp(man, -24);
    else
        v = ldexp(1024 + man, exp - 25);
    return sign ? -v : v;
}

double kref_bf16(uint16_t h) {
    int sign = h >> 15, exp = (h >> 7) & 255, man = h & 127;
    double v;
    if (exp == 255)
        v = man ? NAN : INFINITY;
    else if (exp == 0)
        v = ldexp(man, -133);
    else
        v = ldexp(128 + man, exp - 134);
    return sign ? -v : v;
}

static uint16_t rd16(const uint8_t *p) {
    return (uint16_t)(p[0] | p[1] << 8);
}

/* E2M1: sign, 2 exponent bits (bias 1), 1 mantissa bit. */
static double e2m1(int code) {
    int sign = code >> 3, e = (code >> 1) & 3, m = code & 1;
    double v = e == 0 ? 0.5 * m : (1.0 + 0.5 * m) * ldexp(1.0, e - 1);
    return sign ? -v : v;
}

/* The levels of IQ4_NL and IQ4_XS (ggml's kvalues_iq4nl). */
static const int iq4_levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                   1,    13,   25,  38,  53,  69,  89,  113};

/* The 2-bit code of element j (0..255) in the Q2_K/Q3_K low-bit array: each 128 elements use
 * 32 bytes, element 32*s + l of them in bits 2s..2s+1 of byte l. */
static int k_2bit(const uint8_t *qs, int j) {
    return (qs[(j / 128) * 32 + j % 32] >> (2 * ((j % 128) / 32))) & 3;
}

/* 6-bit scale and min of sub-block s (0..7) of the Q4_K/Q5_K 12-byte array. */
static void k_scale_min(const uint8_t *sc, int s, int *scale, int *min) {
    if (s < 4) {
        *scale = sc[s] & 63;
        *min = sc[s + 4] & 63;
    } else {
        *scale = (sc[s + 4] & 15) | (sc[s - 4] >> 6) << 4;
        *min = (sc[s + 4] >> 4) | (sc[s] >> 6) << 4;
    }
}

double kref_elem(enum fx_type type, const void *row, int64_t i, double *mag) {
    const uint8_t *p = row;
    double v = 0, m = 0; /* value = v + m; mag = |v| + |m| */
    int64_t bytes = fx_type_block_bytes(type), qk = fx_type_block_elems(type);
    const uint8_t *b = p + (i / qk) * bytes; /* this element's block */
    int j = (int)(i % qk);
    switch (type) {
    case FX_TYPE_F32: {
        float f;
        memcpy(&f, p + 4 * i, 4);
        v = f;
        break;
    }
    case FX_TYPE_F16:
        v = kref_fp16(rd16(p + 2 * i));
        break;
    case FX_TYPE_BF16:
        v = kref_bf16(rd16(p + 2 * i));
        break;
    case FX_TYPE_Q4_0: /* d, qs[16]: element j in the low (j < 16) or high nibble of j % 16 */
        v = kref_fp16(rd16(b)) * (((b[2 + j % 16] >> (j < 16 ? 0 : 4)) & 15) - 8);
        break;
    case FX_TYPE_Q4_1: /* d, m, qs[16] */
        v = kref_fp16(rd16(b)) * ((b[4 + j % 16] >> (j < 16 ? 0 : 4)) & 15);
        m = kref_fp16(rd16(b + 2));
        break;
    case FX_TYPE_Q5_0: { /* d, qh[4] (bit j = fifth bit of element j), qs[16] */
        int q = ((b[6 + j % 16] >> (j < 16 ? 0 : 4)) & 15) | ((b[2 + j / 8] >> (j % 8)) & 1) << 4;
        v = kref_fp16(rd16(b)) * (q - 16);
        break;
    }
    case FX_TYPE_Q5_1: { /* d, m, qh[4], qs[16] */
        int q = ((b[8 + j % 16] >> (j < 16 ? 0 : 4)) & 15) | ((b[4 + j / 8] >> (j % 8)) & 1) << 4;
        v = kref_fp16(rd16(b)) * q;
        m = kref_fp16(rd16(b + 2));
        break;
    }
    case FX_TYPE_Q8_0: /* d, qs[32] */
        v = kref_fp16(rd16(b)) * (int8_t)b[2 + j];
        break;
    case FX_TYPE_Q8_1: /* d, s, qs[32] */
        v = kref_fp16(rd16(b)) * (int8_t)b[4 + j];
        break;
    case FX_TYPE_MXFP4: /* e, qs[16] as Q4_0 */
        v = ldexp(e2m1((b[1 + j % 16] >> (j < 16 ? 0 : 4)) & 15), b[0] - 127);
        break;
    case FX_TYPE_Q2_K: { /* scales[16], qs[64], d, dmin */
        int sc = b[j / 16] & 15, mn = b[j / 16] >> 4;
        v = kref_fp16(rd16(b + 80)) * sc * k_2bit(b + 16, j);
        m = -kref_fp16(rd16(b + 82)) * mn;
        break;
    }
    case FX_TYPE_Q3_K: { /* hmask[32], qs[64], scales[12], d */
        const uint8_t *sc = b + 96;
        int s = j / 16;
        int lo = s < 8 ? sc[s] & 15 : sc[s - 8] >> 4, hi = (sc[8 + s % 4] >> (2 * (s / 4))) & 3;
        int high = (b[j % 32] >> (j / 32)) & 1;
        int q = k_2bit(b + 32, j) + 4 * high - 4;
        v = kref_fp16(rd16(b + 108)) * ((lo | hi << 4) - 32) * q;
        break;
    }
    case FX_TYPE_Q4_K:   /* d, dmin, scales[12], qs[128] */
    case FX_TYPE_Q5_K: { /* d, dmin, scales[12], qh[32], qs[128] */
        int sc, mn;
        k_scale_min(b + 4, j / 32, &sc, &mn);
        const uint8_t *qs = b + (type == FX_TYPE_Q4_K ? 16 : 48);
        int q = (qs[(j / 64) * 32 + j % 32] >> (4 * ((j / 32) % 2))) & 15;
        if (type == FX_TYPE_Q5_K)
            q += 16 * ((b[16 + j % 32] >> (j / 32)) & 1);
        v = kref_fp16(rd16(b)) * sc * q;
        m = -kref_fp16(rd16(b + 2)) * mn;
        break;
    }
    case FX_TYPE_Q6_K: { /* ql[128], qh[64], scales[16], d */
        int h = j / 128, qt = (j % 128) / 32, l = j % 32;
        int low = (b[64 * h + l + 32 * (qt % 2)] >> (4 * (qt / 2))) & 15;
        int high = (b[128 + 32 * h + l] >> (2 * qt)) & 3;
        v = kref_fp16(rd16(b + 208)) * (int8_t)b[192 + j / 16] * ((low | high << 4) - 32);
        break;
    }
    case FX_TYPE_IQ4_NL: /* d, qs[16] ordered as Q4_0's, codes index the levels */
        v = kref_fp16(rd16(b)) * iq4_levels[(b[2 + j % 16] >> (j < 16 ? 0 : 4)) & 15];
        break;
    case FX_TYPE_IQ4_XS: { /* d, scales_h (2 bits each), scales_l[4] (4 bits each), qs[128] */
        int s = j / 32, l = j % 32;
        int sc = ((b[4 + s / 2] >> (4 * (s % 2))) & 15) | ((rd16(b + 2) >> (2 * s)) & 3) << 4;
        int q = (b[8 + 16 * s + l % 16] >> (l < 16 ? 0 : 4)) & 15;
        v = kref_fp16(rd16(b)) * (sc - 32) * iq4_levels[q];
        break;
    }
    case FX_TYPE_Q8_K: { /* d (f32), qs[256], bsums[16] */
        float d;
        memcpy(&d, b, 4);
        v = (double)d * (int8_t)b[4 + j];
        break;
    }
    default:
        fail_msg("kref_elem: no reference for %s", fx_type_name(type));
    }
    if (mag)
        *mag = fabs(v) + fabs(m);
    return v + m;
}

void kref_normal(float *x, int64_t n, struct fx_test_rng *rng) {
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)fx_test_rng_normal(rng);
}

/* A random fp16 of magnitude in [2^lo, 2^hi) (-14 <= lo < hi <= 15) and random sign. */
static void put_scale(uint8_t *p, int lo, int hi, struct fx_test_rng *rng) {
    uint64_t r = fx_test_rng_u64(rng);
    uint16_t h = (uint16_t)(((uint64_t)(lo + 15) + r % (uint64_t)(hi - lo)) << 10);
    h |= (uint16_t)((r >> 16) & 1023);
    if ((r >> 32) & 1)
        h |= 0x8000;
    p[0] = (uint8_t)h;
    p[1] = (uint8_t)(h >> 8);
}

void kref_random_row(enum fx_type type, void *row, int64_t n, struct fx_test_rng *rng) {
    uint8_t *p = row;
    size_t size = kref_row_bytes(type, n);
    for (size_t i = 0; i < size; i++)
        p[i] = (uint8_t)fx_test_rng_u64(rng);
    int64_t bytes = fx_type_block_bytes(type), nb = n / fx_type_block_elems(type);
    if (type == FX_TYPE_F32 || type == FX_TYPE_F16 || type == FX_TYPE_BF16) {
        for (int64_t i = 0; i < n; i++) {
            float f = (float)fx_test_rng_normal(rng);
            uint32_t u;
            memcpy(&u, &f, 4);
            if (type == FX_TYPE_F32)
                memcpy(p + 4 * i, &f, 4);
            else if (type == FX_TYPE_BF16) /* truncation is fine: any bf16 is a valid input */
                memcpy(p + 2 * i, (uint8_t *)&u + 2, 2);
            else
                put_scale(p + 2 * i, -4, 2, rng);
        }
        return;
    }
    for (int64_t i = 0; i < nb; i++) {
        uint8_t *b = p + i * bytes;
        switch (type) {
        case FX_TYPE_Q4_0:
        case FX_TYPE_Q5_0:
        case FX_TYPE_Q8_0:
            put_scale(b, -10, -3, rng);
            break;
        case FX_TYPE_IQ4_NL: /* levels up to 127 */
            put_scale(b, -13, -6, rng);
            break;
        case FX_TYPE_IQ4_XS: /* levels up to 127 times scales up to 32 */
            put_scale(b, -14, -9, rng);
            break;
        case FX_TYPE_Q4_1:
        case FX_TYPE_Q5_1:
        case FX_TYPE_Q8_1:
            put_scale(b, -10, -3, rng);
            put_scale(b + 2, -6, 0, rng);
            break;
        case FX_TYPE_MXFP4:
            b[0] = (uint8_t)(118 + fx_test_rng_u64(rng) % 16);
            break;
        case FX_TYPE_Q2_K:
            put_scale(b + 80, -10, -4, rng);
            put_scale(b + 82, -10, -4, rng);
            break;
        case FX_TYPE_Q3_K:
            put_scale(b + 108, -10, -4, rng);
            break;
        case FX_TYPE_Q4_K:
        case FX_TYPE_Q5_K:
            put_scale(b, -11, -6, rng);
            put_scale(b + 2, -11, -6, rng);
            break;
        case FX_TYPE_Q6_K:
            put_scale(b + 208, -13, -8, rng);
            break;
        case FX_TYPE_Q8_K: {
            float d = (float)(0.001 + 0.01 * fx_test_rng_f64(rng));
            memcpy(b, &d, 4);
            break;
        }
        default:
            fail_msg("kref_random_row: no generator for %s", fx_type_name(type));
        }
    }
}

void *kref_alloc(size_t size, size_t offset) {
    assert_true(offset < 64);
    uint8_t *base = aligned_alloc(64, ((size + offset) / 64 + 2) * 64);
    assert_non_null(base);
    return base + 64 + offset;
}

void kref_free(void *p) {
    /* p = base + 64 + offset with offset < 64 and base 64-aligned. */
    if (p)
        free((void *)(((uintptr_t)p - 64) & ~(uintptr_t)63));
}

size_t kref_align(enum fx_type type) {
    switch (type) {
    case FX_TYPE_MXFP4:
        return 1;
    case FX_TYPE_F32:
    case FX_TYPE_Q8_K:
        return 4;
    default:
        return 2;
    }
}

size_t kref_row_bytes(enum fx_type type, int64_t n) {
    uint64_t b;
    assert_true(fx_type_row_bytes(type, n, &b));
    return (size_t)b;
}

void *kref_act(const struct fx_kernels *k, enum fx_type type, const float *x, int64_t n) {
    size_t bytes = kref_row_bytes(type, n);
    void *act = kref_alloc(bytes, kref_align(type));
    void *want = malloc(bytes);
    assert_non_null(want);
    k->types[type].quantize_act(x, act, n);
    fx_kernels_named("generic")->types[type].quantize_act(x, want, n);
    if (memcmp(act, want, bytes) != 0)
        fail_msg("%s quantize_act %s differs from generic (n=%lld)", k->name, fx_type_name(type),
                 (long long)n);
    free(want);
    return act;
}

double kref_dot(enum fx_type wt, const void *w, enum fx_type at, const void *act, const float *x,
                int64_t n, double *mag) {
    double sum = 0;
    *mag = 0;
    for (int64_t i = 0; i < n; i++) {
        double mw, a = at == FX_TYPE_F32 ? x[i] : kref_elem(at, act, i, NULL);
        sum += kref_elem(wt, w, i, &mw) * a;
        *mag += mw * fabs(a);
    }
    if (at == FX_TYPE_Q8_1) {
        /* The min term uses the block's stored s = fp16(d * sum(q)) rather than the sum of the
         * decoded activations: the format's definition of the product. */
        const uint8_t *wb = w;
        const struct fx_block_q8_1 *ab = act;
        int64_t wbytes = fx_type_block_bytes(wt);
        for (int64_t b = 0; b < n / FX_QK; b++) {
            double m = kref_fp16((uint16_t)(wb[b * wbytes + 2] | wb[b * wbytes + 3] << 8));
            double decoded = 0;
            for (int j = 0; j < FX_QK; j++)
                decoded += kref_elem(at, act, b * FX_QK + j, NULL);
            sum += m * (kref_fp16(ab[b].s) - decoded);
            *mag += fabs(m * kref_fp16(ab[b].s));
        }
    }
    return sum;
}
