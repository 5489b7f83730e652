/* Open-addressing hash index from names to int64 values (indices into a key or tensor array),
 * kept at most half full so that probes stay short. */
#include "gguf/gguf.h"

#include <stdlib.h>
#include <string.h>

struct fx_name_slot {
    uint64_t hash;
    const char *name; /* NULL: empty */
    int64_t value;
};

static uint64_t hash_name(const char *s) {
    /* FNV-1a, then a 64-bit finaliser so that the low bits used for the slot are well mixed. */
    uint64_t h = 0xcbf29ce484222325ull;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        h = (h ^ *p) * 0x100000001b3ull;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
}

static struct fx_name_slot *probe(struct fx_name_slot *slots, uint64_t cap, uint64_t hash,
                                  const char *name) {
    for (uint64_t i = hash & (cap - 1);; i = (i + 1) & (cap - 1)) {
        struct fx_name_slot *s = &slots[i];
        if (!s->name || (s->hash == hash && strcmp(s->name, name) == 0))
            return s;
    }
}

static int grow(struct fx_name_index *ix) {
    uint64_t cap = ix->cap ? 2 * ix->cap : 16;
    if (cap > SIZE_MAX / sizeof(struct fx_name_slot))
        return -1;
    struct fx_name_slot *slots = calloc(cap, sizeof *slots);
    if (!slots)
        return -1;
    for (uint64_t i = 0; i < ix->cap; i++) {
        const struct fx_name_slot *old = &ix->slots[i];
        if (old->name)
            *probe(slots, cap, old->hash, old->name) = *old;
    }
    free(ix->slots);
    ix->slots = slots;
    ix->cap = cap;
    return 0;
}

int64_t fx_name_index_insert(struct fx_name_index *ix, const char *name, int64_t value) {
    if (2 * (ix->n + 1) > ix->cap && grow(ix) != 0)
        return -2;
    uint64_t h = hash_name(name);
    struct fx_name_slot *s = probe(ix->slots, ix->cap, h, name);
    if (s->name)
        return s->value;
    *s = (struct fx_name_slot){h, name, value};
    ix->n++;
    return -1;
}

int64_t fx_name_index_find(const struct fx_name_index *ix, const char *name) {
    if (ix->n == 0)
        return -1;
    const struct fx_name_slot *s = probe(ix->slots, ix->cap, hash_name(name), name);
    return s->name ? s->value : -1;
}

void fx_name_index_clear(struct fx_name_index *ix) {
    if (ix->slots)
        memset(ix->slots, 0, ix->cap * sizeof *ix->slots);
    ix->n = 0;
}

void fx_name_index_free(struct fx_name_index *ix) {
    free(ix->slots);
    *ix = (struct fx_name_index){0};
}
