/* Decoder internals shared by entry.c (the public wrappers), decoder.c (the forward body and the
 * context), attn_block.c, ffn_block.c and moe_block.c.
 *
 * A forward call is prepared and validated outside the pool (fx_fwd_prepare), runs as one body
 * on every worker (fx_forward_on_worker: one cold pool entry, parallel regions separated by
 * barriers), and is committed afterwards (fx_fwd_finish). Bodies run as `*_on_worker` functions
 * and never allocate: every buffer is planned at context creation. */
#ifndef FX_DECODER_DECODER_H
#define FX_DECODER_DECODER_H

#include <stdbool.h>
#include <stdint.h>

#include "core/par.h"
#include "ferrox.h"
#include "kernels/kernels.h"
#include "kv/kv.h"
#include "model/model.h"

/* Query rows attended together per KV head (see attn_block.c). Each run of keys and values is
 * read (and converted from f16 / q8_0) once per block, so a prefill at depth D reads a head's
 * D keys n_rows / FX_ATT_BLOCK_ROWS times: 32 rows cut that 4x from 8, and their state (at
 * 4 query heads of 64: qt, p and acc of 32 KiB each) stays in L2 with the run's tile in L1.
 * Measured (docs/PERFORMANCE.md): pp512 at depth 4096 takes a quarter less CPU time than with
 * 8 rows, and 64 rows gain nothing more. */
#define FX_ATT_BLOCK_ROWS 32

/* The most experts a model may have (the loader rejects more). */
#define FX_MAX_EXPERTS 4096

/* Worker 0's bookkeeping of the current MoE layer (moe_block.c), read by every worker after a
 * barrier. */
struct fx_moe_step {
    int32_t n_used;                           /* experts the rows chose (xused) */
    int32_t begin, end;                       /* the current round: xused[begin..end) */
    int32_t n_reads;                          /* xreads entries of the round */
    int32_t pred_layer[FX_MOE_LOOKAHEAD_MAX]; /* the layer each row of xpred predicts, or -1 */
    int32_t checked, hits; /* this layer's experts scored against the prediction, and hits */
    uint64_t wait_ns;      /* this layer's wait for its experts */
    fx_status st;          /* FX_OK, or the call's error (an expert could not be read) */
    struct fx_error err;
};

/* Activation rows: matrix inputs in each format a weight of the model is dotted with (rows NULL
 * for the formats it does not use, and for F32, which reads the f32 rows directly):
 * [rows][act_row_bytes[type]]; and their metadata for each weight format whose matmul reads
 * some (NULL for the others), made once per row for every matmul (and piece of one) that reads
 * the row: [rows][fx_act_meta_bytes(row length)]. */
struct fx_act_bufs {
    void *rows[FX_TYPE_COUNT];
    void *meta[FX_TYPE_COUNT];
};

/* Where a worker computes the row-wise steps of a chunk (embedding, residual adds, norms, biases
 * and post-norms of a block's output, gated activations, activation quantization).
 *
 * Shared (a batch): each worker computes its own rows (fx_dec_own_rows) in the context's
 * buffers, and a barrier after each such step lets the others read them.
 *
 * Own (a step of few rows, such as decode): every worker computes every row, in the same order
 * of the same operations, into buffers of its own, so that its copies are the bits of the shared
 * rows and nothing it reads there is written by another worker: only the barriers after the
 * steps whose outputs are split across workers remain (matmuls, attention). Outputs computed in
 * place when shared (a gated activation, an attention output gate, a block output's bias and
 * post-norm) go to the worker's own rows instead. */
struct fx_rows {
    bool own;
    float *x;   /* [rows][n_embd] residual stream */
    float *xn;  /* [rows][n_embd] normed input of the current block */
    float *h;   /* [rows][n_embd] a block's output with its bias and post-norm: the matmul's
                 * output itself (shared), or the worker's copy */
    float *hid; /* [rows][n_ff] act(gate) * up: gate itself (shared), or the worker's copy */
    float *att; /* [rows][n_head * head_dim_v] the gated attention output: att itself (shared),
                 * or the worker's copy (the same memory as hid: never live together) */
    const struct fx_act_bufs *act; /* the activation rows made from the above */
};

/* Scratch for up to n_batch rows per chunk. n_ffn_rows is n_batch for dense models and
 * n_batch * n_expert_used for mixtures of experts (one row per selected expert); n_hidden_rows
 * is n_ffn_rows, plus n_batch + 1 for mixtures with a shared expert, whose rows follow the
 * routed slots' in the same pass (moe_block.c). */
struct fx_scratch {
    float *x;           /* [n_batch][n_embd] residual stream */
    float *xn;          /* [n_batch][n_embd] normed input of the current block */
    float *q;           /* [n_batch][n_head * head_dim] */
    float *k;           /* [n_batch][n_head_kv * head_dim] this step's new keys */
    float *v;           /* [n_batch][n_head_kv * head_dim_v] this step's new values */
    float *att;         /* [n_batch][n_head * head_dim_v] attention output before its projection */
    float *h;           /* [n_batch][n_embd] a block's output before the residual add */
    float *qg;          /* [n_batch][n_head][2][head_dim] Q with its output gate (gated
                         * attention layers; NULL for models without them) */
    float *gate;        /* [n_hidden_rows][n_ff_max] FFN hidden: gate, then act(gate) * up */
    float *up;          /* [n_hidden_rows][n_ff_max] */
    float *attn_state;  /* [n_threads][attn_state_per_worker]: each worker's struct
                         * fx_attn_state memory for a block of FX_ATT_BLOCK_ROWS rows */
    float *kv_tile;     /* [n_threads][2][FX_ATTN_RUN][kv_tile_dim]: each worker's run of keys
                         * and of values converted to f32 where the kernel cannot read them in
                         * place (fx_kv_step_keys) */
    int32_t *att_start; /* [n_batch + 1] first row of each attention block of the chunk (rows of
                         * one sequence, at most FX_ATT_BLOCK_ROWS), then n */
    struct fx_act_bufs act; /* [n_hidden_rows] activation rows */
    /* [n_threads] each worker's own copy of the row-wise state of a step of at most
     * own_rows rows (struct fx_rows), or NULL (one worker; mixtures of experts, whose block
     * shares its rows). */
    struct fx_rows *own;
    /* Mixture of experts. */
    float *router;        /* [n_batch][n_expert] router logits */
    int32_t *sel;         /* [n_batch][n_expert_used] selected experts, best first */
    float *sel_w;         /* [n_batch][n_expert_used] their weights */
    int32_t *slot;        /* [n_batch][n_expert_used] grouped slot of each selection */
    int32_t *slot_row;    /* [n_ffn_rows] the row each grouped slot belongs to */
    int32_t *slot_expert; /* [n_ffn_rows] the expert of each grouped slot */
    int32_t *expert_off;  /* [n_expert + 1] first grouped slot of each expert */
    float *xg;            /* [n_ffn_rows][n_embd] normed rows gathered by expert */
    float *yg;            /* [n_ffn_rows][n_embd] expert outputs by grouped slot */
    /* Gated DeltaNet layers (NULL for models without them); conv_dim = 2 key_dim + value_dim. */
    float *rqkv;   /* [n_batch][conv_dim] the projection [q | k | v] that enters the conv */
    float *rconv;  /* [n_batch][conv_dim] silu(conv), then with q and k L2-normed per head */
    float *rz;     /* [n_batch][value_dim] output gate */
    float *rbeta;  /* [n_batch][n_v_heads] beta logits, then sigmoid(beta) */
    float *rg;     /* [n_batch][n_v_heads] alpha logits, then the log decay g */
    float *rwork;  /* [n_threads][FX_DELTA_CHUNK][2 d_state] each worker's delta_rows work */
    float *ry;     /* [n_batch][value_dim] the heads' gated outputs */
    float *shexp;  /* [n_batch] the shared expert's gate logit (mixtures with one) */
    float *mtp_in; /* [n_batch][2 n_embd] the MTP head's normed [embedding | hidden] rows */
    /* Experts read through the model's expert cache (model/expert_cache.h); router_next is
     * empty without one. */
    float *router_next; /* [n_batch][n_expert] the router of the layer moe_lookahead
                         * ahead on this layer's input */
    int32_t *xused;     /* [n_expert] the experts the step's rows chose, increasing */
    int32_t *xslots;    /* [n_expert] the cache slot of each used expert (xused order) */
    int32_t *xreads;    /* [n_expert] indices into xused of the slots this call fills */
    uint8_t *xpred; /* [FX_MOE_LOOKAHEAD_MAX][n_expert] row il % moe_lookahead, nonzero: predicted
                     * for layer xstep->pred_layer[that row] (the predictions in flight) */
    struct fx_moe_step *xstep; /* [1] */
    /* Rope (cos, sin) per position: [n_ctx][n_rot / 2][2] for global layers ([0]) and
     * sliding-window layers ([1], the same table when their rope does not differ). */
    const float *rope[2];
};

struct fx_cuda_decoder; /* cuda/decode.h */

struct fx_context {
    const struct fx_model *model;
    const struct fx_kernels *k;
    struct fx_pool *pool;
    int32_t n_ctx, n_batch, n_ffn_rows;
    int32_t own_rows; /* the most rows of a chunk whose workers keep their own rows (s.own) */
    int64_t attn_state_per_worker; /* floats of attention state each worker owns */
    int64_t kv_tile_dim;           /* max(head_dim, head_dim_v) */
    struct fx_kv_contig kv;        /* unallocated (n_filled 0, no rows) when paged_only */
    struct fx_rstate rs;           /* the contiguous sequence's recurrent state (hybrid models) */
    int32_t mtp_len;               /* positions of the MTP head's cache (its layers of kv) */
    /* Rollback of a verify step (fx_forward_verify): snap[j] is rs after position snap_pos0 + j,
     * for j < n_snap; the snapshots are allocated by the first verify step that needs them
     * (snap_alloc of them) and valid until the next trunk call or a truncation that cuts. */
    struct fx_rstate snap[FX_ROLLBACK_MAX];
    int32_t snap_alloc, n_snap, snap_pos0;
    bool paged_only;
    struct fx_scratch s;
    void *arena;     /* the one allocation behind every scratch buffer */
    uint8_t *xstage; /* [n_threads][fx_xcache_stage_bytes] where workers read experts, or NULL */
    const char *dump_dir;
    struct fx_cuda_decoder *dev; /* the device step of a context with GPU layers, else NULL */
};

/* Which rows of a call get logits. */
enum fx_logits_rows { FX_LOGITS_NONE, FX_LOGITS_ALL, FX_LOGITS_LAST, FX_LOGITS_MARKED };

/* One forward call, shared read-only by every worker. */
struct fx_fwd {
    struct fx_context *ctx;
    const fx_token *tokens; /* [n] */
    int64_t n;
    struct fx_kv_step kv; /* where the call's rows keep K and V (row 0 = the call's first) */
    enum fx_logits_rows logits_rows;
    const int8_t *marked; /* [n] nonzero for the rows that get logits (FX_LOGITS_MARKED) */
    float *logits;        /* [n][n_vocab] (ALL), [n_vocab] (LAST), [marked rows][n_vocab] */
    float *hidden;        /* [n][n_embd] final normed hidden states, or NULL */
    /* [n][n_embd] the MTP head's hidden inputs: the call runs MTP block 0 over the MTP cache
     * instead of the trunk (fx_forward_mtp). NULL for the trunk. */
    const float *hidden_in;
    /* 0: every layer, then the output. Otherwise only layers 0 .. cpu_layers - 1 run, leaving
     * the residual stream in ctx->s.x, and a device runs the rest (cuda/decode.h). */
    int32_t cpu_layers;
    /* [n - 1] where the recurrent state after each row but the last is copied (a verify step of
     * a hybrid model over the contiguous cache), or NULL: no snapshots. A multi-sequence step's
     * are its sequences' (fx_kv_step_snap). */
    struct fx_rstate *snap;
    /* A second call run after this one in the same pool entry, or NULL: the MTP head over the
     * rows of a verify step or a prefill (fx_forward_verify_mtp, fx_forward_prefill_mtp), whose
     * hidden inputs are this call's hidden rows. argmax: NULL, or [n] where each of this call's
     * logits rows has its argmax written between the two calls (the second call's tokens). */
    const struct fx_fwd *then;
    fx_token *argmax;
};

/* Where the recurrent state after row i of call f is to be copied, or NULL. */
static inline struct fx_rstate *fx_fwd_snap(const struct fx_fwd *f, int64_t i) {
    if (f->kv.kind == FX_KV_MULTI) /* asked per row and layer: a plain step only reads a flag */
        return f->kv.u.multi.snap ? fx_kv_step_snap(&f->kv, i) : NULL;
    return f->snap && i < f->n - 1 ? &f->snap[i] : NULL;
}

/* One chunk of at most n_batch rows of a call; every worker computes the same value but rows. */
struct fx_chunk {
    const struct fx_fwd *f;
    int64_t row0; /* first row of the call in this chunk */
    int64_t n;
    struct fx_kv_step kv; /* the call's, from row0 on */
    int64_t n_att;        /* attention blocks (ctx->s.att_start) */
    /* Each attention block's rows are the only rows of their sequence in the chunk, so that the
     * work item of a block and KV head alone writes the keys and values it reads: it prepares
     * its rows' heads (biases, Q/K norms, rope, the store) itself, with no barrier before. */
    bool prepare_in_attention;
    const struct fx_rows *rows; /* this worker's (the one field that differs between workers) */
};

/* Each checks everything that can fail (tokens, positions, capacity) and reserves KV room before
 * the pool is entered, so that the body cannot fail halfway (ARCHITECTURE.md rule 4). Over the
 * context's contiguous cache (verify: keep the recurrent state after each row but the last,
 * fx_forward_verify): */
fx_status fx_fwd_prepare(struct fx_context *ctx, const fx_token *tokens, int64_t n, int32_t pos0,
                         enum fx_logits_rows rows, float *logits, float *hidden, bool verify,
                         struct fx_fwd *out, struct fx_error *err);
/* Over one sequence of a pool (pos0 its length): */
fx_status fx_fwd_prepare_paged(struct fx_context *ctx, struct fx_kv_pool *pool, fx_seq_id seq,
                               const fx_token *tokens, int64_t n, int32_t pos0,
                               enum fx_logits_rows rows, float *logits, struct fx_fwd *out,
                               struct fx_error *err);
/* Over the rows of many sequences of a pool: */
fx_status fx_fwd_prepare_multi(struct fx_context *ctx, struct fx_kv_pool *pool,
                               const struct fx_batch *b, float *logits, struct fx_fwd *out,
                               struct fx_error *err);
/* The MTP head over the context's MTP cache (pos0 at most its length): */
fx_status fx_fwd_prepare_mtp(struct fx_context *ctx, const fx_token *tokens, const float *hidden_in,
                             int64_t n, int32_t pos0, float *logits, float *hidden,
                             struct fx_fwd *out, struct fx_error *err);
/* A verify step over the context's contiguous cache whose rows the MTP head then reads, at MTP
 * positions pos0 + 1 .. pos0 + n (fx_forward_verify_mtp): trunk is prepared, mtp is prepared and
 * linked as trunk.then. */
fx_status fx_fwd_prepare_verify_mtp(struct fx_context *ctx, const fx_token *tokens, int64_t n,
                                    int32_t pos0, float *logits, float *hidden, fx_token *argmax,
                                    float *mtp_logits, float *mtp_hidden, struct fx_fwd *trunk,
                                    struct fx_fwd *mtp, struct fx_error *err);
/* A prefill over the context's contiguous cache (last row's logits, every hidden row into
 * hidden + n_embd) whose rows the MTP head then reads at MTP positions pos0..pos0+n-1, row i
 * reading hidden row i (fx_forward_prefill_mtp): trunk is prepared, mtp is prepared and linked as
 * trunk.then. */
fx_status fx_fwd_prepare_prefill_mtp(struct fx_context *ctx, const fx_token *tokens, int64_t n,
                                     int32_t pos0, float *logits, float *hidden,
                                     struct fx_fwd *trunk, struct fx_fwd *mtp,
                                     struct fx_error *err);
/* The forward body every worker runs (one fx_par_run). */
void fx_forward_on_worker(const struct fx_worker *w, void *arg);
/* After the run: records how far the cache or the sequences are filled. */
void fx_fwd_finish(const struct fx_fwd *f);

/* ---- blocks: the chunk's rows->x holds the residual stream in and out; each block leaves x's
 * rows complete for the workers that compute them (fx_dec_rows_range), not for every worker.
 * The MoE block runs on shared rows only. ---- */

void fx_attn_block_on_worker(const struct fx_worker *w, const struct fx_chunk *c, int il);
void fx_ffn_block_on_worker(const struct fx_worker *w, const struct fx_chunk *c, int il);
void fx_moe_block_on_worker(const struct fx_worker *w, const struct fx_chunk *c, int il);
void fx_delta_block_on_worker(const struct fx_worker *w, const struct fx_chunk *c, int il);

/* The positions the rows of a block see: row r keys lo[r] .. pos[r] (causal, and the sliding
 * window on its layers), all of them within lo_min .. pos_max. */
struct fx_block_keys {
    int32_t lo[FX_ATT_BLOCK_ROWS], pos[FX_ATT_BLOCK_ROWS], lo_min, pos_max;
};

/* The attention of KV head g's query heads for a block of n rows of the step s (from its row
 * i0; bk: their keys), into st, which attn_begin prepared (attn_block.c; bench-attn times the
 * same loop). Keys are fed to the kernel in runs cut at multiples of FX_ATTN_RUN absolute
 * positions, for every row whatever its batch: a row's arithmetic then depends only on its own
 * query and keys, so batched, chunked and single-token steps give the same bits. Each run goes
 * to the kernel once for the whole block (its keys and values read from memory once, then from
 * L1), every row seeing its own part of it, and the next run's rows are asked for while the
 * kernel works on it. kl: the layer's place in the cache; tile: the worker's [2][FX_ATTN_RUN]
 * [tile_dim] floats for runs that cannot be read in place (fx_kv_step_keys); after: where the
 * first run of the worker's next block lies ([2]: keys, values; NULL: none), asked for during
 * this block's last run. */
void fx_dec_attend_runs(const struct fx_kernels *k, const struct fx_kv_step *s, int kl, int64_t i0,
                        int g, int64_t n, const struct fx_block_keys *bk, float *tile,
                        int64_t tile_dim, float scale, float softcap,
                        const struct fx_kv_ahead *after, struct fx_attn_state *st);

/* ---- shared steps ---- */

/* Row ownership: in every row-wise region a worker handles the same rows [*b, *e) of the n rows,
 * so it may read back what it wrote to its own rows without waiting for the others (a residual
 * add and the next block's norm need no barrier between them). */
static inline void fx_dec_own_rows(const struct fx_worker *w, int64_t n, int64_t *b, int64_t *e) {
    fx_par_range(n, w->ith, w->nth, 1, b, e);
}

/* The rows [*b, *e) of n that this worker computes in a row-wise step: its own rows (shared), or
 * all of them (own). */
static inline void fx_dec_rows_range(const struct fx_worker *w, const struct fx_rows *r, int64_t n,
                                     int64_t *b, int64_t *e) {
    if (r->own) {
        *b = 0;
        *e = n;
    } else {
        fx_dec_own_rows(w, n, b, e);
    }
}

/* After a row-wise step whose rows others read next: a barrier when the rows are shared. */
static inline void fx_dec_rows_done(const struct fx_worker *w, const struct fx_rows *r) {
    if (!r->own)
        fx_par_barrier(w);
}

/* Rows r0..r1 of src (rows n_in floats apart) into a's activation rows in the format of each
 * matrix of ws that is not dotted with f32 rows. No barrier. */
void fx_dec_quantize_rows(const struct fx_context *ctx, const struct fx_act_bufs *a,
                          const float *src, int64_t r0, int64_t r1, int64_t n_in, int nw,
                          const struct fx_mat *const *ws);

/* The same for columns [c0, c1) of those rows only, which must be whole blocks of every format
 * involved (fx_dec_cols_whole_blocks): activation blocks and their metadata are made block by
 * block, so the pieces of a row give the bytes of the whole row. */
void fx_dec_quantize_cols(const struct fx_context *ctx, const struct fx_act_bufs *a,
                          const float *src, int64_t r0, int64_t r1, int64_t n_in, int64_t c0,
                          int64_t c1, int nw, const struct fx_mat *const *ws);
/* Whether columns [c0, c0 + width) at any multiple c0 of width are whole blocks of the
 * activation formats of ws and of their metadata. */
bool fx_dec_cols_whole_blocks(const struct fx_context *ctx, int64_t width, int nw,
                              const struct fx_mat *const *ws);

/* For the rows this worker computes (r): out = rms_norm(in) * weight, quantized into r's
 * activation rows for the matrices ws that read it next. Ends with fx_dec_rows_done. */
void fx_dec_norm_input_on_worker(const struct fx_worker *w, const struct fx_context *ctx,
                                 const struct fx_rows *r, float *out, const float *in,
                                 const float *weight, int64_t n, int64_t dim, int nw,
                                 const struct fx_mat *const *ws);

/* The most matrices one call of fx_dec_matmuls_on_worker multiplies (a Gated DeltaNet layer's
 * qkv, z, beta and alpha). */
#define FX_DEC_MAX_MATMULS 4

/* outs[i] = src * ws[i]^T for n rows of n_in floats (outs[i] rows ws[i]->ne1 apart), from the
 * activation rows fx_dec_quantize_rows made of src in a; the workers share the matmuls
 * (statically for a few rows, dynamically for a batch). Ends with a barrier. */
void fx_dec_matmuls_on_worker(const struct fx_worker *w, const struct fx_context *ctx,
                              const struct fx_act_bufs *a, const float *src, int64_t n,
                              int64_t n_in, int nw, const struct fx_mat *const *ws,
                              float *const *outs);

/* Where row r of src is in a's activation rows of the format w_type is dotted with, and the
 * stride of such rows (src itself for f32). */
const void *fx_dec_act_rows(const struct fx_context *ctx, const struct fx_act_bufs *a,
                            enum fx_type w_type, const float *src, int64_t n_in, int64_t r,
                            uint64_t *stride);

/* Row r's metadata in a for weights of w_type (fx_act_meta_fn), which fx_dec_quantize_rows makes
 * with the row; NULL when that format reads none. */
void *fx_dec_act_meta(const struct fx_act_bufs *a, enum fx_type w_type, int64_t n_in, int64_t r);

/* out[r] = act(gate[r]) * up[r] for rows r0 <= r < r1 of n_ff floats, with the model's gated
 * activation; out may be gate. */
void fx_dec_gated_act_rows(const struct fx_context *ctx, float *out, const float *gate,
                           const float *up, int64_t n_ff, int64_t r0, int64_t r1);

/* A block's output into the residual stream, rows b <= i < e: x[i] += post_norm(h[i] + bias),
 * the bias and the post-norm each when not NULL, from the block's output projection in the
 * context's h (complete after its barrier) through r's h into r's x. */
void fx_dec_add_output_rows(const struct fx_context *ctx, const struct fx_rows *r,
                            const float *bias, const float *post_norm, int64_t b, int64_t e);

/* FERROX_DUMP: worker 0 writes n rows of dim floats as DIR/<name>-<il>.bin (il < 0:
 * DIR/<name>.bin), replacing the file of the previous call. Called after the barrier that completes
 * buf. */
void fx_dec_dump(const struct fx_worker *w, const struct fx_chunk *c, const char *name, int il,
                 const float *buf, int64_t n, int64_t dim);

#endif
