/* Jinja filters and tests, with Jinja2's argument names and defaults. tojson is transformers'
 * version (json.dumps with ensure_ascii=False and Python's separators), not Jinja's HTML-safe
 * one. */
#include "chat/jinja.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TRY(expr)                                                                                  \
    do {                                                                                           \
        fx_status st_ = (expr);                                                                    \
        if (st_ != FX_OK)                                                                          \
            return st_;                                                                            \
    } while (0)

enum fx_jfilter {
    F_ABS,
    F_ATTR,
    F_CAPITALIZE,
    F_DEFAULT,
    F_DICTSORT,
    F_ESCAPE,
    F_FIRST,
    F_FLOAT,
    F_FORMAT,
    F_INDENT,
    F_INT,
    F_ITEMS,
    F_JOIN,
    F_LAST,
    F_LENGTH,
    F_LIST,
    F_LOWER,
    F_MAP,
    F_MAX,
    F_MIN,
    F_REJECT,
    F_REJECTATTR,
    F_REPLACE,
    F_REVERSE,
    F_ROUND,
    F_SAFE,
    F_SELECT,
    F_SELECTATTR,
    F_SORT,
    F_STRING,
    F_SUM,
    F_TITLE,
    F_TOJSON,
    F_TRIM,
    F_UNIQUE,
    F_UPPER,
    F_WORDCOUNT,
};

static const struct {
    const char *name;
    uint8_t id;
} filters[] = {
    {"abs", F_ABS},
    {"attr", F_ATTR},
    {"capitalize", F_CAPITALIZE},
    {"count", F_LENGTH},
    {"d", F_DEFAULT},
    {"default", F_DEFAULT},
    {"dictsort", F_DICTSORT},
    {"e", F_ESCAPE},
    {"escape", F_ESCAPE},
    {"first", F_FIRST},
    {"float", F_FLOAT},
    {"format", F_FORMAT},
    {"indent", F_INDENT},
    {"int", F_INT},
    {"items", F_ITEMS},
    {"join", F_JOIN},
    {"last", F_LAST},
    {"length", F_LENGTH},
    {"list", F_LIST},
    {"lower", F_LOWER},
    {"map", F_MAP},
    {"max", F_MAX},
    {"min", F_MIN},
    {"reject", F_REJECT},
    {"rejectattr", F_REJECTATTR},
    {"replace", F_REPLACE},
    {"reverse", F_REVERSE},
    {"round", F_ROUND},
    {"safe", F_SAFE},
    {"select", F_SELECT},
    {"selectattr", F_SELECTATTR},
    {"sort", F_SORT},
    {"string", F_STRING},
    {"sum", F_SUM},
    {"title", F_TITLE},
    {"tojson", F_TOJSON},
    {"trim", F_TRIM},
    {"unique", F_UNIQUE},
    {"upper", F_UPPER},
    {"wordcount", F_WORDCOUNT},
};

enum fx_jtest {
    T_BOOLEAN,
    T_CALLABLE,
    T_DEFINED,
    T_DIVISIBLEBY,
    T_EQ,
    T_ESCAPED,
    T_EVEN,
    T_FALSE,
    T_FILTER,
    T_FLOAT,
    T_GE,
    T_GT,
    T_IN,
    T_INTEGER,
    T_ITERABLE,
    T_LE,
    T_LOWER,
    T_LT,
    T_MAPPING,
    T_NE,
    T_NONE,
    T_NUMBER,
    T_ODD,
    T_SAMEAS,
    T_SEQUENCE,
    T_STRING,
    T_TEST,
    T_TRUE,
    T_UNDEFINED,
    T_UPPER,
};

static const struct {
    const char *name;
    uint8_t id;
} tests[] = {
    {"boolean", T_BOOLEAN},
    {"callable", T_CALLABLE},
    {"defined", T_DEFINED},
    {"divisibleby", T_DIVISIBLEBY},
    {"eq", T_EQ},
    {"equalto", T_EQ},
    {"==", T_EQ},
    {"escaped", T_ESCAPED},
    {"even", T_EVEN},
    {"false", T_FALSE},
    {"filter", T_FILTER},
    {"float", T_FLOAT},
    {"ge", T_GE},
    {">=", T_GE},
    {"gt", T_GT},
    {"greaterthan", T_GT},
    {">", T_GT},
    {"in", T_IN},
    {"integer", T_INTEGER},
    {"iterable", T_ITERABLE},
    {"le", T_LE},
    {"<=", T_LE},
    {"lower", T_LOWER},
    {"lt", T_LT},
    {"lessthan", T_LT},
    {"<", T_LT},
    {"mapping", T_MAPPING},
    {"ne", T_NE},
    {"!=", T_NE},
    {"none", T_NONE},
    {"number", T_NUMBER},
    {"odd", T_ODD},
    {"sameas", T_SAMEAS},
    {"sequence", T_SEQUENCE},
    {"string", T_STRING},
    {"test", T_TEST},
    {"true", T_TRUE},
    {"undefined", T_UNDEFINED},
    {"upper", T_UPPER},
};

int fx_jinja_filter_id(const char *name, size_t len) {
    for (size_t i = 0; i < sizeof filters / sizeof filters[0]; i++)
        if (strlen(filters[i].name) == len && memcmp(filters[i].name, name, len) == 0)
            return filters[i].id;
    return -1;
}

int fx_jinja_test_id(const char *name, size_t len) {
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++)
        if (strlen(tests[i].name) == len && memcmp(tests[i].name, name, len) == 0)
            return tests[i].id;
    return -1;
}

/* ---- tests --------------------------------------------------------------------------------- */

fx_status fx_jinja_apply_test(struct fx_jctx *c, const struct fx_jnode *n, int test, struct fx_jv v,
                              const struct fx_jargs *args, bool *out) {
    static const char *const one[] = {"other"};
    struct fx_jv a = fx_jv_undef();
    bool takes_arg = test == T_DIVISIBLEBY || test == T_EQ || test == T_NE || test == T_LT ||
                     test == T_LE || test == T_GT || test == T_GE || test == T_IN ||
                     test == T_SAMEAS;
    TRY(fx_jinja_bind(c, n->pos, "test", args, one, takes_arg ? 1 : 0, &a));
    bool is_int = v.kind == FX_JV_INT;
    int cmp;
    switch (test) {
    case T_BOOLEAN:
        *out = v.kind == FX_JV_BOOL;
        return FX_OK;
    case T_CALLABLE:
        *out = v.kind == FX_JV_MACRO || v.kind == FX_JV_FUNC || v.kind == FX_JV_METHOD;
        return FX_OK;
    case T_DEFINED:
    case T_UNDEFINED:
        *out = (v.kind == FX_JV_UNDEF) == (test == T_UNDEFINED);
        return FX_OK;
    case T_DIVISIBLEBY:
    case T_EVEN:
    case T_ODD: {
        /* Jinja computes value % n == 0 (or == 1 for odd) with Python's %, floats included. */
        struct fx_jv rem;
        if (a.kind == FX_JV_UNDEF && test != T_DIVISIBLEBY)
            a = fx_jv_int(2);
        if (v.kind == FX_JV_STR)
            return fx_jinja_fail(c, n->pos, FX_ERR_FORMAT, "test needs a number, not 'str'");
        TRY(fx_jinja_arith(c, n->pos, FX_JO_MOD, v, a, &rem));
        *out = fx_jv_equal(rem, fx_jv_int(test == T_ODD));
        return FX_OK;
    }
    case T_EQ:
    case T_NE:
        *out = fx_jv_equal(v, a) == (test == T_EQ);
        return FX_OK;
    case T_SAMEAS:
        *out = v.kind == a.kind && fx_jv_equal(v, a);
        return FX_OK;
    case T_LT:
    case T_LE:
    case T_GT:
    case T_GE:
        TRY(fx_jinja_compare(c, n->pos, v, a, &cmp));
        *out = test == T_LT ? cmp < 0 : test == T_LE ? cmp <= 0 : test == T_GT ? cmp > 0 : cmp >= 0;
        return FX_OK;
    case T_IN:
        return fx_jinja_contains(c, n->pos, a, v, out);
    case T_ESCAPED:
        *out = false;
        return FX_OK;
    case T_FALSE:
    case T_TRUE:
        *out = v.kind == FX_JV_BOOL && v.u.b == (test == T_TRUE);
        return FX_OK;
    case T_FILTER:
    case T_TEST:
        *out = v.kind == FX_JV_STR && (test == T_FILTER ? fx_jinja_filter_id(v.u.s, v.len)
                                                        : fx_jinja_test_id(v.u.s, v.len)) >= 0;
        return FX_OK;
    case T_FLOAT:
        *out = v.kind == FX_JV_FLOAT;
        return FX_OK;
    case T_INTEGER:
        *out = is_int;
        return FX_OK;
    case T_NUMBER:
        *out = fx_jv_is_number(v);
        return FX_OK;
    case T_ITERABLE:
        *out = v.kind == FX_JV_STR || v.kind == FX_JV_LIST || v.kind == FX_JV_DICT ||
               v.kind == FX_JV_UNDEF || v.kind == FX_JV_LOOP;
        return FX_OK;
    case T_SEQUENCE:
        *out = v.kind == FX_JV_STR || v.kind == FX_JV_LIST || v.kind == FX_JV_DICT ||
               v.kind == FX_JV_UNDEF;
        return FX_OK;
    case T_MAPPING:
        *out = v.kind == FX_JV_DICT;
        return FX_OK;
    case T_NONE:
        *out = v.kind == FX_JV_NONE;
        return FX_OK;
    case T_STRING:
        *out = v.kind == FX_JV_STR;
        return FX_OK;
    case T_LOWER:
    case T_UPPER: {
        if (v.kind != FX_JV_STR)
            TRY(fx_jinja_to_str(c, n->pos, v, &v));
        struct fx_jv r;
        struct fx_jargs none = {0};
        TRY(fx_jinja_str_method(c, n->pos, test == T_LOWER ? "islower" : "isupper", v, &none, &r));
        *out = r.u.b;
        return FX_OK;
    }
    }
    return fx_jinja_fail(c, n->pos, FX_ERR_FORMAT, "unknown test");
}

/* ---- helpers ------------------------------------------------------------------------------- */

/* item.a.b for an attribute path given to sort, map, selectattr...; numeric parts index. */
static fx_status attr_path(struct fx_jctx *c, uint32_t pos, struct fx_jv item, struct fx_jv path,
                           struct fx_jv *out) {
    if (path.kind == FX_JV_INT)
        return fx_jinja_getitem(c, pos, item, path, out);
    if (path.kind != FX_JV_STR)
        return fx_jinja_fail(c, pos, FX_ERR_FORMAT, "attribute must be a string, not '%s'",
                             fx_jv_type_name(path));
    const char *p = path.u.s, *end = p + path.len;
    *out = item;
    while (p <= end) {
        const char *dot = memchr(p, '.', (size_t)(end - p));
        if (!dot)
            dot = end;
        struct fx_jv key = fx_jv_strref(p, (uint32_t)(dot - p));
        bool digits = key.len > 0;
        int64_t idx = 0;
        for (uint32_t i = 0; i < key.len && digits; i++) {
            digits = key.u.s[i] >= '0' && key.u.s[i] <= '9' && idx < INT64_MAX / 10;
            idx = idx * 10 + (key.u.s[i] - '0');
        }
        TRY(fx_jinja_getitem(c, pos, *out, digits ? fx_jv_int(idx) : key, out));
        p = dot + 1;
    }
    return FX_OK;
}

/* Lower-cases strings for case-insensitive sorting and comparing (Jinja's ignore_case). */
static fx_status fold_case(struct fx_jctx *c, uint32_t pos, struct fx_jv v, bool case_sensitive,
                           struct fx_jv *out) {
    if (case_sensitive || v.kind != FX_JV_STR) {
        *out = v;
        return FX_OK;
    }
    struct fx_jargs none = {0};
    return fx_jinja_str_method(c, pos, "lower", v, &none, out);
}

/* Stable merge sort of (key, value) pairs by key with Python's ordering. */
struct sort_item {
    struct fx_jv key, val;
};

static fx_status merge_sort(struct fx_jctx *c, uint32_t pos, struct sort_item *v, size_t n,
                            bool reverse) {
    if (n < 2)
        return FX_OK;
    struct sort_item *tmp = fx_jarena_alloc(c->arena, n * sizeof *tmp);
    if (!tmp)
        return fx_jinja_fail_mem(c, pos);
    for (size_t width = 1; width < n; width *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * width) {
            size_t mid = lo + width < n ? lo + width : n,
                   hi = lo + 2 * width < n ? lo + 2 * width : n;
            size_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) {
                int cmp;
                TRY(fx_jinja_compare(c, pos, v[j].key, v[i].key, &cmp));
                /* Take from the right only when strictly before, which keeps equal keys in order.
                 */
                tmp[k++] = (reverse ? cmp > 0 : cmp < 0) ? v[j++] : v[i++];
            }
            while (i < mid)
                tmp[k++] = v[i++];
            while (j < hi)
                tmp[k++] = v[j++];
        }
        memcpy(v, tmp, n * sizeof *v);
    }
    return FX_OK;
}

static fx_status make_list(struct fx_jctx *c, uint32_t pos, size_t cap, struct fx_jlist **out) {
    *out = fx_jlist_new(c->arena, cap);
    return *out ? FX_OK : fx_jinja_fail_mem(c, pos);
}

static fx_status push(struct fx_jctx *c, uint32_t pos, struct fx_jlist *l, struct fx_jv v) {
    return fx_jlist_push(c->arena, l, v) ? FX_OK : fx_jinja_fail_mem(c, pos);
}

static fx_status pair(struct fx_jctx *c, uint32_t pos, struct fx_jv a, struct fx_jv b,
                      struct fx_jv *out) {
    struct fx_jlist *l;
    TRY(make_list(c, pos, 2, &l));
    l->v[0] = a;
    l->v[1] = b;
    l->n = 2;
    *out = fx_jv_list(l, true);
    return FX_OK;
}

static fx_status length_of(struct fx_jctx *c, uint32_t pos, struct fx_jv v, int64_t *out) {
    switch (v.kind) {
    case FX_JV_STR:
        *out = (int64_t)fx_jutf8_count(v.u.s, v.len);
        return FX_OK;
    case FX_JV_LIST:
        if (v.sub == FX_JL_ITER)
            break;
        *out = v.u.list->n;
        return FX_OK;
    case FX_JV_DICT:
        *out = v.u.dict->n;
        return FX_OK;
    case FX_JV_UNDEF:
        *out = 0;
        return FX_OK;
    default:
        break;
    }
    return fx_jinja_fail(c, pos, FX_ERR_FORMAT, "object of type '%s' has no len()",
                         fx_jv_type_name(v));
}

/* Python int() / float() of a string: surrounding whitespace and single underscores between
 * digits allowed. */
static bool parse_number(struct fx_jv s, bool want_float, int base, double *f, int64_t *i) {
    char buf[128];
    size_t k = 0, a = 0, b = s.len, w;
    while (a < b && (w = fx_jutf8_space_fwd(s.u.s + a, b - a)) > 0)
        a += w;
    while (b > a && (w = fx_jutf8_space_back(s.u.s, b)) > 0)
        b -= w;
    if (b == a || b - a >= sizeof buf)
        return false;
    for (size_t p = a; p < b; p++) {
        char ch = s.u.s[p];
        if (ch == '_' && p > a && p + 1 < b && s.u.s[p - 1] != '_')
            continue;
        if (ch == '\0' || (want_float && (ch == 'x' || ch == 'X' || ch == 'p' || ch == 'P')))
            return false; /* strtod reads hex floats; Python's float() does not */
        buf[k++] = ch;
    }
    buf[k] = '\0';
    char *end;
    errno = 0;
    if (want_float) {
        *f = strtod(buf, &end);
        return *end == '\0';
    }
    if (base < 2 || base > 36)
        return false;
    long long v = strtoll(buf, &end, base);
    if (*end != '\0' || errno == ERANGE)
        return false;
    *i = v;
    return true;
}

/* ---- filters ------------------------------------------------------------------------------- */

/* select / reject / selectattr / rejectattr. */
static fx_status filter_select(struct fx_jctx *c, const struct fx_jnode *n, struct fx_jv seq,
                               const struct fx_jargs *args, bool by_attr, bool keep,
                               struct fx_jv *out) {
    const struct fx_jv *items;
    size_t count;
    TRY(fx_jinja_iterate(c, n->pos, seq, &items, &count));
    uint32_t at = 0;
    struct fx_jv attr = fx_jv_undef();
    if (by_attr) {
        if (args->n_pos < 1)
            return fx_jinja_fail(c, n->pos, FX_ERR_FORMAT, "%.*s needs an attribute name",
                                 (int)n->name_len, n->name);
        attr = args->pos[at++];
    }
    int test = -1;
    if (at < args->n_pos) {
        struct fx_jv name = args->pos[at++];
        if (name.kind != FX_JV_STR || (test = fx_jinja_test_id(name.u.s, name.len)) < 0)
            return fx_jinja_fail(c, n->pos, FX_ERR_FORMAT, "no test named '%.*s'",
                                 (int)(name.kind == FX_JV_STR ? name.len : 1),
                                 name.kind == FX_JV_STR ? name.u.s : "?");
    }
    struct fx_jargs test_args = {args->n_pos ? args->pos + at : NULL, args->n_pos - at,
                                 args->kw_val, args->kw_node, args->n_kw};
    struct fx_jlist *l;
    TRY(make_list(c, n->pos, count, &l));
    for (size_t i = 0; i < count; i++) {
        struct fx_jv v = items[i];
        if (by_attr)
            TRY(attr_path(c, n->pos, v, attr, &v));
        bool r;
        if (test >= 0)
            TRY(fx_jinja_apply_test(c, n, test, v, &test_args, &r));
        else
            r = fx_jv_truthy(v);
        if (r == keep)
            TRY(push(c, n->pos, l, items[i]));
    }
    *out = fx_jv_list(l, FX_JL_ITER);
    return FX_OK;
}

static fx_status filter_map(struct fx_jctx *c, const struct fx_jnode *n, struct fx_jv seq,
                            const struct fx_jargs *args, struct fx_jv *out) {
    const struct fx_jv *items;
    size_t count;
    TRY(fx_jinja_iterate(c, n->pos, seq, &items, &count));
    struct fx_jv attr = fx_jv_undef(), dflt = fx_jv_undef();
    for (uint32_t k = 0; k < args->n_kw; k++) {
        const struct fx_jnode *kw = args->kw_node[k];
        if (kw->name_len == 9 && memcmp(kw->name, "attribute", 9) == 0)
            attr = args->kw_val[k];
        else if (kw->name_len == 7 && memcmp(kw->name, "default", 7) == 0)
            dflt = args->kw_val[k];
        else
            return fx_jinja_fail(c, kw->pos, FX_ERR_FORMAT, "map() got an unexpected argument");
    }
    struct fx_jnode sub = {.pos = n->pos};
    struct fx_jargs sub_args = {0};
    if (attr.kind == FX_JV_UNDEF) {
        if (args->n_pos < 1 || args->pos[0].kind != FX_JV_STR)
            return fx_jinja_fail(c, n->pos, FX_ERR_FORMAT,
                                 "map() needs a filter name or attribute=");
        int id = fx_jinja_filter_id(args->pos[0].u.s, args->pos[0].len);
        if (id < 0)
            return fx_jinja_fail(c, n->pos, FX_ERR_FORMAT, "no filter named '%.*s'",
                                 (int)args->pos[0].len, args->pos[0].u.s);
        sub.op = (uint8_t)id;
        sub.name = args->pos[0].u.s;
        sub.name_len = args->pos[0].len;
        sub_args.pos = args->pos + 1;
        sub_args.n_pos = args->n_pos - 1;
    }
    struct fx_jlist *l;
    TRY(make_list(c, n->pos, count, &l));
    for (size_t i = 0; i < count; i++) {
        if (attr.kind != FX_JV_UNDEF) {
            TRY(attr_path(c, n->pos, items[i], attr, &l->v[i]));
            if (l->v[i].kind == FX_JV_UNDEF && dflt.kind != FX_JV_UNDEF)
                l->v[i] = dflt;
        } else {
            TRY(fx_jinja_apply_filter(c, &sub, items[i], &sub_args, &l->v[i]));
        }
    }
    l->n = (uint32_t)count;
    *out = fx_jv_list(l, FX_JL_ITER);
    return FX_OK;
}

/* sort, unique, min, max, dictsort share the keyed sort. */
static fx_status keyed_items(struct fx_jctx *c, uint32_t pos, const struct fx_jv *items,
                             size_t count, struct fx_jv attr, bool case_sensitive,
                             struct sort_item **out) {
    struct sort_item *v = fx_jarena_alloc(c->arena, (count ? count : 1) * sizeof *v);
    if (!v)
        return fx_jinja_fail_mem(c, pos);
    for (size_t i = 0; i < count; i++) {
        struct fx_jv key = items[i];
        if (attr.kind != FX_JV_UNDEF && attr.kind != FX_JV_NONE)
            TRY(attr_path(c, pos, key, attr, &key));
        TRY(fold_case(c, pos, key, case_sensitive, &v[i].key));
        v[i].val = items[i];
    }
    *out = v;
    return FX_OK;
}

static fx_status filter_tojson(struct fx_jctx *c, const struct fx_jnode *n, struct fx_jv v,
                               const struct fx_jargs *args, struct fx_jv *out) {
    static const char *const names[] = {"ensure_ascii", "indent", "separators", "sort_keys"};
    struct fx_jv a[4];
    TRY(fx_jinja_bind(c, n->pos, "tojson", args, names, 4, a));
    struct fx_jjson_opts o = {.ensure_ascii = fx_jv_truthy(a[0]), .sort_keys = fx_jv_truthy(a[3])};
    char spaces[64];
    if (a[1].kind == FX_JV_INT || a[1].kind == FX_JV_BOOL) {
        int64_t w = a[1].kind == FX_JV_INT ? a[1].u.i : a[1].u.b;
        if (w > (int64_t)sizeof spaces)
            return fx_jinja_fail(c, n->pos, FX_ERR_FORMAT, "tojson indent %lld is too large",
                                 (long long)w);
        memset(spaces, ' ', sizeof spaces);
        o.indent = spaces;
        o.indent_len = w > 0 ? (size_t)w : 0;
    } else if (a[1].kind == FX_JV_STR) {
        o.indent = a[1].u.s;
        o.indent_len = a[1].len;
    }
    if (a[2].kind == FX_JV_LIST && a[2].u.list->n == 2 && a[2].u.list->v[0].kind == FX_JV_STR &&
        a[2].u.list->v[1].kind == FX_JV_STR) {
        o.item_sep = a[2].u.list->v[0].u.s;
        o.item_sep_len = a[2].u.list->v[0].len;
        o.key_sep = a[2].u.list->v[1].u.s;
        o.key_sep_len = a[2].u.list->v[1].len;
    } else if (a[2].kind != FX_JV_UNDEF && a[2].kind != FX_JV_NONE) {
        return fx_jinja_fail(c, n->pos, FX_ERR_FORMAT, "tojson separators must be two strings");
    }
    size_t mark = c->scratch.len;
    char msg[160];
    fx_status st = fx_jv_write_json(&c->scratch, v, &o, msg, sizeof msg);
    if (st != FX_OK) {
        c->scratch.len = mark;
        if (st == FX_ERR_NOMEM)
            return fx_jinja_fail(c, n->pos, st, "out of memory");
        if (v.kind == FX_JV_UNDEF)
            return fx_jinja_fail(c, n->pos, st, "tojson of an undefined value%s%.*s%s",
                                 v.len ? " ('" : "", (int)v.len, v.len ? v.u.s : "",
                                 v.len ? "')" : "");
        return fx_jinja_fail(c, n->pos, st, "tojson: %s", msg);
    }
    return fx_jinja_finish_scratch(c, n->pos, mark, out);
}

static fx_status filter_indent(struct fx_jctx *c, const struct fx_jnode *n, struct fx_jv s,
                               const struct fx_jargs *args, struct fx_jv *out) {
    static const char *const names[] = {"width", "first", "blank"};
    struct fx_jv a[3];
    TRY(fx_jinja_bind(c, n->pos, "indent", args, names, 3, a));
    struct fx_jv ind = fx_jv_strref("    ", 4);
    char spaces[256];
    if (a[0].kind == FX_JV_STR) {
        ind = a[0];
    } else if (a[0].kind == FX_JV_INT) {
        int64_t w = a[0].u.i < 0 ? 0 : a[0].u.i;
        if (w > (int64_t)sizeof spaces)
            return fx_jinja_fail(c, n->pos, FX_ERR_FORMAT, "indent width too large");
        memset(spaces, ' ', (size_t)w);
        ind = fx_jv_strref(spaces, (uint32_t)w);
    }
    /* Jinja appends a newline, splits lines, and indents every line after the first. */
    size_t mark = c->scratch.len;
    fx_jbuf_put(&c->scratch, s.u.s, s.len);
    fx_jbuf_putc(&c->scratch, '\n');
    struct fx_jv text, lines;
    TRY(fx_jinja_finish_scratch(c, n->pos, mark, &text));
    struct fx_jargs none = {0};
    TRY(fx_jinja_str_method(c, n->pos, "splitlines", text, &none, &lines));
    const struct fx_jlist *l = lines.u.list;
    bool blank = fx_jv_truthy(a[2]);
    if (fx_jv_truthy(a[1]))
        fx_jbuf_put(&c->scratch, ind.u.s, ind.len);
    for (uint32_t i = 0; i < l->n; i++) {
        if (i) {
            fx_jbuf_putc(&c->scratch, '\n');
            if (blank || l->v[i].len)
                fx_jbuf_put(&c->scratch, ind.u.s, ind.len);
        }
        fx_jbuf_put(&c->scratch, l->v[i].u.s, l->v[i].len);
    }
    return fx_jinja_finish_scratch(c, n->pos, mark, out);
}

static fx_status filter_number(struct fx_jctx *c, const struct fx_jnode *n, struct fx_jv v,
                               const struct fx_jargs *args, bool to_int, struct fx_jv *out) {
    static const char *const int_names[] = {"default", "base"};
    static const char *const float_names[] = {"default"};
    struct fx_jv a[2];
    TRY(fx_jinja_bind(c, n->pos, to_int ? "int" : "float", args, to_int ? int_names : float_names,
                      to_int ? 2 : 1, a));
    struct fx_jv dflt = a[0].kind != FX_JV_UNDEF ? a[0] : to_int ? fx_jv_int(0) : fx_jv_float(0);
    int base = a[1].kind == FX_JV_INT ? (int)a[1].u.i : 10;
    double f = 0;
    int64_t i = 0;
    bool ok = true;
    if (v.kind == FX_JV_INT || v.kind == FX_JV_BOOL) {
        i = v.kind == FX_JV_INT ? v.u.i : v.u.b;
        f = (double)i;
    } else if (v.kind == FX_JV_FLOAT) {
        f = v.u.f;
        ok = !to_int || (isfinite(f) && fabs(f) < 9.2e18);
        i = ok ? (int64_t)f : 0;
    } else if (v.kind == FX_JV_STR) {
        if (to_int && !parse_number(v, false, base, &f, &i)) {
            /* "42.23"|int is 42. */
            ok = parse_number(v, true, 10, &f, &i) && isfinite(f) && fabs(f) < 9.2e18;
            i = ok ? (int64_t)f : 0;
        } else if (!to_int) {
            ok = parse_number(v, true, 10, &f, &i);
        }
    } else {
        ok = false;
    }
    *out = !ok ? dflt : to_int ? fx_jv_int(i) : fx_jv_float(f);
    return FX_OK;
}

fx_status fx_jinja_apply_filter(struct fx_jctx *c, const struct fx_jnode *n, struct fx_jv v,
                                const struct fx_jargs *args, struct fx_jv *out) {
    uint32_t pos = n->pos;
    struct fx_jv a[4];
    const struct fx_jv *items;
    size_t count;
    struct fx_jlist *l;
    char what[48];
    snprintf(what, sizeof what, "filter '%.*s'", (int)(n->name_len < 30 ? n->name_len : 30),
             n->name ? n->name : "");
    switch ((enum fx_jfilter)n->op) {
    case F_ABS:
        TRY(fx_jinja_bind(c, pos, what, args, NULL, 0, a));
        if (v.kind == FX_JV_INT && v.u.i != INT64_MIN)
            *out = fx_jv_int(v.u.i < 0 ? -v.u.i : v.u.i);
        else if (v.kind == FX_JV_FLOAT)
            *out = fx_jv_float(fabs(v.u.f));
        else if (v.kind == FX_JV_BOOL)
            *out = fx_jv_int(v.u.b);
        else
            return fx_jinja_fail(c, pos, FX_ERR_FORMAT, "bad operand type for abs(): '%s'",
                                 fx_jv_type_name(v));
        return FX_OK;
    case F_ATTR: {
        static const char *const names[] = {"name"};
        TRY(fx_jinja_bind(c, pos, what, args, names, 1, a));
        if (a[0].kind != FX_JV_STR)
            return fx_jinja_fail(c, pos, FX_ERR_FORMAT, "attr() needs a string");
        return fx_jinja_getattr(c, pos, v, a[0].u.s, a[0].len, out);
    }
    case F_TITLE: {
        /* Jinja's title is not str.title(): words start after whitespace or -({[<. */
        TRY(fx_jinja_bind(c, pos, what, args, NULL, 0, a));
        TRY(fx_jinja_to_str(c, pos, v, &v));
        size_t mark = c->scratch.len;
        bool start = true;
        for (uint32_t i = 0; i < v.len; i++) {
            char ch = v.u.s[i];
            size_t sp = fx_jutf8_space_fwd(v.u.s + i, v.len - i);
            if (sp || strchr("-({[<", ch)) {
                fx_jbuf_put(&c->scratch, v.u.s + i, sp ? sp : 1);
                i += sp ? (uint32_t)sp - 1 : 0;
                start = true;
                continue;
            }
            if (start && ch >= 'a' && ch <= 'z')
                ch = (char)(ch - 32);
            else if (!start && ch >= 'A' && ch <= 'Z')
                ch = (char)(ch + 32);
            fx_jbuf_putc(&c->scratch, ch);
            start = false;
        }
        return fx_jinja_finish_scratch(c, pos, mark, out);
    }
    case F_CAPITALIZE:
    case F_LOWER:
    case F_UPPER:
    case F_TRIM:
    case F_REPLACE: {
        static const char *const method[] = {[F_CAPITALIZE] = "capitalize",
                                             [F_LOWER] = "lower",
                                             [F_UPPER] = "upper",
                                             [F_TRIM] = "strip",
                                             [F_REPLACE] = "replace"};
        TRY(fx_jinja_to_str(c, pos, v, &v));
        return fx_jinja_str_method(c, pos, method[n->op], v, args, out);
    }
    case F_DEFAULT: {
        static const char *const names[] = {"default_value", "boolean"};
        TRY(fx_jinja_bind(c, pos, what, args, names, 2, a));
        bool use = v.kind == FX_JV_UNDEF || (fx_jv_truthy(a[1]) && !fx_jv_truthy(v));
        *out = !use ? v : a[0].kind == FX_JV_UNDEF ? fx_jv_strref("", 0) : a[0];
        return FX_OK;
    }
    case F_ESCAPE: {
        TRY(fx_jinja_bind(c, pos, what, args, NULL, 0, a));
        TRY(fx_jinja_to_str(c, pos, v, &v));
        size_t mark = c->scratch.len;
        for (uint32_t i = 0; i < v.len; i++) {
            char ch = v.u.s[i];
            const char *e = ch == '&'    ? "&amp;"
                            : ch == '<'  ? "&lt;"
                            : ch == '>'  ? "&gt;"
                            : ch == '"'  ? "&#34;"
                            : ch == '\'' ? "&#39;"
                                         : NULL;
            if (e)
                fx_jbuf_puts(&c->scratch, e);
            else
                fx_jbuf_putc(&c->scratch, ch);
        }
        return fx_jinja_finish_scratch(c, pos, mark, out);
    }
    case F_FIRST:
    case F_LAST:
        TRY(fx_jinja_bind(c, pos, what, args, NULL, 0, a));
        TRY(fx_jinja_iterate(c, pos, v, &items, &count));
        *out = count == 0 ? fx_jv_undef() : items[n->op == F_FIRST ? 0 : count - 1];
        return FX_OK;
    case F_FLOAT:
    case F_INT:
        return filter_number(c, n, v, args, n->op == F_INT, out);
    case F_FORMAT: {
        TRY(fx_jinja_to_str(c, pos, v, &v));
        if (args->n_kw && args->n_pos)
            return fx_jinja_fail(c, pos, FX_ERR_FORMAT,
                                 "format() takes positional or keyword arguments, not both");
        if (!args->n_kw)
            return fx_jinja_format(c, pos, v, args->pos, args->n_pos, out);
        struct fx_jdict *d = fx_jdict_new(c->arena, args->n_kw);
        if (!d)
            return fx_jinja_fail_mem(c, pos);
        for (uint32_t k = 0; k < args->n_kw; k++)
            if (!fx_jdict_set(c->arena, d,
                              fx_jv_strref(args->kw_node[k]->name, args->kw_node[k]->name_len),
                              args->kw_val[k]))
                return fx_jinja_fail_mem(c, pos);
        struct fx_jv m = {.kind = FX_JV_DICT, .u.dict = d};
        return fx_jinja_format(c, pos, v, &m, 1, out);
    }
    case F_INDENT:
        TRY(fx_jinja_to_str(c, pos, v, &v));
        return filter_indent(c, n, v, args, out);
    case F_ITEMS:
    case F_DICTSORT: {
        static const char *const names[] = {"case_sensitive", "by", "reverse"};
        TRY(fx_jinja_bind(c, pos, what, args, names, n->op == F_ITEMS ? 0 : 3, a));
        if (v.kind == FX_JV_UNDEF) {
            TRY(make_list(c, pos, 0, &l));
            *out = fx_jv_list(l, FX_JL_ITER);
            return FX_OK;
        }
        if (v.kind != FX_JV_DICT)
            return fx_jinja_fail(c, pos, FX_ERR_FORMAT, "%s needs a mapping, not '%s'", what,
                                 fx_jv_type_name(v));
        const struct fx_jdict *d = v.u.dict;
        TRY(make_list(c, pos, d->n, &l));
        for (uint32_t i = 0; i < d->n; i++)
            TRY(pair(c, pos, d->e[i].key, d->e[i].val, &l->v[i]));
        l->n = d->n;
        if (n->op == F_DICTSORT) {
            bool by_value =
                a[1].kind == FX_JV_STR && a[1].len == 5 && !memcmp(a[1].u.s, "value", 5);
            struct fx_jv idx = fx_jv_int(by_value);
            struct sort_item *s;
            TRY(keyed_items(c, pos, l->v, l->n, idx, fx_jv_truthy(a[0]), &s));
            TRY(merge_sort(c, pos, s, l->n, fx_jv_truthy(a[2])));
            for (uint32_t i = 0; i < l->n; i++)
                l->v[i] = s[i].val;
        }
        *out = fx_jv_list(l, n->op == F_ITEMS ? FX_JL_ITER : FX_JL_LIST);
        return FX_OK;
    }
    case F_JOIN: {
        static const char *const names[] = {"d", "attribute"};
        TRY(fx_jinja_bind(c, pos, what, args, names, 2, a));
        TRY(fx_jinja_iterate(c, pos, v, &items, &count));
        struct fx_jv sep = a[0].kind == FX_JV_UNDEF ? fx_jv_strref("", 0) : a[0];
        TRY(fx_jinja_to_str(c, pos, sep, &sep));
        struct fx_jv *strs = fx_jarena_alloc(c->arena, (count ? count : 1) * sizeof *strs);
        if (!strs)
            return fx_jinja_fail_mem(c, pos);
        for (size_t i = 0; i < count; i++) {
            strs[i] = items[i];
            if (a[1].kind != FX_JV_UNDEF && a[1].kind != FX_JV_NONE)
                TRY(attr_path(c, pos, strs[i], a[1], &strs[i]));
            TRY(fx_jinja_to_str(c, pos, strs[i], &strs[i]));
        }
        size_t mark = c->scratch.len;
        for (size_t i = 0; i < count; i++) {
            if (i)
                fx_jbuf_put(&c->scratch, sep.u.s, sep.len);
            fx_jbuf_put(&c->scratch, strs[i].u.s, strs[i].len);
        }
        return fx_jinja_finish_scratch(c, pos, mark, out);
    }
    case F_LENGTH: {
        TRY(fx_jinja_bind(c, pos, what, args, NULL, 0, a));
        int64_t len = 0;
        TRY(length_of(c, pos, v, &len));
        *out = fx_jv_int(len);
        return FX_OK;
    }
    case F_LIST:
        TRY(fx_jinja_bind(c, pos, what, args, NULL, 0, a));
        TRY(fx_jinja_iterate(c, pos, v, &items, &count));
        TRY(make_list(c, pos, count, &l));
        if (count)
            memcpy(l->v, items, count * sizeof *items);
        l->n = (uint32_t)count;
        *out = fx_jv_list(l, false);
        return FX_OK;
    case F_MAP:
        return filter_map(c, n, v, args, out);
    case F_MAX:
    case F_MIN:
    case F_SORT:
    case F_UNIQUE: {
        static const char *const sort_names[] = {"reverse", "case_sensitive", "attribute"};
        static const char *const names[] = {"case_sensitive", "attribute"};
        bool sort = n->op == F_SORT;
        TRY(fx_jinja_bind(c, pos, what, args, sort ? sort_names : names, sort ? 3 : 2, a));
        struct fx_jv cs = sort ? a[1] : a[0], attr = sort ? a[2] : a[1];
        TRY(fx_jinja_iterate(c, pos, v, &items, &count));
        struct sort_item *s;
        TRY(keyed_items(c, pos, items, count, attr, fx_jv_truthy(cs), &s));
        if (n->op == F_MAX || n->op == F_MIN) {
            *out = fx_jv_undef();
            size_t best = 0;
            for (size_t i = 1; i < count; i++) {
                int cmp;
                TRY(fx_jinja_compare(c, pos, s[i].key, s[best].key, &cmp));
                if (n->op == F_MAX ? cmp > 0 : cmp < 0)
                    best = i;
            }
            if (count)
                *out = s[best].val;
            return FX_OK;
        }
        TRY(make_list(c, pos, count, &l));
        if (sort) {
            TRY(merge_sort(c, pos, s, count, fx_jv_truthy(a[0])));
            for (size_t i = 0; i < count; i++)
                l->v[i] = s[i].val;
            l->n = (uint32_t)count;
        } else {
            /* unique keeps first occurrences (quadratic, like the lists templates see). */
            for (size_t i = 0; i < count; i++) {
                bool seen = false;
                for (size_t j = 0; j < i && !seen; j++)
                    seen = fx_jv_equal(s[i].key, s[j].key);
                if (!seen)
                    l->v[l->n++] = s[i].val;
            }
        }
        *out = fx_jv_list(l, sort ? FX_JL_LIST : FX_JL_ITER);
        return FX_OK;
    }
    case F_REJECT:
    case F_SELECT:
        return filter_select(c, n, v, args, false, n->op == F_SELECT, out);
    case F_REJECTATTR:
    case F_SELECTATTR:
        return filter_select(c, n, v, args, true, n->op == F_SELECTATTR, out);
    case F_REVERSE:
        TRY(fx_jinja_bind(c, pos, what, args, NULL, 0, a));
        TRY(fx_jinja_iterate(c, pos, v, &items, &count));
        if (v.kind == FX_JV_STR) {
            size_t mark = c->scratch.len;
            for (size_t i = count; i-- > 0;)
                fx_jbuf_put(&c->scratch, items[i].u.s, items[i].len);
            return fx_jinja_finish_scratch(c, pos, mark, out);
        }
        TRY(make_list(c, pos, count, &l));
        for (size_t i = 0; i < count; i++)
            l->v[i] = items[count - 1 - i];
        l->n = (uint32_t)count;
        *out = fx_jv_list(l, FX_JL_ITER);
        return FX_OK;
    case F_ROUND: {
        static const char *const names[] = {"precision", "method"};
        TRY(fx_jinja_bind(c, pos, what, args, names, 2, a));
        if (!fx_jv_is_number(v))
            return fx_jinja_fail(c, pos, FX_ERR_FORMAT, "round() needs a number, not '%s'",
                                 fx_jv_type_name(v));
        int64_t prec = a[0].kind == FX_JV_INT ? a[0].u.i : 0;
        const char *method = a[1].kind == FX_JV_STR ? a[1].u.s : "common";
        size_t mlen = a[1].kind == FX_JV_STR ? a[1].len : 6;
        if (prec < -20 || prec > 20)
            prec = prec < 0 ? -20 : 20;
        double scale = pow(10.0, (double)prec), x = fx_jv_as_double(v) * scale, r;
        if (mlen == 6 && !memcmp(method, "common", 6)) {
            if (v.kind != FX_JV_FLOAT && prec >= 0) {
                *out = v.kind == FX_JV_BOOL ? fx_jv_int(v.u.b) : v;
                return FX_OK;
            }
            r = nearbyint(x); /* Python's round() rounds halves to even */
        } else if (mlen == 4 && !memcmp(method, "ceil", 4)) {
            r = ceil(x);
        } else if (mlen == 5 && !memcmp(method, "floor", 5)) {
            r = floor(x);
        } else {
            return fx_jinja_fail(c, pos, FX_ERR_FORMAT,
                                 "round() method must be common, ceil or floor");
        }
        *out = fx_jv_float(r / scale);
        return FX_OK;
    }
    case F_SAFE:
        TRY(fx_jinja_bind(c, pos, what, args, NULL, 0, a));
        *out = v;
        return FX_OK;
    case F_STRING:
        TRY(fx_jinja_bind(c, pos, what, args, NULL, 0, a));
        return fx_jinja_to_str(c, pos, v, out);
    case F_SUM: {
        static const char *const names[] = {"attribute", "start"};
        TRY(fx_jinja_bind(c, pos, what, args, names, 2, a));
        TRY(fx_jinja_iterate(c, pos, v, &items, &count));
        struct fx_jv acc = a[1].kind == FX_JV_UNDEF ? fx_jv_int(0) : a[1];
        for (size_t i = 0; i < count; i++) {
            struct fx_jv x = items[i];
            if (a[0].kind != FX_JV_UNDEF && a[0].kind != FX_JV_NONE)
                TRY(attr_path(c, pos, x, a[0], &x));
            if (!fx_jv_is_number(acc) || !fx_jv_is_number(x))
                return fx_jinja_fail(c, pos, FX_ERR_FORMAT, "sum() of '%s' and '%s'",
                                     fx_jv_type_name(acc), fx_jv_type_name(x));
            int64_t r;
            if (acc.kind != FX_JV_FLOAT && x.kind != FX_JV_FLOAT &&
                !__builtin_add_overflow(acc.kind == FX_JV_INT ? acc.u.i : acc.u.b,
                                        x.kind == FX_JV_INT ? x.u.i : x.u.b, &r))
                acc = fx_jv_int(r);
            else
                acc = fx_jv_float(fx_jv_as_double(acc) + fx_jv_as_double(x));
        }
        *out = acc;
        return FX_OK;
    }
    case F_TOJSON:
        return filter_tojson(c, n, v, args, out);
    case F_WORDCOUNT: {
        TRY(fx_jinja_bind(c, pos, what, args, NULL, 0, a));
        TRY(fx_jinja_to_str(c, pos, v, &v));
        int64_t words = 0;
        bool in_word = false;
        for (uint32_t i = 0; i < v.len; i++) {
            unsigned char ch = (unsigned char)v.u.s[i];
            bool w = ch >= 0x80 || ch == '_' || (ch >= '0' && ch <= '9') ||
                     ((ch | 32) >= 'a' && (ch | 32) <= 'z');
            words += w && !in_word;
            in_word = w;
        }
        *out = fx_jv_int(words);
        return FX_OK;
    }
    }
    return fx_jinja_fail(c, pos, FX_ERR_FORMAT, "unknown filter");
}
