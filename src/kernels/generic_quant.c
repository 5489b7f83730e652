/* Reference conversions of the plain formats (F32, F16, BF16) and the 32-wide block formats
 * (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, MXFP4): decoding to f32, the file encodings (byte for
 * byte what llama.cpp's quantizer writes without an importance matrix) and the activation
 * quantizers.
 *
 * Every function takes n, a whole number of blocks, and works block by block, so a row may be
 * converted in any pieces of whole blocks. Inputs are not assumed finite: NaN or infinite values
 * give some code, never undefined behaviour. */
#include <float.h>
#include <math.h>

#include "kernels/generic.h"
#include "kernels/half.h"

/* ---- F32, F16, BF16 ------------------------------------------------------------------------ */

void fx_f32_to_float(const void *restrict src, float *restrict dst, int64_t n) {
    memcpy(dst, src, (size_t)n * sizeof(float));
}

void fx_f32_from_float(const float *restrict src, void *restrict dst, int64_t n) {
    memcpy(dst, src, (size_t)n * sizeof(float));
}

void fx_f16_to_float(const void *restrict src, float *restrict dst, int64_t n) {
    const uint16_t *h = src;
    for (int64_t i = 0; i < n; i++)
        dst[i] = fx_fp16_to_f32(h[i]);
}

void fx_f16_from_float(const float *restrict src, void *restrict dst, int64_t n) {
    uint16_t *h = dst;
    for (int64_t i = 0; i < n; i++)
        h[i] = fx_f32_to_fp16(src[i]);
}

void fx_bf16_to_float(const void *restrict src, float *restrict dst, int64_t n) {
    const uint16_t *h = src;
    for (int64_t i = 0; i < n; i++)
        dst[i] = fx_bf16_to_f32(h[i]);
}

void fx_bf16_from_float(const float *restrict src, void *restrict dst, int64_t n) {
    uint16_t *h = dst;
    for (int64_t i = 0; i < n; i++)
        h[i] = fx_f32_to_bf16(src[i]);
}

/* ---- helpers of the 32-wide encoders ------------------------------------------------------- */

/* The element of largest magnitude (the first of equals), signed: the symmetric formats put it
 * on their most negative code, which is one step larger than the most positive one. */
static float signed_absmax(const float *x, int n) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++) {
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    return max;
}

static void min_max(const float *x, int n, float *min, float *max) {
    *min = FLT_MAX;
    *max = -FLT_MAX;
    for (int j = 0; j < n; j++) {
        if (x[j] < *min)
            *min = x[j];
        if (x[j] > *max)
            *max = x[j];
    }
}

/* The code of a value already shifted to v = x / d + offset + 0.5: truncated toward zero and
 * capped at top, as the reference encoders do; clamping first keeps the conversion defined. */
static uint8_t truncate_code(float v, int top) {
    v = fminf(fmaxf(v, 0.0f), (float)top);
    return (uint8_t)v;
}

/* The 5-bit formats keep the fifth bit of element j in bit j of a little-endian 32-bit word. */
static void store_qh(uint8_t qh[4], uint32_t bits) {
    for (int b = 0; b < 4; b++)
        qh[b] = (uint8_t)(bits >> (8 * b));
}

static uint32_t load_qh(const uint8_t qh[4]) {
    return (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
}

/* ---- Q4_0: d * (q - 8), q in 0..15 --------------------------------------------------------- */

void fx_q4_0_to_float(const void *restrict src, float *restrict dst, int64_t n) {
    const struct fx_block_q4_0 *b = src;
    for (int64_t i = 0; i < n / FX_QK; i++, b++, dst += FX_QK) {
        float d = fx_fp16_to_f32(b->d);
        for (int j = 0; j < FX_QK / 2; j++) {
            dst[j] = (float)((b->qs[j] & 0x0f) - 8) * d;
            dst[j + FX_QK / 2] = (float)((b->qs[j] >> 4) - 8) * d;
        }
    }
}

void fx_q4_0_from_float(const float *restrict src, void *restrict dst, int64_t n) {
    struct fx_block_q4_0 *b = dst;
    for (int64_t i = 0; i < n / FX_QK; i++, b++, src += FX_QK) {
        float d = signed_absmax(src, FX_QK) / -8;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        b->d = fx_f32_to_fp16(d);
        for (int j = 0; j < FX_QK / 2; j++) {
            uint8_t lo = truncate_code(src[j] * id + 8.5f, 15);
            uint8_t hi = truncate_code(src[j + FX_QK / 2] * id + 8.5f, 15);
            b->qs[j] = (uint8_t)(lo | hi << 4);
        }
    }
}

/* ---- Q4_1: d * q + m, q in 0..15 ----------------------------------------------------------- */

void fx_q4_1_to_float(const void *restrict src, float *restrict dst, int64_t n) {
    const struct fx_block_q4_1 *b = src;
    for (int64_t i = 0; i < n / FX_QK; i++, b++, dst += FX_QK) {
        float d = fx_fp16_to_f32(b->d), m = fx_fp16_to_f32(b->m);
        for (int j = 0; j < FX_QK / 2; j++) {
            dst[j] = (float)(b->qs[j] & 0x0f) * d + m;
            dst[j + FX_QK / 2] = (float)(b->qs[j] >> 4) * d + m;
        }
    }
}

void fx_q4_1_from_float(const float *restrict src, void *restrict dst, int64_t n) {
    struct fx_block_q4_1 *b = dst;
    for (int64_t i = 0; i < n / FX_QK; i++, b++, src += FX_QK) {
        float min, max;
        min_max(src, FX_QK, &min, &max);
        float d = (max - min) / 15;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        b->d = fx_f32_to_fp16(d);
        b->m = fx_f32_to_fp16(min);
        for (int j = 0; j < FX_QK / 2; j++) {
            uint8_t lo = truncate_code((src[j] - min) * id + 0.5f, 15);
            uint8_t hi = truncate_code((src[j + FX_QK / 2] - min) * id + 0.5f, 15);
            b->qs[j] = (uint8_t)(lo | hi << 4);
        }
    }
}

/* ---- Q5_0: d * (q - 16), q in 0..31 -------------------------------------------------------- */

void fx_q5_0_to_float(const void *restrict src, float *restrict dst, int64_t n) {
    const struct fx_block_q5_0 *b = src;
    for (int64_t i = 0; i < n / FX_QK; i++, b++, dst += FX_QK) {
        float d = fx_fp16_to_f32(b->d);
        uint32_t qh = load_qh(b->qh);
        for (int j = 0; j < FX_QK / 2; j++) {
            int lo = (b->qs[j] & 0x0f) | (int)((qh >> j) & 1) << 4;
            int hi = (b->qs[j] >> 4) | (int)((qh >> (j + FX_QK / 2)) & 1) << 4;
            dst[j] = (float)(lo - 16) * d;
            dst[j + FX_QK / 2] = (float)(hi - 16) * d;
        }
    }
}

/* Packs 32 5-bit codes: low nibbles as Q4, the fifth bits into qh. */
static void pack_q5(const uint8_t codes[FX_QK], uint8_t qs[FX_QK / 2], uint8_t qh[4]) {
    uint32_t bits = 0;
    for (int j = 0; j < FX_QK / 2; j++) {
        uint8_t lo = codes[j], hi = codes[j + FX_QK / 2];
        qs[j] = (uint8_t)((lo & 0x0f) | (hi & 0x0f) << 4);
        bits |= (uint32_t)(lo >> 4) << j;
        bits |= (uint32_t)(hi >> 4) << (j + FX_QK / 2);
    }
    store_qh(qh, bits);
}

void fx_q5_0_from_float(const float *restrict src, void *restrict dst, int64_t n) {
    struct fx_block_q5_0 *b = dst;
    for (int64_t i = 0; i < n / FX_QK; i++, b++, src += FX_QK) {
        float d = signed_absmax(src, FX_QK) / -16;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        b->d = fx_f32_to_fp16(d);
        uint8_t codes[FX_QK];
        for (int j = 0; j < FX_QK; j++)
            codes[j] = truncate_code(src[j] * id + 16.5f, 31);
        pack_q5(codes, b->qs, b->qh);
    }
}

/* ---- Q5_1: d * q + m, q in 0..31 ----------------------------------------------------------- */

void fx_q5_1_to_float(const void *restrict src, float *restrict dst, int64_t n) {
    const struct fx_block_q5_1 *b = src;
    for (int64_t i = 0; i < n / FX_QK; i++, b++, dst += FX_QK) {
        float d = fx_fp16_to_f32(b->d), m = fx_fp16_to_f32(b->m);
        uint32_t qh = load_qh(b->qh);
        for (int j = 0; j < FX_QK / 2; j++) {
            int lo = (b->qs[j] & 0x0f) | (int)((qh >> j) & 1) << 4;
            int hi = (b->qs[j] >> 4) | (int)((qh >> (j + FX_QK / 2)) & 1) << 4;
            dst[j] = (float)lo * d + m;
            dst[j + FX_QK / 2] = (float)hi * d + m;
        }
    }
}

void fx_q5_1_from_float(const float *restrict src, void *restrict dst, int64_t n) {
    struct fx_block_q5_1 *b = dst;
    for (int64_t i = 0; i < n / FX_QK; i++, b++, src += FX_QK) {
        float min, max;
        min_max(src, FX_QK, &min, &max);
        float d = (max - min) / 31;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        b->d = fx_f32_to_fp16(d);
        b->m = fx_f32_to_fp16(min);
        uint8_t codes[FX_QK];
        for (int j = 0; j < FX_QK; j++)
            codes[j] = truncate_code((src[j] - min) * id + 0.5f, 31);
        pack_q5(codes, b->qs, b->qh);
    }
}

/* ---- Q8_0 and Q8_1: d * q, q in -127..127 -------------------------------------------------- */

void fx_q8_0_to_float(const void *restrict src, float *restrict dst, int64_t n) {
    const struct fx_block_q8_0 *b = src;
    for (int64_t i = 0; i < n / FX_QK; i++, b++, dst += FX_QK) {
        float d = fx_fp16_to_f32(b->d);
        for (int j = 0; j < FX_QK; j++)
            dst[j] = (float)b->qs[j] * d;
    }
}

void fx_q8_1_to_float(const void *restrict src, float *restrict dst, int64_t n) {
    const struct fx_block_q8_1 *b = src;
    for (int64_t i = 0; i < n / FX_QK; i++, b++, dst += FX_QK) {
        float d = fx_fp16_to_f32(b->d);
        for (int j = 0; j < FX_QK; j++)
            dst[j] = (float)b->qs[j] * d;
    }
}

static float absmax(const float *x, int n) {
    float amax = 0.0f;
    for (int j = 0; j < n; j++)
        amax = fmaxf(amax, fabsf(x[j]));
    return amax;
}

static int8_t clamp_i8(float v) {
    return (int8_t)fminf(fmaxf(v, -127.0f), 127.0f);
}

/* The file encoding: q = round half away from zero of x * (1 / d). */
void fx_q8_0_from_float(const float *restrict src, void *restrict dst, int64_t n) {
    struct fx_block_q8_0 *b = dst;
    for (int64_t i = 0; i < n / FX_QK; i++, b++, src += FX_QK) {
        float d = absmax(src, FX_QK) / 127;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        b->d = fx_f32_to_fp16(d);
        for (int j = 0; j < FX_QK; j++)
            b->qs[j] = clamp_i8(roundf(src[j] * id));
    }
}

/* The activation encoding shared by Q8_0 and Q8_1 (kernels.h): q = round half to even of
 * x * (127 / amax); returns d = amax / 127. */
static float quantize_act_block(const float *x, int8_t q[FX_QK], int *sum) {
    float amax = absmax(x, FX_QK);
    float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    *sum = 0;
    for (int j = 0; j < FX_QK; j++) {
        /* |x * id| <= 127 up to rounding, and rounding to even never reaches 128. */
        q[j] = (int8_t)fx_round_even(fminf(fmaxf(x[j] * id, -127.0f), 127.0f));
        *sum += q[j];
    }
    return amax / 127.0f;
}

void fx_q8_0_quantize_act(const float *restrict src, void *restrict dst, int64_t n) {
    struct fx_block_q8_0 *b = dst;
    for (int64_t i = 0; i < n / FX_QK; i++, b++, src += FX_QK) {
        int sum;
        b->d = fx_f32_to_fp16(quantize_act_block(src, b->qs, &sum));
    }
}

void fx_q8_1_quantize_act(const float *restrict src, void *restrict dst, int64_t n) {
    struct fx_block_q8_1 *b = dst;
    for (int64_t i = 0; i < n / FX_QK; i++, b++, src += FX_QK) {
        int sum;
        float d = quantize_act_block(src, b->qs, &sum);
        b->d = fx_f32_to_fp16(d);
        b->s = fx_f32_to_fp16(d * (float)sum);
    }
}

/* ---- MXFP4: E2M1 codes times a shared power of two ----------------------------------------- */

/* E2M1 is a sign bit, 2 exponent bits and 1 mantissa bit: 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their
 * negatives (codes 8..15). Doubled here to stay integers. */
const int8_t fx_mxfp4_values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

void fx_mxfp4_to_float(const void *restrict src, float *restrict dst, int64_t n) {
    const struct fx_block_mxfp4 *b = src;
    for (int64_t i = 0; i < n / FX_QK; i++, b++, dst += FX_QK) {
        float d = fx_e8m0_to_f32_half(b->e);
        for (int j = 0; j < FX_QK / 2; j++) {
            dst[j] = (float)fx_mxfp4_values[b->qs[j] & 0x0f] * d;
            dst[j + FX_QK / 2] = (float)fx_mxfp4_values[b->qs[j] >> 4] * d;
        }
    }
}

/* The code nearest x at scale d; the first (lowest) code wins ties, so 0 is +0. */
static uint8_t mxfp4_nearest(float x, float d) {
    uint8_t best = 0;
    float best_err = fabsf((float)fx_mxfp4_values[0] * d - x);
    for (uint8_t c = 1; c < 16; c++) {
        float err = fabsf((float)fx_mxfp4_values[c] * d - x);
        if (err < best_err) {
            best = c;
            best_err = err;
        }
    }
    return best;
}

/* The shared exponent puts the block's largest magnitude in [4, 8) units of 2^(e-127), so it
 * lands on the top code points (4 or 6) or just past them. */
void fx_mxfp4_from_float(const float *restrict src, void *restrict dst, int64_t n) {
    struct fx_block_mxfp4 *b = dst;
    for (int64_t i = 0; i < n / FX_QK; i++, b++, src += FX_QK) {
        float amax = 0.0f;
        for (int j = 0; j < FX_QK; j++)
            if (amax < fabsf(src[j]))
                amax = fabsf(src[j]);
        float e = amax > 0.0f ? floorf(log2f(amax)) - 2 + 127 : 0.0f;
        b->e = (uint8_t)fminf(fmaxf(e, 0.0f), 255.0f);
        float d = fx_e8m0_to_f32_half(b->e);
        for (int j = 0; j < FX_QK / 2; j++) {
            uint8_t lo = mxfp4_nearest(src[j], d);
            uint8_t hi = mxfp4_nearest(src[j + FX_QK / 2], d);
            b->qs[j] = (uint8_t)(lo | hi << 4);
        }
    }
}
