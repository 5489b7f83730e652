/* Reference conversions of the K formats: super-blocks of 256 elements split into sub-blocks
 * of 16 or 32 with their own quantized scales (and, for Q2_K, Q4_K, Q5_K, minimums).
 *
 * The encoders are llama.cpp's reference quantizers (no importance matrix) written out here:
 * for each sub-block a search for the scale (and minimum) that best fits it, then the sub-block
 * scales quantized against the super-block's largest one, then every element re-quantized with
 * the scale as stored. The order of the f32 operations matters for byte-exact output, so the
 * arithmetic below keeps it, and this file must not be compiled with FMA contraction or
 * -ffast-math (the Makefile's -std=c11 keeps contraction off).
 *
 * Activations for these formats are Q8_K: 256 int8 with an f32 scale and the sums of each 16,
 * which the min terms of the dot products use.
 *
 * As in generic_quant.c, NaN or infinite inputs give some code, never undefined behaviour: every
 * code is clamped as an integer, and fx_round_even is defined for any float. */
#include <math.h>

#include "kernels/generic.h"
#include "kernels/half.h"

/* A sub-block whose largest magnitude is below this is all zeros. */
#define GROUP_MAX_EPS 1e-15f

static int clampi(int v, int lo, int hi) {
    return v < lo ? lo : v > hi ? hi : v;
}

/* ---- scale searches ------------------------------------------------------------------------ */

/* Symmetric codes l in -nmax..nmax-1 for x ~ scale * l, minimising sum(x^2 * (x - scale*l)^2):
 * the least-squares scale for the rounding at iscale = -nmax / max, then 18 nearby iscales, the
 * best one kept. Stores l + nmax in L and returns the scale. (Q6_K) */
static float fit_symmetric(int n, int nmax, const float *x, int8_t *L) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++) {
        float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < GROUP_MAX_EPS) {
        for (int i = 0; i < n; i++)
            L[i] = 0;
        return 0.0f;
    }
    float iscale = (float)-nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = clampi(fx_round_even(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)(l + nmax);
        float w = x[i] * x[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0)
            continue;
        iscale = -((float)nmax + 0.1f * (float)is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            int l = clampi(fx_round_even(iscale * x[i]), -nmax, nmax - 1);
            float w = x[i] * x[i];
            sumlx += w * x[i] * (float)l;
            suml2 += w * (float)l * (float)l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++)
                L[i] = (int8_t)(nmax + clampi(fx_round_even(iscale * x[i]), -nmax, nmax - 1));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* Symmetric codes as above, refined by coordinate descent: each code in turn is moved to the
 * value the least-squares scale of the others asks for, kept if the fit improves; at most five
 * passes. Stores l + nmax in L and returns the scale. (Q3_K) */
static float fit_symmetric_refined(int n, int nmax, const float *x, int8_t *L) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++) {
        float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < GROUP_MAX_EPS) {
        for (int i = 0; i < n; i++)
            L[i] = 0;
        return 0.0f;
    }
    float iscale = (float)-nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = clampi(fx_round_even(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)l;
        float w = x[i] * x[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    for (int pass = 0; pass < 5; pass++) {
        int changed = 0;
        for (int i = 0; i < n; i++) {
            float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * (float)L[i];
            if (slx > 0) {
                float sl2 = suml2 - w * (float)L[i] * (float)L[i];
                int l = clampi(fx_round_even(x[i] * sl2 / slx), -nmax, nmax - 1);
                if (l != L[i]) {
                    slx += w * x[i] * (float)l;
                    sl2 += w * (float)l * (float)l;
                    if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (int8_t)l;
                        sumlx = slx;
                        suml2 = sl2;
                        changed++;
                    }
                }
            }
        }
        if (!changed)
            break;
    }
    for (int i = 0; i < n; i++)
        L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* Codes l in 0..nmax for x ~ scale * l - the_min (the_min >= 0), minimising the weighted error
 * (absolute with use_mad, else squared): the min-max grid first, then nstep + 1 grids with
 * iscale = (rmin + rdelta * is + nmax) / (max - min), each refitted by weighted least squares
 * for scale and minimum. Returns the scale and stores -minimum in *the_min. (Q2_K, Q4_K, Q5_K) */
static float fit_affine(int n, int nmax, const float *x, const float *weights, uint8_t *L,
                        float *the_min, float rmin, float rdelta, int nstep, bool use_mad) {
    uint8_t Laux[32];
    float min = x[0], max = x[0];
    float sum_w = weights[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min)
            min = x[i];
        if (x[i] > max)
            max = x[i];
        float w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0)
        min = 0;
    if (max == min) {
        for (int i = 0; i < n; i++)
            L[i] = 0;
        *the_min = -min;
        return 0.0f;
    }
    float iscale = (float)nmax / (max - min);
    float scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; i++) {
        int l = fx_round_even(iscale * (x[i] - min));
        L[i] = (uint8_t)clampi(l, 0, nmax);
        float diff = scale * (float)L[i] + min - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        best_error += weights[i] * diff;
    }
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * (float)is + (float)nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            int l = clampi(fx_round_even(iscale * (x[i] - min)), 0, nmax);
            Laux[i] = (uint8_t)l;
            float w = weights[i];
            sum_l += w * (float)l;
            sum_l2 += w * (float)l * (float)l;
            sum_xl += w * (float)l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = 0;
            for (int i = 0; i < n; i++) {
                float diff = this_scale * (float)Laux[i] + this_min - x[i];
                diff = use_mad ? fabsf(diff) : diff * diff;
                cur_error += weights[i] * diff;
            }
            if (cur_error < best_error) {
                memcpy(L, Laux, (size_t)n);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

/* Packs 2-bit codes L[256] four to a byte: byte l of each 32-byte half holds elements l,
 * l + 32, l + 64, l + 96 of that half's 128 (Q2_K, Q3_K). */
static void pack_2bit(const uint8_t *L, uint8_t *qs) {
    for (int j = 0; j < FX_QK_K; j += 128)
        for (int l = 0; l < 32; l++)
            qs[j / 4 + l] =
                (uint8_t)(L[j + l] | L[j + l + 32] << 2 | L[j + l + 64] << 4 | L[j + l + 96] << 6);
}

/* ---- Q2_K: 16 sub-blocks of 16, x = d * sc * q - dmin * m, 4-bit sc and m, q in 0..3 ------- */

void fx_q2_K_to_float(const void *restrict src, float *restrict dst, int64_t n) {
    const struct fx_block_q2_K *b = src;
    for (int64_t i = 0; i < n / FX_QK_K; i++, b++) {
        float d = fx_fp16_to_f32(b->d), dmin = fx_fp16_to_f32(b->dmin);
        const uint8_t *q = b->qs;
        int is = 0;
        for (int half = 0; half < 2; half++, q += 32) {
            for (int shift = 0; shift < 8; shift += 2) {
                for (int k = 0; k < 2; k++) { /* the two sub-blocks of 16 in these 32 bytes */
                    uint8_t sc = b->scales[is++];
                    float dl = d * (float)(sc & 0x0f), ml = dmin * (float)(sc >> 4);
                    for (int l = 0; l < 16; l++)
                        *dst++ = dl * (float)((q[16 * k + l] >> shift) & 3) - ml;
                }
            }
        }
    }
}

void fx_q2_K_from_float(const float *restrict src, void *restrict dst, int64_t n) {
    struct fx_block_q2_K *b = dst;
    const float q4scale = 15.f;
    for (int64_t i = 0; i < n / FX_QK_K; i++, b++, src += FX_QK_K) {
        uint8_t L[FX_QK_K];
        float mins[FX_QK_K / 16], scales[FX_QK_K / 16], weights[16];
        float max_scale = 0, max_min = 0; /* the minimum is subtracted: scales are positive */
        for (int j = 0; j < FX_QK_K / 16; j++) {
            for (int l = 0; l < 16; l++)
                weights[l] = fabsf(src[16 * j + l]);
            scales[j] = fit_affine(16, 3, src + 16 * j, weights, L + 16 * j, &mins[j], -0.5f, 0.1f,
                                   15, true);
            if (scales[j] > max_scale)
                max_scale = scales[j];
            if (mins[j] > max_min)
                max_min = mins[j];
        }
        if (max_scale > 0) {
            float iscale = q4scale / max_scale;
            for (int j = 0; j < FX_QK_K / 16; j++)
                b->scales[j] = (uint8_t)fx_round_even(iscale * scales[j]);
            b->d = fx_f32_to_fp16(max_scale / q4scale);
        } else {
            memset(b->scales, 0, sizeof b->scales);
            b->d = fx_f32_to_fp16(0.f);
        }
        if (max_min > 0) {
            float iscale = q4scale / max_min;
            for (int j = 0; j < FX_QK_K / 16; j++)
                b->scales[j] |= (uint8_t)((unsigned)fx_round_even(iscale * mins[j]) << 4);
            b->dmin = fx_f32_to_fp16(max_min / q4scale);
        } else {
            b->dmin = fx_f32_to_fp16(0.f);
        }
        for (int j = 0; j < FX_QK_K / 16; j++) {
            float d = fx_fp16_to_f32(b->d) * (float)(b->scales[j] & 0x0f);
            if (d == 0.0f)
                continue; /* keep the search's codes */
            float dm = fx_fp16_to_f32(b->dmin) * (float)(b->scales[j] >> 4);
            for (int l = 0; l < 16; l++)
                L[16 * j + l] = (uint8_t)clampi(fx_round_even((src[16 * j + l] + dm) / d), 0, 3);
        }
        pack_2bit(L, b->qs);
    }
}

/* ---- Q3_K: 16 sub-blocks of 16, x = d * (sc - 32) * q, 6-bit sc, q in -4..3 ---------------- */

void fx_q3_K_to_float(const void *restrict src, float *restrict dst, int64_t n) {
    const struct fx_block_q3_K *b = src;
    for (int64_t i = 0; i < n / FX_QK_K; i++, b++) {
        float d = fx_fp16_to_f32(b->d);
        const uint8_t *q = b->qs;
        uint8_t m = 1; /* the hmask bit of the current 32 elements */
        int is = 0;
        for (int half = 0; half < 2; half++, q += 32) {
            for (int shift = 0; shift < 8; shift += 2, m <<= 1) {
                for (int k = 0; k < 2; k++) {
                    float dl = d * (float)fx_q3_K_scale(b->scales, is++);
                    for (int l = 16 * k; l < 16 * k + 16; l++) {
                        int v = ((q[l] >> shift) & 3) - ((b->hmask[l] & m) ? 0 : 4);
                        *dst++ = dl * (float)v;
                    }
                }
            }
        }
    }
}

void fx_q3_K_from_float(const float *restrict src, void *restrict dst, int64_t n) {
    struct fx_block_q3_K *b = dst;
    for (int64_t i = 0; i < n / FX_QK_K; i++, b++, src += FX_QK_K) {
        int8_t L[FX_QK_K];
        float scales[FX_QK_K / 16];
        float max_scale = 0, amax = 0;
        for (int j = 0; j < FX_QK_K / 16; j++) {
            scales[j] = fit_symmetric_refined(16, 4, src + 16 * j, L + 16 * j);
            float scale = fabsf(scales[j]);
            if (scale > amax) {
                amax = scale;
                max_scale = scales[j];
            }
        }
        memset(b->scales, 0, sizeof b->scales);
        if (max_scale != 0.0f) {
            float iscale = -32.f / max_scale;
            for (int j = 0; j < FX_QK_K / 16; j++) {
                int l = clampi((int8_t)fx_round_even(iscale * scales[j]), -32, 31) + 32;
                if (j < 8)
                    b->scales[j] = (uint8_t)(l & 0x0f);
                else
                    b->scales[j - 8] |= (uint8_t)((l & 0x0f) << 4);
                b->scales[j % 4 + 8] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
            }
            b->d = fx_f32_to_fp16(1 / iscale);
        } else {
            b->d = fx_f32_to_fp16(0.f);
        }
        for (int j = 0; j < FX_QK_K / 16; j++) {
            float d = fx_fp16_to_f32(b->d) * (float)fx_q3_K_scale(b->scales, j);
            if (d == 0.0f)
                continue;
            for (int l = 0; l < 16; l++)
                L[16 * j + l] = (int8_t)(clampi(fx_round_even(src[16 * j + l] / d), -4, 3) + 4);
        }
        /* The high bit of element j goes to bit j / 32 of hmask[j % 32]. */
        memset(b->hmask, 0, sizeof b->hmask);
        uint8_t low[FX_QK_K];
        for (int j = 0; j < FX_QK_K; j++) {
            if (L[j] > 3)
                b->hmask[j % 32] |= (uint8_t)(1u << (j / 32));
            low[j] = (uint8_t)(L[j] & 3);
        }
        pack_2bit(low, b->qs);
    }
}

/* ---- Q4_K and Q5_K: 8 sub-blocks of 32, x = d * sc * q - dmin * m, 6-bit sc and m ---------- */

void fx_q4_K_to_float(const void *restrict src, float *restrict dst, int64_t n) {
    const struct fx_block_q4_K *b = src;
    for (int64_t i = 0; i < n / FX_QK_K; i++, b++) {
        float d = fx_fp16_to_f32(b->d), dmin = fx_fp16_to_f32(b->dmin);
        const uint8_t *q = b->qs;
        for (int j = 0; j < 8; j += 2, q += 32) { /* 32 bytes: sub-block j low, j + 1 high */
            uint8_t sc, m;
            fx_k_scale_min(b->scales, j, &sc, &m);
            float d1 = d * (float)sc, m1 = dmin * (float)m;
            fx_k_scale_min(b->scales, j + 1, &sc, &m);
            float d2 = d * (float)sc, m2 = dmin * (float)m;
            for (int l = 0; l < 32; l++)
                *dst++ = d1 * (float)(q[l] & 0x0f) - m1;
            for (int l = 0; l < 32; l++)
                *dst++ = d2 * (float)(q[l] >> 4) - m2;
        }
    }
}

void fx_q5_K_to_float(const void *restrict src, float *restrict dst, int64_t n) {
    const struct fx_block_q5_K *b = src;
    for (int64_t i = 0; i < n / FX_QK_K; i++, b++) {
        float d = fx_fp16_to_f32(b->d), dmin = fx_fp16_to_f32(b->dmin);
        const uint8_t *q = b->qs;
        for (int j = 0; j < 8; j += 2, q += 32) {
            uint8_t sc, m;
            fx_k_scale_min(b->scales, j, &sc, &m);
            float d1 = d * (float)sc, m1 = dmin * (float)m;
            fx_k_scale_min(b->scales, j + 1, &sc, &m);
            float d2 = d * (float)sc, m2 = dmin * (float)m;
            uint8_t u1 = (uint8_t)(1u << j), u2 = (uint8_t)(2u << j); /* qh bits of j, j + 1 */
            for (int l = 0; l < 32; l++)
                *dst++ = d1 * (float)((q[l] & 0x0f) + (b->qh[l] & u1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; l++)
                *dst++ = d2 * (float)((q[l] >> 4) + (b->qh[l] & u2 ? 16 : 0)) - m2;
        }
    }
}

/* The shared part of the Q4_K and Q5_K encoders: fits the 8 sub-blocks (codes 0..nmax), packs
 * their 6-bit scales and mins and the two fp16 super-scales, and re-quantizes every element
 * with the scales as stored, into L[256]. */
static void encode_k_affine(const float *x, int nmax, float rmin, float rdelta, int nstep,
                            uint16_t *d_out, uint16_t *dmin_out, uint8_t scales_out[12],
                            uint8_t *L) {
    float mins[FX_QK_K / 32], scales[FX_QK_K / 32], weights[32];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < FX_QK_K / 32; j++) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++)
            sum_x2 += x[32 * j + l] * x[32 * j + l];
        float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++)
            weights[l] = av_x + fabsf(x[32 * j + l]);
        scales[j] = fit_affine(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], rmin, rdelta,
                               nstep, false);
        if (scales[j] > max_scale)
            max_scale = scales[j];
        if (mins[j] > max_min)
            max_min = mins[j];
    }
    float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    for (int j = 0; j < FX_QK_K / 32; j++) {
        uint8_t ls = (uint8_t)fx_round_even(inv_scale * scales[j]);
        uint8_t lm = (uint8_t)fx_round_even(inv_min * mins[j]);
        ls = ls < 63 ? ls : 63;
        lm = lm < 63 ? lm : 63;
        /* 12 bytes: sub-blocks 0..3 keep 6-bit scale and min in bytes j and j + 4; 4..7 keep
         * their low nibbles in byte j + 4 and their top two bits in the spare bits 6..7 of
         * bytes j - 4 (scale) and j (min). */
        if (j < 4) {
            scales_out[j] = ls;
            scales_out[j + 4] = lm;
        } else {
            scales_out[j + 4] = (uint8_t)((ls & 0x0f) | (lm & 0x0f) << 4);
            scales_out[j - 4] |= (uint8_t)((ls >> 4) << 6);
            scales_out[j] |= (uint8_t)((lm >> 4) << 6);
        }
    }
    *d_out = fx_f32_to_fp16(max_scale / 63.f);
    *dmin_out = fx_f32_to_fp16(max_min / 63.f);
    for (int j = 0; j < FX_QK_K / 32; j++) {
        uint8_t sc, m;
        fx_k_scale_min(scales_out, j, &sc, &m);
        float d = fx_fp16_to_f32(*d_out) * (float)sc;
        if (d == 0.0f)
            continue;
        float dm = fx_fp16_to_f32(*dmin_out) * (float)m;
        for (int l = 0; l < 32; l++)
            L[32 * j + l] = (uint8_t)clampi(fx_round_even((x[32 * j + l] + dm) / d), 0, nmax);
    }
}

void fx_q4_K_from_float(const float *restrict src, void *restrict dst, int64_t n) {
    struct fx_block_q4_K *b = dst;
    for (int64_t i = 0; i < n / FX_QK_K; i++, b++, src += FX_QK_K) {
        uint8_t L[FX_QK_K];
        encode_k_affine(src, 15, -1.f, 0.1f, 20, &b->d, &b->dmin, b->scales, L);
        /* 32 bytes per 64 elements: element l low nibble, element l + 32 high. */
        for (int j = 0; j < FX_QK_K; j += 64)
            for (int l = 0; l < 32; l++)
                b->qs[j / 2 + l] = (uint8_t)(L[j + l] | L[j + l + 32] << 4);
    }
}

void fx_q5_K_from_float(const float *restrict src, void *restrict dst, int64_t n) {
    struct fx_block_q5_K *b = dst;
    for (int64_t i = 0; i < n / FX_QK_K; i++, b++, src += FX_QK_K) {
        uint8_t L[FX_QK_K];
        encode_k_affine(src, 31, -0.5f, 0.1f, 15, &b->d, &b->dmin, b->scales, L);
        /* As Q4_K for the low four bits; the fifth bit of sub-block s (0..7) is bit s of qh. */
        memset(b->qh, 0, sizeof b->qh);
        for (int j = 0; j < FX_QK_K; j += 64) {
            uint8_t m1 = (uint8_t)(1u << (j / 32)), m2 = (uint8_t)(2u << (j / 32));
            for (int l = 0; l < 32; l++) {
                int l1 = L[j + l], l2 = L[j + l + 32];
                if (l1 > 15) {
                    l1 -= 16;
                    b->qh[l] |= m1;
                }
                if (l2 > 15) {
                    l2 -= 16;
                    b->qh[l] |= m2;
                }
                b->qs[j / 2 + l] = (uint8_t)(l1 | l2 << 4);
            }
        }
    }
}

/* ---- Q6_K: 16 sub-blocks of 16, x = d * sc * q, int8 sc, q in -32..31 ---------------------- */

void fx_q6_K_to_float(const void *restrict src, float *restrict dst, int64_t n) {
    const struct fx_block_q6_K *b = src;
    for (int64_t i = 0; i < n / FX_QK_K; i++, b++, dst += FX_QK_K) {
        float d = fx_fp16_to_f32(b->d);
        /* Each half of 128: ql[64] holds low nibbles of elements l (low) / l + 64 (high) and
         * l + 32 / l + 96; qh[32] holds the top two bits of l, l + 32, l + 64, l + 96. */
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = b->ql + 64 * h, *qh = b->qh + 32 * h;
            const int8_t *sc = b->scales + 8 * h;
            float *y = dst + 128 * h;
            for (int l = 0; l < 32; l++) {
                int is = l / 16;
                int q1 = ((ql[l] & 0x0f) | ((qh[l] >> 0) & 3) << 4) - 32;
                int q2 = ((ql[l + 32] & 0x0f) | ((qh[l] >> 2) & 3) << 4) - 32;
                int q3 = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
                int q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
                y[l] = d * (float)sc[is] * (float)q1;
                y[l + 32] = d * (float)sc[is + 2] * (float)q2;
                y[l + 64] = d * (float)sc[is + 4] * (float)q3;
                y[l + 96] = d * (float)sc[is + 6] * (float)q4;
            }
        }
    }
}

void fx_q6_K_from_float(const float *restrict src, void *restrict dst, int64_t n) {
    struct fx_block_q6_K *b = dst;
    for (int64_t i = 0; i < n / FX_QK_K; i++, b++, src += FX_QK_K) {
        int8_t L[FX_QK_K];
        float scales[FX_QK_K / 16];
        float max_scale = 0, max_abs_scale = 0;
        for (int j = 0; j < FX_QK_K / 16; j++) {
            scales[j] = fit_symmetric(16, 32, src + 16 * j, L + 16 * j);
            if (fabsf(scales[j]) > max_abs_scale) {
                max_abs_scale = fabsf(scales[j]);
                max_scale = scales[j];
            }
        }
        if (max_abs_scale < GROUP_MAX_EPS) {
            memset(b, 0, sizeof *b);
            b->d = fx_f32_to_fp16(0.f);
            continue;
        }
        float iscale = -128.f / max_scale;
        b->d = fx_f32_to_fp16(1 / iscale);
        for (int j = 0; j < FX_QK_K / 16; j++) {
            int sc = fx_round_even(iscale * scales[j]);
            b->scales[j] = (int8_t)(sc < 127 ? sc : 127);
        }
        for (int j = 0; j < FX_QK_K / 16; j++) {
            float d = fx_fp16_to_f32(b->d) * (float)b->scales[j];
            if (d == 0.0f)
                continue;
            for (int l = 0; l < 16; l++)
                L[16 * j + l] = (int8_t)(clampi(fx_round_even(src[16 * j + l] / d), -32, 31) + 32);
        }
        for (int h = 0; h < 2; h++) {
            uint8_t *ql = b->ql + 64 * h, *qh = b->qh + 32 * h;
            const int8_t *Lh = L + 128 * h;
            for (int l = 0; l < 32; l++) {
                ql[l] = (uint8_t)((Lh[l] & 0x0f) | (Lh[l + 64] & 0x0f) << 4);
                ql[l + 32] = (uint8_t)((Lh[l + 32] & 0x0f) | (Lh[l + 96] & 0x0f) << 4);
                qh[l] = (uint8_t)((Lh[l] >> 4) | (Lh[l + 32] >> 4) << 2 | (Lh[l + 64] >> 4) << 4 |
                                  (Lh[l + 96] >> 4) << 6);
            }
        }
    }
}

/* ---- Q8_K: the activation format of the K weights ------------------------------------------ */

void fx_q8_K_to_float(const void *restrict src, float *restrict dst, int64_t n) {
    const struct fx_block_q8_K *b = src;
    for (int64_t i = 0; i < n / FX_QK_K; i++, b++, dst += FX_QK_K)
        for (int j = 0; j < FX_QK_K; j++)
            dst[j] = b->d * (float)b->qs[j];
}

void fx_q8_K_quantize_act(const float *restrict src, void *restrict dst, int64_t n) {
    struct fx_block_q8_K *b = dst;
    for (int64_t i = 0; i < n / FX_QK_K; i++, b++, src += FX_QK_K) {
        float max = 0, amax = 0;
        for (int j = 0; j < FX_QK_K; j++) {
            float ax = fabsf(src[j]);
            if (ax > amax) {
                amax = ax;
                max = src[j];
            }
        }
        if (amax == 0.0f) {
            memset(b, 0, sizeof *b);
            continue;
        }
        /* The largest magnitude maps to -127 exactly, so codes stay in -127..127. */
        float iscale = -127.f / max;
        for (int j = 0; j < FX_QK_K; j++) {
            int v = fx_round_even(iscale * src[j]);
            b->qs[j] = (int8_t)clampi(v, -127, 127);
        }
        for (int j = 0; j < FX_QK_K / 16; j++) {
            int sum = 0;
            for (int l = 0; l < 16; l++)
                sum += b->qs[16 * j + l];
            b->bsums[j] = (int16_t)sum;
        }
        b->d = 1 / iscale;
    }
}
