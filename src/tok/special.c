/* Special tokens in text. As llama.cpp (and Hugging Face's added tokens) do it: the special
 * tokens are taken longest first, and each one cuts every occurrence out of the raw text that
 * is left, before any tokenizer sees it; so a special token is never split, and a longer one
 * wins over a shorter one it overlaps. Tokens marked LSTRIP / RSTRIP also swallow the white
 * space on that side (Phi-3's chat tokens).
 *
 * Vocabularies may hold thousands of special tokens (Gemma's <unusedN>), so before searching
 * for one the partition checks that each of its adjacent byte pairs occurs somewhere in the
 * text at all: a bitmap of the text's byte pairs rules out almost every token in one pass. */
#include "tok/special.h"

#include <ctype.h>
#include <string.h>

#include "core/error.h"

static bool considered(const struct fx_vocab *v, fx_token id, bool parse_special) {
    return parse_special || (v->attr[id] & (FX_TOKEN_ATTR_CONTROL | FX_TOKEN_ATTR_UNKNOWN)) == 0;
}

static fx_status append(struct fx_tok_scratch *s, size_t *n, struct fx_tok_frag f,
                        struct fx_error *err) {
    fx_status st = fx_tok_reserve((void **)&s->frags_next, &s->frags_next_cap, *n + 1, sizeof f,
                                  "text fragments", err);
    if (st == FX_OK)
        s->frags_next[(*n)++] = f;
    return st;
}

/* Splits the raw fragment f at every occurrence of token id, appending the pieces. */
static fx_status cut(const struct fx_vocab *v, struct fx_tok_scratch *s, const char *text,
                     struct fx_tok_frag f, fx_token id, size_t *n, struct fx_error *err) {
    size_t tlen;
    const char *tok = fx_vocab_text(v, id, &tlen);
    uint32_t attr = v->attr[id];
    fx_status st;
    while (f.len >= tlen) {
        const char *hit = memmem(text + f.start, f.len, tok, tlen);
        if (!hit)
            break;
        size_t at = (size_t)(hit - text);
        size_t left = at - f.start;
        if (attr & FX_TOKEN_ATTR_LSTRIP)
            while (left > 0 && isspace((unsigned char)text[f.start + left - 1]))
                left--;
        if (left > 0 && (st = append(s, n, (struct fx_tok_frag){f.start, left, -1}, err)) != FX_OK)
            return st;
        if ((st = append(s, n, (struct fx_tok_frag){at, tlen, id}, err)) != FX_OK)
            return st;
        size_t rest = f.start + f.len - (at + tlen);
        f.start = at + tlen;
        f.len = rest;
        if (attr & FX_TOKEN_ATTR_RSTRIP)
            while (f.len > 0 && isspace((unsigned char)text[f.start]))
                f.start++, f.len--;
    }
    if (f.len > 0)
        return append(s, n, f, err);
    return FX_OK;
}

/* Bit (a << 8 | b) is set when bytes a, b occur next to each other in text. [65536 bits] */
static void pair_bitmap(const char *text, size_t len, uint64_t *bits) {
    memset(bits, 0, 8192);
    const uint8_t *u = (const uint8_t *)text;
    for (size_t i = 0; i + 1 < len; i++) {
        unsigned p = (unsigned)u[i] << 8 | u[i + 1];
        bits[p >> 6] |= 1ull << (p & 63);
    }
}

/* False when tok cannot occur in the text the bitmap describes. */
static bool may_occur(const uint64_t *bits, const char *tok, size_t n) {
    const uint8_t *u = (const uint8_t *)tok;
    for (size_t i = 0; i + 1 < n; i++) {
        unsigned p = (unsigned)u[i] << 8 | u[i + 1];
        if (!(bits[p >> 6] >> (p & 63) & 1))
            return false;
    }
    return true;
}

fx_status fx_tok_partition(const struct fx_vocab *v, struct fx_tok_scratch *s, const char *text,
                           size_t len, bool parse_special, size_t *n, struct fx_error *err) {
    *n = 0;
    if (len == 0)
        return FX_OK;
    fx_status st = fx_tok_reserve((void **)&s->frags, &s->frags_cap, 1, sizeof *s->frags,
                                  "text fragments", err);
    if (st != FX_OK)
        return st;
    s->frags[0] = (struct fx_tok_frag){0, len, FX_TOKEN_NULL};
    *n = 1;
    uint64_t bits[1024];
    pair_bitmap(text, len, bits);
    for (int32_t k = 0; k < v->n_special_order; k++) {
        fx_token id = v->special_order[k];
        size_t tlen;
        const char *tok = fx_vocab_text(v, id, &tlen);
        if (!considered(v, id, parse_special) || tlen > len || !may_occur(bits, tok, tlen))
            continue;
        size_t m = 0;
        for (size_t i = 0; i < *n; i++) {
            struct fx_tok_frag f = s->frags[i];
            st = f.id >= 0 ? append(s, &m, f, err) : cut(v, s, text, f, id, &m, err);
            if (st != FX_OK)
                return st;
        }
        /* Swap the buffers: the new fragments become the current ones. */
        struct fx_tok_frag *t = s->frags;
        size_t tc = s->frags_cap;
        s->frags = s->frags_next, s->frags_cap = s->frags_next_cap;
        s->frags_next = t, s->frags_next_cap = tc;
        *n = m;
    }
    return FX_OK;
}
