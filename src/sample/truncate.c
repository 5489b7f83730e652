/* The truncating samplers: top-k, top-p (nucleus) and min-p. Probabilities are those of the
 * current candidates at their current logits, renormalised over the candidates left by the
 * previous step. */
#include <math.h>

#include "sample/sample.h"

#include "core/error.h"

void fx_sample_top_k(struct fx_cands *c, int32_t k) {
    if (k <= 0 || k >= c->n)
        return;
    if (!c->sorted)
        fx_cand_select_top(c->data, c->n, k);
    c->n = k;
    c->sorted = true;
}

/* Top-p over unsorted candidates without sorting them: sorting a 150,000-entry vocabulary for
 * every token would cost more than the rest of the chain. Candidates fall into buckets of
 * 1/32 nat below the best logit (the last bucket takes everything below 32 nats, which weighs
 * under 1e-14 of the best); bucket order agrees with candidate order, so the buckets before the
 * one where the cumulative mass reaches p are kept whole and only the members of that edge bucket
 * are sorted to find the exact cut. The kept candidates are left unsorted. */
#define TOP_P_BUCKETS_PER_NAT 32
#define TOP_P_BUCKETS         1024

static int32_t top_p_bucket(float logit, float max) {
    double b = ((double)max - logit) * TOP_P_BUCKETS_PER_NAT; /* +inf for a -inf logit */
    return b < TOP_P_BUCKETS - 1 ? (int32_t)b : TOP_P_BUCKETS - 1;
}

static void swap_cands(struct fx_cand *a, int32_t i, int32_t j) {
    struct fx_cand t = a[i];
    a[i] = a[j];
    a[j] = t;
}

static void top_p_unsorted(struct fx_cands *c, float max, float p) {
    double mass[TOP_P_BUCKETS] = {0}, total = 0;
    for (int32_t i = 0; i < c->n; i++)
        mass[top_p_bucket(c->data[i].logit, max)] += fx_cand_weight(c->data[i].logit, max);
    for (int32_t b = 0; b < TOP_P_BUCKETS; b++)
        total += mass[b];
    double target = (double)p * total, acc = 0;
    int32_t edge = 0;
    while (edge < TOP_P_BUCKETS && acc + mass[edge] < target)
        acc += mass[edge++];
    if (edge == TOP_P_BUCKETS)
        return; /* rounding kept the sum a hair below the target: keep everything */
    /* The buckets before the edge to the front, then the edge bucket: data[first, k). */
    int32_t first = 0;
    for (int32_t i = 0; i < c->n; i++)
        if (top_p_bucket(c->data[i].logit, max) < edge)
            swap_cands(c->data, first++, i);
    int32_t k = first;
    for (int32_t i = first; i < c->n; i++)
        if (top_p_bucket(c->data[i].logit, max) == edge)
            swap_cands(c->data, k++, i);
    fx_cand_select_top(c->data + first, k - first, k - first);
    for (int32_t i = first; i < k; i++) {
        acc += fx_cand_weight(c->data[i].logit, max);
        if (acc >= target) {
            c->n = i + 1;
            return;
        }
    }
    c->n = k;
}

/* Keeps the smallest best-first prefix whose probability reaches p. */
void fx_sample_top_p(struct fx_cands *c, float p) {
    if (p >= 1.0f || c->n <= 1)
        return;
    float max = c->data[fx_cands_best(c)].logit;
    if (max == -INFINITY)
        return;
    if (!c->sorted) {
        top_p_unsorted(c, max, p);
        return;
    }
    double total = 0, cum = 0;
    for (int32_t i = 0; i < c->n; i++)
        total += fx_cand_weight(c->data[i].logit, max);
    for (int32_t i = 0; i < c->n; i++) {
        cum += fx_cand_weight(c->data[i].logit, max);
        if (cum >= (double)p * total) {
            c->n = i + 1;
            return;
        }
    }
}

/* Keeps the candidates with p >= min_p * p_max, i.e. logit >= max + log(min_p); the order (and
 * so the sorted flag) is kept. */
void fx_sample_min_p(struct fx_cands *c, float p) {
    if (p <= 0.0f || c->n <= 1)
        return;
    float max = c->data[fx_cands_best(c)].logit;
    if (max == -INFINITY)
        return;
    double floor_logit = (double)max + log((double)p);
    int32_t k = 0;
    for (int32_t i = 0; i < c->n; i++)
        if ((double)c->data[i].logit >= floor_logit)
            c->data[k++] = c->data[i];
    FX_ASSERT(k > 0); /* the best passes as long as p <= 1 */
    c->n = k;
}
