/* Speculative decoding as a user runs it: `ferrox run` and `ferrox chat` write the same text with
 * every drafter as without speculation, for every fixture architecture and stories260K, over
 * prompts that make the drafters right often (repetitive) and wrong often (free); -v reports the
 * acceptance rate and the tokens per verify step; bad options and a draft model with another
 * vocabulary are refused with a clear error. */
#include "fx_test.h"

#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "ferrox.h"

#define MAX_ARGS 40

/* Runs ferrox with base args followed by extra (NULL-terminated lists); fails unless it exits
 * with want. Returns stdout (and stderr into *err when err is not NULL). */
static char *run(const char *const *base, const char *const *extra, const char *stdin_text,
                 int want, char **err) {
    const char *args[MAX_ARGS];
    int n = 0;
    for (int i = 0; base[i]; i++)
        args[n++] = base[i];
    for (int i = 0; extra && extra[i]; i++)
        args[n++] = extra[i];
    /* One worker: the machines running the tests are often busy, and a pool of workers that
     * wait for each other is slowed down most by that. */
    args[n++] = "-t";
    args[n++] = "1";
    assert_true(n < MAX_ARGS);
    args[n] = NULL;
    char *out, *e;
    int rc = fx_test_run_cli(args, stdin_text, &out, &e);
    if (rc != want) {
        char line[2048] = "";
        for (int i = 0; i < n; i++) {
            strncat(line, args[i], sizeof line - strlen(line) - 2);
            strncat(line, " ", sizeof line - strlen(line) - 1);
        }
        fail_msg("ferrox %s exited %d (want %d): %s", line, rc, want, e);
    }
    if (err)
        *err = e;
    else
        free(e);
    return out;
}

static const char *const REPETITIVE = "one two three four one two three four one two three four "
                                      "one two three four one two";
static const char *const FREE = "Lily went to the park and saw a big";

struct pair {
    const char *target, *draft; /* fixture paths (under models/), or NULL for stories260K */
};

static const struct pair PAIRS[] = {
    {"models/llama-tiny.F32.gguf", "models/llama-tiny.Q4_K.gguf"},
    {"models/llama-tiny-tied.Q8_0.gguf", "models/llama-tiny-tied.F32.gguf"},
    {"models/gemma2-tiny.F32.gguf", "models/gemma2-tiny.F32.gguf"},
    {"models/gemma3-tiny.F32.gguf", "models/gemma3-tiny.Q8_0.gguf"},
    {"models/qwen2-tiny.Q8_0.gguf", "models/qwen2-tiny.F32.gguf"},
    {"models/qwen3-tiny.Q4_K_M.gguf", "models/qwen3-tiny.Q8_0.gguf"},
    {"models/qwen3moe-tiny.F32.gguf", "models/qwen3moe-tiny.Q8_0.gguf"},
    {"models/gptoss-tiny.MXFP4_MOE.gguf", "models/gptoss-tiny.F32.gguf"},
    {NULL, NULL},
};

static void path_of(const char *rel, char *out) {
    snprintf(out, PATH_MAX, "%s", rel ? fx_test_fixture(rel) : fx_test_model("stories260K.gguf"));
}

/* The text of every speculation mode equals the text without, for one model and prompt. */
static void check_identical(const char *target, const char *draft, const char *prompt,
                            const char *const *sampling) {
    const char *base[] = {"run", "-m",           target, "-p",  prompt, "-n",
                          "48",  "--ignore-eos", "-c",   "256", NULL};
    const char *none[MAX_ARGS] = {"--spec", "none", NULL};
    int ns = 2;
    for (int i = 0; sampling[i]; i++)
        none[ns++] = sampling[i];
    none[ns] = NULL;
    char *want = run(base, none, NULL, 0, NULL);
    assert_true(strlen(want) > 0);
    static const char *const modes[][10] = {
        {"--spec", "ngram", "-v", NULL},
        {"--spec", "ngram", "--spec-fixed", "--draft-max", "8", "-v", NULL},
        {"--spec", "ngram", "--spec-fixed", "--draft-max", "3", "--draft-min", "2", NULL},
        {"--spec", "draft", "-md", "DRAFT", "--spec-fixed", "--draft-max", "6", "-v", NULL},
        {"-md", "DRAFT", "-v", NULL},
    };
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
        const char *extra[MAX_ARGS];
        int n = 0;
        for (int i = 0; modes[m][i]; i++)
            extra[n++] = strcmp(modes[m][i], "DRAFT") == 0 ? draft : modes[m][i];
        for (int i = 0; sampling[i]; i++)
            extra[n++] = sampling[i];
        extra[n] = NULL;
        char *err;
        char *got = run(base, extra, NULL, 0, &err);
        if (strcmp(got, want) != 0)
            fail_msg("%s, prompt '%s', mode %zu (%s %s ...): the text differs from plain "
                     "decoding:\n  plain: %s\n  spec:  %s",
                     target, prompt, m, modes[m][0], modes[m][1], want, got);
        /* -v names the drafter in use. */
        bool verbose = false;
        for (int i = 0; modes[m][i]; i++)
            verbose |= strcmp(modes[m][i], "-v") == 0;
        if (verbose)
            assert_non_null(strstr(err, m < 3 ? "speculation (ngram)" : "speculation (draft)"));
        free(got);
        free(err);
    }
    free(want);
}

FX_TEST(spec_cli_run_text_is_identical_for_every_architecture) {
    static const char *const greedy[] = {"--temp", "0", NULL};
    for (size_t i = 0; i < sizeof PAIRS / sizeof PAIRS[0]; i++) {
        char target[PATH_MAX], draft[PATH_MAX];
        path_of(PAIRS[i].target, target);
        path_of(PAIRS[i].draft, draft);
        check_identical(target, draft, REPETITIVE, greedy);
        check_identical(target, draft, FREE, greedy);
    }
}

FX_TEST(spec_cli_run_text_is_identical_when_sampling_with_a_seed) {
    /* The same seed gives the same text with and without speculation, at any temperature: the
     * rows are sampled with the random numbers plain decoding uses. Penalties too. */
    static const char *const sampled[] = {"--temp", "0.8", "-s", "7", NULL};
    static const char *const penalised[] = {
        "--temp", "1.1", "-s", "3", "--repeat-penalty", "1.3", "--top-k", "0", "--presence-penalty",
        "0.2",    NULL};
    char target[PATH_MAX], draft[PATH_MAX];
    path_of(NULL, target);
    path_of(NULL, draft);
    check_identical(target, draft, REPETITIVE, sampled);
    check_identical(target, draft, FREE, penalised);
    path_of("models/qwen3-tiny.F32.gguf", target);
    path_of("models/qwen3-tiny.Q8_0.gguf", draft);
    check_identical(target, draft, REPETITIVE, sampled);
    /* KV cache types other than f32 keep a row's bits batch or not. */
    static const char *const q8[] = {"--temp", "0", "-ctk", "q8_0", "-ctv", "q8_0", NULL};
    path_of("models/llama-tiny.F32.gguf", target);
    path_of("models/llama-tiny.Q8_0.gguf", draft);
    check_identical(target, draft, REPETITIVE, q8);
    static const char *const f16[] = {"--temp", "0", "-ctk", "f16", "-ctv", "f16", NULL};
    check_identical(target, draft, FREE, f16);
}

/* "NAME N" after `label` in s. */
static double number_after(const char *s, const char *label) {
    const char *p = strstr(s, label);
    if (!p)
        fail_msg("no '%s' in:\n%s", label, s);
    return strtod(p + strlen(label), NULL);
}

FX_TEST(spec_cli_verbose_reports_acceptance_and_tokens_per_verify_step) {
    char model[PATH_MAX];
    path_of(NULL, model);
    const char *base[] = {"run", "-m",     model, "-p",           REPETITIVE, "-n",
                          "64",  "--temp", "0",   "--ignore-eos", "-v",       NULL};
    /* A draft model identical to the target: every draft is kept. */
    const char *same[] = {"-md", model, "--spec-fixed", "--draft-max", "7", NULL};
    char *err;
    free(run(base, same, NULL, 0, &err));
    assert_non_null(strstr(err, "speculation (draft): acceptance 100.0%"));
    /* 64 tokens: the first from the prompt's logits, then steps of 8 (the last cut to fit). */
    assert_true(number_after(err, "drafts), ") > 7.0);
    free(err);
    /* Prompt lookup on a repetitive prompt: most drafts kept, several tokens per step. */
    const char *ngram[] = {"--spec", "ngram", "--spec-fixed", NULL};
    free(run(base, ngram, NULL, 0, &err));
    print_message("%s", strstr(err, "speculation"));
    double acc = number_after(err, "acceptance ");
    double per_step = number_after(err, "drafts), ");
    assert_true(acc >= 0 && acc <= 100);
    assert_true(per_step >= 1.0);
    free(err);
    /* Without -v, nothing about speculation; with --spec none, nothing either. */
    const char *quiet[] = {"run", "-m", model, "-p", REPETITIVE, "-n", "8", NULL};
    free(run(quiet, NULL, NULL, 0, &err));
    assert_null(strstr(err, "speculation"));
    free(err);
    const char *none[] = {"--spec", "none", NULL};
    free(run(base, none, NULL, 0, &err));
    assert_null(strstr(err, "speculation"));
    free(err);
}

FX_TEST(spec_cli_refuses_bad_options_and_another_vocabulary) {
    char model[PATH_MAX];
    path_of(NULL, model);
    const char *base[] = {"run", "-m", model, "-p", "Once", "-n", "4", NULL};
    char *err;
    const char *bad_kind[] = {"--spec", "medusa", NULL};
    free(run(base, bad_kind, NULL, 2, &err));
    assert_non_null(strstr(err, "--spec (ngram, draft, mtp or none)"));
    free(err);
    const char *bad_max[] = {"--draft-max", "300", NULL};
    free(run(base, bad_max, NULL, 2, &err));
    assert_non_null(strstr(err, "--draft-max"));
    free(err);
    const char *min_over_max[] = {"--draft-max", "2", "--draft-min", "3", NULL};
    free(run(base, min_over_max, NULL, 1, &err));
    assert_non_null(strstr(err, "draft sizes"));
    free(err);
    const char *no_model[] = {"--spec", "draft", NULL};
    free(run(base, no_model, NULL, 1, &err));
    assert_non_null(strstr(err, "--spec draft needs a draft model (-md FILE)"));
    free(err);
    const char *missing[] = {"-md", "/nonexistent/draft.gguf", NULL};
    free(run(base, missing, NULL, 1, &err));
    assert_non_null(strstr(err, "/nonexistent/draft.gguf"));
    free(err);
    const char *other[] = {"-md", fx_test_model("llama-2-tiny-random.gguf"), NULL};
    free(run(base, other, NULL, 1, &err));
    print_message("%s", err);
    assert_non_null(strstr(err, "the draft model's vocabulary differs from the target's: 32000 "
                                "tokens in the draft, 512 in the target"));
    free(err);
    /* --model-draft is -md's long name; --draft-max 0 turns speculation off. */
    const char *longname[] = {"--model-draft", model, "--draft-max", "0", "-v", NULL};
    free(run(base, longname, NULL, 0, &err));
    assert_null(strstr(err, "speculation"));
    free(err);
}

FX_TEST(spec_cli_prompt_cache_then_speculation_gives_the_same_text) {
    /* The second run loads the prompt's state from the file: the tokens of those positions are
     * not known to the generator, so the drafters work from the rest. */
    char model[PATH_MAX];
    path_of(NULL, model);
    const char *base[] = {"run", "-m",     model, "-p",           REPETITIVE, "-n",
                          "40",  "--temp", "0",   "--ignore-eos", NULL};
    char *want = run(base, (const char *const[]){"--spec", "none", NULL}, NULL, 0, NULL);
    static const char *const modes[][6] = {
        {"--spec", "ngram", "--spec-fixed", NULL},
        {"-md", "DRAFT", "--spec-fixed", NULL},
    };
    for (size_t m = 0; m < 2; m++) {
        char name[32];
        snprintf(name, sizeof name, "spec-cache-%zu.bin", m);
        char cache[PATH_MAX];
        snprintf(cache, sizeof cache, "%s", fx_test_tmpfile(name));
        free(run(base, (const char *const[]){"--spec", "none", "--prompt-cache", cache, NULL}, NULL,
                 0, NULL));
        const char *extra[8] = {"--prompt-cache", cache};
        int n = 2;
        for (int i = 0; modes[m][i]; i++)
            extra[n++] = strcmp(modes[m][i], "DRAFT") == 0 ? model : modes[m][i];
        extra[n] = NULL;
        char *err;
        char *got = run(base, extra, NULL, 0, &err);
        assert_non_null(strstr(err, "loaded from it"));
        assert_string_equal(got, want);
        free(got);
        free(err);
    }
    free(want);
}

FX_TEST(spec_cli_chat_turns_are_identical) {
    /* Three turns: the cache keeps the conversation between turns, and the drafters see it. */
    char model[PATH_MAX];
    path_of(NULL, model);
    const char *base[] = {"chat", "-m",     model, "--chat-template", "chatml", "-n",
                          "24",   "--temp", "0",   "--ignore-eos",    "-v",     NULL};
    const char *input = "Tell me a story.\nAnd then?\nOnce upon a time Once upon a time\n";
    char *err;
    char *want = run(base, (const char *const[]){"--spec", "none", NULL}, input, 0, &err);
    assert_null(strstr(err, "speculation"));
    free(err);
    static const char *const modes[][6] = {
        {"--spec", "ngram", "--spec-fixed", NULL},
        {"--spec", "ngram", NULL},
        {"-md", "DRAFT", "--spec-fixed", "--draft-max", "4", NULL},
    };
    for (size_t m = 0; m < 3; m++) {
        const char *extra[8];
        int n = 0;
        for (int i = 0; modes[m][i]; i++)
            extra[n++] = strcmp(modes[m][i], "DRAFT") == 0 ? model : modes[m][i];
        extra[n] = NULL;
        char *got = run(base, extra, input, 0, &err);
        assert_string_equal(got, want);
        assert_non_null(strstr(err, "chat: speculation ("));
        free(got);
        free(err);
    }
    free(want);
}
