/* The GGUF reader: validates a whole file before handing out anything.
 *
 * Layout (GGUF v2 and v3, little-endian; v1 differed in its count and length widths):
 *   magic "GGUF", u32 version, u64 n_tensors, u64 n_kv,
 *   n_kv x { string key, u32 type, value },
 *   n_tensors x { string name, u32 n_dims, u64 ne[n_dims], u32 type, u64 offset },
 *   padding to general.alignment (default 32), then the data section; each tensor's offset is
 *   relative to the data section and a multiple of the alignment.
 * A string is a u64 byte length and the bytes (no NUL); an array is a u32 element type, a u64
 * count and the elements.
 *
 * Every count and length is checked against the bytes that remain and against overflow before
 * it is used, and memory grows with the bytes actually parsed, never with a count a file claims:
 * a hostile file costs at most a small multiple of its own size. */
#include "gguf/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/checked.h"
#include "core/error.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the GGUF reader assumes a little-endian host"
#endif

/* Smallest encodings, used to bound counts by the bytes that remain. */
#define MIN_KV_BYTES (8u + 1u + 4u + 1u) /* key length, 1-byte key, type, 1-byte value */
#define MIN_TENSOR_BYTES                                                                           \
    (8u + 1u + 4u + 4u + 8u) /* name length, 1-byte name, n_dims, type, offset */

struct parser {
    const uint8_t *p;
    uint64_t size, pos;
    struct fx_error *err;
    char what[96]; /* the item being parsed, for messages: "key 'general.name'" */
};

/* Printable, bounded rendering of a name from the file for an error message. */
static void describe(char *out, size_t n, const char *s, uint64_t len) {
    size_t o = 0;
    for (uint64_t i = 0; i < len && o + 4 < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (i >= 48) {
            out[o++] = '.', out[o++] = '.', out[o++] = '.';
            break;
        }
        out[o++] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
    }
    out[o] = '\0';
}

/* Fills the error as "<item>: <message> (at byte N)" and returns false. */
__attribute__((format(printf, 4, 0))) static bool vfail(struct parser *ps, fx_status code,
                                                        uint64_t off, const char *fmt, va_list ap) {
    char msg[200];
    vsnprintf(msg, sizeof msg, fmt, ap);
    if (ps->what[0])
        fx_error_set(ps->err, code, off, "%s: %s (at byte %" PRIu64 ")", ps->what, msg, off);
    else
        fx_error_set(ps->err, code, off, "%s (at byte %" PRIu64 ")", msg, off);
    return false;
}

__attribute__((format(printf, 3, 4))) static bool fail_at(struct parser *ps, uint64_t off,
                                                          const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfail(ps, FX_ERR_FORMAT, off, fmt, ap);
    va_end(ap);
    return false;
}

__attribute__((format(printf, 3, 4))) static bool unsupported_at(struct parser *ps, uint64_t off,
                                                                 const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfail(ps, FX_ERR_UNSUPPORTED, off, fmt, ap);
    va_end(ap);
    return false;
}

static uint64_t remaining(const struct parser *ps) {
    return ps->size - ps->pos;
}

static bool need(struct parser *ps, uint64_t n, const char *field) {
    if (n <= remaining(ps))
        return true;
    return fail_at(ps, ps->pos, "truncated: %s needs %" PRIu64 " bytes but only %" PRIu64 " remain",
                   field, n, remaining(ps));
}

static bool rd_u32(struct parser *ps, const char *field, uint32_t *v) {
    if (!need(ps, 4, field))
        return false;
    memcpy(v, ps->p + ps->pos, 4);
    ps->pos += 4;
    return true;
}

static bool rd_u64(struct parser *ps, const char *field, uint64_t *v) {
    if (!need(ps, 8, field))
        return false;
    memcpy(v, ps->p + ps->pos, 8);
    ps->pos += 8;
    return true;
}

/* Reads a string's length and checks it against the bytes left and max_len; on success the
 * bytes are at ps->p + *start and ps->pos is past them. */
static bool rd_str_span(struct parser *ps, const char *field, uint64_t max_len, uint64_t *start,
                        uint64_t *len) {
    uint64_t at = ps->pos;
    if (!rd_u64(ps, field, len))
        return false;
    if (*len > remaining(ps))
        return fail_at(ps, at,
                       "%s length %" PRIu64 " exceeds the %" PRIu64 " bytes left in the file",
                       field, *len, remaining(ps));
    if (*len > max_len)
        return fail_at(ps, at, "%s length %" PRIu64 " exceeds the limit of %" PRIu64, field, *len,
                       max_len);
    *start = ps->pos;
    ps->pos += *len;
    return true;
}

static char *copy_str(struct fx_arena *a, const uint8_t *src, uint64_t len) {
    char *s = fx_arena_alloc(a, (size_t)len + 1, 1);
    if (s) {
        memcpy(s, src, (size_t)len);
        s[len] = '\0';
    }
    return s;
}

static bool nomem(struct parser *ps) {
    fx_error_set(ps->err, FX_ERR_NOMEM, ps->pos, "out of memory reading GGUF metadata");
    return false;
}

/* A key or tensor name: non-empty, no NUL (they are looked up as C strings), at most max_len. */
static bool rd_name(struct parser *ps, struct fx_arena *a, const char *field, uint64_t max_len,
                    const char **out) {
    uint64_t at = ps->pos, start, len;
    if (!rd_str_span(ps, field, max_len, &start, &len))
        return false;
    if (len == 0)
        return fail_at(ps, at, "empty %s", field);
    if (memchr(ps->p + start, 0, (size_t)len)) {
        char shown[64];
        describe(shown, sizeof shown, (const char *)ps->p + start, len);
        return fail_at(ps, at, "%s '%s' contains a NUL byte", field, shown);
    }
    char *s = copy_str(a, ps->p + start, len);
    if (!s)
        return nomem(ps);
    *out = s;
    return true;
}

/* An array of strings: a first walk checks every length against the file, then one arena block
 * takes all the text, so memory follows the bytes present, not the count claimed. */
static bool rd_str_array(struct parser *ps, struct fx_arena *a, uint64_t n, uint64_t count_at,
                         struct fx_gguf_str **out) {
    if (n > remaining(ps) / 8)
        return fail_at(ps, count_at,
                       "array of %" PRIu64 " strings cannot fit in the %" PRIu64 " bytes left", n,
                       remaining(ps));
    uint64_t first = ps->pos, text = 0;
    for (uint64_t i = 0; i < n; i++) {
        char field[48];
        snprintf(field, sizeof field, "element %" PRIu64, i);
        uint64_t start, len;
        if (!rd_str_span(ps, field, UINT64_MAX, &start, &len))
            return false;
        text += len + 1; /* bounded by the file size: cannot overflow */
    }
    struct fx_gguf_str *strs = fx_arena_alloc(a, (size_t)(n ? n : 1) * sizeof *strs, 8);
    char *buf = fx_arena_alloc(a, (size_t)(text ? text : 1), 1);
    if (!strs || !buf)
        return nomem(ps);
    uint64_t pos = first;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t len;
        memcpy(&len, ps->p + pos, 8);
        memcpy(buf, ps->p + pos + 8, (size_t)len);
        buf[len] = '\0';
        strs[i] = (struct fx_gguf_str){buf, len};
        buf += len + 1;
        pos += 8 + len;
    }
    *out = strs;
    return true;
}

static bool rd_value(struct parser *ps, struct fx_arena *a, struct fx_gguf_kv *kv) {
    uint64_t at = ps->pos;
    uint32_t type;
    if (!rd_u32(ps, "value type", &type))
        return false;
    if (type >= FX_GGUF_TYPE_COUNT)
        return fail_at(ps, at, "unknown value type %" PRIu32, type);
    kv->type = (enum fx_gguf_type)type;
    if (type == FX_GGUF_STRING) {
        uint64_t start, len;
        if (!rd_str_span(ps, "string value", UINT64_MAX, &start, &len))
            return false;
        char *s = copy_str(a, ps->p + start, len);
        if (!s)
            return nomem(ps);
        kv->v.str = (struct fx_gguf_str){s, len};
        return true;
    }
    if (type != FX_GGUF_ARRAY) {
        uint64_t size = fx_gguf_value_size(type);
        if (!need(ps, size, fx_gguf_type_name(kv->type)))
            return false;
        if (type == FX_GGUF_BOOL) {
            uint8_t b = ps->p[ps->pos];
            if (b > 1)
                return fail_at(ps, ps->pos, "bool value %u is neither 0 nor 1", b);
            kv->v.b = b;
        } else {
            memcpy(&kv->v, ps->p + ps->pos, (size_t)size);
        }
        ps->pos += size;
        return true;
    }

    uint32_t elem;
    uint64_t n, elem_at = ps->pos;
    if (!rd_u32(ps, "array element type", &elem) || !rd_u64(ps, "array length", &n))
        return false;
    if (elem >= FX_GGUF_TYPE_COUNT)
        return fail_at(ps, elem_at, "unknown array element type %" PRIu32, elem);
    if (elem == FX_GGUF_ARRAY)
        return unsupported_at(ps, elem_at, "arrays of arrays are not supported");
    kv->arr_type = (enum fx_gguf_type)elem;
    kv->arr_n = n;
    if (elem == FX_GGUF_STRING) {
        struct fx_gguf_str *strs = NULL;
        if (!rd_str_array(ps, a, n, elem_at + 4, &strs))
            return false;
        kv->v.arr = strs;
        return true;
    }
    uint64_t esize = fx_gguf_value_size(elem), bytes;
    if (fx_mul_overflow_u64(n, esize, &bytes) || bytes > remaining(ps))
        return fail_at(ps, elem_at + 4,
                       "array of %" PRIu64 " %s values cannot fit in the %" PRIu64 " bytes left", n,
                       fx_gguf_type_name(kv->arr_type), remaining(ps));
    const uint8_t *src = ps->p + ps->pos;
    if (elem == FX_GGUF_BOOL)
        for (uint64_t i = 0; i < n; i++)
            if (src[i] > 1)
                return fail_at(ps, ps->pos + i, "bool element %" PRIu64 " is %u, neither 0 nor 1",
                               i, src[i]);
    /* An aligned copy: the file's bytes are not aligned for the element type. */
    void *dst = fx_arena_alloc(a, (size_t)(bytes ? bytes : 1), 8);
    if (!dst)
        return nomem(ps);
    memcpy(dst, src, (size_t)bytes);
    kv->v.arr = dst;
    ps->pos += bytes;
    return true;
}

/* Appends one zeroed element to a growing array; memory follows what was parsed. */
static void *grow_array(void **arr, int64_t n, int64_t *cap, size_t elem) {
    if (n == *cap) {
        int64_t new_cap = *cap ? 2 * *cap : 64;
        void *p = realloc(*arr, (size_t)new_cap * elem);
        if (!p)
            return NULL;
        *arr = p;
        *cap = new_cap;
    }
    void *slot = (char *)*arr + (size_t)n * elem;
    memset(slot, 0, elem);
    return slot;
}

static bool parse_kvs(struct parser *ps, struct fx_gguf *g, uint64_t n_kv) {
    int64_t cap = 0, cap_off = 0;
    for (uint64_t i = 0; i < n_kv; i++) {
        snprintf(ps->what, sizeof ps->what, "metadata pair #%" PRIu64, i);
        uint64_t at = ps->pos;
        struct fx_gguf_kv *kv = grow_array((void **)&g->kv, g->n_kv, &cap, sizeof *kv);
        uint64_t *off = grow_array((void **)&g->kv_offset, g->n_kv, &cap_off, sizeof *off);
        if (!kv || !off)
            return nomem(ps);
        if (!rd_name(ps, &g->arena, "key", FX_GGUF_MAX_KEY_LEN, &kv->key))
            return false;
        char shown[64];
        describe(shown, sizeof shown, kv->key, strlen(kv->key));
        snprintf(ps->what, sizeof ps->what, "key '%s'", shown);
        int64_t prev = fx_name_index_insert(&g->kv_index, kv->key, g->n_kv);
        if (prev == -2)
            return nomem(ps);
        if (prev >= 0)
            return fail_at(ps, at,
                           "duplicate key (first defined by pair #%" PRId64 " at byte %" PRIu64 ")",
                           prev, g->kv_offset[prev]);
        *off = at;
        g->n_kv++;
        if (!rd_value(ps, &g->arena, kv))
            return false;
    }
    ps->what[0] = '\0';
    return true;
}

static bool parse_alignment(struct parser *ps, struct fx_gguf *g) {
    g->alignment = FX_GGUF_DEFAULT_ALIGNMENT;
    int64_t i = fx_name_index_find(&g->kv_index, "general.alignment");
    if (i < 0)
        return true;
    const struct fx_gguf_kv *kv = &g->kv[i];
    snprintf(ps->what, sizeof ps->what, "key 'general.alignment'");
    if (kv->type != FX_GGUF_UINT32)
        return fail_at(ps, g->kv_offset[i], "has type %s, expected uint32",
                       fx_gguf_type_name(kv->type));
    if (!fx_is_pow2_u64(kv->v.u32))
        return fail_at(ps, g->kv_offset[i], "alignment %" PRIu32 " is not a power of two",
                       kv->v.u32);
    g->alignment = kv->v.u32;
    ps->what[0] = '\0';
    return true;
}

/* Where each tensor info's fields were read, for messages about checks made after reading. */
struct info_at {
    uint64_t name, offset;
};

static bool parse_tensor_info(struct parser *ps, struct fx_gguf *g, struct fx_tensor_view *t,
                              struct info_at *at) {
    at->name = ps->pos;
    if (!rd_name(ps, &g->arena, "tensor name", FX_GGUF_MAX_NAME_LEN, &t->name))
        return false;
    char shown[64];
    describe(shown, sizeof shown, t->name, strlen(t->name));
    snprintf(ps->what, sizeof ps->what, "tensor '%s'", shown);
    uint64_t dims_at = ps->pos;
    if (!rd_u32(ps, "n_dims", &t->n_dims))
        return false;
    if (t->n_dims > FX_GGUF_MAX_DIMS)
        return fail_at(ps, dims_at, "n_dims %" PRIu32 " exceeds %d", t->n_dims, FX_GGUF_MAX_DIMS);
    for (uint32_t d = 0; d < FX_GGUF_MAX_DIMS; d++) {
        t->ne[d] = 1;
        if (d >= t->n_dims)
            continue;
        uint64_t v, v_at = ps->pos;
        if (!rd_u64(ps, "dimension", &v))
            return false;
        if (v == 0)
            return fail_at(ps, v_at, "dimension %" PRIu32 " is 0", d);
        if (v > (uint64_t)INT64_MAX)
            return fail_at(ps, v_at, "dimension %" PRIu32 " is %" PRIu64 ", above INT64_MAX", d, v);
        t->ne[d] = (int64_t)v;
    }
    uint64_t type_at = ps->pos;
    uint32_t type;
    if (!rd_u32(ps, "tensor type", &type))
        return false;
    if (!fx_type_is_valid(type))
        return fail_at(ps, type_at, "unknown tensor type %" PRIu32, type);
    t->type = (enum fx_type)type;
    at->offset = ps->pos;
    if (!rd_u64(ps, "data offset", &t->offset))
        return false;

    int64_t n = 1;
    for (uint32_t d = 0; d < FX_GGUF_MAX_DIMS; d++)
        if (fx_mul_overflow_i64(n, t->ne[d], &n))
            return fail_at(ps, dims_at,
                           "element count of [%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64
                           "] overflows",
                           t->ne[0], t->ne[1], t->ne[2], t->ne[3]);
    t->n_elements = n;
    int64_t block = fx_type_block_elems(t->type);
    if (t->ne[0] % block != 0)
        return fail_at(ps, dims_at + 4,
                       "row length %" PRId64 " is not a multiple of the %s block size %" PRId64,
                       t->ne[0], fx_type_name(t->type), block);
    /* Whole rows are whole blocks, so the element count is too. */
    if (fx_mul_overflow_u64((uint64_t)(n / block), (uint64_t)fx_type_block_bytes(t->type),
                            &t->n_bytes))
        return fail_at(ps, dims_at, "byte size of %" PRId64 " %s elements overflows", n,
                       fx_type_name(t->type));
    if (t->offset % g->alignment != 0)
        return fail_at(ps, at->offset,
                       "data offset %" PRIu64 " is not a multiple of the alignment %" PRIu64,
                       t->offset, g->alignment);
    return true;
}

struct span {
    uint64_t begin, end;
    int64_t tensor;
};

static int by_begin(const void *a, const void *b) {
    const struct span *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

/* Every tensor's bytes lie inside the file and no two tensors share a byte. */
static bool check_data(struct parser *ps, struct fx_gguf *g, const struct info_at *at) {
    if (g->n_tensors == 0)
        return true;
    /* Reported where the tensor infos end, the last byte position the file has. */
    if (g->data_offset > g->size)
        return fail_at(ps, ps->pos,
                       "the data section would start at byte %" PRIu64
                       ", past the end of the file (%" PRIu64 " bytes)",
                       g->data_offset, g->size);
    uint64_t avail = g->size - g->data_offset;
    struct span *spans = malloc((size_t)g->n_tensors * sizeof *spans);
    if (!spans)
        return nomem(ps);
    bool ok = true;
    for (int64_t i = 0; i < g->n_tensors && ok; i++) {
        struct fx_tensor_view *t = &g->tensors[i];
        if (t->offset > avail || t->n_bytes > avail - t->offset) {
            char shown[64];
            describe(shown, sizeof shown, t->name, strlen(t->name));
            snprintf(ps->what, sizeof ps->what, "tensor '%s'", shown);
            ok = fail_at(ps, at[i].offset,
                         "%" PRIu64 " bytes at data offset %" PRIu64
                         " run past the end of the file (the data section has %" PRIu64 " bytes)",
                         t->n_bytes, t->offset, avail);
            break;
        }
        t->data = g->base + g->data_offset + t->offset;
        spans[i] = (struct span){t->offset, t->offset + t->n_bytes, i};
    }
    if (ok) {
        qsort(spans, (size_t)g->n_tensors, sizeof *spans, by_begin);
        for (int64_t i = 1; i < g->n_tensors; i++) {
            if (spans[i].begin >= spans[i - 1].end)
                continue;
            const struct fx_tensor_view *a = &g->tensors[spans[i - 1].tensor];
            const struct fx_tensor_view *b = &g->tensors[spans[i].tensor];
            char sa[64], sb[64];
            describe(sa, sizeof sa, a->name, strlen(a->name));
            describe(sb, sizeof sb, b->name, strlen(b->name));
            snprintf(ps->what, sizeof ps->what, "tensor '%s'", sb);
            ok = fail_at(ps, at[spans[i].tensor].offset,
                         "data offset %" PRIu64 " overlaps tensor '%s' at [%" PRIu64 ", %" PRIu64
                         ")",
                         b->offset, sa, a->offset, a->offset + a->n_bytes);
            break;
        }
    }
    free(spans);
    return ok;
}

static bool parse_tensors(struct parser *ps, struct fx_gguf *g, uint64_t n_tensors) {
    int64_t cap = 0, cap_at = 0;
    struct info_at *at = NULL;
    bool ok = true;
    for (uint64_t i = 0; i < n_tensors && ok; i++) {
        snprintf(ps->what, sizeof ps->what, "tensor info #%" PRIu64, i);
        struct fx_tensor_view *t = grow_array((void **)&g->tensors, g->n_tensors, &cap, sizeof *t);
        struct info_at *a = grow_array((void **)&at, g->n_tensors, &cap_at, sizeof *a);
        if (!t || !a) {
            ok = nomem(ps);
            break;
        }
        if (!parse_tensor_info(ps, g, t, a)) {
            ok = false;
            break;
        }
        int64_t prev = fx_name_index_insert(&g->tensor_index, t->name, g->n_tensors);
        if (prev == -2)
            ok = nomem(ps);
        else if (prev >= 0)
            ok = fail_at(ps, a->name,
                         "duplicate tensor name (first defined by tensor #%" PRId64
                         " at byte %" PRIu64 ")",
                         prev, at[prev].name);
        else
            g->n_tensors++;
    }
    ps->what[0] = '\0';
    if (ok && fx_align_up_u64(ps->pos, g->alignment, &g->data_offset))
        ok = fail_at(ps, ps->pos, "the data section offset overflows");
    if (ok)
        ok = check_data(ps, g, at);
    free(at);
    return ok;
}

static fx_status parse(struct fx_gguf *g, struct fx_error *err) {
    struct parser ps = {.p = g->base, .size = g->size, .err = err};
    if (g->size < 4) {
        fail_at(&ps, 0, "file is %" PRIu64 " bytes, too short for the GGUF magic", g->size);
        return FX_ERR_FORMAT;
    }
    if (memcmp(g->base, GGUF_MAGIC, 4) != 0) {
        fail_at(&ps, 0, "bad magic 0x%02x%02x%02x%02x, expected \"GGUF\"", g->base[0], g->base[1],
                g->base[2], g->base[3]);
        return FX_ERR_FORMAT;
    }
    ps.pos = 4;
    uint32_t version;
    uint64_t n_tensors, n_kv;
    if (!rd_u32(&ps, "version", &version))
        return FX_ERR_FORMAT;
    uint32_t swapped = __builtin_bswap32(version);
    if (version == 1) {
        unsupported_at(&ps, 4, "GGUF version 1 is not supported, only 2 and 3");
        return FX_ERR_UNSUPPORTED;
    }
    if (swapped >= 1 && swapped <= 3) {
        unsupported_at(&ps, 4, "big-endian GGUF files (version %" PRIu32 ") are not supported",
                       swapped);
        return FX_ERR_UNSUPPORTED;
    }
    if (version != 2 && version != 3) {
        fail_at(&ps, 4, "unknown GGUF version %" PRIu32, version);
        return FX_ERR_FORMAT;
    }
    g->version = version;
    if (!rd_u64(&ps, "tensor count", &n_tensors) || !rd_u64(&ps, "metadata count", &n_kv))
        return FX_ERR_FORMAT;
    if (n_kv > remaining(&ps) / MIN_KV_BYTES) {
        fail_at(&ps, 16, "metadata count %" PRIu64 " cannot fit in the %" PRIu64 " bytes left",
                n_kv, remaining(&ps));
        return FX_ERR_FORMAT;
    }
    if (n_tensors > remaining(&ps) / MIN_TENSOR_BYTES) {
        fail_at(&ps, 8, "tensor count %" PRIu64 " cannot fit in the %" PRIu64 " bytes left",
                n_tensors, remaining(&ps));
        return FX_ERR_FORMAT;
    }
    if (!parse_kvs(&ps, g, n_kv) || !parse_alignment(&ps, g) || !parse_tensors(&ps, g, n_tensors))
        return err->code;
    fx_error_clear(err);
    return FX_OK;
}

/* Takes ownership of `map` (when not NULL): it is unmapped by fx_gguf_free, also on failure. */
static fx_status open_bytes(const void *data, uint64_t size, void *map, struct fx_gguf **out,
                            struct fx_error *err) {
    *out = NULL;
    struct fx_gguf *g = calloc(1, sizeof *g);
    if (!g) {
        if (map)
            munmap(map, (size_t)size);
        return fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "out of memory opening a GGUF file");
    }
    g->base = data;
    g->size = size;
    g->map = map;
    g->map_size = (size_t)size;
    /* A parse that fails without filling err still reports the code it returned. */
    struct fx_error local;
    fx_status s = parse(g, err ? err : &local);
    if (s != FX_OK) {
        fx_gguf_free(g);
        return s;
    }
    *out = g;
    return FX_OK;
}

fx_status fx_gguf_open_memory(const void *data, size_t size, struct fx_gguf **out,
                              struct fx_error *err) {
    if (!out || (!data && size))
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET, "fx_gguf_open_memory: NULL");
    return open_bytes(data, size, NULL, out, err);
}

fx_status fx_gguf_open(const char *path, struct fx_gguf **out, struct fx_error *err) {
    if (!path || !out)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET, "fx_gguf_open: NULL");
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return fx_error_set(err, errno == ENOENT ? FX_ERR_NOT_FOUND : FX_ERR_IO, FX_NO_OFFSET,
                            "cannot open '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        int e = errno;
        close(fd);
        return fx_error_set(err, FX_ERR_IO, FX_NO_OFFSET, "'%s' is not a readable regular file%s%s",
                            path, e ? ": " : "", e ? strerror(e) : "");
    }
    uint64_t size = (uint64_t)st.st_size;
    void *map = NULL;
    if (size > 0) {
        if (size > SIZE_MAX) {
            close(fd);
            return fx_error_set(err, FX_ERR_IO, FX_NO_OFFSET, "'%s' is too large to map", path);
        }
        map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            int e = errno;
            close(fd);
            return fx_error_set(err, e == ENOMEM ? FX_ERR_NOMEM : FX_ERR_IO, FX_NO_OFFSET,
                                "cannot map '%s': %s", path, strerror(e));
        }
    }
    close(fd);
    return open_bytes(map, size, map, out, err);
}

void fx_gguf_release(const struct fx_gguf *g, const void *data, uint64_t size) {
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t begin = ((uintptr_t)data + page - 1) & ~(page - 1);
    uintptr_t end = ((uintptr_t)data + size) & ~(page - 1);
    /* Only whole pages of a file mapping: dropping anonymous pages would lose their contents. */
    if (!g->map || end <= begin)
        return;
    madvise((void *)begin, end - begin, MADV_DONTNEED);
}

void fx_gguf_free(struct fx_gguf *g) {
    if (!g)
        return;
    if (g->map)
        munmap(g->map, g->map_size);
    fx_name_index_free(&g->kv_index);
    fx_name_index_free(&g->tensor_index);
    fx_arena_free(&g->arena);
    free(g->kv);
    free(g->kv_offset);
    free(g->tensors);
    free(g);
}
