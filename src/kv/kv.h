/* Where a forward step's keys and values live: the contiguous cache of one sequence, a paged pool
 * (kv/paged.h), and the step descriptor that tells the attention block where each row of a step
 * writes and reads its keys and values.
 *
 * Rows are stored as f32, f16 or q8_0 (the kernels' kv_store / kv_load convert), K and V chosen
 * separately. Values are kept as rows; keys as key tiles (kernels.h: 16 consecutive positions of
 * one layer and KV head, element-major), the layout decode attention scores from, so that no
 * step transposes them; a paged block keeps its positions' keys in tiles of its own (the last
 * one partly used when its size is not a multiple of 16). The attention kernels read a run's
 * tiles and value rows in place, in groups of 16 positions (struct fx_kv_run), and take every
 * type as kv_load's exact f32; a group scattered over blocks (a paged cache whose blocks are not
 * a multiple of 16 positions) is converted into a per-worker f32 tile first (fx_kv_step_keys).
 * Every backing thus feeds the kernel the same floats, and paged, contiguous and batched steps
 * agree bit for bit. Whoever needs a key as a row (saved state, device uploads) moves it through
 * kernels/kv_tile.h. */
#ifndef FX_KV_KV_H
#define FX_KV_KV_H

#include <stdbool.h>
#include <stdint.h>

#include "ferrox.h"
#include "kernels/kernels.h"
#include "kv/recurrent.h"

/* The KV element type of fx_context_default_params() (the README says how it was chosen). */
#define FX_KV_DEFAULT_TYPE FX_TYPE_F16

/* True for the element types a KV cache may hold (F32, F16, Q8_0). */
bool fx_kv_type_ok(enum fx_type t);
/* Bytes of one row of dim elements of KV type t; false (with a message naming what) when t is
 * not a KV type or dim is not a whole number of its blocks. */
fx_status fx_kv_row_bytes(enum fx_type t, int64_t dim, const char *what, uint64_t *out,
                          struct fx_error *err);

/* Head-major: the keys (values) of one KV head are consecutive tiles (rows), so attention
 * streams them contiguously. (Position-major rows of n_head_kv * head_dim floats are often 4 KiB
 * or a multiple, which maps every key of a head to the same L1 set.) */
struct fx_kv_contig {
    int32_t n_layer;
    int32_t n_ctx;
    int32_t n_head_kv;
    int64_t head_dim, head_dim_v;
    enum fx_type type_k, type_v;
    uint64_t k_row, v_row; /* bytes of one head's key (value) row */
    uint8_t *k;       /* [n_layer][n_head_kv][(n_ctx + 15) / 16][16 * k_row]: key tiles, on lines */
    uint8_t *v;       /* [n_layer][n_head_kv][n_ctx][v_row] */
    int32_t n_filled; /* positions 0..n_filled-1 hold rows written by forward passes */
};

fx_status fx_kv_contig_init(struct fx_kv_contig *kv, int32_t n_layer, int32_t n_ctx,
                            int32_t n_head_kv, int64_t head_dim, int64_t head_dim_v,
                            enum fx_type type_k, enum fx_type type_v, struct fx_error *err);
void fx_kv_contig_release(struct fx_kv_contig *kv);

/* Where a key lies: slot `slot` of the key tile at `tile` (kernels/kv_tile.h moves it). */
struct fx_kv_key_at {
    uint8_t *tile;
    int slot;
};

/* The key of KV head g at position pos of layer il. */
static inline struct fx_kv_key_at fx_kv_contig_key(const struct fx_kv_contig *kv, int il, int g,
                                                   int64_t pos) {
    uint64_t tiles = ((uint64_t)kv->n_ctx + 15) / 16;
    return (struct fx_kv_key_at){
        kv->k +
            (((uint64_t)il * (uint64_t)kv->n_head_kv + (uint64_t)g) * tiles + (uint64_t)pos / 16) *
                fx_kv_tile_bytes(kv->k_row),
        (int)(pos % 16)};
}

/* V row of KV head g at position pos of layer il. */
static inline uint8_t *fx_kv_contig_v(const struct fx_kv_contig *kv, int il, int g, int64_t pos) {
    return kv->v + (((uint64_t)il * (uint64_t)kv->n_head_kv + (uint64_t)g) * (uint64_t)kv->n_ctx +
                    (uint64_t)pos) *
                       kv->v_row;
}

struct fx_kv_pool;

/* Where the rows of one forward step keep their K and V. The attention block is written once
 * against this; each backing is a kind. */
enum fx_kv_kind {
    FX_KV_CONTIG, /* rows 0..n-1 are positions pos0..pos0+n-1 of one contiguous cache */
    FX_KV_PAGED,  /* rows 0..n-1 are positions pos0..pos0+n-1 of one sequence of a pool */
    FX_KV_MULTI,  /* row i is position pos[i] of sequence seq[i] of a pool */
};

struct fx_kv_step {
    enum fx_kv_kind kind;
    union {
        struct {
            struct fx_kv_contig *kv;
            struct fx_rstate *rs; /* the sequence's recurrent state (hybrid models) */
            int32_t pos0;
        } contig;
        struct {
            struct fx_kv_pool *pool;
            fx_seq_id seq;
            int32_t pos0;
        } paged;
        struct {
            struct fx_kv_pool *pool;
            const fx_seq_id *seq; /* [n] the step's rows, from this chunk's first */
            const int32_t *pos;   /* [n] */
            bool snap;            /* some rows keep their recurrent state (fx_kv_step_snap) */
        } multi;
    } u;
};

/* The position of step row i in its sequence. */
static inline int32_t fx_kv_step_pos(const struct fx_kv_step *s, int64_t i) {
    switch (s->kind) {
    case FX_KV_CONTIG:
        return s->u.contig.pos0 + (int32_t)i;
    case FX_KV_PAGED:
        return s->u.paged.pos0 + (int32_t)i;
    case FX_KV_MULTI:
        return s->u.multi.pos[i];
    }
    return -1;
}

/* The same step from row row0 on (a chunk of it). */
static inline struct fx_kv_step fx_kv_step_from(const struct fx_kv_step *s, int64_t row0) {
    struct fx_kv_step c = *s;
    switch (s->kind) {
    case FX_KV_CONTIG:
        c.u.contig.pos0 += (int32_t)row0;
        break;
    case FX_KV_PAGED:
        c.u.paged.pos0 += (int32_t)row0;
        break;
    case FX_KV_MULTI:
        c.u.multi.seq += row0;
        c.u.multi.pos += row0;
        break;
    }
    return c;
}

/* Whether step rows i and j belong to the same sequence (and so may attend together). */
static inline bool fx_kv_step_same_seq(const struct fx_kv_step *s, int64_t i, int64_t j) {
    return s->kind != FX_KV_MULTI || s->u.multi.seq[i] == s->u.multi.seq[j];
}

/* The recurrent state of row i's sequence (hybrid models), continued by the row: the state
 * after the row's previous position, or anything at position 0, where the row starts from zeros.
 * The contiguous cache's, or the pool sequence's (kv/paged.h). */
struct fx_rstate *fx_kv_step_rstate(const struct fx_kv_step *s, int64_t i);
/* Where a multi-sequence step whose u.multi.snap is set keeps the recurrent state after row i
 * (a row it marked: fx_batch.snapshot, kv/paged.h), or NULL. */
struct fx_rstate *fx_kv_step_snap(const struct fx_kv_step *s, int64_t i);

/* Stores row i's key and value of KV head g (f32: head_dim and head_dim_v floats) in layer il at
 * the row's position, converted to the cache's types (the key into its slot of a tile). */
void fx_kv_step_store(const struct fx_kv_step *s, const struct fx_kernels *k, int il, int64_t i,
                      int g, const float *key, const float *value);

/* The keys (values) of KV head g at positions t0..t0+n-1 of row i's sequence in layer il, for
 * attn_run: in place where each group of 16 positions from t0 (a multiple of 16) is one key
 * tile (lies at one stride), otherwise converted to f32 into tile ([n][head_dim] or
 * [n][head_dim_v] floats). n <= FX_ATTN_RUN. */
void fx_kv_step_keys(const struct fx_kv_step *s, const struct fx_kernels *k, int il, int64_t i,
                     int g, int32_t t0, int32_t n, float *tile, struct fx_kv_run *out);
void fx_kv_step_values(const struct fx_kv_step *s, const struct fx_kernels *k, int il, int64_t i,
                       int g, int32_t t0, int32_t n, float *tile, struct fx_kv_run *out);

/* Tells the runs keys and values (from fx_kv_step_keys / _values) where the next run's rows lie,
 * positions t0..t0+n-1 (fx_kv_run.next), so that attn_run asks the memory system for them while
 * it works on this run: a run would otherwise wait for memory with nothing to overlap. */
void fx_kv_step_ahead(const struct fx_kv_step *s, int il, int64_t i, int g, int32_t t0, int32_t n,
                      struct fx_kv_run *keys, struct fx_kv_run *values);

#endif
