/* WordPiece, as BERT's basic tokenizer plus greedy longest-match does it: strip accents (keep the
 * first code point of each character's canonical decomposition, drop combining marks), lower-case,
 * drop control characters, split at white space, and make every punctuation character (and ASCII
 * symbol, and CJK ideograph) a word of its own. Each word, prefixed with "▁" (the converter's
 * mark for a word start; continuation pieces have no mark), is then spelled with the longest
 * vocabulary entries from the left; a word that cannot be spelled becomes the unknown token. */
#include "tok/wpm.h"

#include <string.h>

#include "core/error.h"
#include "tok/unicode.h"
#include "tok/utf8.h"

/* The CJK ranges BERT isolates (as the Hugging Face implementation has them). */
static bool is_cjk(uint32_t cp) {
    return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
           (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
           (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B920 && cp <= 0x2CEAF) ||
           (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

/* s->text holds "▁" followed by the word being built. */
#define MARK_LEN 3

static fx_status spell(const struct fx_vocab *v, const char *w, size_t n, struct fx_tok_out *out,
                       struct fx_error *err) {
    size_t first = out->n;
    for (size_t i = 0; i < n;) {
        size_t j = n - i > (size_t)v->max_text_len ? i + v->max_text_len : n;
        fx_token id = -1;
        for (; j > i; j--)
            if ((id = fx_tok_index_find(&v->text_index, w + i, j - i)) >= 0)
                break;
        if (id < 0) {
            out->n = first; /* the word cannot be spelled: drop what was matched */
            break;
        }
        fx_tok_push(out, id);
        i = j;
    }
    if (out->n == first) {
        if (v->special[FX_SPECIAL_UNK] < 0)
            return fx_error_set(err, FX_ERR_UNSUPPORTED, FX_NO_OFFSET,
                                "a word has no spelling and the vocabulary no unknown token");
        fx_tok_push(out, v->special[FX_SPECIAL_UNK]);
    }
    return FX_OK;
}

fx_status fx_wpm_encode(const struct fx_vocab *v, struct fx_tok_scratch *s, const char *text,
                        size_t len, struct fx_tok_out *out, struct fx_error *err) {
    /* A word is never longer than its source: each code point re-encodes to at most 4 bytes and
     * came from at least 1; reserve for the worst case up front. */
    size_t cap = len > (SIZE_MAX - MARK_LEN) / 4 ? SIZE_MAX : 4 * len + MARK_LEN;
    fx_status st = fx_tok_reserve((void **)&s->text, &s->text_cap, cap, 1, "word", err);
    if (st != FX_OK)
        return st;
    char *w = s->text;
    memcpy(w, "\xE2\x96\x81", MARK_LEN);
    size_t n = MARK_LEN;
    const uint8_t *u = (const uint8_t *)text;
    for (size_t at = 0; at < len;) {
        uint32_t cp;
        at += fx_utf8_decode(u + at, len - at, &cp);
        if (v->strip_accents)
            cp = fx_ucd_nfd_base(cp);
        enum fx_ucd_class cls = fx_ucd_class(cp);
        bool alone = cls == FX_UCD_PUNCT || (cp < 0x7F && cls == FX_UCD_SYMBOL) || is_cjk(cp);
        if (fx_ucd_is_space(cp) || alone) {
            if (n > MARK_LEN && (st = spell(v, w, n, out, err)) != FX_OK)
                return st;
            n = MARK_LEN;
            if (!alone)
                continue;
        } else if (cp == 0 || cp == 0xFFFD || cls == FX_UCD_CONTROL ||
                   (v->strip_accents && cls == FX_UCD_MARK)) {
            continue;
        }
        if (v->lowercase)
            cp = fx_ucd_tolower(cp);
        n += fx_utf8_encode(cp, w + n);
        if (alone) {
            if ((st = spell(v, w, n, out, err)) != FX_OK)
                return st;
            n = MARK_LEN;
        }
    }
    if (n > MARK_LEN)
        return spell(v, w, n, out, err);
    return FX_OK;
}
