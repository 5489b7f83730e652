/* See gguf_bytes.h. */
#include "gguf_bytes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void gb_free(struct gb *b) {
    free(b->p);
    *b = (struct gb){0};
}

void gb_bytes(struct gb *b, const void *p, size_t n) {
    if (b->n + n > b->cap) {
        size_t cap = 2 * (b->n + n) + 64;
        uint8_t *q = realloc(b->p, cap);
        if (!q) {
            fputs("gb: out of memory\n", stderr);
            abort();
        }
        b->p = q;
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->n, p, n);
    b->n += n;
}

void gb_u8(struct gb *b, uint8_t v) {
    gb_bytes(b, &v, 1);
}

void gb_u32(struct gb *b, uint32_t v) {
    gb_bytes(b, &v, 4);
}

void gb_u64(struct gb *b, uint64_t v) {
    gb_bytes(b, &v, 8);
}

void gb_str(struct gb *b, const char *s) {
    gb_u64(b, strlen(s));
    gb_bytes(b, s, strlen(s));
}

void gb_header(struct gb *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    gb_bytes(b, "GGUF", 4);
    gb_u32(b, version);
    gb_u64(b, n_tensors);
    gb_u64(b, n_kv);
}

void gb_kv_u32(struct gb *b, const char *key, uint32_t v) {
    gb_str(b, key);
    gb_u32(b, 4); /* uint32 */
    gb_u32(b, v);
}

void gb_kv_str(struct gb *b, const char *key, const char *v) {
    gb_str(b, key);
    gb_u32(b, 8); /* string */
    gb_str(b, v);
}

void gb_tensor(struct gb *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type,
               uint64_t offset) {
    gb_str(b, name);
    gb_u32(b, n_dims);
    for (uint32_t i = 0; i < n_dims; i++)
        gb_u64(b, ne[i]);
    gb_u32(b, type);
    gb_u64(b, offset);
}

void gb_data(struct gb *b, size_t align, size_t n_data) {
    while (b->n % align)
        gb_u8(b, 0);
    for (size_t i = 0; i < n_data; i++)
        gb_u8(b, (uint8_t)i);
}

void gb_put_u32(struct gb *b, size_t off, uint32_t v) {
    memcpy(b->p + off, &v, 4);
}

void gb_put_u64(struct gb *b, size_t off, uint64_t v) {
    memcpy(b->p + off, &v, 8);
}

void gb_valid_file(struct gb *b, struct gb_layout *l) {
    *b = (struct gb){0};
    gb_header(b, 3, 2, 2);
    l->n_tensors_at = 8;
    l->n_kv_at = 16;
    l->key0_len_at = b->n;
    gb_str(b, "general.architecture");
    l->value0_type_at = b->n;
    gb_u32(b, 8);
    gb_str(b, "llama");
    gb_str(b, "tokenizer.ggml.tokens");
    gb_u32(b, 9); /* array */
    l->arr_type_at = b->n;
    gb_u32(b, 8); /* of strings */
    l->arr_n_at = b->n;
    gb_u64(b, 3);
    gb_str(b, "<unk>");
    l->arr_elem1_len_at = b->n;
    gb_str(b, "<s>");
    gb_str(b, "</s>");
    l->t0_name_len_at = b->n;
    gb_str(b, "a");
    l->t0_ndims_at = b->n;
    gb_u32(b, 2);
    l->t0_ne0_at = b->n;
    gb_u64(b, 8);
    l->t0_ne1_at = b->n;
    gb_u64(b, 2);
    l->t0_type_at = b->n;
    gb_u32(b, 0); /* F32: 64 bytes */
    l->t0_offset_at = b->n;
    gb_u64(b, 0);
    gb_tensor(b, "b", 1, (const uint64_t[]){4}, 0, 64);
    l->t1_offset_at = b->n - 8;
    gb_data(b, 32, 0);
    l->data_at = b->n;
    gb_data(b, 32, 64 + 16);
    gb_data(b, 32, 0);
}
