/* ferrox eval and ferrox bench, run as a user would run them. */
#include "fx_test.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "golden.h"

FX_TEST(cli_eval_writes_golden_logits_and_greedy_ids) {
    struct fx_golden g;
    fx_test_golden_load("llama-tiny.F32.P1", &g);
    char ids[512] = "", *p = ids;
    for (int i = 0; i < g.n_prompt; i++)
        p += snprintf(p, sizeof ids - (size_t)(p - ids), i ? ",%d" : "%d", g.prompt[i]);
    const char *out_path = fx_test_tmpfile("eval.logits");
    for (int run = 0; run < 4; run++) {
        int sequential = run % 2;
        const char *kv = run < 2 ? "contig" : "paged";
        /* The f32-KV golden, compared with an f32 cache (the default is f16), through the
         * contiguous cache and a paged pool. */
        const char *args[] = {
            "eval",   "-m",       g.model_path, "--ids", ids, "--logits-out",
            out_path, "--greedy", "32",         "-t",    "2", "-ctk",
            "f32",    "-ctv",     "f32",        "--kv",  kv,  sequential ? "--sequential" : NULL,
            NULL};
        char *out, *err;
        int rc = fx_test_run_cli(args, NULL, &out, &err);
        if (rc != 0)
            fail_msg("ferrox eval exited %d: %s", rc, err);
        /* stdout: exactly the greedy ids on one line. */
        char expect[1024] = "", *e = expect;
        for (int k = 0; k < g.n_gen; k++)
            e += snprintf(e, sizeof expect - (size_t)(e - expect), k ? " %d" : "%d", g.greedy[k]);
        snprintf(e, sizeof expect - (size_t)(e - expect), "\n");
        assert_string_equal(out, expect);
        size_t size;
        float *logits = (float *)fx_test_read_file(out_path, &size);
        assert_int_equal(size, sizeof(float) * (size_t)(g.n_prompt * g.n_vocab));
        for (int i = 0; i < g.n_prompt * g.n_vocab; i++)
            assert_true(fabsf(logits[i] - g.logits_kvf32[i]) <= 1e-3f);
        free(logits);
        free(out);
        free(err);
    }
    fx_test_golden_free(&g);
}

FX_TEST(cli_eval_rejects_bad_input) {
    const char *model = fx_test_fixture("models/llama-tiny-tied.F32.gguf");
    const char *bad_ids[] = {"eval", "-m", model, "--ids", "1,x,3", NULL};
    char *err;
    assert_int_equal(fx_test_run_cli(bad_ids, NULL, NULL, &err), 2);
    assert_non_null(strstr(err, "--ids"));
    free(err);
    const char *big_id[] = {"eval", "-m", model, "--ids", "1,512", NULL};
    assert_int_equal(fx_test_run_cli(big_id, NULL, NULL, &err), 1);
    assert_non_null(strstr(err, "token 512"));
    free(err);
    const char *no_file[] = {"eval", "-m", "/nonexistent.gguf", "--ids", "1", NULL};
    assert_int_equal(fx_test_run_cli(no_file, NULL, NULL, &err), 1);
    assert_non_null(strstr(err, "/nonexistent.gguf"));
    free(err);
}

FX_TEST(cli_bench_json_has_llama_bench_fields) {
    const char *model = fx_test_fixture("models/qwen3-tiny.Q8_0.gguf");
    const char *args[] = {"bench", "-m",  model, "-p", "16", "-n",   "8",
                          "-t",    "1,2", "-r",  "2",  "-o", "json", NULL};
    char *out, *err;
    int rc = fx_test_run_cli(args, NULL, &out, &err);
    if (rc != 0)
        fail_msg("ferrox bench exited %d: %s", rc, err);
    json_error_t jerr;
    json_t *doc = json_loads(out, 0, &jerr);
    if (!doc)
        fail_msg("bench output is not JSON: %s\n%s", jerr.text, out);
    assert_int_equal(json_array_size(doc), 4); /* {pp16, tg8} x {1, 2} threads */
    for (size_t i = 0; i < 4; i++) {
        json_t *o = json_array_get(doc, i);
        assert_string_equal(json_string_value(json_object_get(o, "model_filename")), model);
        int threads = (int)json_integer_value(json_object_get(o, "n_threads"));
        int n_prompt = (int)json_integer_value(json_object_get(o, "n_prompt"));
        int n_gen = (int)json_integer_value(json_object_get(o, "n_gen"));
        assert_int_equal(threads, i < 2 ? 1 : 2);
        assert_int_equal(n_prompt, i % 2 == 0 ? 16 : 0);
        assert_int_equal(n_gen, i % 2 == 0 ? 0 : 8);
        double avg = json_number_value(json_object_get(o, "avg_ts"));
        assert_true(avg > 0.0 && isfinite(avg));
        assert_true(json_is_number(json_object_get(o, "stddev_ts")));
        assert_int_equal(json_array_size(json_object_get(o, "samples_ts")), 2);
    }
    json_decref(doc);
    free(out);
    free(err);
}
