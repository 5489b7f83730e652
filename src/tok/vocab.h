/* The vocabulary's inside, shared by the files of tok/. A struct fx_vocab is built once
 * (fx_vocab_build, from a GGUF file through vocab_gguf.c or from arrays in tests) and never
 * changes afterwards, so every function that takes a const struct fx_vocab * may run on many
 * threads at once; per-call memory lives in a struct fx_tok_scratch (tok/session.h). */
#ifndef FX_TOK_VOCAB_H
#define FX_TOK_VOCAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ferrox.h"
#include "tok/index.h"

/* Token ids a vocabulary may name (tokenizer.ggml.*_token_id). */
enum fx_vocab_special {
    FX_SPECIAL_BOS,
    FX_SPECIAL_EOS,
    FX_SPECIAL_EOT,
    FX_SPECIAL_EOM,
    FX_SPECIAL_UNK,
    FX_SPECIAL_SEP,
    FX_SPECIAL_PAD,
    FX_SPECIAL_MASK,
    FX_SPECIAL_COUNT
};

/* A vocabulary as a file describes it, before validation: what fx_vocab_build consumes. Every
 * pointer is borrowed for the duration of the call. Optional values use -1 (ids, flags) or NULL
 * (strings, arrays) for "the key is absent". */
struct fx_vocab_spec {
    const char *model; /* tokenizer.ggml.model: "llama", "gpt2" or "bert" */
    const char *pre;   /* tokenizer.ggml.pre */
    const char *name;  /* general.name (a few per-model fix-ups look at it) */
    uint64_t n_tokens;
    const struct fx_gguf_str *tokens; /* [n_tokens] */
    const float *scores;              /* [n_tokens], or NULL */
    const int32_t *iscores;           /* [n_tokens] integer scores, used when scores is NULL */
    const int32_t *types;             /* [n_tokens] tokenizer.ggml.token_type, or NULL */
    uint64_t n_merges;
    const struct fx_gguf_str *merges; /* [n_merges] "left right", or NULL */
    int64_t special[FX_SPECIAL_COUNT];
    int8_t add_bos, add_eos, add_sep, add_space_prefix;
    int8_t lowercase, strip_accents; /* WordPiece normalizer */
};

/* The GGUF key of a special id ("tokenizer.ggml.bos_token_id", ...). */
const char *fx_vocab_special_key(enum fx_vocab_special which);

/* A spec with every optional value absent. */
void fx_vocab_spec_init(struct fx_vocab_spec *spec);

/* Builds a vocabulary; copies everything it keeps. */
fx_status fx_vocab_build(const struct fx_vocab_spec *spec, struct fx_vocab **out,
                         struct fx_error *err);

struct fx_bpe_merges;
struct fx_pretok;

struct fx_vocab {
    enum fx_vocab_type type;
    char pre[64]; /* the pre-tokenizer name in effect ("" when the model has none) */
    int32_t n_tokens;

    /* Token texts as the file has them, each NUL-terminated, in one block. */
    char *text; /* text of id i: text + text_off[i], text_len[i] bytes */
    uint32_t *text_off, *text_len;
    float *score;   /* [n_tokens] */
    uint32_t *attr; /* [n_tokens] enum fx_token_attr bits */
    uint32_t max_text_len;
    struct fx_tok_index text_index; /* text -> id */

    /* What each token decodes to with special tokens rendered (fx_token_to_piece). */
    char *piece;
    uint32_t *piece_off, *piece_len;
    uint32_t max_piece_len;

    /* Control, user-defined and unknown tokens, longest text first: the order in which
     * fx_tok_partition looks for them in text. */
    fx_token *special_order;
    int32_t n_special_order;

    fx_token special[FX_SPECIAL_COUNT]; /* FX_TOKEN_NULL when the vocabulary has none */
    fx_token *eog;                      /* end-of-generation ids */
    int32_t n_eog;
    bool add_bos, add_eos, add_sep, add_space_prefix;

    /* SentencePiece: the token of each byte (<0xNN>); byte-level BPE: the token of each byte's
     * character in the GPT-2 byte alphabet. FX_TOKEN_NULL where the vocabulary lacks one. */
    fx_token byte_token[256];

    /* SentencePiece: true when no token has "▁" after anything but another "▁", so that no
     * merge can cross the start of a run of spaces and text can be merged run by run (the same
     * result, in far less memory traffic than one queue over a long text). */
    bool spm_chunked;

    /* Byte-level BPE: each token's text decoded back to raw bytes, and an index over them. Tokens
     * whose text is not in the byte alphabet are absent (bytes_len[i] == UINT32_MAX). */
    char *bytes;
    uint32_t *bytes_off, *bytes_len;
    struct fx_tok_index bytes_index;
    struct fx_bpe_merges *merges;
    struct fx_pretok *pretok;
    bool ignore_merges; /* a pre-token that is itself a token skips the merges (Llama 3) */

    /* WordPiece normalizer. */
    bool lowercase, strip_accents;
};

/* The text of token id (valid id). */
static inline const char *fx_vocab_text(const struct fx_vocab *v, fx_token id, size_t *len) {
    *len = v->text_len[id];
    return v->text + v->text_off[id];
}

#endif
