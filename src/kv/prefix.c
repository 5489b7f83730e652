/* The prefix cache of a paged KV pool (kv/paged.h): full blocks keyed by a hash chain, so that a
 * block's key stands for every token up to its end, in a chained hash table, and the
 * least-recently-used list of the cached blocks no sequence holds.
 *
 * A lookup names the parent block itself, not only its key, and compares the block's tokens, so
 * a hash collision never gives a false hit. A parent id may be reused for other tokens after it
 * is evicted; gen[] tells the two apart (a child records its parent's gen when it joins). A child
 * of an evicted parent cannot be found any more; it stays cached, idle once released, until the
 * LRU order evicts it. */
#include <string.h>

#include "core/error.h"
#include "kv/paged.h"

#define KEY_SEED 0x6a09e667f3bcc908ULL /* the key "before" the first block */

/* splitmix64's finalizer. */
static uint64_t mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

static uint64_t block_key(const struct fx_kv_pool *p, int32_t parent, const fx_token *tokens) {
    uint64_t h = parent >= 0 ? p->key[parent] : KEY_SEED;
    for (int32_t i = 0; i < p->block_size; i++)
        h = mix64(h ^ ((uint64_t)(uint32_t)tokens[i] + 0x9e3779b97f4a7c15ULL));
    return h;
}

static const fx_token *cached_tokens(const struct fx_kv_pool *p, int32_t b) {
    return p->block_tok + (size_t)b * (size_t)p->block_size;
}

int32_t fx_kv_prefix_find(struct fx_kv_pool *p, int32_t parent, const fx_token *tokens) {
    if (parent >= 0 && !p->cached[parent])
        return -1;
    uint64_t h = block_key(p, parent, tokens);
    for (int32_t b = p->bucket[h & (p->n_buckets - 1)]; b >= 0; b = p->hnext[b])
        if (p->key[b] == h && p->parent[b] == parent &&
            (parent < 0 || p->parent_gen[b] == p->gen[parent]) &&
            memcmp(cached_tokens(p, b), tokens, (size_t)p->block_size * sizeof *tokens) == 0)
            return b;
    return -1;
}

/* Caches block b (held, full, not cached) as the child of parent with these tokens. */
static void add(struct fx_kv_pool *p, int32_t b, int32_t parent, const fx_token *tokens) {
    FX_ASSERT(!p->cached[b] && p->refs[b] > 0);
    uint64_t h = block_key(p, parent, tokens);
    p->cached[b] = true;
    p->key[b] = h;
    p->parent[b] = parent;
    p->parent_gen[b] = parent >= 0 ? p->gen[parent] : 0;
    memcpy(p->block_tok + (size_t)b * (size_t)p->block_size, tokens,
           (size_t)p->block_size * sizeof *tokens);
    uint32_t i = (uint32_t)(h & (p->n_buckets - 1));
    p->hnext[b] = p->bucket[i];
    p->bucket[i] = b;
}

/* The chain of block idx is walked from the first block, so that its parent is the cached block
 * that any lookup of these tokens would reach, whichever sequence computed it: a sequence that
 * found its first blocks already cached by another (and so did not cache its own) links its
 * later blocks under the other's. Where the chain is missing a block (evicted since), the
 * sequence's own copy takes its place. */
void fx_kv_prefix_insert(struct fx_kv_pool *p, fx_seq_id seq, int32_t idx) {
    const struct fx_kv_seq *s = &p->seqs[seq];
    const int32_t bs = p->block_size;
    FX_ASSERT(idx >= 0 && idx < s->n_table && (int64_t)(idx + 1) * bs <= s->len);
    int32_t parent = -1;
    for (int32_t j = 0; j <= idx; j++) {
        const fx_token *t = s->tokens + (size_t)j * (size_t)bs;
        int32_t c = fx_kv_prefix_find(p, parent, t);
        if (c < 0) {
            c = s->table[j];
            /* Cached, but under a chain that lookups no longer reach: keyed again. */
            if (p->cached[c])
                fx_kv_prefix_remove(p, c);
            add(p, c, parent, t);
        }
        parent = c;
    }
}

void fx_kv_prefix_remove(struct fx_kv_pool *p, int32_t b) {
    FX_ASSERT(p->cached[b]);
    int32_t *link = &p->bucket[p->key[b] & (p->n_buckets - 1)];
    while (*link != b) {
        FX_ASSERT(*link >= 0);
        link = &p->hnext[*link];
    }
    *link = p->hnext[b];
    p->hnext[b] = -1;
    p->parent[b] = -1;
    p->cached[b] = false;
    p->gen[b]++; /* its children, if any, can no longer be found */
}

void fx_kv_prefix_idle(struct fx_kv_pool *p, int32_t b) {
    FX_ASSERT(p->cached[b] && p->refs[b] == 0);
    p->lru_prev[b] = p->lru_tail;
    p->lru_next[b] = -1;
    if (p->lru_tail >= 0)
        p->lru_next[p->lru_tail] = b;
    else
        p->lru_head = b;
    p->lru_tail = b;
    p->n_cached_idle++;
}

void fx_kv_prefix_busy(struct fx_kv_pool *p, int32_t b) {
    FX_ASSERT(p->cached[b]);
    int32_t prev = p->lru_prev[b], next = p->lru_next[b];
    if (prev >= 0)
        p->lru_next[prev] = next;
    else
        p->lru_head = next;
    if (next >= 0)
        p->lru_prev[next] = prev;
    else
        p->lru_tail = prev;
    p->lru_prev[b] = p->lru_next[b] = -1;
    p->n_cached_idle--;
}
