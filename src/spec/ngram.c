/* Prompt lookup: the sequence's last n tokens (n from n_max down to n_min) are looked up in the
 * tokens before them, most recent occurrence first, and what followed that occurrence is
 * proposed. The search is a backward scan (a few microseconds for a context of thousands of
 * tokens, next to a forward pass); an index would pay only for very long contexts. */
#include <stdlib.h>

#include "core/error.h"
#include "spec/drafter.h"

struct ngram {
    struct fx_drafter base;
    int32_t n_max, n_min;
};

struct fx_drafter_ngram_params fx_drafter_ngram_default_params(void) {
    return (struct fx_drafter_ngram_params){.n_max = 3, .n_min = 1};
}

/* Whether seq[a..a+n) equals seq[b..b+n). */
static bool same(const fx_token *seq, int32_t a, int32_t b, int32_t n) {
    for (int32_t i = 0; i < n; i++)
        if (seq[a + i] != seq[b + i])
            return false;
    return true;
}

int32_t fx_ngram_lookup(const fx_token *seq, int32_t n_seq, int32_t n_max, int32_t n_min, int32_t k,
                        fx_token *draft) {
    for (int32_t n = n_max; n >= n_min; n--) {
        if (n > n_seq - 1)
            continue; /* an occurrence needs the key plus one earlier token at least */
        int32_t key = n_seq - n;
        bool known = true;
        for (int32_t i = key; i < n_seq; i++)
            known &= seq[i] != FX_TOKEN_NULL;
        if (!known)
            continue;
        /* Occurrences start at j <= key - 1, so at least one token follows each. */
        for (int32_t j = key - 1; j >= 0; j--) {
            if (seq[j + n - 1] != seq[n_seq - 1] || !same(seq, j, key, n))
                continue;
            /* What followed, copied on through the proposal itself where the occurrence runs
             * into the end of the sequence (a repeating pattern of period n_seq - j - n). */
            int32_t m = 0;
            for (; m < k; m++) {
                int32_t src = j + n + m;
                fx_token t = src < n_seq ? seq[src] : draft[src - n_seq];
                if (t == FX_TOKEN_NULL)
                    break;
                draft[m] = t;
            }
            return m;
        }
    }
    return 0;
}

static fx_status ngram_propose(struct fx_drafter *d, const fx_token *seq, int32_t n_seq, int32_t k,
                               fx_token *draft, int32_t *n_draft, struct fx_error *err) {
    (void)err;
    struct ngram *g = (struct ngram *)d;
    *n_draft = fx_ngram_lookup(seq, n_seq, g->n_max, g->n_min, k, draft);
    return FX_OK;
}

static void ngram_free(struct fx_drafter *d) {
    free(d);
}

static const struct fx_drafter_ops ngram_ops = {
    .name = "ngram",
    .propose = ngram_propose,
    .free = ngram_free,
};

fx_status fx_drafter_ngram_create(const struct fx_drafter_ngram_params *params,
                                  struct fx_drafter **out, struct fx_error *err) {
    *out = NULL;
    struct fx_drafter_ngram_params p = params ? *params : fx_drafter_ngram_default_params();
    if (p.n_min < 1 || p.n_max < p.n_min || p.n_max > 64)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "prompt lookup: n-gram sizes %d..%d must satisfy 1 <= n_min <= n_max "
                            "<= 64",
                            (int)p.n_min, (int)p.n_max);
    struct ngram *g = calloc(1, sizeof *g);
    if (!g)
        return fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "prompt lookup: out of memory");
    g->base.ops = &ngram_ops;
    g->n_max = p.n_max;
    g->n_min = p.n_min;
    *out = &g->base;
    return FX_OK;
}
