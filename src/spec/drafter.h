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
    void (*free)(struct fx_drafter *d);
};

/* The first member of every kind's struct. */
struct fx_drafter {
    const struct fx_drafter_ops *ops;
};

/* Prompt lookup's search, for the tests: the proposal for seq[0..n_seq) with n-grams of n_max
 * down to n_min tokens, at most k tokens; returns how many. */
int32_t fx_ngram_lookup(const fx_token *seq, int32_t n_seq, int32_t n_max, int32_t n_min, int32_t k,
                        fx_token *draft);

#endif
