/* cuda: the device decode step (src/cuda/decode.h) against the CPU decoder's fx_forward_token,
 * position by position, on the fixture models whose weights both sides dot with f32 activations
 * (F32, F16, BF16: the CPU tables quantize activations only for quantized weights, which the
 * device does not, so quantized models are compared through the kernel tests instead).
 *
 * Tolerance: 1e-4 of the largest |logit| of the step. The two sides differ only in the order of
 * their sums (dot products, norms, the softmax) and in expf/tanhf within 2 ulp, each a few 1e-7
 * relative; through two to four small layers and the output projection that stays well inside
 * 1e-5 of the logits' scale. The bound is derived with a factor of ten of room, not measured (no
 * GPU when it was written).
 *
 * The models the step refuses are refused before any device work, so that test runs anywhere. */
#include "fx_test.h"
#include "golden.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/decode.h"
#include "cuda_test.h"

#define TOL   1e-4
#define STEPS 40

static struct fx_context *context(const struct fx_model *m, enum fx_type kv_type) {
    struct fx_context_params p = fx_context_default_params();
    p.n_ctx = 64;
    p.n_threads = 2;
    p.type_k = p.type_v = kv_type;
    return fx_test_context(m, &p);
}

FX_TEST(cuda_decode_step_matches_cpu_forward) {
    static const struct {
        const char *file;
        enum fx_type kv;
    } cases[] = {
        {"models/llama-tiny.F32.gguf", FX_TYPE_F32},      /* normal rope, GQA */
        {"models/llama-tiny-tied.F32.gguf", FX_TYPE_F16}, /* tied output, f16 cache */
        {"models/llama-tiny.F16.gguf", FX_TYPE_F16},
        {"models/llama-tiny.BF16.gguf", FX_TYPE_F32},
        {"models/qwen2-tiny.F32.gguf", FX_TYPE_F32}, /* QKV biases, neox rope */
        {"models/qwen3-tiny.F32.gguf", FX_TYPE_F16}, /* per-head Q/K norms */
    };
    cuda_test_require();
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        struct fx_model *m = fx_test_load_model(cases[ci].file);
        struct fx_context *ctx = context(m, cases[ci].kv);
        struct fx_cuda_decoder *d;
        struct fx_error err = {0};
        if (fx_cuda_decoder_create(ctx, m->hp.n_layer, &d, &err) != FX_OK)
            fail_msg("%s: %s", cases[ci].file, err.msg);
        int64_t n_vocab = m->hp.n_vocab;
        float *cpu = malloc((size_t)n_vocab * 4), *dev = malloc((size_t)n_vocab * 4);
        assert_true(cpu && dev);
        for (int32_t pos = 0; pos < STEPS; pos++) {
            fx_token t = (fx_token)((7 + 13 * pos) % n_vocab);
            cuda_test_ok(fx_forward_token(ctx, t, pos, cpu, &err), &err);
            cuda_test_ok(fx_cuda_decoder_step(d, t, pos, NULL, dev, &err), &err);
            float scale = 0;
            for (int64_t i = 0; i < n_vocab; i++)
                scale = fmaxf(scale, fabsf(cpu[i]));
            for (int64_t i = 0; i < n_vocab; i++)
                if (!(fabsf(dev[i] - cpu[i]) <= TOL * scale))
                    fail_msg("%s position %d logit %lld: device %.7g, CPU %.7g (tolerance %.3g)",
                             cases[ci].file, pos, (long long)i, dev[i], cpu[i], TOL * scale);
        }
        free(cpu), free(dev);
        fx_cuda_decoder_free(d);
        fx_context_free(ctx);
        fx_model_free(m);
    }
}

static void check_close(const char *what, int step, const float *dev, const float *cpu, int64_t n) {
    float scale = 0;
    for (int64_t i = 0; i < n; i++)
        scale = fmaxf(scale, fabsf(cpu[i]));
    for (int64_t i = 0; i < n; i++)
        if (!(fabsf(dev[i] - cpu[i]) <= TOL * scale))
            fail_msg("%s, step %d, logit %lld: device context %.7g, CPU %.7g (tolerance %.3g)",
                     what, step, (long long)i, dev[i], cpu[i], TOL * scale);
}

/* A context created with GPU layers, driven through the public entry points next to a CPU
 * context: prefill (on the CPU, rows then copied to the device), decode steps (on the device, or
 * the first layers on the CPU and the last on the device), a truncation, a batch after device
 * steps (device rows copied back first), more decode steps. Every call's logits agree within
 * TOL. */
static void check_context(const char *file, int32_t n_gpu_layers) {
    struct fx_model *m = fx_test_load_model(file);
    struct fx_context *cpu_ctx = context(m, FX_TYPE_F16);
    struct fx_context_params p = fx_context_default_params();
    p.n_ctx = 64;
    p.n_threads = 2;
    p.type_k = p.type_v = FX_TYPE_F16;
    p.n_gpu_layers = n_gpu_layers;
    struct fx_context *dev_ctx;
    struct fx_error err = {0};
    cuda_test_ok(fx_context_create(m, &p, &dev_ctx, &err), &err);
    int64_t nv = m->hp.n_vocab;
    float *a = malloc((size_t)(4 * nv) * 4), *b = malloc((size_t)(4 * nv) * 4);
    assert_true(a && b);
    fx_token prompt[8] = {1, 17, 33, 5, 90, 2, 7, 64};
    cuda_test_ok(fx_forward_batch_last(cpu_ctx, prompt, 8, 0, a, &err), &err);
    cuda_test_ok(fx_forward_batch_last(dev_ctx, prompt, 8, 0, b, &err), &err);
    check_close("prefill", 0, b, a, nv);
    int32_t pos = 8;
    for (int i = 0; i < 16; i++, pos++) {
        fx_token t = (fx_token)((3 + 11 * i) % nv);
        cuda_test_ok(fx_forward_token(cpu_ctx, t, pos, a, &err), &err);
        cuda_test_ok(fx_forward_token(dev_ctx, t, pos, b, &err), &err);
        check_close("decode", i, b, a, nv);
    }
    cuda_test_ok(fx_context_kv_truncate(cpu_ctx, 12, &err), &err);
    cuda_test_ok(fx_context_kv_truncate(dev_ctx, 12, &err), &err);
    pos = 12;
    fx_token more[3] = {9, 8, 7};
    cuda_test_ok(fx_forward_batch(cpu_ctx, more, 3, pos, a, &err), &err);
    cuda_test_ok(fx_forward_batch(dev_ctx, more, 3, pos, b, &err), &err);
    check_close("batch after truncation", 0, b, a, 3 * nv);
    pos += 3;
    for (int i = 0; i < 8; i++, pos++) {
        fx_token t = (fx_token)((5 + 7 * i) % nv);
        cuda_test_ok(fx_forward_token(cpu_ctx, t, pos, a, &err), &err);
        cuda_test_ok(fx_forward_token(dev_ctx, t, pos, b, &err), &err);
        check_close("decode after the batch", i, b, a, nv);
    }
    assert_int_equal(fx_context_kv_len(dev_ctx), pos);
    free(a), free(b);
    fx_context_free(dev_ctx);
    fx_context_free(cpu_ctx);
    fx_model_free(m);
}

FX_TEST(cuda_context_with_gpu_layers_matches_cpu) {
    cuda_test_require();
    check_context("models/qwen3-tiny.F32.gguf", 99); /* every layer on the device */
    check_context("models/qwen3-tiny.F32.gguf", 1);  /* the last layer only */
    check_context("models/llama-tiny.F32.gguf", 1);
}

/* What the device step does not compute is refused with the reason, before any device work. */
FX_TEST(cuda_decode_refuses_unsupported_models) {
    static const struct {
        const char *file, *why;
    } cases[] = {
        {"models/qwen3moe-tiny.F32.gguf", "mixture of experts"},
        {"models/gemma2-tiny.F32.gguf", "an FFN activation other than SiLU"},
        {"models/gptoss-tiny.F32.gguf", "mixture of experts"},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        struct fx_model *m = fx_test_load_model(cases[ci].file);
        struct fx_context *ctx = context(m, FX_TYPE_F32);
        struct fx_cuda_decoder *d = (struct fx_cuda_decoder *)&d; /* overwritten with NULL */
        struct fx_error err = {0};
        assert_int_equal(fx_cuda_decoder_create(ctx, m->hp.n_layer, &d, &err), FX_ERR_UNSUPPORTED);
        assert_null(d);
        if (!strstr(err.msg, cases[ci].why))
            fail_msg("%s: '%s' does not say '%s'", cases[ci].file, err.msg, cases[ci].why);
        fx_context_free(ctx);
        fx_model_free(m);
    }
    /* A q8_0 cache is not one the device keeps. */
    struct fx_model *m = fx_test_load_model("models/llama-tiny.F32.gguf");
    struct fx_context *ctx = context(m, FX_TYPE_Q8_0);
    struct fx_cuda_decoder *d;
    struct fx_error err = {0};
    assert_int_equal(fx_cuda_decoder_create(ctx, m->hp.n_layer, &d, &err), FX_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "KV cache"));
    fx_context_free(ctx);
    fx_model_free(m);
}
