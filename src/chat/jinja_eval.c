/* The Jinja evaluator: statements (text, output, if, for, set, macro) and expressions with
 * Python's operator semantics. Each render owns its scopes and values (an arena) and counts
 * evaluation steps and depth against its limits. */
#include "chat/jinja.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

/* Variables set by {% set %}, loop targets, macro arguments. A for loop reuses one scope for
 * all its iterations, emptied at the start of each (Jinja gives each iteration fresh locals). */
struct fx_jscope {
    struct fx_jscope *parent;
    uint32_t n, cap;
    struct scope_var {
        const char *name;
        uint32_t len;
        struct fx_jv v;
    } * vars;
};

fx_status fx_jinja_fail(struct fx_jctx *c, uint32_t pos, fx_status code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fx_status st = fx_jinja_verror(c->err, code, c->prog->src, c->prog->src_len, pos, "", fmt, ap);
    va_end(ap);
    return st;
}

fx_status fx_jinja_fail_mem(struct fx_jctx *c, uint32_t pos) {
    if (c->arena->fail == FX_ERR_CAPACITY)
        return fx_jinja_fail(c, pos, FX_ERR_CAPACITY,
                             "template needs more than %zu bytes of memory", c->lim->max_memory);
    return fx_jinja_fail(c, pos, FX_ERR_NOMEM, "out of memory");
}

fx_status fx_jinja_fail_buf(struct fx_jctx *c, uint32_t pos, const struct fx_jbuf *b) {
    if (b->err == FX_ERR_CAPACITY)
        return fx_jinja_fail(c, pos, FX_ERR_CAPACITY, "rendered text exceeds %zu bytes", b->limit);
    return fx_jinja_fail(c, pos, FX_ERR_NOMEM, "out of memory");
}

#define TRY(expr)                                                                                  \
    do {                                                                                           \
        fx_status st_ = (expr);                                                                    \
        if (st_ != FX_OK)                                                                          \
            return st_;                                                                            \
    } while (0)

fx_status fx_jinja_undefined(struct fx_jctx *c, uint32_t pos, struct fx_jv v) {
    /* A missed attribute or key remembers the kind of object it was looked up on (sub). */
    if (v.sub)
        return fx_jinja_fail(c, pos, FX_ERR_FORMAT, "'%s' object has no attribute '%.*s'",
                             fx_jv_type_name((struct fx_jv){.kind = (uint8_t)(v.sub - 1)}),
                             (int)(v.len < 80 ? v.len : 80), v.u.s);
    if (v.len)
        return fx_jinja_fail(c, pos, FX_ERR_FORMAT, "'%.*s' is undefined",
                             (int)(v.len < 80 ? v.len : 80), v.u.s);
    return fx_jinja_fail(c, pos, FX_ERR_FORMAT, "value is undefined");
}

/* ---- scopes -------------------------------------------------------------------------------- */

static struct fx_jscope *scope_new(struct fx_jctx *c, struct fx_jscope *parent) {
    struct fx_jscope *s = fx_jarena_alloc(c->arena, sizeof *s);
    if (s)
        *s = (struct fx_jscope){.parent = parent};
    return s;
}

static bool scope_set(struct fx_jctx *c, struct fx_jscope *s, const char *name, uint32_t len,
                      struct fx_jv v) {
    for (uint32_t i = 0; i < s->n; i++) {
        if (s->vars[i].len == len && memcmp(s->vars[i].name, name, len) == 0) {
            s->vars[i].v = v;
            return true;
        }
    }
    if (s->n == s->cap) {
        uint32_t cap = s->cap ? s->cap * 2 : 8;
        struct scope_var *nv = fx_jarena_alloc(c->arena, cap * sizeof *nv);
        if (!nv)
            return false;
        if (s->n)
            memcpy(nv, s->vars, s->n * sizeof *nv);
        s->vars = nv;
        s->cap = cap;
    }
    s->vars[s->n++] = (struct scope_var){name, len, v};
    return true;
}

static struct fx_jv lookup(const struct fx_jctx *c, const char *name, uint32_t len) {
    for (const struct fx_jscope *s = c->scope; s; s = s->parent)
        for (uint32_t i = s->n; i-- > 0;)
            if (s->vars[i].len == len && memcmp(s->vars[i].name, name, len) == 0)
                return s->vars[i].v;
    const struct fx_jv *v = fx_jdict_get_str(c->vars, name, len);
    if (v)
        return *v;
    struct fx_jv g;
    if (fx_jinja_global(name, len, &g))
        return g;
    return (struct fx_jv){.kind = FX_JV_UNDEF, .len = len, .u.s = name};
}

/* ---- expressions --------------------------------------------------------------------------- */

static fx_status eval(struct fx_jctx *c, const struct fx_jnode *n, struct fx_jv *out);

static fx_status count_step(struct fx_jctx *c, uint32_t pos) {
    if (++c->steps > c->lim->max_steps)
        return fx_jinja_fail(c, pos, FX_ERR_CAPACITY,
                             "template exceeded %llu evaluation steps (a loop too long?)",
                             (unsigned long long)c->lim->max_steps);
    if (c->depth >= c->lim->max_depth)
        return fx_jinja_fail(c, pos, FX_ERR_CAPACITY,
                             "template evaluation nested more than %u deep (runaway recursion?)",
                             c->lim->max_depth);
    return FX_OK;
}

/* Evaluates call arguments into arena arrays. */
static fx_status eval_args(struct fx_jctx *c, const struct fx_jnode *n, struct fx_jargs *args) {
    struct fx_jv *pos = NULL, *kw = NULL;
    if (n->n_kids) {
        pos = fx_jarena_alloc(c->arena, n->n_kids * sizeof *pos);
        if (!pos)
            return fx_jinja_fail_mem(c, n->pos);
        for (uint32_t i = 0; i < n->n_kids; i++)
            TRY(eval(c, n->kids[i], &pos[i]));
    }
    if (n->n_kids2) {
        kw = fx_jarena_alloc(c->arena, n->n_kids2 * sizeof *kw);
        if (!kw)
            return fx_jinja_fail_mem(c, n->pos);
        for (uint32_t i = 0; i < n->n_kids2; i++)
            TRY(eval(c, n->kids2[i]->a, &kw[i]));
    }
    *args =
        (struct fx_jargs){pos, n->n_kids, kw, (const struct fx_jnode *const *)n->kids2, n->n_kids2};
    return FX_OK;
}

fx_status fx_jinja_bind(struct fx_jctx *c, uint32_t pos, const char *what,
                        const struct fx_jargs *args, const char *const *names, uint32_t n_names,
                        struct fx_jv *out) {
    if (args->n_pos > n_names)
        return fx_jinja_fail(c, pos, FX_ERR_FORMAT, "%s takes at most %u argument(s), got %u", what,
                             n_names, args->n_pos);
    for (uint32_t i = 0; i < n_names; i++)
        out[i] = i < args->n_pos ? args->pos[i] : fx_jv_undef();
    for (uint32_t k = 0; k < args->n_kw; k++) {
        const struct fx_jnode *kw = args->kw_node[k];
        uint32_t i = 0;
        while (i < n_names &&
               !(strlen(names[i]) == kw->name_len && memcmp(names[i], kw->name, kw->name_len) == 0))
            i++;
        if (i == n_names)
            return fx_jinja_fail(c, kw->pos, FX_ERR_FORMAT, "%s got an unexpected argument '%.*s'",
                                 what, (int)kw->name_len, kw->name);
        if (i < args->n_pos)
            return fx_jinja_fail(c, kw->pos, FX_ERR_FORMAT, "%s got argument '%s' twice", what,
                                 names[i]);
        out[i] = args->kw_val[k];
    }
    return FX_OK;
}

static fx_status exec_body(struct fx_jctx *c, struct fx_jnode *const *body, uint32_t n);

/* Runs body with text going to the scratch buffer and returns what it wrote. */
static fx_status capture(struct fx_jctx *c, uint32_t pos, struct fx_jnode *const *body, uint32_t n,
                         struct fx_jv *out) {
    struct fx_jbuf *saved = c->out;
    size_t mark = c->scratch.len;
    c->out = &c->scratch;
    fx_status st = exec_body(c, body, n);
    c->out = saved;
    if (st != FX_OK) {
        c->scratch.len = mark;
        return st;
    }
    return fx_jinja_finish_scratch(c, pos, mark, out);
}

fx_status fx_jinja_call_macro(struct fx_jctx *c, uint32_t pos, const struct fx_jnode *macro,
                              const struct fx_jargs *args, struct fx_jv *out) {
    struct fx_jscope *s = scope_new(c, c->root);
    if (!s)
        return fx_jinja_fail_mem(c, pos);
    struct fx_jv vals[64];
    if (macro->n_targets > 64)
        return fx_jinja_fail(c, macro->pos, FX_ERR_UNSUPPORTED,
                             "macro has more than 64 parameters");
    char what[96];
    snprintf(what, sizeof what, "macro '%.*s'", (int)(macro->name_len < 60 ? macro->name_len : 60),
             macro->name);
    /* Parameter names are not NUL-terminated in the tree: bind by hand. */
    if (args->n_pos > macro->n_targets)
        return fx_jinja_fail(c, pos, FX_ERR_FORMAT, "%s takes at most %u argument(s), got %u", what,
                             macro->n_targets, args->n_pos);
    for (uint32_t i = 0; i < macro->n_targets; i++)
        vals[i] = i < args->n_pos ? args->pos[i] : fx_jv_undef();
    bool given[64] = {false};
    for (uint32_t i = 0; i < args->n_pos; i++)
        given[i] = true;
    for (uint32_t k = 0; k < args->n_kw; k++) {
        const struct fx_jnode *kw = args->kw_node[k];
        uint32_t i = 0;
        while (i < macro->n_targets &&
               !(macro->targets[i]->name_len == kw->name_len &&
                 memcmp(macro->targets[i]->name, kw->name, kw->name_len) == 0))
            i++;
        if (i == macro->n_targets || given[i])
            return fx_jinja_fail(c, kw->pos, FX_ERR_FORMAT, "%s got %s argument '%.*s'", what,
                                 i == macro->n_targets ? "an unexpected" : "a repeated",
                                 (int)kw->name_len, kw->name);
        vals[i] = args->kw_val[k];
        given[i] = true;
    }
    struct fx_jscope *saved = c->scope;
    int saved_ctl = c->loop_ctl;
    c->scope = s;
    fx_status st = FX_OK;
    /* Defaults are evaluated in the macro's scope, after the parameters before them. */
    for (uint32_t i = 0; i < macro->n_targets && st == FX_OK; i++) {
        const struct fx_jnode *p = macro->targets[i];
        if (!given[i] && p->a)
            st = eval(c, p->a, &vals[i]);
        if (st == FX_OK && !scope_set(c, s, p->name, p->name_len, vals[i]))
            st = fx_jinja_fail_mem(c, pos);
    }
    if (st == FX_OK)
        st = capture(c, pos, macro->kids, macro->n_kids, out);
    c->scope = saved;
    c->loop_ctl = saved_ctl;
    return st;
}

static fx_status eval_call(struct fx_jctx *c, const struct fx_jnode *n, struct fx_jv *out) {
    struct fx_jv fn;
    TRY(eval(c, n->a, &fn));
    struct fx_jargs args;
    TRY(eval_args(c, n, &args));
    switch (fn.kind) {
    case FX_JV_MACRO:
        return fx_jinja_call_macro(c, n->pos, fn.u.macro, &args, out);
    case FX_JV_FUNC:
    case FX_JV_METHOD:
        return fx_jinja_call_builtin(c, n->pos, fn, &args, out);
    case FX_JV_UNDEF:
        return fx_jinja_undefined(c, n->pos, fn);
    default:
        return fx_jinja_fail(c, n->pos, FX_ERR_FORMAT, "'%s' object is not callable",
                             fx_jv_type_name(fn));
    }
}

static fx_status eval_inner(struct fx_jctx *c, const struct fx_jnode *n, struct fx_jv *out) {
    switch (n->kind) {
    case FX_JN_CONST:
        *out = n->value;
        return FX_OK;
    case FX_JN_NAME:
        *out = lookup(c, n->name, n->name_len);
        return FX_OK;
    case FX_JN_LIST:
    case FX_JN_TUPLE: {
        struct fx_jlist *l = fx_jlist_new(c->arena, n->n_kids);
        if (!l)
            return fx_jinja_fail_mem(c, n->pos);
        for (uint32_t i = 0; i < n->n_kids; i++)
            TRY(eval(c, n->kids[i], &l->v[i]));
        l->n = n->n_kids;
        *out = fx_jv_list(l, n->kind == FX_JN_TUPLE);
        return FX_OK;
    }
    case FX_JN_DICT: {
        struct fx_jdict *d = fx_jdict_new(c->arena, n->n_kids);
        if (!d)
            return fx_jinja_fail_mem(c, n->pos);
        for (uint32_t i = 0; i < n->n_kids; i++) {
            struct fx_jv k, v;
            TRY(eval(c, n->kids[i], &k));
            TRY(eval(c, n->kids2[i], &v));
            if (k.kind == FX_JV_LIST && !k.sub)
                return fx_jinja_fail(c, n->kids[i]->pos, FX_ERR_FORMAT, "unhashable type: '%s'",
                                     fx_jv_type_name(k));
            if (k.kind == FX_JV_DICT || k.kind == FX_JV_NS || k.kind == FX_JV_UNDEF)
                return k.kind == FX_JV_UNDEF
                           ? fx_jinja_undefined(c, n->kids[i]->pos, k)
                           : fx_jinja_fail(c, n->kids[i]->pos, FX_ERR_FORMAT,
                                           "unhashable type: '%s'", fx_jv_type_name(k));
            if (!fx_jdict_set(c->arena, d, k, v))
                return fx_jinja_fail_mem(c, n->pos);
        }
        *out = (struct fx_jv){.kind = FX_JV_DICT, .u.dict = d};
        return FX_OK;
    }
    case FX_JN_ATTR: {
        struct fx_jv obj;
        TRY(eval(c, n->a, &obj));
        /* An undefined object is reported where it is named, not at the '.'. */
        return fx_jinja_getattr(c, obj.kind == FX_JV_UNDEF ? n->a->pos : n->pos, obj, n->name,
                                n->name_len, out);
    }
    case FX_JN_ITEM: {
        struct fx_jv obj, key;
        TRY(eval(c, n->a, &obj));
        TRY(eval(c, n->b, &key));
        return fx_jinja_getitem(c, obj.kind == FX_JV_UNDEF ? n->a->pos : n->pos, obj, key, out);
    }
    case FX_JN_SLICE: {
        struct fx_jv obj, parts[3];
        TRY(eval(c, n->a, &obj));
        for (int k = 0; k < 3; k++) {
            parts[k] = fx_jv_none();
            if (n->kids[k])
                TRY(eval(c, n->kids[k], &parts[k]));
        }
        return fx_jinja_slice(c, n->pos, obj, parts, out);
    }
    case FX_JN_CALL:
        return eval_call(c, n, out);
    case FX_JN_FILTER: {
        struct fx_jv v;
        TRY(eval(c, n->a, &v));
        struct fx_jargs args;
        TRY(eval_args(c, n, &args));
        return fx_jinja_apply_filter(c, n, v, &args, out);
    }
    case FX_JN_TEST: {
        struct fx_jv v;
        TRY(eval(c, n->a, &v));
        struct fx_jargs args;
        TRY(eval_args(c, n, &args));
        bool r;
        TRY(fx_jinja_apply_test(c, n, n->op, v, &args, &r));
        *out = fx_jv_bool(r != (bool)n->flag);
        return FX_OK;
    }
    case FX_JN_NOT: {
        struct fx_jv v;
        TRY(eval(c, n->a, &v));
        *out = fx_jv_bool(!fx_jv_truthy(v));
        return FX_OK;
    }
    case FX_JN_NEG:
    case FX_JN_POS: {
        struct fx_jv v;
        TRY(eval(c, n->a, &v));
        if (v.kind == FX_JV_BOOL)
            v = fx_jv_int(v.u.b);
        if (n->kind == FX_JN_POS && (v.kind == FX_JV_INT || v.kind == FX_JV_FLOAT)) {
            *out = v;
            return FX_OK;
        }
        if (v.kind == FX_JV_INT && v.u.i != INT64_MIN) {
            *out = fx_jv_int(-v.u.i);
            return FX_OK;
        }
        if (v.kind == FX_JV_FLOAT) {
            *out = fx_jv_float(-v.u.f);
            return FX_OK;
        }
        if (v.kind == FX_JV_UNDEF)
            return fx_jinja_undefined(c, n->pos, v);
        return fx_jinja_fail(c, n->pos, FX_ERR_FORMAT, "bad operand type for unary %c: '%s'",
                             n->kind == FX_JN_NEG ? '-' : '+', fx_jv_type_name(v));
    }
    case FX_JN_BINOP: {
        struct fx_jv a, b;
        TRY(eval(c, n->a, &a));
        TRY(eval(c, n->b, &b));
        if (n->op == FX_JO_CONCAT) {
            size_t mark = c->scratch.len;
            fx_jv_write_str(&c->scratch, a);
            fx_jv_write_str(&c->scratch, b);
            return fx_jinja_finish_scratch(c, n->pos, mark, out);
        }
        if (n->op == FX_JO_MOD && a.kind == FX_JV_STR) {
            /* printf-style formatting; a tuple supplies several values. */
            bool many = b.kind == FX_JV_LIST && b.sub;
            return fx_jinja_format(c, n->pos, a, many ? b.u.list->v : &b, many ? b.u.list->n : 1,
                                   out);
        }
        return fx_jinja_arith(c, n->pos, n->op, a, b, out);
    }
    case FX_JN_COMPARE: {
        struct fx_jv left;
        TRY(eval(c, n->a, &left));
        for (uint32_t i = 0; i < n->n_kids; i++) {
            struct fx_jv right;
            TRY(eval(c, n->kids[i], &right));
            bool r;
            uint8_t op = n->cmp_ops[i];
            if (op == FX_JO_EQ || op == FX_JO_NE) {
                r = fx_jv_equal(left, right) == (op == FX_JO_EQ);
            } else if (op == FX_JO_IN || op == FX_JO_NOTIN) {
                TRY(fx_jinja_contains(c, n->kids[i]->pos, right, left, &r));
                r = r == (op == FX_JO_IN);
            } else {
                int cmp;
                TRY(fx_jinja_compare(c, n->kids[i]->pos, left, right, &cmp));
                r = op == FX_JO_LT   ? cmp < 0
                    : op == FX_JO_LE ? cmp <= 0
                    : op == FX_JO_GT ? cmp > 0
                                     : cmp >= 0;
            }
            if (!r) {
                *out = fx_jv_bool(false);
                return FX_OK;
            }
            left = right;
        }
        *out = fx_jv_bool(true);
        return FX_OK;
    }
    case FX_JN_AND:
    case FX_JN_OR: {
        TRY(eval(c, n->a, out));
        if (fx_jv_truthy(*out) == (n->kind == FX_JN_AND))
            return eval(c, n->b, out);
        return FX_OK;
    }
    case FX_JN_COND: {
        struct fx_jv t;
        TRY(eval(c, n->a, &t));
        if (fx_jv_truthy(t))
            return eval(c, n->b, out);
        if (n->c)
            return eval(c, n->c, out);
        *out = fx_jv_undef();
        return FX_OK;
    }
    default:
        return fx_jinja_fail(c, n->pos, FX_ERR_FORMAT, "not an expression");
    }
}

static fx_status eval(struct fx_jctx *c, const struct fx_jnode *n, struct fx_jv *out) {
    TRY(count_step(c, n->pos));
    c->depth++;
    fx_status st = eval_inner(c, n, out);
    c->depth--;
    return st;
}

/* ---- statements ---------------------------------------------------------------------------- */

static fx_status write_value(struct fx_jctx *c, uint32_t pos, struct fx_jv v) {
    if (v.kind == FX_JV_STR)
        fx_jbuf_put(c->out, v.u.s, v.len);
    else
        fx_jv_write_str(c->out, v);
    return c->out->err == FX_OK ? FX_OK : fx_jinja_fail_buf(c, pos, c->out);
}

/* Binds loop or set targets: one name takes the value, several unpack a sequence. */
static fx_status assign_targets(struct fx_jctx *c, const struct fx_jnode *n, struct fx_jv v) {
    if (n->n_targets == 1) {
        const struct fx_jnode *t = n->targets[0];
        if (!scope_set(c, c->scope, t->name, t->name_len, v))
            return fx_jinja_fail_mem(c, n->pos);
        return FX_OK;
    }
    const struct fx_jv *items;
    size_t count;
    if (v.kind == FX_JV_UNDEF)
        return fx_jinja_undefined(c, n->pos, v);
    TRY(fx_jinja_iterate(c, n->pos, v, &items, &count));
    if (count != n->n_targets)
        return fx_jinja_fail(c, n->pos, FX_ERR_FORMAT, "cannot unpack %zu values into %u names",
                             count, n->n_targets);
    for (uint32_t i = 0; i < n->n_targets; i++) {
        const struct fx_jnode *t = n->targets[i];
        if (!scope_set(c, c->scope, t->name, t->name_len, items[i]))
            return fx_jinja_fail_mem(c, n->pos);
    }
    return FX_OK;
}

static fx_status exec_for(struct fx_jctx *c, const struct fx_jnode *n) {
    struct fx_jv seq;
    TRY(eval(c, n->a, &seq));
    const struct fx_jv *items;
    size_t count;
    TRY(fx_jinja_iterate(c, n->a->pos, seq, &items, &count));
    struct fx_jscope *outer = c->scope, *s = scope_new(c, outer);
    if (!s)
        return fx_jinja_fail_mem(c, n->pos);
    c->scope = s;
    fx_status st = FX_OK;
    if (n->flag && count) {
        /* "for x in xs if cond": the condition sees the target but not `loop`, and the loop
         * (loop.length, loop.last) runs over what passes. */
        struct fx_jv *kept = fx_jarena_alloc(c->arena, count * sizeof *kept);
        size_t k = 0;
        if (!kept)
            st = fx_jinja_fail_mem(c, n->pos);
        for (size_t i = 0; i < count && st == FX_OK; i++) {
            struct fx_jv t;
            s->n = 0;
            st = assign_targets(c, n, items[i]);
            if (st == FX_OK)
                st = eval(c, n->b, &t);
            if (st == FX_OK && fx_jv_truthy(t))
                kept[k++] = items[i];
        }
        items = kept;
        count = k;
    }
    struct fx_jloop *loop = fx_jarena_alloc(c->arena, sizeof *loop);
    if (st == FX_OK && !loop)
        st = fx_jinja_fail_mem(c, n->pos);
    for (size_t i = 0; i < count && st == FX_OK; i++) {
        *loop = (struct fx_jloop){.index0 = (int64_t)i, .length = (int64_t)count, .items = items};
        s->n = 0;
        st = assign_targets(c, n, items[i]);
        if (st == FX_OK &&
            !scope_set(c, s, "loop", 4, (struct fx_jv){.kind = FX_JV_LOOP, .u.loop = loop}))
            st = fx_jinja_fail_mem(c, n->pos);
        if (st == FX_OK)
            st = exec_body(c, n->kids, n->n_kids);
        int ctl = c->loop_ctl;
        c->loop_ctl = 0;
        if (ctl == 1)
            break;
    }
    c->scope = outer;
    if (st == FX_OK && count == 0 && n->n_kids2)
        st = exec_body(c, n->kids2, n->n_kids2);
    return st;
}

static fx_status exec_set(struct fx_jctx *c, const struct fx_jnode *n) {
    struct fx_jv v;
    if (n->kind == FX_JN_SETBLOCK)
        TRY(capture(c, n->pos, n->kids, n->n_kids, &v));
    else
        TRY(eval(c, n->a, &v));
    if (!n->c)
        return assign_targets(c, n, v);
    const struct fx_jnode *attr = n->c;
    struct fx_jv obj = lookup(c, attr->a->name, attr->a->name_len);
    if (obj.kind != FX_JV_NS)
        return fx_jinja_fail(c, attr->pos, FX_ERR_FORMAT,
                             "cannot assign attribute on non-namespace object '%.*s' (%s)",
                             (int)attr->a->name_len, attr->a->name, fx_jv_type_name(obj));
    if (!fx_jdict_set(c->arena, obj.u.dict, fx_jv_strref(attr->name, attr->name_len), v))
        return fx_jinja_fail_mem(c, n->pos);
    return FX_OK;
}

static fx_status exec_node(struct fx_jctx *c, const struct fx_jnode *n) {
    switch (n->kind) {
    case FX_JN_TEXT:
        fx_jbuf_put(c->out, n->name, n->name_len);
        return c->out->err == FX_OK ? FX_OK : fx_jinja_fail_buf(c, n->pos, c->out);
    case FX_JN_OUTPUT: {
        struct fx_jv v;
        TRY(eval(c, n->a, &v));
        return write_value(c, n->pos, v);
    }
    case FX_JN_IF:
        /* elif chains are walked in a loop, not by recursion. */
        for (;;) {
            struct fx_jv t;
            TRY(eval(c, n->a, &t));
            if (fx_jv_truthy(t))
                return exec_body(c, n->kids, n->n_kids);
            if (n->n_kids2 == 1 && n->kids2[0]->kind == FX_JN_IF && n->kids2[0]->flag) {
                n = n->kids2[0];
                TRY(count_step(c, n->pos));
                continue;
            }
            return exec_body(c, n->kids2, n->n_kids2);
        }
    case FX_JN_FOR:
        return exec_for(c, n);
    case FX_JN_SET:
    case FX_JN_SETBLOCK:
        return exec_set(c, n);
    case FX_JN_MACRO:
        if (!scope_set(c, c->scope, n->name, n->name_len,
                       (struct fx_jv){.kind = FX_JV_MACRO, .u.macro = n}))
            return fx_jinja_fail_mem(c, n->pos);
        return FX_OK;
    case FX_JN_BREAK:
        c->loop_ctl = 1;
        return FX_OK;
    case FX_JN_CONTINUE:
        c->loop_ctl = 2;
        return FX_OK;
    case FX_JN_SCOPE:
        return exec_body(c, n->kids, n->n_kids);
    default:
        return fx_jinja_fail(c, n->pos, FX_ERR_FORMAT, "not a statement");
    }
}

static fx_status exec_body(struct fx_jctx *c, struct fx_jnode *const *body, uint32_t n) {
    for (uint32_t i = 0; i < n && c->loop_ctl == 0; i++) {
        TRY(count_step(c, body[i]->pos));
        c->depth++;
        fx_status st = exec_node(c, body[i]);
        c->depth--;
        if (st != FX_OK)
            return st;
    }
    return FX_OK;
}

fx_status fx_jinja_render(const struct fx_jinja_prog *prog, struct fx_jarena *arena,
                          const struct fx_jdict *vars, int64_t now,
                          const struct fx_jinja_limits *lim, struct fx_jbuf *out,
                          struct fx_error *err) {
    struct fx_jctx c = {
        .prog = prog,
        .arena = arena,
        .vars = vars,
        .out = out,
        .scratch = {.limit = lim->max_memory},
        .lim = lim,
        .now = now,
        .err = err,
    };
    c.root = c.scope = scope_new(&c, NULL);
    fx_status st = c.root ? exec_body(&c, prog->body, prog->n_body) : fx_jinja_fail_mem(&c, 0);
    free(c.scratch.p);
    return st;
}
