/* The Jinja parser: tokens to an immutable tree, following Jinja2's grammar and operator
 * precedence (conditional < or < and < not < comparisons < + - < ~ < * / // % < ** < unary <
 * filters and tests < postfix). Unknown filters and tests are errors here, as Jinja reports them
 * when it compiles a template. */
#include "chat/jinja.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

struct parser {
    struct fx_jarena *a;
    const char *src;
    size_t n;
    const struct fx_jtoken *t;
    size_t i;
    int depth;      /* nesting of expressions and statements */
    int loop_depth; /* for loops around the current statement (break/continue need one) */
    int macro_depth;
    struct fx_error *err;
};

static fx_status pfail(struct parser *p, size_t pos, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static fx_status pfail(struct parser *p, size_t pos, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fx_status st = fx_jinja_verror(p->err, FX_ERR_FORMAT, p->src, p->n, pos,
                                   "template syntax error at ", fmt, ap);
    va_end(ap);
    return st;
}

static fx_status pnomem(struct parser *p) {
    return fx_error_set(p->err, p->a->fail != FX_OK ? p->a->fail : FX_ERR_NOMEM, FX_NO_OFFSET,
                        "out of memory parsing the template");
}

static const struct fx_jtoken *cur(const struct parser *p) {
    return &p->t[p->i];
}

static void advance(struct parser *p) {
    if (p->t[p->i].type != FX_JT_EOF)
        p->i++;
}

static bool is_op(const struct parser *p, uint8_t op) {
    return cur(p)->type == FX_JT_OP && cur(p)->op == op;
}

static bool name_is(const struct fx_jtoken *t, const char *kw) {
    return t->type == FX_JT_NAME && t->len == strlen(kw) && memcmp(t->s, kw, t->len) == 0;
}

static bool is_name(const struct parser *p, const char *kw) {
    return name_is(cur(p), kw);
}

/* A short description of the current token for messages. */
static const char *tok_desc(const struct parser *p, char *buf, size_t size) {
    const struct fx_jtoken *t = cur(p);
    switch (t->type) {
    case FX_JT_EOF:
        return "end of template";
    case FX_JT_TEXT:
        return "text";
    case FX_JT_VAR_BEGIN:
        return "'{{'";
    case FX_JT_VAR_END:
        return "'}}'";
    case FX_JT_BLOCK_BEGIN:
        return "'{%'";
    case FX_JT_BLOCK_END:
        return "'%}'";
    case FX_JT_STRING:
        return "a string";
    case FX_JT_INT:
    case FX_JT_FLOAT:
        return "a number";
    case FX_JT_NAME:
        snprintf(buf, size, "'%.*s'", (int)(t->len < 40 ? t->len : 40), t->s);
        return buf;
    default: {
        bool two = t->op == FX_JO_FLOORDIV || t->op == FX_JO_POW || t->op == FX_JO_EQ ||
                   t->op == FX_JO_NE || t->op == FX_JO_LE || t->op == FX_JO_GE;
        snprintf(buf, size, "'%.*s'", two ? 2 : 1, p->src + t->pos);
        return buf;
    }
    }
}

static fx_status unexpected(struct parser *p, const char *expected) {
    char buf[64];
    return pfail(p, cur(p)->pos, "expected %s, found %s", expected, tok_desc(p, buf, sizeof buf));
}

static fx_status expect_op(struct parser *p, uint8_t op, const char *what) {
    if (!is_op(p, op))
        return unexpected(p, what);
    advance(p);
    return FX_OK;
}

static fx_status expect_block_end(struct parser *p) {
    if (cur(p)->type != FX_JT_BLOCK_END)
        return unexpected(p, "'%}'");
    advance(p);
    return FX_OK;
}

static struct fx_jnode *node_new(struct parser *p, uint8_t kind, uint32_t pos) {
    struct fx_jnode *n = fx_jarena_alloc(p->a, sizeof *n);
    if (n) {
        memset(n, 0, sizeof *n);
        n->kind = kind;
        n->pos = pos;
    }
    return n;
}

/* A growing list of nodes in the arena. */
struct nlist {
    struct fx_jnode **v;
    uint32_t n, cap;
};

static bool nlist_push(struct parser *p, struct nlist *l, struct fx_jnode *x) {
    if (l->n == l->cap) {
        uint32_t cap = l->cap ? l->cap * 2 : 4;
        struct fx_jnode **v = fx_jarena_alloc(p->a, cap * sizeof *v);
        if (!v)
            return false;
        if (l->n)
            memcpy(v, l->v, l->n * sizeof *v);
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = x;
    return true;
}

#define TRY(expr)                                                                                  \
    do {                                                                                           \
        fx_status st_ = (expr);                                                                    \
        if (st_ != FX_OK)                                                                          \
            return st_;                                                                            \
    } while (0)

#define NEW(var, p, kind, pos)                                                                     \
    do {                                                                                           \
        if (!((var) = node_new((p), (kind), (pos))))                                               \
            return pnomem(p);                                                                      \
    } while (0)

#define PUSH(p, list, x)                                                                           \
    do {                                                                                           \
        if (!nlist_push((p), (list), (x)))                                                         \
            return pnomem(p);                                                                      \
    } while (0)

static fx_status enter(struct parser *p) {
    if (++p->depth > FX_JINJA_MAX_NESTING)
        return pfail(p, cur(p)->pos, "template nested more than %d levels deep",
                     FX_JINJA_MAX_NESTING);
    return FX_OK;
}

/* ---- expressions --------------------------------------------------------------------------- */

static fx_status parse_expression(struct parser *p, bool with_condexpr, struct fx_jnode **out);
static fx_status parse_unary(struct parser *p, bool with_filter, struct fx_jnode **out);
static fx_status parse_or(struct parser *p, struct fx_jnode **out);

/* Comma-separated expressions: a tuple when there is a comma (or explicit parentheses hold
 * nothing), otherwise the single expression. */
static fx_status parse_tuple(struct parser *p, bool with_condexpr, bool parens, const char *end_kw,
                             struct fx_jnode **out) {
    uint32_t pos = cur(p)->pos;
    struct nlist items = {0};
    bool is_tuple = false;
    for (;;) {
        if (items.n)
            TRY(expect_op(p, FX_JO_COMMA, "','"));
        const struct fx_jtoken *t = cur(p);
        if (t->type == FX_JT_VAR_END || t->type == FX_JT_BLOCK_END || is_op(p, FX_JO_RPAREN) ||
            (end_kw && is_name(p, end_kw)))
            break;
        struct fx_jnode *e;
        TRY(parse_expression(p, with_condexpr, &e));
        PUSH(p, &items, e);
        if (is_op(p, FX_JO_COMMA))
            is_tuple = true;
        else
            break;
    }
    if (!is_tuple) {
        if (items.n) {
            *out = items.v[0];
            return FX_OK;
        }
        if (!parens)
            return unexpected(p, "an expression");
    }
    struct fx_jnode *n;
    NEW(n, p, FX_JN_TUPLE, pos);
    n->kids = items.v;
    n->n_kids = items.n;
    *out = n;
    return FX_OK;
}

/* ( args ) after the '(' token: positional then keyword arguments. */
static fx_status parse_call_args(struct parser *p, struct fx_jnode *call) {
    TRY(expect_op(p, FX_JO_LPAREN, "'('"));
    struct nlist args = {0}, kwargs = {0};
    while (!is_op(p, FX_JO_RPAREN)) {
        if (args.n || kwargs.n) {
            TRY(expect_op(p, FX_JO_COMMA, "','"));
            if (is_op(p, FX_JO_RPAREN))
                break;
        }
        if (is_op(p, FX_JO_MUL) || is_op(p, FX_JO_POW))
            return pfail(p, cur(p)->pos, "*args and **kwargs in calls are not supported");
        const struct fx_jtoken *t = cur(p);
        if (t->type == FX_JT_NAME && p->t[p->i + 1].type == FX_JT_OP &&
            p->t[p->i + 1].op == FX_JO_ASSIGN) {
            struct fx_jnode *kw;
            NEW(kw, p, FX_JN_KWARG, t->pos);
            kw->name = t->s;
            kw->name_len = t->len;
            advance(p);
            advance(p);
            TRY(parse_expression(p, true, &kw->a));
            PUSH(p, &kwargs, kw);
        } else {
            if (kwargs.n)
                return pfail(p, t->pos, "positional argument after a keyword argument");
            struct fx_jnode *e;
            TRY(parse_expression(p, true, &e));
            PUSH(p, &args, e);
        }
    }
    advance(p);
    call->kids = args.v;
    call->n_kids = args.n;
    call->kids2 = kwargs.v;
    call->n_kids2 = kwargs.n;
    return FX_OK;
}

static fx_status parse_primary(struct parser *p, struct fx_jnode **out) {
    const struct fx_jtoken *t = cur(p);
    struct fx_jnode *n;
    switch (t->type) {
    case FX_JT_NAME: {
        static const struct {
            const char *kw;
            uint8_t kind;
            bool b;
        } consts[] = {{"true", FX_JV_BOOL, true},   {"True", FX_JV_BOOL, true},
                      {"false", FX_JV_BOOL, false}, {"False", FX_JV_BOOL, false},
                      {"none", FX_JV_NONE, false},  {"None", FX_JV_NONE, false}};
        for (size_t k = 0; k < sizeof consts / sizeof consts[0]; k++) {
            if (name_is(t, consts[k].kw)) {
                NEW(n, p, FX_JN_CONST, t->pos);
                n->value = (struct fx_jv){.kind = consts[k].kind, .u.b = consts[k].b};
                advance(p);
                *out = n;
                return FX_OK;
            }
        }
        NEW(n, p, FX_JN_NAME, t->pos);
        n->name = t->s;
        n->name_len = t->len;
        advance(p);
        *out = n;
        return FX_OK;
    }
    case FX_JT_STRING: {
        /* Adjacent literals join: "a" "b" is "ab". */
        NEW(n, p, FX_JN_CONST, t->pos);
        size_t len = 0, k = p->i;
        for (; p->t[k].type == FX_JT_STRING; k++)
            len += p->t[k].len;
        if (len > UINT32_MAX)
            return pfail(p, t->pos, "string literal too long");
        char *s = fx_jarena_alloc(p->a, len ? len : 1);
        if (!s)
            return pnomem(p);
        size_t at = 0;
        for (; cur(p)->type == FX_JT_STRING; advance(p)) {
            memcpy(s + at, cur(p)->s, cur(p)->len);
            at += cur(p)->len;
        }
        n->value = fx_jv_strref(s, (uint32_t)len);
        *out = n;
        return FX_OK;
    }
    case FX_JT_INT:
    case FX_JT_FLOAT:
        NEW(n, p, FX_JN_CONST, t->pos);
        n->value = t->type == FX_JT_INT ? fx_jv_int(t->i) : fx_jv_float(t->f);
        advance(p);
        *out = n;
        return FX_OK;
    case FX_JT_OP:
        if (t->op == FX_JO_LPAREN) {
            advance(p);
            TRY(parse_tuple(p, true, true, NULL, out));
            return expect_op(p, FX_JO_RPAREN, "')'");
        }
        if (t->op == FX_JO_LBRACKET || t->op == FX_JO_LBRACE) {
            bool dict = t->op == FX_JO_LBRACE;
            uint8_t close = dict ? FX_JO_RBRACE : FX_JO_RBRACKET;
            NEW(n, p, dict ? FX_JN_DICT : FX_JN_LIST, t->pos);
            advance(p);
            struct nlist keys = {0}, vals = {0};
            while (!is_op(p, close)) {
                if (keys.n) {
                    TRY(expect_op(p, FX_JO_COMMA, "','"));
                    if (is_op(p, close))
                        break;
                }
                struct fx_jnode *e;
                TRY(parse_expression(p, true, &e));
                PUSH(p, &keys, e);
                if (dict) {
                    TRY(expect_op(p, FX_JO_COLON, "':'"));
                    TRY(parse_expression(p, true, &e));
                    PUSH(p, &vals, e);
                }
            }
            advance(p);
            n->kids = keys.v;
            n->n_kids = keys.n;
            n->kids2 = vals.v;
            n->n_kids2 = vals.n;
            *out = n;
            return FX_OK;
        }
        break;
    default:
        break;
    }
    return unexpected(p, "an expression");
}

/* [start:stop:step] or [index] after the '['. */
static fx_status parse_subscript(struct parser *p, struct fx_jnode *obj, uint32_t pos,
                                 struct fx_jnode **out) {
    struct fx_jnode *parts[3] = {NULL, NULL, NULL};
    if (!is_op(p, FX_JO_COLON)) {
        TRY(parse_expression(p, true, &parts[0]));
        if (!is_op(p, FX_JO_COLON)) {
            if (is_op(p, FX_JO_COMMA))
                return pfail(p, cur(p)->pos, "tuple subscripts are not supported");
            TRY(expect_op(p, FX_JO_RBRACKET, "']'"));
            struct fx_jnode *n;
            NEW(n, p, FX_JN_ITEM, pos);
            n->a = obj;
            n->b = parts[0];
            *out = n;
            return FX_OK;
        }
    }
    for (int k = 1; k < 3 && is_op(p, FX_JO_COLON); k++) {
        advance(p);
        if (!is_op(p, FX_JO_RBRACKET) && !is_op(p, FX_JO_COLON))
            TRY(parse_expression(p, true, &parts[k]));
    }
    TRY(expect_op(p, FX_JO_RBRACKET, "']'"));
    struct fx_jnode *n;
    NEW(n, p, FX_JN_SLICE, pos);
    n->a = obj;
    n->kids = fx_jarena_alloc(p->a, 3 * sizeof *n->kids);
    if (!n->kids)
        return pnomem(p);
    memcpy(n->kids, parts, sizeof parts);
    n->n_kids = 3;
    *out = n;
    return FX_OK;
}

/* .name, .0, [subscript] and (call) after a primary. */
static fx_status parse_postfix(struct parser *p, struct fx_jnode **node) {
    for (;;) {
        const struct fx_jtoken *t = cur(p);
        if (is_op(p, FX_JO_DOT)) {
            advance(p);
            const struct fx_jtoken *a = cur(p);
            struct fx_jnode *n;
            if (a->type == FX_JT_NAME) {
                NEW(n, p, FX_JN_ATTR, t->pos);
                n->a = *node;
                n->name = a->s;
                n->name_len = a->len;
            } else if (a->type == FX_JT_INT) {
                NEW(n, p, FX_JN_ITEM, t->pos);
                n->a = *node;
                NEW(n->b, p, FX_JN_CONST, a->pos);
                n->b->value = fx_jv_int(a->i);
            } else {
                return unexpected(p, "an attribute name");
            }
            advance(p);
            *node = n;
        } else if (is_op(p, FX_JO_LBRACKET)) {
            advance(p);
            TRY(parse_subscript(p, *node, t->pos, node));
        } else if (is_op(p, FX_JO_LPAREN)) {
            struct fx_jnode *n;
            NEW(n, p, FX_JN_CALL, (*node)->pos); /* errors point at what is called */
            n->a = *node;
            TRY(parse_call_args(p, n));
            *node = n;
        } else {
            return FX_OK;
        }
    }
}

static fx_status parse_filter(struct parser *p, struct fx_jnode **node) {
    uint32_t pos = cur(p)->pos;
    advance(p); /* | */
    const struct fx_jtoken *t = cur(p);
    if (t->type != FX_JT_NAME)
        return unexpected(p, "a filter name");
    int id = fx_jinja_filter_id(t->s, t->len);
    if (id < 0)
        return pfail(p, t->pos, "no filter named '%.*s'", (int)(t->len < 60 ? t->len : 60), t->s);
    struct fx_jnode *n;
    NEW(n, p, FX_JN_FILTER, pos);
    n->op = (uint8_t)id;
    n->name = t->s;
    n->name_len = t->len;
    n->a = *node;
    advance(p);
    if (is_op(p, FX_JO_LPAREN))
        TRY(parse_call_args(p, n));
    *node = n;
    return FX_OK;
}

static fx_status parse_test(struct parser *p, struct fx_jnode **node) {
    uint32_t pos = cur(p)->pos;
    advance(p); /* is */
    bool negated = false;
    if (is_name(p, "not")) {
        negated = true;
        advance(p);
    }
    const struct fx_jtoken *t = cur(p);
    if (t->type != FX_JT_NAME)
        return unexpected(p, "a test name");
    int id = fx_jinja_test_id(t->s, t->len);
    if (id < 0)
        return pfail(p, t->pos, "no test named '%.*s'", (int)(t->len < 60 ? t->len : 60), t->s);
    struct fx_jnode *n;
    NEW(n, p, FX_JN_TEST, pos);
    n->op = (uint8_t)id;
    n->flag = negated;
    n->name = t->s;
    n->name_len = t->len;
    n->a = *node;
    advance(p);
    /* Jinja takes one argument without parentheses: "x is divisibleby 3". */
    const struct fx_jtoken *c = cur(p);
    bool bare_arg = (c->type == FX_JT_NAME || c->type == FX_JT_STRING || c->type == FX_JT_INT ||
                     c->type == FX_JT_FLOAT ||
                     (c->type == FX_JT_OP && (c->op == FX_JO_LBRACKET || c->op == FX_JO_LBRACE))) &&
                    !is_name(p, "else") && !is_name(p, "or") && !is_name(p, "and");
    if (is_op(p, FX_JO_LPAREN)) {
        TRY(parse_call_args(p, n));
    } else if (bare_arg) {
        if (is_name(p, "is"))
            return pfail(p, c->pos, "tests cannot be chained with 'is'");
        struct fx_jnode *arg;
        TRY(parse_primary(p, &arg));
        TRY(parse_postfix(p, &arg));
        n->kids = fx_jarena_alloc(p->a, sizeof *n->kids);
        if (!n->kids)
            return pnomem(p);
        n->kids[0] = arg;
        n->n_kids = 1;
    }
    *node = n;
    return FX_OK;
}

static fx_status parse_unary(struct parser *p, bool with_filter, struct fx_jnode **out) {
    TRY(enter(p));
    const struct fx_jtoken *t = cur(p);
    struct fx_jnode *n;
    if (is_op(p, FX_JO_SUB) || is_op(p, FX_JO_ADD)) {
        NEW(n, p, is_op(p, FX_JO_SUB) ? FX_JN_NEG : FX_JN_POS, t->pos);
        advance(p);
        TRY(parse_unary(p, false, &n->a));
    } else {
        TRY(parse_primary(p, &n));
    }
    TRY(parse_postfix(p, &n));
    while (with_filter) {
        if (is_op(p, FX_JO_PIPE))
            TRY(parse_filter(p, &n));
        else if (is_name(p, "is"))
            TRY(parse_test(p, &n));
        else if (is_op(p, FX_JO_LPAREN)) {
            struct fx_jnode *call;
            NEW(call, p, FX_JN_CALL, cur(p)->pos);
            call->a = n;
            TRY(parse_call_args(p, call));
            n = call;
        } else
            break;
    }
    p->depth--;
    *out = n;
    return FX_OK;
}

/* Left-associative binary levels, lowest first below unary. */
static fx_status parse_binary(struct parser *p, int level, struct fx_jnode **out) {
    static const uint8_t level_ops[4][4] = {
        {FX_JO_ADD, FX_JO_SUB},
        {FX_JO_CONCAT},
        {FX_JO_MUL, FX_JO_DIV, FX_JO_FLOORDIV, FX_JO_MOD},
        {FX_JO_POW},
    };
    if (level == 4)
        return parse_unary(p, true, out);
    struct fx_jnode *left;
    TRY(parse_binary(p, level + 1, &left));
    for (;;) {
        const struct fx_jtoken *t = cur(p);
        uint8_t op = 0;
        for (int k = 0; k < 4 && level_ops[level][k]; k++)
            if (is_op(p, level_ops[level][k]))
                op = level_ops[level][k];
        if (!op)
            break;
        advance(p);
        struct fx_jnode *n;
        NEW(n, p, FX_JN_BINOP, t->pos);
        n->op = op;
        n->a = left;
        TRY(parse_binary(p, level + 1, &n->b));
        left = n;
    }
    *out = left;
    return FX_OK;
}

static fx_status parse_compare(struct parser *p, struct fx_jnode **out) {
    uint32_t pos = cur(p)->pos;
    struct fx_jnode *first;
    TRY(parse_binary(p, 0, &first));
    struct nlist rhs = {0};
    uint8_t ops[64];
    for (;;) {
        uint8_t op = 0;
        const struct fx_jtoken *t = cur(p);
        if (t->type == FX_JT_OP && t->op >= FX_JO_EQ && t->op <= FX_JO_GE) {
            op = t->op;
            advance(p);
        } else if (is_name(p, "in")) {
            op = FX_JO_IN;
            advance(p);
        } else if (is_name(p, "not") && name_is(&p->t[p->i + 1], "in")) {
            op = FX_JO_NOTIN;
            advance(p);
            advance(p);
        } else {
            break;
        }
        if (rhs.n == sizeof ops)
            return pfail(p, t->pos, "too many chained comparisons");
        ops[rhs.n] = op;
        struct fx_jnode *e;
        TRY(parse_binary(p, 0, &e));
        PUSH(p, &rhs, e);
    }
    if (!rhs.n) {
        *out = first;
        return FX_OK;
    }
    struct fx_jnode *n;
    NEW(n, p, FX_JN_COMPARE, pos);
    n->a = first;
    n->kids = rhs.v;
    n->n_kids = rhs.n;
    n->cmp_ops = fx_jarena_dup(p->a, ops, rhs.n);
    if (!n->cmp_ops)
        return pnomem(p);
    *out = n;
    return FX_OK;
}

static fx_status parse_not(struct parser *p, struct fx_jnode **out) {
    if (!is_name(p, "not"))
        return parse_compare(p, out);
    TRY(enter(p));
    struct fx_jnode *n;
    NEW(n, p, FX_JN_NOT, cur(p)->pos);
    advance(p);
    TRY(parse_not(p, &n->a));
    p->depth--;
    *out = n;
    return FX_OK;
}

static fx_status parse_logic(struct parser *p, bool is_or, struct fx_jnode **out) {
    struct fx_jnode *left;
    TRY(is_or ? parse_logic(p, false, &left) : parse_not(p, &left));
    while (is_name(p, is_or ? "or" : "and")) {
        struct fx_jnode *n;
        NEW(n, p, is_or ? FX_JN_OR : FX_JN_AND, cur(p)->pos);
        advance(p);
        n->a = left;
        TRY(is_or ? parse_logic(p, false, &n->b) : parse_not(p, &n->b));
        left = n;
    }
    *out = left;
    return FX_OK;
}

static fx_status parse_or(struct parser *p, struct fx_jnode **out) {
    return parse_logic(p, true, out);
}

static fx_status parse_expression(struct parser *p, bool with_condexpr, struct fx_jnode **out) {
    TRY(enter(p));
    struct fx_jnode *e;
    TRY(parse_or(p, &e));
    while (with_condexpr && is_name(p, "if")) {
        struct fx_jnode *n;
        NEW(n, p, FX_JN_COND, cur(p)->pos);
        advance(p);
        n->b = e;
        TRY(parse_or(p, &n->a));
        if (is_name(p, "else")) {
            advance(p);
            TRY(parse_expression(p, true, &n->c));
        }
        e = n;
    }
    p->depth--;
    *out = e;
    return FX_OK;
}

/* ---- statements ---------------------------------------------------------------------------- */

static fx_status parse_body(struct parser *p, const char *const *ends, struct fx_jnode ***body,
                            uint32_t *n_body);

/* Names separated by commas, optionally in parentheses ("a", "a, b", "(a, b)"). */
static fx_status parse_targets(struct parser *p, struct fx_jnode *n) {
    struct nlist names = {0};
    bool parens = is_op(p, FX_JO_LPAREN);
    if (parens)
        advance(p);
    for (;;) {
        const struct fx_jtoken *t = cur(p);
        if (t->type != FX_JT_NAME)
            return unexpected(p, "a variable name");
        struct fx_jnode *name;
        NEW(name, p, FX_JN_NAME, t->pos);
        name->name = t->s;
        name->name_len = t->len;
        PUSH(p, &names, name);
        advance(p);
        if (!is_op(p, FX_JO_COMMA))
            break;
        advance(p);
        if (parens && is_op(p, FX_JO_RPAREN))
            break;
    }
    if (parens)
        TRY(expect_op(p, FX_JO_RPAREN, "')'"));
    n->targets = names.v;
    n->n_targets = names.n;
    return FX_OK;
}

/* Statement names that end the current body: the caller's `ends` list plus nothing else. */
static bool is_end(const struct fx_jtoken *t, const char *const *ends) {
    for (; ends && *ends; ends++)
        if (name_is(t, *ends))
            return true;
    return false;
}

static fx_status parse_if(struct parser *p, struct fx_jnode **out) {
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    static const char *const end_only[] = {"endif", NULL};
    /* An elif chain becomes nested ifs, built in a loop so that long chains cost no stack. */
    struct fx_jnode *first = NULL, *last = NULL;
    do {
        struct fx_jnode *n;
        NEW(n, p, FX_JN_IF, cur(p)->pos);
        n->flag = last != NULL; /* an elif */
        advance(p);             /* if / elif */
        TRY(parse_tuple(p, false, false, NULL, &n->a));
        TRY(expect_block_end(p));
        TRY(parse_body(p, ends, &n->kids, &n->n_kids));
        if (last) {
            last->kids2 = fx_jarena_alloc(p->a, sizeof *last->kids2);
            if (!last->kids2)
                return pnomem(p);
            last->kids2[0] = n;
            last->n_kids2 = 1;
        } else {
            first = n;
        }
        last = n;
    } while (is_name(p, "elif"));
    if (is_name(p, "else")) {
        advance(p);
        TRY(expect_block_end(p));
        TRY(parse_body(p, end_only, &last->kids2, &last->n_kids2));
    }
    advance(p); /* endif */
    TRY(expect_block_end(p));
    *out = first;
    return FX_OK;
}

static fx_status parse_for(struct parser *p, struct fx_jnode **out) {
    static const char *const ends[] = {"else", "endfor", NULL};
    static const char *const end_only[] = {"endfor", NULL};
    struct fx_jnode *n;
    NEW(n, p, FX_JN_FOR, cur(p)->pos);
    advance(p);
    TRY(parse_targets(p, n));
    if (!is_name(p, "in"))
        return unexpected(p, "'in'");
    advance(p);
    TRY(parse_tuple(p, false, false, "recursive", &n->a));
    if (is_name(p, "if")) {
        advance(p);
        TRY(parse_expression(p, true, &n->b));
        n->flag = 1;
    }
    if (is_name(p, "recursive"))
        return pfail(p, cur(p)->pos, "recursive loops are not supported");
    TRY(expect_block_end(p));
    p->loop_depth++;
    TRY(parse_body(p, ends, &n->kids, &n->n_kids));
    p->loop_depth--;
    if (is_name(p, "else")) {
        advance(p);
        TRY(expect_block_end(p));
        TRY(parse_body(p, end_only, &n->kids2, &n->n_kids2));
    }
    advance(p); /* endfor */
    TRY(expect_block_end(p));
    *out = n;
    return FX_OK;
}

static fx_status parse_set(struct parser *p, struct fx_jnode **out) {
    static const char *const ends[] = {"endset", NULL};
    struct fx_jnode *n;
    NEW(n, p, FX_JN_SET, cur(p)->pos);
    advance(p);
    const struct fx_jtoken *t = cur(p);
    if (t->type == FX_JT_NAME && p->t[p->i + 1].type == FX_JT_OP &&
        p->t[p->i + 1].op == FX_JO_DOT) {
        /* {% set ns.attr = value %} */
        struct fx_jnode *obj, *attr;
        NEW(obj, p, FX_JN_NAME, t->pos);
        obj->name = t->s;
        obj->name_len = t->len;
        advance(p);
        advance(p);
        if (cur(p)->type != FX_JT_NAME)
            return unexpected(p, "an attribute name");
        NEW(attr, p, FX_JN_ATTR, cur(p)->pos);
        attr->a = obj;
        attr->name = cur(p)->s;
        attr->name_len = cur(p)->len;
        advance(p);
        n->c = attr;
    } else {
        TRY(parse_targets(p, n));
    }
    if (is_op(p, FX_JO_ASSIGN)) {
        advance(p);
        TRY(parse_tuple(p, true, false, NULL, &n->a));
        TRY(expect_block_end(p));
    } else {
        if (n->c || n->n_targets != 1)
            return unexpected(p, "'='");
        TRY(expect_block_end(p));
        n->kind = FX_JN_SETBLOCK;
        TRY(parse_body(p, ends, &n->kids, &n->n_kids));
        advance(p); /* endset */
        TRY(expect_block_end(p));
    }
    *out = n;
    return FX_OK;
}

static fx_status parse_macro(struct parser *p, struct fx_jnode **out) {
    static const char *const ends[] = {"endmacro", NULL};
    struct fx_jnode *n;
    NEW(n, p, FX_JN_MACRO, cur(p)->pos);
    advance(p);
    if (cur(p)->type != FX_JT_NAME)
        return unexpected(p, "a macro name");
    n->name = cur(p)->s;
    n->name_len = cur(p)->len;
    advance(p);
    TRY(expect_op(p, FX_JO_LPAREN, "'('"));
    struct nlist params = {0};
    bool defaults = false;
    while (!is_op(p, FX_JO_RPAREN)) {
        if (params.n)
            TRY(expect_op(p, FX_JO_COMMA, "','"));
        const struct fx_jtoken *t = cur(p);
        if (t->type != FX_JT_NAME)
            return unexpected(p, "a parameter name");
        struct fx_jnode *param;
        NEW(param, p, FX_JN_NAME, t->pos);
        param->name = t->s;
        param->name_len = t->len;
        advance(p);
        if (is_op(p, FX_JO_ASSIGN)) {
            advance(p);
            TRY(parse_expression(p, true, &param->a));
            defaults = true;
        } else if (defaults) {
            return pfail(p, t->pos, "parameter without a default after one with a default");
        }
        PUSH(p, &params, param);
    }
    advance(p);
    TRY(expect_block_end(p));
    int loops = p->loop_depth;
    p->loop_depth = 0; /* a loop around the definition does not enclose the body */
    p->macro_depth++;
    TRY(parse_body(p, ends, &n->kids, &n->n_kids));
    p->macro_depth--;
    p->loop_depth = loops;
    advance(p); /* endmacro */
    TRY(expect_block_end(p));
    n->targets = params.v;
    n->n_targets = params.n;
    *out = n;
    return FX_OK;
}

static fx_status parse_statement(struct parser *p, struct fx_jnode **out) {
    const struct fx_jtoken *t = cur(p);
    if (t->type != FX_JT_NAME)
        return unexpected(p, "a statement name");
    if (is_name(p, "if"))
        return parse_if(p, out);
    if (is_name(p, "for"))
        return parse_for(p, out);
    if (is_name(p, "set"))
        return parse_set(p, out);
    if (is_name(p, "macro")) {
        if (p->macro_depth)
            return pfail(p, t->pos, "macros inside macros are not supported");
        return parse_macro(p, out);
    }
    if (is_name(p, "break") || is_name(p, "continue")) {
        bool brk = is_name(p, "break");
        if (p->loop_depth == 0)
            return pfail(p, t->pos, "'%s' outside a loop", brk ? "break" : "continue");
        struct fx_jnode *n;
        NEW(n, p, brk ? FX_JN_BREAK : FX_JN_CONTINUE, t->pos);
        advance(p);
        TRY(expect_block_end(p));
        *out = n;
        return FX_OK;
    }
    if (is_name(p, "generation")) {
        static const char *const ends[] = {"endgeneration", NULL};
        struct fx_jnode *n;
        NEW(n, p, FX_JN_SCOPE, t->pos);
        advance(p);
        TRY(expect_block_end(p));
        TRY(parse_body(p, ends, &n->kids, &n->n_kids));
        advance(p);
        TRY(expect_block_end(p));
        *out = n;
        return FX_OK;
    }
    return pfail(p, t->pos, "unknown or unsupported tag '%.*s'", (int)(t->len < 40 ? t->len : 40),
                 t->s);
}

/* Nodes up to a {% NAME %} with NAME in `ends` (left as the current token) or the end of the
 * template (only when `ends` is NULL). */
static fx_status parse_body(struct parser *p, const char *const *ends, struct fx_jnode ***body,
                            uint32_t *n_body) {
    TRY(enter(p));
    struct nlist nodes = {0};
    for (;;) {
        const struct fx_jtoken *t = cur(p);
        struct fx_jnode *n = NULL;
        if (t->type == FX_JT_EOF) {
            if (ends) {
                const char *const *e = ends;
                while (e[1] && strncmp(*e, "end", 3) != 0)
                    e++;
                return pfail(p, t->pos, "unexpected end of template: missing {%% %s %%}", *e);
            }
            break;
        }
        if (t->type == FX_JT_TEXT) {
            NEW(n, p, FX_JN_TEXT, t->pos);
            n->name = t->s;
            n->name_len = t->len;
            advance(p);
        } else if (t->type == FX_JT_VAR_BEGIN) {
            NEW(n, p, FX_JN_OUTPUT, t->pos);
            advance(p);
            TRY(parse_tuple(p, true, false, NULL, &n->a));
            if (cur(p)->type != FX_JT_VAR_END)
                return unexpected(p, "'}}'");
            advance(p);
        } else if (t->type == FX_JT_BLOCK_BEGIN) {
            advance(p);
            if (is_end(cur(p), ends))
                break;
            static const char *const closers[] = {"elif",     "else",   "endif",         "endfor",
                                                  "endmacro", "endset", "endgeneration", NULL};
            if (is_end(cur(p), closers)) {
                const char *const *e = ends;
                while (e && e[1] && strncmp(*e, "end", 3) != 0)
                    e++;
                return pfail(p, cur(p)->pos, "unexpected {%% %.*s %%}%s%s%s", (int)cur(p)->len,
                             cur(p)->s, e ? " (expected {% " : "", e ? *e : "", e ? " %})" : "");
            }
            TRY(parse_statement(p, &n));
        } else {
            return unexpected(p, "text or a tag");
        }
        PUSH(p, &nodes, n);
    }
    p->depth--;
    *body = nodes.v;
    *n_body = nodes.n;
    return FX_OK;
}

fx_status fx_jinja_parse(const char *src, size_t n, struct fx_jinja_prog **out,
                         struct fx_error *err) {
    *out = NULL;
    if (n >= UINT32_MAX)
        return fx_error_set(err, FX_ERR_CAPACITY, FX_NO_OFFSET,
                            "template of %zu bytes is too large", n);
    struct fx_jinja_prog *prog = calloc(1, sizeof *prog);
    if (!prog)
        return fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "out of memory");
    /* Trees of real templates take a few hundred bytes per line; this bounds a hostile one. */
    fx_jarena_init(&prog->arena, (size_t)64 << 20);
    /* Jinja normalises \r\n and \r to \n and drops one trailing newline before lexing. */
    char *s = fx_jarena_alloc(&prog->arena, n + 1);
    if (!s) {
        fx_jinja_prog_free(prog);
        return fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "out of memory");
    }
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        if (src[i] == '\r') {
            s[len++] = '\n';
            if (i + 1 < n && src[i + 1] == '\n')
                i++;
        } else {
            s[len++] = src[i];
        }
    }
    if (len && s[len - 1] == '\n')
        len--;
    s[len] = '\0';
    prog->src = s;
    prog->src_len = len;

    struct fx_jtoken *tok;
    size_t n_tok;
    fx_status st = fx_jinja_lex(&prog->arena, s, len, &tok, &n_tok, err);
    if (st == FX_OK) {
        struct parser p = {.a = &prog->arena, .src = s, .n = len, .t = tok, .err = err};
        st = parse_body(&p, NULL, &prog->body, &prog->n_body);
    }
    if (st != FX_OK) {
        fx_jinja_prog_free(prog);
        return st;
    }
    *out = prog;
    return FX_OK;
}

void fx_jinja_prog_free(struct fx_jinja_prog *p) {
    if (!p)
        return;
    fx_jarena_free(&p->arena);
    free(p);
}
