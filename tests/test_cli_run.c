/* ferrox run, as a user runs it: the golden continuations of stories260K, seeded sampling,
 * stopping, prompts longer than the context, the random-weight model made when no -m is given,
 * and the model-loading progress callback behind its progress bar. */
#include "fx_test.h"
#include "golden.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ferrox.h"

/* Runs ferrox with args; fails the test unless it exits with `want`. */
static void run_cli(const char *const *args, int want, char **out, char **err) {
    int rc = fx_test_run_cli(args, NULL, out, err);
    if (rc != want)
        fail_msg("ferrox %s exited %d (want %d): %s", args[0], rc, want, err ? *err : "");
}

/* The number in "LABEL: N tokens" of ferrox run's statistics on stderr. */
static int stat_tokens(const char *err, const char *label) {
    const char *p = strstr(err, label);
    if (!p)
        fail_msg("no '%s' in stderr:\n%s", label, err);
    return atoi(p + strlen(label));
}

FX_TEST(run_prints_golden_continuation) {
    static const char *const stems[] = {"stories260K.once", "stories260K.lily"};
    for (size_t s = 0; s < 2; s++) {
        char rel[128];
        snprintf(rel, sizeof rel, "golden/%s.json", stems[s]);
        json_t *g = fx_test_json_load(rel);
        const char *prompt = json_string_value(json_object_get(g, "prompt_text"));
        const char *want = json_string_value(json_object_get(g, "continuation_text"));
        int n_prompt = (int)json_integer_value(json_object_get(g, "n_prompt"));
        assert_non_null(prompt);
        assert_non_null(want);
        const char *args[] = {"run", "-m",     fx_test_model("stories260K.gguf"),
                              "-p",  prompt,   "-n",
                              "64",  "--temp", "0",
                              "-t",  "2",      NULL};
        char *out, *err;
        run_cli(args, 0, &out, &err);
        /* stdout holds the continuation only (no prompt echo, no newline added off a
         * terminal), exactly the concatenated pieces llama.cpp generated. */
        assert_string_equal(out, want);
        assert_int_equal(stat_tokens(err, "prompt: "), n_prompt);
        assert_int_equal(stat_tokens(err, "generated: "), 64);
        assert_non_null(strstr(err, "token limit"));
        free(out);
        free(err);
        json_decref(g);
    }
}

/* The model's output for a prompt through the library, as the reference the command must match:
 * prefill, then sample (params) and evaluate n tokens one at a time, concatenating the pieces. */
static char *reference_text(const char *model, const fx_token *prompt, int n_prompt, int n,
                            const struct fx_sampler_params *sp) {
    struct fx_model *m;
    struct fx_vocab *v;
    struct fx_context *ctx;
    struct fx_sampler *s;
    struct fx_error e;
    assert_int_equal(fx_model_load(model, NULL, &m, &e), FX_OK);
    assert_int_equal(fx_vocab_load(fx_model_gguf(m), &v, &e), FX_OK);
    struct fx_context_params cp = fx_context_default_params();
    cp.n_ctx = n_prompt + n;
    cp.n_threads = 1;
    assert_int_equal(fx_context_create(m, &cp, &ctx, &e), FX_OK);
    assert_int_equal(fx_sampler_create(fx_model_n_vocab(m), sp, &s, &e), FX_OK);
    float *logits = malloc(sizeof(float) * (size_t)fx_model_n_vocab(m));
    char *text = calloc(1, 64 * (size_t)n + 1);
    assert_non_null(logits);
    assert_non_null(text);
    assert_int_equal(fx_forward_batch_last(ctx, prompt, n_prompt, 0, logits, &e), FX_OK);
    for (int i = 0; i < n_prompt; i++)
        assert_int_equal(fx_sampler_accept(s, prompt[i], &e), FX_OK);
    for (int i = 0; i < n; i++) {
        fx_token t;
        assert_int_equal(fx_sampler_sample(s, logits, &t, &e), FX_OK);
        assert_int_equal(fx_sampler_accept(s, t, &e), FX_OK);
        assert_false(fx_vocab_is_eog(v, t));
        size_t len;
        const char *piece = fx_token_to_piece(v, t, false, &len);
        assert_true(len < 64);
        strncat(text, piece, len);
        if (i + 1 < n)
            assert_int_equal(fx_forward_token(ctx, t, n_prompt + i, logits, &e), FX_OK);
    }
    free(logits);
    fx_sampler_free(s);
    fx_context_free(ctx);
    fx_vocab_free(v);
    fx_model_free(m);
    return text;
}

static void tokenize(const char *model, const char *text, fx_token *ids, size_t cap, size_t *n) {
    struct fx_vocab *v;
    struct fx_error e;
    assert_int_equal(fx_vocab_load_file(model, &v, &e), FX_OK);
    assert_int_equal(fx_tokenize(v, text, strlen(text), true, true, ids, cap, n, &e), FX_OK);
    fx_vocab_free(v);
}

FX_TEST(run_seeded_sampling_is_reproducible_across_threads) {
    const char *model = fx_test_model("stories260K.gguf");
    const char *prompt = "Lily and Tom went to the";
    char *first = NULL;
    /* The same seed: the same text, with one thread or two, run after run. */
    static const char *const threads[] = {"1", "2", "1"};
    for (int r = 0; r < 3; r++) {
        const char *args[] = {
            "run", "-m",      model,      "-p",      prompt, "-n",     "48",   "--temp",
            "0.9", "--top-k", "40",       "--top-p", "0.9",  "--seed", "1234", "--repeat-penalty",
            "1.1", "-t",      threads[r], NULL};
        char *out, *err;
        run_cli(args, 0, &out, &err);
        assert_non_null(strstr(err, "seed 1234"));
        assert_int_equal(stat_tokens(err, "generated: "), 48);
        if (!first)
            first = out;
        else {
            assert_string_equal(out, first);
            free(out);
        }
        free(err);
    }
    /* It is the library's sampler over the model's logits, with the prompt in the penalty
     * window (as llama.cpp's tools do). */
    fx_token ids[64];
    size_t n;
    tokenize(model, prompt, ids, 64, &n);
    struct fx_sampler_params sp = fx_sampler_default_params();
    sp.temperature = 0.9f;
    sp.top_k = 40;
    sp.top_p = 0.9f;
    sp.repeat_penalty = 1.1f;
    sp.seed = 1234;
    char *want = reference_text(model, ids, (int)n, 48, &sp);
    assert_string_equal(first, want);
    free(want);
    /* Another seed draws another text. */
    const char *other[] = {
        "run", "-m",      model, "-p",      prompt, "-n",     "48", "--temp",
        "0.9", "--top-k", "40",  "--top-p", "0.9",  "--seed", "99", "--repeat-penalty",
        "1.1", NULL};
    char *out;
    run_cli(other, 0, &out, NULL);
    assert_string_not_equal(out, first);
    free(out);
    free(first);
}

FX_TEST(run_stops_at_eos_stop_strings_and_ignores_eos_when_asked) {
    const char *model = fx_test_model("stories260K.gguf");
    json_t *g = fx_test_json_load("golden/stories260K.once.json");
    const char *golden = json_string_value(json_object_get(g, "continuation_text"));
    char *out, *err;
    /* stories260K never ends a story with EOS by itself: a bias makes EOS (id 2) the choice. */
    const char *eos[] = {"run",   "-m", model,    "-p", "Once upon a time",
                         "-n",    "8",  "--temp", "0",  "--logit-bias",
                         "2+100", NULL};
    run_cli(eos, 0, &out, &err);
    assert_string_equal(out, "");
    assert_non_null(strstr(err, "ended by end of text"));
    assert_int_equal(stat_tokens(err, "generated: "), 0);
    free(out);
    free(err);
    /* --ignore-eos bans it again: the greedy text comes back. */
    const char *ignore[] = {"run",    "-m", model,          "-p",    "Once upon a time", "-n", "64",
                            "--temp", "0",  "--logit-bias", "2+100", "--ignore-eos",     NULL};
    run_cli(ignore, 0, &out, NULL);
    assert_string_equal(out, golden);
    free(out);
    /* A stop string (spanning tokens or not) cuts the text where it starts. */
    const char *stop[] = {"run",    "-m", model,    "-p",   "Once upon a time", "-n",   "64",
                          "--temp", "0",  "--stop", "Lily", "--stop",           "park", NULL};
    run_cli(stop, 0, &out, &err);
    size_t cut = (size_t)(strstr(golden, "Lily") - golden);
    assert_int_equal(strlen(out), cut);
    assert_memory_equal(out, golden, cut);
    assert_non_null(strstr(err, "ended by stop string"));
    free(out);
    free(err);
    json_decref(g);
}

FX_TEST(run_prompt_longer_than_context) {
    const char *model = fx_test_model("stories260K.gguf");
    const char *prompt = "One day, a little boy named Tom went to the park with his mom. He saw a "
                         "big tree and a red ball.";
    fx_token ids[128];
    size_t n;
    tokenize(model, prompt, ids, 128, &n);
    assert_true(n > 24);
    char *out, *err;
    const char *plain[] = {"run", "-m", model, "-p", prompt, "-c", "16", "--temp", "0", NULL};
    run_cli(plain, 1, &out, &err);
    assert_string_equal(out, "");
    assert_non_null(strstr(err, "longer than the context of 16 tokens"));
    assert_non_null(strstr(err, "--truncate"));
    free(out);
    free(err);
    /* --truncate keeps BOS and the end of the prompt, leaving room for -n 4 tokens: 12 in all. */
    const char *cut[] = {"run", "-m", model,    "-p", prompt,       "-c", "16",
                         "-n",  "4",  "--temp", "0",  "--truncate", NULL};
    run_cli(cut, 0, &out, &err);
    char expect[64];
    snprintf(expect, sizeof expect, "kept 12 of its %zu tokens", n);
    assert_non_null(strstr(err, expect));
    fx_token kept[12];
    kept[0] = ids[0];
    assert_int_equal(kept[0], 1); /* BOS */
    memcpy(kept + 1, ids + n - 11, 11 * sizeof *ids);
    struct fx_sampler_params greedy = fx_sampler_default_params();
    greedy.temperature = 0;
    char *want = reference_text(model, kept, 12, 4, &greedy);
    assert_string_equal(out, want);
    free(want);
    free(out);
    free(err);
}

FX_TEST(run_without_model_builds_and_reuses_a_random_model) {
    char cache[512];
    snprintf(cache, sizeof cache, "%s/xdg-cache", fx_test_tmpdir());
    char *saved = getenv("XDG_CACHE_HOME") ? strdup(getenv("XDG_CACHE_HOME")) : NULL;
    setenv("XDG_CACHE_HOME", cache, 1);
    const char *args[] = {"run", "-p", "Hello", "-n", "8", "--temp", "0", NULL};
    char *out1, *err1, *out2, *err2;
    run_cli(args, 0, &out1, &err1);
    assert_non_null(strstr(err1, "RANDOM weights"));
    assert_non_null(strstr(err1, "-m FILE"));
    assert_non_null(strstr(err1, "building"));
    assert_int_equal(stat_tokens(err1, "generated: "), 8);
    char path[600];
    snprintf(path, sizeof path, "%s/ferrox/random-tiny.F16.gguf", cache);
    struct stat st1, st2;
    assert_int_equal(stat(path, &st1), 0);
    /* The second run loads the cached file as it is. */
    run_cli(args, 0, &out2, &err2);
    assert_null(strstr(err2, "building"));
    assert_non_null(strstr(err2, "RANDOM weights"));
    assert_int_equal(stat(path, &st2), 0);
    assert_int_equal(st1.st_mtim.tv_sec, st2.st_mtim.tv_sec);
    assert_int_equal(st1.st_mtim.tv_nsec, st2.st_mtim.tv_nsec);
    assert_string_equal(out1, out2);
    if (saved)
        setenv("XDG_CACHE_HOME", saved, 1);
    else
        unsetenv("XDG_CACHE_HOME");
    free(saved);
    free(out1);
    free(err1);
    free(out2);
    free(err2);
}

FX_TEST(run_rejects_bad_options) {
    const char *model = fx_test_model("stories260K.gguf");
    static const struct {
        const char *args[8];
        int rc;
        const char *message;
    } cases[] = {
        {{"run", "-m", NULL, NULL}, 2, "-p TEXT or -f FILE"},
        {{"run", "-m", NULL, "-p", "x", "--top-p", "1.5", NULL}, 2, "--top-p"},
        {{"run", "-m", NULL, "-p", "x", "--temp", "-1", NULL}, 2, "--temp"},
        {{"run", "-m", NULL, "-p", "x", "--logit-bias", "5", NULL}, 2, "--logit-bias"},
        {{"run", "-m", NULL, "-p", "x", "--logit-bias", "9999+1", NULL}, 1, "token 9999"},
        {{"run", "-m", NULL, "-p", "x", "-f", "/nonexistent", NULL}, 2, "one of them"},
        {{"run", "-m", "/nonexistent.gguf", "-p", "x", NULL}, 1, "/nonexistent.gguf"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *args[8];
        memcpy(args, cases[i].args, sizeof args);
        if (!args[2])
            args[2] = model;
        char *err;
        int rc = fx_test_run_cli(args, NULL, NULL, &err);
        if (rc != cases[i].rc || !strstr(err, cases[i].message))
            fail_msg("case %zu: exit %d (want %d), stderr: %s", i, rc, cases[i].rc, err);
        free(err);
    }
}

/* ---- the progress callback of fx_model_load ------------------------------------------------ */

struct progress_log {
    float f[256];
    int n;
    int cancel_at; /* the call that answers false; -1: never */
};

static bool record(float fraction, void *user) {
    struct progress_log *p = user;
    if (p->n < 256)
        p->f[p->n] = fraction;
    return p->n++ != p->cancel_at;
}

FX_TEST(run_model_load_reports_progress_and_can_cancel) {
    const char *path = fx_test_model("stories260K.gguf");
    struct progress_log log = {.cancel_at = -1};
    struct fx_model_params mp = fx_model_default_params();
    assert_null(mp.progress);
    mp.progress = record;
    mp.progress_user = &log;
    struct fx_model *m;
    struct fx_error e;
    assert_int_equal(fx_model_load(path, &mp, &m, &e), FX_OK);
    /* About a hundred slices of a 1.1 MiB file, in order, the last one complete. */
    assert_true(log.n >= 2 && log.n <= 256);
    for (int i = 0; i < log.n; i++) {
        assert_true(log.f[i] >= 0.0f && log.f[i] <= 1.0f);
        if (i > 0)
            assert_true(log.f[i] >= log.f[i - 1]);
    }
    assert_true(log.f[log.n - 1] == 1.0f);
    fx_model_free(m);
    /* Answering false stops the load. */
    struct progress_log stop = {.cancel_at = 1};
    mp.progress_user = &stop;
    m = (struct fx_model *)&stop;
    assert_int_equal(fx_model_load(path, &mp, &m, &e), FX_ERR_CANCELLED);
    assert_null(m);
    assert_int_equal(stop.n, 2);
    assert_non_null(strstr(e.msg, "cancelled"));
}
