/* A model's fingerprint: what saved state (kv/state.c) records so that rows computed by one model
 * are never loaded into another that merely has the same shape. */
#include <string.h>

#include "model/model.h"

#define FNV_OFFSET 0xcbf29ce484222325ull
#define FNV_PRIME  0x100000001b3ull

/* How many bytes of each tensor's data join the hash: enough that a fine-tune of the same
 * architecture (every tensor's table entry equal) differs, while reading one page per tensor. */
#define DATA_SAMPLE 32u

static uint64_t fnv(uint64_t h, const void *data, uint64_t n) {
    const uint8_t *p = data;
    for (uint64_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= FNV_PRIME;
    }
    return h;
}

static uint64_t fnv_u64(uint64_t h, uint64_t v) {
    uint8_t b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(v >> (8 * i));
    return fnv(h, b, 8);
}

/* A length-prefixed byte string, so that ("ab", "c") and ("a", "bc") hash differently. */
static uint64_t fnv_str(uint64_t h, const void *data, uint64_t n) {
    return fnv(fnv_u64(h, n), data, n);
}

/* Bytes of one element of a scalar GGUF type (0 for strings and arrays). */
static uint64_t scalar_bytes(enum fx_gguf_type t) {
    static const uint8_t sizes[FX_GGUF_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return (unsigned)t < FX_GGUF_TYPE_COUNT ? sizes[t] : 0;
}

static uint64_t hash_kv(uint64_t h, const struct fx_gguf_kv *kv) {
    h = fnv_str(h, kv->key, strlen(kv->key));
    h = fnv_u64(h, (uint64_t)kv->type);
    if (kv->type == FX_GGUF_STRING)
        return fnv_str(h, kv->v.str.data, kv->v.str.len);
    if (kv->type != FX_GGUF_ARRAY)
        return fnv(h, &kv->v, scalar_bytes(kv->type)); /* the union's first bytes hold it */
    h = fnv_u64(fnv_u64(h, (uint64_t)kv->arr_type), kv->arr_n);
    if (kv->arr_type == FX_GGUF_STRING) {
        const struct fx_gguf_str *s = kv->v.arr;
        for (uint64_t i = 0; i < kv->arr_n; i++)
            h = fnv_str(h, s[i].data, s[i].len);
        return h;
    }
    /* Validated by the reader: arr_n elements of that size. */
    return fnv(h, kv->v.arr, kv->arr_n * scalar_bytes(kv->arr_type));
}

static bool has_prefix(const char *s, const char *prefix) {
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* FNV-1a 64 over, in file order: every metadata pair except the general.* keys (names, authors,
 * licences: they do not change what is computed) and the tokenizer.* keys (the vocabulary size is
 * compared on its own); then every tensor's name, type and shape and the first DATA_SAMPLE bytes
 * of its data. */
uint64_t fx_model_fingerprint(const struct fx_model *m) {
    const struct fx_gguf *g = fx_model_gguf(m);
    uint64_t h = FNV_OFFSET;
    for (int64_t i = 0; i < fx_gguf_n_kv(g); i++) {
        const struct fx_gguf_kv *kv = fx_gguf_kv_at(g, i);
        if (!has_prefix(kv->key, "general.") && !has_prefix(kv->key, "tokenizer."))
            h = hash_kv(h, kv);
    }
    h = fnv_u64(h, (uint64_t)fx_gguf_n_tensors(g));
    for (int64_t i = 0; i < fx_gguf_n_tensors(g); i++) {
        const struct fx_tensor_view *t = fx_gguf_tensor_at(g, i);
        h = fnv_str(h, t->name, strlen(t->name));
        h = fnv_u64(fnv_u64(h, (uint64_t)t->type), t->n_dims);
        for (uint32_t d = 0; d < FX_GGUF_MAX_DIMS; d++)
            h = fnv_u64(h, (uint64_t)t->ne[d]);
        h = fnv(h, t->data, t->n_bytes < DATA_SAMPLE ? t->n_bytes : DATA_SAMPLE);
    }
    return h;
}
