/* Python semantics of values for the Jinja evaluator: iteration, ordering, `in`, attribute and
 * item access with Jinja's fallbacks (a missing key is Undefined, not an error), slices,
 * arithmetic on 64-bit integers and floats, and printf-style formatting (str % values). */
#include "chat/jinja.h"

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

/* ---- helpers shared with the builtins ------------------------------------------------------ */

fx_status fx_jinja_finish_scratch(struct fx_jctx *c, uint32_t pos, size_t mark, struct fx_jv *out) {
    struct fx_jbuf *b = &c->scratch;
    if (b->err != FX_OK)
        return fx_jinja_fail_buf(c, pos, b);
    fx_status st = fx_jv_str_copy(c->arena, b->p ? b->p + mark : "", b->len - mark, out);
    b->len = mark;
    return st == FX_OK ? FX_OK : fx_jinja_fail_mem(c, pos);
}

fx_status fx_jinja_to_str(struct fx_jctx *c, uint32_t pos, struct fx_jv v, struct fx_jv *out) {
    if (v.kind == FX_JV_STR) {
        *out = v;
        return FX_OK;
    }
    size_t mark = c->scratch.len;
    fx_jv_write_str(&c->scratch, v);
    return fx_jinja_finish_scratch(c, pos, mark, out);
}

fx_status fx_jinja_iterate(struct fx_jctx *c, uint32_t pos, struct fx_jv v,
                           const struct fx_jv **items, size_t *n) {
    switch (v.kind) {
    case FX_JV_LIST:
        *items = v.u.list->v;
        *n = v.u.list->n;
        return FX_OK;
    case FX_JV_UNDEF:
        *items = NULL;
        *n = 0;
        return FX_OK;
    case FX_JV_DICT: {
        const struct fx_jdict *d = v.u.dict;
        struct fx_jv *keys = fx_jarena_alloc(c->arena, (d->n ? d->n : 1) * sizeof *keys);
        if (!keys)
            return fx_jinja_fail_mem(c, pos);
        for (uint32_t i = 0; i < d->n; i++)
            keys[i] = d->e[i].key;
        *items = keys;
        *n = d->n;
        return FX_OK;
    }
    case FX_JV_STR: {
        size_t count = fx_jutf8_count(v.u.s, v.len);
        struct fx_jv *chars = fx_jarena_alloc(c->arena, (count ? count : 1) * sizeof *chars);
        if (!chars)
            return fx_jinja_fail_mem(c, pos);
        size_t k = 0;
        for (uint32_t i = 0; i < v.len;) {
            uint32_t j = i + 1;
            while (j < v.len && ((unsigned char)v.u.s[j] & 0xc0) == 0x80)
                j++;
            chars[k++] = fx_jv_strref(v.u.s + i, j - i);
            i = j;
        }
        *items = chars;
        *n = k;
        return FX_OK;
    }
    default:
        return fx_jinja_fail(c, pos, FX_ERR_FORMAT, "'%s' object is not iterable",
                             fx_jv_type_name(v));
    }
}

fx_status fx_jinja_compare(struct fx_jctx *c, uint32_t pos, struct fx_jv a, struct fx_jv b,
                           int *out) {
    if (fx_jv_is_number(a) && fx_jv_is_number(b)) {
        if (a.kind != FX_JV_FLOAT && b.kind != FX_JV_FLOAT) {
            int64_t x = a.kind == FX_JV_INT ? a.u.i : a.u.b,
                    y = b.kind == FX_JV_INT ? b.u.i : b.u.b;
            *out = (x > y) - (x < y);
        } else {
            double x = fx_jv_as_double(a), y = fx_jv_as_double(b);
            *out = (x > y) - (x < y);
        }
        return FX_OK;
    }
    if (a.kind == FX_JV_STR && b.kind == FX_JV_STR) {
        size_t n = a.len < b.len ? a.len : b.len;
        int r = memcmp(a.u.s, b.u.s, n);
        *out = r ? (r > 0) - (r < 0) : (a.len > b.len) - (a.len < b.len);
        return FX_OK;
    }
    if (a.kind == FX_JV_LIST && b.kind == FX_JV_LIST && a.sub == b.sub && a.sub != FX_JL_ITER) {
        const struct fx_jlist *x = a.u.list, *y = b.u.list;
        for (uint32_t i = 0; i < x->n && i < y->n; i++) {
            if (fx_jv_equal(x->v[i], y->v[i]))
                continue;
            return fx_jinja_compare(c, pos, x->v[i], y->v[i], out);
        }
        *out = (x->n > y->n) - (x->n < y->n);
        return FX_OK;
    }
    if (a.kind == FX_JV_UNDEF)
        return fx_jinja_undefined(c, pos, a);
    if (b.kind == FX_JV_UNDEF)
        return fx_jinja_undefined(c, pos, b);
    return fx_jinja_fail(c, pos, FX_ERR_FORMAT,
                         "ordering comparison not supported between '%s' and '%s'",
                         fx_jv_type_name(a), fx_jv_type_name(b));
}

static bool str_find(const char *h, size_t hn, const char *n, size_t nn) {
    if (nn == 0)
        return true;
    if (nn > hn)
        return false;
    const char *end = h + hn - nn;
    for (const char *p = h; p <= end; p++) {
        p = memchr(p, n[0], (size_t)(end - p) + 1);
        if (!p)
            return false;
        if (memcmp(p, n, nn) == 0)
            return true;
    }
    return false;
}

fx_status fx_jinja_contains(struct fx_jctx *c, uint32_t pos, struct fx_jv container,
                            struct fx_jv item, bool *out) {
    switch (container.kind) {
    case FX_JV_STR:
        if (item.kind != FX_JV_STR) {
            if (item.kind == FX_JV_UNDEF)
                return fx_jinja_undefined(c, pos, item);
            return fx_jinja_fail(c, pos, FX_ERR_FORMAT,
                                 "'in <string>' requires a string on the left, not '%s'",
                                 fx_jv_type_name(item));
        }
        *out = str_find(container.u.s, container.len, item.u.s, item.len);
        return FX_OK;
    case FX_JV_LIST:
        *out = false;
        for (uint32_t i = 0; i < container.u.list->n && !*out; i++)
            *out = fx_jv_equal(container.u.list->v[i], item);
        return FX_OK;
    case FX_JV_DICT:
    case FX_JV_NS:
        *out = fx_jdict_get(container.u.dict, item) != NULL;
        return FX_OK;
    case FX_JV_UNDEF:
        *out = false;
        return FX_OK;
    default:
        return fx_jinja_fail(c, pos, FX_ERR_FORMAT, "argument of type '%s' is not iterable",
                             fx_jv_type_name(container));
    }
}

/* The Undefined for a missing attribute or key of obj. */
static struct fx_jv missing(struct fx_jv obj, const char *name, size_t len) {
    return (struct fx_jv){.kind = FX_JV_UNDEF,
                          .sub = (uint8_t)(obj.kind + 1),
                          .len = (uint32_t)(len < UINT32_MAX ? len : UINT32_MAX),
                          .u.s = name};
}

fx_status fx_jinja_getattr(struct fx_jctx *c, uint32_t pos, struct fx_jv obj, const char *name,
                           size_t len, struct fx_jv *out) {
    switch (obj.kind) {
    case FX_JV_UNDEF:
        return fx_jinja_undefined(c, pos, obj);
    case FX_JV_DICT:
        /* Python attribute lookup finds dict methods before keys: d.items is the method. */
        if (fx_jinja_method(c, obj, name, len, out))
            return FX_OK;
        /* fall through */
    case FX_JV_NS: {
        const struct fx_jv *v = fx_jdict_get_str(obj.u.dict, name, len);
        *out = v ? *v : missing(obj, name, len);
        return FX_OK;
    }
    default:
        if (!fx_jinja_method(c, obj, name, len, out))
            *out = missing(obj, name, len);
        return FX_OK;
    }
}

/* A Python index into a sequence of n: negative counts from the end; false when outside. */
static bool seq_index(struct fx_jv key, size_t n, size_t *out) {
    int64_t i = key.kind == FX_JV_INT ? key.u.i : key.u.b;
    if (i < 0)
        i += (int64_t)n;
    if (i < 0 || (uint64_t)i >= n)
        return false;
    *out = (size_t)i;
    return true;
}

static bool is_ascii(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] >= 0x80)
            return false;
    return true;
}

fx_status fx_jinja_getitem(struct fx_jctx *c, uint32_t pos, struct fx_jv obj, struct fx_jv key,
                           struct fx_jv *out) {
    bool int_key = key.kind == FX_JV_INT || key.kind == FX_JV_BOOL;
    *out = fx_jv_undef();
    switch (obj.kind) {
    case FX_JV_UNDEF:
        return fx_jinja_undefined(c, pos, obj);
    case FX_JV_LIST: {
        size_t i;
        if (int_key && obj.sub != FX_JL_ITER && seq_index(key, obj.u.list->n, &i))
            *out = obj.u.list->v[i];
        break;
    }
    case FX_JV_STR: {
        size_t i, n = is_ascii(obj.u.s, obj.len) ? obj.len : fx_jutf8_count(obj.u.s, obj.len);
        if (int_key && seq_index(key, n, &i)) {
            size_t at = n == obj.len ? i : fx_jutf8_offset(obj.u.s, obj.len, i);
            size_t end = n == obj.len ? i + 1 : fx_jutf8_offset(obj.u.s, obj.len, i + 1);
            *out = fx_jv_strref(obj.u.s + at, (uint32_t)(end - at));
        }
        break;
    }
    case FX_JV_DICT: {
        const struct fx_jv *v = fx_jdict_get(obj.u.dict, key);
        if (v) {
            *out = *v;
            return FX_OK;
        }
        break;
    }
    default:
        break;
    }
    /* Jinja falls back to an attribute when a string key is not an item. */
    if (out->kind == FX_JV_UNDEF && key.kind == FX_JV_STR && obj.kind != FX_JV_LIST)
        return fx_jinja_getattr(c, pos, obj, key.u.s, key.len, out);
    if (out->kind == FX_JV_UNDEF && key.kind == FX_JV_STR)
        *out = missing(obj, key.u.s, key.len);
    return FX_OK;
}

/* Python's slice.indices(): clamps one bound. */
static int64_t slice_bound(struct fx_jv v, int64_t n, int64_t step, bool is_start) {
    if (v.kind == FX_JV_NONE || v.kind == FX_JV_UNDEF) {
        if (is_start)
            return step > 0 ? 0 : n - 1;
        return step > 0 ? n : -1;
    }
    int64_t i = v.kind == FX_JV_INT ? v.u.i : v.u.b;
    int64_t lower = step > 0 ? 0 : -1, upper = step > 0 ? n : n - 1;
    if (i < 0) {
        i = i < INT64_MIN + n ? lower : i + n;
        if (i < lower)
            i = lower;
    } else if (i > upper) {
        i = upper;
    }
    return i;
}

fx_status fx_jinja_slice(struct fx_jctx *c, uint32_t pos, struct fx_jv obj,
                         const struct fx_jv parts[3], struct fx_jv *out) {
    /* Jinja slices with Python's own [] (not its forgiving getitem), so bad types are errors. */
    if (obj.kind == FX_JV_UNDEF)
        return fx_jinja_undefined(c, pos, obj);
    if ((obj.kind != FX_JV_LIST && obj.kind != FX_JV_STR) || obj.sub == FX_JL_ITER)
        return fx_jinja_fail(c, pos, FX_ERR_FORMAT, "'%s' object is not subscriptable",
                             fx_jv_type_name(obj));
    for (int k = 0; k < 3; k++)
        if (parts[k].kind != FX_JV_NONE && parts[k].kind != FX_JV_INT &&
            parts[k].kind != FX_JV_BOOL)
            return fx_jinja_fail(c, pos, FX_ERR_FORMAT,
                                 "slice indices must be integers or None, not '%s'",
                                 fx_jv_type_name(parts[k]));
    int64_t step = parts[2].kind == FX_JV_INT    ? parts[2].u.i
                   : parts[2].kind == FX_JV_BOOL ? parts[2].u.b
                                                 : 1;
    if (step == 0)
        return fx_jinja_fail(c, pos, FX_ERR_FORMAT, "slice step cannot be zero");
    if (step == INT64_MIN)
        step = INT64_MIN + 1;
    if (obj.kind == FX_JV_LIST) {
        const struct fx_jlist *l = obj.u.list;
        int64_t len = l->n, start = slice_bound(parts[0], len, step, true),
                stop = slice_bound(parts[1], len, step, false);
        struct fx_jlist *r = fx_jarena_alloc(c->arena, sizeof *r);
        if (!r)
            return fx_jinja_fail_mem(c, pos);
        if (step == 1) {
            /* Lists are never modified once built, so a contiguous slice shares the items
             * (messages[1:] and loop_messages[loop.index:] cost no copy). */
            r->n = r->cap = stop > start ? (uint32_t)(stop - start) : 0;
            r->v = l->v + start;
            *out = fx_jv_list(r, obj.sub);
            return FX_OK;
        }
        uint64_t count = 0;
        if (step > 0 && stop > start)
            count = ((uint64_t)stop - (uint64_t)start - 1) / (uint64_t)step + 1;
        else if (step < 0 && start > stop)
            count = ((uint64_t)start - (uint64_t)stop - 1) / ((uint64_t)0 - (uint64_t)step) + 1;
        r->n = r->cap = (uint32_t)count;
        r->v = fx_jarena_alloc(c->arena, (count ? count : 1) * sizeof *r->v);
        if (!r->v)
            return fx_jinja_fail_mem(c, pos);
        for (uint64_t i = 0; i < count; i++)
            r->v[i] = l->v[start + (int64_t)i * step];
        *out = fx_jv_list(r, obj.sub);
        return FX_OK;
    }
    bool ascii = is_ascii(obj.u.s, obj.len);
    int64_t len = ascii ? obj.len : (int64_t)fx_jutf8_count(obj.u.s, obj.len);
    int64_t start = slice_bound(parts[0], len, step, true),
            stop = slice_bound(parts[1], len, step, false);
    if (step == 1) {
        /* A contiguous slice shares the bytes. */
        if (stop < start)
            stop = start;
        size_t a = ascii ? (size_t)start : fx_jutf8_offset(obj.u.s, obj.len, (size_t)start);
        size_t b = ascii ? (size_t)stop : fx_jutf8_offset(obj.u.s, obj.len, (size_t)stop);
        *out = fx_jv_strref(obj.u.s + a, (uint32_t)(b - a));
        return FX_OK;
    }
    const struct fx_jv *chars;
    size_t n_chars;
    TRY(fx_jinja_iterate(c, pos, obj, &chars, &n_chars));
    size_t mark = c->scratch.len;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
        fx_jbuf_put(&c->scratch, chars[i].u.s, chars[i].len);
        if ((step > 0 && i > INT64_MAX - step) || (step < 0 && i < INT64_MIN - step))
            break;
    }
    return fx_jinja_finish_scratch(c, pos, mark, out);
}

/* ---- arithmetic ---------------------------------------------------------------------------- */

static fx_status type_error(struct fx_jctx *c, uint32_t pos, const char *op, struct fx_jv a,
                            struct fx_jv b) {
    if (a.kind == FX_JV_UNDEF)
        return fx_jinja_undefined(c, pos, a);
    if (b.kind == FX_JV_UNDEF)
        return fx_jinja_undefined(c, pos, b);
    return fx_jinja_fail(c, pos, FX_ERR_FORMAT, "unsupported operand types for %s: '%s' and '%s'",
                         op, fx_jv_type_name(a), fx_jv_type_name(b));
}

static int64_t as_int(struct fx_jv v) {
    return v.kind == FX_JV_INT ? v.u.i : v.u.b;
}

/* s * count or list * count, with the size checked before anything is built. */
static fx_status repeat(struct fx_jctx *c, uint32_t pos, struct fx_jv seq, int64_t count,
                        struct fx_jv *out) {
    if (count < 0)
        count = 0;
    size_t unit = seq.kind == FX_JV_STR ? seq.len : seq.u.list->n;
    if (unit && (uint64_t)count > (uint64_t)c->lim->max_memory / unit)
        return fx_jinja_fail(c, pos, FX_ERR_CAPACITY, "repetition of %zu x %lld is too large", unit,
                             (long long)count);
    if (seq.kind == FX_JV_STR) {
        size_t mark = c->scratch.len;
        for (int64_t i = 0; i < count && c->scratch.err == FX_OK; i++)
            fx_jbuf_put(&c->scratch, seq.u.s, seq.len);
        return fx_jinja_finish_scratch(c, pos, mark, out);
    }
    struct fx_jlist *r = fx_jlist_new(c->arena, unit * (size_t)count);
    if (!r)
        return fx_jinja_fail_mem(c, pos);
    for (int64_t i = 0; i < count; i++)
        memcpy(r->v + (size_t)i * unit, seq.u.list->v, unit * sizeof *r->v);
    r->n = (uint32_t)(unit * (size_t)count);
    *out = fx_jv_list(r, seq.sub);
    return FX_OK;
}

fx_status fx_jinja_arith(struct fx_jctx *c, uint32_t pos, uint8_t op, struct fx_jv a,
                         struct fx_jv b, struct fx_jv *out) {
    static const char *const names[] = {
        [FX_JO_ADD] = "+",       [FX_JO_SUB] = "-", [FX_JO_MUL] = "*",  [FX_JO_DIV] = "/",
        [FX_JO_FLOORDIV] = "//", [FX_JO_MOD] = "%", [FX_JO_POW] = "**",
    };
    bool nums = fx_jv_is_number(a) && fx_jv_is_number(b);
    bool ints = nums && a.kind != FX_JV_FLOAT && b.kind != FX_JV_FLOAT;
    if (op == FX_JO_ADD && a.kind == FX_JV_STR && b.kind == FX_JV_STR) {
        size_t mark = c->scratch.len;
        fx_jbuf_put(&c->scratch, a.u.s, a.len);
        fx_jbuf_put(&c->scratch, b.u.s, b.len);
        return fx_jinja_finish_scratch(c, pos, mark, out);
    }
    if (op == FX_JO_ADD && a.kind == FX_JV_LIST && b.kind == FX_JV_LIST && a.sub == b.sub) {
        struct fx_jlist *r = fx_jlist_new(c->arena, (size_t)a.u.list->n + b.u.list->n);
        if (!r)
            return fx_jinja_fail_mem(c, pos);
        memcpy(r->v, a.u.list->v, a.u.list->n * sizeof *r->v);
        memcpy(r->v + a.u.list->n, b.u.list->v, b.u.list->n * sizeof *r->v);
        r->n = a.u.list->n + b.u.list->n;
        *out = fx_jv_list(r, a.sub);
        return FX_OK;
    }
    if ((a.kind == FX_JV_LIST && a.sub == FX_JL_ITER) ||
        (b.kind == FX_JV_LIST && b.sub == FX_JL_ITER))
        return type_error(c, pos, names[op], a, b);
    if (op == FX_JO_MUL && (a.kind == FX_JV_STR || a.kind == FX_JV_LIST) &&
        (b.kind == FX_JV_INT || b.kind == FX_JV_BOOL))
        return repeat(c, pos, a, as_int(b), out);
    if (op == FX_JO_MUL && (b.kind == FX_JV_STR || b.kind == FX_JV_LIST) &&
        (a.kind == FX_JV_INT || a.kind == FX_JV_BOOL))
        return repeat(c, pos, b, as_int(a), out);
    if (!nums)
        return type_error(c, pos, names[op], a, b);
    if (ints) {
        int64_t x = as_int(a), y = as_int(b), r = 0;
        bool overflow = false;
        switch (op) {
        case FX_JO_ADD:
            overflow = __builtin_add_overflow(x, y, &r);
            break;
        case FX_JO_SUB:
            overflow = __builtin_sub_overflow(x, y, &r);
            break;
        case FX_JO_MUL:
            overflow = __builtin_mul_overflow(x, y, &r);
            break;
        case FX_JO_DIV:
            if (y == 0)
                return fx_jinja_fail(c, pos, FX_ERR_FORMAT, "division by zero");
            *out = fx_jv_float((double)x / (double)y);
            return FX_OK;
        case FX_JO_FLOORDIV:
        case FX_JO_MOD:
            if (y == 0)
                return fx_jinja_fail(c, pos, FX_ERR_FORMAT, "integer division or modulo by zero");
            if (x == INT64_MIN && y == -1) {
                overflow = op == FX_JO_FLOORDIV;
                r = 0;
                break;
            }
            /* Python rounds the quotient down and gives the remainder the divisor's sign. */
            r = x / y;
            if ((x % y != 0) && ((x < 0) != (y < 0)))
                r--;
            if (op == FX_JO_MOD)
                r = x - r * y;
            break;
        case FX_JO_POW:
            if (y < 0) {
                *out = fx_jv_float(pow((double)x, (double)y));
                return FX_OK;
            }
            r = 1;
            for (int64_t e = y, base = x; e > 0 && !overflow; e >>= 1) {
                if (e & 1)
                    overflow = __builtin_mul_overflow(r, base, &r);
                if (e > 1 && !overflow)
                    overflow = __builtin_mul_overflow(base, base, &base);
            }
            break;
        }
        if (overflow)
            return fx_jinja_fail(c, pos, FX_ERR_FORMAT, "integer overflow in %lld %s %lld",
                                 (long long)x, names[op], (long long)y);
        *out = fx_jv_int(r);
        return FX_OK;
    }
    double x = fx_jv_as_double(a), y = fx_jv_as_double(b), r = 0;
    switch (op) {
    case FX_JO_ADD:
        r = x + y;
        break;
    case FX_JO_SUB:
        r = x - y;
        break;
    case FX_JO_MUL:
        r = x * y;
        break;
    case FX_JO_DIV:
    case FX_JO_FLOORDIV:
    case FX_JO_MOD:
        if (y == 0)
            return fx_jinja_fail(c, pos, FX_ERR_FORMAT, "float division by zero");
        if (op == FX_JO_DIV) {
            r = x / y;
            break;
        }
        /* CPython's float divmod. */
        double mod = fmod(x, y), div = (x - mod) / y;
        if (mod != 0) {
            if ((y < 0) != (mod < 0)) {
                mod += y;
                div -= 1.0;
            }
        } else {
            mod = copysign(0.0, y);
        }
        double fdiv;
        if (div != 0) {
            fdiv = floor(div);
            if (div - fdiv > 0.5)
                fdiv += 1.0;
        } else {
            fdiv = copysign(0.0, x / y);
        }
        r = op == FX_JO_MOD ? mod : fdiv;
        break;
    case FX_JO_POW:
        r = pow(x, y);
        break;
    }
    *out = fx_jv_float(r);
    return FX_OK;
}

/* ---- printf-style formatting --------------------------------------------------------------- */

/* Appends s padded to `width` code points (left-aligned with '-') and cut to `prec` ones. */
static void put_padded(struct fx_jbuf *b, struct fx_jv s, int width, int prec, bool left) {
    size_t n = s.len;
    if (prec >= 0)
        n = fx_jutf8_offset(s.u.s, s.len, (size_t)prec);
    size_t chars = fx_jutf8_count(s.u.s, n);
    size_t pad = width > 0 && (size_t)width > chars ? (size_t)width - chars : 0;
    for (size_t i = 0; i < pad && !left; i++)
        fx_jbuf_putc(b, ' ');
    fx_jbuf_put(b, s.u.s, n);
    for (size_t i = 0; i < pad && left; i++)
        fx_jbuf_putc(b, ' ');
}

/* The conversion spec handed to snprintf is assembled from characters checked above (flags,
 * width, precision, one conversion letter), so the non-literal format is safe. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
fx_status fx_jinja_format(struct fx_jctx *c, uint32_t pos, struct fx_jv fmt,
                          const struct fx_jv *vals, size_t n_vals, struct fx_jv *out) {
    const struct fx_jdict *map = n_vals == 1 && vals[0].kind == FX_JV_DICT ? vals[0].u.dict : NULL;
    size_t next = 0, mark = c->scratch.len;
    struct fx_jbuf *b = &c->scratch;
    const char *f = fmt.u.s;
    size_t n = fmt.len;
    fx_status st = FX_OK;
    for (size_t i = 0; i < n && st == FX_OK; i++) {
        if (f[i] != '%') {
            size_t j = i;
            while (j < n && f[j] != '%')
                j++;
            fx_jbuf_put(b, f + i, j - i);
            i = j - 1;
            continue;
        }
        if (++i >= n) {
            st = fx_jinja_fail(c, pos, FX_ERR_FORMAT, "incomplete format");
            break;
        }
        if (f[i] == '%') {
            fx_jbuf_putc(b, '%');
            continue;
        }
        struct fx_jv v;
        if (f[i] == '(') {
            size_t j = i + 1;
            while (j < n && f[j] != ')')
                j++;
            const struct fx_jv *found =
                map && j < n ? fx_jdict_get_str(map, f + i + 1, j - i - 1) : NULL;
            if (!found) {
                st = fx_jinja_fail(c, pos, FX_ERR_FORMAT, "format key '%.*s' not found",
                                   (int)(j - i - 1 < 40 ? j - i - 1 : 40), f + i + 1);
                break;
            }
            v = *found;
            i = j + 1;
        } else {
            if (next >= n_vals || map) {
                st = fx_jinja_fail(c, pos, FX_ERR_FORMAT, "not enough arguments for format string");
                break;
            }
            v = vals[next++];
        }
        char spec[32] = "%";
        size_t sl = 1;
        bool left = false;
        while (i < n && f[i] && strchr("-+ 0#", f[i]) && sl < 8) {
            left |= f[i] == '-';
            spec[sl++] = f[i++];
        }
        int width = 0, prec = -1;
        while (i < n && f[i] >= '0' && f[i] <= '9' && width < 10000)
            width = width * 10 + (f[i++] - '0');
        if (i < n && f[i] == '.') {
            prec = 0;
            for (i++; i < n && f[i] >= '0' && f[i] <= '9' && prec < 10000; i++)
                prec = prec * 10 + (f[i] - '0');
        }
        while (i < n && (f[i] == 'h' || f[i] == 'l' || f[i] == 'L'))
            i++;
        if (i >= n) {
            st = fx_jinja_fail(c, pos, FX_ERR_FORMAT, "incomplete format");
            break;
        }
        char conv = f[i];
        if (conv == 's' || conv == 'r' || conv == 'a') {
            struct fx_jv s;
            size_t m2 = b->len;
            if (conv == 's')
                fx_jv_write_str(b, v);
            else
                fx_jv_write_repr(b, v);
            st = fx_jinja_finish_scratch(c, pos, m2, &s);
            if (st == FX_OK)
                put_padded(b, s, width, prec, left);
            continue;
        }
        bool is_int_conv = conv && strchr("diouxXc", conv) != NULL;
        if (!conv || !strchr("diouxXceEfFgG", conv)) {
            st = fx_jinja_fail(c, pos, FX_ERR_FORMAT, "unsupported format character 0x%02x",
                               (unsigned char)conv);
            break;
        }
        if (!fx_jv_is_number(v)) {
            st = fx_jinja_fail(c, pos, FX_ERR_FORMAT, "%%%c format: a number is required, not '%s'",
                               conv, fx_jv_type_name(v));
            break;
        }
        sl += (size_t)snprintf(spec + sl, sizeof spec - sl, "%d", width);
        if (prec >= 0)
            sl += (size_t)snprintf(spec + sl, sizeof spec - sl, ".%d", prec);
        char tmp[512];
        if (is_int_conv) {
            double d = fx_jv_as_double(v);
            long long iv = v.kind == FX_JV_INT ? v.u.i : (long long)d;
            snprintf(spec + sl, sizeof spec - sl, "ll%c", conv == 'i' || conv == 'u' ? 'd' : conv);
            if (conv == 'c')
                snprintf(spec + sl, sizeof spec - sl, "c");
            if (conv == 'c')
                snprintf(tmp, sizeof tmp, spec, (int)(iv & 0x7f));
            else
                snprintf(tmp, sizeof tmp, spec, iv);
        } else {
            snprintf(spec + sl, sizeof spec - sl, "%c", conv);
            snprintf(tmp, sizeof tmp, spec, fx_jv_as_double(v));
        }
        fx_jbuf_puts(b, tmp);
    }
    if (st == FX_OK && !map && next < n_vals)
        st = fx_jinja_fail(c, pos, FX_ERR_FORMAT,
                           "not all arguments converted during string formatting");
    if (st != FX_OK) {
        b->len = mark;
        return st;
    }
    return fx_jinja_finish_scratch(c, pos, mark, out);
}
#pragma GCC diagnostic pop
