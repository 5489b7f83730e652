/* Drafters (internal): each kind fills a table of operations; drafter.c dispatches through it.
 * A drafter proposes tokens to follow a sequence and is told how many were kept. */
#ifndef FX_SPEC_DRAFTER_H
#define FX_SPEC_DRAFTER_H

#include "ferrox.h"

struct fx_drafter_ops {
    const char *name;
    fx_status (*propose)(struct fx_drafter *d, const fx_token *seq, int32_t n_seq, int32_t k,
                         fx_token *draft, int32_t *n_draft, struct fx_error *err);
    void (*accepted)(struct fx_drafter *d, int32_t n_draft, int32_t n_accepted); /* may be NULL */
    /* A drafter that reads the target's own outputs (the MTP head) runs the target's forward
     * passes over its context (fx_drafter.ctx): a speculation step's, over rows[0..n) = [the
     * sequence's last token, drafts] at position n_seq - 1, logits [n][n_vocab] as
     * fx_forward_verify's; and a prompt's, seq[pos0..n_seq) at pos0.., logits [n_vocab] of its
     * last row as fx_forward_batch_last's. NULL (both): fx_spec calls those itself. */
    fx_status (*verify)(struct fx_drafter *d, const fx_token *seq, int32_t n_seq,
                        const fx_token *rows, int32_t n, float *logits, struct fx_error *err);
    fx_status (*prefill)(struct fx_drafter *d, const fx_token *seq, int32_t n_seq, int32_t pos0,
                         float *logits, struct fx_error *err);
    void (*free)(struct fx_drafter *d);
};

/* The first member of every kind's struct. */
struct fx_drafter {
    const struct fx_drafter_ops *ops;
    /* The target context the drafter works in (the MTP head's cache is part of it), or NULL:
     * speculation over another context is refused. */
    struct fx_context *ctx;
};

/* The largest logit's index, ties to the lowest: a greedy drafter's token. */
fx_token fx_drafter_argmax(const float *x, int32_t n);

/* Prompt lookup's search, for the tests: the proposal for seq[0..n_seq) with n-grams of n_max
 * down to n_min tokens, at most k tokens; returns how many. */
int32_t fx_ngram_lookup(const fx_token *seq, int32_t n_seq, int32_t n_max, int32_t n_min, int32_t k,
                        fx_token *draft);

#endif
