/* Values of the Jinja interpreter: the arena they live in, lists and dicts, Python's truthiness,
 * equality, str() and repr(), json.dumps, and conversion from parsed JSON. */
#include "chat/jinja.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"

/* Containers nested deeper than this are printed as "..." and compare unequal; only a namespace
 * that contains itself gets there. */
#define MAX_VALUE_DEPTH 512

/* ---- arena --------------------------------------------------------------------------------- */

struct fx_jchunk {
    struct fx_jchunk *next;
    size_t used, cap;
    size_t pad; /* keeps the data that follows 16-byte aligned */
};

#define CHUNK_MIN ((size_t)64 << 10)
#define CHUNK_MAX ((size_t)4 << 20)

void fx_jarena_init(struct fx_jarena *a, size_t limit) {
    a->head = NULL;
    a->total = 0;
    a->limit = limit;
    a->fail = FX_OK;
}

void *fx_jarena_alloc(struct fx_jarena *a, size_t n) {
    if (n > SIZE_MAX - 15)
        goto capacity;
    n = (n + 15) & ~(size_t)15;
    struct fx_jchunk *h = a->head;
    if (h && h->cap - h->used >= n) {
        void *p = (char *)(h + 1) + h->used;
        h->used += n;
        return p;
    }
    /* Chunks double from 64 KiB to 4 MiB; a larger request gets a chunk of its own. */
    size_t cap = h ? h->cap * 2 : CHUNK_MIN;
    if (cap > CHUNK_MAX)
        cap = CHUNK_MAX;
    if (cap < n)
        cap = n;
    size_t bytes;
    if (fx_add_overflow_size(cap, sizeof(struct fx_jchunk), &bytes) || a->total > a->limit ||
        bytes > a->limit - a->total)
        goto capacity;
    struct fx_jchunk *c = malloc(bytes);
    if (!c) {
        a->fail = FX_ERR_NOMEM;
        return NULL;
    }
    a->total += bytes;
    c->cap = cap;
    c->used = n;
    /* A large one-off chunk goes behind the head so the head keeps serving small requests. */
    if (h && n > h->cap) {
        c->next = h->next;
        h->next = c;
    } else {
        c->next = h;
        a->head = c;
    }
    return c + 1;
capacity:
    a->fail = FX_ERR_CAPACITY;
    return NULL;
}

void *fx_jarena_dup(struct fx_jarena *a, const void *p, size_t n) {
    void *q = fx_jarena_alloc(a, n ? n : 1);
    if (q && n)
        memcpy(q, p, n);
    return q;
}

void fx_jarena_free(struct fx_jarena *a) {
    struct fx_jchunk *c = a->head;
    while (c) {
        struct fx_jchunk *next = c->next;
        free(c);
        c = next;
    }
    a->head = NULL;
    a->total = 0;
}

/* ---- buffer -------------------------------------------------------------------------------- */

void fx_jbuf_put(struct fx_jbuf *b, const void *p, size_t n) {
    if (b->err != FX_OK || n == 0)
        return;
    if (n > b->limit || b->len > b->limit - n) {
        b->err = FX_ERR_CAPACITY;
        return;
    }
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->err = FX_ERR_NOMEM;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->len, p, n);
    b->len += n;
    b->p[b->len] = '\0';
}

void fx_jbuf_putc(struct fx_jbuf *b, char c) {
    fx_jbuf_put(b, &c, 1);
}

void fx_jbuf_puts(struct fx_jbuf *b, const char *s) {
    fx_jbuf_put(b, s, strlen(s));
}

void fx_jbuf_printf(struct fx_jbuf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    fx_jbuf_put(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

/* ---- strings, lists, dicts ----------------------------------------------------------------- */

fx_status fx_jv_str_copy(struct fx_jarena *a, const char *p, size_t len, struct fx_jv *out) {
    if (len > UINT32_MAX)
        return FX_ERR_CAPACITY;
    char *q = fx_jarena_dup(a, p, len);
    if (!q)
        return a->fail;
    *out = fx_jv_strref(q, (uint32_t)len);
    return FX_OK;
}

struct fx_jlist *fx_jlist_new(struct fx_jarena *a, size_t cap) {
    if (cap > UINT32_MAX / 2) {
        a->fail = FX_ERR_CAPACITY;
        return NULL;
    }
    struct fx_jlist *l = fx_jarena_alloc(a, sizeof *l);
    if (!l)
        return NULL;
    l->n = 0;
    l->cap = (uint32_t)(cap ? cap : 4);
    l->v = fx_jarena_alloc(a, (size_t)l->cap * sizeof *l->v);
    return l->v ? l : NULL;
}

bool fx_jlist_push(struct fx_jarena *a, struct fx_jlist *l, struct fx_jv v) {
    if (l->n == l->cap) {
        if (l->cap > UINT32_MAX / 4) {
            a->fail = FX_ERR_CAPACITY;
            return false;
        }
        struct fx_jv *nv = fx_jarena_alloc(a, (size_t)l->cap * 2 * sizeof *nv);
        if (!nv)
            return false;
        memcpy(nv, l->v, l->n * sizeof *nv);
        l->v = nv;
        l->cap *= 2;
    }
    l->v[l->n++] = v;
    return true;
}

struct fx_jdict *fx_jdict_new(struct fx_jarena *a, size_t cap) {
    if (cap > UINT32_MAX / 4) {
        a->fail = FX_ERR_CAPACITY;
        return NULL;
    }
    struct fx_jdict *d = fx_jarena_alloc(a, sizeof *d);
    if (!d)
        return NULL;
    memset(d, 0, sizeof *d);
    d->cap = (uint32_t)(cap ? cap : 4);
    d->e = fx_jarena_alloc(a, (size_t)d->cap * sizeof *d->e);
    return d->e ? d : NULL;
}

/* FNV-1a over a key's identity: strings by bytes, numbers by value (1 == 1.0 == True). */
static uint32_t key_hash(struct fx_jv k) {
    uint32_t h = 2166136261u;
    if (k.kind == FX_JV_STR) {
        for (uint32_t i = 0; i < k.len; i++)
            h = (h ^ (uint8_t)k.u.s[i]) * 16777619u;
        return h;
    }
    if (k.kind == FX_JV_INT || k.kind == FX_JV_BOOL)
        return (uint32_t)(k.kind == FX_JV_INT ? k.u.i : k.u.b) * 2654435761u;
    if (k.kind == FX_JV_FLOAT) {
        /* Integral floats hash like the equal int (1.0 == 1); others by their bits. */
        double f = k.u.f;
        if (f > -9.2e18 && f < 9.2e18 && (double)(int64_t)f == f)
            return (uint32_t)(int64_t)f * 2654435761u;
        uint64_t bits;
        memcpy(&bits, &f, sizeof bits);
        return (uint32_t)(bits ^ (bits >> 32));
    }
    return h ^ k.kind;
}

#define DICT_INDEX_AT 8 /* below this many keys a linear scan is faster than hashing */

static bool dict_reindex(struct fx_jarena *a, struct fx_jdict *d) {
    uint32_t n_slots = 16;
    while (n_slots < d->cap * 2u)
        n_slots *= 2;
    uint32_t *slots = fx_jarena_alloc(a, (size_t)n_slots * sizeof *slots);
    if (!slots)
        return false;
    memset(slots, 0, (size_t)n_slots * sizeof *slots);
    for (uint32_t i = 0; i < d->n; i++) {
        uint32_t s = key_hash(d->e[i].key) & (n_slots - 1);
        while (slots[s])
            s = (s + 1) & (n_slots - 1);
        slots[s] = i + 1;
    }
    d->slots = slots;
    d->n_slots = n_slots;
    return true;
}

struct fx_jv *fx_jdict_get(const struct fx_jdict *d, struct fx_jv key) {
    if (d->slots) {
        uint32_t s = key_hash(key) & (d->n_slots - 1);
        while (d->slots[s]) {
            struct fx_jentry *e = &d->e[d->slots[s] - 1];
            if (fx_jv_equal(e->key, key))
                return &e->val;
            s = (s + 1) & (d->n_slots - 1);
        }
        return NULL;
    }
    for (uint32_t i = 0; i < d->n; i++)
        if (fx_jv_equal(d->e[i].key, key))
            return &d->e[i].val;
    return NULL;
}

struct fx_jv *fx_jdict_get_str(const struct fx_jdict *d, const char *key, size_t len) {
    if (len > UINT32_MAX)
        return NULL;
    return fx_jdict_get(d, fx_jv_strref(key, (uint32_t)len));
}

bool fx_jdict_set(struct fx_jarena *a, struct fx_jdict *d, struct fx_jv key, struct fx_jv val) {
    struct fx_jv *old = fx_jdict_get(d, key);
    if (old) {
        *old = val;
        return true;
    }
    if (d->n == d->cap) {
        if (d->cap > UINT32_MAX / 4) {
            a->fail = FX_ERR_CAPACITY;
            return false;
        }
        struct fx_jentry *ne = fx_jarena_alloc(a, (size_t)d->cap * 2 * sizeof *ne);
        if (!ne)
            return false;
        memcpy(ne, d->e, d->n * sizeof *ne);
        d->e = ne;
        d->cap *= 2;
        d->slots = NULL; /* rebuilt below at the new size */
    }
    d->e[d->n++] = (struct fx_jentry){key, val};
    if (d->n >= DICT_INDEX_AT) {
        if (!d->slots)
            return dict_reindex(a, d);
        uint32_t s = key_hash(key) & (d->n_slots - 1);
        while (d->slots[s])
            s = (s + 1) & (d->n_slots - 1);
        d->slots[s] = d->n;
    }
    return true;
}

/* ---- Python semantics ---------------------------------------------------------------------- */

bool fx_jv_is_number(struct fx_jv v) {
    return v.kind == FX_JV_INT || v.kind == FX_JV_FLOAT || v.kind == FX_JV_BOOL;
}

double fx_jv_as_double(struct fx_jv v) {
    switch (v.kind) {
    case FX_JV_INT:
        return (double)v.u.i;
    case FX_JV_FLOAT:
        return v.u.f;
    case FX_JV_BOOL:
        return v.u.b;
    default:
        return 0;
    }
}

bool fx_jv_truthy(struct fx_jv v) {
    switch (v.kind) {
    case FX_JV_UNDEF:
    case FX_JV_NONE:
        return false;
    case FX_JV_BOOL:
        return v.u.b;
    case FX_JV_INT:
        return v.u.i != 0;
    case FX_JV_FLOAT:
        return v.u.f != 0;
    case FX_JV_STR:
        return v.len != 0;
    case FX_JV_LIST:
        return v.sub == FX_JL_ITER || v.u.list->n != 0;
    case FX_JV_DICT:
        return v.u.dict->n != 0;
    default:
        return true;
    }
}

static bool equal_at(struct fx_jv a, struct fx_jv b, int depth) {
    if (depth > MAX_VALUE_DEPTH)
        return false;
    if (fx_jv_is_number(a) && fx_jv_is_number(b)) {
        if (a.kind != FX_JV_FLOAT && b.kind != FX_JV_FLOAT)
            return (a.kind == FX_JV_INT ? a.u.i : a.u.b) == (b.kind == FX_JV_INT ? b.u.i : b.u.b);
        return fx_jv_as_double(a) == fx_jv_as_double(b);
    }
    if (a.kind != b.kind)
        return false;
    switch (a.kind) {
    case FX_JV_UNDEF:
    case FX_JV_NONE:
        return true;
    case FX_JV_STR:
        return a.len == b.len && memcmp(a.u.s, b.u.s, a.len) == 0;
    case FX_JV_LIST:
        if (a.sub != b.sub || a.u.list->n != b.u.list->n)
            return false;
        for (uint32_t i = 0; i < a.u.list->n; i++)
            if (!equal_at(a.u.list->v[i], b.u.list->v[i], depth + 1))
                return false;
        return true;
    case FX_JV_DICT:
        if (a.u.dict == b.u.dict)
            return true;
        if (a.u.dict->n != b.u.dict->n)
            return false;
        for (uint32_t i = 0; i < a.u.dict->n; i++) {
            const struct fx_jentry *e = &a.u.dict->e[i];
            const struct fx_jv *o = fx_jdict_get(b.u.dict, e->key);
            if (!o || !equal_at(e->val, *o, depth + 1))
                return false;
        }
        return true;
    case FX_JV_NS:
        return a.u.dict == b.u.dict;
    case FX_JV_LOOP:
        return a.u.loop == b.u.loop;
    case FX_JV_MACRO:
        return a.u.macro == b.u.macro;
    case FX_JV_FUNC:
        return a.sub == b.sub;
    case FX_JV_METHOD:
        return a.u.method->id == b.u.method->id &&
               equal_at(a.u.method->self, b.u.method->self, depth + 1);
    }
    return false;
}

bool fx_jv_equal(struct fx_jv a, struct fx_jv b) {
    return equal_at(a, b, 0);
}

const char *fx_jv_type_name(struct fx_jv v) {
    switch (v.kind) {
    case FX_JV_UNDEF:
        return "Undefined";
    case FX_JV_NONE:
        return "NoneType";
    case FX_JV_BOOL:
        return "bool";
    case FX_JV_INT:
        return "int";
    case FX_JV_FLOAT:
        return "float";
    case FX_JV_STR:
        return "str";
    case FX_JV_LIST:
        return v.sub == FX_JL_TUPLE ? "tuple" : v.sub == FX_JL_ITER ? "generator" : "list";
    case FX_JV_DICT:
        return "dict";
    case FX_JV_NS:
        return "Namespace";
    case FX_JV_LOOP:
        return "LoopContext";
    case FX_JV_MACRO:
        return "Macro";
    case FX_JV_FUNC:
        return "function";
    case FX_JV_METHOD:
        return "method";
    }
    return "?";
}

/* ---- printing ------------------------------------------------------------------------------ */

void fx_jv_write_float(struct fx_jbuf *b, double f) {
    if (isnan(f)) {
        fx_jbuf_puts(b, "nan");
        return;
    }
    if (isinf(f)) {
        fx_jbuf_puts(b, f < 0 ? "-inf" : "inf");
        return;
    }
    /* The shortest %e form that reads back as f gives the digits and the exponent. */
    char e[40];
    for (int prec = 0; prec < 17; prec++) {
        snprintf(e, sizeof e, "%.*e", prec, f);
        if (strtod(e, NULL) == f)
            break;
    }
    const char *p = e;
    if (*p == '-') {
        fx_jbuf_putc(b, '-');
        p++;
    }
    char digits[24];
    size_t nd = 0;
    for (; *p && *p != 'e'; p++)
        if (*p != '.')
            digits[nd++] = *p;
    int exp = *p == 'e' ? atoi(p + 1) : 0;
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    /* Python's repr switches to an exponent below 1e-4 and from 1e16 on. */
    if (exp < -4 || exp >= 16) {
        fx_jbuf_putc(b, digits[0]);
        if (nd > 1) {
            fx_jbuf_putc(b, '.');
            fx_jbuf_put(b, digits + 1, nd - 1);
        }
        fx_jbuf_printf(b, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    } else if (exp < 0) {
        fx_jbuf_puts(b, "0.");
        for (int i = 0; i < -exp - 1; i++)
            fx_jbuf_putc(b, '0');
        fx_jbuf_put(b, digits, nd);
    } else if ((size_t)exp + 1 >= nd) {
        fx_jbuf_put(b, digits, nd);
        for (size_t i = nd; i < (size_t)exp + 1; i++)
            fx_jbuf_putc(b, '0');
        fx_jbuf_puts(b, ".0");
    } else {
        fx_jbuf_put(b, digits, (size_t)exp + 1);
        fx_jbuf_putc(b, '.');
        fx_jbuf_put(b, digits + exp + 1, nd - (size_t)exp - 1);
    }
}

static void write_str_repr(struct fx_jbuf *b, const char *s, size_t n) {
    bool has_single = memchr(s, '\'', n) != NULL, has_double = memchr(s, '"', n) != NULL;
    char q = has_single && !has_double ? '"' : '\'';
    fx_jbuf_putc(b, q);
    size_t run = 0; /* bytes copied verbatim in one go */
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        const char *esc = NULL;
        char hex[8];
        if (ch == '\\')
            esc = "\\\\";
        else if (ch == (unsigned char)q)
            esc = q == '\'' ? "\\'" : "\\\"";
        else if (ch == '\n')
            esc = "\\n";
        else if (ch == '\r')
            esc = "\\r";
        else if (ch == '\t')
            esc = "\\t";
        else if (ch < 0x20 || ch == 0x7f) {
            snprintf(hex, sizeof hex, "\\x%02x", ch);
            esc = hex;
        } else if (ch == 0xc2 && i + 1 < n && (unsigned char)s[i + 1] >= 0x80 &&
                   (unsigned char)s[i + 1] <= 0x9f) {
            /* U+0080..U+009F are not printable either. */
            snprintf(hex, sizeof hex, "\\x%02x", (unsigned char)s[i + 1]);
            esc = hex;
        }
        if (!esc)
            continue;
        fx_jbuf_put(b, s + run, i - run);
        fx_jbuf_puts(b, esc);
        if (ch == 0xc2)
            i++;
        run = i + 1;
    }
    fx_jbuf_put(b, s + run, n - run);
    fx_jbuf_putc(b, q);
}

static void write_value(struct fx_jbuf *b, struct fx_jv v, bool repr, int depth);

static void write_dict_body(struct fx_jbuf *b, const struct fx_jdict *d, int depth) {
    fx_jbuf_putc(b, '{');
    for (uint32_t i = 0; i < d->n; i++) {
        if (i)
            fx_jbuf_puts(b, ", ");
        write_value(b, d->e[i].key, true, depth + 1);
        fx_jbuf_puts(b, ": ");
        write_value(b, d->e[i].val, true, depth + 1);
    }
    fx_jbuf_putc(b, '}');
}

static void write_value(struct fx_jbuf *b, struct fx_jv v, bool repr, int depth) {
    if (depth > MAX_VALUE_DEPTH) {
        fx_jbuf_puts(b, "...");
        return;
    }
    switch (v.kind) {
    case FX_JV_UNDEF:
        if (repr)
            fx_jbuf_puts(b, "Undefined");
        return;
    case FX_JV_NONE:
        fx_jbuf_puts(b, "None");
        return;
    case FX_JV_BOOL:
        fx_jbuf_puts(b, v.u.b ? "True" : "False");
        return;
    case FX_JV_INT:
        fx_jbuf_printf(b, "%lld", (long long)v.u.i);
        return;
    case FX_JV_FLOAT:
        fx_jv_write_float(b, v.u.f);
        return;
    case FX_JV_STR:
        if (repr)
            write_str_repr(b, v.u.s, v.len);
        else
            fx_jbuf_put(b, v.u.s, v.len);
        return;
    case FX_JV_LIST: {
        const struct fx_jlist *l = v.u.list;
        if (v.sub == FX_JL_ITER) {
            fx_jbuf_puts(b, "<generator object>");
            return;
        }
        fx_jbuf_putc(b, v.sub ? '(' : '[');
        for (uint32_t i = 0; i < l->n; i++) {
            if (i)
                fx_jbuf_puts(b, ", ");
            write_value(b, l->v[i], true, depth + 1);
        }
        if (v.sub && l->n == 1)
            fx_jbuf_putc(b, ',');
        fx_jbuf_putc(b, v.sub ? ')' : ']');
        return;
    }
    case FX_JV_DICT:
        write_dict_body(b, v.u.dict, depth);
        return;
    case FX_JV_NS:
        fx_jbuf_puts(b, "<Namespace ");
        write_dict_body(b, v.u.dict, depth);
        fx_jbuf_putc(b, '>');
        return;
    case FX_JV_LOOP:
        fx_jbuf_printf(b, "<LoopContext %lld/%lld>", (long long)v.u.loop->index0 + 1,
                       (long long)v.u.loop->length);
        return;
    case FX_JV_MACRO:
        fx_jbuf_puts(b, "<Macro '");
        fx_jbuf_put(b, v.u.macro->name, v.u.macro->name_len);
        fx_jbuf_puts(b, "'>");
        return;
    case FX_JV_FUNC:
        fx_jbuf_puts(b, "<built-in function>");
        return;
    case FX_JV_METHOD:
        fx_jbuf_printf(b, "<built-in method of %s object>", fx_jv_type_name(v.u.method->self));
        return;
    }
}

void fx_jv_write_str(struct fx_jbuf *b, struct fx_jv v) {
    write_value(b, v, false, 0);
}

void fx_jv_write_repr(struct fx_jbuf *b, struct fx_jv v) {
    write_value(b, v, true, 0);
}

/* ---- JSON ---------------------------------------------------------------------------------- */

static void json_put_string(struct fx_jbuf *b, const char *s, size_t n, bool ensure_ascii) {
    fx_jbuf_putc(b, '"');
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        char esc[16];
        const char *e = NULL;
        size_t adv = 1;
        switch (ch) {
        case '"':
            e = "\\\"";
            break;
        case '\\':
            e = "\\\\";
            break;
        case '\n':
            e = "\\n";
            break;
        case '\r':
            e = "\\r";
            break;
        case '\t':
            e = "\\t";
            break;
        case '\b':
            e = "\\b";
            break;
        case '\f':
            e = "\\f";
            break;
        default:
            if (ch < 0x20) {
                snprintf(esc, sizeof esc, "\\u%04x", ch);
                e = esc;
            } else if (ch >= 0x80 && ensure_ascii) {
                /* Decode one sequence; an invalid byte is escaped as itself. */
                uint32_t cp = ch;
                size_t len = ch >= 0xf0 ? 4 : ch >= 0xe0 ? 3 : ch >= 0xc0 ? 2 : 1;
                if (len > 1 && i + len <= n) {
                    cp = ch & (0x3f >> (len - 1));
                    for (size_t k = 1; k < len; k++)
                        cp = (cp << 6) | ((unsigned char)s[i + k] & 0x3f);
                    adv = len;
                }
                if (cp >= 0x10000) {
                    cp -= 0x10000;
                    snprintf(esc, sizeof esc, "\\u%04x\\u%04x", 0xd800 + (cp >> 10),
                             0xdc00 + (cp & 0x3ff));
                } else {
                    snprintf(esc, sizeof esc, "\\u%04x", cp);
                }
                e = esc;
            }
        }
        if (!e)
            continue;
        fx_jbuf_put(b, s + run, i - run);
        fx_jbuf_puts(b, e);
        i += adv - 1;
        run = i + 1;
    }
    fx_jbuf_put(b, s + run, n - run);
    fx_jbuf_putc(b, '"');
}

static void json_newline(struct fx_jbuf *b, const struct fx_jjson_opts *o, int level) {
    if (!o->indent)
        return;
    fx_jbuf_putc(b, '\n');
    for (int i = 0; i < level; i++)
        fx_jbuf_put(b, o->indent, o->indent_len);
}

struct json_key {
    struct fx_jv key_str; /* the key as JSON text wants it (a string) */
    const struct fx_jentry *e;
};

static int json_key_cmp(const void *pa, const void *pb) {
    const struct fx_jv *a = &((const struct json_key *)pa)->key_str;
    const struct fx_jv *b = &((const struct json_key *)pb)->key_str;
    size_t n = a->len < b->len ? a->len : b->len;
    int c = memcmp(a->u.s, b->u.s, n);
    return c ? c : (a->len > b->len) - (a->len < b->len);
}

static fx_status json_value(struct fx_jbuf *b, struct fx_jv v, const struct fx_jjson_opts *o,
                            int level, char *msg, size_t msg_size);

static fx_status json_dict(struct fx_jbuf *b, const struct fx_jdict *d,
                           const struct fx_jjson_opts *o, int level, char *msg, size_t msg_size) {
    if (d->n == 0) {
        fx_jbuf_puts(b, "{}");
        return FX_OK;
    }
    struct json_key *keys = malloc(d->n * sizeof *keys);
    if (!keys)
        return FX_ERR_NOMEM;
    /* Python turns int, float, bool and None keys into strings; other keys are errors. */
    char(*num)[40] = malloc(d->n * sizeof *num);
    if (!num) {
        free(keys);
        return FX_ERR_NOMEM;
    }
    fx_status st = FX_OK;
    for (uint32_t i = 0; i < d->n; i++) {
        struct fx_jv k = d->e[i].key;
        keys[i].e = &d->e[i];
        if (k.kind == FX_JV_STR) {
            keys[i].key_str = k;
            continue;
        }
        struct fx_jbuf tmp = {.limit = sizeof num[i] - 1};
        if (k.kind == FX_JV_BOOL)
            fx_jbuf_puts(&tmp, k.u.b ? "true" : "false");
        else if (k.kind == FX_JV_NONE)
            fx_jbuf_puts(&tmp, "null");
        else if (k.kind == FX_JV_INT || k.kind == FX_JV_FLOAT)
            fx_jv_write_str(&tmp, k);
        else {
            snprintf(msg, msg_size, "keys must be str, int, float, bool or None, not %s",
                     fx_jv_type_name(k));
            st = FX_ERR_FORMAT;
        }
        size_t len = tmp.err == FX_OK ? tmp.len : 0;
        memcpy(num[i], tmp.p ? tmp.p : "", len);
        free(tmp.p);
        keys[i].key_str = fx_jv_strref(num[i], (uint32_t)len);
        if (st != FX_OK)
            goto done;
    }
    if (o->sort_keys)
        qsort(keys, d->n, sizeof *keys, json_key_cmp);
    fx_jbuf_putc(b, '{');
    for (uint32_t i = 0; i < d->n && st == FX_OK; i++) {
        if (i)
            fx_jbuf_put(b, o->item_sep, o->item_sep_len);
        json_newline(b, o, level + 1);
        json_put_string(b, keys[i].key_str.u.s, keys[i].key_str.len, o->ensure_ascii);
        fx_jbuf_put(b, o->key_sep, o->key_sep_len);
        st = json_value(b, keys[i].e->val, o, level + 1, msg, msg_size);
    }
    json_newline(b, o, level);
    fx_jbuf_putc(b, '}');
done:
    free(num);
    free(keys);
    return st;
}

static fx_status json_value(struct fx_jbuf *b, struct fx_jv v, const struct fx_jjson_opts *o,
                            int level, char *msg, size_t msg_size) {
    if (level > MAX_VALUE_DEPTH) {
        snprintf(msg, msg_size, "value nested too deeply (circular reference?)");
        return FX_ERR_FORMAT;
    }
    switch (v.kind) {
    case FX_JV_NONE:
        fx_jbuf_puts(b, "null");
        return FX_OK;
    case FX_JV_BOOL:
        fx_jbuf_puts(b, v.u.b ? "true" : "false");
        return FX_OK;
    case FX_JV_INT:
        fx_jbuf_printf(b, "%lld", (long long)v.u.i);
        return FX_OK;
    case FX_JV_FLOAT:
        if (isnan(v.u.f))
            fx_jbuf_puts(b, "NaN");
        else if (isinf(v.u.f))
            fx_jbuf_puts(b, v.u.f < 0 ? "-Infinity" : "Infinity");
        else
            fx_jv_write_float(b, v.u.f);
        return FX_OK;
    case FX_JV_STR:
        json_put_string(b, v.u.s, v.len, o->ensure_ascii);
        return FX_OK;
    case FX_JV_LIST: {
        const struct fx_jlist *l = v.u.list;
        if (v.sub == FX_JL_ITER) {
            snprintf(msg, msg_size, "Object of type generator is not JSON serializable");
            return FX_ERR_FORMAT;
        }
        if (l->n == 0) {
            fx_jbuf_puts(b, "[]");
            return FX_OK;
        }
        fx_jbuf_putc(b, '[');
        for (uint32_t i = 0; i < l->n; i++) {
            if (i)
                fx_jbuf_put(b, o->item_sep, o->item_sep_len);
            json_newline(b, o, level + 1);
            fx_status st = json_value(b, l->v[i], o, level + 1, msg, msg_size);
            if (st != FX_OK)
                return st;
        }
        json_newline(b, o, level);
        fx_jbuf_putc(b, ']');
        return FX_OK;
    }
    case FX_JV_DICT:
        return json_dict(b, v.u.dict, o, level, msg, msg_size);
    default:
        snprintf(msg, msg_size, "Object of type %s is not JSON serializable", fx_jv_type_name(v));
        return FX_ERR_FORMAT;
    }
}

fx_status fx_jv_write_json(struct fx_jbuf *b, struct fx_jv v, const struct fx_jjson_opts *o,
                           char *msg, size_t msg_size) {
    struct fx_jjson_opts opts = *o;
    if (!opts.item_sep) {
        opts.item_sep = opts.indent ? "," : ", ";
        opts.item_sep_len = strlen(opts.item_sep);
    }
    if (!opts.key_sep) {
        opts.key_sep = ": ";
        opts.key_sep_len = 2;
    }
    return json_value(b, v, &opts, 0, msg, msg_size);
}

fx_status fx_jv_from_json(struct fx_jarena *a, const void *json, struct fx_jv *out) {
    const json_t *j = json;
    switch (json_typeof(j)) {
    case JSON_NULL:
        *out = fx_jv_none();
        return FX_OK;
    case JSON_TRUE:
        *out = fx_jv_bool(true);
        return FX_OK;
    case JSON_FALSE:
        *out = fx_jv_bool(false);
        return FX_OK;
    case JSON_INTEGER:
        *out = fx_jv_int((int64_t)json_integer_value(j));
        return FX_OK;
    case JSON_REAL:
        *out = fx_jv_float(json_real_value(j));
        return FX_OK;
    case JSON_STRING:
        return fx_jv_str_copy(a, json_string_value(j), json_string_length(j), out);
    case JSON_ARRAY: {
        size_t n = json_array_size(j);
        struct fx_jlist *l = fx_jlist_new(a, n);
        if (!l)
            return a->fail != FX_OK ? a->fail : FX_ERR_CAPACITY;
        for (size_t i = 0; i < n; i++) {
            fx_status st = fx_jv_from_json(a, json_array_get(j, i), &l->v[i]);
            if (st != FX_OK)
                return st;
        }
        l->n = (uint32_t)n;
        *out = fx_jv_list(l, false);
        return FX_OK;
    }
    case JSON_OBJECT: {
        struct fx_jdict *d = fx_jdict_new(a, json_object_size(j));
        if (!d)
            return a->fail != FX_OK ? a->fail : FX_ERR_CAPACITY;
        const char *key;
        json_t *val;
        json_object_foreach((json_t *)j, key, val) {
            struct fx_jv k, v;
            fx_status st = fx_jv_str_copy(a, key, strlen(key), &k);
            if (st == FX_OK)
                st = fx_jv_from_json(a, val, &v);
            if (st == FX_OK && !fx_jdict_set(a, d, k, v))
                st = a->fail != FX_OK ? a->fail : FX_ERR_CAPACITY;
            if (st != FX_OK)
                return st;
        }
        *out = (struct fx_jv){.kind = FX_JV_DICT, .u.dict = d};
        return FX_OK;
    }
    }
    return FX_ERR_FORMAT;
}

/* ---- UTF-8 --------------------------------------------------------------------------------- */

size_t fx_jutf8_count(const char *s, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        c += ((unsigned char)s[i] & 0xc0) != 0x80;
    return c;
}

size_t fx_jutf8_offset(const char *s, size_t n, size_t i) {
    size_t seen = 0;
    for (size_t k = 0; k < n; k++) {
        if (((unsigned char)s[k] & 0xc0) != 0x80) {
            if (seen == i)
                return k;
            seen++;
        }
    }
    return n;
}

/* Python's str.isspace code points beyond ASCII. */
static bool unicode_space(uint32_t cp) {
    return cp == 0x85 || cp == 0xa0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) ||
           cp == 0x2028 || cp == 0x2029 || cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

static bool ascii_space(unsigned char ch) {
    return ch == ' ' || (ch >= '\t' && ch <= '\r') || (ch >= 0x1c && ch <= 0x1f);
}

size_t fx_jutf8_space_fwd(const char *s, size_t n) {
    if (n == 0)
        return 0;
    unsigned char c0 = (unsigned char)s[0];
    if (c0 < 0x80)
        return ascii_space(c0) ? 1 : 0;
    if (c0 == 0xc2 && n >= 2)
        return unicode_space((unsigned char)s[1]) ? 2 : 0;
    if ((c0 == 0xe1 || c0 == 0xe2 || c0 == 0xe3) && n >= 3) {
        uint32_t cp = ((uint32_t)(c0 & 0x0f) << 12) | ((uint32_t)(s[1] & 0x3f) << 6) |
                      (uint32_t)(s[2] & 0x3f);
        return unicode_space(cp) ? 3 : 0;
    }
    return 0;
}

size_t fx_jutf8_space_back(const char *s, size_t n) {
    if (n == 0)
        return 0;
    if ((unsigned char)s[n - 1] < 0x80)
        return ascii_space((unsigned char)s[n - 1]) ? 1 : 0;
    for (size_t len = 2; len <= 3 && len <= n; len++)
        if (fx_jutf8_space_fwd(s + n - len, len) == len)
            return len;
    return 0;
}
