/* Internals shared by the GGUF reader, its accessors and the writer: value sizes, the byte
 * arena that holds an open file's copied strings and arrays, the name index that gives O(1)
 * lookup of keys and tensor names, and the layout of an open file. */
#ifndef FX_GGUF_GGUF_H
#define FX_GGUF_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "ferrox.h"

#define GGUF_MAGIC "GGUF"
/* The smallest header: magic, version, n_tensors, n_kv. */
#define GGUF_HEADER_BYTES 24u

/* Bytes of one element of a scalar value type in the file (1 for bool); 0 for string, array and
 * unknown ids, whose sizes are not fixed. */
uint64_t fx_gguf_value_size(uint32_t type);

/* ---- arena: many small allocations freed together ------------------------------------------ */

struct fx_arena_chunk;

struct fx_arena {
    struct fx_arena_chunk *head;
};

/* Returns `size` bytes aligned to `align` (a power of two up to 16), or NULL when out of
 * memory. Everything lives until fx_arena_free. */
void *fx_arena_alloc(struct fx_arena *a, size_t size, size_t align);
void fx_arena_free(struct fx_arena *a);

/* ---- name index: NUL-terminated name -> int64 value, open addressing ------------------------ */

struct fx_name_slot;

struct fx_name_index {
    struct fx_name_slot *slots;
    uint64_t cap; /* a power of two, or 0 before the first insert */
    uint64_t n;
};

/* Inserts name -> value unless the name is present. Returns -1 when inserted, the existing
 * value when the name was already there, or -2 when out of memory. The name is borrowed and
 * must outlive the index (or the next fx_name_index_clear). */
int64_t fx_name_index_insert(struct fx_name_index *ix, const char *name, int64_t value);
/* The value for name, or -1 when absent. */
int64_t fx_name_index_find(const struct fx_name_index *ix, const char *name);
/* Empties the index, keeping its memory. */
void fx_name_index_clear(struct fx_name_index *ix);
void fx_name_index_free(struct fx_name_index *ix);

/* ---- an open file ---------------------------------------------------------------------------- */

struct fx_gguf {
    const uint8_t *base; /* the whole file: a read-only mapping or the caller's buffer */
    uint64_t size;
    void *map; /* the mapping to unmap in fx_gguf_free; NULL for fx_gguf_open_memory */
    size_t map_size;

    uint32_t version;
    uint64_t alignment;
    uint64_t data_offset;

    int64_t n_kv;
    struct fx_gguf_kv *kv; /* [n_kv], file order */
    uint64_t *kv_offset;   /* [n_kv] file offset of each pair's key, for error messages */
    int64_t n_tensors;
    struct fx_tensor_view *tensors; /* [n_tensors], file order */

    struct fx_name_index kv_index;
    struct fx_name_index tensor_index;
    struct fx_arena arena; /* keys, strings, arrays, tensor names */
};

#endif
