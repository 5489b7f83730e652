/* The step descriptor's reads and writes (kv/kv.h): one body for every backing, which differ only
 * in where a (layer, head, position) row lives. */
#include "kv/kv.h"

#include "core/error.h"
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

/* Where row i's key (is_v: value) row of head g at position pos lives, its type and the bytes
 * between consecutive positions there (valid up to the end of pos's block). */
struct kv_place {
    uint8_t *row;
    enum fx_type type;
    uint64_t stride;
    int32_t run; /* positions from pos on that lie consecutively at stride */
};

static struct kv_place place(const struct fx_kv_step *s, int il, int64_t i, int g, int32_t pos,
                             bool is_v) {
    switch (s->kind) {
    case FX_KV_CONTIG: {
        const struct fx_kv_contig *kv = s->u.contig.kv;
        return is_v ? (struct kv_place){fx_kv_contig_v(kv, il, g, pos), kv->type_v, kv->v_row,
                                        kv->n_ctx - pos}
                    : (struct kv_place){fx_kv_contig_k(kv, il, g, pos), kv->type_k, kv->k_row,
                                        kv->n_ctx - pos};
    }
    case FX_KV_PAGED:
    case FX_KV_MULTI: {
        const struct fx_kv_pool *p = s->kind == FX_KV_PAGED ? s->u.paged.pool : s->u.multi.pool;
        fx_seq_id seq = s->kind == FX_KV_PAGED ? s->u.paged.seq : s->u.multi.seq[i];
        int32_t run = p->block_size - pos % p->block_size;
        return is_v ? (struct kv_place){fx_kv_pool_v(p, seq, il, g, pos), p->type_v, p->v_row, run}
                    : (struct kv_place){fx_kv_pool_k(p, seq, il, g, pos), p->type_k, p->k_row, run};
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
    k->kv_store(pk.type, key, head_dim(s, false), pk.row);
    k->kv_store(pv.type, value, head_dim(s, true), pv.row);
}

/* Rows t0..t0+n-1 in place, group by group of 16, where every group lies at one stride; else
 * converted segment by segment (a segment ends with its block) into tile as f32. */
static void run_rows(const struct fx_kv_step *s, const struct fx_kernels *k, int il, int64_t i,
                     int g, int32_t t0, int32_t n, int64_t dim, bool is_v, float *tile,
                     struct fx_kv_run *out) {
    struct kv_place first = place(s, il, i, g, t0, is_v);
    *out = (struct fx_kv_run){.type = first.type, .stride = first.stride};
    bool in_place = true;
    for (int32_t b = 0; b * 16 < n && in_place; b++) {
        struct kv_place pl = b == 0 ? first : place(s, il, i, g, t0 + 16 * b, is_v);
        out->grp[b] = pl.row;
        in_place = pl.run >= (n - 16 * b < 16 ? n - 16 * b : 16);
    }
    if (in_place)
        return;
    for (int32_t t = t0; t < t0 + n;) {
        struct kv_place pl = t == t0 ? first : place(s, il, i, g, t, is_v);
        int32_t seg = pl.run < t0 + n - t ? pl.run : t0 + n - t;
        k->kv_load(pl.type, pl.row, pl.stride, seg, dim, tile + (int64_t)(t - t0) * dim, dim);
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
        /* group b's rows up to the end of its block (a group that straddles blocks is fetched
         * in part; the kernel reads the rest from memory) */
        for (int32_t b = 0; b * 16 < n; b++) {
            struct kv_place pl = place(s, il, i, g, t0 + 16 * b, is_v);
            int32_t rows = n - 16 * b < 16 ? n - 16 * b : 16;
            a->at[b] = pl.row;
            a->bytes[b] = (uint32_t)((uint64_t)(pl.run < rows ? pl.run : rows) * pl.stride);
        }
    }
}
