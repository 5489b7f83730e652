/* tok/: the algorithms on small vocabularies built in memory, where the expected ids follow from
 * the rules by hand: SentencePiece merges by score with byte fallback, byte-level BPE by merge
 * rank (and ignore_merges), WordPiece, special-token splitting, BOS/EOS, and the vocabulary
 * checks. The real vocabularies are in test_tok_fixtures.c. */
#include "fx_test.h"

#include <stdlib.h>
#include <string.h>

#include "ferrox.h"
#include "tok/utf8.h"
#include "tok/vocab.h"

#define SP "\xE2\x96\x81" /* U+2581, SentencePiece's space */

/* A vocabulary under construction: texts, scores and types in parallel arrays. */
struct vb {
    struct fx_gguf_str tok[600];
    char text[600][16];
    float score[600];
    int32_t type[600];
    int n;
};

static fx_token vb_add(struct vb *b, const char *text, float score, int32_t type) {
    assert_true(b->n < 600);
    snprintf(b->text[b->n], sizeof b->text[0], "%s", text);
    b->tok[b->n] = (struct fx_gguf_str){b->text[b->n], strlen(text)};
    b->score[b->n] = score;
    b->type[b->n] = type;
    return b->n++;
}

static struct fx_vocab *vb_build(struct vb *b, struct fx_vocab_spec *spec) {
    spec->n_tokens = (uint64_t)b->n;
    spec->tokens = b->tok;
    spec->scores = b->score;
    spec->types = b->type;
    struct fx_vocab *v = NULL;
    struct fx_error err = {0};
    if (fx_vocab_build(spec, &v, &err) != FX_OK)
        fail_msg("fx_vocab_build: %s", err.msg);
    return v;
}

/* Tokenizes and compares with the expected ids (terminated by -2). */
static void expect_ids(const struct fx_vocab *v, const char *text, bool add_special,
                       bool parse_special, const fx_token *want) {
    fx_token got[256];
    size_t n;
    struct fx_error err = {0};
    if (fx_tokenize(v, text, strlen(text), add_special, parse_special, got, 256, &n, &err) != FX_OK)
        fail_msg("fx_tokenize('%s'): %s", text, err.msg);
    size_t nw = 0;
    while (want[nw] != -2)
        nw++;
    for (size_t i = 0; i < n && i < nw; i++)
        if (got[i] != want[i])
            fail_msg("'%s': token %zu is %d, expected %d", text, i, got[i], want[i]);
    if (n != nw)
        fail_msg("'%s': %zu tokens, expected %zu", text, n, nw);
}

static void expect_text(const struct fx_vocab *v, const fx_token *ids, size_t n, unsigned flags,
                        const char *want) {
    char buf[512];
    size_t len;
    struct fx_error err = {0};
    if (fx_detokenize(v, ids, n, flags, buf, sizeof buf, &len, &err) != FX_OK)
        fail_msg("fx_detokenize: %s", err.msg);
    assert_int_equal(len, strlen(want));
    assert_memory_equal(buf, want, len);
}

/* ---- SentencePiece ----------------------------------------------------------------------------
 */

struct spm_ids {
    fx_token sp, a, b, c, sp_a, ab, bc, sp_ab, im_start, tool, user;
};

/* <unk> <s> </s>, the 256 byte tokens, then a few pieces whose scores decide the merges:
 * "bc" is the best pair, then "▁ab", then "▁a", then "ab". */
static struct fx_vocab *spm_vocab(struct vb *b, struct spm_ids *id, const char *name) {
    memset(b, 0, sizeof *b);
    vb_add(b, "<unk>", 0, 2);
    vb_add(b, "<s>", 0, 3);
    vb_add(b, "</s>", 0, 3);
    for (int i = 0; i < 256; i++) {
        char t[8];
        snprintf(t, sizeof t, "<0x%02X>", i);
        vb_add(b, t, 0, 6);
    }
    id->sp = vb_add(b, SP, -1.0f, 1);
    id->a = vb_add(b, "a", -2.0f, 1);
    id->b = vb_add(b, "b", -3.0f, 1);
    id->c = vb_add(b, "c", -4.0f, 1);
    id->sp_a = vb_add(b, SP "a", -1.2f, 1);
    id->ab = vb_add(b, "ab", -1.5f, 1);
    id->bc = vb_add(b, "bc", -0.1f, 1);
    id->sp_ab = vb_add(b, SP "ab", -0.5f, 1);
    id->im_start = vb_add(b, "<|im_start|>", 0, 3);
    id->tool = vb_add(b, "<tool>", 0, 4);
    id->user = vb_add(b, "<|user|>", 0, 3);
    struct fx_vocab_spec spec;
    fx_vocab_spec_init(&spec);
    spec.model = "llama";
    spec.name = name;
    return vb_build(b, &spec);
}

FX_TEST(tok_spm_merges_by_score_with_byte_fallback) {
    struct vb *b = calloc(1, sizeof *b);
    struct spm_ids id;
    struct fx_vocab *v = spm_vocab(b, &id, NULL);
    /* "▁abc": "bc" (-0.1) merges first, then "▁a" (-1.2); "▁ab" (-0.5) never forms because "b"
     * is gone by then, and "▁a"+"bc" is no token. */
    expect_ids(v, "abc", false, false, (fx_token[]){id.sp_a, id.bc, -2});
    /* "▁ab": "▁a" (-1.2) beats "ab" (-1.5), then "▁a" + "b" forms "▁ab". */
    expect_ids(v, "ab", false, false, (fx_token[]){id.sp_ab, -2});
    /* A character the vocabulary lacks is spelled with its UTF-8 bytes. */
    expect_ids(v, "a\xC3\xA9", false, false, (fx_token[]){id.sp_a, 3 + 0xC3, 3 + 0xA9, -2});
    /* Invalid UTF-8 too, byte by byte; an invalid lead byte does not swallow the space after
     * it (a fuzzer finding: sized by its lead byte, "\xF0" took the "▁" along). */
    expect_ids(v, "\xFF", false, false, (fx_token[]){id.sp, 3 + 0xFF, -2});
    expect_ids(v, "\xF0 a", false, false, (fx_token[]){id.sp, 3 + 0xF0, id.sp_a, -2});
    expect_text(v, (fx_token[]){id.sp, 3 + 0xF0, id.sp_a}, 3, 0, "\xF0 a");
    /* BOS as the vocabulary says (add_bos defaults to true for "llama"), never EOS. */
    expect_ids(v, "c", true, false, (fx_token[]){1, id.sp, id.c, -2});
    expect_ids(v, "", true, false, (fx_token[]){1, -2});
    expect_ids(v, "", false, false, (fx_token[]){-2});
    /* Spaces are "▁"; the prefix space is added once. */
    expect_ids(v, " a", false, false, (fx_token[]){id.sp, id.sp_a, -2});

    /* Decoding drops the prefix space unless the ids continue earlier text; byte tokens
     * reassemble the character. */
    fx_token ids[] = {id.sp_a, id.bc, 3 + 0xC3, 3 + 0xA9};
    expect_text(v, ids, 4, 0, "abc\xC3\xA9");
    expect_text(v, ids, 4, FX_DETOK_CONTINUE, " abc\xC3\xA9");
    /* A leading BOS renders as nothing and takes the strip with it (llama.cpp's rule). */
    fx_token with_bos[] = {1, id.sp_a, 2};
    expect_text(v, with_bos, 3, 0, " a");
    expect_text(v, with_bos, 3, FX_DETOK_RENDER_SPECIAL, "<s> a</s>");
    expect_text(v, with_bos, 3, FX_DETOK_REMOVE_SPECIAL, " a");
    fx_vocab_free(v);
    free(b);
}

FX_TEST(tok_spm_special_tokens_split_text) {
    struct vb *b = calloc(1, sizeof *b);
    struct spm_ids id;
    struct fx_vocab *v = spm_vocab(b, &id, NULL);
    /* Parsed: each special token is one id and the text after it gets its prefix space again. */
    expect_ids(v, "ab<|im_start|>c<tool>bc", false, true,
               (fx_token[]){id.sp_ab, id.im_start, id.sp, id.c, id.tool, id.sp, id.bc, -2});
    /* Not parsed: control-token text is plain text (here: bytes and pieces), but user-defined
     * tokens are still recognised, like llama.cpp and Hugging Face do. */
    fx_token got[64];
    size_t n;
    struct fx_error err = {0};
    const char *text = "<|im_start|>c<tool>";
    assert_int_equal(fx_tokenize(v, text, strlen(text), false, false, got, 64, &n, &err), FX_OK);
    assert_true(n > 3);
    for (size_t i = 0; i < n; i++)
        assert_int_not_equal(got[i], id.im_start);
    assert_int_equal(got[n - 1], id.tool);
    /* ... and decode back to the text. */
    expect_text(v, got, n, 0, "<|im_start|>c<tool>");
    fx_vocab_free(v);
    free(b);
}

FX_TEST(tok_spm_phi3_special_tokens_swallow_following_space) {
    struct vb *b = calloc(1, sizeof *b);
    struct spm_ids id;
    struct fx_vocab *plain = spm_vocab(b, &id, "TinyModel");
    expect_ids(plain, "<|user|> a", false, true, (fx_token[]){id.user, id.sp, id.sp_a, -2});
    fx_vocab_free(plain);
    struct fx_vocab *phi3 = spm_vocab(b, &id, "Phi-3 mini 4k instruct");
    assert_true(fx_vocab_token_attr(phi3, id.user) & FX_TOKEN_ATTR_RSTRIP);
    assert_false(fx_vocab_token_attr(phi3, 1) & FX_TOKEN_ATTR_RSTRIP); /* <s> keeps its space */
    expect_ids(phi3, "<|user|> a", false, true, (fx_token[]){id.user, id.sp_a, -2});
    fx_vocab_free(phi3);
    free(b);
}

FX_TEST(tok_spm_chunked_merging_equals_whole_text) {
    /* Merging run by run (spm_chunked) must give what one queue over the whole text gives. */
    struct vb *b = calloc(1, sizeof *b);
    struct spm_ids id;
    struct fx_vocab *v = spm_vocab(b, &id, NULL);
    assert_true(v->spm_chunked);
    static const char alphabet[] = "abc  \xC3\xA9\xE2\x96\x81\xFF";
    struct fx_test_rng rng = {42};
    for (int round = 0; round < 200; round++) {
        char text[80];
        size_t len = fx_test_rng_u64(&rng) % sizeof text;
        for (size_t i = 0; i < len; i++)
            text[i] = alphabet[fx_test_rng_u64(&rng) % (sizeof alphabet - 1)];
        fx_token x[512], y[512];
        size_t nx, ny;
        struct fx_error err = {0};
        v->spm_chunked = true;
        assert_int_equal(fx_tokenize(v, text, len, false, false, x, 512, &nx, &err), FX_OK);
        v->spm_chunked = false;
        assert_int_equal(fx_tokenize(v, text, len, false, false, y, 512, &ny, &err), FX_OK);
        assert_int_equal(nx, ny);
        assert_memory_equal(x, y, nx * sizeof *x);
    }
    fx_vocab_free(v);
    free(b);
}

/* ---- byte-level BPE ----------------------------------------------------------------------------
 */

/* GPT-2's byte alphabet, as its published bytes_to_unicode() builds it: printable bytes map to
 * themselves, the rest to 256, 257, ... in byte order. */
static uint32_t gpt2_char(int byte) {
    int next = 256;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        uint32_t cp = printable ? (uint32_t)b : (uint32_t)next++;
        if (b == byte)
            return cp;
    }
    return 0;
}

struct bpe_ids {
    fx_token h, e, l, o, g; /* g: the space character Ġ */
    fx_token el, ll, gh, hello, eot;
};

/* 256 byte tokens, a few merged tokens, and merge rules in the given order. */
static struct fx_vocab *bpe_vocab(struct vb *b, struct bpe_ids *id, const char *pre,
                                  const char *const *rules, int n_rules) {
    memset(b, 0, sizeof *b);
    for (int i = 0; i < 256; i++) {
        char t[8] = {0};
        fx_utf8_encode(gpt2_char(i), t);
        vb_add(b, t, 0, 1);
    }
    id->h = 'h', id->e = 'e', id->l = 'l', id->o = 'o', id->g = ' ';
    id->el = vb_add(b, "el", 0, 1);
    id->ll = vb_add(b, "ll", 0, 1);
    id->gh = vb_add(b, "\xC4\xA0h", 0, 1); /* "Ġh" */
    id->hello = vb_add(b, "hello", 0, 1);
    id->eot = vb_add(b, "<|endoftext|>", 0, 3);
    static struct fx_gguf_str merges[8];
    for (int i = 0; i < n_rules; i++)
        merges[i] = (struct fx_gguf_str){rules[i], strlen(rules[i])};
    struct fx_vocab_spec spec;
    fx_vocab_spec_init(&spec);
    spec.model = "gpt2";
    spec.pre = pre;
    spec.merges = merges;
    spec.n_merges = (uint64_t)n_rules;
    spec.special[FX_SPECIAL_EOS] = id->eot;
    spec.special[FX_SPECIAL_BOS] = id->eot;
    return vb_build(b, &spec);
}

FX_TEST(tok_bpe_merges_by_rank) {
    struct vb *b = calloc(1, sizeof *b);
    struct bpe_ids id;
    /* "e l" ranks before "l l": hello -> h el l o. */
    static const char *const el_first[] = {"e l", "l l", "\xC4\xA0 h"};
    struct fx_vocab *v = bpe_vocab(b, &id, "gpt-2", el_first, 3);
    expect_ids(v, "hello", false, false, (fx_token[]){id.h, id.el, id.l, id.o, -2});
    /* The space belongs to the word after it (the pre-tokenizer), then merges with "h". */
    expect_ids(v, "hello hello", false, false,
               (fx_token[]){id.h, id.el, id.l, id.o, id.gh, id.el, id.l, id.o, -2});
    expect_text(v, (fx_token[]){id.gh, id.el, id.l, id.o}, 4, 0, " hello");
    /* gpt-2 adds no BOS by default. */
    expect_ids(v, "o", true, false, (fx_token[]){id.o, -2});
    /* Every byte has a token, valid UTF-8 or not. */
    expect_ids(v, "\xFF\x01", false, false, (fx_token[]){0xFF, 0x01, -2});
    fx_vocab_free(v);

    /* "l l" first: h e ll o. */
    static const char *const ll_first[] = {"l l", "e l"};
    v = bpe_vocab(b, &id, "gpt-2", ll_first, 2);
    expect_ids(v, "hello", false, false, (fx_token[]){id.h, id.e, id.ll, id.o, -2});
    fx_vocab_free(v);
    free(b);
}

FX_TEST(tok_bpe_ignore_merges_takes_whole_words) {
    struct vb *b = calloc(1, sizeof *b);
    struct bpe_ids id;
    static const char *const rules[] = {"e l", "l l"};
    /* Llama 3 (llama-bpe): a word that is a token is that token, merges or not; it also adds
     * BOS by default. */
    struct fx_vocab *v = bpe_vocab(b, &id, "llama-bpe", rules, 2);
    assert_string_equal(fx_vocab_pre(v), "llama-bpe");
    expect_ids(v, "hello", false, false, (fx_token[]){id.hello, -2});
    expect_ids(v, "hello", true, false, (fx_token[]){id.eot, id.hello, -2});
    fx_vocab_free(v);
    /* Qwen 2 has the same words but merges them. */
    v = bpe_vocab(b, &id, "qwen2", rules, 2);
    expect_ids(v, "hello", false, false, (fx_token[]){id.h, id.el, id.l, id.o, -2});
    fx_vocab_free(v);
    free(b);
}

FX_TEST(tok_bpe_pre_tokenizer_names) {
    struct vb *b = calloc(1, sizeof *b);
    struct bpe_ids id;
    static const char *const rules[] = {"e l"};
    /* Synonyms llama.cpp accepts for Llama 3. */
    static const char *const llama3[] = {"llama3", "llama-v3", "llama-bpe"};
    for (int i = 0; i < 3; i++) {
        struct fx_vocab *v = bpe_vocab(b, &id, llama3[i], rules, 1);
        expect_ids(v, "hello", false, false, (fx_token[]){id.hello, -2});
        fx_vocab_free(v);
    }
    /* An unknown name is an error that names it. */
    memset(b, 0, sizeof *b);
    for (int i = 0; i < 256; i++) {
        char t[8] = {0};
        fx_utf8_encode(gpt2_char(i), t);
        vb_add(b, t, 0, 1);
    }
    struct fx_vocab_spec spec;
    fx_vocab_spec_init(&spec);
    spec.model = "gpt2";
    spec.pre = "no-such-pre";
    spec.merges = (struct fx_gguf_str[]){{"a b", 3}};
    spec.n_merges = 1;
    spec.n_tokens = (uint64_t)b->n;
    spec.tokens = b->tok;
    struct fx_vocab *v = NULL;
    struct fx_error err = {0};
    assert_int_equal(fx_vocab_build(&spec, &v, &err), FX_ERR_UNSUPPORTED);
    assert_null(v);
    assert_non_null(strstr(err.msg, "'no-such-pre'"));
    /* A missing name falls back to "default" (with a warning on stderr). */
    spec.pre = NULL;
    assert_int_equal(fx_vocab_build(&spec, &v, &err), FX_OK);
    assert_string_equal(fx_vocab_pre(v), "default");
    fx_vocab_free(v);
    /* So does an unknown model, and a gpt2 vocabulary without merges. */
    spec.pre = "gpt-2";
    spec.model = "t6";
    assert_int_equal(fx_vocab_build(&spec, &v, &err), FX_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "'t6'"));
    spec.model = "gpt2";
    spec.merges = NULL;
    assert_int_equal(fx_vocab_build(&spec, &v, &err), FX_ERR_NOT_FOUND);
    assert_non_null(strstr(err.msg, "tokenizer.ggml.merges"));
    free(b);
}

FX_TEST(tok_vocab_rejects_duplicates_and_bad_flags) {
    struct vb *b = calloc(1, sizeof *b);
    vb_add(b, "<unk>", 0, 2);
    vb_add(b, "<s>", 0, 3);
    vb_add(b, "x", 0, 1);
    vb_add(b, "x", 0, 1);
    struct fx_vocab_spec spec;
    fx_vocab_spec_init(&spec);
    spec.model = "llama";
    spec.n_tokens = (uint64_t)b->n;
    spec.tokens = b->tok;
    struct fx_vocab *v = NULL;
    struct fx_error err = {0};
    assert_int_equal(fx_vocab_build(&spec, &v, &err), FX_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "ids 2 and 3"));
    /* add_eos without an EOS id (the default 2 is "x" here, so point it outside). */
    b->n = 3;
    spec.n_tokens = 3;
    spec.add_eos = 1;
    spec.special[FX_SPECIAL_EOS] = 99; /* out of range: ignored, default 2 stays */
    assert_int_equal(fx_vocab_build(&spec, &v, &err), FX_OK);
    assert_int_equal(fx_vocab_eos(v), 2);
    fx_vocab_free(v);
    spec.n_tokens = 2; /* now the default EOS (2) is outside: add_eos cannot be honoured */
    assert_int_equal(fx_vocab_build(&spec, &v, &err), FX_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "add_eos_token"));
    /* An empty vocabulary is no vocabulary. */
    spec.n_tokens = 0;
    assert_int_equal(fx_vocab_build(&spec, &v, &err), FX_ERR_FORMAT);
    free(b);
}

/* ---- end of generation ------------------------------------------------------------------------
 */

FX_TEST(tok_vocab_finds_end_of_generation_tokens) {
    struct vb *b = calloc(1, sizeof *b);
    vb_add(b, "<unk>", 0, 2);
    vb_add(b, "<s>", 0, 3);
    vb_add(b, "</s>", 0, 3);
    fx_token im_end = vb_add(b, "<|im_end|>", 0, 4); /* mistyped: becomes a control token */
    fx_token endoftext = vb_add(b, "<|endoftext|>", 0, 3);
    fx_token word = vb_add(b, "word", 0, 1);
    struct fx_vocab_spec spec;
    fx_vocab_spec_init(&spec);
    spec.model = "llama";
    struct fx_vocab *v = vb_build(b, &spec);
    assert_true(fx_vocab_is_eog(v, 2));
    assert_true(fx_vocab_is_eog(v, im_end));
    assert_true(fx_vocab_is_eog(v, endoftext));
    assert_false(fx_vocab_is_eog(v, word));
    assert_false(fx_vocab_is_eog(v, 1));
    assert_false(fx_vocab_is_eog(v, -1));
    assert_int_equal(fx_vocab_eot(v), im_end); /* <|im_end|> is preferred to <|endoftext|> */
    assert_true(fx_vocab_token_attr(v, im_end) & FX_TOKEN_ATTR_CONTROL);
    assert_int_equal(fx_vocab_find_token(v, "word", 4), word);
    assert_int_equal(fx_vocab_find_token(v, "wor", 3), FX_TOKEN_NULL);
    fx_vocab_free(v);
    free(b);
}

/* ---- WordPiece --------------------------------------------------------------------------------
 */

FX_TEST(tok_wordpiece_lowercases_strips_accents_and_splits_punctuation) {
    struct vb *b = calloc(1, sizeof *b);
    for (int i = 0; i < 104; i++) {
        char t[16];
        snprintf(t, sizeof t, "[unused%d]", i);
        vb_add(b,
               i == 0     ? "[PAD]"
               : i == 100 ? "[UNK]"
               : i == 101 ? "[CLS]"
               : i == 102 ? "[SEP]"
                          : t,
               0, i >= 100 || i == 0 ? 3 : 1);
    }
    fx_token hello = vb_add(b, SP "hello", 0, 1);
    fx_token world = vb_add(b, SP "world", 0, 1);
    fx_token un = vb_add(b, SP "un", 0, 1);
    fx_token aff = vb_add(b, "aff", 0, 1);
    fx_token able = vb_add(b, "able", 0, 1);
    fx_token bang = vb_add(b, SP "!", 0, 1);
    fx_token cjk = vb_add(b, SP "\xE4\xB8\xAD", 0, 1); /* 中 */
    struct fx_vocab_spec spec;
    fx_vocab_spec_init(&spec);
    spec.model = "bert";
    struct fx_vocab *v = vb_build(b, &spec);
    /* "," has no token: that word becomes [UNK]; "unaffable" is spelled longest-first. */
    expect_ids(v, "H\xC3\xA9llo, unaffable  WORLD!", false, false,
               (fx_token[]){hello, 100, un, aff, able, world, bang, -2});
    expect_ids(v, "hello", true, false, (fx_token[]){101, hello, 102, -2});
    /* CJK ideographs are words of their own; control characters vanish. */
    expect_ids(v, "\xE4\xB8\xAD\x01hello", false, false, (fx_token[]){cjk, hello, -2});
    /* Decoding shows the word starts as spaces. */
    expect_text(v, (fx_token[]){hello, world}, 2, 0, " hello world");
    fx_vocab_free(v);
    free(b);
}

/* ---- detokenizer --------------------------------------------------------------------------------
 */

FX_TEST(tok_utf8_incomplete_tail_holds_only_unfinished_characters) {
    static const struct {
        const char *s;
        size_t want;
    } cases[] = {
        {"abc", 0},
        {"a\xC3", 1},
        {"a\xC3\xA9", 0},
        {"\xE2\x96", 2},
        {"\xE2\x96\x81", 0},
        {"\xF0\x9F\x98", 3},
        {"\xF0\x9F\x98\x81", 0},
        {"\xE0\x80", 0},     /* overlong: never valid */
        {"\xED\xA0", 0},     /* surrogate */
        {"\xF4\x90", 0},     /* past U+10FFFF */
        {"\xF5", 0},         /* not a lead byte */
        {"\x80\x80\x80", 0}, /* continuations without a lead */
        {"\xC3\xC3", 1},     /* the first C3 is invalid, the second may still complete */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (fx_utf8_incomplete_tail(cases[i].s, strlen(cases[i].s)) != cases[i].want)
            fail_msg("case %zu: expected %zu", i, cases[i].want);
}

FX_TEST(tok_detok_stream_holds_split_characters) {
    struct vb *b = calloc(1, sizeof *b);
    struct spm_ids id;
    struct fx_vocab *v = spm_vocab(b, &id, NULL);
    struct fx_detok_stream *s;
    struct fx_error err = {0};
    assert_int_equal(fx_detok_stream_create(v, 0, &s, &err), FX_OK);
    const char *t;
    size_t n;
    /* "▁a" then é as two byte tokens: the first byte is held until the second arrives. */
    assert_int_equal(fx_detok_stream_push(s, id.sp_a, &t, &n, &err), FX_OK);
    assert_int_equal(n, 1);
    assert_memory_equal(t, "a", 1); /* the prefix space goes, as in fx_detokenize */
    assert_int_equal(fx_detok_stream_push(s, 3 + 0xC3, &t, &n, &err), FX_OK);
    assert_int_equal(n, 0);
    assert_int_equal(fx_detok_stream_push(s, 3 + 0xA9, &t, &n, &err), FX_OK);
    assert_int_equal(n, 2);
    assert_memory_equal(t, "\xC3\xA9", 2);
    /* An unfinished character at the end comes out on flush, as it is. */
    assert_int_equal(fx_detok_stream_push(s, 3 + 0xE2, &t, &n, &err), FX_OK);
    assert_int_equal(n, 0);
    fx_detok_stream_flush(s, &t, &n);
    assert_int_equal(n, 1);
    assert_memory_equal(t, "\xE2", 1);
    /* A bad id is an error that changes nothing. */
    assert_int_equal(fx_detok_stream_push(s, 100000, &t, &n, &err), FX_ERR_INVALID_ARG);
    assert_int_equal(n, 0);
    fx_detok_stream_free(s);
    /* Removing special tokens needs the whole sequence. */
    assert_int_equal(fx_detok_stream_create(v, FX_DETOK_REMOVE_SPECIAL, &s, &err),
                     FX_ERR_INVALID_ARG);
    /* One-shot decoding reports the size it needs. */
    char small[4];
    size_t len;
    assert_int_equal(fx_detokenize(v, (fx_token[]){id.sp_a, id.bc, id.bc}, 3, 0, small,
                                   sizeof small, &len, &err),
                     FX_ERR_CAPACITY);
    assert_int_equal(len, 5);
    fx_vocab_free(v);
    free(b);
}

FX_TEST(tok_tokenize_reports_needed_capacity) {
    struct vb *b = calloc(1, sizeof *b);
    struct spm_ids id;
    struct fx_vocab *v = spm_vocab(b, &id, NULL);
    fx_token ids[2];
    size_t n;
    struct fx_error err = {0};
    assert_int_equal(fx_tokenize(v, "c c c", 5, true, false, ids, 2, &n, &err), FX_ERR_CAPACITY);
    assert_int_equal(n, 7); /* <s> ▁ c ▁ c ▁ c */
    assert_int_equal(ids[0], 1);
    assert_int_equal(fx_tokenize(v, "c", 1, false, false, NULL, 0, &n, &err), FX_ERR_CAPACITY);
    assert_int_equal(n, 2);
    assert_int_equal(fx_tokenize(NULL, "c", 1, false, false, ids, 2, &n, &err), FX_ERR_INVALID_ARG);
    fx_vocab_free(v);
    free(b);
}

/* fx_tokenize_alloc sizes the array itself, and a BOS that the text writes (a chat template's
 * bos_token) right after the one add_special adds is kept once; without add_special the text's
 * own BOS stays. */
FX_TEST(tok_tokenize_alloc_keeps_one_bos) {
    struct vb *b = calloc(1, sizeof *b);
    struct spm_ids id;
    struct fx_vocab *v = spm_vocab(b, &id, NULL);
    struct fx_error err = {0};
    fx_token plain[16], *ids = NULL;
    size_t n_plain, n;
    assert_int_equal(fx_tokenize(v, "<s>c", 4, true, true, plain, 16, &n_plain, &err), FX_OK);
    assert_true(n_plain >= 3);
    assert_int_equal(plain[0], 1);
    assert_int_equal(plain[1], 1);
    assert_int_equal(fx_tokenize_alloc(v, "<s>c", 4, true, true, &ids, &n, &err), FX_OK);
    assert_int_equal(n, n_plain - 1);
    assert_memory_equal(ids, plain + 1, n * sizeof *ids);
    free(ids);
    assert_int_equal(fx_tokenize_alloc(v, "<s>c", 4, false, true, &ids, &n, &err), FX_OK);
    assert_int_equal(n, n_plain - 1);
    assert_int_equal(ids[0], 1);
    free(ids);
    assert_int_equal(fx_tokenize_alloc(NULL, "c", 1, true, true, &ids, &n, &err),
                     FX_ERR_INVALID_ARG);
    assert_null(ids);
    assert_int_equal(n, 0);
    fx_vocab_free(v);
    free(b);
}
