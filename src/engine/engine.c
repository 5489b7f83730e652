/* The engine thread, its queues, submission, cancellation, draining and metrics. The scheduler
 * itself is in sched.c, embeddings in embed.c (see engine.h for the design). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"
#include "core/error.h"
#include "engine/engine_impl.h"

/* vLLM's histogram buckets (seconds), so that dashboards made for it read ferrox's. */
static const double ttft_bounds[] = {0.001, 0.005, 0.01, 0.02,  0.04,  0.06,  0.08, 0.1,
                                     0.25,  0.5,   0.75, 1.0,   2.5,   5.0,   7.5,  10.0,
                                     20.0,  40.0,  80.0, 160.0, 640.0, 2560.0};
static const double itl_bounds[] = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
                                    0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
static const double e2e_bounds[] = {0.3,  0.5,   0.8,   1.0,   1.5,   2.0,    2.5,
                                    5.0,  10.0,  15.0,  20.0,  30.0,  40.0,   50.0,
                                    60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};

#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))
_Static_assert(sizeof ttft_bounds / sizeof ttft_bounds[0] <= FX_HIST_MAX_BOUNDS, "ttft buckets");
_Static_assert(sizeof e2e_bounds / sizeof e2e_bounds[0] <= FX_HIST_MAX_BOUNDS, "e2e buckets");

void fx_hist_observe(struct fx_histogram *h, double v) {
    int i = 0;
    while (i < h->n_bounds && v > h->bounds[i])
        i++;
    h->counts[i]++;
    h->count++;
    h->sum += v;
}

const char *fx_finish_name(enum fx_finish f) {
    switch (f) {
    case FX_FINISH_STOP:
        return "stop";
    case FX_FINISH_LENGTH:
        return "length";
    case FX_FINISH_ABORT:
        return "abort";
    case FX_FINISH_ERROR:
        return "error";
    case FX_FINISH_NONE:
        break;
    }
    return "none";
}

struct fx_engine_params fx_engine_default_params(void) {
    struct fx_context_params cp = fx_context_default_params();
    return (struct fx_engine_params){.n_parallel = 4,
                                     .n_ctx = 4096,
                                     .n_batch = FX_ENGINE_N_BATCH,
                                     .queue_max = 64,
                                     .type_k = cp.type_k,
                                     .type_v = cp.type_v,
                                     .pooling = FX_POOLING_MEAN,
                                     .spec = false,
                                     .spec_params = fx_spec_default_params(),
                                     .spec_max_batch = FX_ENGINE_SPEC_MAX_BATCH};
}

int32_t fx_engine_n_parallel(const struct fx_engine *e) {
    return e->p.n_parallel;
}

int32_t fx_engine_n_ctx_seq(const struct fx_engine *e) {
    return e->n_ctx_seq;
}

int32_t fx_engine_n_ctx_embd(const struct fx_engine *e) {
    return e->n_ctx_embd;
}

/* ---- requests -------------------------------------------------------------------------------- */

static void req_free(struct fx_gen_req *r) {
    if (!r)
        return;
    for (int32_t i = 0; r->choices && i < r->n; i++) {
        free(r->choices[i].text);
        free(r->choices[i].toks);
    }
    for (int32_t i = 0; i < r->n; i++) {
        if (r->samplers)
            fx_sampler_free(r->samplers[i]);
        if (r->stoppers)
            fx_stopper_free(r->stoppers[i]);
    }
    free(r->samplers);
    free(r->stoppers);
    free(r->choices);
    free(r->prompt);
    pthread_mutex_destroy(&r->mu);
    pthread_mutex_destroy(&r->notify_mu);
    free(r);
}

void fx_gen_req_unref(struct fx_gen_req *r) {
    if (atomic_fetch_sub(&r->refs, 1) == 1)
        req_free(r);
}

void fx_gen_req_notify(struct fx_gen_req *r) {
    pthread_mutex_lock(&r->notify_mu);
    if (r->notify)
        r->notify(r->notify_user);
    pthread_mutex_unlock(&r->notify_mu);
}

void fx_gen_req_lock(struct fx_gen_req *r) {
    pthread_mutex_lock(&r->mu);
}

void fx_gen_req_unlock(struct fx_gen_req *r) {
    pthread_mutex_unlock(&r->mu);
}

void fx_gen_req_detach(struct fx_gen_req *r) {
    if (!r)
        return;
    pthread_mutex_lock(&r->notify_mu);
    r->notify = NULL;
    r->notify_user = NULL;
    pthread_mutex_unlock(&r->notify_mu);
}

void fx_gen_req_release(struct fx_gen_req *r) {
    if (!r)
        return;
    /* While r is not done the engine holds a reference, and it cannot mark r done (which needs
     * r->mu) before the wake-up below: so the engine is alive for it. */
    pthread_mutex_lock(&r->mu);
    if (!r->done) {
        atomic_store(&r->cancelled, true);
        struct fx_engine *e = r->engine;
        pthread_mutex_lock(&e->mu);
        e->idle = false;
        pthread_cond_signal(&e->cv);
        pthread_mutex_unlock(&e->mu);
    }
    pthread_mutex_unlock(&r->mu);
    fx_gen_req_unref(r);
}

/* The sampler and stopper of choice i: the request's parameters, seed + i, the end-of-generation
 * tokens banned (ignore_eos) or stopping. */
static fx_status make_choice(struct fx_engine *e, const struct fx_gen_params *p, int32_t i,
                             struct fx_sampler **sampler, struct fx_stopper **stopper,
                             struct fx_error *err) {
    size_t n_bias = p->sampler.n_logit_bias + (p->ignore_eos ? e->n_eog : 0);
    struct fx_logit_bias *bias = malloc((n_bias + 1) * sizeof *bias);
    if (!bias)
        return fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "out of memory for a logit bias");
    if (p->sampler.n_logit_bias)
        memcpy(bias, p->sampler.logit_bias, p->sampler.n_logit_bias * sizeof *bias);
    if (p->ignore_eos)
        for (size_t k = 0; k < e->n_eog; k++)
            bias[p->sampler.n_logit_bias + k] =
                (struct fx_logit_bias){.token = e->eog[k], .bias = -INFINITY};
    struct fx_sampler_params sp = p->sampler;
    sp.logit_bias = bias;
    sp.n_logit_bias = n_bias;
    sp.seed += (uint64_t)i;
    if (sp.penalty_last_n < 0)
        sp.penalty_last_n = e->n_ctx_seq;
    fx_status st = fx_sampler_create(e->n_vocab, &sp, sampler, err);
    free(bias);
    if (st)
        return st;
    /* The prompt joins the penalty window, as in ferrox run. */
    for (int32_t k = 0; k < p->n_prompt && !st; k++)
        st = fx_sampler_accept(*sampler, p->prompt[k], err);
    if (st)
        return st;
    struct fx_stop_params stp = {
        .strings = p->stops,
        .n_strings = p->n_stops,
        .tokens = p->ignore_eos ? NULL : e->eog,
        .n_tokens = p->ignore_eos ? 0 : e->n_eog,
        .max_tokens = p->max_tokens > 0 ? p->max_tokens : 0,
    };
    return fx_stopper_create(&stp, stopper, err);
}

fx_status fx_engine_submit(struct fx_engine *e, const struct fx_gen_params *p,
                           fx_engine_notify_fn notify, void *user, struct fx_gen_req **out,
                           struct fx_error *err) {
    *out = NULL;
    if (p->n_prompt < 1 || !p->prompt)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET, "prompt: it is empty");
    if (p->n_prompt > e->n_ctx_seq)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "prompt: %d tokens, longer than the context of %d tokens", p->n_prompt,
                            e->n_ctx_seq);
    for (int32_t i = 0; i < p->n_prompt; i++)
        if (p->prompt[i] < 0 || p->prompt[i] >= e->n_vocab)
            return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                                "prompt: token %d at index %d is not in the vocabulary (0..%d)",
                                p->prompt[i], i, e->n_vocab - 1);
    if (p->n < 1 || p->n > e->p.n_parallel)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "n: %d choices, the server runs 1 to %d sequences at once (--parallel)",
                            p->n, e->p.n_parallel);
    if (p->logprobs < -1 || p->logprobs > FX_ENGINE_MAX_LOGPROBS)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "logprobs: %d alternatives, at most %d", p->logprobs,
                            FX_ENGINE_MAX_LOGPROBS);
    struct fx_gen_req *r = calloc(1, sizeof *r);
    if (!r)
        return fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "out of memory for a request");
    pthread_mutex_init(&r->mu, NULL);
    pthread_mutex_init(&r->notify_mu, NULL);
    atomic_init(&r->refs, 2); /* the caller's and the engine's */
    atomic_init(&r->cancelled, false);
    r->engine = e;
    r->notify = notify;
    r->notify_user = user;
    r->n = p->n;
    r->n_prompt = p->n_prompt;
    r->logprobs = p->logprobs;
    r->max_tokens = p->max_tokens;
    fx_status st = FX_ERR_NOMEM;
    r->prompt = malloc((size_t)p->n_prompt * sizeof *r->prompt);
    r->choices = calloc((size_t)p->n, sizeof *r->choices);
    r->samplers = calloc((size_t)p->n, sizeof *r->samplers);
    r->stoppers = calloc((size_t)p->n, sizeof *r->stoppers);
    if (!r->prompt || !r->choices || !r->samplers || !r->stoppers)
        goto nomem;
    memcpy(r->prompt, p->prompt, (size_t)p->n_prompt * sizeof *r->prompt);
    for (int32_t i = 0; i < p->n; i++) {
        struct fx_gen_choice *c = &r->choices[i];
        c->cap = 64;
        if (!(c->text = malloc(c->cap)))
            goto nomem;
        c->text[0] = '\0';
        if ((st = make_choice(e, p, i, &r->samplers[i], &r->stoppers[i], err)))
            goto fail;
    }
    r->t_arrival = fx_now();

    pthread_mutex_lock(&e->mu);
    if (e->draining || e->stop) {
        pthread_mutex_unlock(&e->mu);
        st = fx_error_set(err, FX_ERR_CANCELLED, FX_NO_OFFSET, "the server is shutting down");
        goto fail;
    }
    if (e->n_waiting >= e->p.queue_max) {
        int32_t n = e->n_waiting;
        pthread_mutex_unlock(&e->mu);
        st = fx_error_set(err, FX_ERR_CAPACITY, FX_NO_OFFSET,
                          "the server is busy: %d requests are waiting (--queue-max)", n);
        goto fail;
    }
    if (e->wait_tail)
        e->wait_tail->next = r;
    else
        e->wait_head = r;
    e->wait_tail = r;
    e->n_waiting++;
    e->idle = false;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    *out = r;
    return FX_OK;
nomem:
    st = fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "out of memory for a request");
fail:
    req_free(r);
    return st;
}

/* ---- the thread ------------------------------------------------------------------------------ */

/* Whether anything waits for the engine; under e->mu. Slots are the engine thread's own, and
 * this is only called from it. */
static bool has_work(const struct fx_engine *e) {
    if (e->wait_head || e->emb_head || e->emb_cur)
        return true;
    for (int32_t i = 0; i < e->p.n_parallel; i++)
        if (e->slots[i].req)
            return true;
    return false;
}

static void *engine_main(void *arg) {
    struct fx_engine *e = arg;
    bool idle_spin = false;
    for (;;) {
        pthread_mutex_lock(&e->mu);
        if (!has_work(e)) {
            e->idle = true;
            pthread_cond_broadcast(&e->idle_cv);
        }
        while (!e->stop && !e->abort_all && !has_work(e))
            pthread_cond_wait(&e->cv, &e->mu);
        if (idle_spin && !e->stop && !e->abort_all) {
            /* The last iteration did nothing (the queue's head waits for blocks held by
             * sequences that are not running): wait a little rather than spin. */
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 5 * 1000 * 1000;
            if (ts.tv_nsec >= 1000000000) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000;
            }
            pthread_cond_timedwait(&e->cv, &e->mu, &ts);
        }
        bool stop = e->stop, abort_all = e->abort_all || e->stop;
        e->abort_all = false; /* taken: everything there is now is cancelled below */
        struct fx_gen_req *dropped = NULL;
        if (abort_all) {
            dropped = e->wait_head;
            e->wait_head = e->wait_tail = NULL;
            e->n_waiting = 0;
        }
        pthread_mutex_unlock(&e->mu);

        if (abort_all) {
            while (dropped) {
                struct fx_gen_req *next = dropped->next;
                fx_sched_finish_queued(e, dropped, FX_FINISH_ABORT, NULL);
                dropped = next;
            }
            fx_sched_abort_all(e);
            fx_embed_iterate(e, true);
        }
        if (stop)
            break;
        bool worked = fx_embed_iterate(e, false);
        fx_sched_drop_cancelled(e);
        worked = fx_sched_iterate(e) || worked;
        idle_spin = !worked;
    }
    pthread_mutex_lock(&e->mu);
    e->idle = true;
    pthread_cond_broadcast(&e->idle_cv);
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

void fx_engine_drain(struct fx_engine *e, double grace_s) {
    if (!e)
        return;
    pthread_mutex_lock(&e->mu);
    e->draining = true;
    pthread_cond_signal(&e->cv);
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    double whole = floor(grace_s > 0 ? grace_s : 0);
    dl.tv_sec += (time_t)whole;
    dl.tv_nsec += (long)((grace_s - whole) * 1e9);
    if (dl.tv_nsec >= 1000000000) {
        dl.tv_sec++;
        dl.tv_nsec -= 1000000000;
    }
    while (!e->idle && !e->stop)
        if (pthread_cond_timedwait(&e->idle_cv, &e->mu, &dl) != 0)
            break;
    if (!e->idle) {
        e->abort_all = true;
        pthread_cond_signal(&e->cv);
        while (!e->idle)
            pthread_cond_wait(&e->idle_cv, &e->mu);
    }
    pthread_mutex_unlock(&e->mu);
}

/* ---- create and free ------------------------------------------------------------------------- */

fx_status fx_engine_create(const struct fx_model *m, const struct fx_vocab *v,
                           const struct fx_engine_params *params, struct fx_engine **out,
                           struct fx_error *err) {
    *out = NULL;
    struct fx_engine_params p = params ? *params : fx_engine_default_params();
    if (p.n_parallel < 1 || p.n_parallel > 1024)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "--parallel %d: between 1 and 1024 sequences", p.n_parallel);
    if (p.block_size == 0)
        p.block_size = FX_ENGINE_BLOCK_SIZE;
    if (p.n_batch == 0)
        p.n_batch = FX_ENGINE_N_BATCH;
    if (p.step_tokens == 0)
        p.step_tokens = p.n_batch;
    if (p.step_tokens < 1)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "--max-num-batched-tokens %d: >= 1", p.step_tokens);
    if (p.spec_max_batch == 0)
        p.spec_max_batch = FX_ENGINE_SPEC_MAX_BATCH;
    if (p.spec_max_batch < 1)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET, "--spec-max-batch %d: >= 1",
                            p.spec_max_batch);
    const struct fx_spec_params *sp = &p.spec_params;
    if (p.spec && (sp->draft_max < 1 || sp->draft_max > 256 || sp->draft_min < 0 ||
                   sp->draft_min > sp->draft_max))
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "--draft-min %d, --draft-max %d: 0 <= min <= max, 1 <= max <= 256",
                            sp->draft_min, sp->draft_max);
    if (p.queue_max < 0)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET, "--queue-max %d: >= 0",
                            p.queue_max);
    if (p.n_ctx < 1 || p.block_size < 1 || p.n_batch < 1)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "--ctx-size %d, block size %d, --batch-size %d: each >= 1", p.n_ctx,
                            p.block_size, p.n_batch);
    int32_t n_blocks = (int32_t)(((int64_t)p.n_ctx + p.block_size - 1) / p.block_size);
    int32_t n_ctx_seq = p.n_ctx_seq > 0 ? p.n_ctx_seq : p.n_ctx;
    if (p.n_ctx_seq <= 0 && fx_model_n_ctx_train(m) > 0 && n_ctx_seq > fx_model_n_ctx_train(m))
        n_ctx_seq = fx_model_n_ctx_train(m);
    if (n_ctx_seq > n_blocks * p.block_size)
        n_ctx_seq = n_blocks * p.block_size;

    struct fx_engine *e = calloc(1, sizeof *e);
    if (!e)
        return fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "out of memory for the engine");
    pthread_mutex_init(&e->mu, NULL);
    pthread_mutex_init(&e->stats_mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    pthread_cond_init(&e->idle_cv, NULL);
    e->model = m;
    e->vocab = v;
    e->p = p;
    e->n_vocab = fx_model_n_vocab(m);
    e->n_embd = fx_model_n_embd(m);
    e->n_ctx_seq = n_ctx_seq;
    e->n_ctx_embd = n_ctx_seq < 4096 ? n_ctx_seq : 4096;
    e->idle = true;
    e->m.ttft = (struct fx_histogram){.n_bounds = N_OF(ttft_bounds), .bounds = ttft_bounds};
    e->m.itl = (struct fx_histogram){.n_bounds = N_OF(itl_bounds), .bounds = itl_bounds};
    e->m.e2e = (struct fx_histogram){.n_bounds = N_OF(e2e_bounds), .bounds = e2e_bounds};
    e->m.kv_blocks = n_blocks;

    fx_status st;
    struct fx_kv_pool_params pp = fx_kv_pool_default_params();
    pp.n_blocks = n_blocks;
    pp.block_size = p.block_size;
    pp.n_seq_max = p.n_parallel;
    pp.type_k = p.type_k;
    pp.type_v = p.type_v;
    if ((st = fx_kv_pool_create(m, &pp, &e->pool, err)))
        goto fail;
    struct fx_context_params cp = fx_context_default_params();
    cp.n_ctx = n_ctx_seq;
    cp.n_batch = p.n_batch;
    cp.n_threads = p.n_threads;
    cp.type_k = p.type_k;
    cp.type_v = p.type_v;
    cp.paged_only = true;
    if ((st = fx_context_create(m, &cp, &e->ctx, err)))
        goto fail;

    int32_t n_tok = fx_vocab_n_tokens(v) < e->n_vocab ? fx_vocab_n_tokens(v) : e->n_vocab;
    e->eog = malloc(((size_t)n_tok + 1) * sizeof *e->eog);
    e->slots = calloc((size_t)p.n_parallel, sizeof *e->slots);
    e->order = calloc((size_t)p.n_parallel, sizeof *e->order);
    e->touched = calloc((size_t)p.n_parallel * 2, sizeof *e->touched);
    e->b_tok = malloc((size_t)p.n_batch * sizeof *e->b_tok);
    e->b_pos = malloc((size_t)p.n_batch * sizeof *e->b_pos);
    e->b_seq = malloc((size_t)p.n_batch * sizeof *e->b_seq);
    e->b_logits = malloc((size_t)p.n_batch * sizeof *e->b_logits);
    e->b_snap = malloc((size_t)p.n_batch * sizeof *e->b_snap);
    /* Rows with logits: each slot's last row (decoding or the end of its prompt) and, with
     * speculation, the drafts (at most step_tokens and FX_ENGINE_DRAFT_ROWS); never more than
     * the batch. */
    int32_t draft_rows =
        p.step_tokens < FX_ENGINE_DRAFT_ROWS ? p.step_tokens : FX_ENGINE_DRAFT_ROWS;
    int64_t n_logit_rows = (int64_t)p.n_parallel + (p.spec ? draft_rows : 0);
    e->n_logit_rows = (int32_t)(n_logit_rows < p.n_batch ? n_logit_rows : p.n_batch);
    e->logits = malloc((size_t)e->n_logit_rows * (size_t)e->n_vocab * sizeof *e->logits);
    if (!e->eog || !e->slots || !e->order || !e->touched || !e->b_tok || !e->b_pos || !e->b_seq ||
        !e->b_logits || !e->b_snap || !e->logits) {
        st = fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "out of memory for the engine");
        goto fail;
    }
    for (fx_token id = 0; id < n_tok; id++)
        if (fx_vocab_is_eog(v, id))
            e->eog[e->n_eog++] = id;
    for (int32_t i = 0; i < p.n_parallel; i++)
        e->slots[i].seq = -1;
    if ((st = fx_draft_init(e, err)))
        goto fail;
    if (pthread_create(&e->thread, NULL, engine_main, e) != 0) {
        st = fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "cannot start the engine thread");
        goto fail;
    }
    e->thread_started = true;
    *out = e;
    return FX_OK;
fail:
    fx_engine_free(e);
    return st;
}

void fx_engine_free(struct fx_engine *e) {
    if (!e)
        return;
    if (e->thread_started) {
        pthread_mutex_lock(&e->mu);
        e->stop = true;
        pthread_cond_signal(&e->cv);
        pthread_mutex_unlock(&e->mu);
        pthread_join(e->thread, NULL);
    }
    fx_draft_free(e);
    for (int32_t i = 0; e->slots && i < e->p.n_parallel; i++)
        free(e->slots[i].toks);
    free(e->slots);
    free(e->order);
    free(e->touched);
    free(e->eog);
    free(e->b_tok);
    free(e->b_pos);
    free(e->b_seq);
    free(e->b_logits);
    free(e->b_snap);
    free(e->logits);
    free(e->hidden);
    fx_context_free(e->ectx);
    fx_context_free(e->ctx);
    fx_kv_pool_free(e->pool);
    pthread_mutex_destroy(&e->mu);
    pthread_mutex_destroy(&e->stats_mu);
    pthread_cond_destroy(&e->cv);
    pthread_cond_destroy(&e->idle_cv);
    free(e);
}

/* ---- metrics --------------------------------------------------------------------------------- */

void fx_engine_metrics(struct fx_engine *e, struct fx_engine_metrics *out) {
    pthread_mutex_lock(&e->mu);
    int32_t queued = e->n_waiting;
    pthread_mutex_unlock(&e->mu);
    pthread_mutex_lock(&e->stats_mu);
    *out = e->m;
    out->n_waiting = queued + e->n_swapped;
    pthread_mutex_unlock(&e->stats_mu);
}
