/* tok/ against real vocabularies: every vocabulary of the shared fixtures (tokenizer/NAME.gguf)
 * encodes each test string of its .inp to exactly the ids of its .out (llama.cpp / Hugging Face,
 * add_special = false, parse_special = false) and decodes back to the string where the tokenizer
 * is lossless; the stories260K prompts of the goldens; streaming detokenization of random ids;
 * many threads on one vocabulary; loading errors; the tokenize command. */
#include "fx_test.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ferrox.h"

static struct fx_vocab *load(const char *path) {
    struct fx_vocab *v = NULL;
    struct fx_error err = {0};
    if (fx_vocab_load_file(path, &v, &err) != FX_OK)
        fail_msg("loading %s: %s", path, err.msg);
    return v;
}

/* The test strings of an .inp file (see the fixtures README): pieces before each separator. */
struct cases {
    char *inp, *out;
    const char *text[64];
    size_t len[64];
    char *ids[64]; /* the .out line of each string */
    size_t n;
};

static void read_cases(const char *vocab_path, struct cases *c) {
    char path[4096];
    snprintf(path, sizeof path, "%s.inp", vocab_path);
    size_t n_inp;
    c->inp = fx_test_read_file(path, &n_inp);
    snprintf(path, sizeof path, "%s.out", vocab_path);
    c->out = fx_test_read_file(path, NULL);
    static const char sep[] = "\n__ggml_vocab_test__\n";
    c->n = 0;
    char *line = c->out;
    for (char *at = c->inp, *end; (end = strstr(at, sep)) != NULL; at = end + strlen(sep)) {
        assert_true(c->n < 64);
        char *nl = strchr(line, '\n');
        assert_non_null(nl);
        *nl = '\0';
        c->text[c->n] = at;
        c->len[c->n] = (size_t)(end - at);
        c->ids[c->n] = line;
        line = nl + 1;
        c->n++;
    }
    assert_true(c->n > 40);
}

/* Checks every string of tokenizer/<name>.gguf; `lossless`: decoding gives the string back. */
static void check_fixture(const char *name, bool lossless) {
    char rel[256];
    snprintf(rel, sizeof rel, "tokenizer/%s.gguf", name);
    char vocab_path[4096];
    snprintf(vocab_path, sizeof vocab_path, "%s", fx_test_fixture(rel));
    struct fx_vocab *v = load(vocab_path);
    struct cases c;
    read_cases(vocab_path, &c);
    size_t mismatches = 0;
    for (size_t k = 0; k < c.n; k++) {
        fx_token ids[1024];
        size_t n;
        struct fx_error err = {0};
        if (fx_tokenize(v, c.text[k], c.len[k], false, false, ids, 1024, &n, &err) != FX_OK)
            fail_msg("%s, string %zu: %s", name, k, err.msg);
        char got[8192];
        size_t at = 0;
        for (size_t i = 0; i < n; i++)
            at += (size_t)snprintf(got + at, sizeof got - at, " %d", ids[i]);
        got[at] = '\0';
        if (strcmp(got, c.ids[k]) != 0) {
            print_message("%s, string %zu '%.*s':\n  expected%s\n  got     %s\n", name, k,
                          (int)c.len[k], c.text[k], c.ids[k], got);
            mismatches++;
        }
        if (!lossless)
            continue;
        char text[8192];
        size_t len;
        if (fx_detokenize(v, ids, n, 0, text, sizeof text, &len, &err) != FX_OK)
            fail_msg("%s, string %zu: %s", name, k, err.msg);
        if (len != c.len[k] || memcmp(text, c.text[k], len) != 0)
            fail_msg("%s, string %zu does not decode back: '%.*s'", name, k, (int)len, text);
    }
    if (mismatches)
        fail_msg("%s: %zu of %zu strings tokenize differently", name, mismatches, c.n);
    free(c.inp);
    free(c.out);
    fx_vocab_free(v);
}

FX_TEST(tok_fixture_llama_spm) {
    check_fixture("ggml-vocab-llama-spm", true);
}
FX_TEST(tok_fixture_phi_3) {
    check_fixture("ggml-vocab-phi-3", true);
}
FX_TEST(tok_fixture_gpt_2) {
    check_fixture("ggml-vocab-gpt-2", true);
}
FX_TEST(tok_fixture_gpt_2_pre_llama3) {
    check_fixture("ggml-vocab-gpt-2-pre-llama3", true);
}
FX_TEST(tok_fixture_gpt_2_pre_qwen2) {
    check_fixture("ggml-vocab-gpt-2-pre-qwen2", true);
}
FX_TEST(tok_fixture_gpt_2_pre_smollm) {
    check_fixture("ggml-vocab-gpt-2-pre-smollm", true);
}
FX_TEST(tok_fixture_deepseek_llm) {
    check_fixture("ggml-vocab-deepseek-llm", true);
}
FX_TEST(tok_fixture_deepseek_coder) {
    check_fixture("ggml-vocab-deepseek-coder", true);
}
FX_TEST(tok_fixture_falcon) {
    check_fixture("ggml-vocab-falcon", true);
}
FX_TEST(tok_fixture_mpt) {
    check_fixture("ggml-vocab-mpt", true);
}
FX_TEST(tok_fixture_starcoder) {
    check_fixture("ggml-vocab-starcoder", true);
}
FX_TEST(tok_fixture_refact) {
    check_fixture("ggml-vocab-refact", true);
}
/* WordPiece lower-cases, strips accents and drops white space: not lossless. */
FX_TEST(tok_fixture_bert_bge) {
    check_fixture("ggml-vocab-bert-bge", false);
}

/* The prompts of golden/stories260K.*.json, tokenized as llama.cpp did (with BOS). */
FX_TEST(tok_stories260k_golden_prompts) {
    struct fx_vocab *v = load(fx_test_model("stories260K.gguf"));
    static const struct {
        const char *text;
        fx_token ids[10];
        size_t n;
    } prompts[] = {
        {"Once upon a time", {1, 403, 407, 261, 378}, 5},
        {"Lily and Tom went to the", {1, 317, 269, 274, 287, 263, 377, 267, 265}, 9},
    };
    for (size_t p = 0; p < 2; p++) {
        fx_token ids[32];
        size_t n;
        struct fx_error err = {0};
        assert_int_equal(fx_tokenize(v, prompts[p].text, strlen(prompts[p].text), true, false, ids,
                                     32, &n, &err),
                         FX_OK);
        assert_int_equal(n, prompts[p].n);
        assert_memory_equal(ids, prompts[p].ids, n * sizeof *ids);
        /* llama_detokenize (remove_special = false) of the same ids: BOS renders as nothing and
         * the text starts with a space. */
        char text[128];
        size_t len;
        assert_int_equal(fx_detokenize(v, ids, n, 0, text, sizeof text, &len, &err), FX_OK);
        assert_int_equal(text[0], ' ');
        assert_string_equal(text + 1, prompts[p].text);
    }
    assert_int_equal(fx_vocab_bos(v), 1);
    assert_int_equal(fx_vocab_eos(v), 2);
    assert_true(fx_vocab_is_eog(v, 2));
    fx_vocab_free(v);
}

/* The length of the valid UTF-8 character at s[0..n) when it has two or more bytes, else 0:
 * decoded by hand and re-encoded, so that overlong forms, surrogates and values past U+10FFFF
 * do not count. */
static size_t multibyte_char(const uint8_t *s, size_t n) {
    size_t len = s[0] >= 0xF8 ? 0 : s[0] >= 0xF0 ? 4 : s[0] >= 0xE0 ? 3 : s[0] >= 0xC0 ? 2 : 0;
    if (len == 0 || len > n)
        return 0;
    uint32_t cp = s[0] & (0x7Fu >> len);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3F);
    }
    size_t shortest = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    if (shortest != len || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return len;
}

/* inside[p] is true when position p of text falls inside a multi-byte character. */
static void mark_inside(const char *text, size_t n, bool *inside) {
    memset(inside, 0, n + 1);
    for (size_t i = 0; i < n; i++) {
        size_t len = multibyte_char((const uint8_t *)text + i, n - i);
        for (size_t k = 1; k < len; k++)
            inside[i + k] = true;
        if (len)
            i += len - 1;
    }
}

/* Random ids (a third of them byte-sized pieces that split characters) decoded one at a time
 * through the stream: it never hands out part of a character (no chunk ends inside one of the
 * final text's characters), and all of it equals the one-shot decode. */
static void check_stream(const char *path, uint64_t seed) {
    struct fx_vocab *v = load(path);
    int32_t n_tokens = fx_vocab_n_tokens(v);
    /* Single-byte pieces that are not ASCII: the ids that produce partial characters. */
    fx_token partial[256];
    int n_partial = 0;
    for (fx_token id = 0; id < n_tokens && n_partial < 256; id++) {
        size_t len;
        const char *p = fx_token_to_piece(v, id, false, &len);
        if (len == 1 && (uint8_t)p[0] >= 0x80)
            partial[n_partial++] = id;
    }
    assert_true(n_partial > 0);
    struct fx_test_rng rng = {seed};
    static const unsigned flag_sets[] = {0, FX_DETOK_RENDER_SPECIAL, FX_DETOK_CONTINUE};
    size_t held_back = 0;
    for (int round = 0; round < 60; round++) {
        unsigned flags = flag_sets[round % 3];
        fx_token ids[64];
        size_t n = 1 + fx_test_rng_u64(&rng) % 64;
        for (size_t i = 0; i < n; i++)
            ids[i] = fx_test_rng_u64(&rng) % 3 == 0
                         ? partial[fx_test_rng_u64(&rng) % (uint64_t)n_partial]
                         : (fx_token)(fx_test_rng_u64(&rng) % (uint64_t)n_tokens);
        char whole[8192], streamed[8192];
        size_t whole_len, streamed_len = 0;
        struct fx_error err = {0};
        assert_int_equal(fx_detokenize(v, ids, n, flags, whole, sizeof whole, &whole_len, &err),
                         FX_OK);
        bool inside[8193];
        mark_inside(whole, whole_len, inside);
        struct fx_detok_stream *s;
        assert_int_equal(fx_detok_stream_create(v, flags, &s, &err), FX_OK);
        for (size_t i = 0; i <= n; i++) {
            const char *t;
            size_t len;
            if (i < n) {
                assert_int_equal(fx_detok_stream_push(s, ids[i], &t, &len, &err), FX_OK);
            } else {
                fx_detok_stream_flush(s, &t, &len);
            }
            assert_true(streamed_len + len <= sizeof streamed);
            memcpy(streamed + streamed_len, t, len);
            streamed_len += len;
            assert_true(streamed_len <= whole_len);
            assert_false(inside[streamed_len]);
            /* Count the pushes after which the stream held bytes back: the one-shot text of the
             * ids so far is longer than what came out. */
            char prefix[8192];
            size_t prefix_len;
            assert_int_equal(fx_detokenize(v, ids, i < n ? i + 1 : n, flags, prefix, sizeof prefix,
                                           &prefix_len, &err),
                             FX_OK);
            held_back += prefix_len > streamed_len;
        }
        fx_detok_stream_free(s);
        assert_int_equal(streamed_len, whole_len);
        assert_memory_equal(streamed, whole, whole_len);
    }
    assert_true(held_back >= 10); /* the test did exercise the holding */
    fx_vocab_free(v);
}

FX_TEST(tok_detok_stream_equals_oneshot_spm) {
    check_stream(fx_test_fixture("tokenizer/ggml-vocab-llama-spm.gguf"), 1);
}
FX_TEST(tok_detok_stream_equals_oneshot_bpe) {
    check_stream(fx_test_fixture("tokenizer/ggml-vocab-gpt-2.gguf"), 2);
}
FX_TEST(tok_detok_stream_equals_oneshot_stories260k) {
    check_stream(fx_test_model("stories260K.gguf"), 3);
}

/* Special tokens of a real vocabulary: Phi-3's chat markers are control tokens. */
FX_TEST(tok_parse_special_phi3_markers) {
    struct fx_vocab *v = load(fx_test_fixture("tokenizer/ggml-vocab-phi-3.gguf"));
    fx_token user = fx_vocab_find_token(v, "<|user|>", 8),
             end = fx_vocab_find_token(v, "<|end|>", 7);
    assert_true(user >= 0 && end >= 0);
    const char *text = "<|user|>\nHi<|end|>";
    fx_token a[64], b[64];
    size_t na, nb;
    struct fx_error err = {0};
    assert_int_equal(fx_tokenize(v, text, strlen(text), true, true, a, 64, &na, &err), FX_OK);
    assert_int_equal(a[0], fx_vocab_bos(v));
    assert_int_equal(a[1], user);
    assert_int_equal(a[na - 1], end);
    /* Without parse_special the markers are text, and decode back to it. */
    assert_int_equal(fx_tokenize(v, text, strlen(text), false, false, b, 64, &nb, &err), FX_OK);
    for (size_t i = 0; i < nb; i++)
        assert_true(b[i] != user && b[i] != end);
    char back[128];
    size_t len;
    assert_int_equal(fx_detokenize(v, b, nb, 0, back, sizeof back, &len, &err), FX_OK);
    assert_string_equal(back, text);
    /* Rendered, the parsed ones show their text again. */
    assert_int_equal(
        fx_detokenize(v, a, na, FX_DETOK_RENDER_SPECIAL, back, sizeof back, &len, &err), FX_OK);
    assert_non_null(strstr(back, "<|user|>"));
    assert_true(fx_vocab_is_eog(v, end));
    fx_vocab_free(v);
}

/* ---- threads ----------------------------------------------------------------------------------
 */

struct worker {
    const struct fx_vocab *v;
    const struct cases *c;
    fx_token (*expect)[256];
    size_t *n_expect;
    int offset;
    int failures;
};

static void *work(void *arg) {
    struct worker *w = arg;
    for (int rep = 0; rep < 20; rep++)
        for (size_t k = 0; k < w->c->n; k++) {
            size_t i = (k + (size_t)w->offset) % w->c->n;
            fx_token ids[256];
            size_t n;
            if (fx_tokenize(w->v, w->c->text[i], w->c->len[i], true, false, ids, 256, &n, NULL) !=
                    FX_OK ||
                n != w->n_expect[i] || memcmp(ids, w->expect[i], n * sizeof *ids) != 0)
                w->failures++;
        }
    return NULL;
}

static void check_threads(const char *name) {
    char rel[256];
    snprintf(rel, sizeof rel, "tokenizer/%s.gguf", name);
    char path[4096];
    snprintf(path, sizeof path, "%s", fx_test_fixture(rel));
    struct fx_vocab *v = load(path);
    struct cases c;
    read_cases(path, &c);
    static fx_token expect[64][256];
    size_t n_expect[64];
    for (size_t k = 0; k < c.n; k++)
        assert_int_equal(
            fx_tokenize(v, c.text[k], c.len[k], true, false, expect[k], 256, &n_expect[k], NULL),
            FX_OK);
    enum { N_THREADS = 4 };
    pthread_t t[N_THREADS];
    struct worker w[N_THREADS];
    for (int i = 0; i < N_THREADS; i++) {
        w[i] = (struct worker){v, &c, expect, n_expect, i * 11, 0};
        assert_int_equal(pthread_create(&t[i], NULL, work, &w[i]), 0);
    }
    for (int i = 0; i < N_THREADS; i++) {
        assert_int_equal(pthread_join(t[i], NULL), 0);
        assert_int_equal(w[i].failures, 0);
    }
    free(c.inp);
    free(c.out);
    fx_vocab_free(v);
}

/* One vocabulary, four threads tokenizing different strings at once, the same ids as alone. */
FX_TEST(tok_threads_share_one_vocabulary_bpe) {
    check_threads("ggml-vocab-gpt-2-pre-llama3");
}
FX_TEST(tok_threads_share_one_vocabulary_spm) {
    check_threads("ggml-vocab-llama-spm");
}

/* ---- loading from GGUF ------------------------------------------------------------------------
 */

/* A small byte-level vocabulary file: 256 byte tokens plus the keys given. */
static const char *write_vocab(const char *name, const char *pre, bool short_scores) {
    struct fx_gguf_writer *w;
    struct fx_error err = {0};
    assert_int_equal(fx_gguf_writer_create(&w, &err), FX_OK);
    static char text[256][4];
    const char *toks[256];
    int next = 256;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        uint32_t cp = printable ? (uint32_t)b : (uint32_t)next++;
        memset(text[b], 0, 4);
        if (cp < 0x80) {
            text[b][0] = (char)cp;
        } else {
            text[b][0] = (char)(0xC0 | (cp >> 6));
            text[b][1] = (char)(0x80 | (cp & 0x3F));
        }
        toks[b] = text[b];
    }
    static const char *const merges[] = {"h e"};
    float scores[256] = {0};
    assert_int_equal(fx_gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2", &err), FX_OK);
    if (pre)
        assert_int_equal(fx_gguf_writer_set_str(w, "tokenizer.ggml.pre", pre, &err), FX_OK);
    assert_int_equal(fx_gguf_writer_set_str_arr(w, "tokenizer.ggml.tokens", toks, 256, &err),
                     FX_OK);
    assert_int_equal(fx_gguf_writer_set_str_arr(w, "tokenizer.ggml.merges",
                                                (const char *const *)merges, 1, &err),
                     FX_OK);
    assert_int_equal(fx_gguf_writer_set_arr(w, "tokenizer.ggml.scores", FX_GGUF_FLOAT32, scores,
                                            short_scores ? 100 : 256, &err),
                     FX_OK);
    assert_int_equal(fx_gguf_writer_set_i32(w, "tokenizer.ggml.bos_token_id", -1, &err), FX_OK);
    assert_int_equal(fx_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 33, &err), FX_OK);
    const char *path = fx_test_tmpfile(name);
    assert_int_equal(fx_gguf_writer_write(w, path, NULL, NULL, &err), FX_OK);
    fx_gguf_writer_free(w);
    return path;
}

FX_TEST(tok_load_gguf_keys_and_errors) {
    char path[4096];
    snprintf(path, sizeof path, "%s", write_vocab("ok.gguf", "qwen2", false));
    struct fx_vocab *v = load(path);
    assert_int_equal(fx_vocab_type(v), FX_VOCAB_BPE);
    assert_string_equal(fx_vocab_pre(v), "qwen2");
    assert_int_equal(fx_vocab_n_tokens(v), 256);
    assert_int_equal(fx_vocab_eos(v), 33);
    assert_int_equal(fx_vocab_bos(v), 11); /* -1 means "not set": gpt2's default stays */
    fx_vocab_free(v);

    struct fx_error err = {0};
    snprintf(path, sizeof path, "%s",
             write_vocab("bad-pre.gguf", "tokenizer-from-the-future", false));
    assert_int_equal(fx_vocab_load_file(path, &v, &err), FX_ERR_UNSUPPORTED);
    assert_null(v);
    assert_non_null(strstr(err.msg, "'tokenizer-from-the-future'"));

    snprintf(path, sizeof path, "%s", write_vocab("short.gguf", "gpt-2", true));
    assert_int_equal(fx_vocab_load_file(path, &v, &err), FX_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "tokenizer.ggml.scores"));

    /* A model file without a vocabulary. */
    struct fx_gguf_writer *w;
    assert_int_equal(fx_gguf_writer_create(&w, &err), FX_OK);
    assert_int_equal(fx_gguf_writer_set_str(w, "general.architecture", "llama", &err), FX_OK);
    snprintf(path, sizeof path, "%s", fx_test_tmpfile("novocab.gguf"));
    assert_int_equal(fx_gguf_writer_write(w, path, NULL, NULL, &err), FX_OK);
    fx_gguf_writer_free(w);
    assert_int_equal(fx_vocab_load_file(path, &v, &err), FX_ERR_NOT_FOUND);
    assert_non_null(strstr(err.msg, "tokenizer.ggml.model"));
}

/* ---- the tokenize command
 * ------------------------------------------------------------------------ */

FX_TEST(tok_cli_prints_ids_and_pieces) {
    const char *model = fx_test_model("stories260K.gguf");
    char *out = NULL, *err = NULL;
    const char *ids_args[] = {"tokenize", "-m", model, "-p", "Once upon a time", "--ids", NULL};
    assert_int_equal(fx_test_run_cli(ids_args, NULL, &out, &err), 0);
    assert_string_equal(out, "1 403 407 261 378\n");
    free(out);
    free(err);

    const char *piece_args[] = {"tokenize", "-m", model, "-p", "Once\nupon", "--no-bos", NULL};
    assert_int_equal(fx_test_run_cli(piece_args, NULL, &out, &err), 0);
    /* One "id piece" line per token; the newline byte token is escaped. */
    assert_non_null(strstr(out, "403  Once\n"));
    assert_non_null(strstr(out, " \\n\n"));
    assert_null(strstr(out, "<s>"));
    free(out);
    free(err);

    /* Text from standard input, special tokens parsed. */
    const char *stdin_args[] = {"tokenize",        "-m",       model, "-f", "-", "--ids",
                                "--parse-special", "--no-bos", NULL};
    assert_int_equal(fx_test_run_cli(stdin_args, "<s>Once", &out, &err), 0);
    assert_string_equal(out, "1 403\n");
    free(out);
    free(err);

    const char *bad_args[] = {"tokenize", "-m", model, NULL};
    assert_int_equal(fx_test_run_cli(bad_args, NULL, &out, &err), 2);
    assert_non_null(strstr(err, "usage"));
    free(out);
    free(err);
    const char *missing[] = {"tokenize", "-m", "/nonexistent.gguf", "-p", "x", NULL};
    assert_int_equal(fx_test_run_cli(missing, NULL, &out, &err), 1);
    assert_non_null(strstr(err, "nonexistent"));
    free(out);
    free(err);
}
