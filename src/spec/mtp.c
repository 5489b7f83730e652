/* The MTP drafter: the model's own multi-token-prediction head (Qwen3.5's NextN block) drafts from
 * the target's hidden states, inside the target's context, where the head's cache lives.
 *
 * MTP position q reads (the token at q, the trunk's hidden row of q - 1) and predicts the token at
 * q + 1 (fx_forward_mtp). A speculation step over [x_p, d_0..d_{k-1}] at positions p.. runs the
 * head in the same pass over (the trunk's argmax of row i, its hidden row i) at MTP positions
 * p + 1 + i (fx_forward_verify_mtp). When the token kept after row i is that argmax (always at
 * temperature 0), the head's row is the one plain bookkeeping would compute, and the row of the
 * last kept token drafts the next step's first token with no further pass. Rows after the last
 * kept token read rejected drafts: the cache is cut back before them, and a row whose kept token
 * is not the argmax (sampling) is computed again with the real token. Drafts after the first
 * chain through the head's own hidden output, one one-row pass each. A step that drafts nothing
 * (the controller measuring plain decoding, or speculation switched off) is a one-token prompt
 * (fx_forward_prefill_mtp): the trunk and the head's cache row of the token evaluated, in one
 * pool entry, without the head's vocabulary projection, which would cost about a third of the
 * trunk on a small model. The head then holds the sequence's positions but not the row of the
 * token after them, whose logits only a draft needs: the next step that drafts computes that row
 * (one fx_forward_mtp row, reading the last token and the trunk's hidden row kept from the plain
 * step, the same bits plain bookkeeping gives).
 *
 * held[q] is the token MTP position q read; the head's cache is taken as valid where held agrees
 * with the sequence, so any change of the sequence (a chat turn cut back, a row sampled away from
 * its argmax) is caught by comparing the two. A position whose trunk hidden row the drafter never
 * saw (evaluated outside speculation, loaded from a saved state) reads zeros, as position 0 does,
 * and an unknown token reads token 0: that only makes drafts worse, never the output different,
 * which depends on the trunk's logits alone. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "spec/drafter.h"

/* Rows of a verify step: its drafts are cut to what a hybrid sequence can roll back. */
#define ROWS (FX_ROLLBACK_MAX + 1)
/* Prompt rows per prefill pass (bounds the hidden rows kept). */
#define PREFILL_ROWS 256

struct mtp {
    struct fx_drafter base;
    int32_t n_vocab, n_embd, n_ctx;
    fx_token *held;  /* [n_ctx] the token each MTP position read */
    int32_t n_valid; /* MTP positions 0..n_valid - 1 read held[] and the right hidden rows */
    float *h;        /* [PREFILL_ROWS + 1][n_embd] trunk hidden rows of positions h_pos0.. */
    int32_t h_pos0;  /* -1 stands for "before position 0" (zeros) */
    int32_t h_n;     /* rows of h that are valid */
    float *m_logits; /* [ROWS][n_vocab] the head's rows at MTP positions m_pos0.. */
    float *m_hidden; /* [ROWS][n_embd] their hidden outputs */
    int32_t m_pos0, m_n;
    fx_token *toks; /* [ROWS] a catch-up pass's tokens */
    float *hin;     /* [ROWS][n_embd] its hidden inputs */
    fx_token argmax[ROWS];
    float *c_logits; /* [n_vocab] a chained draft's logits */
    float *c_hidden; /* [2][n_embd] the chain's hidden rows, alternating */
};

static fx_token token_at(const fx_token *seq, int32_t q) {
    return seq[q] == FX_TOKEN_NULL ? 0 : seq[q];
}

/* The trunk's hidden row of position p into out, zeros where the drafter has none. */
static void hidden_row(const struct mtp *m, int32_t p, float *out) {
    size_t row = (size_t)m->n_embd * sizeof(float);
    if (p >= m->h_pos0 && p < m->h_pos0 + m->h_n && p >= 0)
        memcpy(out, m->h + (size_t)(p - m->h_pos0) * (size_t)m->n_embd, row);
    else
        memset(out, 0, row);
}

/* Makes MTP positions 0..upto valid for seq, and when logits is set the head's row of upto
 * available in m_logits: cuts the cache back to where held agrees with seq, and computes the
 * rest. */
static fx_status catch_up(struct mtp *m, const fx_token *seq, int32_t upto, bool logits,
                          struct fx_error *err) {
    struct fx_context *ctx = m->base.ctx;
    int32_t v = m->n_valid < upto + 1 ? m->n_valid : upto + 1;
    if (v > fx_context_mtp_len(ctx))
        v = fx_context_mtp_len(ctx);
    for (int32_t q = 0; q < v; q++)
        if (m->held[q] != token_at(seq, q)) {
            v = q;
            break;
        }
    if (v == upto + 1 && (!logits || (upto >= m->m_pos0 && upto < m->m_pos0 + m->m_n))) {
        m->n_valid = v;
        return fx_context_mtp_truncate(ctx, v, err);
    }
    if (v == upto + 1)
        v = upto; /* the row of upto is needed again */
    fx_status st = fx_context_mtp_truncate(ctx, v, err);
    m->n_valid = v;
    for (int32_t q0 = v; q0 <= upto && st == FX_OK; q0 += ROWS) {
        int32_t cnt = upto + 1 - q0 < ROWS ? upto + 1 - q0 : ROWS;
        for (int32_t i = 0; i < cnt; i++) {
            m->toks[i] = token_at(seq, q0 + i);
            hidden_row(m, q0 + i - 1, m->hin + (size_t)i * (size_t)m->n_embd);
        }
        st = fx_forward_mtp(ctx, m->toks, m->hin, cnt, q0, m->m_logits, m->m_hidden, err);
        if (st == FX_OK) {
            memcpy(m->held + q0, m->toks, (size_t)cnt * sizeof *m->toks);
            m->m_pos0 = q0;
            m->m_n = cnt;
            m->n_valid = q0 + cnt;
        }
    }
    return st;
}

static fx_status mtp_prefill(struct fx_drafter *d, const fx_token *seq, int32_t n_seq, int32_t pos0,
                             float *logits, struct fx_error *err) {
    struct mtp *m = (struct mtp *)d;
    size_t row = (size_t)m->n_embd * sizeof(float);
    /* The head holds the positions before the prompt first (their rows read hidden rows of
     * earlier calls). */
    fx_status st = pos0 > 0 ? catch_up(m, seq, pos0 - 1, false, err) : FX_OK;
    for (int32_t c0 = pos0, cn; c0 < n_seq && st == FX_OK; c0 += cn) {
        cn = n_seq - c0 < PREFILL_ROWS ? n_seq - c0 : PREFILL_ROWS;
        /* h row 0: the hidden row before the pass, which the head's first row reads. */
        if (c0 - 1 >= m->h_pos0 && c0 - 1 < m->h_pos0 + m->h_n && c0 > 0)
            memmove(m->h, m->h + (size_t)(c0 - 1 - m->h_pos0) * (size_t)m->n_embd, row);
        else
            memset(m->h, 0, row);
        m->h_n = 0; /* until the pass succeeds */
        if ((st = fx_forward_prefill_mtp(d->ctx, seq + c0, cn, c0, logits, m->h, err)) != FX_OK)
            break;
        m->h_pos0 = c0 - 1;
        m->h_n = cn + 1;
        memcpy(m->held + c0, seq + c0, (size_t)cn * sizeof *seq);
        m->n_valid = c0 + cn;
        m->m_n = 0; /* the pass computes no head logits; earlier ones may be of other tokens */
    }
    return st;
}

static fx_status mtp_verify(struct fx_drafter *d, const fx_token *seq, int32_t n_seq,
                            const fx_token *rows, int32_t n, float *logits, struct fx_error *err) {
    struct mtp *m = (struct mtp *)d;
    int32_t pos = n_seq - 1;
    FX_ASSERT(n <= ROWS);
    /* A plain step: rows[0] is seq[pos], a one-token prompt (see the top of the file). */
    if (n == 1)
        return mtp_prefill(d, seq, n_seq, pos, logits, err);
    /* At the end of the context the head's rows do not fit: the trunk alone. */
    if (pos + n + 1 > m->n_ctx) {
        m->h_n = 0;
        return fx_forward_verify(d->ctx, rows, n, pos, logits, err);
    }
    fx_status st = catch_up(m, seq, pos, false, err);
    if (st != FX_OK)
        return st;
    struct fx_verify_mtp_out out = {logits, m->h, m->argmax, m->m_logits, m->m_hidden};
    if ((st = fx_forward_verify_mtp(d->ctx, rows, n, pos, &out, err)) != FX_OK)
        return st;
    m->h_pos0 = pos;
    m->h_n = n;
    m->m_pos0 = pos + 1;
    m->m_n = n;
    memcpy(m->held + pos + 1, m->argmax, (size_t)n * sizeof *m->argmax);
    m->n_valid = pos + 1 + n;
    return FX_OK;
}

static fx_status mtp_propose(struct fx_drafter *d, const fx_token *seq, int32_t n_seq, int32_t k,
                             fx_token *draft, int32_t *n_draft, struct fx_error *err) {
    struct mtp *m = (struct mtp *)d;
    int32_t pos = n_seq - 1;
    /* The verify step's rows and their MTP rows must fit: pos + (k + 1) + 1 <= n_ctx. */
    if (k > ROWS - 1)
        k = ROWS - 1;
    if (k > m->n_ctx - pos - 2)
        k = m->n_ctx - pos - 2;
    if (k <= 0)
        return FX_OK;
    fx_status st = catch_up(m, seq, pos, true, err);
    if (st != FX_OK)
        return st;
    size_t r = (size_t)(pos - m->m_pos0);
    const float *hid = m->m_hidden + r * (size_t)m->n_embd;
    draft[0] = fx_drafter_argmax(m->m_logits + r * (size_t)m->n_vocab, m->n_vocab);
    for (int32_t i = 1; i < k; i++) {
        float *next = m->c_hidden + (size_t)(i % 2) * (size_t)m->n_embd;
        st = fx_forward_mtp(d->ctx, &draft[i - 1], hid, 1, pos + i, m->c_logits, next, err);
        if (st != FX_OK)
            return st;
        draft[i] = fx_drafter_argmax(m->c_logits, m->n_vocab);
        hid = next;
    }
    *n_draft = k;
    return FX_OK;
}

static void mtp_free(struct fx_drafter *d) {
    struct mtp *m = (struct mtp *)d;
    free(m->held);
    free(m->h);
    free(m->m_logits);
    free(m->m_hidden);
    free(m->toks);
    free(m->hin);
    free(m->c_logits);
    free(m->c_hidden);
    free(m);
}

static const struct fx_drafter_ops mtp_ops = {
    .name = "mtp",
    .propose = mtp_propose,
    .verify = mtp_verify,
    .prefill = mtp_prefill,
    .free = mtp_free,
};

fx_status fx_drafter_mtp_create(struct fx_context *ctx, struct fx_drafter **out,
                                struct fx_error *err) {
    *out = NULL;
    if (!ctx)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET, "MTP drafter: no context");
    const struct fx_model *model = fx_context_model(ctx);
    if (fx_model_n_nextn(model) == 0)
        return fx_error_set(err, FX_ERR_UNSUPPORTED, FX_NO_OFFSET,
                            "this %s model has no multi-token-prediction head to draft with",
                            fx_model_arch(model));
    struct mtp *m = calloc(1, sizeof *m);
    if (!m)
        return fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "MTP drafter: out of memory");
    m->base.ops = &mtp_ops;
    m->base.ctx = ctx;
    size_t nv = (size_t)fx_model_n_vocab(model), ne = (size_t)fx_model_n_embd(model);
    m->n_vocab = (int32_t)nv;
    m->n_embd = (int32_t)ne;
    m->n_ctx = fx_context_n_ctx(ctx);
    m->h_pos0 = -1;
    m->held = malloc((size_t)m->n_ctx * sizeof *m->held);
    m->h = malloc((PREFILL_ROWS + 1) * ne * sizeof(float));
    m->m_logits = malloc(ROWS * nv * sizeof(float));
    m->m_hidden = malloc(ROWS * ne * sizeof(float));
    m->toks = malloc(ROWS * sizeof *m->toks);
    m->hin = malloc(ROWS * ne * sizeof(float));
    m->c_logits = malloc(nv * sizeof(float));
    m->c_hidden = malloc(2 * ne * sizeof(float));
    if (!m->held || !m->h || !m->m_logits || !m->m_hidden || !m->toks || !m->hin || !m->c_logits ||
        !m->c_hidden) {
        mtp_free(&m->base);
        return fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "MTP drafter: out of memory");
    }
    *out = &m->base;
    return FX_OK;
}
