/* ferrox bench --parallel (llama-batched-bench's figures), bench's -ctk / -ctv and -d, run as a
 * user would run them. */
#include "fx_test.h"

#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* |a - b| within a relative 1e-6 of b: the figures are printed as doubles from the same times. */
static void assert_close(double a, double b) {
    if (!(fabs(a - b) <= 1e-6 * fabs(b)))
        fail_msg("%.17g is not %.17g", a, b);
}

static double number(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    if (!json_is_number(v))
        fail_msg("field '%s' is missing or not a number", key);
    return json_number_value(v);
}

static const char *string(json_t *o, const char *key) {
    const char *s = json_string_value(json_object_get(o, key));
    if (!s)
        fail_msg("field '%s' is missing or not a string", key);
    return s;
}

/* Parses stdout as JSON lines into *lines (at most max); returns how many. */
static int json_lines(char *out, json_t **lines, int max) {
    int n = 0;
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
        if (n == max)
            fail_msg("more than %d lines", max);
        json_error_t jerr;
        if (!(lines[n++] = json_loads(line, 0, &jerr)))
            fail_msg("not a JSON line (%s): %s", jerr.text, line);
    }
    return n;
}

/* PL 1 and 2 as JSON lines, timed on the wall clock or (cpu_time) on the process's CPU time:
 * the figures follow from the times either way. */
static void expect_json_lines_add_up(bool cpu_time) {
    const char *model = fx_test_fixture("models/llama-tiny.F32.gguf");
    const char *args[] = {
        "bench", "-m", model, "--parallel", "1,2", "-npp", "8",
        "-ntg",  "4",  "-o",  "json",       "-r",  "1",    cpu_time ? "--cpu-time" : NULL,
        NULL};
    char *out, *err;
    int rc = fx_test_run_cli(args, NULL, &out, &err);
    if (rc != 0)
        fail_msg("ferrox bench exited %d: %s", rc, err);
    json_t *lines[4];
    assert_int_equal(json_lines(out, lines, 4), 2);
    for (int i = 0; i < 2; i++) {
        json_t *o = lines[i];
        int pl = i + 1;
        assert_string_equal(string(o, "model_filename"), model);
        assert_string_equal(string(o, "type_k"), "f16"); /* the default */
        assert_string_equal(string(o, "type_v"), "f16");
        assert_int_equal((int)number(o, "pp"), 8);
        assert_int_equal((int)number(o, "tg"), 4);
        assert_int_equal((int)number(o, "pl"), pl);
        assert_int_equal((int)number(o, "n_kv"), pl * (8 + 4));
        assert_true(number(o, "n_kv_max") >= pl * (8 + 4));
        assert_int_equal((int)number(o, "n_batch"), 512);
        double t_pp = number(o, "t_pp"), t_tg = number(o, "t_tg"), t = number(o, "t");
        assert_true(t_pp > 0.0 && t_tg > 0.0 && isfinite(t));
        assert_close(number(o, "speed_pp") * t_pp, pl * 8.0);
        assert_close(number(o, "speed_tg") * t_tg, pl * 4.0);
        assert_close(t, t_pp + t_tg);
        assert_close(number(o, "speed") * t, pl * 12.0);
        json_decref(o);
    }
    free(out);
    free(err);
}

FX_TEST(cli_bench_parallel_json_lines_add_up) {
    expect_json_lines_add_up(false);
}

FX_TEST(cli_bench_parallel_cpu_time_json_lines_add_up) {
    expect_json_lines_add_up(true);
}

/* Prefill in steps of 5 rows (-b 5): 3 sequences of 7 prompt rows cross step boundaries inside
 * sequences; the md table has one row per configuration. */
FX_TEST(cli_bench_parallel_md_small_batches_and_f16_cache) {
    const char *model = fx_test_fixture("models/llama-tiny.F32.gguf");
    const char *args[] = {"bench", "-m", model, "-npl", "3",    "-npp", "7",    "-ntg", "2",
                          "-b",    "5",  "-t",  "1",    "-ctk", "f16",  "-ctv", "f16",  NULL};
    char *out, *err;
    int rc = fx_test_run_cli(args, NULL, &out, &err);
    if (rc != 0)
        fail_msg("ferrox bench exited %d: %s", rc, err);
    assert_non_null(strstr(out, "| S_TG t/s |"));
    assert_non_null(strstr(out, "type_k = f16, type_v = f16"));
    assert_non_null(strstr(out, "|     7 |      2 |    3 |     27 |"));
    free(out);
    free(err);
}

FX_TEST(cli_bench_cache_types_in_json_and_md) {
    const char *model = fx_test_fixture("models/llama-tiny.F32.gguf");
    const char *json_args[] = {"bench", "-m", model, "-p",   "8",    "-n", "4",    "-r",
                               "1",     "-t", "1",   "-ctk", "q8_0", "-o", "json", NULL};
    char *out, *err;
    int rc = fx_test_run_cli(json_args, NULL, &out, &err);
    if (rc != 0)
        fail_msg("ferrox bench exited %d: %s", rc, err);
    json_error_t jerr;
    json_t *doc = json_loads(out, 0, &jerr);
    if (!doc)
        fail_msg("bench output is not JSON: %s\n%s", jerr.text, out);
    assert_int_equal(json_array_size(doc), 2);
    for (size_t i = 0; i < 2; i++) {
        assert_string_equal(string(json_array_get(doc, i), "type_k"), "q8_0");
        assert_string_equal(string(json_array_get(doc, i), "type_v"), "f16");
    }
    json_decref(doc);
    free(out);
    free(err);

    /* The md table shows the columns only when a type was asked for. */
    const char *md_args[] = {"bench", "-m", model, "-p", "8", "-n",
                             "0",     "-r", "1",   "-t", "1", "--cache-type-v",
                             "q8_0",  NULL};
    assert_int_equal(fx_test_run_cli(md_args, NULL, &out, &err), 0);
    assert_non_null(strstr(out, "| type_k | type_v |"));
    assert_non_null(strstr(out, "|    f16 |   q8_0 |")); /* f16: the default key type */
    free(out);
    free(err);
    md_args[11] = NULL;
    assert_int_equal(fx_test_run_cli(md_args, NULL, &out, &err), 0);
    assert_null(strstr(out, "type_k"));
    free(out);
    free(err);
}

FX_TEST(cli_bench_rejects_bad_cache_type_and_lists) {
    const char *model = fx_test_fixture("models/llama-tiny.F32.gguf");
    const char *bad_type[] = {"bench", "-m", model, "-ctk", "q4_0", NULL};
    char *err;
    assert_int_equal(fx_test_run_cli(bad_type, NULL, NULL, &err), 2);
    assert_non_null(strstr(err, "q4_0"));
    free(err);
    const char *bad_list[] = {"bench", "-m", model, "--parallel", "1,0", NULL};
    assert_int_equal(fx_test_run_cli(bad_list, NULL, NULL, &err), 2);
    assert_non_null(strstr(err, "1,0"));
    free(err);
}

/* -d: every test starts with the depth's positions in the cache (--progress reports what the
 * cache holds as each repetition starts), tests run in llama-bench's order, each depth in turn,
 * and the JSON carries n_depth. */
FX_TEST(bench_depth_fills_the_cache_before_each_repetition) {
    const char *model = fx_test_fixture("models/llama-tiny.F32.gguf");
    const char *args[] = {"bench", "-m", model, "-p", "8",  "-n",   "4",          "-d", "0,40",
                          "-r",    "2",  "-t",  "1",  "-o", "json", "--progress", NULL};
    char *out, *err;
    int rc = fx_test_run_cli(args, NULL, &out, &err);
    if (rc != 0)
        fail_msg("ferrox bench exited %d: %s", rc, err);
    json_error_t jerr;
    json_t *doc = json_loads(out, 0, &jerr);
    if (!doc)
        fail_msg("bench output is not JSON: %s\n%s", jerr.text, out);
    assert_int_equal(json_array_size(doc), 4); /* {pp8, tg4} x {d0, d40} */
    for (size_t i = 0; i < 4; i++) {
        json_t *o = json_array_get(doc, i);
        assert_int_equal((int)number(o, "n_prompt"), i < 2 ? 8 : 0);
        assert_int_equal((int)number(o, "n_gen"), i < 2 ? 0 : 4);
        assert_int_equal((int)number(o, "n_depth"), i % 2 ? 40 : 0);
    }
    json_decref(doc);
    static const char *const lines[] = {
        "pp8 @ d0, repetition 2: the cache holds 0 positions\n",
        "pp8 @ d40, warm-up 1: the cache holds 40 positions\n",
        "pp8 @ d40, repetition 2: the cache holds 40 positions\n",
        "tg4 @ d40, repetition 1: the cache holds 40 positions\n",
        "tg4 @ d40, repetition 2: the cache holds 40 positions\n",
    };
    for (size_t i = 0; i < sizeof lines / sizeof *lines; i++)
        if (!strstr(err, lines[i]))
            fail_msg("no line '%s' on stderr:\n%s", lines[i], err);
    free(out);
    free(err);

    /* md names a deep test as llama-bench does */
    const char *md_args[] = {"bench", "-m", model, "-p", "8",  "-n", "0",
                             "-d",    "16", "-r",  "1",  "-t", "1",  NULL};
    assert_int_equal(fx_test_run_cli(md_args, NULL, &out, &err), 0);
    assert_non_null(strstr(out, "|        pp8 @ d16 |"));
    free(out);
    free(err);
}

/* --parallel -d: each configuration's sequences start at the depth (forks of one prefilled
 * root), and the figures still count the positions the configuration evaluates. */
FX_TEST(bench_depth_parallel_sequences_start_at_the_depth) {
    const char *model = fx_test_fixture("models/llama-tiny.F32.gguf");
    const char *args[] = {"bench", "-m", model, "--parallel", "1,3", "-npp", "8", "-ntg", "4", "-d",
                          "0,37",  "-t", "1",   "--progress", "-o",  "json", NULL};
    char *out, *err;
    int rc = fx_test_run_cli(args, NULL, &out, &err);
    if (rc != 0)
        fail_msg("ferrox bench exited %d: %s", rc, err);
    json_t *lines[6];
    assert_int_equal(json_lines(out, lines, 6), 4);
    for (int i = 0; i < 4; i++) {
        int pl = i % 2 ? 3 : 1;
        assert_int_equal((int)number(lines[i], "n_depth"), i < 2 ? 0 : 37);
        assert_int_equal((int)number(lines[i], "pl"), pl);
        assert_int_equal((int)number(lines[i], "n_kv"), pl * (8 + 4));
        assert_true(number(lines[i], "n_kv_max") >= 37 + 3 * (8 + 4));
        json_decref(lines[i]);
    }
    if (!strstr(err, "pp 8 tg 4 pl 3 @ d37: the sequences hold 37..37 positions\n") ||
        !strstr(err, "pp 8 tg 4 pl 3 @ d0: the sequences hold 0..0 positions\n"))
        fail_msg("stderr does not show the depths:\n%s", err);
    free(out);
    free(err);
}

FX_TEST(bench_depth_rejects_bad_lists) {
    const char *model = fx_test_fixture("models/llama-tiny.F32.gguf");
    static const char *const bad[] = {"-1", "4,x", ""};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        const char *args[] = {"bench", "-m", model, "--n-depth", bad[i], NULL};
        char *err;
        assert_int_equal(fx_test_run_cli(args, NULL, NULL, &err), 2);
        assert_non_null(strstr(err, "bad list"));
        free(err);
    }
}
