/* The candidate list and the selection that top-k and top-p share. */
#include <math.h>

#include "sample/sample.h"

#include "core/error.h"

void fx_cands_from_logits(struct fx_cands *c, const float *logits, int32_t n) {
    for (int32_t i = 0; i < n; i++)
        c->data[i] = (struct fx_cand){isnan(logits[i]) ? -INFINITY : logits[i], i};
    c->n = n;
    c->sorted = false;
}

/* Restores the heap property below node i of a heap [0, n) whose root is its worst element. */
static void sift_down(struct fx_cand *h, int32_t n, int32_t i) {
    struct fx_cand x = h[i];
    for (;;) {
        int32_t child = 2 * i + 1;
        if (child >= n)
            break;
        if (child + 1 < n && fx_cand_better(h[child], h[child + 1]))
            child++; /* the worse child */
        if (!fx_cand_better(x, h[child]))
            break;
        h[i] = h[child];
        i = child;
    }
    h[i] = x;
}

/* A heap of the best m seen so far, worst at the root: each later candidate costs one comparison
 * unless it beats the root, so selecting 40 of 150,000 is one pass. Heapsort then orders the m;
 * O(n log m) in the worst case, whatever the data. */
void fx_cand_select_top(struct fx_cand *h, int32_t n, int32_t m) {
    FX_ASSERT(m <= n);
    if (m <= 0)
        return;
    for (int32_t i = m / 2 - 1; i >= 0; i--)
        sift_down(h, m, i);
    for (int32_t i = m; i < n; i++) {
        if (fx_cand_better(h[i], h[0])) {
            struct fx_cand t = h[0];
            h[0] = h[i];
            h[i] = t;
            sift_down(h, m, 0);
        }
    }
    /* Moving the worst to the back each time leaves the best first. */
    for (int32_t end = m - 1; end > 0; end--) {
        struct fx_cand t = h[0];
        h[0] = h[end];
        h[end] = t;
        sift_down(h, end, 0);
    }
}

int32_t fx_cands_best(const struct fx_cands *c) {
    if (c->sorted)
        return 0;
    int32_t best = 0;
    for (int32_t i = 1; i < c->n; i++)
        if (fx_cand_better(c->data[i], c->data[best]))
            best = i;
    return best;
}
