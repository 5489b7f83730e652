/* SentencePiece-style BPE ("llama" vocabularies: Llama 1/2, Mistral, Gemma, Phi-3, the stories
 * models). Spaces become U+2581 ("▁"), a space is prefixed when the vocabulary asks for it,
 * and the text is cut into UTF-8 characters; then the adjacent pair that forms the token with
 * the highest score is merged, repeatedly. A final symbol that is not a token is spelled with
 * byte tokens <0xNN> (byte fallback). */
#include "tok/spm.h"

#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "core/error.h"
#include "tok/merge.h"
#include "tok/utf8.h"

static const char ESCAPED_SPACE[3] = {'\xE2', '\x96', '\x81'}; /* U+2581 */

/* A direct-mapped cache of pair lookups for one call: two tokens always join to the same text,
 * so (left id, right id) decides the merged token, and text repeats the same pairs over and
 * over. It spares most hash-table probes. */
#define PAIR_CACHE_SIZE 4096

struct pair_cache {
    fx_token left, right, result; /* result FX_TOKEN_NULL: the pair forms no token */
};

struct spm_ctx {
    const struct fx_vocab *v;
    const char *text;
    struct pair_cache *cache; /* [PAIR_CACHE_SIZE] */
};

static bool spm_pair(const void *ctx, const struct fx_merge_sym *l, const struct fx_merge_sym *r,
                     double *key, fx_token *result) {
    const struct spm_ctx *c = ctx;
    fx_token id;
    if (l->id >= 0 && r->id >= 0) {
        uint32_t h = ((uint32_t)l->id * 0x9E3779B1u) ^ ((uint32_t)r->id * 0x85EBCA77u);
        struct pair_cache *e = &c->cache[(h ^ (h >> 15)) & (PAIR_CACHE_SIZE - 1)];
        if (e->left != l->id || e->right != r->id) {
            e->left = l->id;
            e->right = r->id;
            e->result =
                fx_tok_index_find(&c->v->text_index, c->text + l->start, (size_t)l->n + r->n);
        }
        id = e->result;
    } else {
        id = fx_tok_index_find(&c->v->text_index, c->text + l->start, (size_t)l->n + r->n);
    }
    if (id < 0)
        return false;
    *key = -(double)c->v->score[id]; /* highest score first */
    *result = id;
    return true;
}

/* Writes ' ' -> U+2581 escaped text (with the optional prefix space) into s->text. */
static fx_status escape(struct fx_tok_scratch *s, const char *text, size_t len, bool prefix,
                        size_t *out_len, struct fx_error *err) {
    size_t need;
    if (fx_mul_overflow_size(len + 1, 3, &need))
        return fx_error_set(err, FX_ERR_CAPACITY, FX_NO_OFFSET, "text of %zu bytes is too long",
                            len);
    fx_status st = fx_tok_reserve((void **)&s->text, &s->text_cap, need, 1, "escaped text", err);
    if (st != FX_OK)
        return st;
    size_t n = 0;
    if (prefix) {
        memcpy(s->text, ESCAPED_SPACE, 3);
        n = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(s->text + n, ESCAPED_SPACE, 3);
            n += 3;
        } else {
            s->text[n++] = text[i];
        }
    }
    *out_len = n;
    return FX_OK;
}

static bool is_space(const char *t, const struct fx_merge_sym *sym) {
    return sym->n == 3 && memcmp(t + sym->start, ESCAPED_SPACE, 3) == 0;
}

/* Runs the merges over syms[0..n) (one chunk) and appends its tokens. */
static fx_status merge_and_emit(const struct spm_ctx *ctx, struct fx_tok_scratch *s,
                                struct fx_merge_sym *syms, int32_t n, struct fx_tok_out *out,
                                struct fx_error *err) {
    const struct fx_vocab *v = ctx->v;
    const char *t = ctx->text;
    fx_merge_link(syms, n);
    fx_status st = fx_merge_run(s, syms, n, spm_pair, ctx, err);
    if (st != FX_OK)
        return st;
    for (int32_t i = 0; i >= 0; i = syms[i].next) {
        if (syms[i].id >= 0) {
            fx_tok_push(out, syms[i].id);
            continue;
        }
        for (uint32_t b = 0; b < syms[i].n; b++) {
            uint8_t byte = (uint8_t)t[syms[i].start + b];
            fx_token id = v->byte_token[byte];
            if (id < 0)
                id = v->special[FX_SPECIAL_UNK];
            if (id < 0)
                return fx_error_set(err, FX_ERR_UNSUPPORTED, FX_NO_OFFSET,
                                    "the vocabulary has no token for byte 0x%02X and no unknown "
                                    "token",
                                    byte);
            fx_tok_push(out, id);
        }
    }
    return FX_OK;
}

fx_status fx_spm_encode(const struct fx_vocab *v, struct fx_tok_scratch *s, const char *text,
                        size_t len, bool prefix_space, struct fx_tok_out *out,
                        struct fx_error *err) {
    size_t n_text = 0;
    fx_status st = escape(s, text, len, prefix_space, &n_text, err);
    if (st != FX_OK)
        return st;
    if (n_text > INT32_MAX)
        return fx_error_set(err, FX_ERR_CAPACITY, FX_NO_OFFSET,
                            "text of %zu bytes is too long to tokenize at once", len);
    const char *t = s->text;

    /* One symbol per UTF-8 character, and one per byte that is not part of a valid character.
     * (llama.cpp sizes a symbol by its first byte alone, so that an invalid lead byte swallows
     * the bytes after it, even a "▁"; for valid UTF-8 the two agree, and this way invalid input
     * stays lossless.) */
    if ((st = fx_tok_reserve(&s->sym, &s->sym_cap, n_text ? n_text : 1, sizeof(struct fx_merge_sym),
                             "symbols", err)) != FX_OK)
        return st;
    struct fx_merge_sym *syms = s->sym;
    int32_t n = 0;
    for (size_t at = 0; at < n_text;) {
        uint32_t cp;
        size_t cl = fx_utf8_decode((const uint8_t *)t + at, n_text - at, &cp);
        syms[n++] = (struct fx_merge_sym){.start = (uint32_t)at,
                                          .n = (uint32_t)cl,
                                          .id = fx_tok_index_find(&v->text_index, t + at, cl)};
        at += cl;
    }
    if (!s->pair_cache) {
        struct pair_cache *cache = malloc(PAIR_CACHE_SIZE * sizeof *cache);
        if (!cache)
            return fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "out of memory (pair cache)");
        for (size_t i = 0; i < PAIR_CACHE_SIZE; i++)
            cache[i] = (struct pair_cache){FX_TOKEN_NULL, FX_TOKEN_NULL, FX_TOKEN_NULL};
        s->pair_cache = cache;
    }
    struct spm_ctx ctx = {v, t, s->pair_cache};
    /* Merge chunk by chunk: a chunk ends where a run of spaces starts (when no token can
     * straddle that point, see fx_vocab.spm_chunked), else the whole text is one chunk. */
    for (int32_t first = 0; first < n;) {
        int32_t end = first + 1;
        if (v->spm_chunked)
            while (end < n && !(is_space(t, &syms[end]) && !is_space(t, &syms[end - 1])))
                end++;
        else
            end = n;
        if ((st = merge_and_emit(&ctx, s, syms + first, end - first, out, err)) != FX_OK)
            return st;
        first = end;
    }
    return FX_OK;
}
