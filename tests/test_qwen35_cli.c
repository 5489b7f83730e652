/* ferrox run on a Qwen3.5 fixture, as a user runs it: greedy text equal to the pieces of
 * llama.cpp's greedy tokens (fixtures/qwen35 P1), by default, decoding plainly and with prompt
 * lookup drafting at every step. */
#include "fx_test.h"
#include "golden.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "ferrox.h"

#define N_GEN 14 /* llama.cpp's greedy step 14 is </s>, where ferrox run stops */

FX_TEST(qwen35_cli_run_greedy) {
    const char *model = fx_test_fixture("qwen35/models/qwen35-tiny.F32.gguf");
    json_t *g = fx_test_json_load("qwen35/golden/qwen35-tiny.F32.P1.json");
    struct fx_vocab *v;
    struct fx_error e;
    assert_int_equal(fx_vocab_load_file(model, &v, &e), FX_OK);
    char want[64 * N_GEN + 1] = "";
    json_t *ids = json_object_get(g, "greedy_ids");
    for (int i = 0; i < N_GEN; i++) {
        size_t len;
        const char *piece = fx_token_to_piece(
            v, (fx_token)json_integer_value(json_array_get(ids, (size_t)i)), false, &len);
        assert_true(len < 64);
        strncat(want, piece, len);
    }
    fx_vocab_free(v);
    json_decref(g);

    /* P1's text; its tokens are the golden's prompt ids (10 with BOS). */
    const char *args[] = {"run", "-m", model,    "-p", "Once upon a time, there was a little",
                          "-n",  "14", "--temp", "0",  "-t",
                          "2",   NULL};
    char *out, *err;
    int rc = fx_test_run_cli(args, NULL, &out, &err);
    if (rc != 0)
        fail_msg("ferrox run exited %d: %s", rc, err);
    assert_string_equal(out, want);
    assert_non_null(strstr(err, "prompt: 10 tokens"));
    free(out);
    free(err);

    /* The same text decoding plainly, and with prompt lookup always drafting (rolled back
     * through the verify steps' snapshots). */
    const char *kinds[][4] = {{"--spec", "none", NULL, NULL},
                              {"--spec", "ngram", "--spec-fixed", "--draft-max=8"}};
    for (int i = 0; i < 2; i++) {
        const char *a[16] = {"run", "-m", model,    "-p", "Once upon a time, there was a little",
                             "-n",  "14", "--temp", "0",  "-t",
                             "2"};
        for (int j = 0; j < 4 && kinds[i][j]; j++)
            a[11 + j] = kinds[i][j];
        rc = fx_test_run_cli(a, NULL, &out, &err);
        if (rc != 0)
            fail_msg("ferrox run %s exited %d: %s", kinds[i][1], rc, err);
        assert_string_equal(out, want);
        free(out);
        free(err);
    }
}
