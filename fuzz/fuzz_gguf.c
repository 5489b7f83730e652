/* libFuzzer target over the GGUF reader: fx_gguf_open_memory on the input, then every accessor
 * on what it accepted, touching each byte it hands out so that AddressSanitizer sees any view
 * that points outside the input or a copy. Seeds: `make fuzz-corpus` (fuzz/corpus-gguf). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ferrox.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint64_t sink;

static void check(int cond) {
    if (!cond)
        abort();
}

static uint64_t touch(const void *p, uint64_t n) {
    uint64_t s = 0;
    for (uint64_t i = 0; i < n; i++)
        s += ((const uint8_t *)p)[i];
    return s;
}

static void getters(const struct fx_gguf *g, const char *key) {
    uint32_t u32;
    uint64_t u64, n;
    int32_t i32;
    int64_t i64;
    float f;
    bool b;
    struct fx_gguf_str s;
    const void *arr;
    struct fx_error e;
    uint64_t acc = 0;
    acc += fx_gguf_get_u32(g, key, &u32, &e) == FX_OK ? u32 : e.msg[0];
    acc += fx_gguf_get_u64(g, key, &u64, &e) == FX_OK ? u64 : e.msg[0];
    acc += fx_gguf_get_i32(g, key, &i32, &e) == FX_OK ? (uint64_t)i32 : e.msg[0];
    acc += fx_gguf_get_i64(g, key, &i64, &e) == FX_OK ? (uint64_t)i64 : e.msg[0];
    acc += fx_gguf_get_f32(g, key, &f, &e) == FX_OK ? (uint64_t)(f == f) : e.msg[0];
    acc += fx_gguf_get_bool(g, key, &b, &e) == FX_OK ? b : e.msg[0];
    if (fx_gguf_get_str(g, key, &s, &e) == FX_OK) {
        check(s.data[s.len] == '\0');
        acc += touch(s.data, s.len);
    }
    for (int t = 0; t < FX_GGUF_TYPE_COUNT; t++)
        if (fx_gguf_get_arr(g, key, (enum fx_gguf_type)t, &arr, &n, &e) == FX_OK)
            acc += n + (arr != NULL);
    sink += acc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct fx_gguf *g;
    struct fx_error e;
    if (fx_gguf_open_memory(data, size, &g, &e) != FX_OK) {
        check(e.code != FX_OK && e.msg[0] != '\0');
        check(e.offset == FX_NO_OFFSET || e.offset <= size);
        return 0;
    }
    uint64_t acc = fx_gguf_version(g) + fx_gguf_alignment(g) + fx_gguf_file_size(g);
    for (int64_t i = 0; i < fx_gguf_n_kv(g); i++) {
        const struct fx_gguf_kv *kv = fx_gguf_kv_at(g, i);
        check(fx_gguf_find_kv(g, kv->key) == kv);
        getters(g, kv->key);
        if (kv->type == FX_GGUF_ARRAY && kv->arr_type == FX_GGUF_STRING) {
            const struct fx_gguf_str *s = kv->v.arr;
            for (uint64_t k = 0; k < kv->arr_n; k++) {
                check(s[k].data[s[k].len] == '\0');
                acc += touch(s[k].data, s[k].len);
            }
        } else if (kv->type == FX_GGUF_ARRAY) {
            static const uint8_t sizes[FX_GGUF_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4,
                                                              1, 0, 0, 8, 8, 8};
            acc += touch(kv->v.arr, kv->arr_n * sizes[kv->arr_type]);
        }
    }
    getters(g, "no.such.key");
    const uint8_t *end = data + size;
    for (int64_t i = 0; i < fx_gguf_n_tensors(g); i++) {
        const struct fx_tensor_view *t = fx_gguf_tensor_at(g, i);
        check(fx_gguf_find_tensor(g, t->name) == t);
        const uint8_t *p = t->data;
        check(p >= data && t->n_bytes > 0 && t->n_bytes <= (uint64_t)(end - p));
        acc += p[0] + p[t->n_bytes - 1];
    }
    check(fx_gguf_kv_at(g, fx_gguf_n_kv(g)) == NULL);
    check(fx_gguf_tensor_at(g, -1) == NULL);
    sink += acc;
    fx_gguf_free(g);
    return 0;
}
