/* Byte-level BPE (see bpe.h). */
#include "tok/bpe.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "tok/merge.h"
#include "tok/pretok.h"
#include "tok/utf8.h"

/* GPT-2's alphabet keeps the printable Latin-1 bytes as themselves and maps the others (0-32,
 * 127-160, 173), in order, to U+0100 onwards. */
static int printable(unsigned b) {
    return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
}

uint32_t fx_bpe_byte_to_cp(uint8_t b) {
    if (printable(b))
        return b;
    if (b <= 32)
        return 256u + b;
    if (b <= 160)
        return 256u + 33u + (b - 127u);
    return 256u + 33u + 34u; /* 173 */
}

int fx_bpe_cp_to_byte(uint32_t cp) {
    if (cp < 256)
        return printable(cp) ? (int)cp : -1;
    if (cp <= 256 + 32)
        return (int)(cp - 256);
    if (cp <= 256 + 33 + 33)
        return (int)(cp - 256 - 33 + 127);
    if (cp == 256 + 33 + 34)
        return 173;
    return -1;
}

int64_t fx_bpe_decode_text(const char *text, size_t len, char *out) {
    int64_t n = 0;
    for (size_t at = 0; at < len;) {
        uint32_t cp;
        size_t step = fx_utf8_decode((const uint8_t *)text + at, len - at, &cp);
        int b = cp == 0xFFFD ? -1 : fx_bpe_cp_to_byte(cp);
        if (b < 0)
            return -1;
        out[n++] = (char)b;
        at += step;
    }
    return n;
}

/* ---- merge rules: (left id, right id) -> (rank, merged id) ---------------------------------- */

struct merge_slot {
    uint64_t key; /* left << 32 | right */
    int32_t rank; /* -1: empty slot */
    fx_token result;
};

struct fx_bpe_merges {
    struct merge_slot *slots;
    uint64_t mask;
};

static uint64_t mix(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return k;
}

static const struct merge_slot *merge_find(const struct fx_bpe_merges *m, fx_token l, fx_token r) {
    uint64_t key = (uint64_t)(uint32_t)l << 32 | (uint32_t)r;
    for (uint64_t i = mix(key) & m->mask;; i = (i + 1) & m->mask) {
        const struct merge_slot *s = &m->slots[i];
        if (s->rank < 0)
            return NULL;
        if (s->key == key)
            return s;
    }
}

void fx_bpe_merges_free(struct fx_bpe_merges *m) {
    if (!m)
        return;
    free(m->slots);
    free(m);
}

fx_status fx_bpe_merges_build(const struct fx_vocab *v, const struct fx_gguf_str *rules, uint64_t n,
                              struct fx_bpe_merges **out, struct fx_error *err) {
    *out = NULL;
    if (n > INT32_MAX)
        return fx_error_set(err, FX_ERR_FORMAT, FX_NO_OFFSET,
                            "tokenizer.ggml.merges: %llu rules is too many", (unsigned long long)n);
    struct fx_bpe_merges *m = calloc(1, sizeof *m);
    uint64_t cap = 16;
    while (cap < 2 * n)
        cap *= 2;
    char *joined = malloc((size_t)v->max_text_len * 2 + 1);
    if (m)
        m->slots = malloc(cap * sizeof *m->slots);
    if (!m || !m->slots || !joined) {
        free(joined);
        fx_bpe_merges_free(m);
        return fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "out of memory (%llu merge rules)",
                            (unsigned long long)n);
    }
    m->mask = cap - 1;
    for (uint64_t i = 0; i < cap; i++)
        m->slots[i].rank = -1;
    for (uint64_t rank = 0; rank < n; rank++) {
        const char *w = rules[rank].data;
        size_t len = rules[rank].len;
        /* The separator is the first space after the first byte (a side may start with one). */
        const char *sp = len > 1 ? memchr(w + 1, ' ', len - 1) : NULL;
        if (!sp)
            continue;
        size_t nl = (size_t)(sp - w), nr = len - nl - 1;
        fx_token l = fx_tok_index_find(&v->text_index, w, nl);
        fx_token r = fx_tok_index_find(&v->text_index, sp + 1, nr);
        if (l < 0 || r < 0 || merge_find(m, l, r))
            continue; /* not tokens, or an earlier rule already ranks this pair */
        /* Both sides are tokens, so together they fit in 2 * max_text_len bytes. */
        memcpy(joined, w, nl);
        memcpy(joined + nl, sp + 1, nr);
        uint64_t key = (uint64_t)(uint32_t)l << 32 | (uint32_t)r;
        uint64_t at = mix(key) & m->mask;
        while (m->slots[at].rank >= 0)
            at = (at + 1) & m->mask;
        m->slots[at] = (struct merge_slot){key, (int32_t)rank,
                                           fx_tok_index_find(&v->text_index, joined, nl + nr)};
    }
    free(joined);
    *out = m;
    return FX_OK;
}

/* ---- encoding ------------------------------------------------------------------------------ */

static bool bpe_pair(const void *ctx, const struct fx_merge_sym *l, const struct fx_merge_sym *r,
                     double *key, fx_token *result) {
    const struct fx_vocab *v = ctx;
    if (l->id < 0 || r->id < 0)
        return false;
    const struct merge_slot *s = merge_find(v->merges, l->id, r->id);
    if (!s)
        return false;
    *key = s->rank;
    *result = s->result;
    return true;
}

struct word_ctx {
    const struct fx_vocab *v;
    struct fx_tok_scratch *s;
    struct fx_tok_out *out;
};

/* BPE over one pre-tokenized word, in raw bytes: each byte starts as its own symbol. */
static fx_status encode_word(void *ctx, const char *word, size_t len, struct fx_error *err) {
    struct word_ctx *c = ctx;
    const struct fx_vocab *v = c->v;
    if (v->ignore_merges) {
        fx_token whole = fx_tok_index_find(&v->bytes_index, word, len);
        if (whole >= 0) {
            fx_tok_push(c->out, whole);
            return FX_OK;
        }
    }
    if (len > INT32_MAX)
        return fx_error_set(err, FX_ERR_CAPACITY, FX_NO_OFFSET,
                            "a %zu-byte word is too long to tokenize", len);
    fx_status st = fx_tok_reserve(&c->s->sym, &c->s->sym_cap, len, sizeof(struct fx_merge_sym),
                                  "symbols", err);
    if (st != FX_OK)
        return st;
    struct fx_merge_sym *syms = c->s->sym;
    for (size_t i = 0; i < len; i++)
        syms[i] = (struct fx_merge_sym){
            .start = (uint32_t)i, .n = 1, .id = v->byte_token[(uint8_t)word[i]]};
    fx_merge_link(syms, (int32_t)len);
    if ((st = fx_merge_run(c->s, syms, (int32_t)len, bpe_pair, v, err)) != FX_OK)
        return st;
    for (int32_t i = 0; i >= 0; i = syms[i].next) {
        if (syms[i].id >= 0) {
            fx_tok_push(c->out, syms[i].id);
            continue;
        }
        /* A merge whose result is no token: spell it byte by byte, skipping bytes the
         * vocabulary cannot spell (a complete byte alphabet has them all). */
        for (uint32_t b = 0; b < syms[i].n; b++) {
            fx_token id = v->byte_token[(uint8_t)word[syms[i].start + b]];
            if (id >= 0)
                fx_tok_push(c->out, id);
        }
    }
    return FX_OK;
}

fx_status fx_bpe_encode(const struct fx_vocab *v, struct fx_tok_scratch *s, const char *text,
                        size_t len, struct fx_tok_out *out, struct fx_error *err) {
    struct word_ctx c = {v, s, out};
    return fx_pretok_split(v->pretok, s, text, len, encode_word, &c, err);
}
