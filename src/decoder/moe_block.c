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

#include "core/clock.h"
#include "core/error.h"
#include "decoder/decoder.h"
#include "model/expert_cache.h"

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

/* Experts, matmuls and rounds.
 *
 * The experts the step's rows chose are listed in xused (increasing). They are computed in
 * rounds, each a range [begin, end) of that list: one round of all of them when the experts are
 * resident; with an expert cache (ARCHITECTURE.md section 9), as many as the cache can pin at
 * once, so that a cache smaller than a step's experts still works. A round's slots are
 * expert_off[xused[begin]] .. expert_off[xused[end - 1] + 1]: whatever the rounds, every slot is
 * computed by the same code from the same rows, so the cache changes where a weight is read
 * from, never a result. */

/* Matrix `which` (0 gate, 1 up, 2 down) of used expert u: from its cache slot, or resident. */
static struct fx_mat expert_mat(const struct fx_context *ctx, const struct fx_layer *l, int il,
                                int32_t u, int which) {
    if (ctx->model->xcache)
        return fx_xcache_mat(ctx->model->xcache, ctx->s.xslots[u], il, which);
    const struct fx_experts *x[3] = {&l->gate_exps, &l->up_exps, &l->down_exps};
    return fx_experts_get(x[which], ctx->s.xused[u]);
}

/* One pass of matmuls over the used experts [u0, u1): out[i] rows of their slots = the
 * slots' input rows times matrix which[i] of each expert (the nm matrices have the same rows:
 * gate and up, or down alone), and optionally one dense matrix after them (the
 * shared expert's down projection), which then needs no barrier of its own. */
struct experts_pass {
    int nm;
    int which[2]; /* expert_mat's which: 0 gate, 1 up, 2 down */
    float *out[2];
    const float *src; /* the inputs, quantized: [slots][n_in], or the step's one row */
    int64_t n_in;
    bool one_row; /* a step of one row, which every slot reads in place (src row 0, no gather) */
    /* NULL, or the dense matrix: dense_out [dense_n][ne1] from rows dense_row0.. of dense_src
     * ([.][dense_n_in], quantized). */
    const struct fx_mat *dense;
    const float *dense_src;
    int64_t dense_n_in, dense_row0, dense_n;
    float *dense_out;
};

/* Share `part` of `parts` of the rows of every matrix of the pass: each worker its static share
 * (a split into claimed pieces of about 128 KiB was slower in a quiet window:
 * docs/PERFORMANCE.md), or (0 of 1) the whole of each. No barrier. */
static void experts_matmuls(const struct fx_context *ctx, const struct fx_layer *l, int il,
                            int32_t u0, int32_t u1, const struct experts_pass *ps, int part,
                            int parts) {
    const struct fx_scratch *s = &ctx->s;
    uint64_t stride;
    for (int32_t u = u0; u < u1; u++) {
        int64_t e = s->xused[u];
        int64_t r0 = s->expert_off[e], nr = s->expert_off[e + 1] - r0;
        int64_t src_row = ps->one_row ? 0 : r0;
        for (int i = 0; i < ps->nm; i++) {
            struct fx_mat m = expert_mat(ctx, l, il, u, ps->which[i]);
            const void *act =
                fx_dec_act_rows(ctx, &s->act, m.type, ps->src, ps->n_in, src_row, &stride);
            fx_matmul(ctx->k, &m, act, stride, nr, ps->out[i] + r0 * m.ne1, m.ne1, part, parts,
                      fx_dec_act_meta(&s->act, m.type, ps->n_in, src_row));
        }
    }
    if (ps->dense) {
        const struct fx_mat *m = ps->dense;
        const void *act = fx_dec_act_rows(ctx, &s->act, m->type, ps->dense_src, ps->dense_n_in,
                                          ps->dense_row0, &stride);
        fx_matmul(ctx->k, m, act, stride, ps->dense_n, ps->dense_out, m->ne1, part, parts,
                  fx_dec_act_meta(&s->act, m->type, ps->dense_n_in, ps->dense_row0));
    }
}

/* rows[r] += bias[expert of slot r] for this worker's share of slots. */
static void add_expert_bias(const struct fx_context *ctx, float *rows, const float *bias,
                            int64_t dim, int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; r++)
        ctx->k->add(rows + r * dim, rows + r * dim, bias + (int64_t)ctx->s.slot_expert[r] * dim,
                    dim);
}

/* The shared expert (qwen35moe) runs beside the routed experts: its gate and up projections with
 * the router, its gated activation with theirs, its down projection in their pass (into h), so
 * that it adds no barrier of its own. Its hidden rows follow the routed slots' in gate, up and
 * the activation rows, at a row (of its own width) past the last routed slot's end: rows
 * shared_row0 .. + n. Activation and metadata rows grow in proportion to the row's width, so
 * the same row index clears the routed rows in every buffer. */
static int64_t shared_row0(const struct fx_context *ctx, int64_t n) {
    const struct fx_hparams *hp = &ctx->model->hp;
    int64_t routed = n * hp->n_expert_used * hp->n_ff_exp;
    return (routed + hp->n_ff_shexp - 1) / hp->n_ff_shexp;
}

/* Lookahead: the router of layer il_next (moe_lookahead layers on) on this layer's input rows
 * (normed with that layer's norm) into router_next. h is free during an MoE block; the activation
 * rows it quantizes are rewritten before anything else reads them. Ends with a barrier. */
static void lookahead_router_on_worker(const struct fx_worker *w, const struct fx_chunk *c,
                                       int il_next) {
    const struct fx_context *ctx = c->f->ctx;
    const struct fx_layer *next = &ctx->model->layers[il_next];
    const struct fx_mat *router[1] = {&next->router};
    float *out[1] = {ctx->s.router_next};
    int64_t dim = ctx->model->hp.n_embd;
    fx_dec_norm_input_on_worker(w, ctx, c->rows, ctx->s.h, ctx->s.x, next->ffn_norm, c->n, dim, 1,
                                router);
    fx_dec_matmuls_on_worker(w, ctx, &ctx->s.act, ctx->s.h, c->n, dim, 1, router, out);
}

/* Worker 0, once the rows are grouped: lists the used experts, scores the prediction made for
 * this layer moe_lookahead layers before, and pins the first round. */
static void start_layer(const struct fx_context *ctx, int il) {
    const struct fx_scratch *s = &ctx->s;
    struct fx_moe_step *st = s->xstep;
    struct fx_xcache *xc = ctx->model->xcache;
    int32_t depth = ctx->model->moe_lookahead, row = depth > 0 ? il % depth : 0;
    const uint8_t *pred = s->xpred + (int64_t)row * ctx->model->hp.n_expert;
    bool predicted = depth > 0 && st->pred_layer[row] == il;
    int32_t n_used = 0, n_pred = 0;
    for (int32_t e = 0; e < ctx->model->hp.n_expert; e++)
        if (s->expert_off[e + 1] > s->expert_off[e]) {
            n_pred += pred[e] != 0;
            s->xused[n_used++] = e;
        }
    st->n_used = n_used;
    st->begin = 0;
    st->end = n_used;
    st->n_reads = 0;
    st->wait_ns = 0;
    st->checked = predicted ? n_used : 0;
    st->hits = predicted ? n_pred : 0;
    if (xc)
        st->end =
            fx_xcache_acquire(xc, il, s->xused, n_used, 0, s->xslots, s->xreads, &st->n_reads);
}

/* Worker 0, after the first round is pinned (demand reads go first): the experts each row would
 * choose at layer il_next from router_next, whose union the I/O threads read ahead. Its row of
 * xpred held the prediction for this layer, already scored. */
static void predict_next(const struct fx_context *ctx, int il_next, int64_t n) {
    const struct fx_hparams *hp = &ctx->model->hp;
    const struct fx_scratch *s = &ctx->s;
    const float *bias = ctx->model->layers[il_next].router_b;
    int32_t n_exp = hp->n_expert, row = il_next % ctx->model->moe_lookahead;
    uint8_t *pred = s->xpred + (int64_t)row * n_exp;
    memset(pred, 0, (size_t)n_exp);
    for (int64_t i = 0; i < n; i++) {
        float *logits = s->router_next + i * n_exp;
        uint8_t taken[FX_MAX_EXPERTS];
        memset(taken, 0, (size_t)n_exp);
        if (bias)
            ctx->k->add(logits, logits, bias, n_exp);
        /* Softmax keeps the order of the logits, so the top k of either router kind are these. */
        for (int32_t k = 0; k < hp->n_expert_used; k++)
            pred[take_best(logits, n_exp, taken)] = 1;
    }
    s->xstep->pred_layer[row] = il_next;
    fx_xcache_prefetch(ctx->model->xcache, il_next, pred);
}

/* Every worker, at the start of a round: fills the slots this step claimed, then worker 0 waits
 * for those read ahead. Returns false (on every worker) when a read failed; the error is kept in
 * xstep for the forward call to return. */
static bool round_ready_on_worker(const struct fx_worker *w, const struct fx_context *ctx) {
    const struct fx_scratch *s = &ctx->s;
    struct fx_moe_step *st = s->xstep;
    struct fx_xcache *xc = ctx->model->xcache;
    if (!xc)
        return true;
    int64_t t0 = w->ith == 0 ? fx_now_ns() : 0;
    uint8_t *stage = ctx->xstage + (uint64_t)w->ith * fx_xcache_stage_bytes(xc);
    int64_t r;
    if (st->n_reads > 0) { /* every worker read n_reads after the same barrier */
        while (fx_par_claim(w, st->n_reads, &r))
            fx_xcache_fill(xc, s->xslots[s->xreads[r]], stage);
        fx_par_barrier(w);
    }
    if (w->ith == 0) {
        bool waited;
        fx_status rc =
            fx_xcache_wait(xc, s->xslots + st->begin, st->end - st->begin, &waited, &st->err);
        if (rc) { /* the round ends here: unpinned now, as no next_round_on_worker follows */
            st->st = rc;
            fx_xcache_release(xc, s->xslots + st->begin, st->end - st->begin);
        }
        /* From the round's start: its reads, and the wait for those read ahead; a round with
         * neither only passed a barrier. */
        if (st->n_reads > 0 || waited)
            st->wait_ns += (uint64_t)(fx_now_ns() - t0);
    }
    return fx_par_broadcast(w, w->ith == 0 && st->st == FX_OK) != 0; /* read by worker 0 only */
}

/* Worker 0, after a round: unpins it and pins the next. Returns (on every worker) whether there
 * is one; resident experts are one round, which every worker knows without a broadcast. */
static bool next_round_on_worker(const struct fx_worker *w, const struct fx_context *ctx, int il) {
    const struct fx_scratch *s = &ctx->s;
    struct fx_moe_step *st = s->xstep;
    struct fx_xcache *xc = ctx->model->xcache;
    if (!xc)
        return false;
    if (w->ith == 0) {
        fx_xcache_release(xc, s->xslots + st->begin, st->end - st->begin);
        st->begin = st->end;
        if (st->begin < st->n_used)
            st->end = fx_xcache_acquire(xc, il, s->xused, st->n_used, st->begin, s->xslots,
                                        s->xreads, &st->n_reads);
        else
            fx_xcache_note(xc, st->checked, st->hits, st->wait_ns);
    }
    return fx_par_broadcast(w, w->ith == 0 && st->begin < st->n_used) != 0;
}

/* Rows [b, e) of a round's hidden rows, which list the round's slots r0..r1 and then, when
 * shared, the shared expert's n rows: bias (gpt-oss), gated activation, and quantization for
 * the down projections. */
static void hidden_rows(const struct fx_context *ctx, const struct fx_layer *l, int64_t r0,
                        int64_t r1, bool shared, int64_t n, int64_t b, int64_t e) {
    const struct fx_hparams *hp = &ctx->model->hp;
    const struct fx_scratch *s = &ctx->s;
    const struct fx_mat *down[1] = {&l->down_exps.per}, *shared_down[1] = {&l->shexp_down};
    int64_t nr = r1 - r0, n_ff = hp->n_ff_exp;
    int64_t rb = r0 + (b < nr ? b : nr), re = r0 + (e < nr ? e : nr);
    if (l->gate_exps_b) {
        add_expert_bias(ctx, s->gate, l->gate_exps_b, n_ff, rb, re);
        add_expert_bias(ctx, s->up, l->up_exps_b, n_ff, rb, re);
    }
    fx_dec_gated_act_rows(ctx, s->gate, s->gate, s->up, n_ff, rb, re);
    fx_dec_quantize_rows(ctx, &s->act, s->gate, rb, re, n_ff, 1, down);
    if (!shared || e <= nr)
        return;
    int64_t row0 = shared_row0(ctx, n), ff = hp->n_ff_shexp;
    int64_t sb = row0 + (b > nr ? b - nr : 0), se = row0 + (e - nr);
    fx_dec_gated_act_rows(ctx, s->gate, s->gate, s->up, ff, sb, se);
    fx_dec_quantize_rows(ctx, &s->act, s->gate, sb, se, ff, 1, shared_down);
}

void fx_moe_block_on_worker(const struct fx_worker *w, const struct fx_chunk *c, int il) {
    const struct fx_context *ctx = c->f->ctx;
    const struct fx_hparams *hp = &ctx->model->hp;
    const struct fx_layer *l = &ctx->model->layers[il];
    const struct fx_scratch *s = &ctx->s;
    struct fx_xcache *xc = ctx->model->xcache;
    int64_t dim = hp->n_embd, n = c->n;
    int64_t n_slots = n * hp->n_expert_used;
    int64_t b, e;
    if (s->xstep->st)
        return; /* an earlier layer failed to read its experts: the call returns that error */

    int il_next = il + ctx->model->moe_lookahead;
    bool ahead = xc && il_next > il && il_next < hp->n_layer;
    /* A decode step's slots all read its one row: the routed experts take it from the norm's
     * activation row in place, without a gather. Not with an expert cache: the lookahead reuses
     * that row, and a round's activation rows for its down projections overwrite it before a
     * later round reads it. */
    bool one_row = n == 1 && !xc;
    bool shared = l->shexp_gate.data != NULL;
    /* A decode step whose experts the workers divide evenly: each worker computes whole experts
     * (gate and up, hidden rows, down), streaming each of its matrices in one piece rather than
     * a share of every one, with no barrier between its hidden rows and its down projections
     * (a slot's rows are its expert's alone). Not with a shared expert, whose down projection
     * the experts' pass splits by rows. */
    bool whole = one_row && !shared && hp->n_expert_used % w->nth == 0;
    int64_t srow0 = shared ? shared_row0(ctx, n) : 0, ff_sh = hp->n_ff_shexp;

    /* The router and, when the layer has one, the shared expert's gate and input projections. */
    const struct fx_mat *router[4] = {&l->router, &l->shexp_gate_inp, &l->shexp_gate, &l->shexp_up};
    float *router_out[4] = {s->router, s->shexp, s->gate + srow0 * ff_sh, s->up + srow0 * ff_sh};
    int n_router = shared ? 4 : 1;
    const struct fx_mat *gate_up[2] = {&l->gate_exps.per, &l->up_exps.per};
    const struct fx_mat *quant[6]; /* the router's formats, and the experts' when one_row */
    int n_quant = 0;
    for (int i = 0; i < n_router; i++)
        quant[n_quant++] = router[i];
    if (one_row) {
        quant[n_quant++] = gate_up[0];
        quant[n_quant++] = gate_up[1];
    }
    FX_ASSERT(!c->rows->own); /* the block reads and writes the shared rows */
    fx_dec_norm_input_on_worker(w, ctx, c->rows, s->xn, s->x, l->ffn_norm, n, dim, n_quant, quant);
    fx_dec_dump(w, c, "ffn_norm", il, s->xn, n, dim);
    fx_dec_matmuls_on_worker(w, ctx, &s->act, s->xn, n, dim, n_router, router, router_out);
    if (ahead)
        lookahead_router_on_worker(w, c, il_next);

    fx_dec_own_rows(w, n, &b, &e);
    for (int64_t i = b; i < e; i++)
        route_row(ctx, l, i);
    /* Worker 0 groups every row's selections: after a barrier, unless they are all its own (a
     * decode step's one row). */
    int64_t b0, e0;
    fx_par_range(n, 0, w->nth, 1, &b0, &e0);
    if (e0 < n)
        fx_par_barrier(w);
    if (w->ith == 0) {
        group_by_expert(ctx, n);
        start_layer(ctx, il);
        if (ahead)
            predict_next(ctx, il_next, n);
    }
    fx_par_barrier(w);

    /* Each worker gathers and quantizes its share of the grouped slots. */
    if (!one_row) {
        fx_par_range(n_slots, w->ith, w->nth, 1, &b, &e);
        for (int64_t r = b; r < e; r++)
            memcpy(s->xg + r * dim, s->xn + (int64_t)s->slot_row[r] * dim,
                   (size_t)dim * sizeof(float));
        fx_dec_quantize_rows(ctx, &s->act, s->xg, b, e, dim, 2, gate_up);
        fx_par_barrier(w);
    }

    struct experts_pass gate_up_pass = {
        .nm = 2,
        .which = {0, 1},
        .out = {s->gate, s->up},
        .src = one_row ? s->xn : s->xg,
        .n_in = dim,
        .one_row = one_row,
    };
    struct experts_pass down_pass = {
        .nm = 1,
        .which = {2},
        .out = {s->yg},
        .src = s->gate,
        .n_in = hp->n_ff_exp,
        .dense_src = s->gate,
        .dense_n_in = ff_sh,
        .dense_row0 = srow0,
        .dense_n = n,
        .dense_out = s->h,
    };
    struct fx_moe_step *st = s->xstep;
    do {
        if (!round_ready_on_worker(w, ctx))
            return;
        int32_t u0 = st->begin, u1 = st->end;
        int64_t r0 = s->expert_off[s->xused[u0]], r1 = s->expert_off[s->xused[u1 - 1] + 1];
        if (whole) { /* worker ith's experts a0 .. a1 - 1, their slots' rows q0 .. q1 - 1 */
            int32_t per = (u1 - u0) / w->nth, a0 = u0 + per * w->ith, a1 = a0 + per;
            int64_t q0 = s->expert_off[s->xused[a0]], q1 = s->expert_off[s->xused[a1 - 1] + 1];
            experts_matmuls(ctx, l, il, a0, a1, &gate_up_pass, 0, 1);
            fx_par_barrier(w); /* the down projections' inputs overwrite the row gate_up reads */
            hidden_rows(ctx, l, r0, r1, false, n, q0 - r0, q1 - r0);
            experts_matmuls(ctx, l, il, a0, a1, &down_pass, 0, 1);
            fx_par_barrier(w);
            continue;
        }
        experts_matmuls(ctx, l, il, u0, u1, &gate_up_pass, w->ith, w->nth);
        fx_par_barrier(w);

        /* The round's slots and, in the last round, the shared expert's rows, shared among
         * the workers; then the round's down projections with the shared expert's. Not
         * earlier: the shared expert's activation rows may lie over the inputs (xg's
         * activation rows) of a later round's slots. */
        bool with_shared = shared && u1 == st->n_used;
        fx_par_range(r1 - r0 + (with_shared ? n : 0), w->ith, w->nth, 1, &b, &e);
        hidden_rows(ctx, l, r0, r1, with_shared, n, b, e);
        fx_par_barrier(w);
        down_pass.dense = with_shared ? &l->shexp_down : NULL;
        experts_matmuls(ctx, l, il, u0, u1, &down_pass, w->ith, w->nth);
        fx_par_barrier(w);
    } while (next_round_on_worker(w, ctx, il));

    if (l->down_exps_b) {
        fx_par_range(n_slots, w->ith, w->nth, 1, &b, &e);
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
        if (shared) { /* h = sigmoid(logit) * the shared expert's output */
            float g;
            ctx->k->act[FX_ACT_SIGMOID](&g, s->shexp + i, 1);
            ctx->k->scale(s->h + i * dim, s->h + i * dim, g, dim);
            ctx->k->add(s->x + i * dim, s->x + i * dim, s->h + i * dim, dim);
        }
    }
    fx_dec_dump(w, c, "l_out", il, s->x, n, dim);
}
