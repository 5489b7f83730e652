/* The GGUF writer: collects pairs and tensor descriptions, then writes a standard GGUF v3 file
 * (the layout ggml and gguf-py write, so llama.cpp loads it) to a temporary name in the target's
 * directory and renames it into place once complete and synced. */
#include "gguf/gguf.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/checked.h"
#include "core/error.h"

#define MAX_ALIGNMENT (1u << 20)
/* Bytes buffered between write calls, and the size of a fill callback's chunk. */
#define OUT_BUF    (1u << 20)
#define FILL_CHUNK (8u << 20)

struct wtensor {
    char *name;
    enum fx_type type;
    uint32_t n_dims;
    int64_t ne[FX_GGUF_MAX_DIMS];
    int64_t n_elements;
    uint64_t n_bytes, row_bytes, offset;
    const void *data; /* borrowed; NULL: produced by the fill callback */
};

struct fx_gguf_writer {
    struct fx_gguf_kv *kv; /* [n_kv] owned deep copies, in the order first set */
    int64_t n_kv, cap_kv;
    struct wtensor *tensors; /* [n_tensors] in the order added */
    int64_t n_tensors, cap_tensors;
    struct fx_name_index kv_index, tensor_index;
    uint32_t alignment;
};

fx_status fx_gguf_writer_create(struct fx_gguf_writer **out, struct fx_error *err) {
    *out = calloc(1, sizeof **out);
    if (!*out)
        return fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "out of memory creating a writer");
    (*out)->alignment = FX_GGUF_DEFAULT_ALIGNMENT;
    return FX_OK;
}

static void free_value(struct fx_gguf_kv *kv) {
    if (kv->type == FX_GGUF_STRING) {
        free((char *)kv->v.str.data);
    } else if (kv->type == FX_GGUF_ARRAY) {
        if (kv->arr_type == FX_GGUF_STRING) {
            const struct fx_gguf_str *s = kv->v.arr;
            for (uint64_t i = 0; i < kv->arr_n; i++)
                free((char *)s[i].data);
        }
        free((void *)kv->v.arr);
    }
}

void fx_gguf_writer_free(struct fx_gguf_writer *w) {
    if (!w)
        return;
    for (int64_t i = 0; i < w->n_kv; i++) {
        free_value(&w->kv[i]);
        free((char *)w->kv[i].key);
    }
    for (int64_t i = 0; i < w->n_tensors; i++)
        free(w->tensors[i].name);
    free(w->kv);
    free(w->tensors);
    fx_name_index_free(&w->kv_index);
    fx_name_index_free(&w->tensor_index);
    free(w);
}

static char *dup_bytes(const char *s, uint64_t len) {
    if (len >= SIZE_MAX)
        return NULL;
    char *d = malloc((size_t)len + 1);
    if (d) {
        if (len)
            memcpy(d, s, (size_t)len);
        d[len] = '\0';
    }
    return d;
}

/* A deep copy of src's value into dst (whose key is set by the caller). */
static fx_status copy_value(struct fx_gguf_kv *dst, const struct fx_gguf_kv *src,
                            struct fx_error *err) {
    *dst = (struct fx_gguf_kv){.type = src->type};
    if (src->type == FX_GGUF_STRING) {
        if (!src->v.str.data && src->v.str.len)
            return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET, "key '%s': NULL string",
                                src->key);
        dst->v.str.len = src->v.str.len;
        dst->v.str.data = dup_bytes(src->v.str.data, src->v.str.len);
        return dst->v.str.data ? FX_OK
                               : fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "out of memory");
    }
    if (src->type != FX_GGUF_ARRAY) {
        if (src->type == FX_GGUF_BOOL && src->v.u8 > 1)
            return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET, "key '%s': bad bool",
                                src->key);
        dst->v = src->v;
        return FX_OK;
    }
    if ((unsigned)src->arr_type >= FX_GGUF_TYPE_COUNT || src->arr_type == FX_GGUF_ARRAY)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "key '%s': array element type %u cannot be written", src->key,
                            (unsigned)src->arr_type);
    if (!src->v.arr && src->arr_n)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET, "key '%s': NULL array",
                            src->key);
    dst->arr_type = src->arr_type;
    uint64_t esize = src->arr_type == FX_GGUF_STRING ? sizeof(struct fx_gguf_str)
                                                     : fx_gguf_value_size(src->arr_type);
    uint64_t bytes;
    if (fx_mul_overflow_u64(src->arr_n, esize, &bytes) || bytes >= SIZE_MAX)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET, "key '%s': array too large",
                            src->key);
    void *arr = malloc(bytes ? (size_t)bytes : 1);
    if (!arr)
        return fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "out of memory");
    dst->v.arr = arr;
    if (src->arr_type != FX_GGUF_STRING) {
        if (bytes)
            memcpy(arr, src->v.arr, (size_t)bytes);
        if (src->arr_type == FX_GGUF_BOOL)
            for (uint64_t i = 0; i < src->arr_n; i++)
                if (((const uint8_t *)arr)[i] > 1) {
                    free(arr);
                    dst->v.arr = NULL;
                    return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                                        "key '%s': bool element %" PRIu64 " is not 0 or 1",
                                        src->key, i);
                }
        dst->arr_n = src->arr_n;
        return FX_OK;
    }
    const struct fx_gguf_str *from = src->v.arr;
    struct fx_gguf_str *to = arr;
    for (uint64_t i = 0; i < src->arr_n; i++) {
        to[i].len = from[i].len;
        to[i].data = (from[i].data || !from[i].len)
                         ? dup_bytes(from[i].data ? from[i].data : "", from[i].len)
                         : NULL;
        if (!to[i].data) {
            dst->arr_n = i;
            free_value(dst);
            *dst = (struct fx_gguf_kv){0};
            return fx_error_set(err, from[i].data ? FX_ERR_NOMEM : FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                                "key '%s': cannot copy string element %" PRIu64, src->key, i);
        }
    }
    dst->arr_n = src->arr_n;
    return FX_OK;
}

static fx_status check_alignment(uint64_t a, struct fx_error *err) {
    if (!fx_is_pow2_u64(a) || a > MAX_ALIGNMENT)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "general.alignment %" PRIu64 " is not a power of two up to %u", a,
                            MAX_ALIGNMENT);
    return FX_OK;
}

fx_status fx_gguf_writer_set_kv(struct fx_gguf_writer *w, const struct fx_gguf_kv *kv,
                                struct fx_error *err) {
    size_t klen = kv->key ? strlen(kv->key) : 0;
    if (klen == 0 || klen > FX_GGUF_MAX_KEY_LEN)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "a key must be 1 to %d bytes (got %zu)", FX_GGUF_MAX_KEY_LEN, klen);
    if ((unsigned)kv->type >= FX_GGUF_TYPE_COUNT)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET, "key '%s': unknown type %u",
                            kv->key, (unsigned)kv->type);
    bool is_alignment = strcmp(kv->key, "general.alignment") == 0;
    if (is_alignment) {
        if (kv->type != FX_GGUF_UINT32)
            return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                                "general.alignment must be a uint32, not %s",
                                fx_gguf_type_name(kv->type));
        fx_status s = check_alignment(kv->v.u32, err);
        if (s != FX_OK)
            return s;
    }
    struct fx_gguf_kv copy;
    fx_status s = copy_value(&copy, kv, err);
    if (s != FX_OK)
        return s;
    int64_t i = fx_name_index_find(&w->kv_index, kv->key);
    if (i >= 0) {
        copy.key = w->kv[i].key;
        free_value(&w->kv[i]);
        w->kv[i] = copy;
    } else {
        if (w->n_kv == w->cap_kv) {
            int64_t cap = w->cap_kv ? 2 * w->cap_kv : 32;
            struct fx_gguf_kv *p = realloc(w->kv, (size_t)cap * sizeof *p);
            if (!p)
                goto nomem;
            w->kv = p;
            w->cap_kv = cap;
        }
        copy.key = dup_bytes(kv->key, klen);
        if (!copy.key)
            goto nomem;
        if (fx_name_index_insert(&w->kv_index, copy.key, w->n_kv) == -2) {
            free((char *)copy.key);
            goto nomem;
        }
        w->kv[w->n_kv++] = copy;
    }
    if (is_alignment)
        w->alignment = kv->v.u32;
    return FX_OK;
nomem:
    free_value(&copy);
    return fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "out of memory setting '%s'", kv->key);
}

void fx_gguf_writer_remove_kv(struct fx_gguf_writer *w, const char *key) {
    int64_t i = fx_name_index_find(&w->kv_index, key);
    if (i < 0)
        return;
    if (strcmp(key, "general.alignment") == 0)
        w->alignment = FX_GGUF_DEFAULT_ALIGNMENT;
    free_value(&w->kv[i]);
    free((char *)w->kv[i].key);
    memmove(&w->kv[i], &w->kv[i + 1], (size_t)(w->n_kv - i - 1) * sizeof *w->kv);
    w->n_kv--;
    /* Positions after i moved: rebuild. The index keeps its memory, so this cannot fail. */
    fx_name_index_clear(&w->kv_index);
    for (int64_t j = 0; j < w->n_kv; j++)
        fx_name_index_insert(&w->kv_index, w->kv[j].key, j);
}

fx_status fx_gguf_writer_set_alignment(struct fx_gguf_writer *w, uint32_t alignment,
                                       struct fx_error *err) {
    return fx_gguf_writer_set_u32(w, "general.alignment", alignment, err);
}

#define SETTER(fn, ctype, gtype, field)                                                            \
    fx_status fn(struct fx_gguf_writer *w, const char *key, ctype v, struct fx_error *err) {       \
        struct fx_gguf_kv kv = {.key = key, .type = gtype};                                        \
        kv.v.field = v;                                                                            \
        return fx_gguf_writer_set_kv(w, &kv, err);                                                 \
    }
SETTER(fx_gguf_writer_set_u32, uint32_t, FX_GGUF_UINT32, u32)
SETTER(fx_gguf_writer_set_i32, int32_t, FX_GGUF_INT32, i32)
SETTER(fx_gguf_writer_set_u64, uint64_t, FX_GGUF_UINT64, u64)
SETTER(fx_gguf_writer_set_f32, float, FX_GGUF_FLOAT32, f32)
SETTER(fx_gguf_writer_set_bool, bool, FX_GGUF_BOOL, b)
#undef SETTER

fx_status fx_gguf_writer_set_str(struct fx_gguf_writer *w, const char *key, const char *v,
                                 struct fx_error *err) {
    if (!v)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET, "key '%s': NULL string",
                            key ? key : "");
    struct fx_gguf_kv kv = {.key = key, .type = FX_GGUF_STRING};
    kv.v.str = (struct fx_gguf_str){v, strlen(v)};
    return fx_gguf_writer_set_kv(w, &kv, err);
}

fx_status fx_gguf_writer_set_arr(struct fx_gguf_writer *w, const char *key, enum fx_gguf_type elem,
                                 const void *data, uint64_t n, struct fx_error *err) {
    if (elem == FX_GGUF_STRING)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "key '%s': use fx_gguf_writer_set_str_arr for strings", key ? key : "");
    struct fx_gguf_kv kv = {.key = key, .type = FX_GGUF_ARRAY, .arr_type = elem, .arr_n = n};
    kv.v.arr = data;
    return fx_gguf_writer_set_kv(w, &kv, err);
}

fx_status fx_gguf_writer_set_str_arr(struct fx_gguf_writer *w, const char *key,
                                     const char *const *strs, uint64_t n, struct fx_error *err) {
    if (n > SIZE_MAX / sizeof(struct fx_gguf_str))
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET, "key '%s': array too large",
                            key ? key : "");
    struct fx_gguf_str *s = malloc(n ? (size_t)n * sizeof *s : 1);
    if (!s)
        return fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "out of memory");
    for (uint64_t i = 0; i < n; i++)
        s[i] = (struct fx_gguf_str){strs[i], strs[i] ? strlen(strs[i]) : 0};
    struct fx_gguf_kv kv = {
        .key = key, .type = FX_GGUF_ARRAY, .arr_type = FX_GGUF_STRING, .arr_n = n};
    kv.v.arr = s;
    fx_status st = fx_gguf_writer_set_kv(w, &kv, err);
    free(s);
    return st;
}

fx_status fx_gguf_writer_add_tensor(struct fx_gguf_writer *w, const char *name, enum fx_type type,
                                    uint32_t n_dims, const int64_t *ne, const void *data,
                                    struct fx_error *err) {
    size_t len = name ? strlen(name) : 0;
    if (len == 0 || len > FX_GGUF_MAX_NAME_LEN)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "tensor name '%s' must be 1 to %d bytes", name ? name : "",
                            FX_GGUF_MAX_NAME_LEN);
    if (fx_name_index_find(&w->tensor_index, name) >= 0)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET, "duplicate tensor '%s'", name);
    if (!fx_type_is_valid((uint32_t)type))
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET, "tensor '%s': unknown type %u",
                            name, (unsigned)type);
    if (n_dims > FX_GGUF_MAX_DIMS || (n_dims && !ne))
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "tensor '%s': %u dimensions (at most %d)", name, n_dims,
                            FX_GGUF_MAX_DIMS);
    struct wtensor t = {.type = type, .n_dims = n_dims, .data = data};
    int64_t n = 1;
    for (uint32_t d = 0; d < FX_GGUF_MAX_DIMS; d++) {
        t.ne[d] = d < n_dims ? ne[d] : 1;
        if (t.ne[d] < 1 || fx_mul_overflow_i64(n, t.ne[d], &n))
            return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                                "tensor '%s': bad dimension %u (%" PRId64 ")", name, d, t.ne[d]);
    }
    t.n_elements = n;
    if (!fx_type_row_bytes(type, t.ne[0], &t.row_bytes) ||
        fx_mul_overflow_u64(t.row_bytes, (uint64_t)(n / t.ne[0]), &t.n_bytes))
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "tensor '%s': row length %" PRId64
                            " is not whole %s blocks or the size overflows",
                            name, t.ne[0], fx_type_name(type));
    if (w->n_tensors == w->cap_tensors) {
        int64_t cap = w->cap_tensors ? 2 * w->cap_tensors : 64;
        struct wtensor *p = realloc(w->tensors, (size_t)cap * sizeof *p);
        if (!p)
            return fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "out of memory");
        w->tensors = p;
        w->cap_tensors = cap;
    }
    t.name = dup_bytes(name, len);
    if (!t.name || fx_name_index_insert(&w->tensor_index, t.name, w->n_tensors) == -2) {
        free(t.name);
        return fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "out of memory");
    }
    w->tensors[w->n_tensors++] = t;
    return FX_OK;
}

/* ---- output ---------------------------------------------------------------------------------- */

struct out {
    int fd;
    const char *path; /* the temporary file, for messages */
    uint8_t *buf;
    size_t n;
    uint64_t written;
    struct fx_error *err;
    fx_status status;
};

static bool write_all(struct out *o, const void *p, size_t n) {
    const uint8_t *b = p;
    while (n > 0) {
        ssize_t k = write(o->fd, b, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            o->status = fx_error_set(o->err, FX_ERR_IO, FX_NO_OFFSET, "writing '%s': %s", o->path,
                                     k < 0 ? strerror(errno) : "no progress");
            return false;
        }
        b += k;
        n -= (size_t)k;
    }
    return true;
}

static bool flush(struct out *o) {
    bool ok = write_all(o, o->buf, o->n);
    o->n = 0;
    return ok;
}

static bool put(struct out *o, const void *p, uint64_t n) {
    if (o->status != FX_OK)
        return false;
    o->written += n;
    if (n > OUT_BUF - o->n) {
        /* Large pieces (tensor data) go straight to the file. */
        if (!flush(o))
            return false;
        if (n >= OUT_BUF)
            return write_all(o, p, (size_t)n);
    }
    memcpy(o->buf + o->n, p, (size_t)n);
    o->n += (size_t)n;
    return true;
}

static bool put_u32(struct out *o, uint32_t v) {
    return put(o, &v, 4);
}

static bool put_u64(struct out *o, uint64_t v) {
    return put(o, &v, 8);
}

static bool put_str(struct out *o, const char *s, uint64_t len) {
    return put_u64(o, len) && put(o, s, len);
}

static bool pad(struct out *o, uint64_t alignment) {
    static const uint8_t zeros[256];
    while (o->written % alignment) {
        uint64_t k = alignment - o->written % alignment;
        if (!put(o, zeros, k < sizeof zeros ? k : sizeof zeros))
            return false;
    }
    return true;
}

static bool put_kv(struct out *o, const struct fx_gguf_kv *kv) {
    if (!put_str(o, kv->key, strlen(kv->key)) || !put_u32(o, kv->type))
        return false;
    if (kv->type == FX_GGUF_STRING)
        return put_str(o, kv->v.str.data, kv->v.str.len);
    if (kv->type != FX_GGUF_ARRAY) /* bools are stored as 0 or 1 in one byte */
        return put(o, &kv->v, fx_gguf_value_size(kv->type));
    if (!put_u32(o, kv->arr_type) || !put_u64(o, kv->arr_n))
        return false;
    if (kv->arr_type != FX_GGUF_STRING)
        return put(o, kv->v.arr, kv->arr_n * fx_gguf_value_size(kv->arr_type));
    const struct fx_gguf_str *s = kv->v.arr;
    for (uint64_t i = 0; i < kv->arr_n; i++)
        if (!put_str(o, s[i].data, s[i].len))
            return false;
    return true;
}

/* Streams one tensor's bytes from the fill callback through `chunk` (chunk_cap bytes). */
static bool put_filled(struct out *o, const struct wtensor *t, int64_t index, fx_gguf_fill_fn fill,
                       void *user, uint8_t *chunk, uint64_t chunk_cap) {
    uint64_t rows_per_chunk = chunk_cap / t->row_bytes;
    for (uint64_t off = 0; off < t->n_bytes;) {
        uint64_t size = rows_per_chunk * t->row_bytes;
        if (size > t->n_bytes - off)
            size = t->n_bytes - off;
        fx_status s = fill(user, index, off, chunk, size, o->err);
        if (s != FX_OK) {
            if (o->err && o->err->code == FX_OK)
                fx_error_set(o->err, s, FX_NO_OFFSET, "the fill callback failed");
            fx_error_prefix(o->err, "filling tensor '%s'", t->name);
            o->status = s;
            return false;
        }
        if (!put(o, chunk, size))
            return false;
        off += size;
    }
    return true;
}

static bool put_file(struct out *o, const struct fx_gguf_writer *w, fx_gguf_fill_fn fill,
                     void *user, uint8_t *chunk, uint64_t chunk_cap) {
    if (!put(o, GGUF_MAGIC, 4) || !put_u32(o, 3) || !put_u64(o, (uint64_t)w->n_tensors) ||
        !put_u64(o, (uint64_t)w->n_kv))
        return false;
    for (int64_t i = 0; i < w->n_kv; i++)
        if (!put_kv(o, &w->kv[i]))
            return false;
    for (int64_t i = 0; i < w->n_tensors; i++) {
        const struct wtensor *t = &w->tensors[i];
        if (!put_str(o, t->name, strlen(t->name)) || !put_u32(o, t->n_dims))
            return false;
        for (uint32_t d = 0; d < t->n_dims; d++)
            if (!put_u64(o, (uint64_t)t->ne[d]))
                return false;
        if (!put_u32(o, t->type) || !put_u64(o, t->offset))
            return false;
    }
    /* A file without tensors ends with its metadata, as gguf-py writes vocabulary files. */
    if (w->n_tensors == 0)
        return true;
    if (!pad(o, w->alignment))
        return false;
    for (int64_t i = 0; i < w->n_tensors; i++) {
        const struct wtensor *t = &w->tensors[i];
        bool ok = t->data ? put(o, t->data, t->n_bytes)
                          : put_filled(o, t, i, fill, user, chunk, chunk_cap);
        if (!ok || !pad(o, w->alignment))
            return false;
    }
    return true;
}

fx_status fx_gguf_writer_write(struct fx_gguf_writer *w, const char *path, fx_gguf_fill_fn fill,
                               void *user, struct fx_error *err) {
    /* Lay out the data section, and size the chunk that fill callbacks write into. */
    uint64_t off = 0, chunk_cap = 0;
    for (int64_t i = 0; i < w->n_tensors; i++) {
        struct wtensor *t = &w->tensors[i];
        if (!t->data && !fill)
            return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                                "tensor '%s' has no data and no fill callback was given", t->name);
        t->offset = off;
        if (fx_add_overflow_u64(off, t->n_bytes, &off) || fx_align_up_u64(off, w->alignment, &off))
            return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                                "the data section overflows at tensor '%s'", t->name);
        if (!t->data) {
            uint64_t want = t->n_bytes < FILL_CHUNK ? t->n_bytes : FILL_CHUNK;
            if (want < t->row_bytes)
                want = t->row_bytes;
            if (want > chunk_cap)
                chunk_cap = want;
        }
    }
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 16);
    uint8_t *buf = malloc(OUT_BUF);
    uint8_t *chunk = chunk_cap && chunk_cap < SIZE_MAX ? malloc((size_t)chunk_cap) : NULL;
    if (!tmp || !buf || (chunk_cap && !chunk)) {
        free(tmp), free(buf), free(chunk);
        return fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "out of memory writing '%s'", path);
    }
    snprintf(tmp, plen + 16, "%s.tmp-XXXXXX", path);
    struct out o = {.fd = mkstemp(tmp), .path = tmp, .buf = buf, .err = err, .status = FX_OK};
    if (o.fd < 0) {
        fx_status s = fx_error_set(err, FX_ERR_IO, FX_NO_OFFSET, "cannot create '%s': %s", tmp,
                                   strerror(errno));
        free(tmp), free(buf), free(chunk);
        return s;
    }
    bool ok = put_file(&o, w, fill, user, chunk, chunk_cap) && flush(&o);
    if (ok && (fchmod(o.fd, 0644) != 0 || fsync(o.fd) != 0)) {
        o.status =
            fx_error_set(err, FX_ERR_IO, FX_NO_OFFSET, "syncing '%s': %s", tmp, strerror(errno));
        ok = false;
    }
    if (close(o.fd) != 0 && ok) {
        o.status =
            fx_error_set(err, FX_ERR_IO, FX_NO_OFFSET, "closing '%s': %s", tmp, strerror(errno));
        ok = false;
    }
    if (ok && rename(tmp, path) != 0) {
        o.status = fx_error_set(err, FX_ERR_IO, FX_NO_OFFSET, "renaming '%s' to '%s': %s", tmp,
                                path, strerror(errno));
        ok = false;
    }
    if (!ok)
        unlink(tmp);
    else
        fx_error_clear(err);
    free(tmp), free(buf), free(chunk);
    return ok ? FX_OK : o.status;
}
