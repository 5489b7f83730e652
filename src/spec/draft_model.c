/* The draft-model drafter: a smaller model with the target's vocabulary, run greedily on its own
 * context. Its cache is kept in step with the sequence lazily: before each proposal it is cut back
 * to the longest common prefix of the tokens it holds and the sequence (fx_context_kv_truncate),
 * and the rest of the sequence is evaluated in one batch, so after a verify step only the tokens
 * that differ from what it drafted (usually one or two) are computed again. A draft model with a
 * recurrent state (qwen35) cannot be cut back: it is evaluated again from the start instead. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "spec/drafter.h"

struct draft_model {
    struct fx_drafter base;
    const struct fx_model *model;
    struct fx_context *ctx;
    int32_t n_vocab_target; /* drafts outside the target's logits are never proposed */
    int32_t n_vocab;
    int32_t n_ctx;
    float *logits;  /* [n_vocab] */
    fx_token *held; /* [n_ctx]: the tokens the draft cache holds, in order */
    int32_t origin; /* the sequence position of held[0] (after the last unknown token) */
};

static fx_status draft_propose(struct fx_drafter *d, const fx_token *seq, int32_t n_seq, int32_t k,
                               fx_token *draft, int32_t *n_draft, struct fx_error *err) {
    struct draft_model *dm = (struct draft_model *)d;
    /* The draft context starts after the last token the caller does not know. */
    int32_t origin = 0;
    for (int32_t i = n_seq - 1; i >= 0; i--)
        if (seq[i] == FX_TOKEN_NULL) {
            origin = i + 1;
            break;
        }
    int32_t n = n_seq - origin;
    if (n <= 0)
        return FX_OK;
    if (n + k - 1 > dm->n_ctx)
        k = dm->n_ctx - n + 1;
    if (k <= 0)
        return FX_OK;
    const fx_token *s = seq + origin;
    int32_t held = fx_context_kv_len(dm->ctx);
    int32_t keep = 0;
    if (origin == dm->origin)
        while (keep < held && keep < n && dm->held[keep] == s[keep])
            keep++;
    if (keep == n) /* the last token is evaluated again for its logits */
        keep--;
    /* A draft model with a recurrent state is kept whole or evaluated again from the start. */
    if (keep != held && fx_model_has_recurrent_state(dm->model))
        keep = 0;
    dm->origin = origin;
    fx_status st = fx_context_kv_truncate(dm->ctx, keep, err);
    if (st == FX_OK)
        st = fx_forward_batch_last(dm->ctx, s + keep, n - keep, keep, dm->logits, err);
    if (st != FX_OK)
        return st;
    memcpy(dm->held + keep, s + keep, (size_t)(n - keep) * sizeof *s);
    int32_t m = 0;
    for (;;) {
        fx_token t = fx_drafter_argmax(dm->logits, dm->n_vocab);
        if (t >= dm->n_vocab_target) /* a token the target has no logit for: stop there */
            break;
        draft[m++] = t;
        if (m == k)
            break;
        int32_t pos = n + m - 1;
        if ((st = fx_forward_token(dm->ctx, t, pos, dm->logits, err)) != FX_OK)
            return st;
        dm->held[pos] = t;
    }
    *n_draft = m;
    return FX_OK;
}

static void draft_free(struct fx_drafter *d) {
    struct draft_model *dm = (struct draft_model *)d;
    fx_context_free(dm->ctx);
    free(dm->logits);
    free(dm->held);
    free(dm);
}

static const struct fx_drafter_ops draft_ops = {
    .name = "draft",
    .propose = draft_propose,
    .free = draft_free,
};

/* The tokenizer metadata both files must share: the tokenizer model, the token texts, and the
 * BOS / EOS ids where either file names them. */
static fx_status same_vocab(const struct fx_gguf *t, const struct fx_gguf *dr,
                            struct fx_error *err) {
#define DIFFER(...)                                                                                \
    fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,                                            \
                 "the draft model's vocabulary differs from the target's: " __VA_ARGS__)
    struct fx_gguf_str tm, dmod;
    if (fx_gguf_get_str(t, "tokenizer.ggml.model", &tm, NULL) != FX_OK ||
        fx_gguf_get_str(dr, "tokenizer.ggml.model", &dmod, NULL) != FX_OK)
        return DIFFER("both files need tokenizer.ggml.model");
    if (tm.len != dmod.len || memcmp(tm.data, dmod.data, tm.len) != 0)
        return DIFFER("tokenizer.ggml.model is '%s' in the draft and '%s' in the target", dmod.data,
                      tm.data);
    const void *ta, *da;
    uint64_t tn, dn;
    if (fx_gguf_get_arr(t, "tokenizer.ggml.tokens", FX_GGUF_STRING, &ta, &tn, NULL) != FX_OK ||
        fx_gguf_get_arr(dr, "tokenizer.ggml.tokens", FX_GGUF_STRING, &da, &dn, NULL) != FX_OK)
        return DIFFER("both files need tokenizer.ggml.tokens");
    if (tn != dn)
        return DIFFER("%llu tokens in the draft, %llu in the target", (unsigned long long)dn,
                      (unsigned long long)tn);
    const struct fx_gguf_str *tt = ta, *dt = da;
    for (uint64_t i = 0; i < tn; i++)
        if (tt[i].len != dt[i].len || memcmp(tt[i].data, dt[i].data, tt[i].len) != 0)
            return DIFFER("token %llu is '%.40s' in the draft and '%.40s' in the target",
                          (unsigned long long)i, dt[i].data, tt[i].data);
    static const char *const ids[] = {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"};
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
        uint32_t a = UINT32_MAX, b = UINT32_MAX;
        fx_gguf_get_u32(t, ids[i], &a, NULL);
        fx_gguf_get_u32(dr, ids[i], &b, NULL);
        if (a != b)
            return DIFFER("%s is %lld in the draft and %lld in the target", ids[i],
                          b == UINT32_MAX ? -1ll : (long long)b,
                          a == UINT32_MAX ? -1ll : (long long)a);
    }
    return FX_OK;
#undef DIFFER
}

fx_status fx_drafter_model_create(const struct fx_model *target, const struct fx_model *draft,
                                  const struct fx_context_params *cp, struct fx_drafter **out,
                                  struct fx_error *err) {
    *out = NULL;
    fx_status st = same_vocab(fx_model_gguf(target), fx_model_gguf(draft), err);
    if (st != FX_OK)
        return st;
    struct draft_model *dm = calloc(1, sizeof *dm);
    if (!dm)
        return fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "draft model: out of memory");
    dm->base.ops = &draft_ops;
    dm->model = draft;
    dm->n_vocab = fx_model_n_vocab(draft);
    dm->n_vocab_target = fx_model_n_vocab(target);
    if ((st = fx_context_create(draft, cp, &dm->ctx, err)) != FX_OK) {
        fx_error_prefix(err, "draft model");
        free(dm);
        return st;
    }
    dm->n_ctx = fx_context_n_ctx(dm->ctx);
    dm->logits = malloc((size_t)dm->n_vocab * sizeof *dm->logits);
    dm->held = malloc((size_t)dm->n_ctx * sizeof *dm->held);
    if (!dm->logits || !dm->held) {
        draft_free(&dm->base);
        return fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "draft model: out of memory");
    }
    *out = &dm->base;
    return FX_OK;
}
