/* Pre-tokenizers of byte-level BPE vocabularies: the regular expressions that cut text into
 * words before BPE merges run, chosen by tokenizer.ggml.pre. Each is a list of PCRE2 patterns
 * applied in turn: every pattern splits every piece the previous one left into its matches and
 * the unmatched gaps between them (nothing is dropped). Patterns are compiled (and JIT-compiled)
 * once per vocabulary and shared read-only; match data is per call. */
#ifndef FX_TOK_PRETOK_H
#define FX_TOK_PRETOK_H

#include <stdbool.h>
#include <stddef.h>

#include "ferrox.h"
#include "tok/session.h"

struct fx_pretok;

/* What a pre-tokenizer name implies besides its patterns (llama.cpp's defaults per name; the
 * GGUF keys override add_bos). */
struct fx_pretok_traits {
    bool ignore_merges;
    bool add_bos;
};

/* Compiles the pre-tokenizer called `name`. FX_ERR_UNSUPPORTED, naming it, when unknown. */
fx_status fx_pretok_create(const char *name, struct fx_pretok **out,
                           struct fx_pretok_traits *traits, struct fx_error *err);
void fx_pretok_free(struct fx_pretok *p);

/* Receives one word (never empty). */
typedef fx_status (*fx_pretok_emit_fn)(void *ctx, const char *word, size_t len,
                                       struct fx_error *err);

/* Splits text[0..len) into words, in order, calling emit for each. Bytes that are not valid
 * UTF-8 are never matched by a pattern, so they end up in words of their own or with their
 * neighbours; nothing is lost. */
fx_status fx_pretok_split(const struct fx_pretok *p, struct fx_tok_scratch *s, const char *text,
                          size_t len, fx_pretok_emit_fn emit, void *ctx, struct fx_error *err);

#endif
