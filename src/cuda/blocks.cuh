/* Element decoders of every weight format with device kernels, written once and used by the
 * dequantize kernel and the matmul kernel alike (matmul.cu), and compiled for the host as well
 * (fx_cuda_dequantize_host) so that a machine without a GPU can check them.
 *
 * fx_dq<T>(row, i) is element i of a row of type T starting at `row` (a row is whole blocks, one
 * after another, so a run of rows counts as one long row). It computes exactly what the generic
 * table's to_float computes (kernels/generic_quant*.c), operation for operation: on the device
 * the __f*_rn intrinsics keep nvcc from fusing a multiply and an add into one FMA, which the C
 * build never does (-std=c11 keeps contraction off), so the two agree bit for bit.
 *
 * Block structs are kernels/types.h's: sizes of 17 to 292 bytes with 1-, 2- or 4-byte alignment,
 * so fields are read through the struct at their natural alignment, never as wider words. */
#ifndef FX_CUDA_BLOCKS_CUH
#define FX_CUDA_BLOCKS_CUH

#include <cuda_fp16.h>
#include <stdint.h>
#include <string.h>

#include "kernels/types.h"

#define FX_HD __host__ __device__

/* f32 multiply, add and subtract, each rounded on its own (never fused into an FMA). The host
 * side is plain C++ arithmetic: x86-64 without -mfma has no fused instruction to contract to. */
static FX_HD inline float fx_mul(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}

static FX_HD inline float fx_add(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}

static FX_HD inline float fx_sub(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fsub_rn(a, b);
#else
    return a - b;
#endif
}

static FX_HD inline float fx_bits_f32(uint32_t u) {
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
#endif
}

static FX_HD inline float fx_dev_fp16(uint16_t h) {
    return __half2float(__ushort_as_half(h));
}

static FX_HD inline float fx_dev_bf16(uint16_t h) {
    return fx_bits_f32((uint32_t)h << 16);
}

/* MXFP4's E2M1 code c doubled, as generic_quant.c's fx_mxfp4_values: 0, 1, 2, 3 for the
 * magnitudes below 4, then 4, 6, 8, 12 (2 or 3 times 2 or 4); bit 3 is the sign. */
static FX_HD inline int fx_dev_mxfp4_value(int c) {
    int m = c & 7;
    int v = m < 4 ? m : (2 + (m & 1)) << ((m >> 1) - 1);
    return c & 8 ? -v : v;
}

/* MXFP4's scale 2^(e-128) (half.h's fx_e8m0_to_f32_half). */
static FX_HD inline float fx_dev_e8m0_half(uint8_t e) {
    return e < 2 ? fx_bits_f32(0x00200000u << e) : fx_bits_f32((uint32_t)(e - 1) << 23);
}

/* The 4-bit code of element j (0..31) of a 32-wide block: j in the low nibble of qs[j], j + 16
 * in the high nibble of qs[j - 16]. */
static FX_HD inline int fx_dev_nibble32(const uint8_t *qs, int j) {
    return j < 16 ? qs[j] & 0x0f : qs[j - 16] >> 4;
}

/* The fifth bit of element j of a Q5 block: bit j of the little-endian word qh. */
static FX_HD inline int fx_dev_qh_bit(const uint8_t *qh, int j) {
    return (qh[j >> 3] >> (j & 7)) & 1;
}

/* kernels/generic.h's fx_k_scale_min: 6-bit scale and min j (0..7) of Q4_K / Q5_K. */
static FX_HD inline void fx_dev_k_scale_min(const uint8_t *q, int j, int *sc, int *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* kernels/generic.h's fx_q3_K_scale: 6-bit scale j (0..15) of Q3_K, less its bias of 32. */
static FX_HD inline int fx_dev_q3_K_scale(const uint8_t *q, int j) {
    int lo = j < 8 ? q[j] & 0x0f : q[j - 8] >> 4;
    int hi = (q[8 + j % 4] >> (2 * (j / 4))) & 3;
    return (lo | (hi << 4)) - 32;
}

/* The K formats Q2_K and Q3_K walk a super-block as 2 halves of 128 elements, each 4 shifts of
 * 32 (2 bits of the same 32 bytes), each 2 sub-blocks of 16: element e (0..255) is half h,
 * shift s, sub-block is = 8h + 2s + k, and byte 32h + l of qs with l in 0..31. */
struct fx_dev_k2 {
    int h, s, is, l;
};

static FX_HD inline struct fx_dev_k2 fx_dev_k2_at(int e) {
    struct fx_dev_k2 p;
    int r = e & 127;
    p.h = e >> 7;
    p.s = r >> 5;
    p.l = r & 31;
    p.is = 8 * p.h + 2 * p.s + (p.l >> 4);
    return p;
}

template <int T> FX_HD float fx_dq(const uint8_t *row, int64_t i);

template <> FX_HD inline float fx_dq<FX_TYPE_F32>(const uint8_t *row, int64_t i) {
    return ((const float *)row)[i];
}

template <> FX_HD inline float fx_dq<FX_TYPE_F16>(const uint8_t *row, int64_t i) {
    return fx_dev_fp16(((const uint16_t *)row)[i]);
}

template <> FX_HD inline float fx_dq<FX_TYPE_BF16>(const uint8_t *row, int64_t i) {
    return fx_dev_bf16(((const uint16_t *)row)[i]);
}

/* Q4_0: d * (q - 8) */
template <> FX_HD inline float fx_dq<FX_TYPE_Q4_0>(const uint8_t *row, int64_t i) {
    const struct fx_block_q4_0 *b = (const struct fx_block_q4_0 *)row + i / FX_QK;
    int q = fx_dev_nibble32(b->qs, (int)(i % FX_QK));
    return fx_mul((float)(q - 8), fx_dev_fp16(b->d));
}

/* Q4_1: d * q + m */
template <> FX_HD inline float fx_dq<FX_TYPE_Q4_1>(const uint8_t *row, int64_t i) {
    const struct fx_block_q4_1 *b = (const struct fx_block_q4_1 *)row + i / FX_QK;
    int q = fx_dev_nibble32(b->qs, (int)(i % FX_QK));
    return fx_add(fx_mul((float)q, fx_dev_fp16(b->d)), fx_dev_fp16(b->m));
}

/* Q5_0: d * (q - 16), q's fifth bit in qh */
template <> FX_HD inline float fx_dq<FX_TYPE_Q5_0>(const uint8_t *row, int64_t i) {
    const struct fx_block_q5_0 *b = (const struct fx_block_q5_0 *)row + i / FX_QK;
    int j = (int)(i % FX_QK);
    int q = fx_dev_nibble32(b->qs, j) | fx_dev_qh_bit(b->qh, j) << 4;
    return fx_mul((float)(q - 16), fx_dev_fp16(b->d));
}

/* Q5_1: d * q + m */
template <> FX_HD inline float fx_dq<FX_TYPE_Q5_1>(const uint8_t *row, int64_t i) {
    const struct fx_block_q5_1 *b = (const struct fx_block_q5_1 *)row + i / FX_QK;
    int j = (int)(i % FX_QK);
    int q = fx_dev_nibble32(b->qs, j) | fx_dev_qh_bit(b->qh, j) << 4;
    return fx_add(fx_mul((float)q, fx_dev_fp16(b->d)), fx_dev_fp16(b->m));
}

/* Q8_0: d * q */
template <> FX_HD inline float fx_dq<FX_TYPE_Q8_0>(const uint8_t *row, int64_t i) {
    const struct fx_block_q8_0 *b = (const struct fx_block_q8_0 *)row + i / FX_QK;
    return fx_mul((float)b->qs[i % FX_QK], fx_dev_fp16(b->d));
}

/* MXFP4: doubled E2M1 code point * 2^(e-128) */
template <> FX_HD inline float fx_dq<FX_TYPE_MXFP4>(const uint8_t *row, int64_t i) {
    const struct fx_block_mxfp4 *b = (const struct fx_block_mxfp4 *)row + i / FX_QK;
    int q = fx_dev_nibble32(b->qs, (int)(i % FX_QK));
    return fx_mul((float)fx_dev_mxfp4_value(q), fx_dev_e8m0_half(b->e));
}

/* Q2_K: d * sc * q - dmin * m, 4-bit sc (low) and m (high) per 16 elements, q in 0..3 */
template <> FX_HD inline float fx_dq<FX_TYPE_Q2_K>(const uint8_t *row, int64_t i) {
    const struct fx_block_q2_K *b = (const struct fx_block_q2_K *)row + i / FX_QK_K;
    struct fx_dev_k2 p = fx_dev_k2_at((int)(i % FX_QK_K));
    int sc = b->scales[p.is];
    float dl = fx_mul(fx_dev_fp16(b->d), (float)(sc & 0x0f));
    float ml = fx_mul(fx_dev_fp16(b->dmin), (float)(sc >> 4));
    int q = (b->qs[32 * p.h + p.l] >> (2 * p.s)) & 3;
    return fx_sub(fx_mul(dl, (float)q), ml);
}

/* Q3_K: d * (sc - 32) * q, q = 2 low bits - 4 unless the hmask bit is set */
template <> FX_HD inline float fx_dq<FX_TYPE_Q3_K>(const uint8_t *row, int64_t i) {
    const struct fx_block_q3_K *b = (const struct fx_block_q3_K *)row + i / FX_QK_K;
    struct fx_dev_k2 p = fx_dev_k2_at((int)(i % FX_QK_K));
    float dl = fx_mul(fx_dev_fp16(b->d), (float)fx_dev_q3_K_scale(b->scales, p.is));
    int m = 1 << (4 * p.h + p.s);
    int q = ((b->qs[32 * p.h + p.l] >> (2 * p.s)) & 3) - ((b->hmask[p.l] & m) ? 0 : 4);
    return fx_mul(dl, (float)q);
}

/* Q4_K: 8 sub-blocks of 32, d * sc * q - dmin * m; bytes 32p..32p+31 hold sub-block 2p in their
 * low nibbles and 2p + 1 in their high nibbles. */
template <> FX_HD inline float fx_dq<FX_TYPE_Q4_K>(const uint8_t *row, int64_t i) {
    const struct fx_block_q4_K *b = (const struct fx_block_q4_K *)row + i / FX_QK_K;
    int e = (int)(i % FX_QK_K), sub = e >> 5, l = e & 31;
    int sc, m;
    fx_dev_k_scale_min(b->scales, sub, &sc, &m);
    float d = fx_mul(fx_dev_fp16(b->d), (float)sc);
    float mn = fx_mul(fx_dev_fp16(b->dmin), (float)m);
    uint8_t byte = b->qs[32 * (sub >> 1) + l];
    int q = (sub & 1) ? byte >> 4 : byte & 0x0f;
    return fx_sub(fx_mul(d, (float)q), mn);
}

/* Q5_K: Q4_K plus a fifth bit, bit `sub` of qh[l] */
template <> FX_HD inline float fx_dq<FX_TYPE_Q5_K>(const uint8_t *row, int64_t i) {
    const struct fx_block_q5_K *b = (const struct fx_block_q5_K *)row + i / FX_QK_K;
    int e = (int)(i % FX_QK_K), sub = e >> 5, l = e & 31;
    int sc, m;
    fx_dev_k_scale_min(b->scales, sub, &sc, &m);
    float d = fx_mul(fx_dev_fp16(b->d), (float)sc);
    float mn = fx_mul(fx_dev_fp16(b->dmin), (float)m);
    uint8_t byte = b->qs[32 * (sub >> 1) + l];
    int q = ((sub & 1) ? byte >> 4 : byte & 0x0f) + ((b->qh[l] >> sub) & 1 ? 16 : 0);
    return fx_sub(fx_mul(d, (float)q), mn);
}

/* Q6_K: d * sc * (q - 32), 16 8-bit scales. Each half of 128: ql[64] holds the low nibbles of
 * l (low) / l + 64 (high) and l + 32 / l + 96; qh[32] the top two bits of l, l + 32, l + 64,
 * l + 96 at shifts 0, 2, 4, 6. */
template <> FX_HD inline float fx_dq<FX_TYPE_Q6_K>(const uint8_t *row, int64_t i) {
    const struct fx_block_q6_K *b = (const struct fx_block_q6_K *)row + i / FX_QK_K;
    int e = (int)(i % FX_QK_K), h = e >> 7, r = e & 127, quarter = r >> 5, l = r & 31;
    const uint8_t *ql = b->ql + 64 * h, *qh = b->qh + 32 * h;
    uint8_t lo_byte = ql[l + 32 * (quarter & 1)];
    int lo = (quarter & 2) ? lo_byte >> 4 : lo_byte & 0x0f;
    int q = (lo | ((qh[l] >> (2 * quarter)) & 3) << 4) - 32;
    int sc = b->scales[8 * h + l / 16 + 2 * quarter];
    return fx_mul(fx_mul(fx_dev_fp16(b->d), (float)sc), (float)q);
}

#endif
