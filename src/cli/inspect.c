/* ferrox inspect FILE [--json]: the header, every metadata pair, the tensor table and totals of
 * a GGUF file, as text or as one JSON document. A file the reader rejects gives one error line
 * on stderr and exit status 1. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli/cli.h"
#include "ferrox.h"

/* Arrays up to ARRAY_ALL elements are shown whole, longer ones by their first ARRAY_HEAD. */
#define ARRAY_ALL  16
#define ARRAY_HEAD 8
/* Text output cuts strings longer than this (JSON keeps them whole). */
#define TEXT_STR_MAX 160

static void usage(FILE *out) {
    fprintf(out, "usage: ferrox inspect FILE [--json]\n\n"
                 "Prints a GGUF file's header, metadata, tensor table and totals.\n"
                 "  --json   the same as one JSON document\n");
}

/* Length of the valid UTF-8 sequence at p (at most n bytes), or 0 when the bytes there are not
 * one (stray continuation bytes, overlong forms, surrogates, truncation). */
static size_t utf8_len(const unsigned char *p, size_t n) {
    unsigned char c = p[0];
    size_t len;
    uint32_t cp, min;
    if (c < 0x80)
        return 1;
    if ((c & 0xe0) == 0xc0)
        len = 2, cp = c & 0x1f, min = 0x80;
    else if ((c & 0xf0) == 0xe0)
        len = 3, cp = c & 0x0f, min = 0x800;
    else if ((c & 0xf8) == 0xf0)
        len = 4, cp = c & 0x07, min = 0x10000;
    else
        return 0;
    if (len > n)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (p[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

/* ---- text ------------------------------------------------------------------------------------ */

/* A quoted, escaped string: valid UTF-8 as is, control and invalid bytes as escapes. */
static void print_str(FILE *out, const struct fx_gguf_str *s, uint64_t max) {
    const unsigned char *p = (const unsigned char *)s->data;
    uint64_t n = s->len, shown = n < max ? n : max;
    fputc('"', out);
    for (uint64_t i = 0; i < shown;) {
        size_t k = utf8_len(p + i, (size_t)(n - i));
        if (k == 1 && p[i] >= 0x20 && p[i] != 0x7f) {
            if (p[i] == '"' || p[i] == '\\')
                fputc('\\', out);
            fputc(p[i], out);
        } else if (k > 1) {
            fwrite(p + i, 1, k, out);
        } else if (p[i] == '\n') {
            fputs("\\n", out);
        } else if (p[i] == '\t') {
            fputs("\\t", out);
        } else {
            fprintf(out, "\\x%02x", p[i]);
            k = 1;
        }
        i += k;
    }
    fputc('"', out);
    if (shown < n)
        fprintf(out, "... (%" PRIu64 " bytes)", n);
}

/* One element of `type` at p (for arrays) or the scalar value of kv. */
static void print_scalar(FILE *out, enum fx_gguf_type type, const void *p, uint64_t str_max) {
    switch (type) {
    case FX_GGUF_UINT8:
        fprintf(out, "%u", *(const uint8_t *)p);
        break;
    case FX_GGUF_INT8:
        fprintf(out, "%d", *(const int8_t *)p);
        break;
    case FX_GGUF_UINT16:
        fprintf(out, "%u", *(const uint16_t *)p);
        break;
    case FX_GGUF_INT16:
        fprintf(out, "%d", *(const int16_t *)p);
        break;
    case FX_GGUF_UINT32:
        fprintf(out, "%" PRIu32, *(const uint32_t *)p);
        break;
    case FX_GGUF_INT32:
        fprintf(out, "%" PRId32, *(const int32_t *)p);
        break;
    case FX_GGUF_UINT64:
        fprintf(out, "%" PRIu64, *(const uint64_t *)p);
        break;
    case FX_GGUF_INT64:
        fprintf(out, "%" PRId64, *(const int64_t *)p);
        break;
    case FX_GGUF_FLOAT32:
        fprintf(out, "%.9g", (double)*(const float *)p);
        break;
    case FX_GGUF_FLOAT64:
        fprintf(out, "%.17g", *(const double *)p);
        break;
    case FX_GGUF_BOOL:
        fputs(*(const uint8_t *)p ? "true" : "false", out);
        break;
    case FX_GGUF_STRING:
        print_str(out, p, str_max);
        break;
    default:
        fputs("?", out);
    }
}

static uint64_t elem_size(enum fx_gguf_type t) {
    static const uint8_t sizes[FX_GGUF_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return t == FX_GGUF_STRING ? sizeof(struct fx_gguf_str) : sizes[t];
}

static uint64_t preview_count(uint64_t n) {
    return n <= ARRAY_ALL ? n : ARRAY_HEAD;
}

static void print_kv(FILE *out, const struct fx_gguf_kv *kv) {
    char type[32];
    if (kv->type == FX_GGUF_ARRAY)
        snprintf(type, sizeof type, "[%s]", fx_gguf_type_name(kv->arr_type));
    else
        snprintf(type, sizeof type, "%s", fx_gguf_type_name(kv->type));
    fprintf(out, "  %-44s %-9s ", kv->key, type);
    if (kv->type != FX_GGUF_ARRAY) {
        print_scalar(out, kv->type, &kv->v, TEXT_STR_MAX);
        fputc('\n', out);
        return;
    }
    uint64_t shown = preview_count(kv->arr_n);
    fprintf(out, "%" PRIu64 " element%s: [", kv->arr_n, kv->arr_n == 1 ? "" : "s");
    for (uint64_t i = 0; i < shown; i++) {
        if (i)
            fputs(", ", out);
        print_scalar(out, kv->arr_type, (const char *)kv->v.arr + i * elem_size(kv->arr_type), 40);
    }
    fputs(shown < kv->arr_n ? ", ...]\n" : "]\n", out);
}

struct totals {
    int64_t params;
    uint64_t bytes;
    int64_t n[FX_TYPE_COUNT], elements[FX_TYPE_COUNT];
    uint64_t type_bytes[FX_TYPE_COUNT];
};

static void count(const struct fx_gguf *g, struct totals *t) {
    memset(t, 0, sizeof *t);
    for (int64_t i = 0; i < fx_gguf_n_tensors(g); i++) {
        const struct fx_tensor_view *v = fx_gguf_tensor_at(g, i);
        t->params += v->n_elements;
        t->bytes += v->n_bytes;
        t->n[v->type]++;
        t->elements[v->type] += v->n_elements;
        t->type_bytes[v->type] += v->n_bytes;
    }
}

static void shape_text(const struct fx_tensor_view *v, char *buf, size_t n) {
    size_t o = (size_t)snprintf(buf, n, "[");
    for (uint32_t d = 0; d < v->n_dims && o < n; d++)
        o += (size_t)snprintf(buf + o, n - o, "%s%" PRId64, d ? ", " : "", v->ne[d]);
    if (o < n)
        snprintf(buf + o, n - o, "]");
}

static void print_text(FILE *out, const char *path, const struct fx_gguf *g) {
    fprintf(out, "%s: GGUF version %" PRIu32 "\n", path, fx_gguf_version(g));
    fprintf(out, "  file size     %" PRIu64 " bytes\n", fx_gguf_file_size(g));
    fprintf(out, "  alignment     %" PRIu64 "\n", fx_gguf_alignment(g));
    fprintf(out, "  data offset   %" PRIu64 "\n", fx_gguf_data_offset(g));
    fprintf(out, "  metadata      %" PRId64 " keys\n", fx_gguf_n_kv(g));
    fprintf(out, "  tensors       %" PRId64 "\n", fx_gguf_n_tensors(g));

    fprintf(out, "\nmetadata:\n");
    for (int64_t i = 0; i < fx_gguf_n_kv(g); i++)
        print_kv(out, fx_gguf_kv_at(g, i));

    fprintf(out, "\ntensors:\n  %-40s %-7s %-24s %14s %14s %14s\n", "name", "type", "shape",
            "elements", "bytes", "offset");
    for (int64_t i = 0; i < fx_gguf_n_tensors(g); i++) {
        const struct fx_tensor_view *v = fx_gguf_tensor_at(g, i);
        char shape[128];
        shape_text(v, shape, sizeof shape);
        fprintf(out, "  %-40s %-7s %-24s %14" PRId64 " %14" PRIu64 " %14" PRIu64 "\n", v->name,
                fx_type_name(v->type), shape, v->n_elements, v->n_bytes, v->offset);
    }

    struct totals t;
    count(g, &t);
    fprintf(out, "\ntotals:\n  parameters    %" PRId64 "\n  tensor bytes  %" PRIu64 "\n", t.params,
            t.bytes);
    for (int ty = 0; ty < FX_TYPE_COUNT; ty++)
        if (t.n[ty])
            fprintf(out, "  %-13s %" PRId64 " tensors, %" PRId64 " elements, %" PRIu64 " bytes\n",
                    fx_type_name((enum fx_type)ty), t.n[ty], t.elements[ty], t.type_bytes[ty]);
}

/* ---- JSON ------------------------------------------------------------------------------------ */

/* A JSON string from GGUF bytes: invalid UTF-8 bytes become U+FFFD, since JSON text is UTF-8. */
static json_t *json_str(const struct fx_gguf_str *s) {
    const unsigned char *p = (const unsigned char *)s->data;
    size_t n = (size_t)s->len, bad = 0;
    for (size_t i = 0; i < n;) {
        size_t k = utf8_len(p + i, n - i);
        bad += !k;
        i += k ? k : 1;
    }
    if (!bad)
        return json_stringn(s->data, n);
    char *clean = malloc(n + 2 * bad + 1);
    if (!clean)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        size_t k = utf8_len(p + i, n - i);
        if (k) {
            memcpy(clean + o, p + i, k);
            o += k, i += k;
        } else {
            memcpy(clean + o, "\xef\xbf\xbd", 3);
            o += 3, i++;
        }
    }
    json_t *j = json_stringn(clean, o);
    free(clean);
    return j;
}

static json_t *json_cstr(const char *s) {
    return json_str(&(struct fx_gguf_str){s, strlen(s)});
}

static json_t *json_real_or_name(double v) {
    if (isfinite(v))
        return json_real(v);
    return json_string(isnan(v) ? "nan" : v > 0 ? "inf" : "-inf");
}

static json_t *json_scalar(enum fx_gguf_type type, const void *p) {
    switch (type) {
    case FX_GGUF_UINT8:
        return json_integer(*(const uint8_t *)p);
    case FX_GGUF_INT8:
        return json_integer(*(const int8_t *)p);
    case FX_GGUF_UINT16:
        return json_integer(*(const uint16_t *)p);
    case FX_GGUF_INT16:
        return json_integer(*(const int16_t *)p);
    case FX_GGUF_UINT32:
        return json_integer(*(const uint32_t *)p);
    case FX_GGUF_INT32:
        return json_integer(*(const int32_t *)p);
    case FX_GGUF_UINT64: {
        /* JSON integers here are int64: larger values are written as decimal strings. */
        uint64_t v = *(const uint64_t *)p;
        if (v <= INT64_MAX)
            return json_integer((json_int_t)v);
        char buf[24];
        snprintf(buf, sizeof buf, "%" PRIu64, v);
        return json_string(buf);
    }
    case FX_GGUF_INT64:
        return json_integer(*(const int64_t *)p);
    case FX_GGUF_FLOAT32:
        return json_real_or_name(*(const float *)p);
    case FX_GGUF_FLOAT64:
        return json_real_or_name(*(const double *)p);
    case FX_GGUF_BOOL:
        return json_boolean(*(const uint8_t *)p);
    case FX_GGUF_STRING:
        return json_str(p);
    default:
        return json_null();
    }
}

static json_t *json_kv(const struct fx_gguf_kv *kv) {
    json_t *o = json_object();
    json_object_set_new(o, "key", json_cstr(kv->key));
    json_object_set_new(o, "type", json_string(fx_gguf_type_name(kv->type)));
    if (kv->type != FX_GGUF_ARRAY) {
        json_object_set_new(o, "value", json_scalar(kv->type, &kv->v));
        return o;
    }
    json_object_set_new(o, "element_type", json_string(fx_gguf_type_name(kv->arr_type)));
    json_object_set_new(o, "length", json_integer((json_int_t)kv->arr_n));
    uint64_t shown = preview_count(kv->arr_n);
    json_t *values = json_array();
    for (uint64_t i = 0; i < shown; i++)
        json_array_append_new(values, json_scalar(kv->arr_type, (const char *)kv->v.arr +
                                                                    i * elem_size(kv->arr_type)));
    json_object_set_new(o, "values", values);
    json_object_set_new(o, "truncated", json_boolean(shown < kv->arr_n));
    return o;
}

static json_t *json_doc(const char *path, const struct fx_gguf *g) {
    json_t *doc = json_object();
    json_object_set_new(doc, "file", json_cstr(path));
    json_object_set_new(doc, "version", json_integer(fx_gguf_version(g)));
    json_object_set_new(doc, "file_size", json_integer((json_int_t)fx_gguf_file_size(g)));
    json_object_set_new(doc, "alignment", json_integer((json_int_t)fx_gguf_alignment(g)));
    json_object_set_new(doc, "data_offset", json_integer((json_int_t)fx_gguf_data_offset(g)));
    json_object_set_new(doc, "n_kv", json_integer(fx_gguf_n_kv(g)));
    json_object_set_new(doc, "n_tensors", json_integer(fx_gguf_n_tensors(g)));
    json_t *meta = json_array();
    for (int64_t i = 0; i < fx_gguf_n_kv(g); i++)
        json_array_append_new(meta, json_kv(fx_gguf_kv_at(g, i)));
    json_object_set_new(doc, "metadata", meta);
    json_t *tensors = json_array();
    for (int64_t i = 0; i < fx_gguf_n_tensors(g); i++) {
        const struct fx_tensor_view *v = fx_gguf_tensor_at(g, i);
        json_t *t = json_object(), *shape = json_array();
        for (uint32_t d = 0; d < v->n_dims; d++)
            json_array_append_new(shape, json_integer(v->ne[d]));
        json_object_set_new(t, "name", json_cstr(v->name));
        json_object_set_new(t, "type", json_string(fx_type_name(v->type)));
        json_object_set_new(t, "shape", shape);
        json_object_set_new(t, "elements", json_integer(v->n_elements));
        json_object_set_new(t, "bytes", json_integer((json_int_t)v->n_bytes));
        json_object_set_new(t, "offset", json_integer((json_int_t)v->offset));
        json_array_append_new(tensors, t);
    }
    json_object_set_new(doc, "tensors", tensors);
    struct totals t;
    count(g, &t);
    json_t *totals = json_object(), *by_type = json_object();
    json_object_set_new(totals, "parameters", json_integer(t.params));
    json_object_set_new(totals, "bytes", json_integer((json_int_t)t.bytes));
    for (int ty = 0; ty < FX_TYPE_COUNT; ty++) {
        if (!t.n[ty])
            continue;
        json_t *e = json_object();
        json_object_set_new(e, "tensors", json_integer(t.n[ty]));
        json_object_set_new(e, "elements", json_integer(t.elements[ty]));
        json_object_set_new(e, "bytes", json_integer((json_int_t)t.type_bytes[ty]));
        json_object_set_new(by_type, fx_type_name((enum fx_type)ty), e);
    }
    json_object_set_new(totals, "by_type", by_type);
    json_object_set_new(doc, "totals", totals);
    return doc;
}

int fx_cli_inspect(int argc, char **argv) {
    const char *path = NULL;
    bool json = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            json = true;
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (argv[i][0] == '-' || path) {
            fprintf(stderr, "ferrox inspect: unexpected argument '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        } else {
            path = argv[i];
        }
    }
    if (!path) {
        usage(stderr);
        return 2;
    }
    struct fx_gguf *g;
    struct fx_error err;
    if (fx_gguf_open(path, &g, &err) != FX_OK) {
        fprintf(stderr, "ferrox inspect: %s: %s\n", path, err.msg);
        return 1;
    }
    int rc = 0;
    if (json) {
        json_t *doc = json_doc(path, g);
        if (!doc || json_dumpf(doc, stdout, JSON_INDENT(1) | JSON_PRESERVE_ORDER) != 0) {
            fprintf(stderr, "ferrox inspect: %s: cannot write the JSON document\n", path);
            rc = 1;
        } else {
            fputc('\n', stdout);
        }
        json_decref(doc);
    } else {
        print_text(stdout, path, g);
    }
    if (fflush(stdout) != 0) {
        fprintf(stderr, "ferrox inspect: writing the output failed\n");
        rc = 1;
    }
    fx_gguf_free(g);
    return rc;
}
