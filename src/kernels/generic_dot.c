/* Reference dot products of a weight row with an activation row.
 *
 * Float weights (F32, F16, BF16) dot f32 activations, summed in double. Quantized weights dot
 * their activation format (kernels.h): within a block (or sub-block) the codes multiply and add
 * exactly as integers, and the block's integer sum is scaled and added to an f32 total, block
 * by block in order. The SIMD tables compute the same integer sums, so they differ from these
 * only in the order of the f32 additions. */
#include "kernels/generic.h"
#include "kernels/half.h"

/* ---- float weights ------------------------------------------------------------------------- */

void fx_f32_vec_dot(int64_t n, float *restrict s, const void *restrict x, const void *restrict y) {
    const float *a = x, *b = y;
    double sum = 0;
    for (int64_t i = 0; i < n; i++)
        sum += (double)a[i] * (double)b[i];
    *s = (float)sum;
}

void fx_f16_vec_dot(int64_t n, float *restrict s, const void *restrict x, const void *restrict y) {
    const uint16_t *a = x;
    const float *b = y;
    double sum = 0;
    for (int64_t i = 0; i < n; i++)
        sum += (double)fx_fp16_to_f32(a[i]) * (double)b[i];
    *s = (float)sum;
}

void fx_bf16_vec_dot(int64_t n, float *restrict s, const void *restrict x, const void *restrict y) {
    const uint16_t *a = x;
    const float *b = y;
    double sum = 0;
    for (int64_t i = 0; i < n; i++)
        sum += (double)fx_bf16_to_f32(a[i]) * (double)b[i];
    *s = (float)sum;
}

/* ---- 32-wide formats ----------------------------------------------------------------------- */

/* The 5-bit formats' fifth bits, little-endian. */
static uint32_t qh_bits(const uint8_t qh[4]) {
    return (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
}

void fx_q4_0_vec_dot(int64_t n, float *restrict s, const void *restrict x, const void *restrict y) {
    const struct fx_block_q4_0 *a = x;
    const struct fx_block_q8_0 *b = y;
    float sum = 0;
    for (int64_t i = 0; i < n / FX_QK; i++) {
        int sumi = 0;
        for (int j = 0; j < FX_QK / 2; j++) {
            sumi += ((a[i].qs[j] & 0x0f) - 8) * b[i].qs[j];
            sumi += ((a[i].qs[j] >> 4) - 8) * b[i].qs[j + FX_QK / 2];
        }
        sum += (float)sumi * fx_fp16_to_f32(a[i].d) * fx_fp16_to_f32(b[i].d);
    }
    *s = sum;
}

/* d * q + m against Q8_1: d * dy * sum(q * qy) + m * s, where s = dy * sum(qy) comes with the
 * activation block. */
void fx_q4_1_vec_dot(int64_t n, float *restrict s, const void *restrict x, const void *restrict y) {
    const struct fx_block_q4_1 *a = x;
    const struct fx_block_q8_1 *b = y;
    float sum = 0;
    for (int64_t i = 0; i < n / FX_QK; i++) {
        int sumi = 0;
        for (int j = 0; j < FX_QK / 2; j++) {
            sumi += (a[i].qs[j] & 0x0f) * b[i].qs[j];
            sumi += (a[i].qs[j] >> 4) * b[i].qs[j + FX_QK / 2];
        }
        sum += fx_fp16_to_f32(a[i].d) * fx_fp16_to_f32(b[i].d) * (float)sumi +
               fx_fp16_to_f32(a[i].m) * fx_fp16_to_f32(b[i].s);
    }
    *s = sum;
}

void fx_q5_0_vec_dot(int64_t n, float *restrict s, const void *restrict x, const void *restrict y) {
    const struct fx_block_q5_0 *a = x;
    const struct fx_block_q8_0 *b = y;
    float sum = 0;
    for (int64_t i = 0; i < n / FX_QK; i++) {
        uint32_t qh = qh_bits(a[i].qh);
        int sumi = 0;
        for (int j = 0; j < FX_QK / 2; j++) {
            int lo = ((a[i].qs[j] & 0x0f) | (int)((qh >> j) & 1) << 4) - 16;
            int hi = ((a[i].qs[j] >> 4) | (int)((qh >> (j + FX_QK / 2)) & 1) << 4) - 16;
            sumi += lo * b[i].qs[j] + hi * b[i].qs[j + FX_QK / 2];
        }
        sum += (float)sumi * fx_fp16_to_f32(a[i].d) * fx_fp16_to_f32(b[i].d);
    }
    *s = sum;
}

void fx_q5_1_vec_dot(int64_t n, float *restrict s, const void *restrict x, const void *restrict y) {
    const struct fx_block_q5_1 *a = x;
    const struct fx_block_q8_1 *b = y;
    float sum = 0;
    for (int64_t i = 0; i < n / FX_QK; i++) {
        uint32_t qh = qh_bits(a[i].qh);
        int sumi = 0;
        for (int j = 0; j < FX_QK / 2; j++) {
            int lo = (a[i].qs[j] & 0x0f) | (int)((qh >> j) & 1) << 4;
            int hi = (a[i].qs[j] >> 4) | (int)((qh >> (j + FX_QK / 2)) & 1) << 4;
            sumi += lo * b[i].qs[j] + hi * b[i].qs[j + FX_QK / 2];
        }
        sum += fx_fp16_to_f32(a[i].d) * fx_fp16_to_f32(b[i].d) * (float)sumi +
               fx_fp16_to_f32(a[i].m) * fx_fp16_to_f32(b[i].s);
    }
    *s = sum;
}

void fx_q8_0_vec_dot(int64_t n, float *restrict s, const void *restrict x, const void *restrict y) {
    const struct fx_block_q8_0 *a = x;
    const struct fx_block_q8_0 *b = y;
    float sum = 0;
    for (int64_t i = 0; i < n / FX_QK; i++) {
        int sumi = 0;
        for (int j = 0; j < FX_QK; j++)
            sumi += a[i].qs[j] * b[i].qs[j];
        sum += (float)sumi * (fx_fp16_to_f32(a[i].d) * fx_fp16_to_f32(b[i].d));
    }
    *s = sum;
}

void fx_mxfp4_vec_dot(int64_t n, float *restrict s, const void *restrict x,
                      const void *restrict y) {
    const struct fx_block_mxfp4 *a = x;
    const struct fx_block_q8_0 *b = y;
    float sum = 0;
    for (int64_t i = 0; i < n / FX_QK; i++) {
        int sumi = 0;
        for (int j = 0; j < FX_QK / 2; j++) {
            sumi += fx_mxfp4_values[a[i].qs[j] & 0x0f] * b[i].qs[j];
            sumi += fx_mxfp4_values[a[i].qs[j] >> 4] * b[i].qs[j + FX_QK / 2];
        }
        sum += fx_fp16_to_f32(b[i].d) * fx_e8m0_to_f32_half(a[i].e) * (float)sumi;
    }
    *s = sum;
}

void fx_iq4_nl_vec_dot(int64_t n, float *restrict s, const void *restrict x,
                       const void *restrict y) {
    const struct fx_block_iq4_nl *a = x;
    const struct fx_block_q8_0 *b = y;
    float sum = 0;
    for (int64_t i = 0; i < n / FX_QK; i++) {
        int sumi = 0;
        for (int j = 0; j < FX_QK / 2; j++) {
            sumi += fx_iq4nl_values[a[i].qs[j] & 0x0f] * b[i].qs[j];
            sumi += fx_iq4nl_values[a[i].qs[j] >> 4] * b[i].qs[j + FX_QK / 2];
        }
        sum += (float)sumi * fx_fp16_to_f32(a[i].d) * fx_fp16_to_f32(b[i].d);
    }
    *s = sum;
}

/* ---- K formats against Q8_K ---------------------------------------------------------------- */

/* Q2_K: sum over 16 sub-blocks of d * sc * sum(q * qy) - dmin * m * sum(qy); the sums of qy
 * per 16 are the activation's bsums. */
void fx_q2_K_vec_dot(int64_t n, float *restrict s, const void *restrict x, const void *restrict y) {
    const struct fx_block_q2_K *a = x;
    const struct fx_block_q8_K *b = y;
    float sum = 0;
    for (int64_t i = 0; i < n / FX_QK_K; i++) {
        const uint8_t *q = a[i].qs;
        const int8_t *qy = b[i].qs;
        int summ = 0, sumi = 0, is = 0;
        for (int j = 0; j < FX_QK_K / 16; j++)
            summ += (a[i].scales[j] >> 4) * b[i].bsums[j];
        for (int half = 0; half < 2; half++, q += 32) {
            for (int shift = 0; shift < 8; shift += 2) {
                for (int k = 0; k < 2; k++) {
                    int sub = 0;
                    for (int l = 16 * k; l < 16 * k + 16; l++)
                        sub += ((q[l] >> shift) & 3) * *qy++;
                    sumi += (a[i].scales[is++] & 0x0f) * sub;
                }
            }
        }
        float dall = b[i].d * fx_fp16_to_f32(a[i].d);
        float dmin = b[i].d * fx_fp16_to_f32(a[i].dmin);
        sum += dall * (float)sumi - dmin * (float)summ;
    }
    *s = sum;
}

void fx_q3_K_vec_dot(int64_t n, float *restrict s, const void *restrict x, const void *restrict y) {
    const struct fx_block_q3_K *a = x;
    const struct fx_block_q8_K *b = y;
    float sum = 0;
    for (int64_t i = 0; i < n / FX_QK_K; i++) {
        const uint8_t *q = a[i].qs;
        const int8_t *qy = b[i].qs;
        uint8_t m = 1;
        int sumi = 0, is = 0;
        for (int half = 0; half < 2; half++, q += 32) {
            for (int shift = 0; shift < 8; shift += 2, m <<= 1) {
                for (int k = 0; k < 2; k++) {
                    int sub = 0;
                    for (int l = 16 * k; l < 16 * k + 16; l++) {
                        int v = ((q[l] >> shift) & 3) - ((a[i].hmask[l] & m) ? 0 : 4);
                        sub += v * *qy++;
                    }
                    sumi += fx_q3_K_scale(a[i].scales, is++) * sub;
                }
            }
        }
        sum += fx_fp16_to_f32(a[i].d) * b[i].d * (float)sumi;
    }
    *s = sum;
}

/* Q4_K and Q5_K: sum over 8 sub-blocks of d * sc * sum(q * qy) - dmin * m * sum(qy). `high`
 * is the Q5_K fifth-bit array (NULL for Q4_K). */
static float dot_k_affine(uint16_t d16, uint16_t dmin16, const uint8_t scales[12],
                          const uint8_t *qs, const uint8_t *high, const struct fx_block_q8_K *b) {
    const int8_t *qy = b->qs;
    int sumi = 0, summ = 0;
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        fx_k_scale_min(scales, j, &sc, &m);
        summ += m * (b->bsums[2 * j] + b->bsums[2 * j + 1]);
        const uint8_t *q = qs + 32 * (j / 2);
        int shift = 4 * (j % 2), sub = 0;
        for (int l = 0; l < 32; l++) {
            int v = (q[l] >> shift) & 0x0f;
            if (high && (high[l] >> j) & 1)
                v += 16;
            sub += v * *qy++;
        }
        sumi += sc * sub;
    }
    return b->d * fx_fp16_to_f32(d16) * (float)sumi - b->d * fx_fp16_to_f32(dmin16) * (float)summ;
}

void fx_q4_K_vec_dot(int64_t n, float *restrict s, const void *restrict x, const void *restrict y) {
    const struct fx_block_q4_K *a = x;
    const struct fx_block_q8_K *b = y;
    float sum = 0;
    for (int64_t i = 0; i < n / FX_QK_K; i++)
        sum += dot_k_affine(a[i].d, a[i].dmin, a[i].scales, a[i].qs, NULL, &b[i]);
    *s = sum;
}

void fx_q5_K_vec_dot(int64_t n, float *restrict s, const void *restrict x, const void *restrict y) {
    const struct fx_block_q5_K *a = x;
    const struct fx_block_q8_K *b = y;
    float sum = 0;
    for (int64_t i = 0; i < n / FX_QK_K; i++)
        sum += dot_k_affine(a[i].d, a[i].dmin, a[i].scales, a[i].qs, a[i].qh, &b[i]);
    *s = sum;
}

void fx_q6_K_vec_dot(int64_t n, float *restrict s, const void *restrict x, const void *restrict y) {
    const struct fx_block_q6_K *a = x;
    const struct fx_block_q8_K *b = y;
    float sum = 0;
    for (int64_t i = 0; i < n / FX_QK_K; i++) {
        int sumi = 0;
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = a[i].ql + 64 * h, *qh = a[i].qh + 32 * h;
            const int8_t *sc = a[i].scales + 8 * h, *qy = b[i].qs + 128 * h;
            /* The four 32-element quarters of this half, as fx_q6_K_to_float lays them out. */
            for (int quarter = 0; quarter < 4; quarter++) {
                const uint8_t *low = ql + 32 * (quarter % 2);
                int lshift = 4 * (quarter / 2), hshift = 2 * quarter;
                for (int k = 0; k < 2; k++) {
                    int sub = 0;
                    for (int l = 16 * k; l < 16 * k + 16; l++) {
                        int v = (((low[l] >> lshift) & 0x0f) | ((qh[l] >> hshift) & 3) << 4) - 32;
                        sub += v * qy[32 * quarter + l];
                    }
                    sumi += sc[2 * quarter + k] * sub;
                }
            }
        }
        sum += fx_fp16_to_f32(a[i].d) * b[i].d * (float)sumi;
    }
    *s = sum;
}

/* IQ4_XS: sum over 8 sub-blocks of 32 of (scale code - 32) * sum(level * qy), times d * dy. */
void fx_iq4_xs_vec_dot(int64_t n, float *restrict s, const void *restrict x,
                       const void *restrict y) {
    const struct fx_block_iq4_xs *a = x;
    const struct fx_block_q8_K *b = y;
    float sum = 0;
    for (int64_t i = 0; i < n / FX_QK_K; i++) {
        int sumi = 0;
        for (int sb = 0; sb < FX_QK_K / FX_QK; sb++) {
            int sc = ((a[i].scales_l[sb / 2] >> (4 * (sb % 2))) & 0x0f) |
                     ((a[i].scales_h >> (2 * sb)) & 3) << 4;
            const uint8_t *q = a[i].qs + 16 * sb;
            const int8_t *qy = b[i].qs + FX_QK * sb;
            int sub = 0;
            for (int j = 0; j < FX_QK / 2; j++) {
                sub += fx_iq4nl_values[q[j] & 0x0f] * qy[j];
                sub += fx_iq4nl_values[q[j] >> 4] * qy[j + FX_QK / 2];
            }
            sumi += (sc - 32) * sub;
        }
        sum += fx_fp16_to_f32(a[i].d) * b[i].d * (float)sumi;
    }
    *s = sum;
}
