/* Speculation in the engine: each decoding sequence's drafts (prompt lookup), the cost of a step,
 * and the per-sequence controller of fx_spec (src/spec/spec.h) fed with the sequence's share of
 * it. The acceptance itself is in sched.c, through fx_spec_accept.
 *
 * What a draft row costs. Alone, a sequence's verify step costs what fx_spec measures: its own
 * step's time. In a batch, rows share the step: a step of R rows takes about alpha + beta * R
 * (alpha: what does not grow with the rows, chiefly streaming the weights; beta: a row's
 * arithmetic), so a sequence with r rows in a step of S sequences is charged alpha / S + r * beta.
 * Its controller then weighs one more draft row (beta) against a plain token (alpha / S + beta):
 * a draft pays alone when it is kept a third of the time, and among 16 sequences only when it is
 * kept almost always, since the other sequences' rows already share the weights' reading. Prompt
 * rows have their own cost per row (no vocabulary projection, longer attention), fitted beside
 * it: alpha, beta and the prompt rows' cost are a least-squares fit over recent steps, the older
 * steps decayed. */
#include <stdlib.h>

#include "core/clock.h"
#include "core/error.h"
#include "engine/engine_impl.h"

#define CM_DECAY 0.97 /* weight of the past in the step-cost fit, per step */

fx_status fx_draft_init(struct fx_engine *e, struct fx_error *err) {
    if (!e->p.spec)
        return FX_OK;
    for (int32_t i = 0; i < e->p.n_parallel; i++) {
        struct fx_slot *s = &e->slots[i];
        fx_status st = fx_drafter_ngram_create(NULL, &s->drafter, err);
        if (st)
            return st;
        s->draft = malloc((size_t)e->p.spec_params.draft_max * sizeof *s->draft);
        if (!s->draft)
            return fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "out of memory for drafts");
    }
    return FX_OK;
}

void fx_draft_free(struct fx_engine *e) {
    for (int32_t i = 0; e->slots && i < e->p.n_parallel; i++) {
        fx_drafter_free(e->slots[i].drafter);
        free(e->slots[i].draft);
    }
}

/* One more row's cost relative to a plain token among n_seqs sequences (0: not known yet). */
static double cost_row(const struct fx_engine *e, int32_t n_seqs) {
    if (e->beta <= 0 || n_seqs < 1)
        return 0;
    return e->beta / (e->alpha / n_seqs + e->beta);
}

void fx_draft_reset(struct fx_engine *e, struct fx_slot *s) {
    s->n_draft = 0;
    s->t_draft = 0;
    if (!e->p.spec)
        return;
    int32_t n_seqs = 1;
    for (int32_t i = 0; i < e->p.n_parallel; i++)
        n_seqs += e->slots[i].req != NULL && &e->slots[i] != s;
    fx_spec_ctl_init(&s->ctl, &e->p.spec_params, cost_row(e, n_seqs));
}

void fx_draft_propose(struct fx_engine *e, struct fx_slot *s, int32_t max_k) {
    s->n_draft = 0;
    s->t_draft = 0;
    if (!e->p.spec)
        return;
    struct fx_gen_req *r = s->req;
    int32_t k = fx_spec_ctl_choose_k(&s->ctl, s->n_eval);
    /* Not the first token (the prompt's row may be forked for n > 1 choices), and within the
     * sequence's context, its max_tokens and the step's room. */
    if (s->n_toks <= r->n_prompt)
        k = 0;
    if (k > e->n_ctx_seq - s->n_toks)
        k = e->n_ctx_seq - s->n_toks;
    if (r->max_tokens > 0 && k > r->max_tokens - r->choices[s->choice].n_gen - 1)
        k = r->max_tokens - r->choices[s->choice].n_gen - 1;
    if (k > max_k)
        k = max_k;
    /* A hybrid model's sequence is cut back to a state its verify step kept, of which it keeps
     * FX_ROLLBACK_MAX. */
    if (k > FX_ROLLBACK_MAX && fx_model_has_recurrent_state(e->model))
        k = FX_ROLLBACK_MAX;
    if (k <= 0 || k < s->ctl.p.draft_min)
        return;
    double t0 = fx_now();
    int32_t n = 0;
    if (fx_drafter_propose(s->drafter, s->toks, s->n_toks, k, s->draft, &n, NULL) != FX_OK)
        n = 0;
    s->t_draft = fx_now() - t0;
    s->n_draft = n >= s->ctl.p.draft_min ? n : 0;
}

void fx_draft_observe_step(struct fx_engine *e, int32_t n_rows, int32_t n_prompt_rows,
                           int32_t n_seqs, double t) {
    (void)n_seqs;
    double x1 = n_rows - n_prompt_rows, x2 = n_prompt_rows;
    if (e->beta <= 0 && x1 > 0) { /* a first guess: half of a step does not grow with its rows */
        e->alpha = 0.5 * t;
        e->beta = 0.5 * t / (x1 + 0.5 * x2);
        e->beta_p = 0.5 * e->beta;
    }
    /* Decayed sums of 1, x1, x2, y and their products. */
    double d = CM_DECAY;
    e->cm_w = d * e->cm_w + 1;
    e->cm_x = d * e->cm_x + x1;
    e->cm_x2 = d * e->cm_x2 + x2;
    e->cm_y = d * e->cm_y + t;
    e->cm_xx = d * e->cm_xx + x1 * x1;
    e->cm_x2x2 = d * e->cm_x2x2 + x2 * x2;
    e->cm_xx2 = d * e->cm_xx2 + x1 * x2;
    e->cm_xy = d * e->cm_xy + x1 * t;
    e->cm_x2y = d * e->cm_x2y + x2 * t;
    double w = e->cm_w, m1 = e->cm_x / w, m2 = e->cm_x2 / w, my = e->cm_y / w;
    double c11 = e->cm_xx / w - m1 * m1, c22 = e->cm_x2x2 / w - m2 * m2;
    double c12 = e->cm_xx2 / w - m1 * m2, c1y = e->cm_xy / w - m1 * my;
    double c2y = e->cm_x2y / w - m2 * my;
    if (c11 < 0.25)
        return; /* too little spread in the rows yet: keep the estimate */
    double b1, b2;
    double det = c11 * c22 - c12 * c12;
    if (c22 < 1.0 || det < 1e-3 * c11 * c22) {
        b2 = e->beta_p; /* prompt rows' cost not separable: keep it */
        b1 = (c1y - b2 * c12) / c11;
    } else {
        b1 = (c1y * c22 - c2y * c12) / det;
        b2 = (c2y * c11 - c1y * c12) / det;
    }
    if (b2 < 0)
        b2 = 0;
    if (b1 <= 0)
        return; /* noise: keep the estimate */
    double a = my - b1 * m1 - b2 * m2;
    if (a < 0) { /* no fixed cost: all of it is per row */
        a = 0;
        b1 = m1 > 0 ? (my - b2 * m2) / m1 : b1;
    }
    e->alpha = a;
    e->beta = b1;
    e->beta_p = b2;
}

void fx_draft_account(struct fx_engine *e, struct fx_slot *s, const struct fx_draft_step *d,
                      int32_t n_seqs, int32_t n_out, int32_t kept, bool rejected) {
    if (!e->p.spec || e->beta <= 0 || n_seqs < 1)
        return;
    double share = e->alpha / n_seqs + e->beta * (1 + d->n_draft);
    if (d->n_draft == 0) {
        fx_spec_ctl_plain(&s->ctl, share, d->pos);
        return;
    }
    fx_drafter_accepted(s->drafter, d->n_draft, kept);
    fx_spec_ctl_verify(&s->ctl, d->n_draft, kept, rejected, n_out, share + d->t_draft);
    pthread_mutex_lock(&e->stats_mu);
    e->m.spec_drafts++;
    e->m.spec_draft_tokens += (uint64_t)d->n_draft;
    e->m.spec_accepted += (uint64_t)kept;
    pthread_mutex_unlock(&e->stats_mu);
}
