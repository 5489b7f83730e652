/* The R16 packed layout (see r16.h for the byte layout of every format): the packers, written
 * in plain C as the readable definition of the layout, the packing API of kernels.h, and the
 * matmul driver that walks a worker's share in panels, runs of blocks and tiles of activation
 * rows, calling the tile kernels of a SIMD table. */
#include "kernels/r16.h"

#include <string.h>

#include "core/checked.h"
#include "core/error.h"
#include "core/par.h"
#include "kernels/generic.h"
#include "kernels/half.h"

/* ---- packers ------------------------------------------------------------------------------- */

/* The packers run once per weight at load, and on the fly (a run at a time) for weights that
 * were not packed, so they are specialised per format (the type is a constant in each copy of
 * the always-inline bodies) and move the 4-byte groups as words. */
#define PACK_INLINE static inline __attribute__((always_inline))

PACK_INLINE void put_u16(uint8_t *dst, const uint8_t *src) {
    memcpy(dst, src, 2);
}

/* The 4 bytes at src go to lane r of a 64-byte group line, XORed with x. */
PACK_INLINE void put_lane(uint8_t *line, int r, const uint8_t *src, uint32_t x) {
    uint32_t v;
    memcpy(&v, src, 4);
    v ^= x;
    memcpy(line + 4 * r, &v, 4);
}

/* Bit `bit` of each of the 4 bytes at `bytes`, placed at bits 4r..4r+3 of a mask. */
PACK_INLINE uint64_t lane_bits(const uint8_t *bytes, int bit, int r) {
    uint64_t m = 0;
    for (int e = 0; e < 4; e++)
        m |= (uint64_t)((bytes[e] >> bit) & 1) << (4 * r + e);
    return m;
}

PACK_INLINE void or_u64(uint8_t *dst, uint64_t v) {
    uint64_t x;
    memcpy(&x, dst, 8);
    x |= v;
    memcpy(dst, &x, 8);
}

/* One row r of a 32-wide block (src) into packed block dst. */
PACK_INLINE void pack_row_32(enum fx_type type, const uint8_t *src, int r, uint8_t *dst) {
    switch (type) {
    case FX_TYPE_Q8_0:
        put_u16(dst + 2 * r, src);
        for (int g = 0; g < 8; g++) /* codes + 128 */
            put_lane(dst + 32 + 64 * g, r, src + 2 + 4 * g, 0x80808080u);
        return;
    case FX_TYPE_Q4_0:
        put_u16(dst + 2 * r, src);
        for (int i = 0; i < 4; i++)
            put_lane(dst + 32 + 64 * i, r, src + 2 + 4 * i, 0);
        return;
    case FX_TYPE_Q4_1:
        put_u16(dst + 2 * r, src);
        put_u16(dst + 32 + 2 * r, src + 2);
        for (int i = 0; i < 4; i++)
            put_lane(dst + 64 + 64 * i, r, src + 4 + 4 * i, 0);
        return;
    case FX_TYPE_Q5_0:
    case FX_TYPE_Q5_1: {
        bool affine = type == FX_TYPE_Q5_1;
        const uint8_t *qh = src + (affine ? 4 : 2), *qs = qh + 4;
        uint8_t *mask = dst + (affine ? 64 : 32), *q = mask + 64;
        put_u16(dst + 2 * r, src);
        if (affine)
            put_u16(dst + 32 + 2 * r, src + 2);
        uint32_t bits;
        memcpy(&bits, qh, 4); /* bit j: the fifth bit of element j */
        for (int e = 0; e < 4; e++) {
            uint8_t plane = 0; /* bit g: element 4g + e */
            for (int g = 0; g < 8; g++)
                plane |= (uint8_t)(((bits >> (4 * g + e)) & 1) << g);
            mask[4 * r + e] = plane;
        }
        for (int i = 0; i < 4; i++)
            put_lane(q + 64 * i, r, qs + 4 * i, 0);
        return;
    }
    case FX_TYPE_MXFP4:
        dst[r] = src[0];
        for (int i = 0; i < 4; i++)
            put_lane(dst + 16 + 64 * i, r, src + 1 + 4 * i, 0);
        return;
    case FX_TYPE_IQ4_NL: /* as Q4_0: the tiles map the indices to levels */
        put_u16(dst + 2 * r, src);
        for (int i = 0; i < 4; i++)
            put_lane(dst + 32 + 64 * i, r, src + 2 + 4 * i, 0);
        return;
    default:
        FX_ASSERT(!"not a 32-wide R16 format");
    }
}

/* The 2-bit formats' low bits: qs[2 n][8 g][16 r][4]. */
PACK_INLINE void pack_2bit(const uint8_t *qs, int r, uint8_t *dst) {
    for (int n = 0; n < 2; n++)
        for (int g = 0; g < 8; g++)
            put_lane(dst + 64 * (8 * n + g), r, qs + 32 * n + 4 * g, 0);
}

/* The 4-bit nibbles of Q4_K / Q5_K: qs[4 c][8 g][16 r][4]. */
PACK_INLINE void pack_nibbles_k(const uint8_t *qs, int r, uint8_t *dst) {
    for (int c = 0; c < 4; c++)
        for (int g = 0; g < 8; g++)
            put_lane(dst + 64 * (8 * c + g), r, qs + 32 * c + 4 * g, 0);
}

/* One row r of a 256-wide block (src) into packed block dst. */
PACK_INLINE void pack_row_k(enum fx_type type, const uint8_t *src, int r, uint8_t *dst) {
    switch (type) {
    case FX_TYPE_Q2_K: /* scales[16], qs[64], d, dmin */
        put_u16(dst + 2 * r, src + 80);
        put_u16(dst + 32 + 2 * r, src + 82);
        for (int t = 0; t < 8; t++)
            put_u16(dst + 64 + 32 * t + 2 * r, src + 2 * t);
        pack_2bit(src + 16, r, dst + 320);
        return;
    case FX_TYPE_Q3_K: /* hmask[32], qs[64], scales[12], d */
        put_u16(dst + 2 * r, src + 108);
        for (int s = 0; s < 16; s++)
            dst[32 + 16 * s + r] = (uint8_t)(int8_t)fx_q3_K_scale(src + 96, s);
        pack_2bit(src + 32, r, dst + 288);
        for (int n = 0; n < 2; n++)
            for (int j = 0; j < 4; j++)
                for (int g = 0; g < 8; g++)
                    or_u64(dst + 1312 + 8 * (8 * (4 * n + j) + g),
                           lane_bits(src + 4 * g, 4 * n + j, r));
        return;
    case FX_TYPE_Q4_K:
    case FX_TYPE_Q5_K: { /* d, dmin, scales[12], (qh[32]), qs[128] */
        bool five = type == FX_TYPE_Q5_K;
        put_u16(dst + 2 * r, src);
        put_u16(dst + 32 + 2 * r, src + 2);
        for (int s = 0; s < 8; s++)
            fx_k_scale_min(src + 4, s, &dst[64 + 16 * s + r], &dst[192 + 16 * s + r]);
        if (five)
            for (int s = 0; s < 8; s++)
                for (int g = 0; g < 8; g++)
                    or_u64(dst + 320 + 8 * (8 * s + g), lane_bits(src + 16 + 4 * g, s, r));
        pack_nibbles_k(src + (five ? 48 : 16), r, dst + (five ? 832 : 320));
        return;
    }
    case FX_TYPE_Q6_K: /* ql[128], qh[64], scales[16], d */
        put_u16(dst + 2 * r, src + 208);
        for (int s = 0; s < 16; s++)
            dst[32 + 16 * s + r] = src[192 + s];
        for (int h = 0; h < 2; h++) {
            for (int a = 0; a < 2; a++)
                for (int g = 0; g < 8; g++)
                    put_lane(dst + 288 + 64 * (8 * (2 * h + a) + g), r,
                             src + 64 * h + 32 * a + 4 * g, 0);
            for (int g = 0; g < 8; g++)
                put_lane(dst + 2336 + 64 * (8 * h + g), r, src + 128 + 32 * h + 4 * g, 0);
        }
        return;
    case FX_TYPE_IQ4_XS: { /* d, scales_h, scales_l[4], qs[128] */
        uint16_t high;
        memcpy(&high, src + 2, 2);
        put_u16(dst + 2 * r, src);
        for (int s = 0; s < 8; s++) {
            int code = ((src[4 + s / 2] >> (4 * (s % 2))) & 0x0f) | ((high >> (2 * s)) & 3) << 4;
            dst[32 + 16 * s + r] = (uint8_t)(int8_t)(code - 32);
        }
        for (int s = 0; s < 8; s++)
            for (int i = 0; i < 4; i++)
                put_lane(dst + 160 + 64 * (4 * s + i), r, src + 8 + 16 * s + 4 * i, 0);
        return;
    }
    default:
        FX_ASSERT(!"not a K R16 format");
    }
}

/* Every block of the run, every row: the loops of fx_r16_pack for one format. */
PACK_INLINE void pack_blocks(enum fx_type type, const uint8_t *rows, uint64_t row_bytes, int n_rows,
                             int64_t b0, int64_t n_blocks, uint8_t *dst, size_t pbytes) {
    const bool k_format = type == FX_TYPE_Q2_K || type == FX_TYPE_Q3_K || type == FX_TYPE_Q4_K ||
                          type == FX_TYPE_Q5_K || type == FX_TYPE_Q6_K || type == FX_TYPE_IQ4_XS;
    const uint64_t bbytes = (uint64_t)fx_type_block_bytes(type);
    for (int64_t b = 0; b < n_blocks; b++, dst += pbytes) {
        const uint8_t *src = rows + (uint64_t)(b0 + b) * bbytes;
        for (int r = 0; r < n_rows; r++, src += row_bytes) {
            if (k_format)
                pack_row_k(type, src, r, dst);
            else
                pack_row_32(type, src, r, dst);
        }
    }
}

int32_t fx_r16_bias(enum fx_type type) {
    switch (type) {
    case FX_TYPE_Q8_0:
        return 128;
    case FX_TYPE_Q4_0:
        return 8;
    case FX_TYPE_Q5_0:
        return 16;
    case FX_TYPE_MXFP4:
        return 12;
    case FX_TYPE_IQ4_NL:
        return 128;
    default:
        return 0;
    }
}

void fx_r16_pack(enum fx_type type, const uint8_t *rows, uint64_t row_bytes, int n_rows, int64_t b0,
                 int64_t n_blocks, uint8_t *dst) {
    size_t pbytes = fx_r16_block_bytes(type);
    FX_ASSERT(pbytes != 0 && n_rows >= 1 && n_rows <= FX_R16_ROWS);
    memset(dst, 0, (size_t)n_blocks * pbytes);
    switch (type) {
    case FX_TYPE_Q8_0:
        pack_blocks(FX_TYPE_Q8_0, rows, row_bytes, n_rows, b0, n_blocks, dst, pbytes);
        break;
    case FX_TYPE_Q4_0:
        pack_blocks(FX_TYPE_Q4_0, rows, row_bytes, n_rows, b0, n_blocks, dst, pbytes);
        break;
    case FX_TYPE_Q4_1:
        pack_blocks(FX_TYPE_Q4_1, rows, row_bytes, n_rows, b0, n_blocks, dst, pbytes);
        break;
    case FX_TYPE_Q5_0:
        pack_blocks(FX_TYPE_Q5_0, rows, row_bytes, n_rows, b0, n_blocks, dst, pbytes);
        break;
    case FX_TYPE_Q5_1:
        pack_blocks(FX_TYPE_Q5_1, rows, row_bytes, n_rows, b0, n_blocks, dst, pbytes);
        break;
    case FX_TYPE_MXFP4:
        pack_blocks(FX_TYPE_MXFP4, rows, row_bytes, n_rows, b0, n_blocks, dst, pbytes);
        break;
    case FX_TYPE_Q2_K:
        pack_blocks(FX_TYPE_Q2_K, rows, row_bytes, n_rows, b0, n_blocks, dst, pbytes);
        break;
    case FX_TYPE_Q3_K:
        pack_blocks(FX_TYPE_Q3_K, rows, row_bytes, n_rows, b0, n_blocks, dst, pbytes);
        break;
    case FX_TYPE_Q4_K:
        pack_blocks(FX_TYPE_Q4_K, rows, row_bytes, n_rows, b0, n_blocks, dst, pbytes);
        break;
    case FX_TYPE_Q5_K:
        pack_blocks(FX_TYPE_Q5_K, rows, row_bytes, n_rows, b0, n_blocks, dst, pbytes);
        break;
    case FX_TYPE_IQ4_NL:
        pack_blocks(FX_TYPE_IQ4_NL, rows, row_bytes, n_rows, b0, n_blocks, dst, pbytes);
        break;
    case FX_TYPE_IQ4_XS:
        pack_blocks(FX_TYPE_IQ4_XS, rows, row_bytes, n_rows, b0, n_blocks, dst, pbytes);
        break;
    default:
        pack_blocks(FX_TYPE_Q6_K, rows, row_bytes, n_rows, b0, n_blocks, dst, pbytes);
        break;
    }
}

/* ---- the packing API (kernels.h) ----------------------------------------------------------- */

uint64_t fx_mat_pack_bytes(const struct fx_kernels *k, const struct fx_mat *w) {
    if (k->types[w->type].pack_kind != FX_PACK_R16)
        return 0;
    uint64_t panels = ((uint64_t)w->ne1 + FX_R16_ROWS - 1) / FX_R16_ROWS;
    uint64_t blocks = (uint64_t)(w->ne0 / fx_type_block_elems(w->type)), bytes;
    if (fx_mul_overflow_u64(panels, blocks, &bytes) ||
        fx_mul_overflow_u64(bytes, fx_r16_block_bytes(w->type), &bytes))
        return 0;
    return bytes;
}

void fx_mat_pack(const struct fx_kernels *k, const struct fx_mat *w, void *dst, int ith, int nth) {
    FX_ASSERT(k->types[w->type].pack_kind == FX_PACK_R16);
    int64_t nb = w->ne0 / fx_type_block_elems(w->type);
    uint64_t panel_bytes = (uint64_t)nb * fx_r16_block_bytes(w->type);
    int64_t p0, p1;
    fx_par_range((w->ne1 + FX_R16_ROWS - 1) / FX_R16_ROWS, ith, nth, 1, &p0, &p1);
    for (int64_t p = p0; p < p1; p++) {
        int64_t row = p * FX_R16_ROWS;
        int n_rows = (int)(w->ne1 - row < FX_R16_ROWS ? w->ne1 - row : FX_R16_ROWS);
        fx_r16_pack(w->type, (const uint8_t *)w->data + (uint64_t)row * w->row_bytes, w->row_bytes,
                    n_rows, 0, nb, (uint8_t *)dst + (uint64_t)p * panel_bytes);
    }
}

void fx_mat_set_packed(const struct fx_kernels *k, struct fx_mat *w, const void *packed) {
    w->packed = packed;
    w->pack_kind = packed ? k->types[w->type].pack_kind : FX_PACK_NONE;
}

/* ---- the matmul driver --------------------------------------------------------------------- */

/* Runs of blocks per tile call, in elements: long runs when every activation row fits one tile
 * (decode: each panel streams through in few pieces), short ones for big batches (a pair of
 * panels' run, 17 KB of Q8_0, stays in L1 while every tile of activation rows passes). */
#define RUN_SMALL 2048
#define RUN_BIG   1024
/* Room for what is packed on the fly: the larger of two panels' RUN_BIG and one panel's
 * RUN_SMALL elements at Q8_0's 17 packed bytes per element, the densest layout. */
#define PACK_BUF_BYTES (RUN_SMALL * 17)
_Static_assert(2 * RUN_BIG <= RUN_SMALL, "pack buffer");
/* Activation metadata kept at once (12 bytes each): for up to 8 activation rows, the whole row
 * of up to 8192 elements, so that a panel streams from memory in one piece; for big batches, a
 * chunk of 64 rows of one run (CHUNK_ROWS). */
#define META_ENTRIES 2048
_Static_assert(META_ENTRIES >= FX_R16_MAX_ACT * (RUN_SMALL / FX_QK), "metadata of a run");
/* Activation rows per chunk of a big batch: a run of the chunk's activations (70 KB of Q8_0, 75
 * KB of Q8_K) and their metadata stay in L2 while every pair of panels passes. */
#define CHUNK_ROWS (META_ENTRIES / (RUN_BIG / FX_QK))

/* Weight rows per group of a big batch: 8 panels, 150 KB of Q4_K at 2048 elements a row, 430 KB
 * at 8192, stay in the 1 MiB L2 while every chunk of activation rows passes (without groups,
 * each chunk streamed the whole matrix from memory again). */
#define GROUP_ROWS (8 * FX_R16_ROWS)

/* The largest tile width (8, 4, 2, 1) that fits in n activation rows. */
static int tile_width(int64_t n) {
    return n >= 8 ? 8 : n >= 4 ? 4 : n >= 2 ? 2 : 1;
}

struct r16_job {
    const struct fx_r16_kernel *k;
    const struct fx_mat *w;
    int64_t nb;                      /* blocks per row */
    size_t pbytes;                   /* packed block bytes */
    uint64_t abytes;                 /* activation block bytes */
    int32_t bias;                    /* */
    const uint8_t *act;              /* */
    uint64_t act_stride;             /* */
    float *out;                      /* */
    int64_t out_stride;              /* */
    int64_t r1;                      /* end of the share */
    uint8_t *buf;                    /* PACK_BUF_BYTES for unpacked weights */
    struct fx_r16_meta *meta;        /* [META_ENTRIES] */
    const struct fx_mat_piece *then; /* the worker's next piece, or NULL */
};

/* Block c0 of the packed panel starting at row `row` of w, packed R16 with the job's format and
 * row width. */
static const uint8_t *packed_at(const struct r16_job *j, const struct fx_mat *w, int64_t row,
                                int64_t c0) {
    return (const uint8_t *)w->packed +
           ((uint64_t)(row / FX_R16_ROWS) * (uint64_t)j->nb + (uint64_t)c0) * j->pbytes;
}

/* The run [c0, c0 + nc) of the panel starting at row `row`: from the packed copy, or packed
 * into dst now. */
static const uint8_t *panel_run(const struct r16_job *j, int64_t row, int64_t c0, int64_t nc,
                                uint8_t *dst) {
    const struct fx_mat *w = j->w;
    if (w->packed && w->pack_kind == FX_PACK_R16)
        return packed_at(j, w, row, c0);
    int n_rows = (int)(w->ne1 - row < FX_R16_ROWS ? w->ne1 - row : FX_R16_ROWS);
    fx_r16_pack(w->type, (const uint8_t *)w->data + (uint64_t)row * w->row_bytes, w->row_bytes,
                n_rows, c0, nc, dst);
    return dst;
}

/* Activation rows [j0, j0 + n) (n <= FX_R16_MAX_ACT): what their blocks [c0, c0 + nc) need
 * besides their codes, into meta[j - j0][stride]. */
static void fill_meta(const struct r16_job *j, int64_t j0, int64_t n, int64_t c0, int64_t nc,
                      struct fx_r16_meta *meta, int64_t stride) {
    if (!j->k->meta)
        return;
    for (int64_t i = 0; i < n; i++)
        j->k->meta(j->act + (uint64_t)(j0 + i) * j->act_stride + (uint64_t)c0 * j->abytes, nc,
                   j->bias, meta + i * stride);
}

/* Activation rows [j0, j0 + n) (n <= FX_R16_MAX_ACT; their metadata at meta, meta_stride
 * apart, from the run's first block) against the runs wp[0..np) of the consecutive panels from
 * row0, in tiles of 8, 4, 2 and 1 rows. */
static void run_tiles(const struct r16_job *j, const uint8_t *const *wp, int np, int64_t row0,
                      int64_t c0, int64_t nc, int64_t j0, int64_t n, const struct fx_r16_meta *meta,
                      int64_t meta_stride) {
    for (int64_t done = 0; done < n;) {
        int width = tile_width(n - done);
        for (int i = 0; i < np; i++) {
            int64_t row = row0 + (int64_t)i * FX_R16_ROWS;
            struct fx_r16_tile t = {
                .w = wp[i],
                .n_blocks = nc,
                .act = j->act + (uint64_t)(j0 + done) * j->act_stride + (uint64_t)c0 * j->abytes,
                .act_stride = j->act_stride,
                .meta = meta + done * meta_stride,
                .meta_stride = meta_stride,
                .out = j->out + (j0 + done) * j->out_stride + row,
                .out_stride = j->out_stride,
                .n_act = width,
                .n_rows = (int)(j->r1 - row < FX_R16_ROWS ? j->r1 - row : FX_R16_ROWS),
                .first = c0 == 0,
            };
            j->k->tile(&t);
        }
        done += width;
    }
}

/* Pairs of panels that meet at most this many wide tiles prefetch the next pair's run (the
 * decode of many sequences: with 4 tiles a pair, the first one's wait for memory was a quarter
 * of the time). Bigger batches leave it to the hardware: the wait is a small share of 16 tiles,
 * and the next pair's run would crowd the current one out of L1. */
#define PREFETCH_MAX_TILES 8

/* What the walk of run_groups reads after a pair of panels' run: the first panel's run of the
 * next pair, `bytes` long, and the second panel's, as far again as the current pair's are apart
 * (packed panels are equally spaced). */
struct next_run {
    const uint8_t *w; /* NULL: nothing to prefetch */
    uint64_t bytes;   /* */
};

/* Activation rows [a0, a0 + na) (their metadata at meta, meta_stride apart) against the runs
 * wp[0..np) of one or two consecutive panels from row0: wide tiles of k->wide_act rows over
 * both panels while they last, then tiles of up to 8 rows per panel. The wide tiles share the
 * prefetch of `next` in equal slices, so that it arrives from memory while they compute from
 * L1 (otherwise the first tile of every pair waits for memory and the others leave it idle). */
static void run_chunk(const struct r16_job *j, const uint8_t *const *wp, int np, int64_t row0,
                      int64_t c0, int64_t nc, int64_t a0, int64_t na,
                      const struct fx_r16_meta *meta, int64_t meta_stride, struct next_run next) {
    int64_t done = 0;
    uint64_t n_wide = np == 2 && j->k->wide ? (uint64_t)(na / j->k->wide_act) : 0;
    uint64_t slice =
        next.w && n_wide && n_wide <= PREFETCH_MAX_TILES ? (next.bytes + n_wide - 1) / n_wide : 0;
    uint64_t step = (slice + (uint64_t)nc * 64 - 1) / ((uint64_t)nc * 64) * 64;
    if (np == 2 && j->k->wide)
        for (uint64_t i = 0; na - done >= j->k->wide_act; done += j->k->wide_act, i++) {
            int64_t a = a0 + done;
            struct fx_r16_tile t = {
                .w = wp[0],
                .w_stride = (uint64_t)(wp[1] - wp[0]),
                .n_blocks = nc,
                .act = j->act + (uint64_t)a * j->act_stride + (uint64_t)c0 * j->abytes,
                .act_stride = j->act_stride,
                .meta = meta + done * meta_stride,
                .meta_stride = meta_stride,
                .out = j->out + a * j->out_stride + row0,
                .out_stride = j->out_stride,
                .n_act = j->k->wide_act,
                .n_rows = (int)(j->r1 - row0 < 2 * FX_R16_ROWS ? j->r1 - row0 : 2 * FX_R16_ROWS),
                .first = c0 == 0,
                .prefetch = slice ? next.w + i * slice : NULL,
                .prefetch_step = step,
            };
            j->k->wide(&t);
        }
    for (; done < na; done += FX_R16_MAX_ACT) {
        int64_t n = na - done < FX_R16_MAX_ACT ? na - done : FX_R16_MAX_ACT;
        run_tiles(j, wp, np, row0, c0, nc, a0 + done, n, meta + done * meta_stride, meta_stride);
    }
}

/* The first run of the panels of w from row, `run` blocks at most, when w is packed in the job's
 * format and row width (the matrices of one list are). */
static struct next_run first_run(const struct r16_job *j, const struct fx_mat *w, int64_t row,
                                 int64_t run) {
    struct next_run none = {0};
    if (!w->packed || w->pack_kind != FX_PACK_R16 || w->type != j->w->type || w->ne0 != j->w->ne0)
        return none;
    struct next_run next = {packed_at(j, w, row, 0),
                            (uint64_t)(j->nb < run ? j->nb : run) * j->pbytes};
    return next;
}

/* For packed weights, what run_groups reads after the pair of panels at (row, c0) in the group
 * [g0, g1) when it is a pair too: the next pair's run, else the group's first pair's next run.
 * Nothing past the group (a later chunk finds it in L2, and the next group may be another
 * worker's), except after the job's last pair: the first run of the worker's next piece (`then`,
 * where the caller knows it). */
static struct next_run next_pair_run(const struct r16_job *j, int64_t g0, int64_t g1, int64_t row,
                                     int64_t c0, int64_t run, bool last_chunk) {
    struct next_run none = {0};
    if (!j->w->packed || j->w->pack_kind != FX_PACK_R16)
        return none;
    if (row + 2 * FX_R16_ROWS < g1) {
        row += 2 * FX_R16_ROWS;
    } else if (c0 + run < j->nb) {
        row = g0;
        c0 += run;
    } else if (j->then && last_chunk && g1 >= j->r1) {
        return first_run(j, j->then->w, j->then->r0, run);
    } else {
        return none;
    }
    if (row + FX_R16_ROWS >= g1)
        return none;
    int64_t nc = j->nb - c0 < run ? j->nb - c0 : run;
    struct next_run next = {panel_run(j, row, c0, nc, NULL), (uint64_t)nc * j->pbytes};
    return next;
}

/* Many activation rows (their metadata given, [n_act][nb], or computed): group by
 * group of weight rows, chunk by chunk of activation rows and run by run, each pair of panels'
 * run stays in L1 while every tile of the chunk's activation rows passes, and the group's
 * weights stay in L2 while every chunk passes. Without given metadata, each run's is computed
 * for the chunk's rows. */
static void run_groups(const struct r16_job *j, int64_t r0, int64_t r1, int64_t n_act,
                       const struct fx_r16_meta *given) {
    int64_t run = RUN_BIG / fx_type_block_elems(j->w->type);
    /* Chunks of whole wide tiles (60 rows for tiles of 6): a chunk's rows left over would take
     * the slower one-panel tiles. */
    int64_t chunk = j->k->wide ? CHUNK_ROWS / j->k->wide_act * j->k->wide_act : CHUNK_ROWS;
    for (int64_t g0 = r0; g0 < r1; g0 += GROUP_ROWS) {
        int64_t g1 = r1 - g0 < GROUP_ROWS ? r1 : g0 + GROUP_ROWS;
        for (int64_t a0 = 0; a0 < n_act; a0 += chunk) {
            int64_t na = n_act - a0 < chunk ? n_act - a0 : chunk;
            for (int64_t c0 = 0; c0 < j->nb; c0 += run) {
                int64_t nc = j->nb - c0 < run ? j->nb - c0 : run;
                const struct fx_r16_meta *meta = j->meta;
                int64_t meta_stride = run;
                if (given) {
                    meta = given + a0 * j->nb + c0;
                    meta_stride = j->nb;
                } else {
                    fill_meta(j, a0, na, c0, nc, j->meta, run);
                }
                for (int64_t row = g0; row < g1; row += 2 * FX_R16_ROWS) {
                    const uint8_t *wp[2];
                    int np = row + FX_R16_ROWS < g1 ? 2 : 1;
                    for (int i = 0; i < np; i++)
                        wp[i] = panel_run(j, row + i * FX_R16_ROWS, c0, nc,
                                          j->buf + (size_t)i * (size_t)nc * j->pbytes);
                    run_chunk(j, wp, np, row, c0, nc, a0, na, meta, meta_stride,
                              next_pair_run(j, g0, g1, row, c0, run, a0 + na == n_act));
                }
            }
        }
    }
}

void fx_r16_matmul(const struct fx_r16_kernel *k, const struct fx_mat *w, int64_t r0, int64_t r1,
                   const void *act, uint64_t act_stride, int64_t n_act, float *out,
                   int64_t out_stride, const struct fx_r16_meta *given,
                   const struct fx_mat_piece *then) {
    _Alignas(64) uint8_t buf[PACK_BUF_BYTES];
    struct fx_r16_meta meta[META_ENTRIES];
    int64_t qk = fx_type_block_elems(w->type);
    enum fx_type act_type = fx_kernels_generic.types[w->type].vec_dot_type;
    FX_ASSERT(w->type == k->type && r0 % FX_R16_ROWS == 0);
    struct r16_job j = {
        .k = k,
        .w = w,
        .nb = w->ne0 / qk,
        .pbytes = fx_r16_block_bytes(w->type),
        .abytes = (uint64_t)fx_type_block_bytes(act_type),
        .bias = fx_r16_bias(w->type),
        .act = act,
        .act_stride = act_stride,
        .out = out,
        .out_stride = out_stride,
        .r1 = r1,
        .buf = buf,
        .meta = meta,
        .then = then,
    };
    bool packed = w->packed && w->pack_kind == FX_PACK_R16;
    if (!k->meta) /* the K formats' Q8_K blocks carry what they need */
        given = NULL;
    if (n_act <= FX_R16_MAX_ACT) {
        /* One tile of activation rows: their metadata for as long a span of the row as fits
         * (usually all of it; all of it when given), then each panel streams through that span
         * in runs. */
        int64_t run = RUN_SMALL / qk;
        int64_t span = k->meta && !given ? META_ENTRIES / n_act / run * run : j.nb;
        if (packed) /* packed weights need no buffer: one call per panel and span */
            run = span;
        for (int64_t s0 = 0; s0 < j.nb; s0 += span) {
            int64_t ns = j.nb - s0 < span ? j.nb - s0 : span;
            const struct fx_r16_meta *m = given ? given + s0 : meta;
            if (!given)
                fill_meta(&j, 0, n_act, s0, ns, meta, span);
            for (int64_t row = r0; row < r1; row += FX_R16_ROWS)
                for (int64_t c0 = s0; c0 < s0 + ns; c0 += run) {
                    int64_t nc = s0 + ns - c0 < run ? s0 + ns - c0 : run;
                    const uint8_t *wp = panel_run(&j, row, c0, nc, buf);
                    run_tiles(&j, &wp, 1, row, c0, nc, 0, n_act, m + (c0 - s0), span);
                }
        }
        return;
    }
    run_groups(&j, r0, r1, n_act, given);
}

void fx_r16_vec_dot(const struct fx_r16_kernel *k, int64_t n, float *s, const void *x,
                    const void *y) {
    uint64_t row_bytes =
        (uint64_t)(n / fx_type_block_elems(k->type)) * (uint64_t)fx_type_block_bytes(k->type);
    struct fx_mat w = {.type = k->type, .ne0 = n, .ne1 = 1, .row_bytes = row_bytes, .data = x};
    fx_r16_matmul(k, &w, 0, 1, y, 0, 1, s, 0, NULL, NULL);
}

void fx_r16_act_meta(const struct fx_r16_kernel *k, const void *act, int64_t n, void *meta) {
    k->meta(act, n / fx_type_block_elems(k->type), fx_r16_bias(k->type), meta);
}

uint64_t fx_act_meta_bytes(int64_t n) {
    return (uint64_t)(n / FX_QK) * sizeof(struct fx_r16_meta);
}

void fx_r16_meta_q8_1(const uint8_t *act, int64_t n_blocks, int32_t bias,
                      struct fx_r16_meta *meta) {
    (void)bias;
    for (int64_t b = 0; b < n_blocks; b++, act += sizeof(struct fx_block_q8_1)) {
        uint16_t h[2];
        memcpy(h, act, 4);
        meta[b].d = fx_fp16_to_f32(h[0]);
        meta[b].s = fx_fp16_to_f32(h[1]);
        meta[b].c = 0;
    }
}
