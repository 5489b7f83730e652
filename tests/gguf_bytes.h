/* Building GGUF bytes by hand for tests and fuzz seeds: every field is written explicitly, so a
 * test can produce exactly the malformed file it is about (a wrong count, a huge length, a bad
 * offset) where the writer would refuse. */
#ifndef FX_TEST_GGUF_BYTES_H
#define FX_TEST_GGUF_BYTES_H

#include <stddef.h>
#include <stdint.h>

struct gb {
    uint8_t *p;
    size_t n, cap;
};

void gb_free(struct gb *b);
void gb_bytes(struct gb *b, const void *p, size_t n);
void gb_u8(struct gb *b, uint8_t v);
void gb_u32(struct gb *b, uint32_t v);
void gb_u64(struct gb *b, uint64_t v);
/* A GGUF string: u64 length, then the bytes of s (NUL-terminated). */
void gb_str(struct gb *b, const char *s);
void gb_header(struct gb *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv);
void gb_kv_u32(struct gb *b, const char *key, uint32_t v);
void gb_kv_str(struct gb *b, const char *key, const char *v);
/* A tensor info with n_dims dimensions ne[0..n_dims-1]. */
void gb_tensor(struct gb *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type,
               uint64_t offset);
/* Zero bytes up to a multiple of align, then n_data bytes of data (value i & 0xff). */
void gb_data(struct gb *b, size_t align, size_t n_data);
/* Overwrites 4 or 8 bytes at off. */
void gb_put_u32(struct gb *b, size_t off, uint32_t v);
void gb_put_u64(struct gb *b, size_t off, uint64_t v);

/* A small valid file: two pairs (general.architecture = "llama", a 3-string array) and two F32
 * tensors "a" [8, 2] and "b" [4]. The offsets of its fields, for tests that patch one. */
struct gb_layout {
    size_t n_tensors_at, n_kv_at;
    size_t key0_len_at, value0_type_at, arr_type_at, arr_n_at, arr_elem1_len_at;
    size_t t0_name_len_at, t0_ndims_at, t0_ne0_at, t0_ne1_at, t0_type_at, t0_offset_at;
    size_t t1_offset_at, data_at;
};
void gb_valid_file(struct gb *b, struct gb_layout *l);

#endif
