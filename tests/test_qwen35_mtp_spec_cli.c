/* `ferrox run` and `ferrox chat` with --spec mtp on the Qwen3.5 fixtures, as a user runs them:
 * greedy text equal to plain decoding's, with -v reporting the head's acceptance and tokens per
 * verify step; seeded sampling equal to plain decoding's whatever the thread count; chat turns;
 * a model without a head refused with a clear error. */
#include "fx_test.h"

#include <stdlib.h>
#include <string.h>

#include "ferrox.h"

static const char *const MODELS[] = {"qwen35-tiny.F32", "qwen35-tiny.Q8_0", "qwen35moe-tiny.F32"};

/* ferrox with args (NULL-terminated, at most 31); fails unless it exits with want. Returns
 * stdout, and stderr into *err when err is not NULL. */
static char *run_cli(const char *const *args, const char *stdin_text, int want, char **err) {
    char *out, *e;
    int rc = fx_test_run_cli(args, stdin_text, &out, &e);
    if (rc != want) {
        char line[2048] = "";
        for (int i = 0; args[i]; i++) {
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

/* `ferrox CMD -m MODEL` then base, then extra, then -t threads. */
static char *ferrox(const char *cmd, const char *model, const char *const *base,
                    const char *const *extra, const char *threads, const char *stdin_text,
                    char **err) {
    char rel[128];
    snprintf(rel, sizeof rel, "qwen35/models/%s.gguf", model);
    const char *args[32] = {cmd, "-m", fx_test_fixture(rel)};
    int n = 3;
    for (int i = 0; base[i]; i++)
        args[n++] = base[i];
    for (int i = 0; extra && extra[i]; i++)
        args[n++] = extra[i];
    args[n++] = "-t";
    args[n++] = threads;
    assert_true(n < 32);
    args[n] = NULL;
    return run_cli(args, stdin_text, 0, err);
}

static const char *const PROMPT = "Once upon a time, there was a little";

FX_TEST(qwen35_mtp_cli_run_greedy_equals_plain) {
    static const char *const base[] = {"-p", PROMPT,         "-n", "48", "--temp",
                                       "0",  "--ignore-eos", "-v", NULL};
    for (size_t f = 0; f < sizeof MODELS / sizeof MODELS[0]; f++) {
        char *err;
        char *want = ferrox("run", MODELS[f], base, (const char *const[]){"--spec", "none", NULL},
                            "1", NULL, NULL);
        static const char *const modes[][4] = {{"--spec", "mtp", NULL},
                                               {"--spec", "mtp", "--spec-fixed", NULL}};
        for (size_t k = 0; k < 2; k++) {
            char *got = ferrox("run", MODELS[f], base, modes[k], "1", NULL, &err);
            assert_string_equal(got, want);
            /* -v reports the head's acceptance and the tokens per verify step. */
            const char *line = strstr(err, "speculation (mtp): acceptance ");
            assert_non_null(line);
            assert_non_null(strstr(line, "tokens per verify step"));
            if (k == 1)
                print_message("  %s: %.*s", MODELS[f], (int)strcspn(line, "\n") + 1, line);
            free(got);
            free(err);
        }
        free(want);
    }
}

FX_TEST(qwen35_mtp_cli_run_seeded_sampling_equals_plain) {
    /* The head drafts deterministically (argmax), so a row is sampled with plain decoding's
     * random number and the seeded text is plain decoding's at any temperature; sampled tokens
     * that are not the trunk's argmax make the drafter compute the head's row again. The same
     * with one worker or three. */
    static const char *const base[] = {"-p",  PROMPT, "-n", "48",           "--temp",
                                       "0.8", "-s",   "7",  "--ignore-eos", NULL};
    static const char *const mtp[] = {"--spec", "mtp", "--spec-fixed", NULL};
    for (size_t f = 0; f < sizeof MODELS / sizeof MODELS[0]; f++) {
        char *want = ferrox("run", MODELS[f], base, (const char *const[]){"--spec", "none", NULL},
                            "1", NULL, NULL);
        char *got1 = ferrox("run", MODELS[f], base, mtp, "1", NULL, NULL);
        char *got3 = ferrox("run", MODELS[f], base, mtp, "3", NULL, NULL);
        assert_string_equal(got1, want);
        assert_string_equal(got3, want);
        free(want);
        free(got1);
        free(got3);
    }
}

FX_TEST(qwen35_mtp_cli_chat_turns_equal_plain) {
    /* Three turns: each prompt is prefilled through the drafter, which catches its head up. */
    static const char *const base[] = {"--chat-template", "chatml", "-n", "24", "--temp", "0",
                                       "--ignore-eos",    "-v",     NULL};
    const char *input = "Tell me a story.\nAnd then?\nOnce upon a time Once upon a time\n";
    char *want = ferrox("chat", MODELS[2], base, (const char *const[]){"--spec", "none", NULL}, "1",
                        input, NULL);
    char *err;
    char *got =
        ferrox("chat", MODELS[2], base,
               (const char *const[]){"--spec", "mtp", "--spec-fixed", NULL}, "1", input, &err);
    assert_string_equal(got, want);
    assert_non_null(strstr(err, "chat: speculation (mtp)"));
    free(got);
    free(err);
    free(want);
}

FX_TEST(qwen35_mtp_cli_refuses_a_model_without_a_head) {
    const char *args[] = {"run", "-m",     fx_test_fixture("models/qwen3-tiny.F32.gguf"),
                          "-p",  "Once",   "-n",
                          "4",   "--spec", "mtp",
                          NULL};
    char *err;
    free(run_cli(args, NULL, 1, &err));
    print_message("  %s", err);
    assert_non_null(strstr(err, "--spec mtp: this qwen3 model has no multi-token-prediction head"));
    free(err);
}
