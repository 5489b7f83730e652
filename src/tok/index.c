/* The token text index (see index.h). */
#include "tok/index.h"

#include <stdlib.h>

static int32_t find_hashed(const struct fx_tok_index *ix, const char *s, size_t n, uint64_t h) {
    uint64_t tag = h >> 32;
    for (uint64_t i = h & ix->mask;; i = (i + 1) & ix->mask) {
        uint64_t slot = ix->slots[i];
        if (slot == 0)
            return -1;
        if ((slot >> 32) != tag)
            continue;
        int32_t id = (int32_t)(uint32_t)slot - 1;
        if (ix->len[id] == n && memcmp(ix->blob + ix->off[id], s, n) == 0)
            return id;
    }
}

fx_status fx_tok_index_build(struct fx_tok_index *ix, const char *blob, const uint32_t *off,
                             const uint32_t *len, int32_t n, int32_t *dup_first,
                             int32_t *dup_second) {
    *dup_first = *dup_second = -1;
    uint64_t cap = 16;
    while (cap < 2 * (uint64_t)n)
        cap *= 2;
    *ix = (struct fx_tok_index){.mask = cap - 1, .blob = blob, .off = off, .len = len};
    ix->slots = calloc(cap, sizeof *ix->slots);
    if (!ix->slots)
        return FX_ERR_NOMEM;
    for (int32_t id = 0; id < n; id++) {
        if (len[id] == UINT32_MAX)
            continue;
        const char *s = blob + off[id];
        uint64_t h = fx_tok_hash(s, len[id]);
        int32_t other = find_hashed(ix, s, len[id], h);
        if (other >= 0) {
            if (*dup_first < 0)
                *dup_first = other, *dup_second = id;
            continue;
        }
        uint64_t i = h & ix->mask;
        while (ix->slots[i] != 0)
            i = (i + 1) & ix->mask;
        ix->slots[i] = (h >> 32) << 32 | (uint64_t)(uint32_t)(id + 1);
    }
    return FX_OK;
}

void fx_tok_index_free(struct fx_tok_index *ix) {
    free(ix->slots);
    ix->slots = NULL;
}

int32_t fx_tok_index_find(const struct fx_tok_index *ix, const char *s, size_t n) {
    return find_hashed(ix, s, n, fx_tok_hash(s, n));
}
