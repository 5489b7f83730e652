/* An exact-match index from byte strings to token ids: open addressing over ids, with the keys
 * left where they are (a text block plus per-id offsets and lengths). Read-only once built, so
 * lookups are safe from any number of threads. */
#ifndef FX_TOK_INDEX_H
#define FX_TOK_INDEX_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ferrox.h"

struct fx_tok_index {
    uint64_t *slots; /* (hash high 32 bits << 32) | (id + 1); 0 = empty */
    uint64_t mask;
    const char *blob;
    const uint32_t *off, *len; /* len[id] == UINT32_MAX: id is not indexed */
};

/* A 64-bit hash of n bytes (not cryptographic; the keys are a vocabulary's texts). */
static inline uint64_t fx_tok_hash(const char *s, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ ((uint64_t)n * 0xff51afd7ed558ccdull);
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xbf58476d1ce4e5b9ull;
        h ^= h >> 31;
        s += 8;
        n -= 8;
    }
    uint64_t w = 0;
    if (n)
        memcpy(&w, s, n);
    h = (h ^ w) * 0x94d049bb133111ebull;
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    return h ^ (h >> 32);
}

/* Indexes ids [0, n). When two ids have the same key the first is kept and *dup_first /
 * *dup_second name the first such pair (FX_TOKEN_NULL-like -1 when there is none). Returns
 * FX_ERR_NOMEM or FX_OK. */
fx_status fx_tok_index_build(struct fx_tok_index *ix, const char *blob, const uint32_t *off,
                             const uint32_t *len, int32_t n, int32_t *dup_first,
                             int32_t *dup_second);
void fx_tok_index_free(struct fx_tok_index *ix);

/* The id whose key is s[0..n), or -1. */
int32_t fx_tok_index_find(const struct fx_tok_index *ix, const char *s, size_t n);

#endif
