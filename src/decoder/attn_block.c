/* The attention block, written once for every architecture and every KV backing:
 *
 *   xn = rms_norm(x) * attn_norm
 *   q, k, v = xn Wq^T (+bq), xn Wk^T (+bk), xn Wv^T (+bv)
 *     (qwen35: xn Wq^T is [q | gate] per head, and q is taken out of it)
 *   q, k = per-head rms_norm (qwen3, gemma3, qwen35), then rope at each row's position
 *   store k, v at the row's position (where: the struct fx_kv_step)
 *   per head: s_j = scale * q . k_j over the visible keys (causal, sliding window),
 *             softcap, softmax (+ sink), att = sum_j p_j v_j
 *   att *= sigmoid(gate) per head (qwen35)
 *   h = att Wo^T (+bo), post-norm (gemma), x += h
 *
 * Attention is an online softmax over runs of keys cut at fixed absolute positions, so each
 * row's arithmetic is the same whether it arrives alone or in a batch: a batched step and
 * single steps give the same numbers. */
#include <math.h>
#include <string.h>

#include "decoder/decoder.h"

/* Biases, Q/K norms, rope, and the store of K and V, for rows [i0, i1) and KV heads [g0, g1)
 * with the query heads that share them. Each operation is elementwise or acts on one head of one
 * row, so any split of the rows and heads gives the same bits. */
static void prepare_qkv(const struct fx_chunk *c, int il, int64_t i0, int64_t i1, int g0, int g1) {
    const struct fx_context *ctx = c->f->ctx;
    const struct fx_kernels *k = ctx->k;
    const struct fx_hparams *hp = &ctx->model->hp;
    const struct fx_layer *l = &ctx->model->layers[il];
    int64_t hd = hp->head_dim, hd_v = hp->head_dim_v;
    int64_t q_dim = hp->n_head * hd, k_dim = hp->n_head_kv * hd, v_dim = hp->n_head_kv * hd_v;
    int group = hp->n_head / hp->n_head_kv, h0 = g0 * group, h1 = g1 * group;
    const float *rope = ctx->s.rope[l->swa ? 1 : 0];
    for (int64_t i = i0; i < i1; i++) {
        float *q = ctx->s.q + i * q_dim, *kr = ctx->s.k + i * k_dim, *v = ctx->s.v + i * v_dim;
        if (l->attn_out_gate) /* head h of qg's row is [q | gate] */
            for (int h = h0; h < h1; h++)
                memcpy(q + h * hd, ctx->s.qg + i * 2 * q_dim + h * 2 * hd,
                       (size_t)hd * sizeof(float));
        if (l->bq) {
            k->add(q + h0 * hd, q + h0 * hd, l->bq + h0 * hd, (h1 - h0) * hd);
            k->add(kr + g0 * hd, kr + g0 * hd, l->bk + g0 * hd, (g1 - g0) * hd);
            k->add(v + g0 * hd_v, v + g0 * hd_v, l->bv + g0 * hd_v, (g1 - g0) * hd_v);
        }
        if (l->q_norm) {
            for (int h = h0; h < h1; h++)
                k->rms_norm(q + h * hd, q + h * hd, l->q_norm, hd, hp->rms_eps);
            for (int g = g0; g < g1; g++)
                k->rms_norm(kr + g * hd, kr + g * hd, l->k_norm, hd, hp->rms_eps);
        }
        int32_t pos = fx_kv_step_pos(&c->kv, i);
        const float *cs = rope + (int64_t)pos * hp->rope.n_rot;
        k->rope(q + h0 * hd, h1 - h0, hd, hp->rope.n_rot, hp->rope.kind, cs);
        k->rope(kr + g0 * hd, g1 - g0, hd, hp->rope.n_rot, hp->rope.kind, cs);
        for (int g = g0; g < g1; g++)
            fx_kv_step_store(&c->kv, k, l->kv_il, i, g, kr + g * hd, v + g * hd_v);
    }
}

static void block_keys(const struct fx_context *ctx, const struct fx_chunk *c, int il, int64_t i0,
                       int64_t n, struct fx_block_keys *bk) {
    const struct fx_hparams *hp = &ctx->model->hp;
    const struct fx_layer *l = &ctx->model->layers[il];
    bk->lo_min = INT32_MAX, bk->pos_max = -1;
    for (int64_t r = 0; r < n; r++) {
        bk->pos[r] = fx_kv_step_pos(&c->kv, i0 + r);
        bk->lo[r] = l->swa && bk->pos[r] >= hp->n_swa ? bk->pos[r] - hp->n_swa + 1 : 0;
        bk->lo_min = bk->lo[r] < bk->lo_min ? bk->lo[r] : bk->lo_min;
        bk->pos_max = bk->pos[r] > bk->pos_max ? bk->pos[r] : bk->pos_max;
    }
}

void fx_dec_attend_runs(const struct fx_kernels *k, const struct fx_kv_step *s, int kl, int64_t i0,
                        int g, int64_t n, const struct fx_block_keys *bk, float *tile,
                        int64_t tile_dim, float scale, float softcap,
                        const struct fx_kv_ahead *after, struct fx_attn_state *st) {
    const int32_t *lo = bk->lo, *pos = bk->pos;
    int32_t pos_max = bk->pos_max;
    for (int32_t t0 = bk->lo_min / FX_ATTN_RUN * FX_ATTN_RUN; t0 <= pos_max; t0 += FX_ATTN_RUN) {
        int32_t first[FX_ATT_BLOCK_ROWS], last[FX_ATT_BLOCK_ROWS], n_keys = 0;
        for (int64_t r = 0; r < n; r++) { /* this run's keys row r sees, from t0 */
            first[r] = (t0 > lo[r] ? t0 : lo[r]) - t0;
            last[r] = (t0 + FX_ATTN_RUN - 1 < pos[r] ? t0 + FX_ATTN_RUN - 1 : pos[r]) - t0;
            if (first[r] <= last[r] && last[r] + 1 > n_keys)
                n_keys = last[r] + 1;
        }
        if (n_keys == 0)
            continue;
        struct fx_kv_run keys, values;
        fx_kv_step_keys(s, k, kl, i0, g, t0, n_keys, tile, &keys);
        fx_kv_step_values(s, k, kl, i0, g, t0, n_keys, tile + FX_ATTN_RUN * tile_dim, &values);
        int32_t next = pos_max - (t0 + FX_ATTN_RUN) + 1;
        if (next > 0) {
            fx_kv_step_ahead(s, kl, i0, g, t0 + FX_ATTN_RUN,
                             next < FX_ATTN_RUN ? next : FX_ATTN_RUN, &keys, &values);
        } else if (after) {
            keys.next = after[0];
            values.next = after[1];
        }
        k->attn_run(st, first, last, &keys, &values, n_keys, scale, softcap);
    }
}

/* Attention of the query heads that share KV head g, for a block of rows (online softmax,
 * fx_dec_attend_runs), into the step's attention output. state: the worker's fx_attn_state
 * memory; tile: its runs' floats; bk: the block's positions (block_keys). */
static void attend_block(const struct fx_context *ctx, const struct fx_chunk *c, int il, int g,
                         int64_t i0, int64_t n, const struct fx_block_keys *bk, float *state,
                         float *tile, const struct fx_kv_ahead *after) {
    const struct fx_kernels *k = ctx->k;
    const struct fx_hparams *hp = &ctx->model->hp;
    const struct fx_layer *l = &ctx->model->layers[il];
    int64_t hd = hp->head_dim, hd_v = hp->head_dim_v;
    int group = hp->n_head / hp->n_head_kv;
    struct fx_attn_state st;
    k->attn_begin(&st, state, ctx->s.q + i0 * hp->n_head * hd + (int64_t)g * group * hd,
                  hp->n_head * hd, n, group, hd, hd_v);
    fx_dec_attend_runs(k, &c->kv, l->kv_il, i0, g, n, bk, tile, ctx->kv_tile_dim, hp->attn_scale,
                       hp->attn_softcap, after, &st);
    for (int64_t r = 0; r < n; r++) {
        float *out = ctx->s.att + (i0 + r) * hp->n_head * hd_v + (int64_t)g * group * hd_v;
        k->attn_finish(out, hd_v, st.acc + r * group * hd_v, st.m + r * group, st.l + r * group,
                       l->sinks ? l->sinks + g * group : NULL, group, hd_v);
    }
}

/* Ticket `claimed` of a layer's attention loop as its (block of rows, KV head) pair: causal rows
 * cost in proportion to their position, so the last blocks go first and the cheap early ones
 * fill the end. */
struct attn_item {
    int64_t i0, n;
    int g;
};

static struct attn_item attn_item(const struct fx_context *ctx, int64_t n_items, int64_t claimed) {
    int64_t n_kv = ctx->model->hp.n_head_kv, item = n_items - 1 - claimed, blk = item / n_kv;
    int64_t i0 = ctx->s.att_start[blk];
    return (struct attn_item){i0, ctx->s.att_start[blk + 1] - i0, (int)(item % n_kv)};
}

/* after[0..1]: where the keys and values of the first run of item it lie (fx_kv_step_ahead). */
static void first_run_ahead(const struct fx_context *ctx, const struct fx_chunk *c, int il,
                            struct attn_item it, struct fx_kv_ahead *after) {
    struct fx_block_keys bk;
    block_keys(ctx, c, il, it.i0, it.n, &bk);
    int32_t t0 = bk.lo_min / FX_ATTN_RUN * FX_ATTN_RUN, n = bk.pos_max - t0 + 1;
    struct fx_kv_run keys, values;
    fx_kv_step_ahead(&c->kv, ctx->model->layers[il].kv_il, it.i0, it.g, t0,
                     n < FX_ATTN_RUN ? n : FX_ATTN_RUN, &keys, &values);
    after[0] = keys.next;
    after[1] = values.next;
}

/* Blocks whose keys span at most this many runs hold the worker's next ticket (below): their
 * first run's wait is a large share of them, and the held ticket costs the other workers at most
 * one short block of balance. Longer blocks (depth) claim as they finish, so that a worker the
 * machine slows down keeps nothing from the others. */
#define HOLD_MAX_RUNS 4

/* This worker's share of the (block of rows, KV head) pairs, claimed dynamically (a worker the
 * machine slows down takes fewer), each prepared first when the chunk allows
 * (prepare_in_attention). While it works on a short block, a worker holds its next ticket, so
 * that the next block's first keys and values are on their way from memory when it starts: with
 * many sequences of short depth (a decode step of 16), a block is two or three runs, and its
 * first run's wait was the kernel's largest. (When the next block is prepared in the attention,
 * its newest key is stored after that request, by the same worker: a prefetch is only a hint.) */
static void attend_on_worker(const struct fx_worker *w, const struct fx_chunk *c, int il) {
    const struct fx_context *ctx = c->f->ctx;
    const struct fx_hparams *hp = &ctx->model->hp;
    int64_t n_items = c->n_att * hp->n_head_kv;
    float *state = ctx->s.attn_state + (int64_t)w->ith * ctx->attn_state_per_worker;
    float *tile = ctx->s.kv_tile + (int64_t)w->ith * 2 * FX_ATTN_RUN * ctx->kv_tile_dim;
    int64_t claimed;
    for (bool more = fx_par_claim(w, n_items, &claimed); more;) {
        struct attn_item it = attn_item(ctx, n_items, claimed);
        if (c->prepare_in_attention)
            prepare_qkv(c, il, it.i0, it.i0 + it.n, it.g, it.g + 1);
        struct fx_block_keys bk;
        block_keys(ctx, c, il, it.i0, it.n, &bk);
        if (bk.pos_max / FX_ATTN_RUN - bk.lo_min / FX_ATTN_RUN >= HOLD_MAX_RUNS) {
            attend_block(ctx, c, il, it.g, it.i0, it.n, &bk, state, tile, NULL);
            more = fx_par_claim(w, n_items, &claimed);
            continue;
        }
        struct fx_kv_ahead after[2];
        more = fx_par_claim(w, n_items, &claimed);
        if (more)
            first_run_ahead(ctx, c, il, attn_item(ctx, n_items, claimed), after);
        attend_block(ctx, c, il, it.g, it.i0, it.n, &bk, state, tile, more ? after : NULL);
    }
}

void fx_attn_block_on_worker(const struct fx_worker *w, const struct fx_chunk *c, int il) {
    const struct fx_context *ctx = c->f->ctx;
    const struct fx_hparams *hp = &ctx->model->hp;
    const struct fx_layer *l = &ctx->model->layers[il];
    const struct fx_scratch *s = &ctx->s;
    const struct fx_rows *r = c->rows;
    int64_t dim = hp->n_embd, n = c->n;
    int64_t att_dim = (int64_t)hp->n_head * hp->head_dim_v;

    const struct fx_mat *qkv[3] = {&l->wq, &l->wk, &l->wv};
    float *qkv_out[3] = {l->attn_out_gate ? s->qg : s->q, s->k, s->v};
    fx_dec_norm_input_on_worker(w, ctx, r, r->xn, r->x, l->attn_norm, n, dim, 3, qkv);
    fx_dec_dump(w, c, "attn_norm", il, r->xn, n, dim);
    fx_dec_matmuls_on_worker(w, ctx, r->act, r->xn, n, dim, 3, qkv, qkv_out);

    /* Keys of a sequence are read by every later row of it: when another block may read a row's
     * keys, all of them are stored before the attention starts. */
    if (!c->prepare_in_attention) {
        int64_t b, e;
        fx_dec_own_rows(w, n, &b, &e);
        prepare_qkv(c, il, b, e, 0, hp->n_head_kv);
        fx_par_barrier(w);
    }
    attend_on_worker(w, c, il);
    fx_par_barrier(w);
    /* The attention only reads q, k and v: they are still as prepared. */
    fx_dec_dump(w, c, "q", il, s->q, n, (int64_t)hp->n_head * hp->head_dim);
    fx_dec_dump(w, c, "k", il, s->k, n, (int64_t)hp->n_head_kv * hp->head_dim);
    fx_dec_dump(w, c, "v", il, s->v, n, (int64_t)hp->n_head_kv * hp->head_dim_v);
    fx_dec_dump(w, c, "attn_out", il, s->att, n, att_dim);

    /* Heads of one row were written by several workers: gate and quantize after the barrier. */
    const struct fx_mat *wo[1] = {&l->wo};
    float *wo_out[1] = {s->h};
    const float *att = s->att;
    int64_t b, e;
    fx_dec_rows_range(w, r, n, &b, &e);
    if (l->attn_out_gate) {
        for (int64_t i = b; i < e; i++)
            for (int h = 0; h < hp->n_head; h++) {
                int64_t at = i * att_dim + (int64_t)h * hp->head_dim_v;
                const float *gate = s->qg + (i * 2 * hp->n_head + 2 * h + 1) * hp->head_dim;
                ctx->k->glu[FX_ACT_SIGMOID](r->att + at, gate, s->att + at, hp->head_dim_v);
            }
        att = r->att;
    }
    fx_dec_quantize_rows(ctx, r->act, att, b, e, att_dim, 1, wo);
    fx_dec_rows_done(w, r);
    fx_dec_matmuls_on_worker(w, ctx, r->act, att, n, att_dim, 1, wo, wo_out);

    fx_dec_add_output_rows(ctx, r, l->bo, l->post_attn_norm, b, e);
    fx_dec_dump(w, c, "ffn_inp", il, r->x, n, dim);
}
