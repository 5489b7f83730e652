/* The pieces of a sampler (internal). The public chain in chain.c strings them together; the
 * tests call each one on its own against a reference.
 *
 * Every step works on a candidate list: (id, logit) pairs. It starts as the whole vocabulary in
 * id order, and steps that sort leave it sorted best first. "Best" is a total order - larger
 * logit first, then smaller id - so every step's result is a function of its input alone,
 * whatever algorithm it uses inside. */
#ifndef FX_SAMPLE_SAMPLE_H
#define FX_SAMPLE_SAMPLE_H

#include <stdbool.h>
#include <math.h>
#include <stdint.h>

#include "ferrox.h"

struct fx_cand {
    float logit;
    fx_token id;
};

struct fx_cands {
    struct fx_cand *data; /* [capacity]; the first n are the candidates */
    float *w;             /* [capacity]: scratch for the draw's weights */
    int32_t n;
    bool sorted; /* data[0..n) is in best-first order */
};

static inline bool fx_cand_better(struct fx_cand a, struct fx_cand b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

/* Fills c with logits [n] in id order; NaN becomes -INFINITY so that the order stays total. */
void fx_cands_from_logits(struct fx_cands *c, const float *logits, int32_t n);
/* Puts the best m (<= n) of a[0, n) first, best first; the others follow in some order. */
void fx_cand_select_top(struct fx_cand *a, int32_t n, int32_t m);
/* Index of the best candidate (n >= 1). */
int32_t fx_cands_best(const struct fx_cands *c);
/* exp(logit - max) for the best candidate's logit max: the unnormalised probability, computed the
 * same way by every step (1 for the best even when its logit is infinite). */
static inline float fx_cand_weight(float logit, float max) {
    return logit == max ? 1.0f : expf(logit - max);
}

/* Logit bias: adds each entry's bias to its token. c must be in id order (fresh from logits). */
void fx_sample_logit_bias(struct fx_cands *c, const struct fx_logit_bias *bias, size_t n);

/* The penalty window: the last `last_n` accepted tokens and how often each occurs in it. */
struct fx_penalties {
    int32_t last_n;
    float repeat, frequency, presence;
    fx_token *ring; /* [last_n]: the window, oldest at `head` once full */
    int32_t *count; /* [n_vocab]: occurrences in the window */
    int32_t head, filled;
};

/* Allocates the window for a vocabulary of n_vocab; false when out of memory. */
bool fx_penalties_init(struct fx_penalties *p, int32_t n_vocab, int32_t last_n, float repeat,
                       float frequency, float presence);
void fx_penalties_free(struct fx_penalties *p);
void fx_penalties_accept(struct fx_penalties *p, fx_token token);
void fx_penalties_clear(struct fx_penalties *p);
/* Penalises every token of the window once: a logit l becomes l / repeat when l > 0, l * repeat
 * otherwise, then loses count * frequency + presence. c must be in id order. */
void fx_sample_penalties(struct fx_penalties *p, struct fx_cands *c);

/* Truncations; each keeps at least one candidate. */
void fx_sample_top_k(struct fx_cands *c, int32_t k); /* k <= 0: no-op */
void fx_sample_top_p(struct fx_cands *c, float p);   /* p >= 1: no-op */
void fx_sample_min_p(struct fx_cands *c, float p);   /* p <= 0: no-op */

/* Temperature t > 0: divides every logit by t. t <= 0: keeps the best candidate only. */
void fx_sample_temperature(struct fx_cands *c, float t);

/* xoshiro256** seeded through splitmix64: small, fast, and the same sequence everywhere. */
struct fx_rng {
    uint64_t s[4];
};
void fx_rng_seed(struct fx_rng *r, uint64_t seed);
uint64_t fx_rng_next(struct fx_rng *r);
/* Uniform in [0, 1) with 53 random bits. */
double fx_rng_uniform(struct fx_rng *r);

/* Draws a candidate with probability softmax(logit); -1 when no logit is finite. */
int32_t fx_sample_draw(const struct fx_cands *c, struct fx_rng *r);

/* The chain's candidates just before the draw (tests compare them with a reference). */
fx_status fx_sampler_candidates(struct fx_sampler *s, const float *logits,
                                const struct fx_cands **out, struct fx_error *err);

#endif
