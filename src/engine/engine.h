/* The serving engine: generation requests, the continuous-batching scheduler, admission,
 * preemption and cancellation, and embeddings (ARCHITECTURE.md section 7).
 *
 * One thread, started by fx_engine_create, owns the model's contexts, the paged KV pool and the
 * scheduler. Other threads (the HTTP server's, or a test's) submit requests and read their output
 * as it grows; nothing they do waits for a forward pass. Each scheduler step:
 *
 *   1. drops cancelled requests (their sequences and blocks are freed at once);
 *   2. admits sequences while slots and KV blocks allow: swapped-out ones first, then waiting
 *      requests in arrival order; a new sequence takes the longest cached prefix of its prompt
 *      (fx_kv_seq_create_cached) and reserves the blocks of the rest (fx_kv_seq_reserve: "later"
 *      leaves it waiting, "never" fails the request);
 *   3. builds one batch: one row for every decoding sequence, then prompt chunks of the others
 *      (chunked prefill, below), reserving each decoding row's block first and swapping out the
 *      newest request when the pool is full;
 *   4. runs one fx_forward_multi_seq over it, samples every sequence whose last row came back with
 *      its own sampler, runs its stopper, and appends the released text to the request.
 *
 * The step's rows: one for every decoding sequence first, then drafts and prompt chunks share
 * what is left of step_tokens rows (a step's time is the inter-token gap of every stream that
 * waits for it); n_batch rows when none decodes, or to work off a backlog of prompt rows.
 *
 * Speculation (spec): a decoding sequence may put [its last token, k drafts from prompt lookup]
 * in the step instead of its one row, every row's logits asked for; its rows are accepted in
 * order by the rule of fx_spec_step (src/spec/spec.h: one body for both), and the rows after the
 * first rejected draft are rolled back (fx_kv_seq_truncate; a hybrid model's sequence restores
 * the recurrent state that the step kept after each of its rows but the last, fx_batch.snapshot,
 * so k is at most FX_ROLLBACK_MAX there). k and the switch-off are the
 * controller of fx_spec, per sequence, fed with the sequence's share of each step's measured
 * time (a fixed cost split between the step's sequences plus a cost per row, fitted over recent
 * steps), so that a draft row is weighed against what a row costs the whole batch.
 *
 * A sequence's state is the list of its tokens (prompt, then generated) and how many of them are
 * in the pool; the last generated token is evaluated by the next step. Swapping a request out
 * frees its sequences and keeps the tokens, so re-admission recomputes them, mostly from the
 * prefix cache. Because the multi-sequence step is batch-invariant and each sequence samples with
 * its own sampler, a request's output does not depend on what else runs, how its prompt was
 * chunked, or whether it was swapped out: at temperature 0 it is the text of `ferrox run`.
 *
 * n > 1 choices: the prompt is evaluated once by choice 0; when its logits come back the other
 * choices fork its sequence (fx_kv_seq_fork, sharing every prompt block) and sample from the same
 * row with their own samplers (seed + choice index).
 *
 * Thread safety: every function here may be called from any thread, except that one request or
 * job handle belongs to the thread that holds its reference. */
#ifndef FX_ENGINE_H
#define FX_ENGINE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "ferrox.h"

/* How /v1/embeddings pools the final hidden states of an input's tokens. */
enum fx_pooling { FX_POOLING_MEAN, FX_POOLING_LAST };

struct fx_engine_params {
    int32_t n_parallel;  /* sequences running at once (slots); default 4 */
    int32_t n_ctx;       /* KV positions in the pool, all sequences together; default 4096 */
    int32_t n_ctx_seq;   /* positions one sequence may hold; 0: n_ctx, at most the model's
                            training context */
    int32_t n_batch;     /* rows per step at most (the prompt chunk while nothing decodes, or
                            while prompts have a backlog); 0: FX_ENGINE_N_BATCH */
    int32_t step_tokens; /* rows per step while sequences decode (vLLM's
                            max_num_batched_tokens): a row for each decoding sequence, then
                            drafts and prompt chunks share what is left; a backlog of more than
                            n_batch prompt rows takes n_batch (sched.c); 0: n_batch */
    int32_t n_threads;   /* workers; 0: one per CPU */
    int32_t queue_max;   /* requests waiting for admission at most; default 64 */
    int32_t block_size;  /* positions per KV block; 0: FX_ENGINE_BLOCK_SIZE */
    enum fx_type type_k, type_v;
    enum fx_pooling pooling;
    /* Speculation: each decoding sequence drafts by prompt lookup (fx_drafter_ngram_create) and
     * verifies its drafts as rows of the step; the text is the same as without. */
    bool spec;
    struct fx_spec_params spec_params;
    int32_t spec_max_batch; /* adaptive speculation drafts only in steps where at most this many
                               sequences decode (vLLM's disable_by_batch_size); 0:
                               FX_ENGINE_SPEC_MAX_BATCH */
};

/* The default of spec_max_batch. On 2 CPUs (smollm2, docs/PERFORMANCE.md, the tenth session)
 * prompt lookup paid at 2 sequences and not at 4 (the same throughput, longer gaps between
 * tokens): with more rows a step is no longer bound by reading the weights, which is what a
 * draft row shares for free. */
#define FX_ENGINE_SPEC_MAX_BATCH 2
/* Draft rows a step holds at most (the logits kept for them). */
#define FX_ENGINE_DRAFT_ROWS 64
/* The default of block_size. */
#define FX_ENGINE_BLOCK_SIZE 16
/* The default of n_batch: a burst of prompts is prefilled in steps of this many rows, and the
 * fewer such steps, the fewer streams' inter-token gaps they lengthen (docs/PERFORMANCE.md). */
#define FX_ENGINE_N_BATCH 1024

struct fx_engine_params fx_engine_default_params(void);

struct fx_engine;

/* Creates the contexts and the pool and starts the engine thread. The model and the vocabulary
 * are borrowed and must outlive the engine. */
fx_status fx_engine_create(const struct fx_model *m, const struct fx_vocab *v,
                           const struct fx_engine_params *p, struct fx_engine **out,
                           struct fx_error *err);
/* Cancels whatever still runs, stops the thread and frees everything. Requests and jobs whose
 * handles are still held stay readable (done, finish_reason abort) until released. */
void fx_engine_free(struct fx_engine *e);

/* Stops accepting requests (submit then fails with FX_ERR_CANCELLED), lets the running and
 * waiting ones finish for up to grace_s seconds, cancels the rest, and returns once none is
 * left. */
void fx_engine_drain(struct fx_engine *e, double grace_s);

/* The sizes the engine was made with (after defaults). */
int32_t fx_engine_n_parallel(const struct fx_engine *e);
int32_t fx_engine_n_ctx_seq(const struct fx_engine *e);
int32_t fx_engine_n_ctx_embd(const struct fx_engine *e);

/* Called by the engine thread, holding no lock of the engine's, whenever a request or job it
 * belongs to has new output or is done. It must be quick and must not call back into the engine
 * except to read the request. */
typedef void (*fx_engine_notify_fn)(void *user);

/* ---- generation ------------------------------------------------------------------------------ */

#define FX_ENGINE_MAX_LOGPROBS 20

enum fx_finish {
    FX_FINISH_NONE = 0, /* still generating */
    FX_FINISH_STOP,     /* an end-of-generation token or a stop string */
    FX_FINISH_LENGTH,   /* max_tokens, or the sequence's context is full */
    FX_FINISH_ABORT,    /* cancelled, or the engine shut down */
    FX_FINISH_ERROR,    /* see the request's error */
};

/* "stop", "length", "abort", "error". */
const char *fx_finish_name(enum fx_finish f);

struct fx_gen_params {
    const fx_token *prompt; /* n_prompt ids (>= 1), copied */
    int32_t n_prompt;
    int32_t max_tokens; /* tokens per choice; <= 0: until the end of text or a full context */
    int32_t n;          /* choices, 1..n_parallel */
    struct fx_sampler_params sampler; /* logit_bias is copied; choice i uses seed + i */
    const char *const *stops;         /* n_stops stop strings, copied */
    size_t n_stops;
    bool ignore_eos;  /* end-of-generation tokens are banned instead of ending the text */
    int32_t logprobs; /* -1: none; 0..FX_ENGINE_MAX_LOGPROBS: each token's log-probability and
                         that many most likely alternatives */
};

/* One generated token with its log-probabilities (recorded when logprobs >= 0). */
struct fx_gen_token {
    fx_token id;
    float logprob;
    int32_t n_top;
    fx_token top_id[FX_ENGINE_MAX_LOGPROBS];
    float top_logprob[FX_ENGINE_MAX_LOGPROBS];
};

/* The output of one choice so far. */
struct fx_gen_choice {
    char *text; /* released text, len bytes (NUL-terminated); never shrinks */
    size_t len, cap;
    struct fx_gen_token *toks; /* n_toks tokens with log-probabilities (logprobs >= 0 only) */
    int32_t n_toks, cap_toks;
    int32_t n_gen; /* tokens generated (an end-of-generation token included) */
    enum fx_finish finish;
};

/* A generation request. The fields below `mu` change while it runs: read them holding the lock
 * (fx_gen_req_lock). Everything else is private to the engine. */
struct fx_gen_req {
    atomic_int refs;
    atomic_bool cancelled;
    pthread_mutex_t notify_mu; /* guards notify/user against fx_gen_req_detach */
    fx_engine_notify_fn notify;
    void *notify_user;

    int32_t n;          /* choices */
    int32_t n_prompt;   /* prompt tokens */
    int32_t logprobs;   /* as in the parameters */
    pthread_mutex_t mu; /* guards what follows */
    int32_t n_cached;   /* prompt tokens taken from the prefix cache at first admission */
    bool done;          /* every choice has finished */
    struct fx_gen_choice *choices; /* [n] */
    char error[256];               /* when a choice finished with FX_FINISH_ERROR */

    /* The engine's own. */
    struct fx_engine *engine;
    struct fx_gen_req *next; /* in the waiting queue */
    fx_token *prompt;
    struct fx_sampler **samplers; /* [n], handed to the slots at admission */
    struct fx_stopper **stoppers; /* [n] */
    int32_t max_tokens;
    double t_arrival, t_first;
    uint64_t order;       /* admission order; 0 before the first */
    int32_t n_slots_live; /* choices that hold a slot */
};

/* Queues a request. On success *out holds the caller's reference (release it with
 * fx_gen_req_release); notify(user) is called as output arrives. Fails with FX_ERR_CAPACITY when
 * queue_max requests are waiting already, FX_ERR_CANCELLED while draining, FX_ERR_INVALID_ARG
 * for parameters out of range (the message names the parameter: "n", "max_tokens", a sampler
 * parameter, or "prompt" when it is longer than a sequence's context). */
fx_status fx_engine_submit(struct fx_engine *e, const struct fx_gen_params *p,
                           fx_engine_notify_fn notify, void *user, struct fx_gen_req **out,
                           struct fx_error *err);
void fx_gen_req_lock(struct fx_gen_req *r);
void fx_gen_req_unlock(struct fx_gen_req *r);
/* No more notifications after it returns (one in progress is waited for). */
void fx_gen_req_detach(struct fx_gen_req *r);
/* Drops the caller's reference; a request not done yet is cancelled: its sequences and blocks
 * are freed by the engine's next step. */
void fx_gen_req_release(struct fx_gen_req *r);

/* ---- embeddings ------------------------------------------------------------------------------ */

struct fx_embed_req {
    atomic_int refs;
    pthread_mutex_t notify_mu;
    fx_engine_notify_fn notify;
    void *notify_user;

    int32_t n_inputs;
    int32_t n_embd;
    int64_t n_tokens;   /* all inputs' tokens together */
    pthread_mutex_t mu; /* guards done, status, error */
    bool done;
    fx_status status;
    char error[256];
    float *out; /* [n_inputs][n_embd], L2-normalised; complete once done with FX_OK */

    struct fx_engine *engine;
    struct fx_embed_req *next;
    fx_token **inputs; /* [n_inputs][lens[i]] */
    int32_t *lens;
};

/* Queues the embedding of n_inputs token lists (each 1..n_ctx_embd tokens, copied). */
fx_status fx_engine_embed(struct fx_engine *e, const fx_token *const *inputs, const int32_t *lens,
                          int32_t n_inputs, fx_engine_notify_fn notify, void *user,
                          struct fx_embed_req **out, struct fx_error *err);
void fx_embed_req_detach(struct fx_embed_req *r);
void fx_embed_req_release(struct fx_embed_req *r);

/* ---- metrics --------------------------------------------------------------------------------- */

#define FX_HIST_MAX_BOUNDS 24

struct fx_histogram {
    int n_bounds;
    const double *bounds;                    /* upper bounds, increasing; +Inf is implied */
    uint64_t counts[FX_HIST_MAX_BOUNDS + 1]; /* per bucket, not cumulative */
    uint64_t count;
    double sum;
};

/* A snapshot of the engine's counters (vLLM's metrics, named in server/metrics.c). */
struct fx_engine_metrics {
    int32_t n_running, n_waiting; /* requests with sequences in the pool / not (yet, or again) */
    double kv_usage;              /* fraction of the pool's blocks held by sequences */
    int32_t kv_blocks;
    uint64_t prompt_tokens;     /* prompt tokens of admitted requests */
    uint64_t prefill_tokens;    /* prompt tokens computed (not taken from the prefix cache) */
    uint64_t generation_tokens; /* tokens sampled */
    uint64_t prefix_queries;    /* prompt tokens looked up in the prefix cache */
    uint64_t prefix_hits;       /* of those, found */
    uint64_t preemptions;       /* requests swapped out for lack of blocks */
    uint64_t finished[5];       /* requests by enum fx_finish (index 0 unused) */
    uint64_t embed_requests, embed_tokens;
    uint64_t steps;
    uint64_t spec_drafts;       /* verify rounds: sequences' steps with drafts */
    uint64_t spec_draft_tokens; /* drafts verified */
    uint64_t spec_accepted;     /* of those, kept */
    struct fx_histogram ttft, itl, e2e;
};

void fx_engine_metrics(struct fx_engine *e, struct fx_engine_metrics *out);

#endif
