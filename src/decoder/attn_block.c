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
 * Each row's attention is computed by the same code whether it arrives alone or in a batch, in
 * the same order (keys ascending), so a batched step and single steps give the same numbers. */
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
        memcpy(fx_kv_step_k(&c->kv, il, i, pos), kr, (size_t)k_dim * sizeof(float));
        memcpy(fx_kv_step_v(&c->kv, il, i, pos), v, (size_t)v_dim * sizeof(float));
    }
}

/* att[i][h] for this worker's share of the (row, head) pairs. */
static void attend_on_worker(const struct fx_worker *w, const struct fx_chunk *c, int il) {
    const struct fx_context *ctx = c->f->ctx;
    const struct fx_kernels *k = ctx->k;
    const struct fx_hparams *hp = &ctx->model->hp;
    const struct fx_layer *l = &ctx->model->layers[il];
    fx_vec_dot_fn dot = k->types[FX_TYPE_F32].vec_dot;
    int64_t hd = hp->head_dim, hd_v = hp->head_dim_v;
    int64_t q_dim = hp->n_head * hd, att_dim = hp->n_head * hd_v;
    int group = hp->n_head / hp->n_head_kv;
    float *scores = ctx->s.scores + (int64_t)w->ith * ctx->n_ctx;
    int64_t b, e;
    fx_par_range(c->n * hp->n_head, w->ith, w->nth, 1, &b, &e);
    for (int64_t item = b; item < e; item++) {
        int64_t i = item / hp->n_head;
        int h = (int)(item % hp->n_head), g = h / group;
        const float *q = ctx->s.q + i * q_dim + h * hd;
        int32_t pos = fx_kv_step_pos(&c->kv, i);
        int32_t lo = l->swa && pos >= hp->n_swa ? pos - hp->n_swa + 1 : 0;
        int64_t n_keys = pos - lo + 1;
        for (int64_t j = 0; j < n_keys; j++) {
            float s;
            dot(hd, &s, fx_kv_step_k(&c->kv, il, i, lo + j) + g * hd, q);
            scores[j] = s * hp->attn_scale;
        }
        if (hp->attn_softcap > 0.0f)
            k->softcap(scores, n_keys, hp->attn_softcap);
        k->softmax(scores, n_keys, l->sinks ? l->sinks[h] : -INFINITY);
        float *out = ctx->s.att + i * att_dim + h * hd_v;
        memset(out, 0, (size_t)hd_v * sizeof(float));
        for (int64_t j = 0; j < n_keys; j++)
            k->axpy(out, fx_kv_step_v(&c->kv, il, i, lo + j) + g * hd_v, scores[j], hd_v);
    }
}

void fx_attn_block_on_worker(const struct fx_worker *w, const struct fx_chunk *c, int il) {
    const struct fx_context *ctx = c->f->ctx;
    const struct fx_hparams *hp = &ctx->model->hp;
    const struct fx_layer *l = &ctx->model->layers[il];
    const struct fx_scratch *s = &ctx->s;
    int64_t dim = hp->n_embd, n = c->n;

    fx_dec_norm_rows_on_worker(w, ctx, s->xn, s->x, l->attn_norm, n, dim);
    fx_par_barrier(w);
    fx_dec_dump(w, c, "attn_norm", il, s->xn, n, dim);

    const struct fx_mat *qkv[3] = {&l->wq, &l->wk, &l->wv};
    float *qkv_out[3] = {s->q, s->k, s->v};
    fx_dec_project_on_worker(w, ctx, s->xn, n, dim, 3, qkv, qkv_out);

    prepare_qkv_on_worker(w, c, il);
    fx_par_barrier(w);
    fx_dec_dump(w, c, "q", il, s->q, n, (int64_t)hp->n_head * hp->head_dim);
    fx_dec_dump(w, c, "k", il, s->k, n, (int64_t)hp->n_head_kv * hp->head_dim);
    fx_dec_dump(w, c, "v", il, s->v, n, (int64_t)hp->n_head_kv * hp->head_dim_v);

    attend_on_worker(w, c, il);
    fx_par_barrier(w);
    int64_t att_dim = (int64_t)hp->n_head * hp->head_dim_v;
    fx_dec_dump(w, c, "attn_out", il, s->att, n, att_dim);

    const struct fx_mat *wo[1] = {&l->wo};
    float *wo_out[1] = {s->h};
    fx_dec_project_on_worker(w, ctx, s->att, n, att_dim, 1, wo, wo_out);

    int64_t b, e;
    fx_par_range(n, w->ith, w->nth, 1, &b, &e);
    for (int64_t i = b; i < e; i++) {
        float *h = s->h + i * dim;
        if (l->bo)
            ctx->k->add(h, h, l->bo, dim);
        if (l->post_attn_norm)
            ctx->k->rms_norm(h, h, l->post_attn_norm, dim, hp->rms_eps);
        ctx->k->add(s->x + i * dim, s->x + i * dim, h, dim);
    }
    fx_par_barrier(w);
    fx_dec_dump(w, c, "ffn_inp", il, s->x, n, dim);
}
