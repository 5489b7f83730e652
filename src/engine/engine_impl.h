/* The engine's private state, shared by engine.c (the thread, the queues, submission and
 * metrics), sched.c (admission, the batched step, sampling) and embed.c (embeddings). */
#ifndef FX_ENGINE_IMPL_H
#define FX_ENGINE_IMPL_H

#include "engine/engine.h"
#include "spec/spec.h"

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
    /* The current step: rows of this slot in the batch, and its first logits row (-1: none;
     * a decoding slot's rows are [last token, drafts], each with logits). */
    int32_t rows, logit_row;
    /* Speculation (the engine's, kept across requests; NULL / unused without): */
    struct fx_drafter *drafter; /* prompt lookup */
    fx_token *draft;            /* [spec draft_max]: this step's drafts */
    int32_t n_draft;
    double t_draft;         /* seconds spent drafting for this step */
    struct fx_spec_ctl ctl; /* k and the switch-off, reset for each request */
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
    /* The step's batch, [n_batch] rows, and its logits, [n_logit_rows][n_vocab]: a row for each
     * slot and, with speculation, step_tokens rows of drafts. b_snap marks the rows after which
     * a hybrid model's sequence keeps its recurrent state, to roll rejected drafts back to. */
    fx_token *b_tok;
    int32_t *b_pos;
    fx_seq_id *b_seq;
    int8_t *b_logits, *b_snap;
    float *logits;
    int32_t n_logit_rows;
    /* The step cost model (speculation, draft.c): a step of R decoding rows and P prompt rows
     * takes about alpha + beta * R + beta_p * P seconds; decayed sums of R, P, T and their
     * products. */
    double cm_w, cm_x, cm_x2, cm_y, cm_xx, cm_x2x2, cm_xx2, cm_xy, cm_x2y;
    double alpha, beta, beta_p;  /* beta_p: a prompt row's cost */
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

/* draft.c: speculation's side of a step. */
/* Makes the slots' drafters and draft buffers (with p.spec). */
fx_status fx_draft_init(struct fx_engine *e, struct fx_error *err);
void fx_draft_free(struct fx_engine *e);
/* A new request's choice in slot s: its controller starts afresh. */
void fx_draft_reset(struct fx_engine *e, struct fx_slot *s);
/* Chooses and proposes slot s's drafts for this step (s->n_draft), at most max_k. */
void fx_draft_propose(struct fx_engine *e, struct fx_slot *s, int32_t max_k);
/* After a step of n_rows rows (n_prompt_rows of them prompt rows) that took t seconds over
 * n_seqs sequences: refits the cost model. */
void fx_draft_observe_step(struct fx_engine *e, int32_t n_rows, int32_t n_prompt_rows,
                           int32_t n_seqs, double t);
/* A decoding slot's step, as it was before its rows were accepted (the slot may finish on the
 * way). */
struct fx_draft_step {
    int32_t pos;     /* of its first row */
    int32_t n_draft; /* drafts after it */
    double t_draft;  /* seconds spent drafting them */
};
/* Feeds slot s's controller with its step d: n_out tokens yielded, `kept` drafts kept; the step
 * ran n_seqs sequences. */
void fx_draft_account(struct fx_engine *e, struct fx_slot *s, const struct fx_draft_step *d,
                      int32_t n_seqs, int32_t n_out, int32_t kept, bool rejected);

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
