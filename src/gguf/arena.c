/* A bump allocator in chunks: an open GGUF file copies thousands of strings (a vocabulary), and
 * one malloc per string would dominate the open time. */
#include "gguf/gguf.h"

#include <stdlib.h>

#include "core/checked.h"

struct fx_arena_chunk {
    struct fx_arena_chunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

#define ARENA_CHUNK (256u * 1024u)

void *fx_arena_alloc(struct fx_arena *a, size_t size, size_t align) {
    struct fx_arena_chunk *c = a->head;
    if (c) {
        size_t start = (c->used + align - 1) & ~(align - 1);
        if (start <= c->cap && size <= c->cap - start) {
            c->used = start + size;
            return c->data + start;
        }
    }
    /* A new chunk; requests larger than a chunk get one of their own. */
    size_t cap = size > ARENA_CHUNK ? size : ARENA_CHUNK, bytes;
    if (fx_add_overflow_size(sizeof *c, cap, &bytes))
        return NULL;
    struct fx_arena_chunk *n = malloc(bytes);
    if (!n)
        return NULL;
    n->cap = cap;
    n->used = size;
    if (c && size > ARENA_CHUNK) {
        /* Keep filling the current chunk: put the big one behind it. */
        n->next = c->next;
        c->next = n;
    } else {
        n->next = c;
        a->head = n;
    }
    return n->data;
}

void fx_arena_free(struct fx_arena *a) {
    struct fx_arena_chunk *c = a->head;
    while (c) {
        struct fx_arena_chunk *next = c->next;
        free(c);
        c = next;
    }
    a->head = NULL;
}
