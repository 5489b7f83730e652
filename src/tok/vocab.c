/* Building a vocabulary from its description (struct fx_vocab_spec), and the accessors of the
 * public API. The defaults and fix-ups follow what llama.cpp does with the same GGUF keys, so
 * that a file tokenizes the same in both: per-model default special ids, the add_* flags, the
 * end-of-generation tokens found by their text, and the per-token attributes llama.cpp adjusts. */
#include "tok/vocab.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "core/error.h"
#include "core/log.h"
#include "tok/bpe.h"
#include "tok/pretok.h"
#include "tok/utf8.h"

void fx_vocab_spec_init(struct fx_vocab_spec *spec) {
    *spec = (struct fx_vocab_spec){0};
    for (int i = 0; i < FX_SPECIAL_COUNT; i++)
        spec->special[i] = -1;
    spec->add_bos = spec->add_eos = spec->add_sep = spec->add_space_prefix = -1;
    spec->lowercase = spec->strip_accents = -1;
}

static const char *const special_keys[FX_SPECIAL_COUNT] = {
    "tokenizer.ggml.bos_token_id",     "tokenizer.ggml.eos_token_id",
    "tokenizer.ggml.eot_token_id",     "tokenizer.ggml.eom_token_id",
    "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.seperator_token_id",
    "tokenizer.ggml.padding_token_id", "tokenizer.ggml.mask_token_id",
};

const char *fx_vocab_special_key(enum fx_vocab_special which) {
    return special_keys[which];
}

/* ---- model defaults -------------------------------------------------------------------------- */

static fx_status apply_model(struct fx_vocab *v, const struct fx_vocab_spec *spec,
                             struct fx_error *err) {
    for (int i = 0; i < FX_SPECIAL_COUNT; i++)
        v->special[i] = FX_TOKEN_NULL;
    if (!spec->model)
        return fx_error_set(err, FX_ERR_NOT_FOUND, FX_NO_OFFSET,
                            "tokenizer.ggml.model is missing: the file has no vocabulary");
    if (strcmp(spec->model, "llama") == 0) {
        v->type = FX_VOCAB_SPM;
        v->special[FX_SPECIAL_BOS] = 1;
        v->special[FX_SPECIAL_EOS] = 2;
        v->special[FX_SPECIAL_UNK] = 0;
        v->add_bos = true;
        v->add_space_prefix = true;
    } else if (strcmp(spec->model, "gpt2") == 0) {
        v->type = FX_VOCAB_BPE;
        v->special[FX_SPECIAL_BOS] = 11;
        v->special[FX_SPECIAL_EOS] = 11;
        const char *pre = spec->pre;
        if (!pre) {
            FX_WARN("tokenizer.ggml.pre is missing; using the 'default' pre-tokenizer, which "
                    "may not split text the way the model was trained");
            pre = "default";
        }
        struct fx_pretok_traits traits;
        fx_status st = fx_pretok_create(pre, &v->pretok, &traits, err);
        if (st != FX_OK)
            return st;
        snprintf(v->pre, sizeof v->pre, "%s", pre);
        v->ignore_merges = traits.ignore_merges;
        v->add_bos = traits.add_bos;
    } else if (strcmp(spec->model, "bert") == 0) {
        v->type = FX_VOCAB_WPM;
        v->special[FX_SPECIAL_BOS] = 101; /* [CLS] */
        v->special[FX_SPECIAL_UNK] = 100;
        v->special[FX_SPECIAL_SEP] = 102;
        v->special[FX_SPECIAL_PAD] = 0;
        v->special[FX_SPECIAL_MASK] = 103;
        v->add_bos = v->add_sep = true;
        v->lowercase = v->strip_accents = true;
    } else {
        return fx_error_set(err, FX_ERR_UNSUPPORTED, FX_NO_OFFSET,
                            "tokenizer.ggml.model '%s' is not supported (llama, gpt2, bert)",
                            spec->model);
    }
    return FX_OK;
}

/* Special ids and flags from the file override the model defaults. */
static fx_status apply_keys(struct fx_vocab *v, const struct fx_vocab_spec *spec,
                            struct fx_error *err) {
    for (int i = 0; i < FX_SPECIAL_COUNT; i++) {
        if (v->special[i] >= v->n_tokens)
            v->special[i] = FX_TOKEN_NULL; /* a default outside a small vocabulary */
        int64_t id = spec->special[i];
        if (id < 0)
            continue;
        if (id >= v->n_tokens)
            FX_WARN("%s = %lld is outside the vocabulary of %d tokens; ignored", special_keys[i],
                    (long long)id, v->n_tokens);
        else
            v->special[i] = (fx_token)id;
    }
    if (spec->add_bos >= 0)
        v->add_bos = spec->add_bos;
    if (spec->add_eos >= 0)
        v->add_eos = spec->add_eos;
    if (spec->add_sep >= 0)
        v->add_sep = spec->add_sep;
    if (spec->add_space_prefix >= 0)
        v->add_space_prefix = spec->add_space_prefix;
    if (spec->lowercase >= 0)
        v->lowercase = v->strip_accents = spec->lowercase;
    if (spec->strip_accents >= 0)
        v->strip_accents = spec->strip_accents;
    static const struct {
        const char *flag;
        enum fx_vocab_special id;
    } needs[] = {{"tokenizer.ggml.add_bos_token", FX_SPECIAL_BOS},
                 {"tokenizer.ggml.add_eos_token", FX_SPECIAL_EOS},
                 {"tokenizer.ggml.add_sep_token", FX_SPECIAL_SEP}};
    bool on[] = {v->add_bos, v->add_eos, v->add_sep};
    for (int i = 0; i < 3; i++)
        if (on[i] && v->special[needs[i].id] < 0)
            return fx_error_set(err, FX_ERR_FORMAT, FX_NO_OFFSET, "%s is true, but %s is not set",
                                needs[i].flag, special_keys[needs[i].id]);
    return FX_OK;
}

/* ---- token texts, scores, attributes -----------------------------------------------------------
 */

static uint32_t attr_of_type(int32_t type) {
    switch (type) {
    case 1:
        return FX_TOKEN_ATTR_NORMAL;
    case 2:
        return FX_TOKEN_ATTR_UNKNOWN;
    case 3:
        return FX_TOKEN_ATTR_CONTROL;
    case 4:
        return FX_TOKEN_ATTR_USER_DEFINED;
    case 5:
        return FX_TOKEN_ATTR_UNUSED;
    case 6:
        return FX_TOKEN_ATTR_BYTE;
    default:
        return FX_TOKEN_ATTR_UNDEFINED;
    }
}

static fx_status load_tokens(struct fx_vocab *v, const struct fx_vocab_spec *spec,
                             struct fx_error *err) {
    int32_t n = v->n_tokens;
    /* Empty texts become "[EMPTY_<id>]" (as llama.cpp does): an empty special token would match
     * everywhere, and an empty text cannot be looked up. */
    uint64_t total = 0;
    for (int32_t i = 0; i < n; i++) {
        uint64_t len = spec->tokens[i].len ? spec->tokens[i].len : 20;
        if (len > UINT32_MAX / 2 || fx_add_overflow_u64(total, len + 1, &total) ||
            total > UINT32_MAX)
            return fx_error_set(err, FX_ERR_FORMAT, FX_NO_OFFSET,
                                "tokenizer.ggml.tokens: the texts exceed 4 GiB (token %d)", i);
    }
    v->text = malloc(total);
    v->text_off = malloc((size_t)n * sizeof *v->text_off);
    v->text_len = malloc((size_t)n * sizeof *v->text_len);
    v->score = malloc((size_t)n * sizeof *v->score);
    v->attr = malloc((size_t)n * sizeof *v->attr);
    if (!v->text || !v->text_off || !v->text_len || !v->score || !v->attr)
        return fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "out of memory (%d tokens)", n);
    uint32_t at = 0;
    for (int32_t i = 0; i < n; i++) {
        const struct fx_gguf_str *t = &spec->tokens[i];
        uint32_t len;
        if (t->len == 0) {
            FX_WARN("tokenizer.ggml.tokens[%d] is empty; named [EMPTY_%d]", i, i);
            len = (uint32_t)snprintf(v->text + at, 21, "[EMPTY_%d]", i);
        } else {
            len = (uint32_t)t->len;
            memcpy(v->text + at, t->data, len);
        }
        v->text[at + len] = '\0';
        v->text_off[i] = at;
        v->text_len[i] = len;
        if (len > v->max_text_len)
            v->max_text_len = len;
        at += len + 1;
        v->score[i] = spec->scores ? spec->scores[i] : spec->iscores ? (float)spec->iscores[i] : 0;
        v->attr[i] = spec->types ? attr_of_type(spec->types[i]) : FX_TOKEN_ATTR_NORMAL;
    }
    int32_t a, b;
    if (fx_tok_index_build(&v->text_index, v->text, v->text_off, v->text_len, n, &a, &b) != FX_OK)
        return fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "out of memory (token index)");
    if (a >= 0)
        return fx_error_set(err, FX_ERR_FORMAT, FX_NO_OFFSET,
                            "tokenizer.ggml.tokens: duplicate token '%.64s' has ids %d and %d",
                            v->text + v->text_off[a], a, b);
    return FX_OK;
}

/* ---- end of generation and llama.cpp's attribute fix-ups ------------------------------------- */

static fx_token find_text(const struct fx_vocab *v, const char *s) {
    return fx_tok_index_find(&v->text_index, s, strlen(s));
}

/* Tokens that look like control tokens are made control tokens (a converter that typed them
 * otherwise made a mistake; llama.cpp corrects it the same way). */
static void force_control(struct fx_vocab *v, fx_token id) {
    if (!(v->attr[id] & FX_TOKEN_ATTR_CONTROL)) {
        FX_INFO("token %d '%s' looks like a control token but is not typed so; treating it as "
                "one",
                id, v->text + v->text_off[id]);
        v->attr[id] |= FX_TOKEN_ATTR_CONTROL;
    }
}

static fx_status add_eog(struct fx_vocab *v, fx_token id, struct fx_error *err) {
    if (id < 0)
        return FX_OK;
    for (int32_t i = 0; i < v->n_eog; i++)
        if (v->eog[i] == id)
            return FX_OK;
    fx_token *grown = realloc(v->eog, (size_t)(v->n_eog + 1) * sizeof *grown);
    if (!grown)
        return fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "out of memory (eog list)");
    v->eog = grown;
    v->eog[v->n_eog++] = id;
    return FX_OK;
}

static void remove_eog(struct fx_vocab *v, fx_token id) {
    for (int32_t i = 0; i < v->n_eog; i++)
        if (v->eog[i] == id) {
            v->eog[i] = v->eog[--v->n_eog];
            return;
        }
}

static bool is_eog(const struct fx_vocab *v, fx_token id) {
    for (int32_t i = 0; i < v->n_eog; i++)
        if (v->eog[i] == id)
            return true;
    return false;
}

/* DeepSeek's "<｜end▁of▁sentence｜>" (full-width bars, U+2581 spaces). */
#define DEEPSEEK_EOS                                                                               \
    ("<\xEF\xBD\x9C"                                                                               \
     "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>")

static fx_status find_eog(struct fx_vocab *v, struct fx_error *err) {
    /* The end-of-turn token, when the file does not name one: the first of these it has. */
    static const char *const eot_texts[] = {
        "<|eot_id|>",    "<|im_end|>", "<|end|>",         "<end_of_turn>",
        "<EOT>",         "_<EOT>",     "<|end_of_text|>", "<end_of_utterance>",
        "<|endoftext|>", DEEPSEEK_EOS,
    };
    /* Every token that ends generation besides EOS / EOT / EOM. */
    static const char *const eog_texts[] = {
        "<|eot_id|>",      "<|im_end|>",         "<|end|>",    "<|return|>", "<|call|>",
        "<end_of_turn>",   "<|endoftext|>",      "<|eom_id|>", "<EOT>",      "_<EOT>",
        "<|end_of_text|>", "<end_of_utterance>", DEEPSEEK_EOS,
    };
    fx_status st;
    for (size_t i = 0; v->special[FX_SPECIAL_EOT] < 0 && i < sizeof eot_texts / sizeof *eot_texts;
         i++)
        v->special[FX_SPECIAL_EOT] = find_text(v, eot_texts[i]);
    if (v->special[FX_SPECIAL_EOT] >= 0)
        force_control(v, v->special[FX_SPECIAL_EOT]);
    if (v->special[FX_SPECIAL_EOM] < 0 &&
        (v->special[FX_SPECIAL_EOM] = find_text(v, "<|eom_id|>")) >= 0)
        force_control(v, v->special[FX_SPECIAL_EOM]);
    for (size_t i = 0; i < sizeof eog_texts / sizeof *eog_texts; i++) {
        fx_token id = find_text(v, eog_texts[i]);
        if (id < 0)
            continue;
        force_control(v, id);
        if ((st = add_eog(v, id, err)) != FX_OK)
            return st;
    }
    /* gpt-oss (harmony) structure tokens are rendered and matched in text like user-defined
     * ones, so that the chat layer sees them. */
    static const char *const harmony[] = {"<|channel|>", "<|message|>", "<|start|>",
                                          "<|constrain|>"};
    for (size_t i = 0; i < sizeof harmony / sizeof *harmony; i++) {
        fx_token id = find_text(v, harmony[i]);
        if (id >= 0)
            v->attr[id] = FX_TOKEN_ATTR_USER_DEFINED;
    }
    if ((st = add_eog(v, v->special[FX_SPECIAL_EOS], err)) != FX_OK ||
        (st = add_eog(v, v->special[FX_SPECIAL_EOT], err)) != FX_OK ||
        (st = add_eog(v, v->special[FX_SPECIAL_EOM], err)) != FX_OK)
        return st;
    /* In harmony, <|end|> ends a message but not the turn when <|return|> and <|call|> exist. */
    fx_token end = find_text(v, "<|end|>"), ret = find_text(v, "<|return|>"),
             call = find_text(v, "<|call|>");
    if (end >= 0 && is_eog(v, end) && ret >= 0 && is_eog(v, ret) && call >= 0 && is_eog(v, call)) {
        remove_eog(v, end);
        v->attr[end] = FX_TOKEN_ATTR_USER_DEFINED;
    }
    return FX_OK;
}

static int by_length_desc(const void *pa, const void *pb, void *pv) {
    const struct fx_vocab *v = pv;
    fx_token a = *(const fx_token *)pa, b = *(const fx_token *)pb;
    if (v->text_len[a] != v->text_len[b])
        return v->text_len[a] > v->text_len[b] ? -1 : 1;
    return a < b ? -1 : a > b;
}

static fx_status order_specials(struct fx_vocab *v, struct fx_error *err) {
    const uint32_t special =
        FX_TOKEN_ATTR_CONTROL | FX_TOKEN_ATTR_USER_DEFINED | FX_TOKEN_ATTR_UNKNOWN;
    int32_t n = 0;
    for (int32_t i = 0; i < v->n_tokens; i++)
        n += (v->attr[i] & special) != 0;
    v->special_order = malloc((size_t)(n ? n : 1) * sizeof *v->special_order);
    if (!v->special_order)
        return fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "out of memory (special tokens)");
    for (int32_t i = 0; i < v->n_tokens; i++)
        if (v->attr[i] & special)
            v->special_order[v->n_special_order++] = i;
    qsort_r(v->special_order, (size_t)n, sizeof *v->special_order, by_length_desc, v);
    return FX_OK;
}

/* Phi-3's special tokens swallow the white space after them (its tokenizer config says
 * rstrip), except <unk>, <s> and <|endoftext|>; llama.cpp recognises the model by name. */
static void phi3_strip(struct fx_vocab *v, const char *name) {
    char lower[128];
    size_t n = 0;
    for (; name && name[n] && n + 1 < sizeof lower; n++)
        lower[n] = (char)tolower((unsigned char)name[n]);
    lower[n] = '\0';
    if (!strstr(lower, "phi-3") && !strstr(lower, "phi3"))
        return;
    for (int32_t i = 0; i < v->n_special_order; i++)
        v->attr[v->special_order[i]] |= FX_TOKEN_ATTR_RSTRIP;
    fx_token id;
    if ((id = find_text(v, "</s>")) >= 0)
        v->attr[id] |= FX_TOKEN_ATTR_RSTRIP;
    static const char *const keep[] = {"<unk>", "<s>", "<|endoftext|>"};
    for (size_t i = 0; i < 3; i++)
        if ((id = find_text(v, keep[i])) >= 0)
            v->attr[id] &= ~(uint32_t)FX_TOKEN_ATTR_RSTRIP;
}

/* ---- bytes and pieces ------------------------------------------------------------------------ */

static void find_byte_tokens(struct fx_vocab *v) {
    for (int b = 0; b < 256; b++) {
        char buf[8];
        fx_token id = FX_TOKEN_NULL;
        if (v->type == FX_VOCAB_SPM) {
            snprintf(buf, sizeof buf, "<0x%02X>", b);
            id = find_text(v, buf);
            if (id < 0) /* a vocabulary without byte tokens may still have the byte itself */
                id = fx_tok_index_find(&v->text_index, (const char *)&(char){(char)b}, 1);
        } else if (v->type == FX_VOCAB_BPE) {
            size_t n = fx_utf8_encode(fx_bpe_byte_to_cp((uint8_t)b), buf);
            id = fx_tok_index_find(&v->text_index, buf, n);
        }
        v->byte_token[b] = id;
    }
}

/* Whether any token has "▁" (U+2581) somewhere other than at its start or after another "▁"
 * (see fx_vocab.spm_chunked). */
static bool spaces_only_lead(const struct fx_vocab *v) {
    static const char mark[3] = {'\xE2', '\x96', '\x81'};
    for (int32_t i = 0; i < v->n_tokens; i++) {
        size_t n;
        const char *t = fx_vocab_text(v, i, &n);
        for (size_t p = 1; p + 3 <= n; p++)
            if (memcmp(t + p, mark, 3) == 0 && (p < 3 || memcmp(t + p - 3, mark, 3) != 0))
                return false;
    }
    return true;
}

/* The byte of a <0xNN> token, or -1 when the text has another form. */
static int hex_byte(const char *t, size_t n) {
    if (n != 6 || memcmp(t, "<0x", 3) != 0 || t[5] != '>' || !isxdigit((unsigned char)t[3]) ||
        !isxdigit((unsigned char)t[4]))
        return -1;
    char hex[3] = {t[3], t[4], 0};
    return (int)strtol(hex, NULL, 16);
}

/* Writes what token id decodes to (special tokens rendered) at out; returns the length. The
 * output is never longer than the text (decoding only shrinks it), so out needs text_len bytes. */
static size_t render(const struct fx_vocab *v, fx_token id, char *out) {
    size_t n;
    const char *t = fx_vocab_text(v, id, &n);
    uint32_t attr = v->attr[id];
    if (attr & (FX_TOKEN_ATTR_CONTROL | FX_TOKEN_ATTR_UNKNOWN | FX_TOKEN_ATTR_USER_DEFINED)) {
        memcpy(out, t, n);
        return n;
    }
    if (attr & FX_TOKEN_ATTR_NORMAL) {
        if (v->type == FX_VOCAB_BPE) {
            /* Characters outside the byte alphabet (some converters leave raw UTF-8) pass as
             * they are. */
            size_t k = 0;
            for (size_t at = 0; at < n;) {
                uint32_t cp;
                size_t step = fx_utf8_decode((const uint8_t *)t + at, n - at, &cp);
                int b = cp == 0xFFFD ? -1 : fx_bpe_cp_to_byte(cp);
                if (b >= 0)
                    out[k++] = (char)b;
                else
                    memcpy(out + k, t + at, step), k += step;
                at += step;
            }
            return k;
        }
        size_t k = 0; /* SentencePiece and WordPiece: U+2581 stands for a space */
        for (size_t at = 0; at < n;) {
            if (n - at >= 3 && memcmp(t + at, "\xE2\x96\x81", 3) == 0) {
                out[k++] = ' ';
                at += 3;
            } else {
                out[k++] = t[at++];
            }
        }
        return k;
    }
    if (attr & FX_TOKEN_ATTR_BYTE) {
        int b = hex_byte(t, n);
        if (b >= 0) {
            out[0] = (char)b;
            return 1;
        }
    }
    return 0; /* undefined and unused tokens render as nothing */
}

static fx_status build_pieces(struct fx_vocab *v, struct fx_error *err) {
    size_t total = 0;
    for (int32_t i = 0; i < v->n_tokens; i++)
        total += v->text_len[i];
    v->piece = malloc(total + 1);
    v->piece_off = malloc((size_t)v->n_tokens * sizeof *v->piece_off);
    v->piece_len = malloc((size_t)v->n_tokens * sizeof *v->piece_len);
    if (!v->piece || !v->piece_off || !v->piece_len)
        return fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "out of memory (token pieces)");
    uint32_t at = 0;
    for (int32_t i = 0; i < v->n_tokens; i++) {
        uint32_t n = (uint32_t)render(v, i, v->piece + at);
        v->piece_off[i] = at;
        v->piece_len[i] = n;
        if (n > v->max_piece_len)
            v->max_piece_len = n;
        at += n;
    }
    return FX_OK;
}

/* Byte-level BPE: every token text decoded back to bytes, indexed (for ignore_merges). */
static fx_status build_bytes(struct fx_vocab *v, struct fx_error *err) {
    size_t total = 0;
    for (int32_t i = 0; i < v->n_tokens; i++)
        total += v->text_len[i];
    v->bytes = malloc(total + 1);
    v->bytes_off = malloc((size_t)v->n_tokens * sizeof *v->bytes_off);
    v->bytes_len = malloc((size_t)v->n_tokens * sizeof *v->bytes_len);
    if (!v->bytes || !v->bytes_off || !v->bytes_len)
        return fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "out of memory (token bytes)");
    uint32_t at = 0;
    for (int32_t i = 0; i < v->n_tokens; i++) {
        size_t n;
        const char *t = fx_vocab_text(v, i, &n);
        int64_t k = fx_bpe_decode_text(t, n, v->bytes + at);
        v->bytes_off[i] = at;
        v->bytes_len[i] = k < 0 ? UINT32_MAX : (uint32_t)k;
        at += k < 0 ? 0 : (uint32_t)k;
    }
    int32_t a, b; /* the byte alphabet is a bijection, so decoded texts cannot collide */
    if (fx_tok_index_build(&v->bytes_index, v->bytes, v->bytes_off, v->bytes_len, v->n_tokens, &a,
                           &b) != FX_OK)
        return fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "out of memory (token bytes index)");
    return FX_OK;
}

/* ---- build and free -------------------------------------------------------------------------- */

static fx_status build(struct fx_vocab *v, const struct fx_vocab_spec *spec, struct fx_error *err) {
    if (spec->n_tokens == 0 || spec->n_tokens >= INT32_MAX || !spec->tokens)
        return fx_error_set(err, FX_ERR_FORMAT, FX_NO_OFFSET,
                            "tokenizer.ggml.tokens: %llu tokens is not a vocabulary size",
                            (unsigned long long)spec->n_tokens);
    v->n_tokens = (int32_t)spec->n_tokens;
    fx_status st;
    if ((st = apply_model(v, spec, err)) != FX_OK || (st = apply_keys(v, spec, err)) != FX_OK ||
        (st = load_tokens(v, spec, err)) != FX_OK || (st = find_eog(v, err)) != FX_OK ||
        (st = order_specials(v, err)) != FX_OK)
        return st;
    phi3_strip(v, spec->name);
    find_byte_tokens(v);
    v->spm_chunked = v->type == FX_VOCAB_SPM && spaces_only_lead(v);
    if ((st = build_pieces(v, err)) != FX_OK)
        return st;
    if (v->type == FX_VOCAB_BPE) {
        if (!spec->merges)
            return fx_error_set(err, FX_ERR_NOT_FOUND, FX_NO_OFFSET,
                                "tokenizer.ggml.merges is missing (needed by gpt2 vocabularies)");
        if ((st = build_bytes(v, err)) != FX_OK ||
            (st = fx_bpe_merges_build(v, spec->merges, spec->n_merges, &v->merges, err)) != FX_OK)
            return st;
    }
    return FX_OK;
}

fx_status fx_vocab_build(const struct fx_vocab_spec *spec, struct fx_vocab **out,
                         struct fx_error *err) {
    *out = NULL;
    struct fx_vocab *v = calloc(1, sizeof *v);
    if (!v)
        return fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "out of memory (vocabulary)");
    fx_status st = build(v, spec, err);
    if (st != FX_OK) {
        fx_vocab_free(v);
        return st;
    }
    *out = v;
    return FX_OK;
}

void fx_vocab_free(struct fx_vocab *v) {
    if (!v)
        return;
    free(v->text);
    free(v->text_off);
    free(v->text_len);
    free(v->score);
    free(v->attr);
    fx_tok_index_free(&v->text_index);
    free(v->piece);
    free(v->piece_off);
    free(v->piece_len);
    free(v->special_order);
    free(v->eog);
    free(v->bytes);
    free(v->bytes_off);
    free(v->bytes_len);
    fx_tok_index_free(&v->bytes_index);
    fx_bpe_merges_free(v->merges);
    fx_pretok_free(v->pretok);
    free(v);
}

/* ---- accessors ------------------------------------------------------------------------------- */

static bool valid(const struct fx_vocab *v, fx_token id) {
    return v && id >= 0 && id < v->n_tokens;
}

enum fx_vocab_type fx_vocab_type(const struct fx_vocab *v) {
    return v->type;
}

const char *fx_vocab_pre(const struct fx_vocab *v) {
    return v->pre;
}

int32_t fx_vocab_n_tokens(const struct fx_vocab *v) {
    return v->n_tokens;
}

fx_token fx_vocab_bos(const struct fx_vocab *v) {
    return v->special[FX_SPECIAL_BOS];
}

fx_token fx_vocab_eos(const struct fx_vocab *v) {
    return v->special[FX_SPECIAL_EOS];
}

fx_token fx_vocab_eot(const struct fx_vocab *v) {
    return v->special[FX_SPECIAL_EOT];
}

fx_token fx_vocab_unk(const struct fx_vocab *v) {
    return v->special[FX_SPECIAL_UNK];
}

fx_token fx_vocab_sep(const struct fx_vocab *v) {
    return v->special[FX_SPECIAL_SEP];
}

fx_token fx_vocab_pad(const struct fx_vocab *v) {
    return v->special[FX_SPECIAL_PAD];
}

bool fx_vocab_add_bos(const struct fx_vocab *v) {
    return v->add_bos;
}

bool fx_vocab_add_eos(const struct fx_vocab *v) {
    return v->add_eos;
}

bool fx_vocab_is_eog(const struct fx_vocab *v, fx_token id) {
    return valid(v, id) && is_eog(v, id);
}

uint32_t fx_vocab_token_attr(const struct fx_vocab *v, fx_token id) {
    return valid(v, id) ? v->attr[id] : 0;
}

float fx_vocab_token_score(const struct fx_vocab *v, fx_token id) {
    return valid(v, id) ? v->score[id] : 0.0f;
}

const char *fx_vocab_token_text(const struct fx_vocab *v, fx_token id, size_t *len) {
    if (!valid(v, id)) {
        *len = 0;
        return NULL;
    }
    return fx_vocab_text(v, id, len);
}

fx_token fx_vocab_find_token(const struct fx_vocab *v, const char *text, size_t len) {
    return text ? fx_tok_index_find(&v->text_index, text, len) : FX_TOKEN_NULL;
}
