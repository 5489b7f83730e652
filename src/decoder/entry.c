/* The public forward entry points. Each validates its call, enters the worker pool exactly once
 * (ARCHITECTURE.md rule 1: fx_par_cold_entries() grows by one per call, whatever the number of
 * layers), and records the new cache length. Nothing else in the library defines a public
 * fx_forward_* function; a test checks it. */
#include "core/error.h"
#include "cuda/decode.h"
#include "decoder/decoder.h"

/* Runs a prepared call (st: how its preparation went) and commits it. On a context with GPU
 * layers (cuda/decode.h), a one-token call over its cache runs its first layers here (if the
 * device does not have them all) and the rest on the device; any other call over that cache runs
 * here with the cache made whole on the host first and the new rows copied to the device after. */
static fx_status run(fx_status st, struct fx_fwd *f, struct fx_error *err) {
    if (st)
        return st;
    struct fx_moe_step *moe = f->ctx->s.xstep;
    moe->st = FX_OK;
    for (int i = 0; i < FX_MOE_LOOKAHEAD_MAX; i++)
        moe->pred_layer[i] = -1;
    struct fx_cuda_decoder *dev = f->kv.kind == FX_KV_CONTIG ? f->ctx->dev : NULL;
    if (dev && fx_cuda_decoder_takes(f)) {
        /* The CPU's layers first (the pool entered once), then the device's. */
        f->cpu_layers = fx_cuda_decoder_cpu_layers(dev);
        if (f->cpu_layers > 0 && (st = fx_par_run(f->ctx->pool, fx_forward_on_worker, f)))
            return fx_error_set(err, st, FX_NO_OFFSET,
                                "a forward pass cannot run inside another parallel region");
        return fx_cuda_decoder_forward(dev, f, err);
    }
    if (dev && (st = fx_cuda_decoder_kv_to_host(dev, &f->ctx->kv, err)))
        return st;
    st = fx_par_run(f->ctx->pool, fx_forward_on_worker, f);
    if (st)
        return fx_error_set(err, st, FX_NO_OFFSET,
                            "a forward pass cannot run inside another parallel region");
    /* An expert that could not be read (the model file changed or shrank): nothing of the call
     * is committed, and its outputs are not to be read. */
    if (moe->st)
        return fx_error_set(err, moe->st, FX_NO_OFFSET, "%s", moe->err.msg);
    fx_fwd_finish(f);
    if (dev)
        return fx_cuda_decoder_kv_from_host(dev, &f->ctx->kv, f->kv.u.contig.pos0, (int32_t)f->n,
                                            err);
    return FX_OK;
}

static fx_status forward(struct fx_context *ctx, const fx_token *tokens, int64_t n, int32_t pos0,
                         enum fx_logits_rows rows, float *logits, float *hidden, bool verify,
                         struct fx_error *err) {
    struct fx_fwd f;
    return run(fx_fwd_prepare(ctx, tokens, n, pos0, rows, logits, hidden, verify, &f, err), &f,
               err);
}

fx_status fx_forward_token(struct fx_context *ctx, fx_token token, int32_t pos, float *logits,
                           struct fx_error *err) {
    return forward(ctx, &token, 1, pos, FX_LOGITS_ALL, logits, NULL, false, err);
}

fx_status fx_forward_batch(struct fx_context *ctx, const fx_token *tokens, int32_t n, int32_t pos0,
                           float *logits, struct fx_error *err) {
    return forward(ctx, tokens, n, pos0, FX_LOGITS_ALL, logits, NULL, false, err);
}

fx_status fx_forward_verify(struct fx_context *ctx, const fx_token *tokens, int32_t n, int32_t pos0,
                            float *logits, struct fx_error *err) {
    return forward(ctx, tokens, n, pos0, FX_LOGITS_ALL, logits, NULL, true, err);
}

fx_status fx_forward_batch_with_hidden(struct fx_context *ctx, const fx_token *tokens, int32_t n,
                                       int32_t pos0, float *logits, float *hidden,
                                       struct fx_error *err) {
    return forward(ctx, tokens, n, pos0, FX_LOGITS_ALL, logits, hidden, false, err);
}

fx_status fx_forward_verify_mtp(struct fx_context *ctx, const fx_token *tokens, int32_t n,
                                int32_t pos0, const struct fx_verify_mtp_out *out,
                                struct fx_error *err) {
    if (!out)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET, "the output buffers are NULL");
    struct fx_fwd f, mtp;
    return run(fx_fwd_prepare_verify_mtp(ctx, tokens, n, pos0, out->logits, out->hidden,
                                         out->argmax, out->mtp_logits, out->mtp_hidden, &f, &mtp,
                                         err),
               &f, err);
}

fx_status fx_forward_prefill_mtp(struct fx_context *ctx, const fx_token *tokens, int32_t n,
                                 int32_t pos0, float *logits, float *hidden, struct fx_error *err) {
    struct fx_fwd f, mtp;
    return run(fx_fwd_prepare_prefill_mtp(ctx, tokens, n, pos0, logits, hidden, &f, &mtp, err), &f,
               err);
}

fx_status fx_forward_batch_last(struct fx_context *ctx, const fx_token *tokens, int32_t n,
                                int32_t pos0, float *logits, struct fx_error *err) {
    return forward(ctx, tokens, n, pos0, FX_LOGITS_LAST, logits, NULL, false, err);
}

fx_status fx_forward_hidden_batch(struct fx_context *ctx, const fx_token *tokens, int32_t n,
                                  int32_t pos0, float *hidden, struct fx_error *err) {
    return forward(ctx, tokens, n, pos0, FX_LOGITS_NONE, NULL, hidden, false, err);
}

fx_status fx_forward_mtp(struct fx_context *ctx, const fx_token *tokens, const float *hidden_in,
                         int32_t n, int32_t pos0, float *logits, float *hidden_out,
                         struct fx_error *err) {
    struct fx_fwd f;
    return run(fx_fwd_prepare_mtp(ctx, tokens, hidden_in, n, pos0, logits, hidden_out, &f, err), &f,
               err);
}

fx_status fx_forward_token_paged(struct fx_context *ctx, struct fx_kv_pool *pool, fx_seq_id seq,
                                 fx_token token, int32_t pos, float *logits, struct fx_error *err) {
    struct fx_fwd f;
    return run(fx_fwd_prepare_paged(ctx, pool, seq, &token, 1, pos, FX_LOGITS_ALL, logits, &f, err),
               &f, err);
}

fx_status fx_forward_batch_last_paged(struct fx_context *ctx, struct fx_kv_pool *pool,
                                      fx_seq_id seq, const fx_token *tokens, int32_t n,
                                      int32_t pos0, float *logits, struct fx_error *err) {
    struct fx_fwd f;
    return run(
        fx_fwd_prepare_paged(ctx, pool, seq, tokens, n, pos0, FX_LOGITS_LAST, logits, &f, err), &f,
        err);
}

fx_status fx_forward_multi_seq(struct fx_context *ctx, struct fx_kv_pool *pool,
                               const struct fx_batch *batch, float *out, struct fx_error *err) {
    struct fx_fwd f;
    return run(fx_fwd_prepare_multi(ctx, pool, batch, out, &f, err), &f, err);
}
