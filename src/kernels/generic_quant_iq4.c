/* Reference conversions of the non-linear 4-bit formats, IQ4_NL (blocks of 32 with an fp16
 * scale) and IQ4_XS (super-blocks of 256: an fp16 scale and 8 signed 6-bit sub-block scales).
 * A 4-bit code does not stand for a point of a uniform grid but indexes fx_iq4nl_values, 16
 * levels from -127 to 113 that are closer together near 0, where most weights lie.
 *
 * The encoders are llama.cpp's (quantize_iq4_nl / quantize_iq4_xs without an importance
 * matrix) restated: per block of 32, the least-squares scale (weights x^2) for the codes chosen
 * at the block's extreme, then 15 nearby scales, the best fit kept; IQ4_XS then codes each
 * sub-block's scale relative to the largest one and chooses every code again with the scale as
 * coded. The f32 operations keep llama.cpp's order (byte-identical files), so, as for
 * generic_quant_k.c, this file must be compiled without FMA contraction or -ffast-math.
 *
 * IQ4_NL is dotted with Q8_0 activations, IQ4_XS with Q8_K. As elsewhere, NaN or infinite inputs
 * give some code, never undefined behaviour: codes come from comparisons, never from a float
 * converted to an integer, and fx_round_even is defined for any float. */
#include <math.h>

#include "kernels/generic.h"
#include "kernels/half.h"

const int8_t fx_iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                    1,    13,   25,  38,  53,  69,  89,  113};

/* A block of 32 whose largest magnitude is below this is all zeros. */
#define GROUP_MAX_EPS 1e-15f
/* The scales tried on either side of the one that puts the block's extreme on -127. */
#define N_TRY 7

/* The index of the level nearest x (in units of the scale); the lower one on a tie. */
static int nearest_level(float x) {
    const int8_t *v = fx_iq4nl_values;
    if (x <= v[0])
        return 0;
    if (x >= v[15])
        return 15;
    int lo = 0, hi = 15; /* v[lo] <= x < v[hi] */
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (x < v[mid])
            hi = mid;
        else
            lo = mid;
    }
    return x - v[lo] < v[hi] - x ? lo : hi;
}

/* The 32 codes of a block as Q4_0 stores them: element j low, element j + 16 high. */
static void pack_codes(const uint8_t L[FX_QK], uint8_t qs[FX_QK / 2]) {
    for (int j = 0; j < FX_QK / 2; j++)
        qs[j] = (uint8_t)(L[j] | L[j + FX_QK / 2] << 4);
}

/* The scale of one block of 32 (0 for an all-zero block): the weighted least-squares fit of the
 * levels chosen at 1 / d for d = max / 127, then at the 15 scales whose inverses are
 * (t - 127) / max for t = -7..7, the best fit kept. */
static float fit_block(const float *x) {
    const int8_t *v = fx_iq4nl_values;
    float w[FX_QK];
    for (int j = 0; j < FX_QK; j++)
        w[j] = x[j] * x[j];
    float amax = 0, max = 0;
    for (int j = 0; j < FX_QK; j++) {
        float ax = fabsf(x[j]);
        if (ax > amax) {
            amax = ax;
            max = x[j];
        }
    }
    if (amax < GROUP_MAX_EPS)
        return 0.0f;
    float d = -max / (float)v[0];
    float id = 1 / d;
    float sumqx = 0, sumq2 = 0;
    for (int j = 0; j < FX_QK; j++) {
        float q = (float)v[nearest_level(id * x[j])];
        sumqx += w[j] * q * x[j];
        sumq2 += w[j] * q * q;
    }
    d = sumqx / sumq2;
    float best = d * sumqx;
    for (int t = -N_TRY; t <= N_TRY; t++) {
        id = (float)(t + v[0]) / max;
        sumqx = sumq2 = 0;
        for (int j = 0; j < FX_QK; j++) {
            float q = (float)v[nearest_level(id * x[j])];
            sumqx += w[j] * q * x[j];
            sumq2 += w[j] * q * q;
        }
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    return d;
}

/* The codes of a block of 32 at scale d (each element's nearest level; 0 scale: the level
 * nearest 0). */
static void choose_codes(const float *x, float d, uint8_t L[FX_QK]) {
    float id = d != 0.0f ? 1 / d : 0.0f;
    for (int j = 0; j < FX_QK; j++)
        L[j] = (uint8_t)nearest_level(id * x[j]);
}

/* ---- IQ4_NL -------------------------------------------------------------------------------- */

void fx_iq4_nl_to_float(const void *restrict src, float *restrict dst, int64_t n) {
    const struct fx_block_iq4_nl *b = src;
    for (int64_t i = 0; i < n / FX_QK; i++, b++, dst += FX_QK) {
        float d = fx_fp16_to_f32(b->d);
        for (int j = 0; j < FX_QK / 2; j++) {
            dst[j] = d * (float)fx_iq4nl_values[b->qs[j] & 0x0f];
            dst[j + FX_QK / 2] = d * (float)fx_iq4nl_values[b->qs[j] >> 4];
        }
    }
}

/* The codes are chosen at the fitted f32 scale; the block stores its fp16 rounding. */
void fx_iq4_nl_from_float(const float *restrict src, void *restrict dst, int64_t n) {
    struct fx_block_iq4_nl *b = dst;
    for (int64_t i = 0; i < n / FX_QK; i++, b++, src += FX_QK) {
        float d = fit_block(src);
        uint8_t L[FX_QK];
        choose_codes(src, d, L);
        b->d = fx_f32_to_fp16(d);
        pack_codes(L, b->qs);
    }
}

/* ---- IQ4_XS -------------------------------------------------------------------------------- */

/* Sub-block s's scale code, 0..63 (the scale is d * (code - 32)). */
static int iq4_xs_scale(const struct fx_block_iq4_xs *b, int s) {
    int lo = (b->scales_l[s / 2] >> (4 * (s % 2))) & 0x0f;
    int hi = (b->scales_h >> (2 * s)) & 3;
    return lo | hi << 4;
}

void fx_iq4_xs_to_float(const void *restrict src, float *restrict dst, int64_t n) {
    const struct fx_block_iq4_xs *b = src;
    for (int64_t i = 0; i < n / FX_QK_K; i++, b++) {
        float d = fx_fp16_to_f32(b->d);
        for (int s = 0; s < FX_QK_K / FX_QK; s++, dst += FX_QK) {
            float dl = d * (float)(iq4_xs_scale(b, s) - 32);
            const uint8_t *qs = b->qs + 16 * s;
            for (int j = 0; j < FX_QK / 2; j++) {
                dst[j] = dl * (float)fx_iq4nl_values[qs[j] & 0x0f];
                dst[j + FX_QK / 2] = dl * (float)fx_iq4nl_values[qs[j] >> 4];
            }
        }
    }
}

/* Each sub-block's scale fitted as IQ4_NL's, then coded as d * l with d = -(the scale of
 * largest magnitude) / 32 and l = round(scale / d) in -32..31 (so the largest is exactly
 * -32 d), and the codes chosen again at d * l (d in f32, not its fp16 rounding). */
void fx_iq4_xs_from_float(const float *restrict src, void *restrict dst, int64_t n) {
    struct fx_block_iq4_xs *b = dst;
    enum { SUBS = FX_QK_K / FX_QK };
    for (int64_t i = 0; i < n / FX_QK_K; i++, b++, src += FX_QK_K) {
        float scales[SUBS], max_scale = 0, amax_scale = 0;
        for (int s = 0; s < SUBS; s++) {
            scales[s] = fit_block(src + FX_QK * s);
            if (fabsf(scales[s]) > amax_scale) {
                amax_scale = fabsf(scales[s]);
                max_scale = scales[s];
            }
        }
        float d = -max_scale / 32;
        float id = d != 0.0f ? 1 / d : 0.0f;
        b->d = fx_f32_to_fp16(d);
        b->scales_h = 0;
        for (int s = 0; s < SUBS; s++) {
            int l = fx_round_even(id * scales[s]);
            l = l < -32 ? -32 : l > 31 ? 31 : l;
            uint8_t L[FX_QK];
            choose_codes(src + FX_QK * s, d * (float)l, L);
            pack_codes(L, b->qs + 16 * s);
            l += 32;
            if (s % 2 == 0)
                b->scales_l[s / 2] = (uint8_t)(l & 0x0f);
            else
                b->scales_l[s / 2] |= (uint8_t)((l & 0x0f) << 4);
            b->scales_h |= (uint16_t)((l >> 4) << (2 * s));
        }
    }
}
