/* tok/pretok: how each pre-tokenizer cuts text into words. The expected words are read off the
 * patterns (the Hugging Face / llama.cpp regular expressions) by hand; they pin the features
 * that tell the families apart: digit grouping, contractions, case splits, punctuation first. */
#include "fx_test.h"

#include <string.h>

#include "ferrox.h"
#include "tok/pretok.h"

struct joined {
    char buf[512];
    size_t n;
};

static fx_status collect(void *ctx, const char *word, size_t len, struct fx_error *err) {
    (void)err;
    struct joined *j = ctx;
    assert_true(len > 0);
    assert_true(j->n + len + 1 < sizeof j->buf);
    if (j->n)
        j->buf[j->n++] = '|';
    memcpy(j->buf + j->n, word, len);
    j->n += len;
    j->buf[j->n] = '\0';
    return FX_OK;
}

/* The words of text under pre-tokenizer `name`, joined by '|'. */
static void expect_words(const char *name, const char *text, const char *want) {
    struct fx_pretok *p;
    struct fx_pretok_traits traits;
    struct fx_error err = {0};
    if (fx_pretok_create(name, &p, &traits, &err) != FX_OK)
        fail_msg("%s: %s", name, err.msg);
    struct fx_tok_scratch s = {0};
    struct joined j = {{0}, 0};
    assert_int_equal(fx_pretok_split(p, &s, text, strlen(text), collect, &j, &err), FX_OK);
    if (strcmp(j.buf, want) != 0)
        fail_msg("%s on '%s':\n  expected '%s'\n  got      '%s'", name, text, want, j.buf);
    fx_tok_scratch_free(&s);
    fx_pretok_free(p);
}

FX_TEST(tok_pretok_gpt2_words) {
    expect_words("gpt-2", "Hello world's 123  x\n", "Hello| world|'s| 123| | x|\n");
    /* Contractions are lower-case only. */
    expect_words("gpt-2", "I'M", "I|'|M");
    expect_words("mpt", "ab 123", "ab| 123");
}

FX_TEST(tok_pretok_llama3_and_qwen2_digits) {
    /* Llama 3: any-case contractions, digits in groups of up to three, newline runs. */
    expect_words("llama-bpe", "I'M 12345 ok\n\n", "I|'M| |123|45| ok|\n\n");
    /* Qwen 2: the same, one digit at a time. */
    expect_words("qwen2", "I'M 12345 ok\n\n", "I|'M| |1|2|3|4|5| ok|\n\n");
}

FX_TEST(tok_pretok_digits_split_first) {
    /* StarCoder, Refact, SmolLM: digits alone first, then the GPT-2 words. */
    expect_words("smollm", "ab 123", "ab| |1|2|3");
    expect_words("starcoder", "ab 123", "ab| |1|2|3");
    expect_words("refact", "x1", "x|1");
    /* Falcon: punctuation runs first, and digit runs cut in threes at the end. */
    expect_words("falcon", "a+b=1234567", "a|+|b|=|123|456|7");
    /* "default": punctuation, GPT-2 words, digit runs, threes. */
    expect_words("default", "x: 12345", "x|:| |123|45");
}

FX_TEST(tok_pretok_deepseek) {
    expect_words("deepseek-coder", "Hi, 42\n", "Hi|,| |4|2|\n");
    expect_words("deepseek-llm", "Hi 42 ! ", "Hi| |42| !| ");
    /* DeepSeek V3: digits in threes, CJK runs, then letters, punctuation and spaces. */
    expect_words("deepseek-v3", "ab12345 \xE4\xB8\xAD\xE6\x96\x87!",
                 "ab|123|45| |\xE4\xB8\xAD\xE6\x96\x87|!");
}

FX_TEST(tok_pretok_case_splitting_families) {
    /* GPT-4o / o200k (gpt-oss, Llama 4): a capital starts a word, contractions stay attached. */
    expect_words("gpt-4o", "HelloWorld I'M ok123", "Hello|World| I'M| ok|123");
    /* Tekken: the same cut without contractions, digits one at a time. */
    expect_words("tekken", "HelloWorld I'M ok123", "Hello|World| I|'M| ok|1|2|3");
}

FX_TEST(tok_pretok_empty_matches_cut) {
    /* SuperBPE cuts digit runs with an empty lookahead match: threes from the right. */
    expect_words("superbpe", "ab 1234567 c", "ab |1|234|567| c");
    expect_words("superbpe", "123456", "123|456");
}

FX_TEST(tok_pretok_keeps_every_byte) {
    /* Bytes that are not UTF-8 are never matched but never lost either. */
    expect_words("llama-bpe", "ab\xFF\xFE cd", "ab|\xFF\xFE| cd");
    expect_words("gpt-2", "\xC3", "\xC3");
    expect_words("qwen2", "", "");
}

FX_TEST(tok_pretok_unknown_name_is_an_error) {
    struct fx_pretok *p = (struct fx_pretok *)1;
    struct fx_pretok_traits traits;
    struct fx_error err = {0};
    assert_int_equal(fx_pretok_create("gpt-5", &p, &traits, &err), FX_ERR_UNSUPPORTED);
    assert_null(p);
    assert_non_null(strstr(err.msg, "'gpt-5'"));
    /* Llama 3's synonyms carry its traits. */
    assert_int_equal(fx_pretok_create("llama-v3", &p, &traits, &err), FX_OK);
    assert_true(traits.ignore_merges);
    assert_true(traits.add_bos);
    fx_pretok_free(p);
}
