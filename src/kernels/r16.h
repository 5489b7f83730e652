/* R16: the packed weight layout of the quantized formats (FX_PACK_R16) and the matmul driver the
 * SIMD tables share.
 *
 * Why this layout. An int8 dot-product instruction (vpdpbusd: 16 lanes, each adding 4 products
 * of unsigned by signed bytes into an int32) is most useful when each lane belongs to a
 * different weight row: then one activation dword, broadcast to every lane, serves 16 rows at
 * once, and a row's sum never needs a horizontal reduction. R16 stores 16 rows block by block
 * so that one 64-byte load gives, in lane r, 4 consecutive codes of row r. A packed block is
 * the same block of 16 consecutive rows ("a panel"); a packed matrix is its panels one after
 * the other, each panel's blocks in order. Rows past the end of the matrix are zero.
 *
 * Per packed block (lane r = panel row r, g = group of 4 elements 4g..4g+3, little-endian):
 *   Q8_0  (544): d[16] fp16 | codes[8 g][16 r][4] as q + 128 (unsigned)
 *   Q4_0  (288): d[16] | qs[4 i][16 r][4] = the row's qs[4i..4i+3]: low nibbles are elements
 *                4i.., high nibbles 16+4i.. (groups i and i+4)
 *   Q4_1  (320): d[16] | m[16] | qs as Q4_0
 *   Q5_0  (352): d[16] | hbits[16 r][4 e] | qs as Q4_0; bit g of hbits[r][e] is the fifth
 *                bit of element 4g+e of row r (one shift brings group g's bits to bit 4)
 *   Q5_1  (384): d[16] | m[16] | hbits | qs
 *   MXFP4 (272): e[16] | qs as Q4_0
 *   Q2_K (1344): d[16] | dmin[16] | scales[8 t][16 r][2] (the row's scale bytes 2t, 2t+1:
 *                4-bit scale low, 4-bit min high) | qs[2 n][8 g][16 r][4] = qs[32n+4g..]
 *                (the 2-bit fields j = 0..3 are elements 128n + 32j + 4g..)
 *   Q3_K (1824): d[16] | scales[16 s][16 r] int8 (decoded, -32..31) | qs as Q2_K |
 *                hmask[2 n][4 j][8 g] u64 (bit 4r+e: high bit of element 128n+32j+4g+e)
 *   Q4_K (2368): d[16] | dmin[16] | scales[8 s][16 r] u8 | mins[8 s][16 r] u8 |
 *                qs[4 c][8 g][16 r][4] = qs[32c+4g..]: low nibbles are sub-block 2c,
 *                high nibbles 2c+1
 *   Q5_K (2880): as Q4_K with hmask[8 s][8 g] u64 (bit 4r+e: fifth bit of element
 *                32s+4g+e) between mins and qs
 *   Q6_K (3360): d[16] | scales[16 s][16 r] int8 | ql[2 h][2 a][8 g][16 r][4] =
 *                ql[64h+32a+4g..] | qh[2 h][8 g][16 r][4] = qh[32h+4g..]
 *   IQ4_NL (288): d[16] | qs as Q4_0 (4-bit indices into fx_iq4nl_values)
 *   IQ4_XS (2208): d[16] | scales[8 s][16 r] int8 (decoded, -32..31) |
 *                qs[8 s][4 i][16 r][4] = qs[16s+4i..]: low nibbles are elements 32s+4i..,
 *                high nibbles 32s+16+4i.. (each sub-block of 32 as a Q4_0 block)
 *
 * The fixed float sequence (kernels.h's determinism contract). For weight row w and activation
 * row a, with exact integer sums per block (any order, any instructions), the f32 accumulator
 * f starts at +0 and takes, block by block in order, with fma() rounding once:
 *   Q8_0, Q4_0, Q5_0, MXFP4, IQ4_NL:  f = fma(isum, dw * da, f)
 *   Q4_1, Q5_1:               f = fma(isum, dw * da, f); f = fma(mw, sa, f)
 *   Q2_K, Q4_K, Q5_K:         f = fma(sumi, d * da, f);  f = fma(summ, -(dmin * da), f)
 *   Q3_K, Q6_K, IQ4_XS:       f = fma(sumi, d * da, f)
 * where isum = sum of code times activation code over the block (codes signed as the format
 * defines them), sumi = sum over sub-blocks of scale times its isum, summ = sum over
 * sub-blocks of min times the activation's sum, and integer sums convert to f32 rounding to
 * nearest. vec_dot, matvec and matmul of the SIMD tables all follow it, whatever their layout.
 */
#ifndef FX_KERNELS_R16_H
#define FX_KERNELS_R16_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/kernels.h"

#define FX_R16_ROWS 16
/* A tile handles 1, 2, 4 or FX_R16_MAX_ACT activation rows. */
#define FX_R16_MAX_ACT 8
/* Offsets in a Q8_K activation block (the K formats' activations): d (f32), qs[256],
 * bsums[16] (int16 sums of 16). */
enum { FX_Q8K_QS = 4, FX_Q8K_BSUMS = 260, FX_Q8K_BYTES = 292 };

/* Bytes of one packed block of `type` (16 rows), 0 when the type has no R16 layout. */
static inline size_t fx_r16_block_bytes(enum fx_type type) {
    switch (type) {
    case FX_TYPE_Q8_0:
        return 544;
    case FX_TYPE_Q4_0:
        return 288;
    case FX_TYPE_Q4_1:
        return 320;
    case FX_TYPE_Q5_0:
        return 352;
    case FX_TYPE_Q5_1:
        return 384;
    case FX_TYPE_MXFP4:
        return 272;
    case FX_TYPE_Q2_K:
        return 1344;
    case FX_TYPE_Q3_K:
        return 1824;
    case FX_TYPE_Q4_K:
        return 2368;
    case FX_TYPE_Q5_K:
        return 2880;
    case FX_TYPE_Q6_K:
        return 3360;
    case FX_TYPE_IQ4_NL:
        return 288;
    case FX_TYPE_IQ4_XS:
        return 2208;
    default:
        return 0;
    }
}

/* Whether a 32-wide format is affine (Q4_1, Q5_1: a scale and a minimum per block, Q8_1
 * activations) rather than symmetric. */
static inline bool fx_r16_affine(enum fx_type type) {
    return type == FX_TYPE_Q4_1 || type == FX_TYPE_Q5_1;
}

/* The K formats' sub-blocks per super-block of 256: 8 of 32 elements (Q4_K, Q5_K, IQ4_XS) or
 * 16 of 16. */
static inline int fx_r16_k_subs(enum fx_type type) {
    return type == FX_TYPE_Q4_K || type == FX_TYPE_Q5_K || type == FX_TYPE_IQ4_XS ? 8 : 16;
}

/* Whether a K format's second integer sum is of minimums (Q2_K, Q4_K, Q5_K: subtracted after
 * scaling by dmin) rather than of the codes' bias (Q3_K, Q6_K, IQ4_XS: subtracted from the
 * first sum). */
static inline bool fx_r16_k_has_min(enum fx_type type) {
    return type == FX_TYPE_Q2_K || type == FX_TYPE_Q4_K || type == FX_TYPE_Q5_K;
}

/* Packs blocks [b0, b0 + n_blocks) of the n_rows (1..16) rows starting at `rows` (row_bytes
 * apart) into dst (n_blocks packed blocks); rows n_rows..15 are zero. */
void fx_r16_pack(enum fx_type type, const uint8_t *rows, uint64_t row_bytes, int n_rows, int64_t b0,
                 int64_t n_blocks, uint8_t *dst);

/* The unsigned offset of a 32-wide format's codes in R16 (the dot product runs on code + bias,
 * and the driver supplies -bias * sum(activation codes) per block): 128 for Q8_0 and IQ4_NL
 * (its levels), 8 for Q4_0, 16 for Q5_0, 12 for MXFP4 (its doubled E2M1 values), 0 otherwise. */
int32_t fx_r16_bias(enum fx_type type);

/* What a tile needs of one Q8_0 or Q8_1 activation block besides its codes. */
struct fx_r16_meta {
    float d;   /* the block's scale */
    float s;   /* Q8_1: its fp16 s as f32; unused for Q8_0 */
    int32_t c; /* -bias * sum of its codes */
};

/* One call of a tile kernel: a 16-row panel (two for a wide tile), n_act activation rows, a run
 * of blocks. */
struct fx_r16_tile {
    const uint8_t *w;    /* the run's packed blocks: [n_blocks][fx_r16_block_bytes] */
    uint64_t w_stride;   /* wide tiles: bytes from the first panel's run to the second's */
    int64_t n_blocks;    /* */
    const uint8_t *act;  /* activation row 0 at the run's first block */
    uint64_t act_stride; /* bytes between activation rows */
    const struct fx_r16_meta *meta; /* [n_act][meta_stride], Q8_0 and Q8_1 activations */
    int64_t meta_stride;            /* */
    float *out;                     /* output of activation row 0 at the panel's first weight row */
    int64_t out_stride;             /* floats between activation rows' outputs */
    int n_act;                      /* 1, 2, 4 or 8; the kernel's wide_act for wide tiles */
    int n_rows; /* valid rows, 1..16 (17..32 for wide tiles); only they are written */
    bool first; /* the run starts the row: accumulators start at 0, else in out */
    /* Wide tiles: a slice of the weights the driver reads next, brought into cache while this
     * tile computes from L1: prefetch_step bytes per block from `prefetch` and from prefetch +
     * w_stride. NULL: nothing (other tiles ignore it). */
    const uint8_t *prefetch;
    uint64_t prefetch_step;
};

typedef void (*fx_r16_tile_fn)(const struct fx_r16_tile *t);
/* Fills meta[0..n_blocks) for n_blocks activation blocks starting at act. */
typedef void (*fx_r16_meta_fn)(const uint8_t *act, int64_t n_blocks, int32_t bias,
                               struct fx_r16_meta *meta);

/* The metadata of the affine formats' activations (Q8_1 blocks), the same for every SIMD table:
 * d and s; no code sums, their bias being 0. */
void fx_r16_meta_q8_1(const uint8_t *act, int64_t n_blocks, int32_t bias, struct fx_r16_meta *meta);

/* What a SIMD table provides for one R16 format. */
struct fx_r16_kernel {
    enum fx_type type;
    fx_r16_tile_fn tile;
    fx_r16_meta_fn meta; /* NULL for the K formats (Q8_K blocks carry what they need) */
    /* A wide tile: two consecutive panels (32 weight rows) against wide_act activation rows.
     * Each activation dword, broadcast once, serves two vpdpbusd: the loads per product halve,
     * which is what bounds the one-panel tiles of 8 rows (two vector loads per cycle). NULL:
     * the driver runs two panels as two tiles. */
    fx_r16_tile_fn wide;
    int wide_act;
};

/* An fx_matmul_fn body for R16 kernels: reads w->packed when it is R16, and otherwise packs the
 * rows it needs, a piece at a time, on the stack; the activations' metadata from meta ([n_act]
 * rows of ne0 / 32 entries) when given, else computed a run at a time. */
void fx_r16_matmul(const struct fx_r16_kernel *k, const struct fx_mat *w, int64_t r0, int64_t r1,
                   const void *act, uint64_t act_stride, int64_t n_act, float *out,
                   int64_t out_stride, const struct fx_r16_meta *meta,
                   const struct fx_mat_piece *then);

/* An fx_act_meta_fn body: k->meta over the row's blocks, with the format's code offset. */
void fx_r16_act_meta(const struct fx_r16_kernel *k, const void *act, int64_t n, void *meta);

/* An fx_vec_dot_fn body: the matmul of one weight row and one activation row. */
void fx_r16_vec_dot(const struct fx_r16_kernel *k, int64_t n, float *s, const void *x,
                    const void *y);

/* The fx_kernels entry points of a SIMD table's R16 kernels, `table` being its struct
 * fx_r16_kernel array indexed by format: matmul_r16, and vec_dot_<format> for each R16 format
 * (vec_dot has no format argument, so one function per format). FX_R16_OPS(format) fills a
 * table's entry with them. */
#define FX_R16_VEC_DOT(table, name, TYPE)                                                          \
    static void vec_dot_##name(int64_t n, float *restrict s, const void *restrict x,               \
                               const void *restrict y) {                                           \
        fx_r16_vec_dot(&table[FX_TYPE_##TYPE], n, s, x, y);                                        \
    }
#define FX_R16_ACT_META(table, name, TYPE)                                                         \
    static void act_meta_##name(const void *act, int64_t n, void *meta) {                          \
        fx_r16_act_meta(&table[FX_TYPE_##TYPE], act, n, meta);                                     \
    }                                                                                              \
    FX_R16_VEC_DOT(table, name, TYPE)
#define FX_R16_ENTRY_POINTS(table)                                                                 \
    static void matmul_r16(const struct fx_mat *w, int64_t r0, int64_t r1, const void *act,        \
                           uint64_t act_stride, int64_t n_act, float *out, int64_t out_stride,     \
                           const void *meta, const struct fx_mat_piece *then) {                    \
        fx_r16_matmul(&table[w->type], w, r0, r1, act, act_stride, n_act, out, out_stride, meta,   \
                      then);                                                                       \
    }                                                                                              \
    FX_R16_ACT_META(table, q8_0, Q8_0)                                                             \
    FX_R16_ACT_META(table, q4_0, Q4_0)                                                             \
    FX_R16_ACT_META(table, q4_1, Q4_1)                                                             \
    FX_R16_ACT_META(table, q5_0, Q5_0)                                                             \
    FX_R16_ACT_META(table, q5_1, Q5_1)                                                             \
    FX_R16_ACT_META(table, mxfp4, MXFP4)                                                           \
    FX_R16_ACT_META(table, iq4_nl, IQ4_NL)                                                         \
    FX_R16_VEC_DOT(table, q2_K, Q2_K)                                                              \
    FX_R16_VEC_DOT(table, q3_K, Q3_K)                                                              \
    FX_R16_VEC_DOT(table, q4_K, Q4_K)                                                              \
    FX_R16_VEC_DOT(table, q5_K, Q5_K)                                                              \
    FX_R16_VEC_DOT(table, q6_K, Q6_K)                                                              \
    FX_R16_VEC_DOT(table, iq4_xs, IQ4_XS)
/* The 32-wide formats, whose activations carry metadata, and the K formats, whose Q8_K blocks
 * hold what they need. */
#define FX_R16_OPS(name)                                                                           \
    {                                                                                              \
        .vec_dot = vec_dot_##name, .matmul = matmul_r16, .act_meta = act_meta_##name,              \
        .pack_kind = FX_PACK_R16                                                                   \
    }
#define FX_R16_K_OPS(name)                                                                         \
    { .vec_dot = vec_dot_##name, .matmul = matmul_r16, .pack_kind = FX_PACK_R16 }
/* Q8_0's entry, which also holds the table's Q8_0 activation quantizer. */
#define FX_R16_Q8_0_OPS(quantize)                                                                  \
    {                                                                                              \
        .quantize_act = quantize, .vec_dot = vec_dot_q8_0, .matmul = matmul_r16,                   \
        .act_meta = act_meta_q8_0, .pack_kind = FX_PACK_R16                                        \
    }
/* A SIMD table's fx_kernels entries of the R16 formats but Q8_0 (FX_R16_Q8_0_OPS). */
#define FX_R16_TYPES_BUT_Q8_0                                                                      \
    [FX_TYPE_Q4_0] = FX_R16_OPS(q4_0), [FX_TYPE_Q4_1] = FX_R16_OPS(q4_1),                          \
    [FX_TYPE_Q5_0] = FX_R16_OPS(q5_0), [FX_TYPE_Q5_1] = FX_R16_OPS(q5_1),                          \
    [FX_TYPE_MXFP4] = FX_R16_OPS(mxfp4), [FX_TYPE_Q2_K] = FX_R16_K_OPS(q2_K),                      \
    [FX_TYPE_Q3_K] = FX_R16_K_OPS(q3_K), [FX_TYPE_Q4_K] = FX_R16_K_OPS(q4_K),                      \
    [FX_TYPE_Q5_K] = FX_R16_K_OPS(q5_K), [FX_TYPE_Q6_K] = FX_R16_K_OPS(q6_K),                      \
    [FX_TYPE_IQ4_NL] = FX_R16_OPS(iq4_nl), [FX_TYPE_IQ4_XS] = FX_R16_K_OPS(iq4_xs)

#endif
