/* fx_tokenize: special tokens first, then the vocabulary's algorithm on each raw fragment, with
 * BOS / EOS / SEP added as the vocabulary says. Everything a call needs beyond the (immutable)
 * vocabulary lives in its own scratch, so calls may run concurrently. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "tok/bpe.h"
#include "tok/special.h"
#include "tok/spm.h"
#include "tok/vocab.h"
#include "tok/wpm.h"

static fx_status encode(const struct fx_vocab *v, struct fx_tok_scratch *s, const char *text,
                        size_t len, bool add_special, bool parse_special, struct fx_tok_out *out,
                        struct fx_error *err) {
    size_t n_frags;
    fx_status st = fx_tok_partition(v, s, text, len, parse_special, &n_frags, err);
    if (st != FX_OK)
        return st;
    if (add_special && v->add_bos)
        fx_tok_push(out, v->special[FX_SPECIAL_BOS]);
    /* SentencePiece adds its space at the start and after every special token. */
    bool after_special = true;
    for (size_t i = 0; i < n_frags; i++) {
        const struct fx_tok_frag *f = &s->frags[i];
        if (f->id >= 0) {
            fx_tok_push(out, f->id);
            after_special = true;
            continue;
        }
        const char *t = text + f->start;
        switch (v->type) {
        case FX_VOCAB_SPM:
            st = fx_spm_encode(v, s, t, f->len, v->add_space_prefix && after_special, out, err);
            break;
        case FX_VOCAB_BPE:
            st = fx_bpe_encode(v, s, t, f->len, out, err);
            break;
        case FX_VOCAB_WPM:
            st = fx_wpm_encode(v, s, t, f->len, out, err);
            break;
        }
        if (st != FX_OK)
            return st;
        after_special = false;
    }
    if (add_special && v->add_eos)
        fx_tok_push(out, v->special[FX_SPECIAL_EOS]);
    if (add_special && v->add_sep)
        fx_tok_push(out, v->special[FX_SPECIAL_SEP]);
    return FX_OK;
}

fx_status fx_tokenize(const struct fx_vocab *v, const char *text, size_t len, bool add_special,
                      bool parse_special, fx_token *ids, size_t cap, size_t *n_ids,
                      struct fx_error *err) {
    if (n_ids)
        *n_ids = 0;
    if (!v || !n_ids || (!text && len > 0) || (!ids && cap > 0))
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "fx_tokenize: missing vocabulary, text, output or count");
    struct fx_tok_scratch s = {0};
    struct fx_tok_out out = {ids, cap, 0};
    fx_status st = encode(v, &s, text ? text : "", len, add_special, parse_special, &out, err);
    fx_tok_scratch_free(&s);
    if (st != FX_OK)
        return st;
    *n_ids = out.n;
    if (out.n > cap)
        return fx_error_set(err, FX_ERR_CAPACITY, FX_NO_OFFSET,
                            "%zu tokens do not fit the output array of %zu", out.n, cap);
    return FX_OK;
}

fx_status fx_tokenize_alloc(const struct fx_vocab *v, const char *text, size_t len,
                            bool add_special, bool parse_special, fx_token **ids, size_t *n_ids,
                            struct fx_error *err) {
    /* A first guess that fits nearly every text; the tokenizer says how many it needs if not. */
    size_t cap = len + 16;
    *ids = NULL;
    *n_ids = 0;
    for (int attempt = 0; attempt < 2; attempt++) {
        free(*ids);
        *ids = malloc(cap * sizeof **ids);
        if (!*ids)
            return fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "out of memory for %zu tokens",
                                cap);
        fx_status st = fx_tokenize(v, text, len, add_special, parse_special, *ids, cap, n_ids, err);
        if (st == FX_ERR_CAPACITY) {
            cap = *n_ids;
            continue;
        }
        if (st != FX_OK) {
            free(*ids);
            *ids = NULL;
            *n_ids = 0;
            return st;
        }
        fx_token bos = fx_vocab_bos(v);
        if (add_special && fx_vocab_add_bos(v) && *n_ids >= 2 && (*ids)[0] == bos &&
            (*ids)[1] == bos)
            memmove(*ids, *ids + 1, --*n_ids * sizeof **ids);
        return FX_OK;
    }
    free(*ids);
    *ids = NULL;
    *n_ids = 0;
    return fx_error_set(err, FX_ERR_CAPACITY, FX_NO_OFFSET, "tokenizer output kept growing");
}
