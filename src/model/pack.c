/* Packing a model's weights once at load (kernels.h, "packed weights"): every matrix a forward
 * pass multiplies by gets a copy in the layout the kernel table's matmul reads fastest. Results
 * do not change (the kernels' contract), only the speed. The file pages a packed copy replaces
 * are released so that the model does not occupy memory twice; the token embedding's pages stay,
 * since lookups read its rows. */
#include <stdlib.h>

#include "core/alloc.h"
#include "core/checked.h"
#include "core/error.h"
#include "core/par.h"
#include "model/model.h"

/* One matrix (or one expert of a stack) to pack into dst. */
struct pack_item {
    struct fx_mat src;
    void *dst;
};

/* Where a packed copy goes once written: a matrix, or a stack whose experts' copies lie
 * `stride` bytes apart in one allocation. */
struct pack_target {
    struct fx_mat *w;
    struct fx_experts *x;
    void *dst;
    uint64_t stride;
    int64_t first_item, n_items; /* its items in the plan */
};

/* Every copy lies in one allocation (arena, `bytes` long): with one allocation per matrix, the
 * end of each past its last whole huge page stayed on 4 KiB pages (half of a 3.8 MB FFN matrix),
 * and the matmuls read those bytes at a TLB miss per 4 KiB (alloc.h). */
struct pack_plan {
    const struct fx_kernels *k;
    struct pack_item *items;
    struct pack_target *targets;
    int64_t n_items, n_targets;
    uint8_t *arena;
    uint64_t bytes; /* counting: the arena's size; then: how much of it is planned */
    bool counting;  /* first pass: only count */
    bool experts;   /* pack the expert stacks too */
};

static uint64_t round64(uint64_t v) {
    return (v + 63) / 64 * 64;
}

/* Plans one matrix or stack: its place in the arena, its items and its target. */
static fx_status plan_one(struct pack_plan *p, struct fx_mat *w, struct fx_experts *x,
                          struct fx_error *err) {
    const struct fx_mat *first = x ? &x->per : w;
    uint64_t bytes = first->data ? fx_mat_pack_bytes(p->k, first) : 0;
    if (bytes == 0)
        return FX_OK;
    int64_t n = x ? x->n_expert : 1;
    uint64_t stride = round64(bytes), total;
    if (fx_mul_overflow_u64(stride, (uint64_t)n, &total) ||
        fx_add_overflow_u64(p->bytes, total, &total))
        return fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET,
                            "packed weights overflow 64 bits of bytes");
    if (p->counting) {
        p->bytes = total;
        p->n_items += n;
        p->n_targets++;
        return FX_OK;
    }
    uint8_t *block = p->arena + p->bytes;
    p->bytes = total;
    int64_t first_item = p->n_items;
    for (int64_t e = 0; e < n; e++)
        p->items[p->n_items++] =
            (struct pack_item){.src = x ? fx_experts_get(x, e) : *w, .dst = block + e * stride};
    p->targets[p->n_targets++] = (struct pack_target){
        .w = w, .x = x, .dst = block, .stride = stride, .first_item = first_item, .n_items = n};
    return FX_OK;
}

/* Every matrix the decoder multiplies by. A tied output is packed on its own: the embedding it
 * shares its data with is only read by row lookups. */
static fx_status plan_model(struct pack_plan *p, struct fx_model *m, struct fx_error *err) {
    fx_status st;
    for (int il = 0; il < m->hp.n_layer + m->hp.n_nextn; il++) {
        struct fx_layer *l = &m->layers[il];
        struct fx_mat *mats[] = {&l->wq,
                                 &l->wk,
                                 &l->wv,
                                 &l->wo,
                                 &l->ffn_gate,
                                 &l->ffn_up,
                                 &l->ffn_down,
                                 &l->router,
                                 &l->ssm_qkv,
                                 &l->ssm_z,
                                 &l->ssm_beta,
                                 &l->ssm_alpha,
                                 &l->ssm_out,
                                 &l->shexp_gate,
                                 &l->shexp_up,
                                 &l->shexp_down,
                                 &l->shexp_gate_inp};
        for (size_t i = 0; i < sizeof mats / sizeof mats[0]; i++)
            if ((st = plan_one(p, mats[i], NULL, err)))
                return st;
        struct fx_experts *stacks[] = {&l->gate_exps, &l->up_exps, &l->down_exps};
        for (size_t i = 0; i < 3 && p->experts; i++)
            if ((st = plan_one(p, NULL, stacks[i], err)))
                return st;
    }
    for (int i = 0; i < m->hp.n_nextn; i++) {
        struct fx_mtp *x = &m->mtp[i];
        if ((st = plan_one(p, &x->eh_proj, NULL, err)))
            return st;
        /* A head of its own; the trunk's output is packed below and copied in after. */
        if (x->head.data != m->output.data && (st = plan_one(p, &x->head, NULL, err)))
            return st;
    }
    return plan_one(p, &m->output, NULL, err);
}

/* The items of one target, packed by all the pool's workers. */
struct pack_run {
    const struct pack_plan *p;
    int64_t i0, i1;
};

static void pack_on_worker(const struct fx_worker *wk, void *arg) {
    const struct pack_run *r = arg;
    for (int64_t i = r->i0; i < r->i1; i++)
        fx_mat_pack(r->p->k, &r->p->items[i].src, r->p->items[i].dst, wk->ith, wk->nth);
}

fx_status fx_model_pack(struct fx_model *m, const struct fx_gguf *g, bool experts,
                        struct fx_error *err) {
    struct pack_plan p = {.k = fx_kernels(), .counting = true, .experts = experts};
    fx_status st = plan_model(&p, m, err);
    if (st || p.n_items == 0)
        return st;
    p.items = calloc((size_t)p.n_items, sizeof *p.items);
    p.targets = calloc((size_t)p.n_targets, sizeof *p.targets);
    struct fx_pool *pool = NULL;
    if (!p.items || !p.targets) {
        st = fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "out of memory");
        goto done;
    }
    if (!(p.arena = fx_alloc_streamed(p.bytes))) {
        st = fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET,
                          "out of memory for %llu bytes of packed weights",
                          (unsigned long long)p.bytes);
        goto done;
    }
    m->packed = p.arena;
    p.counting = false;
    p.n_items = p.n_targets = 0;
    p.bytes = 0;
    if ((st = plan_model(&p, m, err)) || (st = fx_pool_create(0, &pool, err)))
        goto done;
    /* Target by target, each one's file pages released as soon as its copy is written: the
     * file and the packed copies are never resident in full at once. */
    for (int64_t i = 0; i < p.n_targets; i++) {
        struct pack_target *t = &p.targets[i];
        struct pack_run run = {&p, t->first_item, t->first_item + t->n_items};
        if ((st = fx_par_run(pool, pack_on_worker, &run))) {
            st =
                fx_error_set(err, st, FX_NO_OFFSET, "cannot load a model inside a parallel region");
            goto done;
        }
        struct fx_mat *w = t->x ? &t->x->per : t->w;
        bool is_embedding = w->data == m->tok_embd.data;
        uint64_t bytes =
            t->x ? t->x->expert_bytes * (uint64_t)t->x->n_expert : w->row_bytes * (uint64_t)w->ne1;
        if (!is_embedding)
            fx_gguf_release(g, w->data, bytes);
        fx_mat_set_packed(p.k, w, t->dst);
        if (t->x)
            t->x->packed_bytes = t->stride;
    }
    /* MTP heads that share the trunk's output read its packed copy. */
    for (int i = 0; i < m->hp.n_nextn; i++)
        if (m->mtp[i].head.data == m->output.data)
            m->mtp[i].head = m->output;
done:
    fx_pool_free(pool);
    free(p.items);
    free(p.targets);
    return st;
}
