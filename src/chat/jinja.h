/* The Jinja interpreter behind chat templates (internal to src/chat/).
 *
 * It implements the subset of Jinja2 that Hugging Face chat templates use, with the environment
 * transformers renders them in: trim_blocks and lstrip_blocks on, keep_trailing_newline off, the
 * loopcontrols extension (break/continue), an immutable sandbox (no list.append, no dict.update),
 * Python semantics for values (None, True, repr of lists and dicts, floor division, negative
 * indices, slices, str methods) and transformers' tojson (json.dumps with ensure_ascii=False).
 *
 * A template is parsed once into an immutable tree (struct fx_jinja_prog) that any number of
 * threads may render at the same time; each render has its own arena, scopes and scratch buffer
 * and frees them before returning. Every limit a hostile template could push (tree depth, call
 * depth, evaluation steps, output size, memory) is checked and reported as an error.
 *
 * Known differences from Jinja2 on Python, none of which the published templates rely on:
 * integers are 64-bit (overflow is an error); case mapping covers ASCII letters; lazy filters
 * (select, map, ...) run at once, so a non-iterable input fails even if the result is never
 * used; a slice of a literal (1[1:]) is an error where Jinja's constant folding makes it
 * Undefined; str.format, {% include %}, {% call %}, {% with %} and recursive loops are absent.
 *
 * Files: jinja_lex.c (source to tokens, whitespace control), jinja_parse.c (tokens to tree),
 * jinja_value.c (values, arena, printing, JSON), jinja_eval.c (scopes, statements, expressions),
 * jinja_ops.c (Python semantics of operators, access, slicing, formatting), jinja_filters.c
 * (filters and tests), jinja_methods.c (str/dict methods and global functions).
 */
#ifndef FX_CHAT_JINJA_H
#define FX_CHAT_JINJA_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ferrox.h"

/* ---- arena: bump allocation in chunks, everything freed at once ---------------------------- */

struct fx_jchunk;
struct fx_jarena {
    struct fx_jchunk *head;
    size_t total;   /* bytes obtained from malloc so far */
    size_t limit;   /* fx_jarena_alloc fails past this */
    fx_status fail; /* FX_ERR_NOMEM or FX_ERR_CAPACITY after a failed allocation, else FX_OK */
};

void fx_jarena_init(struct fx_jarena *a, size_t limit);
/* n bytes aligned to 16, or NULL (and a->fail set) when memory or the limit runs out. */
void *fx_jarena_alloc(struct fx_jarena *a, size_t n);
void *fx_jarena_dup(struct fx_jarena *a, const void *p, size_t n);
void fx_jarena_free(struct fx_jarena *a);

/* ---- growable byte buffer with a size limit and a sticky error ------------------------------ */

struct fx_jbuf {
    char *p;
    size_t len, cap;
    size_t limit; /* appending past this many bytes sets err = FX_ERR_CAPACITY */
    fx_status err;
};

void fx_jbuf_put(struct fx_jbuf *b, const void *p, size_t n);
void fx_jbuf_putc(struct fx_jbuf *b, char c);
void fx_jbuf_puts(struct fx_jbuf *b, const char *s);
void fx_jbuf_printf(struct fx_jbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- values ------------------------------------------------------------------------------- */

enum fx_jkind {
    FX_JV_UNDEF, /* a name or key that does not exist (Jinja's Undefined) */
    FX_JV_NONE,
    FX_JV_BOOL,
    FX_JV_INT,
    FX_JV_FLOAT,
    FX_JV_STR,
    FX_JV_LIST, /* also tuples and iterators (sub: enum fx_jlist_kind) */
    FX_JV_DICT,
    FX_JV_NS,     /* namespace(): a dict whose attributes templates may assign */
    FX_JV_LOOP,   /* the `loop` variable of a for loop */
    FX_JV_MACRO,  /* a {% macro %} */
    FX_JV_FUNC,   /* a global function: sub = enum fx_jfunc */
    FX_JV_METHOD, /* a bound method (str.split, dict.items, loop.cycle): u.method */
};

struct fx_jlist;
struct fx_jdict;
struct fx_jloop;
struct fx_jmethod;
struct fx_jnode;

/* A value is 16 bytes and passed by copy. Strings are (pointer, length), UTF-8, not
 * NUL-terminated, immutable and never freed before the render ends, so substrings share bytes. */
struct fx_jv {
    uint8_t kind;
    uint8_t sub;  /* LIST: enum fx_jlist_kind; FUNC: the function id; UNDEF: 0 for a missing name,
                     else 1 + the kind of the object an attribute or key was missing from */
    uint32_t len; /* FX_JV_STR and FX_JV_UNDEF (the missing name, for messages): byte length */
    union {
        bool b;
        int64_t i;
        double f;
        const char *s;
        struct fx_jlist *list;
        struct fx_jdict *dict;
        struct fx_jloop *loop;
        const struct fx_jnode *macro;
        struct fx_jmethod *method;
    } u;
};

struct fx_jlist {
    uint32_t n, cap;
    struct fx_jv *v; /* [cap] */
};

struct fx_jentry {
    struct fx_jv key, val;
};

/* Insertion-ordered like a Python dict; a hash index is added once it grows past a few keys. */
struct fx_jdict {
    uint32_t n, cap;
    struct fx_jentry *e; /* [cap] */
    uint32_t *slots;     /* [n_slots] entry index + 1, 0 = empty; NULL while small */
    uint32_t n_slots;
};

struct fx_jloop {
    int64_t index0, length;
    const struct fx_jv *items; /* [length] what the loop iterates over, for previtem/nextitem */
};

struct fx_jmethod {
    struct fx_jv self;
    uint16_t id; /* enum fx_jmeth */
};

static inline struct fx_jv fx_jv_undef(void) {
    return (struct fx_jv){.kind = FX_JV_UNDEF};
}
static inline struct fx_jv fx_jv_none(void) {
    return (struct fx_jv){.kind = FX_JV_NONE};
}
static inline struct fx_jv fx_jv_bool(bool b) {
    return (struct fx_jv){.kind = FX_JV_BOOL, .u.b = b};
}
static inline struct fx_jv fx_jv_int(int64_t i) {
    return (struct fx_jv){.kind = FX_JV_INT, .u.i = i};
}
static inline struct fx_jv fx_jv_float(double f) {
    return (struct fx_jv){.kind = FX_JV_FLOAT, .u.f = f};
}
/* A string value that refers to p (which must live as long as the value). */
static inline struct fx_jv fx_jv_strref(const char *p, uint32_t len) {
    return (struct fx_jv){.kind = FX_JV_STR, .len = len, .u.s = p};
}

/* Fails (FX_ERR_CAPACITY) when len does not fit a string value. */
fx_status fx_jv_str_copy(struct fx_jarena *a, const char *p, size_t len, struct fx_jv *out);

struct fx_jlist *fx_jlist_new(struct fx_jarena *a, size_t cap);
bool fx_jlist_push(struct fx_jarena *a, struct fx_jlist *l, struct fx_jv v);
/* What a FX_JV_LIST value stands for (its sub). */
enum fx_jlist_kind {
    FX_JL_LIST = 0,
    FX_JL_TUPLE = 1,
    /* The lazy result of select, reject, selectattr, rejectattr, map, unique, reverse and items
     * in Jinja: always true in a condition (an empty one too), no len(), no [index], printed as
     * a generator; `| list` makes a list of it. */
    FX_JL_ITER = 2,
};

static inline struct fx_jv fx_jv_list(struct fx_jlist *l, uint8_t sub) {
    return (struct fx_jv){.kind = FX_JV_LIST, .sub = sub, .u.list = l};
}

struct fx_jdict *fx_jdict_new(struct fx_jarena *a, size_t cap);
/* Inserts or replaces. False when memory runs out. */
bool fx_jdict_set(struct fx_jarena *a, struct fx_jdict *d, struct fx_jv key, struct fx_jv val);
/* The value for a key, or NULL. */
struct fx_jv *fx_jdict_get(const struct fx_jdict *d, struct fx_jv key);
struct fx_jv *fx_jdict_get_str(const struct fx_jdict *d, const char *key, size_t len);

/* Python truthiness. */
bool fx_jv_truthy(struct fx_jv v);
/* Python ==. */
bool fx_jv_equal(struct fx_jv a, struct fx_jv b);
/* Python's type name ("str", "int", "list", "NoneType", "Undefined", ...). */
const char *fx_jv_type_name(struct fx_jv v);
bool fx_jv_is_number(struct fx_jv v); /* int, float or bool */
double fx_jv_as_double(struct fx_jv v);

/* str(v) and repr(v) as Python prints them, appended to b. str(Undefined) is "". */
void fx_jv_write_str(struct fx_jbuf *b, struct fx_jv v);
void fx_jv_write_repr(struct fx_jbuf *b, struct fx_jv v);
/* Python's repr of a float (shortest round trip: 1.0, 0.1, 1e+16, inf). */
void fx_jv_write_float(struct fx_jbuf *b, double f);

/* json.dumps(v, ensure_ascii, indent, separators, sort_keys). indent < 0 means None; item_sep
 * and key_sep NULL mean Python's defaults. Returns FX_OK or an error naming what could not be
 * serialised (msg, at least 128 bytes). */
struct fx_jjson_opts {
    bool ensure_ascii, sort_keys;
    const char *indent; /* NULL: no newlines */
    size_t indent_len;
    const char *item_sep, *key_sep;
    size_t item_sep_len, key_sep_len;
};
fx_status fx_jv_write_json(struct fx_jbuf *b, struct fx_jv v, const struct fx_jjson_opts *o,
                           char *msg, size_t msg_size);

/* Converts parsed JSON (a jansson json_t, passed as void * to keep jansson out of this header)
 * into values allocated in the arena. */
fx_status fx_jv_from_json(struct fx_jarena *a, const void *json, struct fx_jv *out);

/* ---- UTF-8 helpers (Python strings are code points; ours are UTF-8 bytes) ------------------- */

/* Number of code points (bytes that do not continue a sequence). */
size_t fx_jutf8_count(const char *s, size_t n);
/* Byte offset of code point index i (0 <= i <= count). */
size_t fx_jutf8_offset(const char *s, size_t n, size_t i);
/* Length in bytes of the whitespace character (Python str.isspace) at s, or 0. */
size_t fx_jutf8_space_fwd(const char *s, size_t n);
/* Length in bytes of the whitespace character ending at s + n, or 0. */
size_t fx_jutf8_space_back(const char *s, size_t n);

/* ---- tokens and the tree ------------------------------------------------------------------ */

enum fx_jtok {
    FX_JT_EOF,
    FX_JT_TEXT,
    FX_JT_VAR_BEGIN,
    FX_JT_VAR_END,
    FX_JT_BLOCK_BEGIN,
    FX_JT_BLOCK_END,
    FX_JT_NAME,
    FX_JT_STRING,
    FX_JT_INT,
    FX_JT_FLOAT,
    FX_JT_OP,
};

enum fx_jop {
    FX_JO_NONE,
    FX_JO_ADD,
    FX_JO_SUB,
    FX_JO_MUL,
    FX_JO_DIV,
    FX_JO_FLOORDIV,
    FX_JO_MOD,
    FX_JO_POW,
    FX_JO_CONCAT, /* ~ */
    FX_JO_EQ,
    FX_JO_NE,
    FX_JO_LT,
    FX_JO_LE,
    FX_JO_GT,
    FX_JO_GE,
    FX_JO_IN,
    FX_JO_NOTIN,
    FX_JO_ASSIGN,
    FX_JO_DOT,
    FX_JO_COLON,
    FX_JO_PIPE,
    FX_JO_COMMA,
    FX_JO_SEMICOLON,
    FX_JO_LPAREN,
    FX_JO_RPAREN,
    FX_JO_LBRACKET,
    FX_JO_RBRACKET,
    FX_JO_LBRACE,
    FX_JO_RBRACE,
};

struct fx_jtoken {
    uint8_t type;  /* enum fx_jtok */
    uint8_t op;    /* enum fx_jop for FX_JT_OP */
    uint32_t pos;  /* byte offset in the (newline-normalised) source */
    uint32_t len;  /* TEXT, NAME, STRING: bytes of s */
    const char *s; /* TEXT, NAME: into the source; STRING: the unescaped value */
    int64_t i;
    double f;
};

/* Splits src[0..n) into tokens (arena-allocated, ended by FX_JT_EOF) applying Jinja's whitespace
 * control with trim_blocks and lstrip_blocks. */
fx_status fx_jinja_lex(struct fx_jarena *a, const char *src, size_t n, struct fx_jtoken **out,
                       size_t *n_out, struct fx_error *err);

enum fx_jnode_kind {
    /* expressions */
    FX_JN_CONST,   /* value */
    FX_JN_NAME,    /* name */
    FX_JN_LIST,    /* kids */
    FX_JN_TUPLE,   /* kids */
    FX_JN_DICT,    /* kids (keys), kids2 (values) */
    FX_JN_ATTR,    /* a.name */
    FX_JN_ITEM,    /* a[b] */
    FX_JN_SLICE,   /* a[kids[0]:kids[1]:kids[2]], each may be NULL */
    FX_JN_CALL,    /* a(kids, kids2 = keyword arguments) */
    FX_JN_KWARG,   /* name=a, only inside kids2 */
    FX_JN_FILTER,  /* a | op(kids, kids2); op = enum fx_jfilter */
    FX_JN_TEST,    /* a is [not] op(kids); flag = negated */
    FX_JN_NOT,     /* not a */
    FX_JN_NEG,     /* -a */
    FX_JN_POS,     /* +a */
    FX_JN_BINOP,   /* a op b (arithmetic, ~) */
    FX_JN_COMPARE, /* a op[0] kids[0] op[1] kids[1] ...: ops in cmp_ops */
    FX_JN_AND,     /* a and b */
    FX_JN_OR,      /* a or b */
    FX_JN_COND,    /* b if a else c (c may be NULL) */
    /* statements */
    FX_JN_TEXT,     /* name = the text */
    FX_JN_OUTPUT,   /* {{ a }} */
    FX_JN_IF,       /* if a: kids else kids2 (elif is an if inside kids2) */
    FX_JN_FOR,      /* for targets in a [if b]: kids else kids2 */
    FX_JN_SET,      /* targets = a, or target.name = a (target is an FX_JN_ATTR) */
    FX_JN_SETBLOCK, /* {% set targets[0] %}kids{% endset %} */
    FX_JN_MACRO,    /* macro name(targets with defaults in their a): kids */
    FX_JN_BREAK,
    FX_JN_CONTINUE,
    FX_JN_SCOPE, /* kids, rendered in place ({% generation %}) */
};

struct fx_jnode {
    uint8_t kind; /* enum fx_jnode_kind */
    uint8_t op;   /* BINOP: enum fx_jop; FILTER: enum fx_jfilter; TEST: enum fx_jtest */
    uint8_t flag; /* TEST: negated; FOR: has a filter */
    uint32_t pos; /* byte offset in the source, for error messages */
    const char *name;
    uint32_t name_len;
    struct fx_jnode *a, *b, *c;
    struct fx_jnode **kids, **kids2, **targets;
    uint32_t n_kids, n_kids2, n_targets;
    uint8_t *cmp_ops;   /* COMPARE: [n_kids] enum fx_jop */
    struct fx_jv value; /* CONST */
};

struct fx_jinja_prog {
    struct fx_jarena arena; /* owns the tree, the source copy and every literal */
    const char *src;        /* newline-normalised source */
    size_t src_len;
    struct fx_jnode **body;
    uint32_t n_body;
};

/* Parses a template. Limits: the source must be under 4 GiB and the tree at most
 * FX_JINJA_MAX_NESTING deep. */
#define FX_JINJA_MAX_NESTING 100
fx_status fx_jinja_parse(const char *src, size_t n, struct fx_jinja_prog **out,
                         struct fx_error *err);
void fx_jinja_prog_free(struct fx_jinja_prog *p);

/* Sets err to code with the message "<what>line L, column C: <fmt ...>", L and C (from 1) being
 * where byte offset pos of the template src[0..n) is; returns code. */
fx_status fx_jinja_verror(struct fx_error *err, fx_status code, const char *src, size_t n,
                          size_t pos, const char *what, const char *fmt, va_list ap)
    __attribute__((format(printf, 7, 0)));

/* ---- rendering ----------------------------------------------------------------------------- */

struct fx_jinja_limits {
    size_t max_output;  /* bytes of rendered text */
    size_t max_memory;  /* bytes of intermediate values */
    uint64_t max_steps; /* evaluated nodes */
    uint32_t max_depth; /* nested evaluation (expressions, statements, macro calls) */
};

/* Renders prog with the variables in `vars` (a dict of name -> value, allocated in `arena`,
 * which the render also uses for its values) into out (appended). `now` is the time
 * strftime_now() formats: seconds since the epoch in UTC, or INT64_MIN for the local time. */
fx_status fx_jinja_render(const struct fx_jinja_prog *prog, struct fx_jarena *arena,
                          const struct fx_jdict *vars, int64_t now,
                          const struct fx_jinja_limits *lim, struct fx_jbuf *out,
                          struct fx_error *err);

/* ---- builtins: filters, tests, methods, global functions (jinja_filters.c, jinja_methods.c) */

/* Filter and test ids by name (the parser checks names like Jinja does at compile time). */
int fx_jinja_filter_id(const char *name, size_t len); /* -1 when unknown */
int fx_jinja_test_id(const char *name, size_t len);   /* -1 when unknown */

/* The evaluation context, shared by jinja_eval.c and the builtins. */
struct fx_jscope;
struct fx_jctx {
    const struct fx_jinja_prog *prog;
    struct fx_jarena *arena;
    const struct fx_jdict *vars;
    struct fx_jscope *scope, *root;
    struct fx_jbuf *out;    /* where text goes now: the caller's buffer or the scratch buffer */
    struct fx_jbuf scratch; /* strings under construction, macro and {% set %} captures */
    const struct fx_jinja_limits *lim;
    uint64_t steps;
    uint32_t depth;
    int64_t now;
    int loop_ctl; /* 1 after {% break %}, 2 after {% continue %} until the loop sees it */
    struct fx_error *err;
};

/* Sets err to code with "line L, column C: message" and returns code. */
fx_status fx_jinja_fail(struct fx_jctx *c, uint32_t pos, fx_status code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Reports a failed arena allocation (no memory, or the memory limit). */
fx_status fx_jinja_fail_mem(struct fx_jctx *c, uint32_t pos);
/* Reports a buffer's sticky error (output limit, or no memory). */
fx_status fx_jinja_fail_buf(struct fx_jctx *c, uint32_t pos, const struct fx_jbuf *b);
/* Reports the use of an Undefined value, naming what was missing. */
fx_status fx_jinja_undefined(struct fx_jctx *c, uint32_t pos, struct fx_jv v);

/* Call arguments after evaluation. */
struct fx_jargs {
    const struct fx_jv *pos; /* positional */
    uint32_t n_pos;
    const struct fx_jv *kw_val;            /* keyword values, names in kw_name */
    const struct fx_jnode *const *kw_node; /* FX_JN_KWARG nodes: name and position */
    uint32_t n_kw;
};

/* Binds call arguments to parameter names (Python rules: positional first, then by keyword;
 * unknown keywords and surplus positionals are errors). out[i] is FX_JV_UNDEF when not given. */
fx_status fx_jinja_bind(struct fx_jctx *c, uint32_t pos, const char *what,
                        const struct fx_jargs *args, const char *const *names, uint32_t n_names,
                        struct fx_jv *out);

fx_status fx_jinja_apply_filter(struct fx_jctx *c, const struct fx_jnode *n, struct fx_jv v,
                                const struct fx_jargs *args, struct fx_jv *out);
fx_status fx_jinja_apply_test(struct fx_jctx *c, const struct fx_jnode *n, int test, struct fx_jv v,
                              const struct fx_jargs *args, bool *out);

/* Global functions, available as names unless a variable shadows them. */
enum fx_jfunc {
    FX_JF_RANGE,
    FX_JF_NAMESPACE,
    FX_JF_DICT,
    FX_JF_RAISE_EXCEPTION,
    FX_JF_STRFTIME_NOW,
    FX_JF_COUNT
};
bool fx_jinja_global(const char *name, size_t len, struct fx_jv *out);

/* obj.name for strings, dicts and loops: a bound method or attribute, FX_JV_UNDEF when none. */
bool fx_jinja_method(struct fx_jctx *c, struct fx_jv self, const char *name, size_t len,
                     struct fx_jv *out);
/* Calls a global function or bound method. */
fx_status fx_jinja_call_builtin(struct fx_jctx *c, uint32_t pos, struct fx_jv fn,
                                const struct fx_jargs *args, struct fx_jv *out);

/* Calls str.NAME(args) on a string (the filters upper, trim, replace... share these). */
fx_status fx_jinja_str_method(struct fx_jctx *c, uint32_t pos, const char *name, struct fx_jv self,
                              const struct fx_jargs *args, struct fx_jv *out);
/* printf-style formatting, as Python's str % values. */
fx_status fx_jinja_format(struct fx_jctx *c, uint32_t pos, struct fx_jv fmt,
                          const struct fx_jv *vals, size_t n_vals, struct fx_jv *out);

/* Python semantics of values (jinja_ops.c). */
fx_status fx_jinja_to_str(struct fx_jctx *c, uint32_t pos, struct fx_jv v, struct fx_jv *out);
fx_status fx_jinja_finish_scratch(struct fx_jctx *c, uint32_t pos, size_t mark, struct fx_jv *out);
/* Items of an iterable as a list (strings: characters, dicts: keys, Undefined: empty). */
fx_status fx_jinja_iterate(struct fx_jctx *c, uint32_t pos, struct fx_jv v,
                           const struct fx_jv **items, size_t *n);
/* obj.attr / obj[key] with Jinja's fallbacks; missing gives FX_JV_UNDEF. */
fx_status fx_jinja_getattr(struct fx_jctx *c, uint32_t pos, struct fx_jv obj, const char *name,
                           size_t len, struct fx_jv *out);
fx_status fx_jinja_getitem(struct fx_jctx *c, uint32_t pos, struct fx_jv obj, struct fx_jv key,
                           struct fx_jv *out);
/* Python comparison (<: -1, ==: 0, >: 1) of numbers, strings, or sequences; error otherwise. */
fx_status fx_jinja_compare(struct fx_jctx *c, uint32_t pos, struct fx_jv a, struct fx_jv b,
                           int *out);
/* Python `a in b`. */
fx_status fx_jinja_contains(struct fx_jctx *c, uint32_t pos, struct fx_jv container,
                            struct fx_jv item, bool *out);
/* obj[parts[0]:parts[1]:parts[2]] (each FX_JV_NONE when absent). */
fx_status fx_jinja_slice(struct fx_jctx *c, uint32_t pos, struct fx_jv obj,
                         const struct fx_jv parts[3], struct fx_jv *out);
/* a op b for + - * / // % ** on numbers, strings and lists. */
fx_status fx_jinja_arith(struct fx_jctx *c, uint32_t pos, uint8_t op, struct fx_jv a,
                         struct fx_jv b, struct fx_jv *out);
/* Calls a macro with evaluated arguments (jinja_eval.c). */
fx_status fx_jinja_call_macro(struct fx_jctx *c, uint32_t pos, const struct fx_jnode *macro,
                              const struct fx_jargs *args, struct fx_jv *out);

#endif
