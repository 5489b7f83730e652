/* WordPiece ("bert" vocabularies, e.g. BGE). See wpm.c. */
#ifndef FX_TOK_WPM_H
#define FX_TOK_WPM_H

#include <stddef.h>

#include "tok/session.h"
#include "tok/vocab.h"

/* Tokenizes one raw-text fragment, appending to out. */
fx_status fx_wpm_encode(const struct fx_vocab *v, struct fx_tok_scratch *s, const char *text,
                        size_t len, struct fx_tok_out *out, struct fx_error *err);

#endif
