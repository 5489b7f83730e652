/* Scalar conversions between f32 and the 16-bit and 8-bit float formats GGUF stores.
 *
 * Every conversion here is exact where the value is representable and otherwise rounds to
 * nearest, ties to even, like the F16C instructions and ggml's reference converters, so a row
 * encoded here has the same bytes as one llama.cpp wrote. They are plain C on purpose: the
 * per-ISA files use the hardware instructions, and the tests check them against these. */
#ifndef FX_KERNELS_HALF_H
#define FX_KERNELS_HALF_H

#include <stdint.h>
#include <string.h>

static inline uint32_t fx_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float fx_f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* IEEE binary16: 1 sign bit, 5 exponent bits (bias 15), 10 mantissa bits. */
static inline float fx_fp16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0x1f) /* infinity or NaN; the payload moves up with the mantissa */
        return fx_f32_from_bits(sign | 0x7f800000u | (man << 13));
    if (exp != 0) /* normal: rebias 15 -> 127 */
        return fx_f32_from_bits(sign | ((exp + 112) << 23) | (man << 13));
    /* zero or subnormal: man * 2^-24, exact in f32 */
    return fx_f32_from_bits(sign | fx_f32_bits((float)man * 0x1p-24f));
}

static inline uint16_t fx_f32_to_fp16(float f) {
    uint32_t x = fx_f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) /* NaN: a quiet NaN of the same sign */
        return sign | 0x7e00u;
    if (ax >= 0x477ff000u) /* at or past 65520, the midpoint above 65504: infinity */
        return sign | 0x7c00u;
    if (ax >= 0x38800000u) { /* 2^-14 and up: a normal half */
        /* Rebias the exponent (127 -> 15) in place, then drop 13 mantissa bits rounding to
         * nearest even; a carry out of the mantissa correctly bumps the exponent. */
        uint32_t r = ax - 0x38000000u;
        r += 0x0fffu + ((r >> 13) & 1u);
        return sign | (uint16_t)(r >> 13);
    }
    if (ax < 0x33000000u) /* below 2^-25, half the smallest subnormal: rounds to zero */
        return sign;
    /* A subnormal half: round the 24-bit significand, scaled to units of 2^-24. A result of
     * 0x400 is the smallest normal half, which is also its correct encoding. */
    uint32_t e = ax >> 23; /* 102 .. 112 */
    uint32_t sig = (ax & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - e; /* 14 .. 24 */
    uint32_t q = sig >> shift;
    uint32_t rem = sig & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u)))
        q++;
    return sign | (uint16_t)q;
}

/* bfloat16: the top half of an f32. */
static inline float fx_bf16_to_f32(uint16_t h) {
    return fx_f32_from_bits((uint32_t)h << 16);
}

static inline uint16_t fx_f32_to_bf16(float f) {
    uint32_t x = fx_f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) /* NaN: keep sign and top payload bits, force quiet */
        return (uint16_t)((x >> 16) | 0x40u);
    /* Round to nearest even on the 16 dropped bits; overflow carries into infinity. */
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

/* MXFP4's shared E8M0 exponent e stands for 2^(e-127). The E2M1 code values are kept doubled
 * (as small integers, see generic_quant.c), so the block scale used is half of that: 2^(e-128).
 * e = 0 and 1 give the subnormal f32 values 2^-128 and 2^-127. */
static inline float fx_e8m0_to_f32_half(uint8_t e) {
    return e < 2 ? fx_f32_from_bits(0x00200000u << e) : fx_f32_from_bits((uint32_t)(e - 1) << 23);
}

#endif
