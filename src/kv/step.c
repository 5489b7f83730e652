/* The step descriptor's reads and writes (kv/kv.h): one body for every backing, which differ only
 * in where a (layer, head, position) row lives. */
#include "kv/kv.h"

#include "core/error.h"
#include "kernels/kv_tile.h"
#include "kv/paged.h"

bool fx_kv_type_ok(enum fx_type t) {
    return t == FX_TYPE_F32 || t == FX_TYPE_F16 || t == FX_TYPE_Q8_0;
}

fx_status fx_kv_row_bytes(enum fx_type t, int64_t dim, const char *what, uint64_t *out,
                          struct fx_error *err) {
    if (!fx_kv_type_ok(t))
        return fx_error_set(err, FX_ERR_UNSUPPORTED, FX_NO_OFFSET,
                            "%s cache type %s is not supported (f32, f16 or q8_0)", what,
                            fx_type_name(t));
    if (!fx_type_row_bytes(t, dim, out))
        return fx_error_set(err, FX_ERR_UNSUPPORTED, FX_NO_OFFSET,
                            "%s cache type %s needs a head size that is a multiple of %llu, not "
                            "%lld",
                            what, fx_type_name(t), (unsigned long long)fx_type_block_elems(t),
                            (long long)dim);
    return FX_OK;
}

/* Where row i's value (is_v) row of head g at position pos lives, or its key (slot `slot` of
 * the tile at `at`); the type, the bytes between consecutive value rows (one key row's bytes
 * for keys), and how many positions from pos on lie in the same block. */
struct kv_place {
    uint8_t *at;
    int slot;
    enum fx_type type;
    uint64_t stride;
    int32_t run;
};

static struct kv_place place(const struct fx_kv_step *s, int il, int64_t i, int g, int32_t pos,
                             bool is_v) {
    switch (s->kind) {
    case FX_KV_CONTIG: {
        const struct fx_kv_contig *kv = s->u.contig.kv;
        if (is_v)
            return (struct kv_place){fx_kv_contig_v(kv, il, g, pos), 0, kv->type_v, kv->v_row,
                                     kv->n_ctx - pos};
        struct fx_kv_key_at key = fx_kv_contig_key(kv, il, g, pos);
        return (struct kv_place){key.tile, key.slot, kv->type_k, kv->k_row, kv->n_ctx - pos};
    }
    case FX_KV_PAGED:
    case FX_KV_MULTI: {
        const struct fx_kv_pool *p = s->kind == FX_KV_PAGED ? s->u.paged.pool : s->u.multi.pool;
        fx_seq_id seq = s->kind == FX_KV_PAGED ? s->u.paged.seq : s->u.multi.seq[i];
        int32_t run = p->block_size - pos % p->block_size;
        if (is_v)
            return (struct kv_place){fx_kv_pool_v(p, seq, il, g, pos), 0, p->type_v, p->v_row, run};
        struct fx_kv_key_at key = fx_kv_pool_key(p, seq, il, g, pos);
        return (struct kv_place){key.tile, key.slot, p->type_k, p->k_row, run};
    }
    }
    FX_ASSERT(!"unknown KV step kind");
    return (struct kv_place){0};
}

struct fx_rstate *fx_kv_step_rstate(const struct fx_kv_step *s, int64_t i) {
    switch (s->kind) {
    case FX_KV_CONTIG:
        return s->u.contig.rs;
    case FX_KV_PAGED:
        return &s->u.paged.pool->seqs[s->u.paged.seq].rs;
    case FX_KV_MULTI:
        return &s->u.multi.pool->seqs[s->u.multi.seq[i]].rs;
    }
    FX_ASSERT(!"unknown KV step kind");
    return NULL;
}

struct fx_rstate *fx_kv_step_snap(const struct fx_kv_step *s, int64_t i) {
    FX_ASSERT(s->kind == FX_KV_MULTI && s->u.multi.snap);
    return fx_kv_seq_snap(&s->u.multi.pool->seqs[s->u.multi.seq[i]], s->u.multi.pos[i]);
}

static int64_t head_dim(const struct fx_kv_step *s, bool is_v) {
    switch (s->kind) {
    case FX_KV_CONTIG:
        return is_v ? s->u.contig.kv->head_dim_v : s->u.contig.kv->head_dim;
    case FX_KV_PAGED:
        return is_v ? s->u.paged.pool->head_dim_v : s->u.paged.pool->head_dim;
    case FX_KV_MULTI:
        return is_v ? s->u.multi.pool->head_dim_v : s->u.multi.pool->head_dim;
    }
    return 0;
}

void fx_kv_step_store(const struct fx_kv_step *s, const struct fx_kernels *k, int il, int64_t i,
                      int g, const float *key, const float *value) {
    int32_t pos = fx_kv_step_pos(s, i);
    struct kv_place pk = place(s, il, i, g, pos, false), pv = place(s, il, i, g, pos, true);
    /* The key a block of 32 elements at a time (kv_store encodes each block alone, so the pieces
     * are the row's bytes) into its slot of the tile. */
    int64_t dim = head_dim(s, false);
    for (int64_t e0 = 0; e0 < dim; e0 += FX_QK) {
        uint8_t part[FX_QK * sizeof(float)];
        int64_t n = dim - e0 < FX_QK ? dim - e0 : FX_QK;
        k->kv_store(pk.type, key + e0, n, part);
        fx_kv_tile_put(pk.type, dim, pk.at, pk.slot, e0, n, part);
    }
    k->kv_store(pv.type, value, head_dim(s, true), pv.at);
}

/* Positions t0..t0+n-1 in place, group by group of 16: a key tile whose slots are the group's
 * positions in order, or value rows at one stride. Else (a group split over blocks) converted
 * segment by segment (a segment ends with its block, and for keys with its tile) into tile as
 * f32. */
static void run_rows(const struct fx_kv_step *s, const struct fx_kernels *k, int il, int64_t i,
                     int g, int32_t t0, int32_t n, int64_t dim, bool is_v, float *tile,
                     struct fx_kv_run *out) {
    struct kv_place first = place(s, il, i, g, t0, is_v);
    *out = (struct fx_kv_run){.type = first.type, .tiled = !is_v, .stride = first.stride};
    bool in_place = true;
    for (int32_t b = 0; b * 16 < n && in_place; b++) {
        struct kv_place pl = b == 0 ? first : place(s, il, i, g, t0 + 16 * b, is_v);
        out->grp[b] = pl.at;
        in_place = pl.slot == 0 && pl.run >= (n - 16 * b < 16 ? n - 16 * b : 16);
    }
    if (in_place)
        return;
    for (int32_t t = t0; t < t0 + n;) {
        struct kv_place pl = t == t0 ? first : place(s, il, i, g, t, is_v);
        int32_t seg = pl.run < t0 + n - t ? pl.run : t0 + n - t;
        float *dst = tile + (int64_t)(t - t0) * dim;
        if (is_v) {
            k->kv_load(pl.type, pl.at, pl.stride, seg, dim, dst, dim);
        } else {
            seg = seg < 16 - pl.slot ? seg : 16 - pl.slot;
            k->kv_load_tile(pl.type, pl.at, pl.slot, seg, dim, dst, dim);
        }
        t += seg;
    }
    *out = (struct fx_kv_run){.type = FX_TYPE_F32, .stride = (uint64_t)dim * sizeof(float)};
    for (int32_t b = 0; b < FX_ATTN_RUN / 16; b++)
        out->grp[b] = (const uint8_t *)(tile + (int64_t)16 * b * dim);
}

void fx_kv_step_keys(const struct fx_kv_step *s, const struct fx_kernels *k, int il, int64_t i,
                     int g, int32_t t0, int32_t n, float *tile, struct fx_kv_run *out) {
    run_rows(s, k, il, i, g, t0, n, head_dim(s, false), false, tile, out);
}

void fx_kv_step_values(const struct fx_kv_step *s, const struct fx_kernels *k, int il, int64_t i,
                       int g, int32_t t0, int32_t n, float *tile, struct fx_kv_run *out) {
    run_rows(s, k, il, i, g, t0, n, head_dim(s, true), true, tile, out);
}

void fx_kv_step_ahead(const struct fx_kv_step *s, int il, int64_t i, int g, int32_t t0, int32_t n,
                      struct fx_kv_run *keys, struct fx_kv_run *values) {
    for (int is_v = 0; is_v < 2; is_v++) {
        struct fx_kv_ahead *a = is_v ? &values->next : &keys->next;
        *a = (struct fx_kv_ahead){0};
        /* group b's value rows up to the end of its block, or the whole key tile that holds
         * its first key (a tile's slots share every line; a group that straddles blocks is
         * fetched in part, and the kernel reads the rest from memory) */
        for (int32_t b = 0; b * 16 < n; b++) {
            struct kv_place pl = place(s, il, i, g, t0 + 16 * b, is_v);
            int32_t rows = n - 16 * b < 16 ? n - 16 * b : 16;
            a->at[b] = pl.at;
            a->bytes[b] = (uint32_t)(is_v ? (uint64_t)(pl.run < rows ? pl.run : rows) * pl.stride
                                          : fx_kv_tile_bytes(pl.stride));
        }
    }
}
