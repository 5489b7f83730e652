/* The merge loop both BPE flavours share: start from a chain of symbols (spans of the text), and
 * keep merging the best adjacent pair until no pair qualifies. SentencePiece ranks a pair by the
 * score of the token it forms (highest first), byte-level BPE by the rank of its merge rule
 * (lowest first); ties go to the leftmost pair. That ranking is the only difference, so it is
 * the caller's `pair` function; everything else is this one loop. */
#ifndef FX_TOK_MERGE_H
#define FX_TOK_MERGE_H

#include <stdbool.h>
#include <stdint.h>

#include "ferrox.h"
#include "tok/session.h"

/* One symbol: text[start .. start+n) and the token it is (FX_TOKEN_NULL if none). A symbol that
 * was merged into its left neighbour has n == 0. prev/next link the live symbols (-1 ends). */
struct fx_merge_sym {
    int32_t prev, next;
    uint32_t start, n;
    fx_token id;
};

/* Whether l and r (adjacent, live) may merge; if so *key orders the candidates (smallest first)
 * and *result is the merged symbol's token. */
typedef bool (*fx_merge_pair_fn)(const void *ctx, const struct fx_merge_sym *l,
                                 const struct fx_merge_sym *r, double *key, fx_token *result);

/* Merges syms[0..n) (linked in order) in place; the survivors are reached from syms[0] through
 * `next`. Uses s->heap. */
fx_status fx_merge_run(struct fx_tok_scratch *s, struct fx_merge_sym *syms, int32_t n,
                       fx_merge_pair_fn pair, const void *ctx, struct fx_error *err);

/* Links syms[0..n) into one chain in array order (the caller fills start, n and id). */
static inline void fx_merge_link(struct fx_merge_sym *syms, int32_t n) {
    for (int32_t i = 0; i < n; i++) {
        syms[i].prev = i - 1;
        syms[i].next = i + 1 < n ? i + 1 : -1;
    }
}

#endif
