/* Test helper: the llama.cpp goldens of the shared fixtures (fixtures/README.md section 2): the
 * prompt, all-position logits, the greedy continuation with its margins. */
#ifndef FX_TEST_GOLDEN_H
#define FX_TEST_GOLDEN_H

#include <jansson.h>
#include <limits.h>

#include "ferrox.h"

#define FX_GOLDEN_MAX_IDS 128

struct fx_golden {
    char model_path[PATH_MAX];
    int n_prompt, n_gen, n_vocab;
    fx_token prompt[FX_GOLDEN_MAX_IDS];
    fx_token greedy[FX_GOLDEN_MAX_IDS];
    float greedy_margin[FX_GOLDEN_MAX_IDS]; /* top1 - top2 logit at each greedy step */
    fx_token prompt_argmax[FX_GOLDEN_MAX_IDS];
    float prompt_margin[FX_GOLDEN_MAX_IDS];
    float self_noise;    /* llama.cpp batched vs sequential max |diff| on this file */
    float *logits;       /* [n_prompt][n_vocab], f16 KV cache (the default) */
    float *logits_kvf32; /* the same with an f32 KV cache (F32 files only), else NULL */
};

/* Loads golden/<stem>.json (e.g. "llama-tiny.F32.P1", "stories260K.once"); skips the test when
 * the fixtures are absent (fails under CI=true). */
void fx_test_golden_load(const char *stem, struct fx_golden *g);
void fx_test_golden_free(struct fx_golden *g);

/* The MTP-head goldens of the Qwen3.5 fixtures (fixtures/qwen35/README.md, "MTP / NextN head"):
 * golden/<stem>.mtp.json and the files it names. */
struct fx_mtp_golden {
    char model_path[PATH_MAX];
    int n, n_vocab, n_embd, n_chain;
    fx_token prompt[FX_GOLDEN_MAX_IDS], next, argmax[FX_GOLDEN_MAX_IDS], chain[FX_GOLDEN_MAX_IDS];
    float *h;      /* [n][n_embd] the trunk's h_nextn rows */
    float *logits; /* [n + 1][n_vocab] the head's logits at MTP positions 0..n */
};

/* Loads qwen35/golden/<stem>.mtp.json (e.g. "qwen35-tiny.F32.P1"). */
void fx_test_mtp_golden_load(const char *stem, struct fx_mtp_golden *g);
void fx_test_mtp_golden_free(struct fx_mtp_golden *g);

/* The fixture JSON file at rel (under FERROX_FIXTURES), parsed; skips the test when absent (fails
 * under CI=true) and fails it when the file does not parse. The caller json_decref()s it. */
json_t *fx_test_json_load(const char *rel);
/* The integer array root[field] into out[0..n) (n <= FX_GOLDEN_MAX_IDS, else the test fails);
 * returns n. */
int fx_test_json_ids(json_t *root, const char *field, fx_token *out);
/* The number array root[field] into out[0..n); the test fails unless it has exactly n values. */
void fx_test_json_floats(json_t *root, const char *field, float *out, int n);
/* The raw float file at rel (under FERROX_FIXTURES) as malloc'd [n_rows][n_cols]; the test fails
 * unless its size is exactly that. */
float *fx_test_read_matrix(const char *rel, int n_rows, int n_cols);

/* The first index of the largest of x[0..n). */
int fx_test_argmax(const float *x, int n);
/* The largest |a[i] - b[i]| over n values; infinity when either holds a NaN. */
double fx_test_max_diff(const float *a, const float *b, size_t n);
/* The fixture model at rel (under FERROX_FIXTURES); skips the test when the file is absent (fails
 * under CI=true) and fails it when the model does not load. */
struct fx_model *fx_test_load_model(const char *rel);
/* A context on m with parameters p; the test fails when it cannot be made. */
struct fx_context *fx_test_context(const struct fx_model *m, const struct fx_context_params *p);
/* Fails the test, naming the call and its error, when call does not return FX_OK; call reports
 * into the struct fx_error e_ that the macro declares: FX_TEST_OK(fx_forward_token(..., &e_)). */
#define FX_TEST_OK(call)                                                                           \
    do {                                                                                           \
        struct fx_error e_;                                                                        \
        fx_status st_ = (call);                                                                    \
        if (st_ != FX_OK)                                                                          \
            fail_msg("%s: %s", #call, e_.msg);                                                     \
    } while (0)
/* A context on m with an f32 cache (the goldens' setting), n_ctx positions and n_batch rows per
 * pass (0: the default); the test fails when it cannot be made. */
struct fx_context *fx_test_f32_context(const struct fx_model *m, int32_t n_ctx, int32_t n_batch);

#endif
