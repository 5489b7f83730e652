/* Byte-level BPE ("gpt2" vocabularies: GPT-2, Llama 3, Qwen 2/3, SmolLM2, DeepSeek, Falcon,
 * StarCoder, MPT, Refact). Token texts are written in GPT-2's byte alphabet (each byte is one
 * printable character); ferrox decodes them back to raw bytes once, at load, and merges in raw
 * bytes, by merge rank. */
#ifndef FX_TOK_BPE_H
#define FX_TOK_BPE_H

#include <stddef.h>
#include <stdint.h>

#include "tok/session.h"
#include "tok/vocab.h"

/* The character that stands for byte b in the GPT-2 byte alphabet. */
uint32_t fx_bpe_byte_to_cp(uint8_t b);
/* The byte that code point cp stands for, or -1 when cp is not in the alphabet. */
int fx_bpe_cp_to_byte(uint32_t cp);

/* Decodes a token text written in the byte alphabet into out (at most len bytes). Returns the
 * byte count, or -1 when the text holds a character outside the alphabet (or invalid UTF-8). */
int64_t fx_bpe_decode_text(const char *text, size_t len, char *out);

/* Builds the merge table from "left right" rules (rank = position). Rules whose sides are not
 * tokens are dropped; a rule whose merged text is not a token still merges (to no token). */
fx_status fx_bpe_merges_build(const struct fx_vocab *v, const struct fx_gguf_str *rules, uint64_t n,
                              struct fx_bpe_merges **out, struct fx_error *err);
void fx_bpe_merges_free(struct fx_bpe_merges *m);

/* Tokenizes one raw-text fragment (pre-tokenizer, then merges), appending to out. */
fx_status fx_bpe_encode(const struct fx_vocab *v, struct fx_tok_scratch *s, const char *text,
                        size_t len, struct fx_tok_out *out, struct fx_error *err);

#endif
