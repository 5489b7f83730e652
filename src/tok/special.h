/* Splitting text at special tokens (see special.c). */
#ifndef FX_TOK_SPECIAL_H
#define FX_TOK_SPECIAL_H

#include <stdbool.h>
#include <stddef.h>

#include "tok/session.h"
#include "tok/vocab.h"

/* Cuts text[0..len) into raw-text fragments and special tokens, in order; the result is in
 * s->frags[0..*n). User-defined tokens are always recognised; control and unknown tokens only
 * with parse_special. */
fx_status fx_tok_partition(const struct fx_vocab *v, struct fx_tok_scratch *s, const char *text,
                           size_t len, bool parse_special, size_t *n, struct fx_error *err);

#endif
