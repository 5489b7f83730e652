/* The continuous-batching scheduler: admission, swapping out, the batched step and sampling.
 * Everything here runs on the engine thread, which owns the slots, the pool and the context
 * (engine.h tells the design). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/error.h"
#include "engine/engine_impl.h"

/* ---- output and notification ----------------------------------------------------------------- */

/* Adds r to the requests notified after this iteration, holding a reference until then. */
static void touch(struct fx_engine *e, struct fx_gen_req *r) {
    for (int i = 0; i < e->n_touched; i++)
        if (e->touched[i] == r)
            return;
    if (e->n_touched == 2 * e->p.n_parallel) { /* full: notify now instead */
        fx_gen_req_notify(r);
        return;
    }
    atomic_fetch_add(&r->refs, 1);
    e->touched[e->n_touched++] = r;
}

static void notify_touched(struct fx_engine *e) {
    for (int i = 0; i < e->n_touched; i++) {
        fx_gen_req_notify(e->touched[i]);
        fx_gen_req_unref(e->touched[i]);
    }
    e->n_touched = 0;
}

/* Appends text to a choice; under r->mu. False when memory runs out. */
static bool append_text(struct fx_gen_choice *c, const char *text, size_t len) {
    if (len == 0)
        return true;
    if (c->len + len + 1 > c->cap) {
        size_t cap = c->cap * 2 > c->len + len + 1 ? c->cap * 2 : c->len + len + 1;
        char *grown = realloc(c->text, cap);
        if (!grown)
            return false;
        c->text = grown;
        c->cap = cap;
    }
    memcpy(c->text + c->len, text, len);
    c->len += len;
    c->text[c->len] = '\0';
    return true;
}

static bool append_token(struct fx_gen_choice *c, const struct fx_gen_token *t) {
    if (c->n_toks == c->cap_toks) {
        int32_t cap = c->cap_toks ? 2 * c->cap_toks : 16;
        struct fx_gen_token *grown = realloc(c->toks, (size_t)cap * sizeof *grown);
        if (!grown)
            return false;
        c->toks = grown;
        c->cap_toks = cap;
    }
    c->toks[c->n_toks++] = *t;
    return true;
}

/* Marks choice i finished; when it is the last, the request is done: it is counted, notified
 * and the engine's reference dropped. */
static void finish_choice(struct fx_engine *e, struct fx_gen_req *r, int32_t i, enum fx_finish f,
                          const char *msg) {
    pthread_mutex_lock(&r->mu);
    if (r->choices[i].finish == FX_FINISH_NONE)
        r->choices[i].finish = f;
    if (f == FX_FINISH_ERROR && msg && !r->error[0])
        snprintf(r->error, sizeof r->error, "%s", msg);
    bool done = true;
    for (int32_t k = 0; k < r->n; k++)
        done = done && r->choices[k].finish != FX_FINISH_NONE;
    r->done = done;
    pthread_mutex_unlock(&r->mu);
    if (!done)
        return;
    double now = fx_now();
    /* The request's reason: the first choice's (they agree for n = 1). */
    enum fx_finish why = r->choices[0].finish;
    pthread_mutex_lock(&e->stats_mu);
    e->m.finished[why]++;
    if (why == FX_FINISH_STOP || why == FX_FINISH_LENGTH)
        fx_hist_observe(&e->m.e2e, now - r->t_arrival);
    pthread_mutex_unlock(&e->stats_mu);
    touch(e, r);
    fx_gen_req_unref(r);
}

void fx_sched_finish_queued(struct fx_engine *e, struct fx_gen_req *r, enum fx_finish f,
                            const char *msg) {
    for (int32_t i = 0; i < r->n; i++)
        finish_choice(e, r, i, f, msg);
    notify_touched(e);
}

/* Empties slot s, keeping the buffers it owns for the next request. */
static void slot_clear(struct fx_slot *s) {
    *s = (struct fx_slot){.toks = s->toks,
                          .cap_toks = s->cap_toks,
                          .drafter = s->drafter,
                          .draft = s->draft,
                          .seq = -1,
                          .logit_row = -1};
}

/* Frees slot s (its sequence, sampler and stopper) and finishes its choice with f. */
static void finish_slot(struct fx_engine *e, struct fx_slot *s, enum fx_finish f, const char *msg) {
    struct fx_gen_req *r = s->req;
    if (s->seq >= 0)
        fx_kv_seq_free(e->pool, s->seq);
    fx_sampler_free(s->sampler);
    fx_stopper_free(s->stopper);
    int32_t choice = s->choice;
    slot_clear(s);
    r->n_slots_live--;
    finish_choice(e, r, choice, f, msg);
}

void fx_sched_abort_all(struct fx_engine *e) {
    for (int32_t i = 0; i < e->p.n_parallel; i++)
        if (e->slots[i].req)
            finish_slot(e, &e->slots[i], FX_FINISH_ABORT, NULL);
    notify_touched(e);
}

void fx_sched_drop_cancelled(struct fx_engine *e) {
    for (int32_t i = 0; i < e->p.n_parallel; i++)
        if (e->slots[i].req && atomic_load(&e->slots[i].req->cancelled))
            finish_slot(e, &e->slots[i], FX_FINISH_ABORT, NULL);
    /* Cancelled requests still in the queue. */
    struct fx_gen_req *dropped = NULL, **tail = &dropped;
    pthread_mutex_lock(&e->mu);
    struct fx_gen_req **p = &e->wait_head, *prev = NULL;
    while (*p) {
        struct fx_gen_req *r = *p;
        if (atomic_load(&r->cancelled)) {
            *p = r->next;
            e->n_waiting--;
            r->next = NULL;
            *tail = r;
            tail = &r->next;
        } else {
            prev = r;
            p = &r->next;
        }
    }
    e->wait_tail = prev;
    pthread_mutex_unlock(&e->mu);
    while (dropped) {
        struct fx_gen_req *next = dropped->next;
        fx_sched_finish_queued(e, dropped, FX_FINISH_ABORT, NULL);
        dropped = next;
    }
    notify_touched(e);
}

/* ---- admission ---------------------------------------------------------------------------------
 */

static bool grow_toks(struct fx_slot *s, int32_t n) {
    if (n <= s->cap_toks)
        return true;
    int32_t cap = s->cap_toks ? s->cap_toks : 256;
    while (cap < n)
        cap = cap > INT32_MAX / 2 ? n : cap * 2;
    fx_token *grown = realloc(s->toks, (size_t)cap * sizeof *grown);
    if (!grown)
        return false;
    s->toks = grown;
    s->cap_toks = cap;
    return true;
}

/* Slots in the pool that decode (one row a step). */
static int32_t n_decoding(const struct fx_engine *e) {
    int32_t n = 0;
    for (int32_t i = 0; i < e->p.n_parallel; i++)
        n += e->slots[i].req && e->slots[i].seq >= 0;
    return n;
}

enum admit { ADMIT_OK, ADMIT_LATER, ADMIT_NEVER };

/* Gives slot s a sequence holding the longest cached prefix of its tokens, with the blocks of
 * the rest reserved. Refused ("later") when that would leave fewer free blocks than the decoding
 * sequences may need for their next rows, so that an admission does not force a swap-out at
 * once. */
static enum admit admit_slot(struct fx_engine *e, struct fx_slot *s) {
    fx_seq_id seq;
    int32_t n_cached;
    int32_t decoding = n_decoding(e);
    if (fx_kv_seq_create_cached(e->pool, s->toks, s->n_toks, &seq, &n_cached, NULL) != FX_OK)
        return ADMIT_LATER;
    enum fx_kv_admit why = FX_KV_ADMIT_OK;
    if (fx_kv_seq_reserve(e->pool, seq, s->n_toks - n_cached, &why, NULL) != FX_OK) {
        fx_kv_seq_free(e->pool, seq);
        return why == FX_KV_ADMIT_NEVER ? ADMIT_NEVER : ADMIT_LATER;
    }
    struct fx_kv_pool_stats ps;
    fx_kv_pool_stats(e->pool, &ps);
    if (decoding > 0 && ps.n_free + ps.n_cached_idle < decoding) {
        fx_kv_seq_free(e->pool, seq);
        return ADMIT_LATER;
    }
    s->seq = seq;
    s->n_eval = n_cached;
    struct fx_gen_req *r = s->req;
    if (s->choice == 0 && r->order == 0) {
        r->order = ++e->next_order;
        pthread_mutex_lock(&r->mu);
        r->n_cached = n_cached;
        pthread_mutex_unlock(&r->mu);
        pthread_mutex_lock(&e->stats_mu);
        e->m.prompt_tokens += (uint64_t)r->n_prompt;
        e->m.prefix_queries += (uint64_t)r->n_prompt;
        e->m.prefix_hits += (uint64_t)n_cached;
        pthread_mutex_unlock(&e->stats_mu);
    }
    return ADMIT_OK;
}

static int32_t free_slots(const struct fx_engine *e) {
    int32_t n = 0;
    for (int32_t i = 0; i < e->p.n_parallel; i++)
        n += !e->slots[i].req;
    return n;
}

/* Gives the request at the queue's head its slots (choice 0 with the prompt, the others waiting
 * for its fork). False when it does not fit now. */
static bool take_queued(struct fx_engine *e) {
    pthread_mutex_lock(&e->mu);
    struct fx_gen_req *r = e->wait_head;
    if (!r || r->n > free_slots(e)) {
        pthread_mutex_unlock(&e->mu);
        return false;
    }
    e->wait_head = r->next;
    if (!e->wait_head)
        e->wait_tail = NULL;
    e->n_waiting--;
    r->next = NULL;
    pthread_mutex_unlock(&e->mu);
    int32_t choice = 0;
    for (int32_t i = 0; i < e->p.n_parallel && choice < r->n; i++) {
        struct fx_slot *s = &e->slots[i];
        if (s->req)
            continue;
        slot_clear(s);
        fx_draft_reset(e, s);
        s->req = r;
        s->choice = choice;
        s->sampler = r->samplers[choice];
        s->stopper = r->stoppers[choice];
        r->samplers[choice] = NULL;
        r->stoppers[choice] = NULL;
        s->fork_pending = choice > 0;
        if (choice == 0) {
            if (!grow_toks(s, r->n_prompt + 1)) {
                s->n_toks = 0;
                r->n_slots_live++;
                finish_slot(e, s, FX_FINISH_ERROR, "out of memory for the prompt");
                for (int32_t k = 1; k < r->n; k++)
                    finish_choice(e, r, k, FX_FINISH_ERROR, NULL);
                return true;
            }
            memcpy(s->toks, r->prompt, (size_t)r->n_prompt * sizeof *s->toks);
            s->n_toks = r->n_prompt;
        }
        r->n_slots_live++;
        choice++;
    }
    return true;
}

/* The slots of requests in the pool or waiting to be, oldest request first (admission order,
 * then choice; requests not admitted yet last, in arrival order). */
static int32_t sorted_slots(struct fx_engine *e) {
    int32_t n = 0;
    for (int32_t i = 0; i < e->p.n_parallel; i++) {
        struct fx_slot *s = &e->slots[i];
        if (!s->req)
            continue;
        uint64_t o = s->req->order ? s->req->order : UINT64_MAX;
        int32_t j = n++;
        while (j > 0) {
            struct fx_slot *t = e->order[j - 1];
            uint64_t ot = t->req->order ? t->req->order : UINT64_MAX;
            if (ot < o || (ot == o && (t->req != s->req || t->choice < s->choice)))
                break;
            e->order[j] = t;
            j--;
        }
        e->order[j] = s;
    }
    return n;
}

/* Swaps out the newest request with sequences in the pool: its sequences are freed (their full
 * blocks stay in the prefix cache), its tokens kept for re-admission. False when none is in
 * the pool. */
static bool swap_out_newest(struct fx_engine *e) {
    struct fx_gen_req *victim = NULL;
    for (int32_t i = 0; i < e->p.n_parallel; i++) {
        struct fx_slot *s = &e->slots[i];
        if (s->req && s->seq >= 0 && (!victim || s->req->order > victim->order))
            victim = s->req;
    }
    if (!victim)
        return false;
    for (int32_t i = 0; i < e->p.n_parallel; i++) {
        struct fx_slot *s = &e->slots[i];
        if (s->req == victim && s->seq >= 0) {
            fx_kv_seq_free(e->pool, s->seq);
            s->seq = -1;
            s->n_eval = 0;
        }
    }
    pthread_mutex_lock(&e->stats_mu);
    e->m.preemptions++;
    pthread_mutex_unlock(&e->stats_mu);
    return true;
}

/* Admits what fits: swapped-out sequences first, then queued requests in arrival order. Stops
 * at the first that must wait, so that requests are admitted in order. */
static bool admit(struct fx_engine *e) {
    bool worked = false;
    for (;;) {
        int32_t n = sorted_slots(e);
        struct fx_slot *next = NULL;
        for (int32_t i = 0; i < n && !next; i++)
            if (e->order[i]->seq < 0 && !e->order[i]->fork_pending)
                next = e->order[i];
        if (!next) {
            if (!take_queued(e))
                return worked;
            worked = true;
            continue;
        }
        enum admit a = admit_slot(e, next);
        if (a == ADMIT_LATER)
            return worked;
        worked = true;
        if (a == ADMIT_NEVER) {
            struct fx_gen_req *r = next->req;
            char msg[160];
            snprintf(msg, sizeof msg,
                     "prompt: %d tokens do not fit the KV cache of %d blocks of %d positions",
                     next->n_toks, e->m.kv_blocks, e->p.block_size);
            for (int32_t i = 0; i < e->p.n_parallel; i++)
                if (e->slots[i].req == r)
                    finish_slot(e, &e->slots[i], FX_FINISH_ERROR, msg);
        }
    }
}

/* ---- sampling ----------------------------------------------------------------------------------
 */

/* log-softmax of the raw logits at token t, and the k most likely tokens (ties to the lower id). */
static void logprobs_of(const float *row, int32_t n_vocab, fx_token t, int32_t k,
                        struct fx_gen_token *out) {
    float mx = -INFINITY;
    for (int32_t i = 0; i < n_vocab; i++)
        if (row[i] > mx)
            mx = row[i];
    double sum = 0;
    for (int32_t i = 0; i < n_vocab; i++)
        if (row[i] > -INFINITY)
            sum += exp((double)row[i] - (double)mx);
    double lse = (double)mx + log(sum > 0 ? sum : 1);
    out->id = t;
    out->logprob = (float)((double)row[t] - lse);
    out->n_top = 0;
    for (int32_t i = 0; i < n_vocab && k > 0; i++) {
        float x = row[i];
        if (!(x > -INFINITY))
            continue;
        if (out->n_top == k && x <= row[out->top_id[k - 1]])
            continue;
        int32_t j = out->n_top < k ? out->n_top++ : k - 1;
        while (j > 0 && row[out->top_id[j - 1]] < x) {
            out->top_id[j] = out->top_id[j - 1];
            j--;
        }
        out->top_id[j] = i;
    }
    for (int32_t j = 0; j < out->n_top; j++)
        out->top_logprob[j] = (float)((double)row[out->top_id[j]] - lse);
}

/* Slot s's next token t, sampled from row (and accepted by its sampler): releases its text, and
 * ends the choice on a stop token, a stop string, max_tokens or a full context. first: the
 * slot's first token of this step (the inter-token latency is observed once per step, as vLLM
 * does: the tokens of one step arrive together). False when the choice has ended. */
static bool emit_token(struct fx_engine *e, struct fx_slot *s, const float *row, fx_token t,
                       bool first) {
    struct fx_gen_req *r = s->req;
    struct fx_error err;
    struct fx_gen_token gt = {.id = t};
    if (r->logprobs >= 0)
        logprobs_of(row, e->n_vocab, t, r->logprobs, &gt);
    size_t len = 0;
    const char *piece = fx_token_to_piece(e->vocab, t, false, &len);
    struct fx_stop_result res;
    if (fx_stopper_push(s->stopper, t, piece ? piece : "", piece ? len : 0, &res, &err) != FX_OK) {
        finish_slot(e, s, FX_FINISH_ERROR, err.msg);
        return false;
    }
    bool full = res.reason == FX_STOP_NONE && s->n_eval >= e->n_ctx_seq;
    struct fx_stop_result rest = {0};
    if (full)
        fx_stopper_finish(s->stopper, &rest);
    struct fx_gen_choice *c = &r->choices[s->choice];
    pthread_mutex_lock(&r->mu);
    bool ok = append_text(c, res.text, res.len) && append_text(c, rest.text, rest.len) &&
              (r->logprobs < 0 || append_token(c, &gt));
    c->n_gen++;
    pthread_mutex_unlock(&r->mu);
    touch(e, r);

    double now = fx_now();
    pthread_mutex_lock(&e->stats_mu);
    e->m.generation_tokens++;
    if (r->t_first == 0) {
        r->t_first = now;
        fx_hist_observe(&e->m.ttft, now - r->t_arrival);
    } else if (s->t_last > 0 && first) {
        fx_hist_observe(&e->m.itl, now - s->t_last);
    }
    pthread_mutex_unlock(&e->stats_mu);
    s->t_last = now;

    if (!ok)
        finish_slot(e, s, FX_FINISH_ERROR, "out of memory for the output");
    else if (res.reason == FX_STOP_MAX_TOKENS || full)
        finish_slot(e, s, FX_FINISH_LENGTH, NULL);
    else if (res.reason != FX_STOP_NONE)
        finish_slot(e, s, FX_FINISH_STOP, NULL);
    else if (!grow_toks(s, s->n_toks + 1))
        finish_slot(e, s, FX_FINISH_ERROR, "out of memory for the tokens");
    else {
        s->toks[s->n_toks++] = t;
        return true;
    }
    return false;
}

struct accept_ctx {
    struct fx_engine *e;
    struct fx_slot *s;
    const float *rows; /* the logits of the slot's rows */
    int32_t n_eval;    /* positions kept with row 0 */
};

/* fx_spec_accept's callback: row i's token; the rows up to i are kept. */
static fx_status accept_row(void *user, int32_t row, fx_token t, bool *stop, struct fx_error *err) {
    (void)err;
    struct accept_ctx *a = user;
    a->s->n_eval = a->n_eval + row;
    *stop = !emit_token(a->e, a->s, a->rows + (size_t)row * (size_t)a->e->n_vocab, t, row == 0);
    return FX_OK;
}

/* Samples slot s's tokens from rows [n_draft + 1][n_vocab], the logits of [its last token,
 * n_draft drafts] (n_eval counts the first), by the rule of speculative decoding (fx_spec_accept,
 * the same body as fx_spec_step's; with no drafts, plain sampling), and rolls back the rows after
 * the last kept one. */
static void sample_slot(struct fx_engine *e, struct fx_slot *s, const float *rows, int32_t n_draft,
                        int32_t *n_out, int32_t *kept, bool *rejected) {
    struct accept_ctx a = {.e = e, .s = s, .rows = rows, .n_eval = s->n_eval};
    struct fx_error err;
    fx_status st = fx_spec_accept(s->sampler, rows, e->n_vocab, s->draft, n_draft, accept_row, &a,
                                  n_out, kept, rejected, &err);
    if (!s->req)
        return; /* the choice ended */
    if (st != FX_OK) {
        finish_slot(e, s, FX_FINISH_ERROR, err.msg);
        return;
    }
    if (n_draft > 0 && s->seq >= 0) {
        fx_status rb = fx_kv_seq_truncate(e->pool, s->seq, s->n_eval, NULL);
        FX_ASSERT(rb == FX_OK);
    }
}

/* Choice 0 of s's request has its prompt's logits: the waiting choices fork its sequence and
 * sample from the same row. */
static void fork_choices(struct fx_engine *e, struct fx_slot *s, const float *row) {
    for (int32_t i = 0; i < e->p.n_parallel; i++) {
        struct fx_slot *f = &e->slots[i];
        if (f->req != s->req || !f->fork_pending)
            continue;
        struct fx_error err;
        if (!grow_toks(f, s->n_toks + 1)) {
            finish_slot(e, f, FX_FINISH_ERROR, "out of memory for the tokens");
            continue;
        }
        if (fx_kv_seq_fork(e->pool, s->seq, &f->seq, &err) != FX_OK) {
            f->seq = -1;
            finish_slot(e, f, FX_FINISH_ERROR, err.msg);
            continue;
        }
        memcpy(f->toks, s->toks, (size_t)s->n_toks * sizeof *f->toks);
        f->n_toks = s->n_toks;
        f->n_eval = s->n_eval;
        f->fork_pending = false;
        int32_t n_out, kept;
        bool rejected;
        sample_slot(e, f, row, 0, &n_out, &kept, &rejected);
    }
}

/* ---- the step ----------------------------------------------------------------------------------
 */

/* Whether slot s decodes this step (its last token, after which it samples, is all it has left
 * to evaluate); the others in the pool evaluate prompt chunks. */
static bool decodes(const struct fx_slot *s) {
    return s->seq >= 0 && s->n_toks - s->n_eval == 1;
}

/* The rows of a step while n_dec sequences decode and prompts have `pending` rows to evaluate
 * (chunked prefill, as vLLM's max_num_batched_tokens, decode rows first). A step's time is the
 * inter-token gap of every decoding stream, so while sequences decode a step holds step_tokens
 * rows (at least one per decoding sequence); but a backlog of more than n_batch prompt rows (a
 * burst of new requests) is worked off in chunks of n_batch rows: it would otherwise wait through
 * many steps, and the few steps that clear it are a small share of all inter-token gaps. */
static int32_t step_budget(const struct fx_engine *e, int32_t n_dec, int32_t pending) {
    if (n_dec == 0 || pending > e->p.n_batch)
        return e->p.n_batch;
    int32_t budget = e->p.step_tokens > n_dec ? e->p.step_tokens : n_dec;
    return budget < e->p.n_batch ? budget : e->p.n_batch;
}

/* Builds the batch: a row for each decoding sequence, with its drafts after it (its blocks
 * reserved first; when the pool is full, drafts are dropped, then the newest request is swapped
 * out and the batch rebuilt), then prompt chunks, within step_budget rows. Returns the number
 * of rows. */
static int32_t build_batch(struct fx_engine *e, int32_t n_slots, int32_t *n_logits) {
    int32_t n_dec = 0, pending = 0;
    for (int32_t i = 0; i < n_slots; i++) {
        struct fx_slot *s = e->order[i];
        s->n_draft = 0;
        if (decodes(s))
            n_dec++;
        else if (s->seq >= 0)
            pending += s->n_toks - s->n_eval;
    }
    int32_t budget = step_budget(e, n_dec, pending);
    /* The drafts, oldest request first, proposed once even if the batch is rebuilt: in the rows
     * of step_tokens that the decoding rows and then the prompts leave (prompts first: a draft
     * may be wasted, a prompt row never is, and prompts left waiting pile up), and every slot
     * may have a row with logits besides them. Adaptive speculation drafts only while few
     * sequences decode (spec_max_batch). */
    int32_t room = e->p.step_tokens < budget ? e->p.step_tokens : budget;
    room = room > n_dec ? room - n_dec : 0;
    room = room > pending ? room - pending : 0;
    if (room > e->n_logit_rows - n_slots)
        room = e->n_logit_rows - n_slots;
    bool drafts = e->p.spec && (n_dec <= e->p.spec_max_batch || !e->p.spec_params.adaptive);
    for (int32_t i = 0; i < n_slots && drafts; i++) {
        struct fx_slot *s = e->order[i];
        if (!decodes(s))
            continue;
        fx_draft_propose(e, s, room);
        room -= s->n_draft;
    }
    int32_t n, nl;
restart:
    n = 0;
    nl = 0;
    for (int32_t i = 0; i < n_slots; i++) {
        e->order[i]->rows = 0;
        e->order[i]->logit_row = -1;
    }
    for (int32_t i = 0; i < n_slots && n < e->p.n_batch; i++) {
        struct fx_slot *s = e->order[i];
        if (!decodes(s))
            continue;
        if (s->n_draft > e->p.n_batch - n - 1)
            s->n_draft = e->p.n_batch - n - 1;
        enum fx_kv_admit why;
        if (s->n_draft > 0 && fx_kv_seq_reserve(e->pool, s->seq, 1 + s->n_draft, &why, NULL))
            s->n_draft = 0;
        if (fx_kv_seq_reserve(e->pool, s->seq, 1, &why, NULL) != FX_OK) {
            if (!swap_out_newest(e))
                return 0;
            goto restart;
        }
        s->rows = 1 + s->n_draft;
        s->logit_row = nl;
        nl += s->rows;
        for (int32_t k = 0; k < s->rows; k++) {
            e->b_tok[n] = k == 0 ? s->toks[s->n_eval] : s->draft[k - 1];
            e->b_pos[n] = s->n_eval + k;
            e->b_seq[n] = s->seq;
            e->b_logits[n] = 1;
            e->b_snap[n] = k < s->n_draft; /* where a rejected draft may cut it back to */
            n++;
        }
    }
    for (int32_t i = 0; i < n_slots && n < budget; i++) {
        struct fx_slot *s = e->order[i];
        int32_t left = s->n_toks - s->n_eval;
        if (s->seq < 0 || left <= 1)
            continue;
        int32_t rows = left < budget - n ? left : budget - n;
        s->rows = rows;
        for (int32_t k = 0; k < rows; k++) {
            e->b_tok[n] = s->toks[s->n_eval + k];
            e->b_pos[n] = s->n_eval + k;
            e->b_seq[n] = s->seq;
            e->b_logits[n] = 0;
            e->b_snap[n] = 0;
            n++;
        }
        if (rows == left) {
            e->b_logits[n - 1] = 1;
            s->logit_row = nl++;
        }
    }
    *n_logits = nl;
    return n;
}

static void publish_stats(struct fx_engine *e) {
    struct fx_kv_pool_stats ps;
    fx_kv_pool_stats(e->pool, &ps);
    /* Requests with a sequence in the pool run; those holding slots without one wait. */
    int32_t running = 0, swapped = 0;
    for (int32_t i = 0; i < e->p.n_parallel; i++) {
        struct fx_gen_req *r = e->slots[i].req;
        bool first = r != NULL, live = false;
        for (int32_t j = 0; j < i && first; j++)
            first = e->slots[j].req != r;
        if (!first)
            continue;
        for (int32_t j = i; j < e->p.n_parallel; j++)
            live = live || (e->slots[j].req == r && e->slots[j].seq >= 0);
        running += live;
        swapped += !live;
    }
    pthread_mutex_lock(&e->stats_mu);
    e->m.n_running = running;
    e->n_swapped = swapped;
    e->m.kv_usage =
        ps.n_blocks > 0 ? (double)(ps.n_blocks - ps.n_free - ps.n_cached_idle) / ps.n_blocks : 0;
    pthread_mutex_unlock(&e->stats_mu);
}

bool fx_sched_iterate(struct fx_engine *e) {
    bool worked = admit(e);
    int32_t n_slots = sorted_slots(e);
    int32_t n_logits = 0;
    int32_t n = n_slots > 0 ? build_batch(e, n_slots, &n_logits) : 0;
    if (n > 0) {
        struct fx_batch b = {.n = n,
                             .token = e->b_tok,
                             .pos = e->b_pos,
                             .seq = e->b_seq,
                             .logits = e->b_logits,
                             .snapshot = e->b_snap};
        struct fx_error err;
        FX_ASSERT(n_logits <= e->n_logit_rows);
        double t0 = fx_now();
        fx_status st = fx_forward_multi_seq(e->ctx, e->pool, &b, e->logits, &err);
        double dt = fx_now() - t0;
        uint64_t prefill = 0;
        int32_t n_seqs = 0, n_prompt_rows = 0;
        for (int32_t i = 0; i < n_slots; i++) {
            struct fx_slot *s = e->order[i];
            if (!s->rows)
                continue;
            if (st != FX_OK) {
                finish_slot(e, s, FX_FINISH_ERROR, err.msg);
                continue;
            }
            n_seqs++;
            /* A decoding slot keeps its first row; its drafts are kept or rolled back when
             * sampled. */
            bool dec = decodes(s);
            int32_t end = s->n_eval + (dec ? 1 : s->rows);
            int32_t np = s->req->n_prompt;
            if (s->n_eval < np)
                prefill += (uint64_t)((end < np ? end : np) - s->n_eval);
            if (!dec)
                n_prompt_rows += s->rows;
            s->n_eval = end;
        }
        if (st == FX_OK && e->p.spec)
            fx_draft_observe_step(e, n, n_prompt_rows, n_seqs, dt);
        pthread_mutex_lock(&e->stats_mu);
        e->m.prefill_tokens += prefill;
        e->m.steps++;
        pthread_mutex_unlock(&e->stats_mu);
        /* Sampling, in batch order (each slot its own sampler, so the order changes nothing). */
        for (int32_t i = 0; i < n_slots && st == FX_OK; i++) {
            struct fx_slot *s = e->order[i];
            if (!s->req || s->logit_row < 0)
                continue;
            const float *rows = e->logits + (size_t)s->logit_row * (size_t)e->n_vocab;
            s->logit_row = -1;
            if (s->choice == 0 && s->n_toks == s->req->n_prompt)
                fork_choices(e, s, rows);
            bool dec = s->rows == 1 + s->n_draft && s->n_toks > s->req->n_prompt;
            struct fx_draft_step d = {
                .pos = s->n_eval - 1, .n_draft = s->n_draft, .t_draft = s->t_draft};
            int32_t n_out = 0, kept = 0;
            bool rejected = false;
            sample_slot(e, s, rows, d.n_draft, &n_out, &kept, &rejected);
            if (dec)
                fx_draft_account(e, s, &d, n_seqs, n_out, kept, rejected);
        }
        worked = true;
    }
    publish_stats(e);
    notify_touched(e);
    return worked;
}
