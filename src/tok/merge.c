/* The shared merge loop (see merge.h): a binary min-heap of candidate pairs. */
#include "tok/merge.h"

#include "core/error.h"

struct pair {
    double key;
    int32_t left, right;
    uint32_t size; /* bytes of the merged symbol when the pair was made; a mismatch later means
                      one side has changed since, and the candidate is stale */
    fx_token result;
};

static bool before(const struct pair *a, const struct pair *b) {
    return a->key < b->key || (a->key == b->key && a->left < b->left);
}

struct heap {
    struct fx_tok_scratch *s;
    size_t n;
};

static fx_status heap_push(struct heap *h, struct pair p, struct fx_error *err) {
    fx_status st =
        fx_tok_reserve(&h->s->heap, &h->s->heap_cap, h->n + 1, sizeof p, "merge queue", err);
    if (st != FX_OK)
        return st;
    struct pair *a = h->s->heap;
    size_t i = h->n++;
    while (i > 0) {
        size_t up = (i - 1) / 2;
        if (!before(&p, &a[up]))
            break;
        a[i] = a[up];
        i = up;
    }
    a[i] = p;
    return FX_OK;
}

static struct pair heap_pop(struct heap *h) {
    struct pair *a = h->s->heap;
    struct pair top = a[0];
    struct pair last = a[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && before(&a[c + 1], &a[c]))
            c++;
        if (!before(&a[c], &last))
            break;
        a[i] = a[c];
        i = c;
    }
    if (h->n > 0)
        a[i] = last;
    return top;
}

static fx_status consider(struct heap *h, const struct fx_merge_sym *syms, int32_t l, int32_t r,
                          fx_merge_pair_fn pair, const void *ctx, struct fx_error *err) {
    if (l < 0 || r < 0)
        return FX_OK;
    struct pair p = {.left = l, .right = r, .size = syms[l].n + syms[r].n};
    if (!pair(ctx, &syms[l], &syms[r], &p.key, &p.result))
        return FX_OK;
    return heap_push(h, p, err);
}

fx_status fx_merge_run(struct fx_tok_scratch *s, struct fx_merge_sym *syms, int32_t n,
                       fx_merge_pair_fn pair, const void *ctx, struct fx_error *err) {
    struct heap h = {s, 0};
    fx_status st;
    for (int32_t i = 1; i < n; i++)
        if ((st = consider(&h, syms, i - 1, i, pair, ctx, err)) != FX_OK)
            return st;
    while (h.n > 0) {
        struct pair p = heap_pop(&h);
        struct fx_merge_sym *l = &syms[p.left], *r = &syms[p.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != p.size)
            continue;
        l->n += r->n;
        l->id = p.result;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0)
            syms[r->next].prev = p.left;
        if ((st = consider(&h, syms, l->prev, p.left, pair, ctx, err)) != FX_OK ||
            (st = consider(&h, syms, p.left, l->next, pair, ctx, err)) != FX_OK)
            return st;
    }
    return FX_OK;
}
