/* The engine's private state, shared by engine.c (the thread, the queues, submission and
 * metrics), sched.c (admission, the batched step, sampling) and embed.c (embeddings). */
#ifndef FX_ENGINE_IMPL_H
#define FX_ENGINE_IMPL_H

#include "engine/engine.h"

/* One running sequence: a choice of a request. Slots are owned by the engine thread. */
struct fx_slot {
    struct fx_gen_req *req; /* NULL: the slot is free */
    int32_t choice;
    fx_seq_id seq;     /* -1: not in the pool (swapped out, or a fork not made yet) */
    bool fork_pending; /* a choice > 0 waiting for choice 0's prompt logits */
    fx_token *toks;    /* [cap_toks]: prompt then generated tokens; the last generated one is
                          evaluated by the next step */
    int32_t n_toks, cap_toks;
    int32_t n_eval; /* tokens of toks in the pool */
    struct fx_sampler *sampler;
    struct fx_stopper *stopper;
    double t_last; /* when its last token was sampled; 0 before the first */
    /* The current step: rows of this slot in the batch, and its logits row (-1: none). */
    int32_t rows, logit_row;
};

struct fx_engine {
    const struct fx_model *model;
    const struct fx_vocab *vocab;
    struct fx_engine_params p;
    int32_t n_vocab, n_embd, n_ctx_seq, n_ctx_embd;
    struct fx_context *ctx;  /* paged_only: runs the multi-sequence steps */
    struct fx_kv_pool *pool; /* n_parallel sequences */
    struct fx_context *ectx; /* contiguous, for embeddings; made on first use */
    float *hidden;           /* [n_ctx_embd][n_embd], with ectx */
    fx_token *eog;           /* the vocabulary's end-of-generation tokens */
    size_t n_eog;
    struct fx_slot *slots; /* [n_parallel] */
    /* The step's batch, [n_batch] rows, and its logits, [n_parallel][n_vocab]. */
    fx_token *b_tok;
    int32_t *b_pos;
    fx_seq_id *b_seq;
    int8_t *b_logits;
    float *logits;
    struct fx_slot **order;      /* [n_parallel]: used slots, oldest request first */
    struct fx_gen_req **touched; /* [n_parallel]: requests to notify after the step */
    int n_touched;
    uint64_t next_order;
    struct fx_embed_req *emb_cur; /* the job being computed, one input per iteration */
    int32_t emb_next;

    pthread_t thread;
    bool thread_started;
    pthread_mutex_t mu;     /* guards the queues and flags below */
    pthread_cond_t cv;      /* the engine thread waits for work */
    pthread_cond_t idle_cv; /* drain waits for idle */
    struct fx_gen_req *wait_head, *wait_tail;
    int32_t n_waiting;
    struct fx_embed_req *emb_head, *emb_tail;
    bool draining, abort_all, stop;
    bool idle; /* set by the engine at the end of an iteration with nothing left to do */

    pthread_mutex_t stats_mu; /* guards m */
    struct fx_engine_metrics m;
    int32_t n_swapped; /* requests holding slots but no sequence in the pool */
};

/* sched.c: one scheduler iteration (admission, step, sampling); true when it did some work. */
bool fx_sched_iterate(struct fx_engine *e);
/* Cancels every request that holds a slot (finish_reason abort). */
void fx_sched_abort_all(struct fx_engine *e);
/* Frees the slots of cancelled requests. */
void fx_sched_drop_cancelled(struct fx_engine *e);
/* Finishes every choice of a request that holds no slot (queued) with f. */
void fx_sched_finish_queued(struct fx_engine *e, struct fx_gen_req *r, enum fx_finish f,
                            const char *msg);

/* Reference counting shared by engine.c and sched.c. */
void fx_gen_req_unref(struct fx_gen_req *r);
void fx_gen_req_notify(struct fx_gen_req *r);
void fx_hist_observe(struct fx_histogram *h, double v);

/* embed.c: computes one input of the current job (taking the next from the queue when none is
 * current); true when it did some work. Fails every queued job when abort is true. */
bool fx_embed_iterate(struct fx_engine *e, bool abort);
void fx_embed_req_unref(struct fx_embed_req *r);

#endif
