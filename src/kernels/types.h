/* Block layouts of the tensor formats the kernels compute with, byte for byte as GGUF stores
 * them (ggml's block_* structs). Half-precision scales are kept as raw uint16_t bits and
 * converted with the helpers below, so these structs have no padding and only 2- or 4-byte
 * alignment; every size is checked against core/dtype.c's table at compile time.
 *
 * Quantized weight formats and the activation format their dot product pairs them with:
 *   Q4_0, Q5_0, Q8_0, MXFP4, IQ4_NL -> Q8_0     Q4_1, Q5_1 -> Q8_1
 *   Q2_K .. Q6_K, IQ4_XS -> Q8_K                F32, F16, BF16 -> F32 */
#ifndef FX_KERNELS_TYPES_H
#define FX_KERNELS_TYPES_H

#include <stdint.h>
#include <string.h>

#include "ferrox.h"

#define FX_QK           32  /* elements per block of the 32-wide formats */
#define FX_QK_K         256 /* elements per super-block of the K formats */
#define FX_K_SCALE_SIZE 12

struct fx_block_q4_0 {
    uint16_t d;            /* fp16 scale */
    uint8_t qs[FX_QK / 2]; /* nibbles: element i in the low nibble of qs[i], i+16 in the high */
};

struct fx_block_q4_1 {
    uint16_t d, m; /* fp16 scale and minimum */
    uint8_t qs[FX_QK / 2];
};

struct fx_block_q5_0 {
    uint16_t d;
    uint8_t qh[4]; /* the fifth bit of each of the 32 elements */
    uint8_t qs[FX_QK / 2];
};

struct fx_block_q5_1 {
    uint16_t d, m;
    uint8_t qh[4];
    uint8_t qs[FX_QK / 2];
};

struct fx_block_q8_0 {
    uint16_t d;
    int8_t qs[FX_QK];
};

struct fx_block_q8_1 {
    uint16_t d; /* fp16 scale */
    uint16_t s; /* fp16 of d * sum(qs) */
    int8_t qs[FX_QK];
};

struct fx_block_q2_K {
    uint8_t scales[FX_QK_K / 16]; /* 4-bit scale (low) and 4-bit min (high) per 16 elements */
    uint8_t qs[FX_QK_K / 4];      /* 2-bit quants */
    uint16_t d, dmin;             /* fp16 super-block scale for scales and for mins */
};

struct fx_block_q3_K {
    uint8_t hmask[FX_QK_K / 8]; /* high bit of each quant */
    uint8_t qs[FX_QK_K / 4];    /* low 2 bits */
    uint8_t scales[12];         /* 16 6-bit scales */
    uint16_t d;
};

struct fx_block_q4_K {
    uint16_t d, dmin;
    uint8_t scales[FX_K_SCALE_SIZE]; /* 8 6-bit scales and 8 6-bit mins */
    uint8_t qs[FX_QK_K / 2];
};

struct fx_block_q5_K {
    uint16_t d, dmin;
    uint8_t scales[FX_K_SCALE_SIZE];
    uint8_t qh[FX_QK_K / 8];
    uint8_t qs[FX_QK_K / 2];
};

struct fx_block_q6_K {
    uint8_t ql[FX_QK_K / 2];     /* low 4 bits */
    uint8_t qh[FX_QK_K / 4];     /* high 2 bits */
    int8_t scales[FX_QK_K / 16]; /* 8-bit scales per 16 elements */
    uint16_t d;
};

struct fx_block_q8_K {
    float d; /* f32 scale (not fp16) */
    int8_t qs[FX_QK_K];
    int16_t bsums[FX_QK_K / 16]; /* sums of each group of 16 quants */
};

struct fx_block_mxfp4 {
    uint8_t e;             /* shared E8M0 exponent */
    uint8_t qs[FX_QK / 2]; /* E2M1 nibbles, same order as Q4_0 */
};

/* The non-linear 4-bit formats: each 4-bit code indexes a table of 16 int8 levels
 * (fx_iq4nl_values, spaced more finely near 0 than a uniform grid), times a scale. */
struct fx_block_iq4_nl {
    uint16_t d;            /* fp16 scale */
    uint8_t qs[FX_QK / 2]; /* codes, same order as Q4_0 */
};

struct fx_block_iq4_xs {
    uint16_t d;                     /* fp16 super-block scale */
    uint16_t scales_h;              /* high 2 bits of the 8 6-bit sub-block scales, 2 per scale */
    uint8_t scales_l[FX_QK_K / 64]; /* low 4 bits of the scales: sub-block 2i low, 2i+1 high */
    uint8_t qs[FX_QK_K / 2];        /* per sub-block of 32, 16 bytes ordered as Q4_0's */
};

/* The sizes GGUF (and core/dtype.c) give each block; a test checks the two tables agree. The
 * CUDA backend's device code (C++, src/cuda/) reads these structs too, hence the spelling. */
#ifdef __cplusplus
#define FX_STATIC_ASSERT static_assert
#else
#define FX_STATIC_ASSERT _Static_assert
#endif
FX_STATIC_ASSERT(sizeof(struct fx_block_q4_0) == 18, "q4_0 block size");
FX_STATIC_ASSERT(sizeof(struct fx_block_q4_1) == 20, "q4_1 block size");
FX_STATIC_ASSERT(sizeof(struct fx_block_q5_0) == 22, "q5_0 block size");
FX_STATIC_ASSERT(sizeof(struct fx_block_q5_1) == 24, "q5_1 block size");
FX_STATIC_ASSERT(sizeof(struct fx_block_q8_0) == 34, "q8_0 block size");
FX_STATIC_ASSERT(sizeof(struct fx_block_q8_1) == 36, "q8_1 block size");
FX_STATIC_ASSERT(sizeof(struct fx_block_q2_K) == 84, "q2_K block size");
FX_STATIC_ASSERT(sizeof(struct fx_block_q3_K) == 110, "q3_K block size");
FX_STATIC_ASSERT(sizeof(struct fx_block_q4_K) == 144, "q4_K block size");
FX_STATIC_ASSERT(sizeof(struct fx_block_q5_K) == 176, "q5_K block size");
FX_STATIC_ASSERT(sizeof(struct fx_block_q6_K) == 210, "q6_K block size");
FX_STATIC_ASSERT(sizeof(struct fx_block_q8_K) == 292, "q8_K block size");
FX_STATIC_ASSERT(sizeof(struct fx_block_mxfp4) == 17, "mxfp4 block size");
FX_STATIC_ASSERT(sizeof(struct fx_block_iq4_nl) == 18, "iq4_nl block size");
FX_STATIC_ASSERT(sizeof(struct fx_block_iq4_xs) == 136, "iq4_xs block size");

#endif
