/* Validation and KV reservation of a forward call before it enters the pool, and its commit
 * after: the body in between cannot fail, so a call either happens whole or changes nothing
 * (ARCHITECTURE.md rule 4). */
#include <string.h>

#include "core/error.h"
#include "decoder/decoder.h"
#include "kv/paged.h"

static fx_status check_call(const fx_token *tokens, int64_t n, enum fx_logits_rows rows,
                            const float *logits, const float *hidden, struct fx_error *err) {
    if (n < 1 || !tokens)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "a forward call needs at least one token");
    if (rows != FX_LOGITS_NONE && !logits)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET, "logits buffer is NULL");
    if (rows == FX_LOGITS_NONE && !hidden)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET, "hidden-state buffer is NULL");
    return FX_OK;
}

/* Every token is in the vocabulary. Checked after the positions and the capacity, so that a
 * call that cannot fit is refused before its tokens are read. */
static fx_status check_tokens(const struct fx_context *ctx, const fx_token *tokens, int64_t n,
                              struct fx_error *err) {
    const struct fx_hparams *hp = &ctx->model->hp;
    for (int64_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= hp->n_vocab)
            return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                                "token %d at index %lld is not in the vocabulary (0..%d)",
                                tokens[i], (long long)i, hp->n_vocab - 1);
    return FX_OK;
}

/* Snapshots for the n - 1 first rows of a verify step, allocated as first needed (and kept). */
static fx_status prepare_snapshots(struct fx_context *ctx, int64_t n, struct fx_error *err) {
    if (n - 1 > FX_ROLLBACK_MAX)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "a verify step of %lld rows: a %s sequence can roll back at most %d",
                            (long long)n, ctx->model->arch, FX_ROLLBACK_MAX);
    for (; ctx->snap_alloc < n - 1; ctx->snap_alloc++) {
        fx_status st = fx_rstate_init_for(&ctx->snap[ctx->snap_alloc], ctx->model, err);
        if (st)
            return st;
    }
    return FX_OK;
}

fx_status fx_fwd_prepare(struct fx_context *ctx, const fx_token *tokens, int64_t n, int32_t pos0,
                         enum fx_logits_rows rows, float *logits, float *hidden, bool verify,
                         struct fx_fwd *out, struct fx_error *err) {
    if (ctx->paged_only)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "this context has no contiguous cache (it was made paged_only)");
    fx_status st = check_call(tokens, n, rows, logits, hidden, err);
    if (st)
        return st;
    if (pos0 < 0 || pos0 > ctx->kv.n_filled)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "position %d is not in 0..%d (the cache holds %d positions)", pos0,
                            ctx->kv.n_filled, ctx->kv.n_filled);
    /* A recurrent state holds the sequence up to its end: a call continues it there, or starts
     * the sequence again at 0. */
    if (ctx->model->hp.n_layer_rec > 0 && pos0 != 0 && pos0 != ctx->kv.n_filled)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "position %d: a %s sequence continues at its end (%d) or restarts at "
                            "0 (its recurrent state cannot go back)",
                            pos0, ctx->model->arch, ctx->kv.n_filled);
    if (n > ctx->n_ctx - pos0)
        return fx_error_set(err, FX_ERR_CAPACITY, FX_NO_OFFSET,
                            "%lld tokens at position %d exceed the context of %d", (long long)n,
                            pos0, ctx->n_ctx);
    st = check_tokens(ctx, tokens, n, err);
    if (st)
        return st;
    bool snap = verify && ctx->model->hp.n_layer_rec > 0 && n > 1;
    if (snap && (st = prepare_snapshots(ctx, n, err)))
        return st;
    *out = (struct fx_fwd){
        .ctx = ctx,
        .tokens = tokens,
        .n = n,
        .kv = {.kind = FX_KV_CONTIG, .u.contig = {.kv = &ctx->kv, .rs = &ctx->rs, .pos0 = pos0}},
        .logits_rows = rows,
        .logits = logits,
        .hidden = hidden,
        .snap = snap ? ctx->snap : NULL,
    };
    return FX_OK;
}

/* FX_ERR_UNSUPPORTED for a model without a multi-token-prediction head. */
static fx_status need_mtp_head(const struct fx_context *ctx, struct fx_error *err) {
    if (ctx->model->hp.n_nextn == 0)
        return fx_error_set(err, FX_ERR_UNSUPPORTED, FX_NO_OFFSET,
                            "this %s model has no multi-token-prediction head", ctx->model->arch);
    return FX_OK;
}

/* The head's pass over n rows at positions pos0.. of the context's MTP cache, row i reading
 * tokens[i] and hidden_in[i] (fx_forward_mtp's pairing). */
static struct fx_fwd mtp_pass(struct fx_context *ctx, const fx_token *tokens, int64_t n,
                              int32_t pos0, enum fx_logits_rows rows, float *logits, float *hidden,
                              const float *hidden_in) {
    return (struct fx_fwd){
        .ctx = ctx,
        .tokens = tokens,
        .n = n,
        .kv = {.kind = FX_KV_CONTIG, .u.contig = {.kv = &ctx->kv, .pos0 = pos0}},
        .logits_rows = rows,
        .logits = logits,
        .hidden = hidden,
        .hidden_in = hidden_in,
    };
}

fx_status fx_fwd_prepare_mtp(struct fx_context *ctx, const fx_token *tokens, const float *hidden_in,
                             int64_t n, int32_t pos0, float *logits, float *hidden,
                             struct fx_fwd *out, struct fx_error *err) {
    fx_status st = need_mtp_head(ctx, err);
    if (st)
        return st;
    if (ctx->paged_only)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "this context has no contiguous cache (it was made paged_only)");
    st = check_call(tokens, n, FX_LOGITS_ALL, logits, NULL, err);
    if (st)
        return st;
    if (!hidden_in)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "the MTP head's hidden-state input is NULL");
    if (pos0 < 0 || pos0 > ctx->mtp_len)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "MTP position %d is not in 0..%d (the MTP cache holds %d positions)",
                            pos0, ctx->mtp_len, ctx->mtp_len);
    if (n > ctx->n_ctx - pos0)
        return fx_error_set(err, FX_ERR_CAPACITY, FX_NO_OFFSET,
                            "%lld tokens at MTP position %d exceed the context of %d", (long long)n,
                            pos0, ctx->n_ctx);
    st = check_tokens(ctx, tokens, n, err);
    if (st)
        return st;
    *out = mtp_pass(ctx, tokens, n, pos0, FX_LOGITS_ALL, logits, hidden, hidden_in);
    return FX_OK;
}

fx_status fx_fwd_prepare_verify_mtp(struct fx_context *ctx, const fx_token *tokens, int64_t n,
                                    int32_t pos0, float *logits, float *hidden, fx_token *argmax,
                                    float *mtp_logits, float *mtp_hidden, struct fx_fwd *trunk,
                                    struct fx_fwd *mtp, struct fx_error *err) {
    fx_status st = need_mtp_head(ctx, err);
    if (st)
        return st;
    if (!hidden || !argmax || !mtp_logits)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "a verify step with the MTP head needs hidden-state, argmax and MTP "
                            "logits buffers");
    /* The head's row i is at MTP position pos0 + 1 + i: the cache must hold pos0 (the last
     * accepted token's row), and the last row must fit the context. */
    if (pos0 >= 0 && pos0 + 1 > ctx->mtp_len)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "a verify step at position %d with the MTP head needs the MTP cache to "
                            "hold position %d (it holds %d positions)",
                            pos0, pos0, ctx->mtp_len);
    if (n >= 1 && pos0 >= 0 && n > ctx->n_ctx - pos0 - 1)
        return fx_error_set(err, FX_ERR_CAPACITY, FX_NO_OFFSET,
                            "%lld tokens at position %d and their MTP rows after them exceed the "
                            "context of %d",
                            (long long)n, pos0, ctx->n_ctx);
    st = fx_fwd_prepare(ctx, tokens, n, pos0, FX_LOGITS_ALL, logits, hidden, true, trunk, err);
    if (st)
        return st;
    /* The head's tokens are the trunk's argmax, written in the pool entry: checked there. */
    *mtp = mtp_pass(ctx, argmax, n, pos0 + 1, FX_LOGITS_ALL, mtp_logits, mtp_hidden, hidden);
    trunk->then = mtp;
    trunk->argmax = argmax;
    return FX_OK;
}

fx_status fx_fwd_prepare_prefill_mtp(struct fx_context *ctx, const fx_token *tokens, int64_t n,
                                     int32_t pos0, float *logits, float *hidden,
                                     struct fx_fwd *trunk, struct fx_fwd *mtp,
                                     struct fx_error *err) {
    fx_status st = need_mtp_head(ctx, err);
    if (st)
        return st;
    if (!hidden)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET, "hidden-state buffer is NULL");
    if (pos0 >= 0 && pos0 > ctx->mtp_len)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "a prefill at position %d with the MTP head needs the MTP cache to "
                            "hold %d positions (it holds %d)",
                            pos0, pos0, ctx->mtp_len);
    st = fx_fwd_prepare(ctx, tokens, n, pos0, FX_LOGITS_LAST, logits,
                        hidden + ctx->model->hp.n_embd, false, trunk, err);
    if (st)
        return st;
    *mtp = mtp_pass(ctx, tokens, n, pos0, FX_LOGITS_NONE, NULL, NULL, hidden);
    trunk->then = mtp;
    return FX_OK;
}

/* The checks every pool step shares: the pool is the model's, the positions fit the context's
 * rope table. */
static fx_status check_pool(const struct fx_context *ctx, const struct fx_kv_pool *pool,
                            struct fx_error *err) {
    const struct fx_hparams *hp = &ctx->model->hp;
    if (!pool)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET, "the KV pool is NULL");
    if (pool->model != ctx->model && (pool->recurrent || hp->n_layer_rec > 0))
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "the KV pool of a %s model is stepped with another model (its "
                            "sequences' recurrent state is sized for its own)",
                            pool->model->arch);
    if (pool->n_layer != hp->n_layer_kv || pool->n_head_kv != hp->n_head_kv ||
        pool->head_dim != hp->head_dim || pool->head_dim_v != hp->head_dim_v)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "the KV pool was made for another model shape (%d layers, %d KV "
                            "heads of %lld)",
                            pool->n_layer, pool->n_head_kv, (long long)pool->head_dim);
    return FX_OK;
}

fx_status fx_fwd_prepare_paged(struct fx_context *ctx, struct fx_kv_pool *pool, fx_seq_id seq,
                               const fx_token *tokens, int64_t n, int32_t pos0,
                               enum fx_logits_rows rows, float *logits, struct fx_fwd *out,
                               struct fx_error *err) {
    fx_status st = check_pool(ctx, pool, err);
    if (!st)
        st = check_call(tokens, n, rows, logits, NULL, err);
    if (st)
        return st;
    if (!fx_kv_pool_seq_live(pool, seq))
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET, "sequence %d is not alive", seq);
    int32_t len = pool->seqs[seq].len;
    if (pos0 != len)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "position %d is not the end of sequence %d (it holds %d positions)",
                            pos0, seq, len);
    if (n > ctx->n_ctx - pos0)
        return fx_error_set(err, FX_ERR_CAPACITY, FX_NO_OFFSET,
                            "%lld tokens at position %d exceed the context of %d", (long long)n,
                            pos0, ctx->n_ctx);
    st = check_tokens(ctx, tokens, n, err);
    if (st)
        return st;
    int32_t n_rows = (int32_t)n;
    st = fx_kv_pool_reserve_step(pool, 1, &seq, &n_rows, NULL, err);
    if (st)
        return st;
    pool->seqs[seq].snap_mask = 0; /* this step keeps no state; older ones are not kept either */
    *out = (struct fx_fwd){
        .ctx = ctx,
        .tokens = tokens,
        .n = n,
        .kv = {.kind = FX_KV_PAGED, .u.paged = {.pool = pool, .seq = seq, .pos0 = pos0}},
        .logits_rows = rows,
        .logits = logits,
    };
    return FX_OK;
}

fx_status fx_fwd_prepare_multi(struct fx_context *ctx, struct fx_kv_pool *pool,
                               const struct fx_batch *b, float *logits, struct fx_fwd *out,
                               struct fx_error *err) {
    fx_status st = check_pool(ctx, pool, err);
    if (st)
        return st;
    if (!b || b->n < 1 || !b->token || !b->pos || !b->seq)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "a multi-sequence step needs rows with tokens, positions and "
                            "sequences");
    st = check_call(b->token, b->n, FX_LOGITS_MARKED, logits, NULL, err);
    if (!st)
        st = check_tokens(ctx, b->token, b->n, err);
    if (st)
        return st;
    /* Each row continues its sequence: at its length, then one past the step's previous row of
     * it. step_rows counts the rows of each sequence so far. */
    int32_t *rows = pool->step_rows;
    for (int32_t i = 0; i < b->n; i++) {
        fx_seq_id s = b->seq[i];
        if (!fx_kv_pool_seq_live(pool, s)) {
            st = fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                              "row %d: sequence %d is not alive", i, s);
            goto done;
        }
        int32_t want = pool->seqs[s].len + rows[s];
        if (b->pos[i] != want) {
            st = fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                              "row %d: position %d of sequence %d, expected %d", i, b->pos[i], s,
                              want);
            goto done;
        }
        if (b->pos[i] >= ctx->n_ctx) {
            st = fx_error_set(err, FX_ERR_CAPACITY, FX_NO_OFFSET,
                              "row %d: position %d exceeds the context of %d", i, b->pos[i],
                              ctx->n_ctx);
            goto done;
        }
        rows[s]++;
    }
    /* The rows whose recurrent state is kept (fx_batch.snapshot): the snapshots each sequence
     * needs, allocated now, and their bits in step_snap until the step is sure to run. */
    bool snap = false;
    for (int32_t i = 0; b->snapshot && pool->recurrent && i < b->n; i++) {
        fx_seq_id s = b->seq[i];
        int32_t j = b->pos[i] - pool->seqs[s].len;
        if (!b->snapshot[i] || j == rows[s] - 1)
            continue; /* the sequence's last row: its state is the sequence's */
        if (j >= FX_ROLLBACK_MAX) {
            st = fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                              "row %d: the state after row %d of sequence %d in the step: a %s "
                              "sequence keeps at most %d",
                              i, j, s, ctx->model->arch, FX_ROLLBACK_MAX);
            goto done;
        }
        if ((st = fx_kv_seq_alloc_snaps(pool, s, j + 1, err)))
            goto done;
        pool->step_snap[s] |= 1u << j;
        snap = true;
    }
    /* The distinct sequences and their row counts, in order of first appearance. */
    int k = 0;
    for (int32_t i = 0; i < b->n; i++) {
        fx_seq_id s = b->seq[i];
        if (rows[s] > 0) {
            pool->step_seq[k] = s;
            pool->step_n[k++] = rows[s];
            rows[s] = 0; /* each sequence once; leaves step_rows zeroed for the next step */
        }
    }
    st = fx_kv_pool_reserve_step(pool, k, pool->step_seq, pool->step_n, NULL, err);
    /* Each sequence of the step keeps the states asked for now, and no older ones. */
    for (int j = 0; j < k; j++) {
        struct fx_kv_seq *sq = &pool->seqs[pool->step_seq[j]];
        if (!st) {
            sq->snap_mask = pool->step_snap[pool->step_seq[j]];
            sq->snap_pos0 = sq->len;
        }
        pool->step_snap[pool->step_seq[j]] = 0;
    }
    if (st)
        return st;
    *out = (struct fx_fwd){
        .ctx = ctx,
        .tokens = b->token,
        .n = b->n,
        .kv = {.kind = FX_KV_MULTI,
               .u.multi = {.pool = pool, .seq = b->seq, .pos = b->pos, .snap = snap}},
        .logits_rows = FX_LOGITS_MARKED,
        .marked = b->logits,
        .logits = logits,
    };
    return FX_OK;
done:
    for (int32_t i = 0; i < b->n; i++)
        if (fx_kv_pool_seq_live(pool, b->seq[i]))
            rows[b->seq[i]] = pool->step_snap[b->seq[i]] = 0;
    return st;
}

void fx_fwd_finish(const struct fx_fwd *f) {
    if (f->then)
        fx_fwd_finish(f->then);
    switch (f->kv.kind) {
    case FX_KV_CONTIG:
        /* Writing at pos0 drops whatever followed it: the cache now ends with this call's rows. */
        if (f->hidden_in) {
            f->ctx->mtp_len = f->kv.u.contig.pos0 + (int32_t)f->n;
        } else {
            f->ctx->kv.n_filled = f->kv.u.contig.pos0 + (int32_t)f->n;
            /* The trunk's state moved on: only this call's snapshots, if any, describe it. */
            f->ctx->n_snap = f->snap ? (int32_t)f->n - 1 : 0;
            f->ctx->snap_pos0 = f->kv.u.contig.pos0;
        }
        return;
    case FX_KV_PAGED:
        for (int64_t i = 0; i < f->n; i++)
            fx_kv_pool_commit_row(f->kv.u.paged.pool, f->kv.u.paged.seq, f->tokens[i]);
        return;
    case FX_KV_MULTI:
        for (int64_t i = 0; i < f->n; i++)
            fx_kv_pool_commit_row(f->kv.u.multi.pool, f->kv.u.multi.seq[i], f->tokens[i]);
        return;
    }
}
