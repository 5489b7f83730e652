/* SentencePiece-style BPE with byte fallback (see spm.c). */
#ifndef FX_TOK_SPM_H
#define FX_TOK_SPM_H

#include <stdbool.h>
#include <stddef.h>

#include "tok/session.h"
#include "tok/vocab.h"

/* Tokenizes one raw-text fragment, appending to out. prefix_space adds the leading "▁" that
 * add_space_prefix asks for (at the start of the text and after a special token). */
fx_status fx_spm_encode(const struct fx_vocab *v, struct fx_tok_scratch *s, const char *text,
                        size_t len, bool prefix_space, struct fx_tok_out *out,
                        struct fx_error *err);

#endif
