/* Embeddings on the engine thread: each input's final normed hidden states from a contiguous
 * context of their own (fx_forward_hidden_batch, made on first use), pooled (mean or last token)
 * and L2-normalised. One input is computed per engine iteration, so that a large batch of inputs
 * does not stop the streams for long. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "engine/engine_impl.h"

static void embed_free(struct fx_embed_req *r) {
    for (int32_t i = 0; r->inputs && i < r->n_inputs; i++)
        free(r->inputs[i]);
    free(r->inputs);
    free(r->lens);
    free(r->out);
    pthread_mutex_destroy(&r->mu);
    pthread_mutex_destroy(&r->notify_mu);
    free(r);
}

void fx_embed_req_unref(struct fx_embed_req *r) {
    if (atomic_fetch_sub(&r->refs, 1) == 1)
        embed_free(r);
}

void fx_embed_req_detach(struct fx_embed_req *r) {
    if (!r)
        return;
    pthread_mutex_lock(&r->notify_mu);
    r->notify = NULL;
    pthread_mutex_unlock(&r->notify_mu);
}

void fx_embed_req_release(struct fx_embed_req *r) {
    if (r)
        fx_embed_req_unref(r); /* a job runs to its end: it is short */
}

fx_status fx_engine_embed(struct fx_engine *e, const fx_token *const *inputs, const int32_t *lens,
                          int32_t n_inputs, fx_engine_notify_fn notify, void *user,
                          struct fx_embed_req **out, struct fx_error *err) {
    *out = NULL;
    if (n_inputs < 1)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET, "input: it is empty");
    for (int32_t i = 0; i < n_inputs; i++) {
        if (lens[i] < 1)
            return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET, "input[%d]: it is empty", i);
        if (lens[i] > e->n_ctx_embd)
            return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                                "input[%d]: %d tokens, longer than the context of %d tokens", i,
                                lens[i], e->n_ctx_embd);
        for (int32_t k = 0; k < lens[i]; k++)
            if (inputs[i][k] < 0 || inputs[i][k] >= e->n_vocab)
                return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                                    "input[%d]: token %d at index %d is not in the vocabulary "
                                    "(0..%d)",
                                    i, inputs[i][k], k, e->n_vocab - 1);
    }
    struct fx_embed_req *r = calloc(1, sizeof *r);
    if (!r)
        return fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "out of memory for a request");
    pthread_mutex_init(&r->mu, NULL);
    pthread_mutex_init(&r->notify_mu, NULL);
    atomic_init(&r->refs, 2);
    r->engine = e;
    r->notify = notify;
    r->notify_user = user;
    r->n_inputs = n_inputs;
    r->n_embd = e->n_embd;
    r->inputs = calloc((size_t)n_inputs, sizeof *r->inputs);
    r->lens = malloc((size_t)n_inputs * sizeof *r->lens);
    r->out = calloc((size_t)n_inputs * (size_t)e->n_embd, sizeof *r->out);
    if (!r->inputs || !r->lens || !r->out)
        goto nomem;
    for (int32_t i = 0; i < n_inputs; i++) {
        if (!(r->inputs[i] = malloc((size_t)lens[i] * sizeof *r->inputs[i])))
            goto nomem;
        memcpy(r->inputs[i], inputs[i], (size_t)lens[i] * sizeof *r->inputs[i]);
        r->lens[i] = lens[i];
        r->n_tokens += lens[i];
    }
    pthread_mutex_lock(&e->mu);
    if (e->draining || e->stop) {
        pthread_mutex_unlock(&e->mu);
        embed_free(r);
        return fx_error_set(err, FX_ERR_CANCELLED, FX_NO_OFFSET, "the server is shutting down");
    }
    if (e->emb_tail)
        e->emb_tail->next = r;
    else
        e->emb_head = r;
    e->emb_tail = r;
    e->idle = false;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    *out = r;
    return FX_OK;
nomem:
    embed_free(r);
    return fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "out of memory for a request");
}

static void finish_job(struct fx_engine *e, struct fx_embed_req *r, fx_status st, const char *msg) {
    pthread_mutex_lock(&r->mu);
    r->done = true;
    r->status = st;
    if (st != FX_OK)
        snprintf(r->error, sizeof r->error, "%s", msg ? msg : fx_status_name(st));
    pthread_mutex_unlock(&r->mu);
    if (st == FX_OK) {
        pthread_mutex_lock(&e->stats_mu);
        e->m.embed_requests++;
        e->m.embed_tokens += (uint64_t)r->n_tokens;
        pthread_mutex_unlock(&e->stats_mu);
    }
    pthread_mutex_lock(&r->notify_mu);
    if (r->notify)
        r->notify(r->notify_user);
    pthread_mutex_unlock(&r->notify_mu);
    fx_embed_req_unref(r);
}

/* Pools rows [n][n_embd] of hidden into out and normalises it. */
static void pool_rows(const float *hidden, int32_t n, int32_t n_embd, enum fx_pooling pooling,
                      float *out) {
    double norm = 0;
    for (int32_t j = 0; j < n_embd; j++) {
        double v;
        if (pooling == FX_POOLING_LAST) {
            v = hidden[(size_t)(n - 1) * (size_t)n_embd + (size_t)j];
        } else {
            v = 0;
            for (int32_t i = 0; i < n; i++)
                v += hidden[(size_t)i * (size_t)n_embd + (size_t)j];
            v /= n;
        }
        out[j] = (float)v;
        norm += v * v;
    }
    norm = sqrt(norm);
    if (norm > 0)
        for (int32_t j = 0; j < n_embd; j++)
            out[j] = (float)(out[j] / norm);
}

bool fx_embed_iterate(struct fx_engine *e, bool abort) {
    if (abort) {
        pthread_mutex_lock(&e->mu);
        struct fx_embed_req *list = e->emb_head;
        e->emb_head = e->emb_tail = NULL;
        pthread_mutex_unlock(&e->mu);
        if (e->emb_cur) {
            finish_job(e, e->emb_cur, FX_ERR_CANCELLED, "the server is shutting down");
            e->emb_cur = NULL;
        }
        while (list) {
            struct fx_embed_req *next = list->next;
            finish_job(e, list, FX_ERR_CANCELLED, "the server is shutting down");
            list = next;
        }
        return true;
    }
    if (!e->emb_cur) {
        pthread_mutex_lock(&e->mu);
        e->emb_cur = e->emb_head;
        if (e->emb_head) {
            e->emb_head = e->emb_head->next;
            if (!e->emb_head)
                e->emb_tail = NULL;
        }
        pthread_mutex_unlock(&e->mu);
        e->emb_next = 0;
        if (!e->emb_cur)
            return false;
    }
    struct fx_embed_req *r = e->emb_cur;
    struct fx_error err;
    if (!e->ectx) {
        struct fx_context_params cp = fx_context_default_params();
        cp.n_ctx = e->n_ctx_embd;
        cp.n_batch = e->p.n_batch;
        cp.n_threads = e->p.n_threads;
        cp.type_k = e->p.type_k;
        cp.type_v = e->p.type_v;
        if (fx_context_create(e->model, &cp, &e->ectx, &err) != FX_OK) {
            e->ectx = NULL;
            e->emb_cur = NULL;
            finish_job(e, r, err.code, err.msg);
            return true;
        }
        e->hidden = malloc((size_t)e->n_ctx_embd * (size_t)e->n_embd * sizeof *e->hidden);
        if (!e->hidden) {
            fx_context_free(e->ectx);
            e->ectx = NULL;
            e->emb_cur = NULL;
            finish_job(e, r, FX_ERR_NOMEM, "out of memory for the hidden states");
            return true;
        }
    }
    int32_t i = e->emb_next++;
    if (fx_forward_hidden_batch(e->ectx, r->inputs[i], r->lens[i], 0, e->hidden, &err) != FX_OK) {
        e->emb_cur = NULL;
        finish_job(e, r, err.code, err.msg);
        return true;
    }
    pool_rows(e->hidden, r->lens[i], e->n_embd, e->p.pooling,
              r->out + (size_t)i * (size_t)e->n_embd);
    if (e->emb_next == r->n_inputs) {
        e->emb_cur = NULL;
        finish_job(e, r, FX_OK, NULL);
    }
    return true;
}
