#include "golden.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fx_test.h"

json_t *fx_test_json_load(const char *rel) {
    const char *path = fx_test_fixture(rel);
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    if (!root)
        fail_msg("%s: %s", path, jerr.text);
    return root;
}

int fx_test_json_ids(json_t *root, const char *field, fx_token *out) {
    json_t *a = json_object_get(root, field);
    if (!json_is_array(a) || json_array_size(a) > FX_GOLDEN_MAX_IDS)
        fail_msg("golden field '%s' is not a short array", field);
    for (size_t i = 0; i < json_array_size(a); i++)
        out[i] = (fx_token)json_integer_value(json_array_get(a, i));
    return (int)json_array_size(a);
}

void fx_test_json_floats(json_t *root, const char *field, float *out, int n) {
    json_t *a = json_object_get(root, field);
    if (!json_is_array(a) || (int)json_array_size(a) != n)
        fail_msg("golden field '%s' has the wrong length", field);
    for (int i = 0; i < n; i++)
        out[i] = (float)json_number_value(json_array_get(a, (size_t)i));
}

float *fx_test_read_matrix(const char *rel, int n_rows, int n_cols) {
    size_t size;
    char *data = fx_test_read_file(fx_test_fixture(rel), &size);
    if (size != (size_t)n_rows * (size_t)n_cols * sizeof(float))
        fail_msg("%s: %zu bytes, expected [%d][%d] floats", rel, size, n_rows, n_cols);
    return (float *)data;
}

void fx_test_golden_load(const char *stem, struct fx_golden *g) {
    memset(g, 0, sizeof *g);
    char rel[256];
    snprintf(rel, sizeof rel, "golden/%s.json", stem);
    json_t *root = fx_test_json_load(rel);
    const char *model = json_string_value(json_object_get(root, "model_file"));
    assert_non_null(model);
    /* stories260K lives beside the fixtures, in the models folder. */
    const char *resolved =
        strncmp(model, "../models/", 10) == 0 ? fx_test_model(model + 10) : fx_test_fixture(model);
    snprintf(g->model_path, sizeof g->model_path, "%s", resolved);
    g->n_vocab = (int)json_integer_value(json_object_get(root, "n_vocab"));
    g->n_prompt = fx_test_json_ids(root, "prompt_ids", g->prompt);
    g->n_gen = fx_test_json_ids(root, "greedy_ids", g->greedy);
    fx_test_json_floats(root, "greedy_top1_minus_top2", g->greedy_margin, g->n_gen);
    fx_test_json_ids(root, "prompt_argmax", g->prompt_argmax);
    fx_test_json_floats(root, "prompt_top1_minus_top2", g->prompt_margin, g->n_prompt);
    g->self_noise =
        (float)json_number_value(json_object_get(root, "batched_vs_sequential_max_abs_diff"));
    g->logits = fx_test_read_matrix(json_string_value(json_object_get(root, "logits_file")),
                                    g->n_prompt, g->n_vocab);
    json_t *kvf32 = json_object_get(json_object_get(root, "flash_attn_off_kv_f32"), "logits_file");
    if (json_is_string(kvf32))
        g->logits_kvf32 = fx_test_read_matrix(json_string_value(kvf32), g->n_prompt, g->n_vocab);
    json_decref(root);
}

void fx_test_golden_free(struct fx_golden *g) {
    free(g->logits);
    free(g->logits_kvf32);
    g->logits = g->logits_kvf32 = NULL;
}

void fx_test_mtp_golden_load(const char *stem, struct fx_mtp_golden *g) {
    memset(g, 0, sizeof *g);
    char rel[256];
    snprintf(rel, sizeof rel, "qwen35/golden/%s.mtp.json", stem);
    json_t *root = fx_test_json_load(rel);
    snprintf(rel, sizeof rel, "qwen35/models/%s",
             json_string_value(json_object_get(root, "model_file")));
    snprintf(g->model_path, sizeof g->model_path, "%s", fx_test_fixture(rel));
    g->n_vocab = (int)json_integer_value(json_object_get(root, "n_vocab"));
    g->n_embd = (int)json_integer_value(json_object_get(root, "n_embd"));
    g->n = fx_test_json_ids(root, "prompt_ids", g->prompt);
    g->next = (fx_token)json_integer_value(json_object_get(root, "trunk_greedy_next"));
    assert_int_equal(fx_test_json_ids(root, "mtp_argmax", g->argmax), g->n + 1);
    g->n_chain = fx_test_json_ids(root, "draft_chain", g->chain);
    snprintf(rel, sizeof rel, "qwen35/golden/%s",
             json_string_value(json_object_get(root, "h_nextn_file")));
    g->h = fx_test_read_matrix(rel, g->n, g->n_embd);
    snprintf(rel, sizeof rel, "qwen35/golden/%s",
             json_string_value(json_object_get(root, "mtp_logits_file")));
    g->logits = fx_test_read_matrix(rel, g->n + 1, g->n_vocab);
    json_decref(root);
}

void fx_test_mtp_golden_free(struct fx_mtp_golden *g) {
    free(g->h);
    free(g->logits);
    g->h = g->logits = NULL;
}

int fx_test_argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

double fx_test_max_diff(const float *a, const float *b, size_t n) {
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= worst))
            worst = isnan(d) ? INFINITY : d;
    }
    return worst;
}

struct fx_model *fx_test_load_model(const char *rel) {
    const char *path = fx_test_fixture(rel);
    struct fx_model *m = NULL;
    struct fx_error err;
    if (fx_model_load(path, NULL, &m, &err) != FX_OK)
        fail_msg("loading %s: %s", path, err.msg);
    return m;
}

struct fx_context *fx_test_context(const struct fx_model *m, const struct fx_context_params *p) {
    struct fx_context *ctx;
    struct fx_error err;
    if (fx_context_create(m, p, &ctx, &err) != FX_OK)
        fail_msg("context: %s", err.msg);
    return ctx;
}

struct fx_context *fx_test_f32_context(const struct fx_model *m, int32_t n_ctx, int32_t n_batch) {
    struct fx_context_params cp = fx_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_batch = n_batch;
    cp.type_k = cp.type_v = FX_TYPE_F32;
    return fx_test_context(m, &cp);
}
