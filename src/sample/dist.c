/* The last two steps: temperature, then the draw from softmax(logits). */
#include "sample/sample.h"

void fx_sample_temperature(struct fx_cands *c, float t) {
    if (t <= 0.0f) {
        c->data[0] = c->data[fx_cands_best(c)];
        c->n = 1;
        c->sorted = true;
        return;
    }
    if (t == 1.0f)
        return;
    /* Dividing by t > 0 keeps the order, except that it may make neighbours equal; only the draw
     * follows, and it walks the candidates in their current (deterministic) order. */
    for (int32_t i = 0; i < c->n; i++)
        c->data[i].logit /= t;
}

/* Inverse transform sampling: one uniform number u in [0, total) and the first candidate whose
 * cumulative weight exceeds it. Weights are floats summed in double, the same values in both
 * passes. */
int32_t fx_sample_draw(const struct fx_cands *c, struct fx_rng *r) {
    int32_t best = fx_cands_best(c);
    float max = c->data[best].logit;
    double u = fx_rng_uniform(r);
    if (max == -INFINITY)
        return -1;
    double total = 0;
    for (int32_t i = 0; i < c->n; i++) {
        c->w[i] = fx_cand_weight(c->data[i].logit, max);
        total += c->w[i];
    }
    u *= total;
    double cum = 0;
    int32_t last = best;
    for (int32_t i = 0; i < c->n; i++) {
        if (c->w[i] == 0.0f)
            continue; /* never pick an impossible token, even when u rounds to the top */
        cum += c->w[i];
        last = i;
        if (u < cum)
            return i;
    }
    return last;
}
