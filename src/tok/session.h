/* Per-call state of one tokenization: the caller's output array and the scratch buffers the
 * algorithms grow as they go. Each call to fx_tokenize owns one, so calls never share memory
 * and a vocabulary can serve many threads at once. */
#ifndef FX_TOK_SESSION_H
#define FX_TOK_SESSION_H

#include <stddef.h>

#include "ferrox.h"

/* Output ids. Pushing past the capacity only counts, so that a caller whose array is too small
 * learns the size it needs; `n` may also move back (WordPiece drops a word it cannot spell). */
struct fx_tok_out {
    fx_token *ids;
    size_t cap, n;
};

static inline void fx_tok_push(struct fx_tok_out *o, fx_token id) {
    if (o->n < o->cap)
        o->ids[o->n] = id;
    o->n++;
}

/* A text fragment after special-token splitting: raw text, or one special token. */
struct fx_tok_frag {
    size_t start, len;
    fx_token id; /* FX_TOKEN_NULL for raw text */
};

struct fx_tok_scratch {
    struct fx_tok_frag *frags, *frags_next; /* special-token partition, double-buffered */
    size_t frags_cap, frags_next_cap;
    void *sym; /* symbols of the SPM / BPE merge loops */
    size_t sym_cap;
    void *heap; /* their priority queue */
    size_t heap_cap;
    char *text; /* a rewritten copy of the input (SPM's escaped spaces, WordPiece's words) */
    size_t text_cap;
    void *match;      /* pcre2_match_data of the pre-tokenizer */
    void *pair_cache; /* SentencePiece's pair lookups (spm.c) */
};

/* Grows *buf to hold at least `need` elements of `elem` bytes (geometrically). FX_ERR_NOMEM
 * (with a message naming `what`) on failure or overflow. */
fx_status fx_tok_reserve(void **buf, size_t *cap, size_t need, size_t elem, const char *what,
                         struct fx_error *err);

void fx_tok_scratch_free(struct fx_tok_scratch *s);

#endif
