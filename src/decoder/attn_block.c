/* The attention block, written once for every architecture and every KV backing:
 *
 *   xn = rms_norm(x) * attn_norm
 *   q, k, v = xn Wq^T (+bq), xn Wk^T (+bk), xn Wv^T (+bv)
 *   q, k = per-head rms_norm (qwen3, gemma3), then rope at each row's position
 *   store k, v at the row's position (where: the struct fx_kv_step)
 *   per head: s_j = scale * q . k_j over the visible keys (causal, sliding window),
 *             softcap, softmax (+ sink), att = sum_j p_j v_j
 *   h = att Wo^T (+bo), post-norm (gemma), x += h
 *
 * Attention runs in blocks of rows per KV head (each key and value row read once per block), but
 * each row's arithmetic is the same whether it arrives alone or in a batch, in the same order
 * (keys ascending), so a batched step and single steps give the same numbers. */
#include <math.h>
#include <string.h>

#include "decoder/decoder.h"

/* Biases, Q/K norms, rope, and the store of K and V, for this worker's share of rows. */
static void prepare_qkv_on_worker(const struct fx_worker *w, const struct fx_chunk *c, int il) {
    const struct fx_context *ctx = c->f->ctx;
    const struct fx_kernels *k = ctx->k;
    const struct fx_hparams *hp = &ctx->model->hp;
    const struct fx_layer *l = &ctx->model->layers[il];
    int64_t hd = hp->head_dim;
    int64_t q_dim = hp->n_head * hd, k_dim = hp->n_head_kv * hd;
    int64_t v_dim = (int64_t)hp->n_head_kv * hp->head_dim_v;
    const float *rope = ctx->s.rope[l->swa ? 1 : 0];
    int64_t b, e;
    fx_par_range(c->n, w->ith, w->nth, 1, &b, &e);
    for (int64_t i = b; i < e; i++) {
        float *q = ctx->s.q + i * q_dim, *kr = ctx->s.k + i * k_dim, *v = ctx->s.v + i * v_dim;
        if (l->bq) {
            k->add(q, q, l->bq, q_dim);
            k->add(kr, kr, l->bk, k_dim);
            k->add(v, v, l->bv, v_dim);
        }
        if (l->q_norm) {
            for (int h = 0; h < hp->n_head; h++)
                k->rms_norm(q + h * hd, q + h * hd, l->q_norm, hd, hp->rms_eps);
            for (int h = 0; h < hp->n_head_kv; h++)
                k->rms_norm(kr + h * hd, kr + h * hd, l->k_norm, hd, hp->rms_eps);
        }
        int32_t pos = fx_kv_step_pos(&c->kv, i);
        const float *cs = rope + (int64_t)pos * hp->rope.n_rot;
        k->rope(q, hp->n_head, hd, hp->rope.n_rot, hp->rope.kind, cs);
        k->rope(kr, hp->n_head_kv, hd, hp->rope.n_rot, hp->rope.kind, cs);
        for (int g = 0; g < hp->n_head_kv; g++) {
            memcpy(fx_kv_step_k(&c->kv, il, i, g, pos), kr + g * hd, (size_t)hd * sizeof(float));
            memcpy(fx_kv_step_v(&c->kv, il, i, g, pos), v + g * hp->head_dim_v,
                   (size_t)hp->head_dim_v * sizeof(float));
        }
    }
}

/* Keys scored together for every row and head of a block: 64 keys of head_dim 64..128 floats
 * (16-32 KiB) stay in L1 while they are reused. */
#define ATT_KEY_TILE 64

/* A block of query rows and the key positions each row sees. The rows of a block share one
 * sequence's cache (with the contiguous kind, every row of a step does). */
struct att_block {
    int64_t i0, n;                  /* rows i0 .. i0 + n - 1 of the chunk */
    int32_t lo[FX_ATT_BLOCK_ROWS];  /* first visible key of each row */
    int32_t pos[FX_ATT_BLOCK_ROWS]; /* its position: the last visible key */
    int32_t lo_min, pos_max;        /* the union of their ranges */
};

static void block_ranges(const struct fx_chunk *c, const struct fx_layer *l, int32_t n_swa,
                         struct att_block *b) {
    b->lo_min = INT32_MAX;
    b->pos_max = -1;
    for (int64_t r = 0; r < b->n; r++) {
        int32_t pos = fx_kv_step_pos(&c->kv, b->i0 + r);
        b->pos[r] = pos;
        b->lo[r] = l->swa && pos >= n_swa ? pos - n_swa + 1 : 0;
        if (b->lo[r] < b->lo_min)
            b->lo_min = b->lo[r];
        if (pos > b->pos_max)
            b->pos_max = pos;
    }
}

/* Attention of one KV head's query heads for one block of rows. Each key and value row is read
 * once for the whole block (rows x heads of the group); every score is the same dot product, and
 * every output sums its values in ascending key order, exactly as for a block of one row, so a
 * row's result does not depend on the rows it is batched with.
 * scores: [n rows][group][n_ctx], one line per (row, head), indexed from the row's first key. */
static void attend_group(const struct fx_context *ctx, const struct fx_chunk *c, int il, int g,
                         const struct att_block *b, float *scores) {
    const struct fx_kernels *k = ctx->k;
    const struct fx_hparams *hp = &ctx->model->hp;
    const struct fx_layer *l = &ctx->model->layers[il];
    int64_t hd = hp->head_dim, hd_v = hp->head_dim_v;
    int64_t q_dim = hp->n_head * hd, att_dim = hp->n_head * hd_v;
    int group = hp->n_head / hp->n_head_kv;
    int64_t line = ctx->n_ctx;

    /* Scores, a tile of keys at a time so that the tile stays in L1 while every row and head
     * of the block reads it. */
    int64_t k_stride = fx_kv_step_k_stride(&c->kv, b->i0);
    for (int32_t t0 = b->lo_min; t0 <= b->pos_max; t0 += ATT_KEY_TILE) {
        int32_t t1 = t0 + ATT_KEY_TILE - 1 < b->pos_max ? t0 + ATT_KEY_TILE - 1 : b->pos_max;
        for (int64_t r = 0; r < b->n; r++) {
            int32_t j0 = t0 > b->lo[r] ? t0 : b->lo[r], j1 = t1 < b->pos[r] ? t1 : b->pos[r];
            if (j0 > j1)
                continue;
            const float *keys = fx_kv_step_k(&c->kv, il, b->i0, g, j0);
            const float *q = ctx->s.q + (b->i0 + r) * q_dim + (int64_t)g * group * hd;
            for (int hh = 0; hh < group; hh++)
                k->attn_scores(scores + (r * group + hh) * line + (j0 - b->lo[r]), q + hh * hd,
                               keys, k_stride, j1 - j0 + 1, hd, hp->attn_scale);
        }
    }
    for (int64_t r = 0; r < b->n; r++) {
        int64_t n_keys = b->pos[r] - b->lo[r] + 1;
        for (int hh = 0; hh < group; hh++) {
            float *sc = scores + (r * group + hh) * line;
            if (hp->attn_softcap > 0.0f)
                k->softcap(sc, n_keys, hp->attn_softcap);
            int h = g * group + hh;
            k->softmax(sc, n_keys, l->sinks ? l->sinks[h] : -INFINITY);
            memset(ctx->s.att + (b->i0 + r) * att_dim + h * hd_v, 0, (size_t)hd_v * sizeof(float));
        }
    }
    int64_t v_stride = fx_kv_step_v_stride(&c->kv, b->i0);
    for (int32_t t0 = b->lo_min; t0 <= b->pos_max; t0 += ATT_KEY_TILE) {
        int32_t t1 = t0 + ATT_KEY_TILE - 1 < b->pos_max ? t0 + ATT_KEY_TILE - 1 : b->pos_max;
        for (int64_t r = 0; r < b->n; r++) {
            int32_t j0 = t0 > b->lo[r] ? t0 : b->lo[r], j1 = t1 < b->pos[r] ? t1 : b->pos[r];
            if (j0 > j1)
                continue;
            const float *values = fx_kv_step_v(&c->kv, il, b->i0, g, j0);
            float *out = ctx->s.att + (b->i0 + r) * att_dim + (int64_t)g * group * hd_v;
            k->attn_values(out, hd_v, scores + r * group * line + (j0 - b->lo[r]), line, group,
                           values, v_stride, j1 - j0 + 1, hd_v);
        }
    }
}

/* This worker's share of the (KV head, block of rows) pairs. */
static void attend_on_worker(const struct fx_worker *w, const struct fx_chunk *c, int il) {
    const struct fx_context *ctx = c->f->ctx;
    const struct fx_hparams *hp = &ctx->model->hp;
    const struct fx_layer *l = &ctx->model->layers[il];
    int64_t n_blocks = (c->n + FX_ATT_BLOCK_ROWS - 1) / FX_ATT_BLOCK_ROWS;
    float *scores = ctx->s.scores + (int64_t)w->ith * ctx->scores_per_worker;
    int64_t b, e;
    fx_par_range(n_blocks * hp->n_head_kv, w->ith, w->nth, 1, &b, &e);
    for (int64_t item = b; item < e; item++) {
        struct att_block blk;
        blk.i0 = item / hp->n_head_kv * FX_ATT_BLOCK_ROWS;
        blk.n = c->n - blk.i0 < FX_ATT_BLOCK_ROWS ? c->n - blk.i0 : FX_ATT_BLOCK_ROWS;
        block_ranges(c, l, hp->n_swa, &blk);
        attend_group(ctx, c, il, (int)(item % hp->n_head_kv), &blk, scores);
    }
}

void fx_attn_block_on_worker(const struct fx_worker *w, const struct fx_chunk *c, int il) {
    const struct fx_context *ctx = c->f->ctx;
    const struct fx_hparams *hp = &ctx->model->hp;
    const struct fx_layer *l = &ctx->model->layers[il];
    const struct fx_scratch *s = &ctx->s;
    int64_t dim = hp->n_embd, n = c->n;
    int64_t att_dim = (int64_t)hp->n_head * hp->head_dim_v;

    const struct fx_mat *qkv[3] = {&l->wq, &l->wk, &l->wv};
    float *qkv_out[3] = {s->q, s->k, s->v};
    fx_dec_norm_input_on_worker(w, ctx, s->xn, s->x, l->attn_norm, n, dim, 3, qkv);
    fx_dec_dump(w, c, "attn_norm", il, s->xn, n, dim);
    fx_dec_matmuls_on_worker(w, ctx, s->xn, n, dim, 3, qkv, qkv_out);

    prepare_qkv_on_worker(w, c, il);
    fx_par_barrier(w);
    fx_dec_dump(w, c, "q", il, s->q, n, (int64_t)hp->n_head * hp->head_dim);
    fx_dec_dump(w, c, "k", il, s->k, n, (int64_t)hp->n_head_kv * hp->head_dim);
    fx_dec_dump(w, c, "v", il, s->v, n, (int64_t)hp->n_head_kv * hp->head_dim_v);

    attend_on_worker(w, c, il);
    fx_par_barrier(w);
    fx_dec_dump(w, c, "attn_out", il, s->att, n, att_dim);

    /* Heads of one row were written by several workers: quantize after the barrier. */
    const struct fx_mat *wo[1] = {&l->wo};
    float *wo_out[1] = {s->h};
    int64_t b, e;
    fx_dec_own_rows(w, n, &b, &e);
    fx_dec_quantize_rows(ctx, s->att, b, e, att_dim, 1, wo);
    fx_par_barrier(w);
    fx_dec_matmuls_on_worker(w, ctx, s->att, n, att_dim, 1, wo, wo_out);

    for (int64_t i = b; i < e; i++) {
        float *h = s->h + i * dim;
        if (l->bo)
            ctx->k->add(h, h, l->bo, dim);
        if (l->post_attn_norm)
            ctx->k->rms_norm(h, h, l->post_attn_norm, dim, hp->rms_eps);
        ctx->k->add(s->x + i * dim, s->x + i * dim, h, dim);
    }
    fx_dec_dump(w, c, "ffn_inp", il, s->x, n, dim);
}
