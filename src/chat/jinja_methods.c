/* Methods and global functions for templates: str methods (split, strip, startswith, ...),
 * dict methods (items, keys, values, get), loop attributes and loop.cycle, and the globals
 * range, namespace, dict, raise_exception and strftime_now. Case mapping (upper, lower, title,
 * capitalize) and the is* predicates cover ASCII letters; other characters pass unchanged. */
#include "chat/jinja.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TRY(expr)                                                                                  \
    do {                                                                                           \
        fx_status st_ = (expr);                                                                    \
        if (st_ != FX_OK)                                                                          \
            return st_;                                                                            \
    } while (0)

/* Jinja's sandbox refuses ranges longer than this. */
#define MAX_RANGE 100000

enum fx_jmeth {
    M_CAPITALIZE,
    M_COUNT,
    M_ENDSWITH,
    M_FIND,
    M_INDEX,
    M_ISALNUM,
    M_ISALPHA,
    M_ISDIGIT,
    M_ISLOWER,
    M_ISSPACE,
    M_ISUPPER,
    M_JOIN,
    M_LOWER,
    M_LSTRIP,
    M_REMOVEPREFIX,
    M_REMOVESUFFIX,
    M_REPLACE,
    M_RFIND,
    M_RSPLIT,
    M_RSTRIP,
    M_SPLIT,
    M_SPLITLINES,
    M_STARTSWITH,
    M_STRIP,
    M_TITLE,
    M_UPPER,
    M_STR_COUNT_, /* end of str methods */
    M_ITEMS = M_STR_COUNT_,
    M_KEYS,
    M_VALUES,
    M_GET,
    M_DICT_MUTATOR, /* pop, update, ...: exist, but the immutable sandbox refuses them */
    M_CYCLE,
};

static const char *const str_methods[] = {
    [M_CAPITALIZE] = "capitalize",
    [M_COUNT] = "count",
    [M_ENDSWITH] = "endswith",
    [M_FIND] = "find",
    [M_INDEX] = "index",
    [M_ISALNUM] = "isalnum",
    [M_ISALPHA] = "isalpha",
    [M_ISDIGIT] = "isdigit",
    [M_ISLOWER] = "islower",
    [M_ISSPACE] = "isspace",
    [M_ISUPPER] = "isupper",
    [M_JOIN] = "join",
    [M_LOWER] = "lower",
    [M_LSTRIP] = "lstrip",
    [M_REMOVEPREFIX] = "removeprefix",
    [M_REMOVESUFFIX] = "removesuffix",
    [M_REPLACE] = "replace",
    [M_RFIND] = "rfind",
    [M_RSPLIT] = "rsplit",
    [M_RSTRIP] = "rstrip",
    [M_SPLIT] = "split",
    [M_SPLITLINES] = "splitlines",
    [M_STARTSWITH] = "startswith",
    [M_STRIP] = "strip",
    [M_TITLE] = "title",
    [M_UPPER] = "upper",
};

static const char *const dict_mutators[] = {"pop",        "popitem", "update",  "clear",
                                            "setdefault", "copy",    "fromkeys"};

static bool name_eq(const char *a, const char *b, size_t len) {
    return strlen(a) == len && memcmp(a, b, len) == 0;
}

static bool make_method(struct fx_jctx *c, struct fx_jv self, int id, struct fx_jv *out) {
    struct fx_jmethod *m = fx_jarena_alloc(c->arena, sizeof *m);
    if (!m)
        return false;
    m->self = self;
    m->id = (uint16_t)id;
    *out = (struct fx_jv){.kind = FX_JV_METHOD, .u.method = m};
    return true;
}

bool fx_jinja_method(struct fx_jctx *c, struct fx_jv self, const char *name, size_t len,
                     struct fx_jv *out) {
    int id = -1;
    if (self.kind == FX_JV_STR) {
        for (int i = 0; i < M_STR_COUNT_; i++)
            if (name_eq(str_methods[i], name, len))
                id = i;
    } else if (self.kind == FX_JV_DICT) {
        if (name_eq("items", name, len))
            id = M_ITEMS;
        else if (name_eq("keys", name, len))
            id = M_KEYS;
        else if (name_eq("values", name, len))
            id = M_VALUES;
        else if (name_eq("get", name, len))
            id = M_GET;
        for (size_t i = 0; i < sizeof dict_mutators / sizeof dict_mutators[0]; i++)
            if (name_eq(dict_mutators[i], name, len))
                id = M_DICT_MUTATOR;
    } else if (self.kind == FX_JV_LOOP) {
        const struct fx_jloop *l = self.u.loop;
        if (name_eq("index0", name, len))
            *out = fx_jv_int(l->index0);
        else if (name_eq("index", name, len))
            *out = fx_jv_int(l->index0 + 1);
        else if (name_eq("revindex", name, len))
            *out = fx_jv_int(l->length - l->index0);
        else if (name_eq("revindex0", name, len))
            *out = fx_jv_int(l->length - l->index0 - 1);
        else if (name_eq("first", name, len))
            *out = fx_jv_bool(l->index0 == 0);
        else if (name_eq("last", name, len))
            *out = fx_jv_bool(l->index0 == l->length - 1);
        else if (name_eq("length", name, len))
            *out = fx_jv_int(l->length);
        else if (name_eq("depth", name, len))
            *out = fx_jv_int(1);
        else if (name_eq("depth0", name, len))
            *out = fx_jv_int(0);
        else if (name_eq("previtem", name, len))
            *out = l->index0 > 0 ? l->items[l->index0 - 1] : fx_jv_undef();
        else if (name_eq("nextitem", name, len))
            *out = l->index0 + 1 < l->length ? l->items[l->index0 + 1] : fx_jv_undef();
        else if (name_eq("cycle", name, len))
            id = M_CYCLE;
        else
            return false;
        if (id < 0)
            return true;
    }
    if (id < 0)
        return false;
    if (!make_method(c, self, id, out))
        *out = fx_jv_undef(); /* out of memory surfaces at the next allocation */
    return true;
}

/* ---- string helpers ------------------------------------------------------------------------ */

static bool is_lower(char ch) {
    return ch >= 'a' && ch <= 'z';
}
static bool is_upper(char ch) {
    return ch >= 'A' && ch <= 'Z';
}
static char to_upper(char ch) {
    return is_lower(ch) ? (char)(ch - 32) : ch;
}
static char to_lower(char ch) {
    return is_upper(ch) ? (char)(ch + 32) : ch;
}

static fx_status new_str(struct fx_jctx *c, uint32_t pos, size_t len, char **p, struct fx_jv *out) {
    if (len > UINT32_MAX)
        return fx_jinja_fail(c, pos, FX_ERR_CAPACITY, "string too long");
    *p = fx_jarena_alloc(c->arena, len ? len : 1);
    if (!*p)
        return fx_jinja_fail_mem(c, pos);
    *out = fx_jv_strref(*p, (uint32_t)len);
    return FX_OK;
}

/* The code points of a str argument of strip() as a byte-sequence set. */
static bool in_chars(const char *s, size_t n, const char *set, size_t set_n) {
    /* n is one UTF-8 sequence; membership of that sequence in set. */
    for (size_t i = 0; i < set_n;) {
        size_t j = i + 1;
        while (j < set_n && ((unsigned char)set[j] & 0xc0) == 0x80)
            j++;
        if (j - i == n && memcmp(set + i, s, n) == 0)
            return true;
        i = j;
    }
    return false;
}

static size_t seq_len_fwd(const char *s, size_t n) {
    size_t j = 1;
    while (j < n && ((unsigned char)s[j] & 0xc0) == 0x80)
        j++;
    return j;
}

static size_t seq_len_back(const char *s, size_t n) {
    size_t j = 1;
    while (j < n && ((unsigned char)s[n - j] & 0xc0) == 0x80)
        j++;
    return j;
}

/* strip/lstrip/rstrip with chars NULL meaning whitespace. Shares the bytes. */
static struct fx_jv strip(struct fx_jv s, const struct fx_jv *chars, bool left, bool right) {
    const char *p = s.u.s;
    size_t n = s.len;
    while (left && n) {
        size_t k = chars ? seq_len_fwd(p, n) : fx_jutf8_space_fwd(p, n);
        if (!k || (chars && !in_chars(p, k, chars->u.s, chars->len)))
            break;
        p += k;
        n -= k;
    }
    while (right && n) {
        size_t k = chars ? seq_len_back(p, n) : fx_jutf8_space_back(p, n);
        if (!k || (chars && !in_chars(p + n - k, k, chars->u.s, chars->len)))
            break;
        n -= k;
    }
    return fx_jv_strref(p, (uint32_t)n);
}

static const char *find_bytes(const char *h, size_t hn, const char *nd, size_t nn) {
    if (nn == 0)
        return h;
    if (nn > hn)
        return NULL;
    for (const char *p = h, *end = h + hn - nn; p <= end; p++) {
        p = memchr(p, nd[0], (size_t)(end - p) + 1);
        if (!p)
            return NULL;
        if (memcmp(p, nd, nn) == 0)
            return p;
    }
    return NULL;
}

static const char *rfind_bytes(const char *h, size_t hn, const char *nd, size_t nn) {
    if (nn > hn)
        return NULL;
    for (size_t i = hn - nn + 1; i-- > 0;)
        if (memcmp(h + i, nd, nn) == 0)
            return h + i;
    return NULL;
}

static fx_status push_str(struct fx_jctx *c, uint32_t pos, struct fx_jlist *l, const char *p,
                          size_t n) {
    if (!fx_jlist_push(c->arena, l, fx_jv_strref(p, (uint32_t)n)))
        return fx_jinja_fail_mem(c, pos);
    return FX_OK;
}

/* str.split / str.rsplit. Parts share the bytes of s. */
static fx_status split(struct fx_jctx *c, uint32_t pos, struct fx_jv s, struct fx_jv sep,
                       int64_t maxsplit, bool from_right, struct fx_jv *out) {
    struct fx_jlist *l = fx_jlist_new(c->arena, 4);
    if (!l)
        return fx_jinja_fail_mem(c, pos);
    const char *p = s.u.s;
    size_t n = s.len;
    if (sep.kind == FX_JV_STR && sep.len == 0)
        return fx_jinja_fail(c, pos, FX_ERR_FORMAT, "split(): empty separator");
    if (sep.kind == FX_JV_STR) {
        /* Collect from the chosen side; rsplit's parts are reversed at the end. */
        while (maxsplit != 0) {
            const char *at = from_right ? rfind_bytes(p, n, sep.u.s, sep.len)
                                        : find_bytes(p, n, sep.u.s, sep.len);
            if (!at)
                break;
            if (from_right) {
                size_t tail = (size_t)(p + n - (at + sep.len));
                TRY(push_str(c, pos, l, at + sep.len, tail));
                n = (size_t)(at - p);
            } else {
                TRY(push_str(c, pos, l, p, (size_t)(at - p)));
                n -= (size_t)(at - p) + sep.len;
                p = at + sep.len;
            }
            if (maxsplit > 0)
                maxsplit--;
        }
        TRY(push_str(c, pos, l, p, n));
    } else {
        /* Runs of whitespace separate; no empty parts; the remainder keeps inner spaces. */
        for (;;) {
            struct fx_jv rest = strip(fx_jv_strref(p, (uint32_t)n), NULL, !from_right, from_right);
            p = rest.u.s;
            n = rest.len;
            if (n == 0)
                break;
            if (maxsplit == 0) {
                TRY(push_str(c, pos, l, p, n));
                break;
            }
            size_t k, i;
            if (from_right) {
                i = n;
                while (i > 0 && fx_jutf8_space_back(p, i) == 0)
                    i -= seq_len_back(p, i);
                TRY(push_str(c, pos, l, p + i, n - i));
                n = i;
            } else {
                i = 0;
                while (i < n && (k = fx_jutf8_space_fwd(p + i, n - i)) == 0)
                    i += seq_len_fwd(p + i, n - i);
                TRY(push_str(c, pos, l, p, i));
                p += i;
                n -= i;
            }
            if (maxsplit > 0)
                maxsplit--;
        }
    }
    if (from_right)
        for (uint32_t i = 0; i < l->n / 2; i++) {
            struct fx_jv t = l->v[i];
            l->v[i] = l->v[l->n - 1 - i];
            l->v[l->n - 1 - i] = t;
        }
    *out = fx_jv_list(l, false);
    return FX_OK;
}

/* Python's line boundaries: \n \r \r\n \v \f \x1c \x1d \x1e \x85 \u2028 \u2029. */
static size_t line_break(const char *s, size_t n) {
    unsigned char ch = (unsigned char)s[0];
    if (ch == '\r')
        return n > 1 && s[1] == '\n' ? 2 : 1;
    if (ch == '\n' || ch == '\v' || ch == '\f' || (ch >= 0x1c && ch <= 0x1e))
        return 1;
    if (ch == 0xc2 && n > 1 && (unsigned char)s[1] == 0x85)
        return 2;
    if (ch == 0xe2 && n > 2 && (unsigned char)s[1] == 0x80 &&
        ((unsigned char)s[2] == 0xa8 || (unsigned char)s[2] == 0xa9))
        return 3;
    return 0;
}

static fx_status splitlines(struct fx_jctx *c, uint32_t pos, struct fx_jv s, bool keepends,
                            struct fx_jv *out) {
    struct fx_jlist *l = fx_jlist_new(c->arena, 4);
    if (!l)
        return fx_jinja_fail_mem(c, pos);
    size_t start = 0;
    for (size_t i = 0; i < s.len;) {
        size_t k = line_break(s.u.s + i, s.len - i);
        if (!k) {
            i++;
            continue;
        }
        TRY(push_str(c, pos, l, s.u.s + start, (keepends ? i + k : i) - start));
        i += k;
        start = i;
    }
    if (start < s.len)
        TRY(push_str(c, pos, l, s.u.s + start, s.len - start));
    *out = fx_jv_list(l, false);
    return FX_OK;
}

static fx_status replace(struct fx_jctx *c, uint32_t pos, struct fx_jv s, struct fx_jv old,
                         struct fx_jv rep, int64_t count, struct fx_jv *out) {
    size_t mark = c->scratch.len;
    struct fx_jbuf *b = &c->scratch;
    const char *p = s.u.s;
    size_t n = s.len;
    if (old.len == 0) {
        /* Python inserts the replacement before every character and at the end. */
        while (count != 0 && b->err == FX_OK) {
            fx_jbuf_put(b, rep.u.s, rep.len);
            if (count > 0)
                count--;
            if (n == 0)
                break;
            size_t k = seq_len_fwd(p, n);
            fx_jbuf_put(b, p, k);
            p += k;
            n -= k;
        }
        fx_jbuf_put(b, p, n);
        return fx_jinja_finish_scratch(c, pos, mark, out);
    }
    while (count != 0 && b->err == FX_OK) {
        const char *at = find_bytes(p, n, old.u.s, old.len);
        if (!at)
            break;
        fx_jbuf_put(b, p, (size_t)(at - p));
        fx_jbuf_put(b, rep.u.s, rep.len);
        n -= (size_t)(at - p) + old.len;
        p = at + old.len;
        if (count > 0)
            count--;
    }
    fx_jbuf_put(b, p, n);
    return fx_jinja_finish_scratch(c, pos, mark, out);
}

/* upper, lower, capitalize, title on ASCII letters. */
static fx_status map_case(struct fx_jctx *c, uint32_t pos, int id, struct fx_jv s,
                          struct fx_jv *out) {
    char *p;
    TRY(new_str(c, pos, s.len, &p, out));
    bool prev_cased = false;
    for (uint32_t i = 0; i < s.len; i++) {
        char ch = s.u.s[i];
        switch (id) {
        case M_UPPER:
            p[i] = to_upper(ch);
            break;
        case M_LOWER:
            p[i] = to_lower(ch);
            break;
        case M_CAPITALIZE:
            p[i] = i == 0 ? to_upper(ch) : to_lower(ch);
            break;
        default: /* title: a letter after a cased character is lowered, others raised */
            p[i] = prev_cased ? to_lower(ch) : to_upper(ch);
            prev_cased = is_lower(ch) || is_upper(ch) || (unsigned char)ch >= 0x80;
        }
    }
    return FX_OK;
}

static fx_status need_str_arg(struct fx_jctx *c, uint32_t pos, const char *what, struct fx_jv v) {
    if (v.kind == FX_JV_STR)
        return FX_OK;
    return fx_jinja_fail(c, pos, FX_ERR_FORMAT, "%s expects a string, not '%s'", what,
                         fx_jv_type_name(v));
}

/* startswith / endswith with a string or a tuple of strings. */
static fx_status affix(struct fx_jctx *c, uint32_t pos, struct fx_jv s, struct fx_jv arg,
                       bool start, bool *out) {
    const struct fx_jv *cands = &arg;
    size_t n = 1;
    if (arg.kind == FX_JV_LIST) {
        cands = arg.u.list->v;
        n = arg.u.list->n;
    }
    *out = false;
    for (size_t i = 0; i < n; i++) {
        TRY(need_str_arg(c, pos, start ? "startswith()" : "endswith()", cands[i]));
        const struct fx_jv *a = &cands[i];
        if (a->len <= s.len && memcmp(start ? s.u.s : s.u.s + s.len - a->len, a->u.s, a->len) == 0)
            *out = true;
    }
    return FX_OK;
}

static fx_status call_str(struct fx_jctx *c, uint32_t pos, int id, struct fx_jv s,
                          const struct fx_jargs *args, struct fx_jv *out) {
    static const char *const one[] = {"x"};
    static const char *const split_names[] = {"sep", "maxsplit"};
    static const char *const replace_names[] = {"old", "new", "count"};
    static const char *const strip_names[] = {"chars"};
    static const char *const lines_names[] = {"keepends"};
    struct fx_jv a[3];
    char what[40];
    snprintf(what, sizeof what, "str.%s()", str_methods[id]);
    switch (id) {
    case M_UPPER:
    case M_LOWER:
    case M_CAPITALIZE:
    case M_TITLE:
        TRY(fx_jinja_bind(c, pos, what, args, NULL, 0, a));
        return map_case(c, pos, id, s, out);
    case M_STRIP:
    case M_LSTRIP:
    case M_RSTRIP:
        TRY(fx_jinja_bind(c, pos, what, args, strip_names, 1, a));
        if (a[0].kind != FX_JV_UNDEF && a[0].kind != FX_JV_NONE)
            TRY(need_str_arg(c, pos, what, a[0]));
        *out = strip(s, a[0].kind == FX_JV_STR ? &a[0] : NULL, id != M_RSTRIP, id != M_LSTRIP);
        return FX_OK;
    case M_SPLIT:
    case M_RSPLIT: {
        TRY(fx_jinja_bind(c, pos, what, args, split_names, 2, a));
        if (a[0].kind != FX_JV_UNDEF && a[0].kind != FX_JV_NONE)
            TRY(need_str_arg(c, pos, what, a[0]));
        int64_t maxsplit = a[1].kind == FX_JV_INT ? a[1].u.i : -1;
        return split(c, pos, s, a[0], maxsplit < 0 ? -1 : maxsplit, id == M_RSPLIT, out);
    }
    case M_SPLITLINES:
        TRY(fx_jinja_bind(c, pos, what, args, lines_names, 1, a));
        return splitlines(c, pos, s, fx_jv_truthy(a[0]), out);
    case M_STARTSWITH:
    case M_ENDSWITH: {
        TRY(fx_jinja_bind(c, pos, what, args, one, 1, a));
        bool r;
        TRY(affix(c, pos, s, a[0], id == M_STARTSWITH, &r));
        *out = fx_jv_bool(r);
        return FX_OK;
    }
    case M_REPLACE:
        TRY(fx_jinja_bind(c, pos, what, args, replace_names, 3, a));
        TRY(need_str_arg(c, pos, what, a[0]));
        TRY(need_str_arg(c, pos, what, a[1]));
        return replace(c, pos, s, a[0], a[1], a[2].kind == FX_JV_INT ? a[2].u.i : -1, out);
    case M_REMOVEPREFIX:
    case M_REMOVESUFFIX: {
        TRY(fx_jinja_bind(c, pos, what, args, one, 1, a));
        TRY(need_str_arg(c, pos, what, a[0]));
        bool has;
        TRY(affix(c, pos, s, a[0], id == M_REMOVEPREFIX, &has));
        *out = s;
        if (has && id == M_REMOVEPREFIX)
            *out = fx_jv_strref(s.u.s + a[0].len, s.len - a[0].len);
        else if (has)
            *out = fx_jv_strref(s.u.s, s.len - a[0].len);
        return FX_OK;
    }
    case M_FIND:
    case M_RFIND:
    case M_INDEX:
    case M_COUNT: {
        TRY(fx_jinja_bind(c, pos, what, args, one, 1, a));
        TRY(need_str_arg(c, pos, what, a[0]));
        if (id == M_COUNT) {
            int64_t count = 0;
            if (a[0].len == 0) {
                count = (int64_t)fx_jutf8_count(s.u.s, s.len) + 1;
            } else {
                const char *p = s.u.s, *at;
                size_t n = s.len;
                while ((at = find_bytes(p, n, a[0].u.s, a[0].len))) {
                    count++;
                    n -= (size_t)(at - p) + a[0].len;
                    p = at + a[0].len;
                }
            }
            *out = fx_jv_int(count);
            return FX_OK;
        }
        const char *at = id == M_RFIND ? rfind_bytes(s.u.s, s.len, a[0].u.s, a[0].len)
                                       : find_bytes(s.u.s, s.len, a[0].u.s, a[0].len);
        if (!at && id == M_INDEX)
            return fx_jinja_fail(c, pos, FX_ERR_FORMAT, "str.index(): substring not found");
        *out = fx_jv_int(at ? (int64_t)fx_jutf8_count(s.u.s, (size_t)(at - s.u.s)) : -1);
        return FX_OK;
    }
    case M_JOIN: {
        TRY(fx_jinja_bind(c, pos, what, args, one, 1, a));
        const struct fx_jv *items;
        size_t n;
        TRY(fx_jinja_iterate(c, pos, a[0], &items, &n));
        size_t mark = c->scratch.len;
        for (size_t i = 0; i < n; i++) {
            if (items[i].kind != FX_JV_STR) {
                c->scratch.len = mark;
                return fx_jinja_fail(c, pos, FX_ERR_FORMAT,
                                     "str.join(): item %zu is '%s', not a string", i,
                                     fx_jv_type_name(items[i]));
            }
            if (i)
                fx_jbuf_put(&c->scratch, s.u.s, s.len);
            fx_jbuf_put(&c->scratch, items[i].u.s, items[i].len);
        }
        return fx_jinja_finish_scratch(c, pos, mark, out);
    }
    default: { /* the is* predicates */
        TRY(fx_jinja_bind(c, pos, what, args, NULL, 0, a));
        bool r = s.len > 0, cased = false;
        for (uint32_t i = 0; i < s.len && r; i++) {
            char ch = s.u.s[i];
            bool alpha = is_lower(ch) || is_upper(ch), digit = ch >= '0' && ch <= '9';
            cased |= alpha;
            switch (id) {
            case M_ISALNUM:
                r = alpha || digit;
                break;
            case M_ISALPHA:
                r = alpha;
                break;
            case M_ISDIGIT:
                r = digit;
                break;
            case M_ISSPACE:
                r = fx_jutf8_space_fwd(s.u.s + i, s.len - i) > 0;
                break;
            case M_ISLOWER:
                r = !is_upper(ch);
                break;
            case M_ISUPPER:
                r = !is_lower(ch);
                break;
            }
        }
        if (id == M_ISLOWER || id == M_ISUPPER)
            r = r && cased;
        *out = fx_jv_bool(r);
        return FX_OK;
    }
    }
}

fx_status fx_jinja_str_method(struct fx_jctx *c, uint32_t pos, const char *name, struct fx_jv self,
                              const struct fx_jargs *args, struct fx_jv *out) {
    for (int i = 0; i < M_STR_COUNT_; i++)
        if (strcmp(str_methods[i], name) == 0)
            return call_str(c, pos, i, self, args, out);
    return fx_jinja_fail(c, pos, FX_ERR_FORMAT, "str has no method '%s'", name);
}

/* ---- dict methods and loop.cycle ------------------------------------------------------------ */

static fx_status call_dict(struct fx_jctx *c, uint32_t pos, int id, struct fx_jv self,
                           const struct fx_jargs *args, struct fx_jv *out) {
    static const char *const get_names[] = {"key", "default"};
    const struct fx_jdict *d = self.u.dict;
    struct fx_jv a[2];
    if (id == M_GET) {
        TRY(fx_jinja_bind(c, pos, "dict.get()", args, get_names, 2, a));
        const struct fx_jv *v = fx_jdict_get(d, a[0]);
        *out = v ? *v : a[1].kind == FX_JV_UNDEF ? fx_jv_none() : a[1];
        return FX_OK;
    }
    if (id == M_DICT_MUTATOR)
        return fx_jinja_fail(c, pos, FX_ERR_FORMAT,
                             "dicts cannot be modified in a template (immutable sandbox)");
    TRY(fx_jinja_bind(c, pos, "dict method", args, NULL, 0, a));
    struct fx_jlist *l = fx_jlist_new(c->arena, d->n);
    if (!l)
        return fx_jinja_fail_mem(c, pos);
    for (uint32_t i = 0; i < d->n; i++) {
        if (id == M_KEYS) {
            l->v[i] = d->e[i].key;
        } else if (id == M_VALUES) {
            l->v[i] = d->e[i].val;
        } else {
            struct fx_jlist *pair = fx_jlist_new(c->arena, 2);
            if (!pair)
                return fx_jinja_fail_mem(c, pos);
            pair->v[0] = d->e[i].key;
            pair->v[1] = d->e[i].val;
            pair->n = 2;
            l->v[i] = fx_jv_list(pair, true);
        }
    }
    l->n = d->n;
    *out = fx_jv_list(l, false);
    return FX_OK;
}

/* ---- global functions ---------------------------------------------------------------------- */

static const char *const global_names[FX_JF_COUNT] = {
    [FX_JF_RANGE] = "range",
    [FX_JF_NAMESPACE] = "namespace",
    [FX_JF_DICT] = "dict",
    [FX_JF_RAISE_EXCEPTION] = "raise_exception",
    [FX_JF_STRFTIME_NOW] = "strftime_now",
};

bool fx_jinja_global(const char *name, size_t len, struct fx_jv *out) {
    for (int i = 0; i < FX_JF_COUNT; i++) {
        if (name_eq(global_names[i], name, len)) {
            *out = (struct fx_jv){.kind = FX_JV_FUNC, .sub = (uint8_t)i};
            return true;
        }
    }
    return false;
}

static fx_status call_range(struct fx_jctx *c, uint32_t pos, const struct fx_jargs *args,
                            struct fx_jv *out) {
    if (args->n_kw || args->n_pos < 1 || args->n_pos > 3)
        return fx_jinja_fail(c, pos, FX_ERR_FORMAT, "range() takes 1 to 3 positional arguments");
    int64_t v[3] = {0, 0, 1};
    for (uint32_t i = 0; i < args->n_pos; i++) {
        struct fx_jv a = args->pos[i];
        if (a.kind != FX_JV_INT && a.kind != FX_JV_BOOL)
            return fx_jinja_fail(c, pos, FX_ERR_FORMAT,
                                 "range() arguments must be integers, not '%s'",
                                 fx_jv_type_name(a));
        v[args->n_pos == 1 ? 1 : i] = a.kind == FX_JV_INT ? a.u.i : a.u.b;
    }
    int64_t start = v[0], stop = v[1], step = v[2];
    if (step == 0)
        return fx_jinja_fail(c, pos, FX_ERR_FORMAT, "range() step must not be zero");
    /* Counted in unsigned arithmetic, which cannot overflow for any int64 bounds. */
    uint64_t n = 0;
    if (step > 0 && start < stop)
        n = ((uint64_t)stop - (uint64_t)start - 1) / (uint64_t)step + 1;
    else if (step < 0 && start > stop)
        n = ((uint64_t)start - (uint64_t)stop - 1) / ((uint64_t)0 - (uint64_t)step) + 1;
    if (n > MAX_RANGE)
        return fx_jinja_fail(c, pos, FX_ERR_CAPACITY,
                             "range of %llu items is too big (the sandbox allows %d)",
                             (unsigned long long)n, MAX_RANGE);
    struct fx_jlist *l = fx_jlist_new(c->arena, (size_t)n);
    if (!l)
        return fx_jinja_fail_mem(c, pos);
    for (uint64_t i = 0; i < n; i++)
        l->v[i] = fx_jv_int((int64_t)((uint64_t)start + i * (uint64_t)step));
    l->n = (uint32_t)n;
    *out = fx_jv_list(l, false);
    return FX_OK;
}

/* namespace(...) and dict(...): an optional mapping or list of pairs, then keyword arguments. */
static fx_status call_mapping(struct fx_jctx *c, uint32_t pos, bool ns, const struct fx_jargs *args,
                              struct fx_jv *out) {
    struct fx_jdict *d = fx_jdict_new(c->arena, 4);
    if (!d)
        return fx_jinja_fail_mem(c, pos);
    if (args->n_pos > 1)
        return fx_jinja_fail(c, pos, FX_ERR_FORMAT, "%s() takes at most 1 positional argument",
                             ns ? "namespace" : "dict");
    if (args->n_pos == 1) {
        struct fx_jv src = args->pos[0];
        if (src.kind == FX_JV_DICT || src.kind == FX_JV_NS) {
            for (uint32_t i = 0; i < src.u.dict->n; i++)
                if (!fx_jdict_set(c->arena, d, src.u.dict->e[i].key, src.u.dict->e[i].val))
                    return fx_jinja_fail_mem(c, pos);
        } else {
            const struct fx_jv *items;
            size_t n;
            TRY(fx_jinja_iterate(c, pos, src, &items, &n));
            for (size_t i = 0; i < n; i++) {
                if (items[i].kind != FX_JV_LIST || items[i].u.list->n != 2)
                    return fx_jinja_fail(c, pos, FX_ERR_FORMAT,
                                         "%s() needs a mapping or a list of pairs",
                                         ns ? "namespace" : "dict");
                if (!fx_jdict_set(c->arena, d, items[i].u.list->v[0], items[i].u.list->v[1]))
                    return fx_jinja_fail_mem(c, pos);
            }
        }
    }
    for (uint32_t k = 0; k < args->n_kw; k++) {
        const struct fx_jnode *kw = args->kw_node[k];
        if (!fx_jdict_set(c->arena, d, fx_jv_strref(kw->name, kw->name_len), args->kw_val[k]))
            return fx_jinja_fail_mem(c, pos);
    }
    *out = (struct fx_jv){.kind = ns ? FX_JV_NS : FX_JV_DICT, .u.dict = d};
    return FX_OK;
}

/* The format comes from the template, as Python's strftime takes it; strftime() only writes
 * into the fixed buffer, so a non-literal format is safe here. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
static fx_status call_strftime(struct fx_jctx *c, uint32_t pos, const struct fx_jargs *args,
                               struct fx_jv *out) {
    static const char *const names[] = {"format"};
    struct fx_jv a;
    TRY(fx_jinja_bind(c, pos, "strftime_now()", args, names, 1, &a));
    TRY(need_str_arg(c, pos, "strftime_now()", a));
    char fmt[256], buf[512];
    if (a.len >= sizeof fmt || memchr(a.u.s, '\0', a.len))
        return fx_jinja_fail(c, pos, FX_ERR_FORMAT, "strftime_now(): format too long or with NUL");
    memcpy(fmt, a.u.s, a.len);
    fmt[a.len] = '\0';
    struct tm tm;
    time_t t = c->now == INT64_MIN ? time(NULL) : (time_t)c->now;
    if (!(c->now == INT64_MIN ? localtime_r(&t, &tm) : gmtime_r(&t, &tm)))
        return fx_jinja_fail(c, pos, FX_ERR_FORMAT, "strftime_now(): time out of range");
    size_t n = a.len ? strftime(buf, sizeof buf, fmt, &tm) : 0;
    return fx_jv_str_copy(c->arena, buf, n, out) == FX_OK ? FX_OK : fx_jinja_fail_mem(c, pos);
}
#pragma GCC diagnostic pop

fx_status fx_jinja_call_builtin(struct fx_jctx *c, uint32_t pos, struct fx_jv fn,
                                const struct fx_jargs *args, struct fx_jv *out) {
    if (fn.kind == FX_JV_METHOD) {
        const struct fx_jmethod *m = fn.u.method;
        if (m->id < M_STR_COUNT_)
            return call_str(c, pos, m->id, m->self, args, out);
        if (m->id == M_CYCLE) {
            if (args->n_pos == 0)
                return fx_jinja_fail(c, pos, FX_ERR_FORMAT, "loop.cycle() needs an argument");
            *out = args->pos[m->self.u.loop->index0 % args->n_pos];
            return FX_OK;
        }
        return call_dict(c, pos, m->id, m->self, args, out);
    }
    switch (fn.sub) {
    case FX_JF_RANGE:
        return call_range(c, pos, args, out);
    case FX_JF_NAMESPACE:
    case FX_JF_DICT:
        return call_mapping(c, pos, fn.sub == FX_JF_NAMESPACE, args, out);
    case FX_JF_RAISE_EXCEPTION: {
        static const char *const names[] = {"message"};
        struct fx_jv msg;
        TRY(fx_jinja_bind(c, pos, "raise_exception()", args, names, 1, &msg));
        TRY(fx_jinja_to_str(c, pos, msg, &msg));
        return fx_jinja_fail(c, pos, FX_ERR_INVALID_ARG, "template raised: %.*s",
                             (int)(msg.len < 180 ? msg.len : 180), msg.u.s);
    }
    case FX_JF_STRFTIME_NOW:
        return call_strftime(c, pos, args, out);
    }
    return fx_jinja_fail(c, pos, FX_ERR_FORMAT, "not callable");
}
