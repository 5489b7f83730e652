/* Speculative decoding over one sequence: draft, verify in one batch, keep the agreed prefix, roll
 * the rest back; and the controller that picks how many tokens to draft and switches speculation
 * off while it does not pay.
 *
 * Exactness. Row i of the verify batch is the token at position pos + i; the kernels give a row
 * the same bits whatever else is in its batch, so its logits are those plain decoding computes
 * after the same tokens. Rows are sampled in order, each token accepted into the sampler (its
 * penalty window) before the next row is sampled, and a row is only sampled when every draft
 * before it was kept: the sampler sees exactly the calls plain decoding makes. With a
 * deterministic drafter the speculative-sampling rule is "draw from p, keep the draft when the
 * draw is it" (see ferrox.h), so the random numbers consumed are plain decoding's too.
 *
 * The controller. Let a be the recent per-token acceptance rate (kept drafts against rejections,
 * both decayed so that old steps fade) and c the measured cost of one more verify row relative
 * to a plain step. Draft j + 1 is only used when drafts 1..j + 1 are all kept, probability about
 * a^(j+1), so drafts are added while a^(j+1) >= c. Separately, the time per yielded token of
 * verify steps (drafting included) is compared with a plain step's; when speculation is slower
 * it is switched off for a number of tokens that doubles each time it fails again (16 up to 512),
 * then tried again. A plain step's cost grows with the context (attention), so while speculating a
 * plain step is made again whenever the position has grown by a quarter (at least 32) since the
 * last one. Interference from other processes only ever makes a step slower, so the plain cost
 * follows lower measurements quickly and higher ones slowly, and one slow step is clipped before
 * it enters the means. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/error.h"
#include "spec/drafter.h"
#include "spec/spec.h"

#define WARMUP_STEPS 2   /* plain steps measured before the first draft */
#define MIN_ON_STEPS 4   /* verify steps before speculation may be judged */
#define BACKOFF_MIN  16  /* tokens of plain decoding after the first switch-off */
#define BACKOFF_MAX  512 /* ... and at most */
#define DECAY        0.8 /* weight of the past in the decayed sums */
#define COST_INIT    0.1 /* one more row's cost relative to a plain step, before measuring */

struct fx_spec {
    struct fx_context *ctx;
    struct fx_drafter *d;
    int32_t n_vocab;
    float *logits;  /* [draft_max + 1][n_vocab] */
    fx_token *rows; /* [draft_max + 1]: the last token, then the drafts */
    struct fx_spec_ctl ctl;
};

struct fx_spec_params fx_spec_default_params(void) {
    return (struct fx_spec_params){.draft_max = 16, .draft_min = 0, .adaptive = true};
}

fx_status fx_spec_create(struct fx_context *ctx, struct fx_drafter *d,
                         const struct fx_spec_params *params, struct fx_spec **out,
                         struct fx_error *err) {
    *out = NULL;
    struct fx_spec_params p = params ? *params : fx_spec_default_params();
    if (p.draft_max < 1 || p.draft_max > 256 || p.draft_min < 0 || p.draft_min > p.draft_max)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "speculation: draft sizes min %d, max %d must satisfy 0 <= min <= max, "
                            "1 <= max <= 256",
                            (int)p.draft_min, (int)p.draft_max);
    if (!ctx || !d)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "speculation: a context and a drafter are needed");
    if (d->ctx && d->ctx != ctx)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "speculation: the %s drafter works in another context",
                            fx_drafter_name(d));
    struct fx_spec *s = calloc(1, sizeof *s);
    int32_t n_vocab = fx_model_n_vocab(fx_context_model(ctx));
    if (s) {
        s->logits = malloc((size_t)(p.draft_max + 1) * (size_t)n_vocab * sizeof *s->logits);
        s->rows = malloc((size_t)(p.draft_max + 1) * sizeof *s->rows);
    }
    if (!s || !s->logits || !s->rows) {
        fx_spec_free(s);
        return fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET,
                            "speculation: out of memory for %d rows of %d logits",
                            (int)p.draft_max + 1, (int)n_vocab);
    }
    s->ctx = ctx;
    s->d = d;
    s->n_vocab = n_vocab;
    fx_spec_ctl_init(&s->ctl, &p, 0);
    *out = s;
    return FX_OK;
}

void fx_spec_free(struct fx_spec *s) {
    if (!s)
        return;
    free(s->logits);
    free(s->rows);
    free(s);
}

void fx_spec_stats(const struct fx_spec *s, struct fx_spec_stats *out) {
    *out = s->ctl.stats;
}

/* ---- the controller ------------------------------------------------------------------------- */

void fx_spec_ctl_init(struct fx_spec_ctl *c, const struct fx_spec_params *p, double cost_row) {
    *c = (struct fx_spec_ctl){.p = *p,
                              .cost_row = cost_row > 0 ? cost_row : COST_INIT,
                              .backoff = BACKOFF_MIN,
                              .warmup = p->adaptive ? WARMUP_STEPS : 0};
}

int32_t fx_spec_ctl_choose_k(struct fx_spec_ctl *s, int32_t pos) {
    s->stats.steps++;
    if (!s->p.adaptive)
        return s->p.draft_max;
    if (s->warmup > 0 || s->off_left > 0)
        return 0;
    int32_t stale = s->plain_pos / 4 > 32 ? s->plain_pos / 4 : 32;
    if (pos >= s->plain_pos + stale)
        return 0; /* measure plain decoding here */
    double a = (s->kept + 1.0) / (s->kept + s->lost + 2.0);
    int32_t k = s->p.draft_min > 1 ? s->p.draft_min : 1;
    double reach = pow(a, k + 1);
    while (k < s->p.draft_max && reach >= s->cost_row) {
        k++;
        reach *= a;
    }
    return k;
}

void fx_spec_ctl_plain(struct fx_spec_ctl *s, double t, int32_t pos) {
    s->stats.plain_out++;
    s->stats.plain_seconds += t;
    s->plain_pos = pos;
    if (s->t_plain <= 0)
        s->t_plain = t;
    else if (t < s->t_plain)
        s->t_plain = 0.5 * s->t_plain + 0.5 * t;
    else
        s->t_plain = DECAY * s->t_plain + (1 - DECAY) * (t < 2 * s->t_plain ? t : 2 * s->t_plain);
    if (s->warmup > 0)
        s->warmup--;
    if (s->off_left > 0 && --s->off_left == 0) {
        s->on_steps = 0;
        s->on_time = s->on_tokens = 0;
    }
}

void fx_spec_ctl_verify(struct fx_spec_ctl *s, int32_t n_draft, int32_t kept, bool rejected,
                        int32_t n_out, double t) {
    s->stats.verify_steps++;
    s->stats.drafted += (uint64_t)n_draft;
    s->stats.accepted += (uint64_t)kept;
    s->stats.verify_out += (uint64_t)n_out;
    s->stats.verify_seconds += t;
    if (!s->p.adaptive)
        return;
    if (s->t_plain > 0 && t > 2 * s->t_plain * (n_draft + 1))
        t = 2 * s->t_plain * (n_draft + 1);
    s->kept = DECAY * s->kept + kept;
    s->lost = DECAY * s->lost + (rejected ? 1 : 0);
    if (s->t_plain > 0) {
        double c = (t / s->t_plain - 1.0) / n_draft;
        c = c < 0.005 ? 0.005 : c > 2.0 ? 2.0 : c;
        s->cost_row = DECAY * s->cost_row + (1 - DECAY) * c;
    }
    s->on_time = DECAY * s->on_time + t;
    s->on_tokens = DECAY * s->on_tokens + n_out;
    s->on_steps++;
    if (s->on_steps < MIN_ON_STEPS || s->t_plain <= 0)
        return;
    if (s->on_time / s->on_tokens > s->t_plain) {
        s->off_left = s->backoff;
        s->backoff = s->backoff * 2 < BACKOFF_MAX ? s->backoff * 2 : BACKOFF_MAX;
        s->stats.switched_off++;
    } else if (s->on_steps == 4 * MIN_ON_STEPS) {
        s->backoff = BACKOFF_MIN; /* it pays: a later failure starts from a short pause again */
    }
}

/* ---- acceptance ------------------------------------------------------------------------------ */

fx_status fx_spec_accept(struct fx_sampler *smp, const float *logits, int32_t n_vocab,
                         const fx_token *draft, int32_t n_draft, fx_spec_row_fn emit, void *user,
                         int32_t *n_out, int32_t *n_kept, bool *rejected, struct fx_error *err) {
    int32_t out = 0, kept = 0;
    bool stop = false;
    fx_status st = FX_OK;
    *rejected = false;
    for (int32_t i = 0; i <= n_draft; i++) {
        const float *row = logits + (size_t)i * (size_t)n_vocab;
        bool accepted = false;
        fx_token tok;
        if (i < n_draft)
            st = fx_sampler_sample_draft(smp, row, draft[i], NULL, &tok, &accepted, err);
        else
            st = fx_sampler_sample(smp, row, &tok, err);
        if (st == FX_OK)
            st = fx_sampler_accept(smp, tok, err);
        if (st != FX_OK)
            break;
        kept += accepted;
        out++;
        if ((st = emit(user, i, tok, &stop, err)) != FX_OK || stop)
            break;
        if (i < n_draft && !accepted) {
            *rejected = true;
            break;
        }
    }
    *n_out = out;
    *n_kept = kept;
    return st;
}

/* ---- one step over a context ------------------------------------------------------------------
 */

/* The step's forward pass over rows[0..n) at the sequence's last position: the drafter's own
 * when it reads the target's outputs. */
static fx_status evaluate(struct fx_spec *s, const fx_token *seq, int32_t n_seq, int32_t n,
                          struct fx_error *err) {
    if (s->d->ops->verify)
        return s->d->ops->verify(s->d, seq, n_seq, s->rows, n, s->logits, err);
    if (n == 1)
        return fx_forward_token(s->ctx, s->rows[0], n_seq - 1, s->logits, err);
    return fx_forward_verify(s->ctx, s->rows, n, n_seq - 1, s->logits, err);
}

fx_status fx_spec_prefill(struct fx_spec *s, const fx_token *seq, int32_t n_seq, int32_t pos0,
                          float *logits, struct fx_error *err) {
    if (!seq || pos0 < 0 || pos0 >= n_seq)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "speculation: a prompt of tokens %d..%d", (int)pos0, (int)n_seq - 1);
    if (s->d->ops->prefill)
        return s->d->ops->prefill(s->d, seq, n_seq, pos0, logits, err);
    return fx_forward_batch_last(s->ctx, seq + pos0, n_seq - pos0, pos0, logits, err);
}

struct step_emit {
    fx_spec_emit_fn emit;
    void *user;
};

static fx_status step_emit(void *user, int32_t row, fx_token token, bool *stop,
                           struct fx_error *err) {
    (void)row;
    struct step_emit *se = user;
    return se->emit(se->user, token, stop, err);
}

fx_status fx_spec_step(struct fx_spec *s, struct fx_sampler *smp, const fx_token *seq,
                       int32_t n_seq, int32_t n_max, fx_spec_emit_fn emit, void *user,
                       int32_t *n_out, struct fx_error *err) {
    if (n_out)
        *n_out = 0;
    int32_t pos = n_seq - 1;
    int32_t n_ctx = fx_context_n_ctx(s->ctx);
    if (n_seq < 1 || !seq || !emit || fx_context_kv_len(s->ctx) != pos)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "speculation: the sequence (%d tokens) must be the cache (%d "
                            "positions) and one token",
                            (int)n_seq, (int)fx_context_kv_len(s->ctx));
    if (pos >= n_ctx)
        return fx_error_set(err, FX_ERR_CAPACITY, FX_NO_OFFSET,
                            "speculation: the context of %d positions is full", (int)n_ctx);
    int32_t k = fx_spec_ctl_choose_k(&s->ctl, pos);
    if (k > n_ctx - n_seq)
        k = n_ctx - n_seq;
    if (n_max > 0 && k > n_max - 1)
        k = n_max - 1;
    /* A recurrent state is rolled back to a snapshot of the verify step, of which it keeps
     * FX_ROLLBACK_MAX. */
    if (k > FX_ROLLBACK_MAX && fx_model_has_recurrent_state(fx_context_model(s->ctx)))
        k = FX_ROLLBACK_MAX;
    s->rows[0] = seq[n_seq - 1];
    int32_t n_draft = 0;
    double t0 = fx_now();
    fx_status st = FX_OK;
    if (k > 0 && k >= s->ctl.p.draft_min)
        st = fx_drafter_propose(s->d, seq, n_seq, k, s->rows + 1, &n_draft, err);
    if (st != FX_OK)
        return st;
    if (n_draft < s->ctl.p.draft_min)
        n_draft = 0;

    if (n_draft == 0) {
        bool stop = false;
        fx_token t;
        if ((st = evaluate(s, seq, n_seq, 1, err)))
            return st;
        fx_spec_ctl_plain(&s->ctl, fx_now() - t0, pos);
        if ((st = fx_sampler_sample(smp, s->logits, &t, err)) ||
            (st = fx_sampler_accept(smp, t, err)))
            return st;
        if (n_out)
            *n_out = 1;
        return emit(user, t, &stop, err);
    }

    if ((st = evaluate(s, seq, n_seq, n_draft + 1, err)))
        return st;
    double dt = fx_now() - t0;
    int32_t out = 0, kept = 0;
    bool rejected = false;
    struct step_emit se = {emit, user};
    st = fx_spec_accept(smp, s->logits, s->n_vocab, s->rows + 1, n_draft, step_emit, &se, &out,
                        &kept, &rejected, err);
    /* Keep the sequence and every yielded token but the last: rows past it are rolled back. */
    fx_status rb = fx_context_kv_truncate(s->ctx, n_seq + (out > 0 ? out - 1 : 0), NULL);
    FX_ASSERT(rb == FX_OK);
    fx_drafter_accepted(s->d, n_draft, kept);
    fx_spec_ctl_verify(&s->ctl, n_draft, kept, rejected, out, dt);
    if (n_out)
        *n_out = out;
    return st;
}
