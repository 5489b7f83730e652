/* Stop tokens, stop strings and the token limit, over streamed text.
 *
 * The stopper keeps only the text it has not released yet: the tail that could be the start of a
 * stop string (shorter than the longest one) or an incomplete UTF-8 sequence, plus the newest
 * piece. A stop string that completes in the newest piece must start inside that text, since
 * everything before it was released only because no stop string could start there; so each
 * token's search covers a few bytes, however long the output. */
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "core/error.h"
#include "ferrox.h"

struct fx_stopper {
    char **strings; /* [n_strings], NUL-terminated copies */
    size_t *lens;   /* [n_strings] */
    size_t n_strings;
    fx_token *tokens; /* [n_tokens] */
    size_t n_tokens;
    int64_t max_tokens;

    char *buf; /* [cap]: [0, start) was released by the last call, [start, end) is held */
    size_t cap, start, end;
    int64_t n_pushed;
    uint64_t emitted;
    bool stopped;
};

void fx_stopper_free(struct fx_stopper *st) {
    if (!st)
        return;
    for (size_t i = 0; st->strings && i < st->n_strings; i++)
        free(st->strings[i]);
    free(st->strings);
    free(st->lens);
    free(st->tokens);
    free(st->buf);
    free(st);
}

fx_status fx_stopper_create(const struct fx_stop_params *params, struct fx_stopper **out,
                            struct fx_error *err) {
    *out = NULL;
    if ((params->n_strings > 0 && !params->strings) || (params->n_tokens > 0 && !params->tokens))
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "stopper: a count is set but its array is missing");
    for (size_t i = 0; i < params->n_strings; i++)
        if (!params->strings[i] || !params->strings[i][0])
            return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                                "stopper: stop string %zu is empty", i);
    struct fx_stopper *st = calloc(1, sizeof *st);
    if (!st)
        goto nomem;
    st->max_tokens = params->max_tokens;
    if (params->n_strings > 0) {
        st->strings = calloc(params->n_strings, sizeof *st->strings);
        st->lens = calloc(params->n_strings, sizeof *st->lens);
        if (!st->strings || !st->lens)
            goto nomem;
        st->n_strings = params->n_strings;
        for (size_t i = 0; i < params->n_strings; i++) {
            st->strings[i] = strdup(params->strings[i]);
            if (!st->strings[i])
                goto nomem;
            st->lens[i] = strlen(st->strings[i]);
        }
    }
    if (params->n_tokens > 0) {
        st->tokens = calloc(params->n_tokens, sizeof *st->tokens);
        if (!st->tokens)
            goto nomem;
        memcpy(st->tokens, params->tokens, params->n_tokens * sizeof *st->tokens);
        st->n_tokens = params->n_tokens;
    }
    st->cap = 256;
    st->buf = malloc(st->cap);
    if (!st->buf)
        goto nomem;
    *out = st;
    return FX_OK;
nomem:
    fx_stopper_free(st);
    return fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "stopper: out of memory");
}

void fx_stopper_reset(struct fx_stopper *st) {
    st->start = st->end = 0;
    st->n_pushed = 0;
    st->emitted = 0;
    st->stopped = false;
}

/* Length of the longest suffix of s[0, n) that is a proper prefix of a stop string. */
static size_t stop_prefix_tail(const struct fx_stopper *st, const char *s, size_t n) {
    size_t hold = 0;
    for (size_t i = 0; i < st->n_strings; i++) {
        size_t k = st->lens[i] - 1 < n ? st->lens[i] - 1 : n;
        for (; k > hold; k--)
            if (memcmp(s + n - k, st->strings[i], k) == 0) {
                hold = k;
                break;
            }
    }
    return hold;
}

/* Length of an incomplete UTF-8 sequence at the end of s[0, n): a lead byte followed by fewer
 * continuation bytes than it announces. Invalid bytes are not held: they will never complete. */
static size_t utf8_incomplete_tail(const unsigned char *s, size_t n) {
    for (size_t k = 1; k <= 4 && k <= n; k++) {
        unsigned char c = s[n - k];
        if ((c & 0xc0) == 0x80)
            continue; /* a continuation byte: look further back for its lead */
        size_t need = (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 1;
        return need > k ? k : 0;
    }
    return 0;
}

/* Releases buf[0, len) and keeps buf[len, end) for later. */
static void release(struct fx_stopper *st, size_t len, enum fx_stop_reason reason, int32_t which,
                    struct fx_stop_result *out) {
    st->start = len;
    st->emitted += len;
    if (reason != FX_STOP_NONE)
        st->stopped = true;
    *out = (struct fx_stop_result){
        .reason = reason, .which = which, .text = st->buf, .len = len, .text_end = st->emitted};
}

fx_status fx_stopper_push(struct fx_stopper *st, fx_token token, const char *piece, size_t len,
                          struct fx_stop_result *out, struct fx_error *err) {
    if (st->stopped)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "stopper: generation has already stopped (reset it to start again)");
    /* Forget what the last call released. */
    size_t held = st->end - st->start;
    memmove(st->buf, st->buf + st->start, held);
    st->start = 0;
    st->end = held;

    size_t need;
    if (fx_add_overflow_size(held, len, &need))
        return fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "stopper: piece of %zu bytes", len);
    if (need > st->cap) {
        size_t cap = st->cap * 2 > need ? st->cap * 2 : need;
        char *grown = realloc(st->buf, cap);
        if (!grown)
            return fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET,
                                "stopper: cannot hold %zu bytes of text", need);
        st->buf = grown;
        st->cap = cap;
    }
    st->n_pushed++;

    for (size_t i = 0; i < st->n_tokens; i++)
        if (token == st->tokens[i]) {
            release(st, st->end, FX_STOP_TOKEN, (int32_t)i, out);
            return FX_OK;
        }

    if (len > 0)
        memcpy(st->buf + st->end, piece, len);
    st->end += len;

    /* The earliest stop string wins; at the same start, the first one listed. */
    size_t cut = SIZE_MAX;
    int32_t which = -1;
    for (size_t i = 0; i < st->n_strings; i++) {
        const char *at = memmem(st->buf, st->end, st->strings[i], st->lens[i]);
        if (at && (size_t)(at - st->buf) < cut) {
            cut = (size_t)(at - st->buf);
            which = (int32_t)i;
        }
    }
    if (which >= 0) {
        release(st, cut, FX_STOP_STRING, which, out);
        return FX_OK;
    }
    if (st->max_tokens > 0 && st->n_pushed >= st->max_tokens) {
        release(st, st->end, FX_STOP_MAX_TOKENS, -1, out);
        return FX_OK;
    }
    size_t hold = stop_prefix_tail(st, st->buf, st->end);
    size_t partial = utf8_incomplete_tail((const unsigned char *)st->buf, st->end);
    release(st, st->end - (hold > partial ? hold : partial), FX_STOP_NONE, -1, out);
    return FX_OK;
}

void fx_stopper_finish(struct fx_stopper *st, struct fx_stop_result *out) {
    if (st->stopped) {
        *out = (struct fx_stop_result){.which = -1, .text = st->buf, .text_end = st->emitted};
        return;
    }
    /* Everything held is released: nothing more can complete a stop string now. */
    memmove(st->buf, st->buf + st->start, st->end - st->start);
    st->end -= st->start;
    st->start = 0;
    release(st, st->end, FX_STOP_NONE, -1, out);
    st->stopped = true;
}
