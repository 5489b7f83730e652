/* cuda: the fixture goldens (llama.cpp's logits, fixtures/README.md) through a context with GPU
 * layers, every prompt position a device decode step (fx_forward_token), for each fixture model
 * the device step computes.
 *
 * Tolerances are tests/test_decoder_golden.c's for the CPU decoder (they come from llama.cpp's
 * own noise on each file), which the device meets if it stays within test_cuda_decode.c's 1e-4 of
 * the logits' scale of the CPU decoder: that adds at most ~1e-3 on these files (logits below 10),
 * hence the f32-KV bound of 2e-3 where the CPU has 1e-3. Quantized files: the device keeps
 * activations f32 where llama.cpp (and the CPU tables) quantize them, a difference of the size of
 * the activation-quantization noise those bounds were set from; derived, not measured (no GPU
 * when this was written). */
#include "fx_test.h"

#include <math.h>
#include <stdlib.h>

#include "cuda_test.h"
#include "golden.h"

struct gold_tol {
    float max, rms; /* against the default (f16 KV) golden; rms 0: not checked */
    float kvf32;    /* against the f32-KV golden (F32 files), 0: none */
};

static void compare(const char *stem, const char *what, const float *got, const float *want,
                    int n_rows, int n_vocab, float max_tol, float rms_tol) {
    double sq = 0, worst = 0;
    for (int64_t i = 0; i < (int64_t)n_rows * n_vocab; i++) {
        double d = fabs((double)got[i] - want[i]);
        if (!(d <= worst))
            worst = isnan(d) ? INFINITY : d;
        sq += d * d;
    }
    double rms = sqrt(sq / ((double)n_rows * n_vocab));
    print_message("  %s %s: max |diff| %.6f, rms %.6f\n", stem, what, worst, rms);
    if (!(worst <= max_tol))
        fail_msg("%s %s: max |diff| %g exceeds %g", stem, what, worst, max_tol);
    if (rms_tol > 0 && !(rms <= rms_tol))
        fail_msg("%s %s: rms |diff| %g exceeds %g", stem, what, rms, rms_tol);
}

/* The prompt's logits, one device step per position, over a cache of kv_type. */
static float *device_logits(const struct fx_golden *g, enum fx_type kv_type) {
    struct fx_model *m;
    struct fx_error err = {0};
    if (fx_model_load(g->model_path, NULL, &m, &err) != FX_OK)
        fail_msg("%s: %s", g->model_path, err.msg);
    struct fx_context_params p = fx_context_default_params();
    p.n_ctx = 256;
    p.n_threads = 2;
    p.type_k = p.type_v = kv_type;
    p.n_gpu_layers = 99;
    struct fx_context *ctx;
    cuda_test_ok(fx_context_create(m, &p, &ctx, &err), &err);
    float *out = malloc(sizeof(float) * (size_t)g->n_prompt * (size_t)g->n_vocab);
    assert_non_null(out);
    for (int i = 0; i < g->n_prompt; i++)
        cuda_test_ok(fx_forward_token(ctx, g->prompt[i], i, out + (int64_t)i * g->n_vocab, &err),
                     &err);
    fx_context_free(ctx);
    fx_model_free(m);
    return out;
}

static void check(const char *stem, struct gold_tol tol) {
    cuda_test_require();
    struct fx_golden g;
    fx_test_golden_load(stem, &g);
    float *got = device_logits(&g, FX_TYPE_F16);
    compare(stem, "f16 KV vs golden", got, g.logits, g.n_prompt, g.n_vocab, tol.max, tol.rms);
    free(got);
    if (tol.kvf32 > 0 && g.logits_kvf32) {
        got = device_logits(&g, FX_TYPE_F32);
        compare(stem, "f32 KV vs f32-KV golden", got, g.logits_kvf32, g.n_prompt, g.n_vocab,
                tol.kvf32, 0);
        free(got);
    }
    fx_test_golden_free(&g);
}

static const struct gold_tol F32 = {0.05f, 0, 2e-3f}, F16 = {0.1f, 0, 0}, BF16 = {0.2f, 0, 0},
                             QUANT = {1.0f, 0.15f, 0};

#define CUDA_GOLDEN(name, stem, tol)                                                               \
    FX_TEST(cuda_golden_##name) {                                                                  \
        check(stem, tol);                                                                          \
    }

CUDA_GOLDEN(llama_tiny_f32, "llama-tiny.F32.P1", F32)
CUDA_GOLDEN(llama_tiny_f16, "llama-tiny.F16.P1", F16)
CUDA_GOLDEN(llama_tiny_bf16, "llama-tiny.BF16.P1", BF16)
CUDA_GOLDEN(llama_tiny_q8_0, "llama-tiny.Q8_0.P1", QUANT)
CUDA_GOLDEN(llama_tiny_q4_0, "llama-tiny.Q4_0.P1", QUANT)
CUDA_GOLDEN(llama_tiny_q4_1, "llama-tiny.Q4_1.P1", QUANT)
CUDA_GOLDEN(llama_tiny_q5_0, "llama-tiny.Q5_0.P1", QUANT)
CUDA_GOLDEN(llama_tiny_q5_1, "llama-tiny.Q5_1.P1", QUANT)
CUDA_GOLDEN(llama_tiny_q2_k, "llama-tiny.Q2_K.P1", QUANT)
CUDA_GOLDEN(llama_tiny_q3_k, "llama-tiny.Q3_K.P1", QUANT)
CUDA_GOLDEN(llama_tiny_q4_k, "llama-tiny.Q4_K.P1", QUANT)
CUDA_GOLDEN(llama_tiny_q5_k, "llama-tiny.Q5_K.P1", QUANT)
CUDA_GOLDEN(llama_tiny_q6_k, "llama-tiny.Q6_K.P1", QUANT)
CUDA_GOLDEN(llama_tiny_tied_f32, "llama-tiny-tied.F32.P1", F32)
CUDA_GOLDEN(llama_tiny_tied_q8_0, "llama-tiny-tied.Q8_0.P1", QUANT)
CUDA_GOLDEN(qwen2_tiny_f32, "qwen2-tiny.F32.P1", F32)
CUDA_GOLDEN(qwen2_tiny_q8_0, "qwen2-tiny.Q8_0.P1", QUANT)
CUDA_GOLDEN(qwen3_tiny_f32, "qwen3-tiny.F32.P1", F32)
CUDA_GOLDEN(qwen3_tiny_q8_0, "qwen3-tiny.Q8_0.P1", QUANT)
CUDA_GOLDEN(qwen3_tiny_q4_k_m, "qwen3-tiny.Q4_K_M.P1", QUANT)
