/* decoder/ against llama.cpp: every fixture model's all-position logits and greedy continuation,
 * through fx_forward_batch, fx_forward_token and fx_forward_batch_last.
 *
 * Tolerances come from the noise the fixtures measure (fixtures/README.md sections 3-4):
 * - F32: llama.cpp differs from itself by up to 0.026 between its batched and sequential paths
 *   (its f16 KV cache); we allow 0.05 against the default golden. ferrox keeps K/V in f32, so the
 *   f32-cache golden is the tight reference: 1e-3 (the README's float64 reference reproduces it
 *   to 1e-5), and 1e-2 for the gemmas, whose golden went through ggml's fp16 GELU table while
 *   ferrox computes GELU exactly (measured gap 4e-3 / 6e-3).
 * - F16 / BF16: ggml rounds activations to the weight's precision, ferrox keeps them f32; the
 *   README measures 0.02 / 0.11 for that alone: 0.1 and 0.2.
 * - Quantized: activation quantization flips int8 roundings; llama.cpp against itself reaches
 *   max 0.45 / RMS 0.081: max 1.0 and RMS 0.15 (the weight format itself moves logits by RMS
 *   0.28-3.2 for every format but Q8_0, so wrong dequantization still fails).
 * - MoE: a near-tie in the router may switch experts for one token: one position may exceed the
 *   max, RMS 0.2 over the prompt.
 * Greedy ids are compared step by step while the golden's top1-top2 margin exceeds llama.cpp's
 * own noise on that file; F32 files have margins >= 0.027 everywhere, so all their steps count.
 *
 * Every path runs with an f32 KV cache (-ctk f32 -ctv f32): the contiguous one, and over a paged
 * pool (one token at a time, prefill, and one multi-sequence step of the whole prompt), which
 * must give the contiguous bytes. F32 models are also run with an f16 cache against the default
 * golden, which llama.cpp computed with one. */
#include "fx_test.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "golden.h"

struct tol {
    float max;       /* max |diff| against the default (f16 KV) golden */
    float rms;       /* RMS |diff| bound, 0 for none */
    float kvf32_max; /* max |diff| against the f32-KV golden, 0 when not checked */
    bool moe;        /* one position may exceed max */
    bool all_greedy; /* every greedy step must be compared (margins above the noise) */
};

static const struct tol TOL_F32 = {0.05f, 0.0f, 1e-3f, false, true};
static const struct tol TOL_F32_GEMMA = {0.05f, 0.0f, 1e-2f, false, true};
static const struct tol TOL_REAL_F32 = {0.05f, 0.0f, 0.0f, false, true}; /* no f32-KV golden */
static const struct tol TOL_F16 = {0.1f, 0.0f, 0.0f, false, false};
static const struct tol TOL_BF16 = {0.2f, 0.0f, 0.0f, false, false};
static const struct tol TOL_QUANT = {1.0f, 0.15f, 0.0f, false, false};
static const struct tol TOL_QUANT_MOE = {1.0f, 0.2f, 0.0f, true, false};

static void compare_logits(const char *what, const float *got, const float *want, int n_rows,
                           int n_vocab, float max_tol, float rms_tol, bool moe) {
    double sq = 0.0, worst = 0.0;
    int over = 0;
    for (int r = 0; r < n_rows; r++) {
        double row_max = 0.0;
        for (int v = 0; v < n_vocab; v++) {
            double d = fabs((double)got[r * n_vocab + v] - want[r * n_vocab + v]);
            if (!(d <= row_max)) /* NaN counts as a failure too */
                row_max = isnan(d) ? INFINITY : d;
            sq += d * d;
        }
        if (row_max > max_tol)
            over++;
        if (row_max > worst)
            worst = row_max;
    }
    double rms = sqrt(sq / ((double)n_rows * n_vocab));
    print_message("  %s: max |diff| %.6f, rms %.6f\n", what, worst, rms);
    if (over > (moe ? 1 : 0))
        fail_msg("%s: %d positions exceed max |diff| %g (worst %g)", what, over, max_tol, worst);
    if (rms_tol > 0.0f && !(rms <= rms_tol))
        fail_msg("%s: rms |diff| %g exceeds %g", what, rms, rms_tol);
}

/* The IQ4 goldens (fixtures/iq4/README.md) in struct fx_golden: iq4/golden/<stem>.json names
 * the model (in iq4/models/) and the logits file beside it, the greedy ids and their margins.
 * The prompt's argmax and margins come from the logits; llama.cpp's own noise on the file is the
 * larger of its batched-vs-sequential and flash-attention differences. */
static void load_iq4_golden(const char *stem, struct fx_golden *g) {
    memset(g, 0, sizeof *g);
    char rel[256];
    snprintf(rel, sizeof rel, "iq4/golden/%s.json", stem);
    json_t *root = fx_test_json_load(rel);
    const char *model = json_string_value(json_object_get(root, "model_file"));
    const char *logits = json_string_value(json_object_get(root, "logits_file"));
    assert_non_null(model);
    assert_non_null(logits);
    snprintf(rel, sizeof rel, "iq4/models/%s", model);
    snprintf(g->model_path, sizeof g->model_path, "%s", fx_test_fixture(rel));
    g->n_vocab = (int)json_integer_value(json_object_get(root, "n_vocab"));
    g->n_prompt = fx_test_json_ids(root, "prompt_ids", g->prompt);
    g->n_gen = fx_test_json_ids(root, "greedy_ids", g->greedy);
    fx_test_json_floats(root, "margins", g->greedy_margin, g->n_gen);
    g->self_noise =
        (float)fmax(json_number_value(json_object_get(root, "max_abs_diff_batch_vs_sequential")),
                    json_number_value(json_object_get(root, "max_abs_diff_vs_flash_attn_auto")));
    snprintf(rel, sizeof rel, "iq4/golden/%s", logits);
    g->logits = fx_test_read_matrix(rel, g->n_prompt, g->n_vocab);
    for (int p = 0; p < g->n_prompt; p++) {
        const float *row = g->logits + (size_t)p * (size_t)g->n_vocab;
        int best = fx_test_argmax(row, g->n_vocab);
        float second = -INFINITY;
        for (int v = 0; v < g->n_vocab; v++)
            if (v != best && row[v] > second)
                second = row[v];
        g->prompt_argmax[p] = best;
        g->prompt_margin[p] = row[best] - second;
    }
    json_decref(root);
}

/* The golden `load` reads for stem against its model, by every path. */
static void check_golden_with(void (*load)(const char *, struct fx_golden *), const char *stem,
                              struct tol tol) {
    struct fx_golden g;
    load(stem, &g);
    struct fx_model *m;
    struct fx_context *ctx;
    struct fx_error err;
    if (fx_model_load(g.model_path, NULL, &m, &err) != FX_OK)
        fail_msg("%s: %s", g.model_path, err.msg);
    struct fx_context_params cp = fx_context_default_params();
    cp.n_ctx = 256;
    cp.type_k = cp.type_v = FX_TYPE_F32;
    assert_int_equal(fx_context_create(m, &cp, &ctx, &err), FX_OK);
    struct fx_context *pctx;
    struct fx_context_params pcp = cp;
    pcp.paged_only = true;
    assert_int_equal(fx_context_create(m, &pcp, &pctx, &err), FX_OK);
    struct fx_kv_pool_params pp = fx_kv_pool_default_params();
    pp.n_blocks = 3 * 256 / 16;
    pp.type_k = pp.type_v = FX_TYPE_F32;
    struct fx_kv_pool *pool;
    assert_int_equal(fx_kv_pool_create(m, &pp, &pool, &err), FX_OK);
    fx_seq_id s_tok, s_pre, s_multi;
    assert_int_equal(fx_kv_seq_create(pool, &s_tok, &err), FX_OK);
    assert_int_equal(fx_kv_seq_create(pool, &s_pre, &err), FX_OK);
    assert_int_equal(fx_kv_seq_create(pool, &s_multi, &err), FX_OK);
    int nv = g.n_vocab, np = g.n_prompt;
    assert_int_equal(fx_model_n_vocab(m), nv);
    float *batch = malloc(sizeof(float) * (size_t)(np * nv));
    float *seq = malloc(sizeof(float) * (size_t)(np * nv));
    float *row = malloc(sizeof(float) * (size_t)nv);
    assert_non_null(batch);
    assert_non_null(seq);
    assert_non_null(row);

    /* All positions as one batch. */
    assert_int_equal(fx_forward_batch(ctx, g.prompt, np, 0, batch, &err), FX_OK);
    compare_logits("batch vs golden", batch, g.logits, np, nv, tol.max, tol.rms, tol.moe);
    if (tol.kvf32_max > 0.0f) {
        assert_non_null(g.logits_kvf32);
        compare_logits("batch vs f32-KV golden", batch, g.logits_kvf32, np, nv, tol.kvf32_max, 0.0f,
                       false);
    }
    for (int p = 0; p < np; p++)
        if (g.prompt_margin[p] > 2.0f * tol.max)
            assert_int_equal(fx_test_argmax(batch + p * nv, nv), g.prompt_argmax[p]);

    /* One token at a time: the same rows, bit for bit (each row is computed by the same code in
     * the same order whether it arrives alone or in a batch). */
    assert_int_equal(fx_context_kv_truncate(ctx, 0, &err), FX_OK);
    for (int p = 0; p < np; p++)
        assert_int_equal(fx_forward_token(ctx, g.prompt[p], p, seq + p * nv, &err), FX_OK);
    assert_memory_equal(seq, batch, sizeof(float) * (size_t)(np * nv));
    /* The same over the pool, one token at a time and as one multi-sequence step. */
    for (int p = 0; p < np; p++)
        assert_int_equal(
            fx_forward_token_paged(pctx, pool, s_tok, g.prompt[p], p, seq + p * nv, &err), FX_OK);
    assert_memory_equal(seq, batch, sizeof(float) * (size_t)(np * nv));
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)np);
    fx_seq_id *ids = malloc(sizeof(fx_seq_id) * (size_t)np);
    assert_non_null(pos);
    assert_non_null(ids);
    for (int p = 0; p < np; p++)
        pos[p] = p, ids[p] = s_multi;
    struct fx_batch b = {.n = np, .token = g.prompt, .pos = pos, .seq = ids};
    assert_int_equal(fx_forward_multi_seq(pctx, pool, &b, seq, &err), FX_OK);
    assert_memory_equal(seq, batch, sizeof(float) * (size_t)(np * nv));
    free(pos);
    free(ids);

    /* Greedy: prefill with the last row only, then one token per step. */
    assert_int_equal(fx_context_kv_truncate(ctx, 0, &err), FX_OK);
    assert_int_equal(fx_forward_batch_last(ctx, g.prompt, np, 0, row, &err), FX_OK);
    assert_memory_equal(row, batch + (np - 1) * nv, sizeof(float) * (size_t)nv);
    assert_int_equal(fx_forward_batch_last_paged(pctx, pool, s_pre, g.prompt, np, 0, seq, &err),
                     FX_OK);
    assert_memory_equal(seq, row, sizeof(float) * (size_t)nv);
    int compared = 0;
    for (int k = 0; k < g.n_gen; k++) {
        fx_token t = fx_test_argmax(row, nv);
        if (g.greedy_margin[k] <= g.self_noise)
            break; /* llama.cpp itself may go either way from here on */
        if (t != g.greedy[k])
            fail_msg("%s: greedy step %d gives %d, golden %d (margin %g)", stem, k, t, g.greedy[k],
                     g.greedy_margin[k]);
        compared++;
        assert_int_equal(fx_forward_token(ctx, t, np + k, row, &err), FX_OK);
        assert_int_equal(fx_forward_token_paged(pctx, pool, s_pre, t, np + k, seq, &err), FX_OK);
        assert_memory_equal(seq, row, sizeof(float) * (size_t)nv);
    }
    print_message("  greedy: %d of %d steps compared\n", compared, g.n_gen);
    if (tol.all_greedy)
        assert_int_equal(compared, g.n_gen);

    /* An f16 cache, as llama.cpp's default golden had. */
    if (tol.kvf32_max > 0.0f) {
        struct fx_context *hctx;
        struct fx_context_params hcp = cp;
        hcp.type_k = hcp.type_v = FX_TYPE_F16;
        assert_int_equal(fx_context_create(m, &hcp, &hctx, &err), FX_OK);
        assert_int_equal(fx_forward_batch(hctx, g.prompt, np, 0, seq, &err), FX_OK);
        compare_logits("f16 KV cache vs golden", seq, g.logits, np, nv, tol.max, 0.0f, false);
        fx_context_free(hctx);
    }

    free(batch);
    free(seq);
    free(row);
    fx_kv_pool_free(pool);
    fx_context_free(pctx);
    fx_context_free(ctx);
    fx_model_free(m);
    fx_test_golden_free(&g);
}

static void check_golden(const char *stem, struct tol tol) {
    check_golden_with(fx_test_golden_load, stem, tol);
}

#define GOLDEN(name, stem, tol)                                                                    \
    FX_TEST(decoder_golden_##name) {                                                               \
        check_golden(stem, tol);                                                                   \
    }

GOLDEN(llama_tiny_f32, "llama-tiny.F32.P1", TOL_F32)
GOLDEN(llama_tiny_f16, "llama-tiny.F16.P1", TOL_F16)
GOLDEN(llama_tiny_bf16, "llama-tiny.BF16.P1", TOL_BF16)
GOLDEN(llama_tiny_q8_0, "llama-tiny.Q8_0.P1", TOL_QUANT)
GOLDEN(llama_tiny_q6_k, "llama-tiny.Q6_K.P1", TOL_QUANT)
GOLDEN(llama_tiny_q5_1, "llama-tiny.Q5_1.P1", TOL_QUANT)
GOLDEN(llama_tiny_q5_0, "llama-tiny.Q5_0.P1", TOL_QUANT)
GOLDEN(llama_tiny_q5_k, "llama-tiny.Q5_K.P1", TOL_QUANT)
GOLDEN(llama_tiny_q4_1, "llama-tiny.Q4_1.P1", TOL_QUANT)
GOLDEN(llama_tiny_q4_0, "llama-tiny.Q4_0.P1", TOL_QUANT)
GOLDEN(llama_tiny_q4_k, "llama-tiny.Q4_K.P1", TOL_QUANT)
GOLDEN(llama_tiny_q3_k, "llama-tiny.Q3_K.P1", TOL_QUANT)
GOLDEN(llama_tiny_q2_k, "llama-tiny.Q2_K.P1", TOL_QUANT)
GOLDEN(llama_tiny_tied_f32, "llama-tiny-tied.F32.P1", TOL_F32)
GOLDEN(llama_tiny_tied_q8_0, "llama-tiny-tied.Q8_0.P1", TOL_QUANT)
GOLDEN(qwen2_tiny_f32, "qwen2-tiny.F32.P1", TOL_F32)
GOLDEN(qwen2_tiny_q8_0, "qwen2-tiny.Q8_0.P1", TOL_QUANT)
GOLDEN(qwen3_tiny_f32, "qwen3-tiny.F32.P1", TOL_F32)
GOLDEN(qwen3_tiny_q8_0, "qwen3-tiny.Q8_0.P1", TOL_QUANT)
GOLDEN(qwen3_tiny_q4_k_m, "qwen3-tiny.Q4_K_M.P1", TOL_QUANT)
GOLDEN(gemma2_tiny_f32, "gemma2-tiny.F32.P1", TOL_F32_GEMMA)
GOLDEN(gemma3_tiny_f32, "gemma3-tiny.F32.P1", TOL_F32_GEMMA)
GOLDEN(gemma3_tiny_q8_0, "gemma3-tiny.Q8_0.P1", TOL_QUANT)
GOLDEN(qwen3moe_tiny_f32, "qwen3moe-tiny.F32.P1", TOL_F32)
GOLDEN(qwen3moe_tiny_q8_0, "qwen3moe-tiny.Q8_0.P1", TOL_QUANT_MOE)
GOLDEN(gptoss_tiny_f32, "gptoss-tiny.F32.P1", TOL_F32)
GOLDEN(gptoss_tiny_mxfp4, "gptoss-tiny.MXFP4_MOE.P1", TOL_QUANT_MOE)
GOLDEN(stories260k_once, "stories260K.once", TOL_REAL_F32)
GOLDEN(stories260k_lily, "stories260K.lily", TOL_REAL_F32)

/* Every greedy step whose golden margin is clear of the noise, each step fed the golden's token
 * (so that a near-tie earlier on, which may go either way, does not end the comparison). */
static void check_forced_greedy(const char *stem) {
    struct fx_golden g;
    load_iq4_golden(stem, &g);
    struct fx_model *m;
    struct fx_context *ctx;
    struct fx_error err;
    if (fx_model_load(g.model_path, NULL, &m, &err) != FX_OK)
        fail_msg("%s: %s", g.model_path, err.msg);
    struct fx_context_params cp = fx_context_default_params();
    cp.n_ctx = 256;
    cp.type_k = cp.type_v = FX_TYPE_F32;
    assert_int_equal(fx_context_create(m, &cp, &ctx, &err), FX_OK);
    float *row = malloc(sizeof(float) * (size_t)g.n_vocab);
    assert_non_null(row);
    assert_int_equal(fx_forward_batch_last(ctx, g.prompt, g.n_prompt, 0, row, &err), FX_OK);
    int compared = 0;
    for (int k = 0; k < g.n_gen; k++) {
        if (g.greedy_margin[k] > g.self_noise) {
            if (fx_test_argmax(row, g.n_vocab) != g.greedy[k])
                fail_msg("%s: step %d gives %d, golden %d (margin %g)", stem, k,
                         fx_test_argmax(row, g.n_vocab), g.greedy[k], g.greedy_margin[k]);
            compared++;
        }
        assert_int_equal(fx_forward_token(ctx, g.greedy[k], g.n_prompt + k, row, &err), FX_OK);
    }
    print_message("  golden-fed greedy: %d of %d steps compared\n", compared, g.n_gen);
    free(row);
    fx_context_free(ctx);
    fx_model_free(m);
    fx_test_golden_free(&g);
}

/* The IQ4 files, evaluated by llama.cpp with an f32 KV cache (fixtures/iq4/README.md). */
FX_TEST(decoder_golden_llama_tiny_iq4_nl) {
    check_golden_with(load_iq4_golden, "llama-tiny.IQ4_NL.P1", TOL_QUANT);
    check_forced_greedy("llama-tiny.IQ4_NL.P1");
}

FX_TEST(decoder_golden_llama_tiny_iq4_xs) {
    check_golden_with(load_iq4_golden, "llama-tiny.IQ4_XS.P1", TOL_QUANT);
    check_forced_greedy("llama-tiny.IQ4_XS.P1");
}
