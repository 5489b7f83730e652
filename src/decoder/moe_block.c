/* The mixture-of-experts feed-forward block (qwen3moe, gpt-oss, mixtral-style llama):
 *
 *   xn = rms_norm(x) * ffn_norm
 *   route each row: router logits (+ bias), pick n_expert_used experts and their weights
 *   group the (row, expert) selections by expert, so that each expert's weights are read once
 *   per step for all the rows that chose it
 *   per selection: a = act(xn Wgate_e^T + bg_e) * (xn Wup_e^T + bu_e); y = a Wdown_e^T + bd_e
 *   x += sum over the row's selections (best first) of weight * y
 *   qwen35moe: x += sigmoid(xn . shexp_gate_inp) * shared expert (a dense gated FFN) of xn
 *
 * A row's result does not depend on the other rows of the step: the grouping only decides which
 * activation rows a matmul reads, and every sum runs in the same order. */
#include <math.h>
#include <string.h>

#include "decoder/decoder.h"

/* The index of the largest of x[0..n) not yet taken, ties to the lowest index. */
static int32_t take_best(const float *x, int32_t n, uint8_t *taken) {
    int32_t best = -1;
    for (int32_t e = 0; e < n; e++)
        if (!taken[e] && (best < 0 || x[e] > x[best]))
            best = e;
    taken[best] = 1;
    return best;
}

/* Selects row i's experts and weights from its router logits (in place: logits become
 * probabilities for FX_ROUTER_SOFTMAX_TOPK). */
static void route_row(const struct fx_context *ctx, const struct fx_layer *l, int64_t i) {
    const struct fx_hparams *hp = &ctx->model->hp;
    int32_t n_exp = hp->n_expert, k_used = hp->n_expert_used;
    float *logits = ctx->s.router + i * n_exp;
    int32_t *sel = ctx->s.sel + i * k_used;
    float *sel_w = ctx->s.sel_w + i * k_used;
    uint8_t taken[FX_MAX_EXPERTS];
    memset(taken, 0, (size_t)n_exp);
    if (l->router_b)
        ctx->k->add(logits, logits, l->router_b, n_exp);
    if (hp->router == FX_ROUTER_SOFTMAX_TOPK)
        ctx->k->softmax(logits, n_exp, -INFINITY);
    for (int32_t k = 0; k < k_used; k++) {
        sel[k] = take_best(logits, n_exp, taken);
        sel_w[k] = logits[sel[k]];
    }
    if (hp->router == FX_ROUTER_TOPK_SOFTMAX)
        ctx->k->softmax(sel_w, k_used, -INFINITY);
    if (hp->expert_weights_norm) {
        float sum = 0.0f;
        for (int32_t k = 0; k < k_used; k++)
            sum += sel_w[k];
        /* The floor keeps a row whose selected probabilities all underflow finite (as llama.cpp
         * clamps the sum). */
        sum = fmaxf(sum, 6.103515625e-5f);
        for (int32_t k = 0; k < k_used; k++)
            sel_w[k] /= sum;
    }
}

/* Counting sort of the step's selections by expert: slots of expert e are
 * expert_off[e]..expert_off[e+1]-1, in row order. */
static void group_by_expert(const struct fx_context *ctx, int64_t n) {
    const struct fx_hparams *hp = &ctx->model->hp;
    const struct fx_scratch *s = &ctx->s;
    int32_t n_exp = hp->n_expert, k_used = hp->n_expert_used;
    memset(s->expert_off, 0, (size_t)(n_exp + 1) * sizeof(int32_t));
    for (int64_t i = 0; i < n * k_used; i++)
        s->expert_off[s->sel[i] + 1]++;
    for (int32_t e = 0; e < n_exp; e++)
        s->expert_off[e + 1] += s->expert_off[e];
    /* expert_off[e] serves as expert e's cursor while slots are handed out, which leaves it at
     * the start of expert e + 1; the shift below restores the offsets. */
    for (int64_t i = 0; i < n; i++)
        for (int32_t k = 0; k < k_used; k++) {
            int32_t e = s->sel[i * k_used + k];
            int32_t slot = s->expert_off[e]++;
            s->slot[i * k_used + k] = slot;
            s->slot_row[slot] = (int32_t)i;
            s->slot_expert[slot] = e;
        }
    for (int32_t e = n_exp; e > 0; e--)
        s->expert_off[e] = s->expert_off[e - 1];
    s->expert_off[0] = 0;
}

/* out rows of every expert's slots = act rows of those slots times the expert's matrix. No
 * barrier. */
static void experts_matmul_on_worker(const struct fx_worker *w, const struct fx_context *ctx,
                                     const struct fx_experts *x, const float *src, int64_t n_in,
                                     float *out) {
    const struct fx_scratch *s = &ctx->s;
    for (int64_t e = 0; e < x->n_expert; e++) {
        int64_t r0 = s->expert_off[e], nr = s->expert_off[e + 1] - r0;
        if (nr == 0)
            continue;
        struct fx_mat m = fx_experts_get(x, e);
        uint64_t stride;
        const void *act = fx_dec_act_rows(ctx, m.type, src, n_in, r0, &stride);
        fx_matmul(ctx->k, &m, act, stride, nr, out + r0 * m.ne1, m.ne1, w->ith, w->nth,
                  fx_dec_act_meta(ctx, m.type, n_in, r0));
    }
}

/* rows[r] += bias[expert of slot r] for this worker's share of slots. */
static void add_expert_bias(const struct fx_context *ctx, float *rows, const float *bias,
                            int64_t dim, int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; r++)
        ctx->k->add(rows + r * dim, rows + r * dim, bias + (int64_t)ctx->s.slot_expert[r] * dim,
                    dim);
}

/* The shared expert of every row, from the gate and up projections already in gate and up
 * ([n][n_ff_shexp]) and the gate logit in shexp ([n]): h = sigmoid(logit) * down(act(gate) * up),
 * which the routed experts leave alone until it is added. The matmul's barrier ends every read
 * of gate and up before the routed experts write them. */
static void shared_expert_on_worker(const struct fx_worker *w, const struct fx_chunk *c,
                                    const struct fx_layer *l) {
    const struct fx_context *ctx = c->f->ctx;
    const struct fx_scratch *s = &ctx->s;
    int64_t dim = ctx->model->hp.n_embd, ff = ctx->model->hp.n_ff_shexp, n = c->n;
    const struct fx_mat *down[1] = {&l->shexp_down};
    float *down_out[1] = {s->h};
    int64_t b, e;
    fx_dec_own_rows(w, n, &b, &e);
    fx_dec_gated_act_rows(ctx, s->gate, s->up, ff, b, e);
    fx_dec_quantize_rows(ctx, s->gate, b, e, ff, 1, down);
    fx_par_barrier(w);
    fx_dec_matmuls_on_worker(w, ctx, s->gate, n, ff, 1, down, down_out);
    for (int64_t i = b; i < e; i++) {
        float g;
        ctx->k->act[FX_ACT_SIGMOID](&g, s->shexp + i, 1);
        ctx->k->scale(s->h + i * dim, s->h + i * dim, g, dim);
    }
}

void fx_moe_block_on_worker(const struct fx_worker *w, const struct fx_chunk *c, int il) {
    const struct fx_context *ctx = c->f->ctx;
    const struct fx_hparams *hp = &ctx->model->hp;
    const struct fx_layer *l = &ctx->model->layers[il];
    const struct fx_scratch *s = &ctx->s;
    int64_t dim = hp->n_embd, n_ff = hp->n_ff_exp, n = c->n;
    int64_t n_slots = n * hp->n_expert_used;
    int64_t b, e;

    /* The router and, when the layer has one, the shared expert's gate and input projections. */
    const struct fx_mat *router[4] = {&l->router, &l->shexp_gate_inp, &l->shexp_gate, &l->shexp_up};
    float *router_out[4] = {s->router, s->shexp, s->gate, s->up};
    int n_router = l->shexp_gate.data ? 4 : 1;
    fx_dec_norm_input_on_worker(w, ctx, s->xn, s->x, l->ffn_norm, n, dim, n_router, router);
    fx_dec_dump(w, c, "ffn_norm", il, s->xn, n, dim);
    fx_dec_matmuls_on_worker(w, ctx, s->xn, n, dim, n_router, router, router_out);
    if (l->shexp_gate.data)
        shared_expert_on_worker(w, c, l);

    fx_dec_own_rows(w, n, &b, &e);
    for (int64_t i = b; i < e; i++)
        route_row(ctx, l, i);
    fx_par_barrier(w);
    if (w->ith == 0)
        group_by_expert(ctx, n);
    fx_par_barrier(w);

    /* Each worker gathers and quantizes its share of the grouped slots. */
    const struct fx_mat *gate_up[2] = {&l->gate_exps.per, &l->up_exps.per};
    fx_par_range(n_slots, w->ith, w->nth, 1, &b, &e);
    for (int64_t r = b; r < e; r++)
        memcpy(s->xg + r * dim, s->xn + (int64_t)s->slot_row[r] * dim, (size_t)dim * sizeof(float));
    fx_dec_quantize_rows(ctx, s->xg, b, e, dim, 2, gate_up);
    fx_par_barrier(w);
    experts_matmul_on_worker(w, ctx, &l->gate_exps, s->xg, dim, s->gate);
    experts_matmul_on_worker(w, ctx, &l->up_exps, s->xg, dim, s->up);
    fx_par_barrier(w);

    const struct fx_mat *down[1] = {&l->down_exps.per};
    if (l->gate_exps_b) {
        add_expert_bias(ctx, s->gate, l->gate_exps_b, n_ff, b, e);
        add_expert_bias(ctx, s->up, l->up_exps_b, n_ff, b, e);
    }
    fx_dec_gated_act_rows(ctx, s->gate, s->up, n_ff, b, e);
    fx_dec_quantize_rows(ctx, s->gate, b, e, n_ff, 1, down);
    fx_par_barrier(w);
    experts_matmul_on_worker(w, ctx, &l->down_exps, s->gate, n_ff, s->yg);
    fx_par_barrier(w);

    if (l->down_exps_b) {
        add_expert_bias(ctx, s->yg, l->down_exps_b, dim, b, e);
        fx_par_barrier(w);
    }
    fx_dec_own_rows(w, n, &b, &e);
    for (int64_t i = b; i < e; i++) {
        for (int32_t k = 0; k < hp->n_expert_used; k++) {
            int64_t slot = s->slot[i * hp->n_expert_used + k];
            ctx->k->axpy(s->x + i * dim, s->yg + slot * dim, s->sel_w[i * hp->n_expert_used + k],
                         dim);
        }
        if (l->shexp_gate.data)
            ctx->k->add(s->x + i * dim, s->x + i * dim, s->h + i * dim, dim);
    }
    fx_dec_dump(w, c, "l_out", il, s->x, n, dim);
}
