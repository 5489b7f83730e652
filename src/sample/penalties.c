/* Repetition, frequency and presence penalties over a window of recent tokens, as llama.cpp
 * defines them: for each token t that occurs count(t) > 0 times in the last n accepted tokens,
 *
 *   logit(t) = logit(t) > 0 ? logit(t) / repeat : logit(t) * repeat
 *   logit(t) -= count(t) * frequency + presence
 *
 * The window is a ring of the last n tokens plus a count per vocabulary entry, both kept up to
 * date by accept, so applying the penalties costs O(n), not O(vocabulary). */
#include <stdlib.h>

#include "sample/sample.h"

bool fx_penalties_init(struct fx_penalties *p, int32_t n_vocab, int32_t last_n, float repeat,
                       float frequency, float presence) {
    *p = (struct fx_penalties){.repeat = repeat, .frequency = frequency, .presence = presence};
    bool neutral = repeat == 1.0f && frequency == 0.0f && presence == 0.0f;
    if (last_n <= 0 || neutral)
        return true; /* inactive: no window at all */
    p->last_n = last_n;
    p->ring = malloc((size_t)last_n * sizeof *p->ring);
    p->count = calloc((size_t)n_vocab, sizeof *p->count);
    if (!p->ring || !p->count) {
        fx_penalties_free(p);
        return false;
    }
    return true;
}

void fx_penalties_free(struct fx_penalties *p) {
    free(p->ring);
    free(p->count);
    p->ring = NULL;
    p->count = NULL;
}

void fx_penalties_accept(struct fx_penalties *p, fx_token token) {
    if (!p->ring)
        return;
    if (p->filled == p->last_n)
        p->count[p->ring[p->head]]--; /* the oldest leaves the window */
    else
        p->filled++;
    p->ring[p->head] = token;
    p->count[token]++;
    p->head = p->head + 1 == p->last_n ? 0 : p->head + 1;
}

void fx_penalties_clear(struct fx_penalties *p) {
    for (int32_t i = 0; i < p->filled; i++)
        p->count[p->ring[i]] = 0;
    p->filled = 0;
    p->head = 0;
}

void fx_sample_penalties(struct fx_penalties *p, struct fx_cands *c) {
    if (!p->ring)
        return;
    /* A token may occur several times in the ring; negating its count marks it as done. */
    for (int32_t i = 0; i < p->filled; i++) {
        fx_token t = p->ring[i];
        int32_t n = p->count[t];
        if (n <= 0)
            continue;
        float l = c->data[t].logit;
        l = l > 0.0f ? l / p->repeat : l * p->repeat;
        l -= (float)n * p->frequency + p->presence;
        c->data[t].logit = l;
        p->count[t] = -n;
    }
    for (int32_t i = 0; i < p->filled; i++) {
        fx_token t = p->ring[i];
        if (p->count[t] < 0)
            p->count[t] = -p->count[t];
    }
}
