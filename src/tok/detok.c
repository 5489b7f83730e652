/* Token ids back to text: pieces, one-shot decoding and the streaming detokenizer. Both decoders
 * take each id's piece through piece_of(), the one place that knows the rules (special tokens
 * shown or not, the SentencePiece prefix space); the stream only delays bytes, so its output
 * equals the one-shot text by construction. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "tok/utf8.h"
#include "tok/vocab.h"

const char *fx_token_to_piece(const struct fx_vocab *v, fx_token id, bool render_special,
                              size_t *len) {
    *len = 0;
    if (!v || id < 0 || id >= v->n_tokens)
        return NULL;
    const char *p = v->piece + v->piece_off[id];
    if (!render_special && (v->attr[id] & (FX_TOKEN_ATTR_CONTROL | FX_TOKEN_ATTR_UNKNOWN)))
        return p;
    *len = v->piece_len[id];
    return p;
}

/* The piece of the next id. *strip_space is true before the first id when the leading space
 * goes (SentencePiece's prefix); the first id consumes it whatever it renders to, as in
 * llama.cpp. */
static fx_status piece_of(const struct fx_vocab *v, fx_token id, unsigned flags, bool *strip_space,
                          const char **p, size_t *n, struct fx_error *err) {
    *p = fx_token_to_piece(v, id, (flags & FX_DETOK_RENDER_SPECIAL) != 0, n);
    if (!*p)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "token id %d is outside the vocabulary (%d tokens)", id, v->n_tokens);
    if (*strip_space && *n > 0 && (*p)[0] == ' ')
        (*p)++, (*n)--;
    *strip_space = false;
    return FX_OK;
}

static bool strips_space(const struct fx_vocab *v, unsigned flags) {
    return v->add_space_prefix && !(flags & FX_DETOK_CONTINUE);
}

fx_status fx_detokenize(const struct fx_vocab *v, const fx_token *ids, size_t n, unsigned flags,
                        char *buf, size_t cap, size_t *len, struct fx_error *err) {
    if (len)
        *len = 0;
    if (!v || !len || (!ids && n > 0) || (!buf && cap > 0))
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "fx_detokenize: missing vocabulary, ids, buffer or length");
    bool strip = strips_space(v, flags);
    if (flags & FX_DETOK_REMOVE_SPECIAL) {
        if (v->add_bos && n > 0 && ids[0] == v->special[FX_SPECIAL_BOS]) {
            ids++, n--;
            strip = false;
        }
        if (v->add_eos && n > 0 && ids[n - 1] == v->special[FX_SPECIAL_EOS])
            n--;
    }
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        const char *p;
        size_t k;
        fx_status st = piece_of(v, ids[i], flags, &strip, &p, &k, err);
        if (st != FX_OK)
            return st;
        if (total + k < cap)
            memcpy(buf + total, p, k);
        total += k;
    }
    *len = total;
    if (total >= cap)
        return fx_error_set(err, FX_ERR_CAPACITY, FX_NO_OFFSET,
                            "%zu bytes of text (and a NUL) do not fit a buffer of %zu", total, cap);
    buf[total] = '\0';
    return FX_OK;
}

struct fx_detok_stream {
    const struct fx_vocab *v;
    unsigned flags;
    bool strip;
    char *buf;   /* [3 + max_piece_len]: held bytes, then the newest piece */
    size_t held; /* bytes of an unfinished character, at buf[held_at..] */
    size_t held_at;
};

fx_status fx_detok_stream_create(const struct fx_vocab *v, unsigned flags,
                                 struct fx_detok_stream **out, struct fx_error *err) {
    if (out)
        *out = NULL;
    if (!v || !out)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "fx_detok_stream_create: missing vocabulary or output");
    if (flags & ~(unsigned)(FX_DETOK_RENDER_SPECIAL | FX_DETOK_CONTINUE))
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "a streaming detokenizer takes FX_DETOK_RENDER_SPECIAL and "
                            "FX_DETOK_CONTINUE only (flags 0x%x)",
                            flags);
    struct fx_detok_stream *s = calloc(1, sizeof *s);
    if (s)
        s->buf = malloc(3 + (size_t)v->max_piece_len);
    if (!s || !s->buf) {
        fx_detok_stream_free(s);
        return fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "out of memory (detokenizer)");
    }
    s->v = v;
    s->flags = flags;
    s->strip = strips_space(v, flags);
    *out = s;
    return FX_OK;
}

void fx_detok_stream_free(struct fx_detok_stream *s) {
    if (!s)
        return;
    free(s->buf);
    free(s);
}

fx_status fx_detok_stream_push(struct fx_detok_stream *s, fx_token id, const char **text,
                               size_t *len, struct fx_error *err) {
    *text = s->buf;
    *len = 0;
    const char *p;
    size_t n;
    fx_status st = piece_of(s->v, id, s->flags, &s->strip, &p, &n, err);
    if (st != FX_OK)
        return st;
    /* The held bytes move to the front (the text handed out last time is no longer needed),
     * the piece follows, and whatever ends in an unfinished character is held again. */
    memmove(s->buf, s->buf + s->held_at, s->held);
    memcpy(s->buf + s->held, p, n);
    size_t total = s->held + n;
    s->held = fx_utf8_incomplete_tail(s->buf, total);
    s->held_at = total - s->held;
    *len = s->held_at;
    return FX_OK;
}

void fx_detok_stream_flush(struct fx_detok_stream *s, const char **text, size_t *len) {
    *text = s->buf + s->held_at;
    *len = s->held;
    s->held = s->held_at = 0;
    s->strip = strips_space(s->v, s->flags);
}
