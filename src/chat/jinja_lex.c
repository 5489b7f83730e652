/* The Jinja lexer: template text to tokens, with Jinja2's whitespace control as transformers
 * configures it (trim_blocks: the first newline after a block or comment tag is dropped;
 * lstrip_blocks: spaces and tabs from the start of a line up to a block or comment tag are
 * dropped; "-" on a tag strips all whitespace on that side; "+" turns both off). */
#include "chat/jinja.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

struct lexer {
    struct fx_jarena *a;
    const char *s;
    size_t n, pos;
    struct fx_jtoken *tok; /* [cap], malloc'd while lexing */
    size_t n_tok, cap;
    bool line_starting; /* the previous tag ended with a newline (or nothing came before) */
    struct fx_error *err;
};

/* Line and column (both from 1) of byte offset pos. */
static void line_col(const char *src, size_t n, size_t pos, unsigned *line, unsigned *col) {
    unsigned l = 1, c = 1;
    for (size_t i = 0; i < pos && i < n; i++) {
        if (src[i] == '\n') {
            l++;
            c = 1;
        } else if (((unsigned char)src[i] & 0xc0) != 0x80) {
            c++;
        }
    }
    *line = l;
    *col = c;
}

fx_status fx_jinja_verror(struct fx_error *err, fx_status code, const char *src, size_t n,
                          size_t pos, const char *what, const char *fmt, va_list ap) {
    char msg[224];
    vsnprintf(msg, sizeof msg, fmt, ap);
    unsigned line, col;
    line_col(src, n, pos, &line, &col);
    return fx_error_set(err, code, pos, "%sline %u, column %u: %s", what, line, col, msg);
}

static fx_status lex_fail(struct lexer *lx, size_t pos, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static fx_status lex_fail(struct lexer *lx, size_t pos, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fx_status st = fx_jinja_verror(lx->err, FX_ERR_FORMAT, lx->s, lx->n, pos,
                                   "template syntax error at ", fmt, ap);
    va_end(ap);
    return st;
}

static struct fx_jtoken *push(struct lexer *lx, uint8_t type, size_t pos) {
    if (lx->n_tok == lx->cap) {
        size_t cap = lx->cap ? lx->cap * 2 : 256;
        struct fx_jtoken *t = realloc(lx->tok, cap * sizeof *t);
        if (!t)
            return NULL;
        lx->tok = t;
        lx->cap = cap;
    }
    struct fx_jtoken *t = &lx->tok[lx->n_tok++];
    memset(t, 0, sizeof *t);
    t->type = type;
    t->pos = (uint32_t)pos;
    return t;
}

#define PUSH_OR_FAIL(t, lx, type, pos)                                                             \
    do {                                                                                           \
        if (!((t) = push((lx), (type), (pos))))                                                    \
            return fx_error_set((lx)->err, FX_ERR_NOMEM, FX_NO_OFFSET, "out of memory");           \
    } while (0)

static size_t skip_space(const char *s, size_t n, size_t i) {
    size_t k;
    while (i < n && (k = fx_jutf8_space_fwd(s + i, n - i)) > 0)
        i += k;
    return i;
}

/* Emits the text [from, to) before a tag whose strip sign is `sign` ('-', '+' or 0); `lstrip`
 * says whether lstrip_blocks applies to this tag (block and comment tags, not {{ }}). */
static fx_status emit_text(struct lexer *lx, size_t from, size_t to, char sign, bool lstrip) {
    if (sign == '-') {
        size_t k;
        while (to > from && (k = fx_jutf8_space_back(lx->s + from, to - from)) > 0)
            to -= k;
    } else if (sign != '+' && lstrip) {
        /* Only whitespace between the last newline (or a line start) and the tag. */
        size_t l = to;
        while (l > from && lx->s[l - 1] != '\n')
            l--;
        if ((l > from || lx->line_starting) && l < to && skip_space(lx->s, to, l) == to)
            to = l;
    }
    if (to > from) {
        struct fx_jtoken *t;
        PUSH_OR_FAIL(t, lx, FX_JT_TEXT, from);
        t->s = lx->s + from;
        t->len = (uint32_t)(to - from);
    }
    return FX_OK;
}

/* After a tag end at `pos` (just past "%}", "#}" or "}}") with strip sign `sign`: '-' eats all
 * whitespace, block and comment tags eat one newline (trim_blocks) unless '+'. */
static size_t after_tag(struct lexer *lx, size_t pos, char sign, bool trim) {
    if (sign == '-')
        pos = skip_space(lx->s, lx->n, pos);
    else if (sign != '+' && trim && pos < lx->n && lx->s[pos] == '\n')
        pos++;
    lx->line_starting = pos > 0 && lx->s[pos - 1] == '\n';
    return pos;
}

static bool is_name_start(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static bool is_digit(char c) {
    return c >= '0' && c <= '9';
}

/* Appends code point cp to b as UTF-8 (surrogates become U+FFFD). */
static void put_utf8(struct fx_jbuf *b, uint32_t cp) {
    char u[4];
    if (cp >= 0xd800 && cp <= 0xdfff)
        cp = 0xfffd;
    if (cp < 0x80) {
        u[0] = (char)cp;
        fx_jbuf_put(b, u, 1);
    } else if (cp < 0x800) {
        u[0] = (char)(0xc0 | (cp >> 6));
        u[1] = (char)(0x80 | (cp & 0x3f));
        fx_jbuf_put(b, u, 2);
    } else if (cp < 0x10000) {
        u[0] = (char)(0xe0 | (cp >> 12));
        u[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        u[2] = (char)(0x80 | (cp & 0x3f));
        fx_jbuf_put(b, u, 3);
    } else {
        u[0] = (char)(0xf0 | (cp >> 18));
        u[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
        u[3] = (char)(0x80 | (cp & 0x3f));
        fx_jbuf_put(b, u, 4);
    }
}

static int hex_val(char c) {
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Lexes a quoted string at lx->pos and unescapes it like Python's "unicode-escape" codec (what
 * Jinja applies to string literals). */
static fx_status lex_string(struct lexer *lx) {
    const char *s = lx->s;
    size_t start = lx->pos, i = start + 1;
    char q = s[start];
    struct fx_jbuf b = {.limit = lx->n};
    while (i < lx->n && s[i] != q) {
        if (s[i] != '\\') {
            size_t j = i;
            while (j < lx->n && s[j] != q && s[j] != '\\')
                j++;
            fx_jbuf_put(&b, s + i, j - i);
            i = j;
            continue;
        }
        if (i + 1 >= lx->n)
            break;
        char e = s[i + 1];
        i += 2;
        int digits = 0;
        switch (e) {
        case '\n': /* a backslash-newline continues the line */
            break;
        case '\\':
        case '\'':
        case '"':
            fx_jbuf_putc(&b, e);
            break;
        case 'a':
            fx_jbuf_putc(&b, '\a');
            break;
        case 'b':
            fx_jbuf_putc(&b, '\b');
            break;
        case 'f':
            fx_jbuf_putc(&b, '\f');
            break;
        case 'n':
            fx_jbuf_putc(&b, '\n');
            break;
        case 'r':
            fx_jbuf_putc(&b, '\r');
            break;
        case 't':
            fx_jbuf_putc(&b, '\t');
            break;
        case 'v':
            fx_jbuf_putc(&b, '\v');
            break;
        case 'x':
            digits = 2;
            break;
        case 'u':
            digits = 4;
            break;
        case 'U':
            digits = 8;
            break;
        default:
            if (e >= '0' && e <= '7') {
                uint32_t cp = (uint32_t)(e - '0');
                for (int k = 0; k < 2 && i < lx->n && s[i] >= '0' && s[i] <= '7'; k++)
                    cp = cp * 8 + (uint32_t)(s[i++] - '0');
                put_utf8(&b, cp);
            } else if ((unsigned char)e >= 0x80) {
                /* Jinja escapes non-ASCII characters before decoding, so a backslash before
                 * one keeps the backslash and spells the character as an escape. */
                size_t at = i - 1, end = at + 1;
                while (end < lx->n && ((unsigned char)s[end] & 0xc0) == 0x80)
                    end++;
                uint32_t cp = (unsigned char)e;
                size_t len = end - at;
                cp &= len == 2 ? 0x1f : len == 3 ? 0x0f : 0x07;
                for (size_t k = at + 1; k < end; k++)
                    cp = (cp << 6) | ((unsigned char)s[k] & 0x3f);
                if (cp < 0x100)
                    fx_jbuf_printf(&b, "\\x%02x", cp);
                else if (cp < 0x10000)
                    fx_jbuf_printf(&b, "\\u%04x", cp);
                else
                    fx_jbuf_printf(&b, "\\U%08x", cp);
                i = end;
            } else {
                /* Unknown escapes stay as written. */
                fx_jbuf_putc(&b, '\\');
                fx_jbuf_putc(&b, e);
            }
        }
        if (digits) {
            uint32_t cp = 0;
            for (int k = 0; k < digits; k++) {
                int h = i + (size_t)k < lx->n ? hex_val(s[i + (size_t)k]) : -1;
                if (h < 0) {
                    free(b.p);
                    return lex_fail(lx, i - 2, "truncated \\%c escape in a string literal", e);
                }
                cp = cp * 16 + (uint32_t)h;
            }
            i += (size_t)digits;
            if (cp > 0x10ffff) {
                free(b.p);
                return lex_fail(lx, i - 2 - (size_t)digits, "escape \\U%08x is not a character",
                                cp);
            }
            put_utf8(&b, cp);
        }
    }
    if (i >= lx->n) {
        free(b.p);
        return lex_fail(lx, start, "unterminated string literal");
    }
    if (b.err != FX_OK) {
        free(b.p);
        return fx_error_set(lx->err, b.err, FX_NO_OFFSET, "out of memory");
    }
    struct fx_jtoken *t;
    if (!(t = push(lx, FX_JT_STRING, start))) {
        free(b.p);
        return fx_error_set(lx->err, FX_ERR_NOMEM, FX_NO_OFFSET, "out of memory");
    }
    t->s = fx_jarena_dup(lx->a, b.p ? b.p : "", b.len);
    t->len = (uint32_t)b.len;
    free(b.p);
    if (!t->s)
        return fx_error_set(lx->err, lx->a->fail, FX_NO_OFFSET, "out of memory");
    lx->pos = i + 1;
    return FX_OK;
}

/* Digits with single underscores between them ("1_000"); returns the end. */
static size_t scan_digits(const char *s, size_t n, size_t i) {
    while (i < n && (is_digit(s[i]) || (s[i] == '_' && i + 1 < n && is_digit(s[i + 1]))))
        i++;
    return i;
}

static fx_status lex_number(struct lexer *lx) {
    const char *s = lx->s;
    size_t start = lx->pos, i = scan_digits(s, lx->n, start);
    bool is_float = false;
    if (i + 1 < lx->n && s[i] == '.' && is_digit(s[i + 1])) {
        i = scan_digits(s, lx->n, i + 1);
        is_float = true;
    }
    if (i < lx->n && (s[i] == 'e' || s[i] == 'E')) {
        size_t j = i + 1;
        if (j < lx->n && (s[j] == '+' || s[j] == '-'))
            j++;
        if (j < lx->n && is_digit(s[j])) {
            i = scan_digits(s, lx->n, j);
            is_float = true;
        }
    }
    char buf[64];
    size_t k = 0;
    for (size_t p = start; p < i; p++) {
        if (s[p] == '_')
            continue;
        if (k + 1 >= sizeof buf)
            return lex_fail(lx, start, "number literal too long");
        buf[k++] = s[p];
    }
    buf[k] = '\0';
    struct fx_jtoken *t;
    PUSH_OR_FAIL(t, lx, is_float ? FX_JT_FLOAT : FX_JT_INT, start);
    if (is_float) {
        t->f = strtod(buf, NULL);
    } else {
        int64_t v = 0;
        for (size_t p = 0; p < k; p++) {
            if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, buf[p] - '0', &v))
                return lex_fail(lx, start, "integer literal %s is too large", buf);
        }
        t->i = v;
    }
    lx->pos = i;
    return FX_OK;
}

static const struct {
    const char *text;
    uint8_t op;
} ops[] = {
    {"//", FX_JO_FLOORDIV}, {"**", FX_JO_POW},   {"==", FX_JO_EQ},      {"!=", FX_JO_NE},
    {"<=", FX_JO_LE},       {">=", FX_JO_GE},    {"+", FX_JO_ADD},      {"-", FX_JO_SUB},
    {"*", FX_JO_MUL},       {"/", FX_JO_DIV},    {"%", FX_JO_MOD},      {"~", FX_JO_CONCAT},
    {"<", FX_JO_LT},        {">", FX_JO_GT},     {"=", FX_JO_ASSIGN},   {".", FX_JO_DOT},
    {":", FX_JO_COLON},     {"|", FX_JO_PIPE},   {",", FX_JO_COMMA},    {";", FX_JO_SEMICOLON},
    {"(", FX_JO_LPAREN},    {")", FX_JO_RPAREN}, {"[", FX_JO_LBRACKET}, {"]", FX_JO_RBRACKET},
    {"{", FX_JO_LBRACE},    {"}", FX_JO_RBRACE},
};

/* The tokens inside {{ }} or {% %}, up to and including the end tag; `block` picks %} over }}.
 * End tags only count while brackets are balanced, so {{ {'a': {}} }} works. */
static fx_status lex_tag(struct lexer *lx, bool block, size_t tag_pos) {
    const char *s = lx->s;
    char closer = block ? '%' : '}';
    char stack[FX_JINJA_MAX_NESTING];
    size_t depth = 0;
    for (;;) {
        size_t i = lx->pos;
        if (i >= lx->n)
            return lex_fail(lx, tag_pos, "%s tag never closed", block ? "{%" : "{{");
        if (depth == 0) {
            char sign = 0;
            size_t at = i;
            if ((s[at] == '-' || (block && s[at] == '+')) && at + 2 < lx->n &&
                s[at + 1] == closer && s[at + 2] == '}') {
                sign = s[at];
                at++;
            }
            if (at + 1 < lx->n && s[at] == closer && s[at + 1] == '}') {
                struct fx_jtoken *t;
                PUSH_OR_FAIL(t, lx, block ? FX_JT_BLOCK_END : FX_JT_VAR_END, i);
                lx->pos = after_tag(lx, at + 2, sign, block);
                return FX_OK;
            }
        }
        size_t k = fx_jutf8_space_fwd(s + i, lx->n - i);
        if (k) {
            lx->pos = i + k;
            continue;
        }
        char c = s[i];
        fx_status st = FX_OK;
        if (c == '\'' || c == '"') {
            st = lex_string(lx);
        } else if (is_digit(c)) {
            st = lex_number(lx);
        } else if (is_name_start(c)) {
            size_t j = i + 1;
            while (j < lx->n && (is_name_start(s[j]) || is_digit(s[j])))
                j++;
            struct fx_jtoken *t;
            PUSH_OR_FAIL(t, lx, FX_JT_NAME, i);
            t->s = s + i;
            t->len = (uint32_t)(j - i);
            lx->pos = j;
        } else {
            size_t o = 0;
            while (o < sizeof ops / sizeof ops[0] &&
                   !(i + strlen(ops[o].text) <= lx->n &&
                     memcmp(s + i, ops[o].text, strlen(ops[o].text)) == 0))
                o++;
            if (o == sizeof ops / sizeof ops[0]) {
                unsigned char uc = (unsigned char)c;
                if (uc >= 0x20 && uc < 0x7f)
                    return lex_fail(lx, i, "unexpected character '%c'", c);
                return lex_fail(lx, i, "unexpected byte 0x%02x", uc);
            }
            uint8_t op = ops[o].op;
            if (op == FX_JO_LPAREN || op == FX_JO_LBRACKET || op == FX_JO_LBRACE) {
                if (depth == sizeof stack)
                    return lex_fail(lx, i, "brackets nested more than %d deep",
                                    FX_JINJA_MAX_NESTING);
                stack[depth++] = op == FX_JO_LPAREN ? ')' : op == FX_JO_LBRACKET ? ']' : '}';
            } else if (op == FX_JO_RPAREN || op == FX_JO_RBRACKET || op == FX_JO_RBRACE) {
                if (depth == 0 || stack[depth - 1] != c)
                    return lex_fail(lx, i, "unexpected '%c'", c);
                depth--;
            }
            struct fx_jtoken *t;
            PUSH_OR_FAIL(t, lx, FX_JT_OP, i);
            t->op = op;
            lx->pos = i + strlen(ops[o].text);
        }
        if (st != FX_OK)
            return st;
    }
}

/* {% raw %} at `at` ("{%" already seen, sign consumed): returns the end of the opening tag, or 0
 * when this is not a raw tag. */
static size_t raw_open_end(const struct lexer *lx, size_t at) {
    size_t i = skip_space(lx->s, lx->n, at);
    if (lx->n - i < 3 || memcmp(lx->s + i, "raw", 3) != 0)
        return 0;
    i = skip_space(lx->s, lx->n, i + 3);
    if (i + 2 < lx->n && lx->s[i] == '-' && lx->s[i + 1] == '%' && lx->s[i + 2] == '}')
        return skip_space(lx->s, lx->n, i + 3);
    if (i + 1 < lx->n && lx->s[i] == '%' && lx->s[i + 1] == '}')
        return i + 2;
    return 0;
}

/* Handles the body of a raw block starting at `from`: emits it as text and consumes
 * {% endraw %}. */
static fx_status lex_raw_body(struct lexer *lx, size_t from, size_t tag_pos) {
    const char *s = lx->s;
    for (size_t i = from; i + 1 < lx->n; i++) {
        if (s[i] != '{' || s[i + 1] != '%')
            continue;
        size_t j = i + 2;
        char sign = 0;
        if (j < lx->n && (s[j] == '-' || s[j] == '+'))
            sign = s[j++];
        j = skip_space(s, lx->n, j);
        if (lx->n - j < 6 || memcmp(s + j, "endraw", 6) != 0)
            continue;
        j = skip_space(s, lx->n, j + 6);
        char end_sign = 0;
        if (j < lx->n && (s[j] == '-' || s[j] == '+'))
            end_sign = s[j++];
        if (j + 1 >= lx->n || s[j] != '%' || s[j + 1] != '}')
            continue;
        fx_status st = emit_text(lx, from, i, sign, true);
        if (st != FX_OK)
            return st;
        lx->pos = after_tag(lx, j + 2, end_sign, true);
        return FX_OK;
    }
    return lex_fail(lx, tag_pos, "{%% raw %%} block never closed with {%% endraw %%}");
}

fx_status fx_jinja_lex(struct fx_jarena *a, const char *src, size_t n, struct fx_jtoken **out,
                       size_t *n_out, struct fx_error *err) {
    struct lexer lx = {.a = a, .s = src, .n = n, .line_starting = true, .err = err};
    fx_status st = FX_OK;
    while (lx.pos < n && st == FX_OK) {
        size_t i = lx.pos;
        while (i + 1 < n &&
               !(src[i] == '{' && (src[i + 1] == '{' || src[i + 1] == '%' || src[i + 1] == '#')))
            i++;
        if (i + 1 >= n) {
            st = emit_text(&lx, lx.pos, n, 0, false);
            break;
        }
        char kind = src[i + 1];
        size_t p = i + 2;
        char sign = 0;
        if (p < n && (src[p] == '-' || src[p] == '+'))
            sign = src[p++];
        size_t raw_end = kind == '%' ? raw_open_end(&lx, p) : 0;
        st = emit_text(&lx, lx.pos, i, sign, kind != '{');
        if (st != FX_OK)
            break;
        if (raw_end) {
            /* The opening raw tag has no trim_blocks, only its own "-". */
            lx.line_starting = src[raw_end - 1] == '\n';
            st = lex_raw_body(&lx, raw_end, i);
        } else if (kind == '#') {
            size_t e = p;
            while (e + 1 < n && !(src[e] == '#' && src[e + 1] == '}'))
                e++;
            if (e + 1 >= n) {
                st = lex_fail(&lx, i, "comment never closed with #}");
                break;
            }
            char end_sign = e > p && (src[e - 1] == '-' || src[e - 1] == '+') ? src[e - 1] : 0;
            lx.pos = after_tag(&lx, e + 2, end_sign, true);
        } else {
            struct fx_jtoken *t = push(&lx, kind == '%' ? FX_JT_BLOCK_BEGIN : FX_JT_VAR_BEGIN, i);
            if (!t) {
                st = fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "out of memory");
                break;
            }
            lx.pos = p;
            st = lex_tag(&lx, kind == '%', i);
        }
    }
    if (st == FX_OK) {
        struct fx_jtoken *t = push(&lx, FX_JT_EOF, n);
        if (!t)
            st = fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "out of memory");
    }
    if (st == FX_OK) {
        *out = fx_jarena_dup(a, lx.tok, lx.n_tok * sizeof *lx.tok);
        *n_out = lx.n_tok;
        if (!*out)
            st = fx_error_set(err, a->fail, FX_NO_OFFSET, "out of memory");
    }
    free(lx.tok);
    return st;
}
