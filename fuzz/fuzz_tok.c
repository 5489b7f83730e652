/* libFuzzer target for the tokenizers: arbitrary bytes (invalid UTF-8 included) to encode, and
 * arbitrary ids (invalid ones included) to decode, over several real vocabularies read from
 * FERROX_FIXTURES (default ../shared/fixtures).
 *
 *   make fuzz && build/fuzz/fuzz_tok -max_total_time=600 fuzz/corpus-tok
 *
 * Input: byte 0 picks the vocabulary, byte 1 the mode and flags, the rest is text or ids.
 * Checked beyond "no crash, no sanitizer report": every id is in the vocabulary; byte-level BPE
 * and SentencePiece decode their output back to the input where they are lossless; the
 * streaming detokenizer hands out exactly what fx_detokenize returns; bad ids are refused. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ferrox.h"
#include "tok/vocab.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const files[] = {
    "tokenizer/ggml-vocab-llama-spm.gguf",    "tokenizer/ggml-vocab-gpt-2-pre-llama3.gguf",
    "tokenizer/ggml-vocab-deepseek-llm.gguf", "tokenizer/ggml-vocab-bert-bge.gguf",
    "tokenizer/ggml-vocab-phi-3.gguf",        "tokenizer/ggml-vocab-falcon.gguf",
    "tokenizer/ggml-vocab-mpt.gguf",          "tokenizer/ggml-vocab-deepseek-coder.gguf",
};
#define N_VOCABS (sizeof files / sizeof files[0])
static struct fx_vocab *vocabs[N_VOCABS];

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_tok: check failed: %s (line %d)\n", #cond, __LINE__);            \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    const char *dir = getenv("FERROX_FIXTURES");
    if (!dir || !*dir)
        dir = "../shared/fixtures";
    for (size_t i = 0; i < N_VOCABS; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        struct fx_error err = {0};
        if (fx_vocab_load_file(path, &vocabs[i], &err) != FX_OK) {
            fprintf(stderr, "fuzz_tok: %s (set FERROX_FIXTURES)\n", err.msg);
            exit(1);
        }
    }
    return 0;
}

/* Decoding ids[0..n) in one go and through the stream must give the same bytes. */
static void check_decoders(const struct fx_vocab *v, const fx_token *ids, size_t n,
                           unsigned flags) {
    size_t cap = 16 + n * ((size_t)v->max_piece_len + 1), len = 0, streamed = 0;
    char *whole = malloc(cap), *out = malloc(cap);
    CHECK(whole && out);
    struct fx_error err = {0};
    fx_status st = fx_detokenize(v, ids, n, flags, whole, cap, &len, &err);
    bool valid = true;
    for (size_t i = 0; i < n; i++)
        valid = valid && ids[i] >= 0 && ids[i] < fx_vocab_n_tokens(v);
    if (!valid) {
        CHECK(st == FX_ERR_INVALID_ARG);
        free(whole);
        free(out);
        return;
    }
    CHECK(st == FX_OK);
    struct fx_detok_stream *s;
    CHECK(fx_detok_stream_create(v, flags & ~(unsigned)FX_DETOK_REMOVE_SPECIAL, &s, &err) == FX_OK);
    for (size_t i = 0; i <= n; i++) {
        const char *t;
        size_t k;
        if (i < n)
            CHECK(fx_detok_stream_push(s, ids[i], &t, &k, &err) == FX_OK);
        else
            fx_detok_stream_flush(s, &t, &k);
        CHECK(streamed + k <= cap);
        memcpy(out + streamed, t, k);
        streamed += k;
    }
    fx_detok_stream_free(s);
    if (!(flags & FX_DETOK_REMOVE_SPECIAL)) {
        CHECK(streamed == len);
        CHECK(memcmp(out, whole, len) == 0);
    }
    free(whole);
    free(out);
}

static void encode(const struct fx_vocab *v, const char *text, size_t len, unsigned mode) {
    bool add_special = mode & 2, parse_special = mode & 4;
    size_t cap = 2 * len + 8, n = 0;
    fx_token *ids = malloc(cap * sizeof *ids);
    CHECK(ids);
    struct fx_error err = {0};
    fx_status st = fx_tokenize(v, text, len, add_special, parse_special, ids, cap, &n, &err);
    CHECK(st == FX_OK); /* 2 * len + 8 always suffices */
    bool plain = true;  /* no special token came out */
    for (size_t i = 0; i < n; i++) {
        CHECK(ids[i] >= 0 && ids[i] < fx_vocab_n_tokens(v));
        plain = plain &&
                !(fx_vocab_token_attr(v, ids[i]) &
                  (FX_TOKEN_ATTR_CONTROL | FX_TOKEN_ATTR_USER_DEFINED | FX_TOKEN_ATTR_UNKNOWN));
    }
    /* Byte-level BPE keeps every byte its vocabulary can spell (some lack bytes that valid UTF-8
     * never has, and Falcon some control bytes: those are dropped, as llama.cpp drops them);
     * SentencePiece too, except that it writes spaces as U+2581 and so cannot tell the two
     * apart, and that special tokens change its prefix spaces. */
    bool spellable = true;
    for (size_t i = 0; i < len; i++)
        spellable = spellable && v->byte_token[(uint8_t)text[i]] >= 0;
    enum fx_vocab_type type = fx_vocab_type(v);
    bool lossless =
        !add_special && plain && spellable &&
        (type == FX_VOCAB_BPE || (type == FX_VOCAB_SPM && !memmem(text, len, "\xE2\x96\x81", 3)));
    if (lossless) {
        char *back = malloc(len + 1);
        size_t back_len;
        CHECK(back);
        CHECK(fx_detokenize(v, ids, n, 0, back, len + 1, &back_len, &err) == FX_OK);
        CHECK(back_len == len && memcmp(back, text, len) == 0);
        free(back);
    }
    check_decoders(v, ids, n, (mode >> 3) & 3);
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2)
        return 0;
    const struct fx_vocab *v = vocabs[data[0] % N_VOCABS];
    unsigned mode = data[1];
    data += 2, size -= 2;
    if (!(mode & 1)) {
        encode(v, (const char *)data, size, mode);
        return 0;
    }
    /* Ids: little-endian 16-bit values spread over the vocabulary plus a few invalid ones. */
    size_t n = size / 2;
    fx_token *ids = malloc((n ? n : 1) * sizeof *ids);
    CHECK(ids);
    int32_t span = fx_vocab_n_tokens(v) + 4;
    for (size_t i = 0; i < n; i++) {
        uint32_t raw = (uint32_t)data[2 * i] | (uint32_t)data[2 * i + 1] << 8;
        ids[i] = (fx_token)((raw * 2654435761u) % (uint32_t)span) - 2;
    }
    check_decoders(v, ids, n, (mode >> 1) & 7);
    free(ids);
    return 0;
}
