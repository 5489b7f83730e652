/* ferrox perplexity: llama.cpp's windowing (chunks of CTX tokens, BOS first, the second half
 * scored) checked against a reference computed here through the library in float64, on a few
 * paragraphs of TinyStories-like prose that stories260K knows well. */
#include "fx_test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ferrox.h"

/* The text of the figure quoted in the report. Read from a file, it loses its final newline (as
 * with llama.cpp's -f) and is 419 tokens with stories260K's vocabulary, BOS included: with
 * -c 128 that is 3 chunks, 63 scored tokens each. */
static const char STORY[] =
    "Once upon a time, there was a little girl named Lily. She lived in a small house with her "
    "mom and dad. Lily loved to play in the garden. She liked to look at the flowers and the "
    "birds.\n"
    "One day, Lily saw a big red ball under a tree. She ran to the ball and picked it up. \"This "
    "is a nice ball,\" she said. She wanted to play with it, but she did not know who it belonged "
    "to.\n"
    "Lily saw a boy named Tom. Tom was sad. \"I lost my ball,\" he said. Lily smiled and gave the "
    "ball to Tom. Tom was very happy. \"Thank you, Lily!\" he said. They played with the ball all "
    "day.\n"
    "When the sun went down, Lily went home. Her mom gave her a big hug. \"You were very kind "
    "today,\" her mom said. Lily felt warm and happy. She went to bed and dreamed about the big "
    "red ball.\n"
    "The next day, Tom came to Lily's house. He had a small box. \"This is for you,\" he said. "
    "Lily opened the box. Inside was a pretty blue flower. Lily loved the flower. Tom and Lily "
    "became best friends, and they played together every day.\n";

#define N_CTX 128

/* The running perplexity after each chunk and the final uncertainty, computed independently:
 * each chunk evaluated as one batch of all its rows, log-softmax in float64. */
static int reference(const char *model, double *running, double *ppl, double *err_ppl) {
    struct fx_model *m;
    struct fx_vocab *v;
    struct fx_context *ctx;
    struct fx_error e;
    assert_int_equal(fx_model_load(model, NULL, &m, &e), FX_OK);
    assert_int_equal(fx_vocab_load(fx_model_gguf(m), &v, &e), FX_OK);
    struct fx_context_params cp = fx_context_default_params();
    cp.n_ctx = N_CTX;
    cp.n_batch = N_CTX;
    cp.n_threads = 1;
    assert_int_equal(fx_context_create(m, &cp, &ctx, &e), FX_OK);
    fx_token ids[1024];
    size_t n;
    assert_int_equal(fx_tokenize(v, STORY, strlen(STORY) - 1, true, false, ids, 1024, &n, &e),
                     FX_OK);
    assert_int_equal(n, 419);
    int n_vocab = fx_model_n_vocab(m), n_chunk = (int)n / N_CTX;
    float *logits = malloc(sizeof(float) * N_CTX * (size_t)n_vocab);
    assert_non_null(logits);
    double sum = 0, sum2 = 0;
    long count = 0;
    for (int c = 0; c < n_chunk; c++) {
        fx_token window[N_CTX];
        memcpy(window, ids + c * N_CTX, sizeof window);
        window[0] = fx_vocab_bos(v);
        assert_int_equal(fx_forward_batch(ctx, window, N_CTX, 0, logits, &e), FX_OK);
        for (int p = N_CTX / 2; p < N_CTX - 1; p++) {
            const float *row = logits + (size_t)p * (size_t)n_vocab;
            double max = row[0], z = 0;
            for (int i = 1; i < n_vocab; i++)
                max = row[i] > max ? row[i] : max;
            for (int i = 0; i < n_vocab; i++)
                z += exp((double)row[i] - max);
            double nll = max + log(z) - row[window[p + 1]];
            sum += nll;
            sum2 += nll * nll;
            count++;
        }
        running[c] = exp(sum / (double)count);
    }
    double mean = sum / (double)count;
    *ppl = exp(mean);
    *err_ppl = sqrt((sum2 / (double)count - mean * mean) / (double)(count - 1)) * *ppl;
    free(logits);
    fx_context_free(ctx);
    fx_vocab_free(v);
    fx_model_free(m);
    return n_chunk;
}

FX_TEST(ppl_stories260k_matches_llama_cpp_windowing) {
    const char *model = fx_test_model("stories260K.gguf");
    const char *text = fx_test_tmpfile("story.txt");
    fx_test_write_file(text, STORY, strlen(STORY));
    /* Scored rows in batches of 48 (the reference takes each window whole), one and two
     * threads: the same figures. */
    const char *args1[] = {"perplexity", "-m", model, "-f", text, "-c",
                           "128",        "-b", "48",  "-t", "1",  NULL};
    const char *args2[] = {"perplexity", "-m", model, "-f", text, "-c",
                           "128",        "-b", "48",  "-t", "2",  NULL};
    char *out1, *out2, *err;
    assert_int_equal(fx_test_run_cli(args1, NULL, &out1, &err), 0);
    assert_non_null(strstr(err, "419 tokens, 3 chunks of 128 tokens"));
    free(err);
    assert_int_equal(fx_test_run_cli(args2, NULL, &out2, NULL), 0);
    assert_string_equal(out1, out2);

    double running[8], ppl, err_ppl;
    int n_chunk = reference(model, running, &ppl, &err_ppl);
    assert_int_equal(n_chunk, 3);
    const char *p = out1;
    for (int c = 0; c < n_chunk; c++) {
        int idx;
        double v;
        int used;
        if (sscanf(p, "[%d]%lf,%n", &idx, &v, &used) != 2)
            fail_msg("chunk %d: cannot parse '%s'", c + 1, p);
        assert_int_equal(idx, c + 1);
        /* Printed with 4 decimals. */
        if (fabs(v - running[c]) > 6e-5 + 1e-6 * running[c])
            fail_msg("chunk %d: %.6f, reference %.6f", c + 1, v, running[c]);
        p += used;
    }
    double got, got_err;
    if (sscanf(p, "\nFinal estimate: PPL = %lf +/- %lf\n", &got, &got_err) != 2)
        fail_msg("no final estimate in '%s'", out1);
    assert_true(isfinite(got) && got > 1.0);
    assert_true(fabs(got - ppl) <= 6e-5 + 1e-6 * ppl);
    assert_true(fabs(got_err - err_ppl) <= 6e-6 + 1e-5 * err_ppl);
    free(out1);
    free(out2);
}

FX_TEST(ppl_rejects_a_text_too_short_for_one_window) {
    const char *model = fx_test_model("stories260K.gguf");
    const char *text = fx_test_tmpfile("short.txt");
    const char *s = "Once upon a time, there was a cat.";
    fx_test_write_file(text, s, strlen(s));
    const char *args[] = {"perplexity", "-m", model, "-f", text, "-c", "128", NULL};
    char *out, *err;
    assert_int_equal(fx_test_run_cli(args, NULL, &out, &err), 1);
    assert_string_equal(out, "");
    assert_non_null(strstr(err, "needs at least 256"));
    assert_non_null(strstr(err, "smaller -c"));
    free(out);
    free(err);
    const char *tiny_ctx[] = {"perplexity", "-m", model, "-f", text, "-c", "2", NULL};
    assert_int_equal(fx_test_run_cli(tiny_ctx, NULL, NULL, &err), 2);
    assert_non_null(strstr(err, "-c"));
    free(err);
}
