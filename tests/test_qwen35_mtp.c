/* decoder/: the multi-token-prediction head of the Qwen3.5 fixtures against llama.cpp's MTP
 * goldens (fixtures/qwen35/README.md, "MTP / NextN head" and the .mtp files): the trunk's
 * h_nextn rows that feed it, the head's logits at every prompt position (the catch-up batch, row
 * 0 with a zero hidden state) and at the draft position after the prompt, and a chain of three
 * drafts, each fed the previous draft and the head's own hidden output.
 *
 * Tolerance: the README's float64 reference reproduces these goldens to 1.8e-5 (F32) and
 * 1.1e-6 (Q8_0, with the activation quantization ferrox also does), and llama.cpp's own batched
 * and sequential MTP passes differ by 3.1e-6; the trunk's 1e-4 bound holds here too. Every
 * argmax is compared: the smallest margin on P1 is 0.17. */
#include "fx_test.h"
#include "golden.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/par.h"
#include "ferrox.h"

#define MAX_IDS FX_GOLDEN_MAX_IDS
#define TOL     1e-4

static void check_mtp(const char *stem) {
    struct fx_mtp_golden g;
    fx_test_mtp_golden_load(stem, &g);
    struct fx_model *m;
    struct fx_error err;
    if (fx_model_load(g.model_path, NULL, &m, &err) != FX_OK)
        fail_msg("%s: %s", g.model_path, err.msg);
    assert_int_equal(fx_model_n_nextn(m), 1);
    struct fx_context_params cp = fx_context_default_params();
    cp.n_ctx = 256;
    cp.type_k = cp.type_v = FX_TYPE_F32;
    struct fx_context *ctx;
    assert_int_equal(fx_context_create(m, &cp, &ctx, &err), FX_OK);
    int n = g.n, nv = g.n_vocab, ne = g.n_embd;
    float *trunk = calloc((size_t)n * nv, sizeof(float)), *h = calloc((size_t)n * ne, 4);
    float *hin = calloc((size_t)(n + 1) * ne, 4), *hm = calloc((size_t)(n + 1) * ne, 4);
    float *logits = calloc((size_t)(n + 1) * nv, 4), *seq = calloc((size_t)(n + 1) * nv, 4);
    assert_true(trunk && h && hin && hm && logits && seq);

    /* The trunk's hidden rows and its greedy next token. */
    assert_int_equal(fx_forward_batch_with_hidden(ctx, g.prompt, n, 0, trunk, h, &err), FX_OK);
    double dh = fx_test_max_diff(h, g.h, (size_t)n * ne);
    assert_int_equal(fx_test_argmax(trunk + (size_t)(n - 1) * nv, nv), g.next);

    /* MTP position q reads (token q, trunk hidden q - 1), zeros at 0; the catch-up over the
     * prompt in one call, then the draft position after it. */
    memcpy(hin + ne, h, sizeof(float) * (size_t)(n * ne));
    fx_token toks[MAX_IDS + 1];
    memcpy(toks, g.prompt, sizeof(fx_token) * (size_t)n);
    toks[n] = g.next;
    assert_int_equal(fx_forward_mtp(ctx, toks, hin, n, 0, logits, hm, &err), FX_OK);
    assert_int_equal(fx_forward_mtp(ctx, toks + n, hin + (size_t)n * ne, 1, n,
                                    logits + (size_t)n * nv, hm + (size_t)n * ne, &err),
                     FX_OK);
    assert_int_equal(fx_context_mtp_len(ctx), n + 1);
    double dl = fx_test_max_diff(logits, g.logits, (size_t)(n + 1) * nv);
    print_message("  %s (%s kernels): h_nextn max |diff| %.3g, MTP logits max |diff| %.3g\n", stem,
                  fx_kernels_name(), dh, dl);
    if (!(dh <= TOL) || !(dl <= TOL))
        fail_msg("%s: differs from llama.cpp's by %g (h_nextn), %g (MTP logits)", stem, dh, dl);
    for (int q = 0; q <= n; q++)
        assert_int_equal(fx_test_argmax(logits + (size_t)q * nv, nv), g.argmax[q]);

    /* One position at a time from 0 again: the same bits. */
    for (int q = 0; q <= n; q++)
        assert_int_equal(fx_forward_mtp(ctx, toks + q, hin + (size_t)q * ne, 1, q,
                                        seq + (size_t)q * nv, NULL, &err),
                         FX_OK);
    assert_memory_equal(seq, logits, sizeof(float) * (size_t)(n + 1) * nv);

    /* The draft chain: each draft fed the previous one and the head's own hidden output. */
    float *prev = hm + (size_t)n * ne, *next_h = hin; /* hin is free from here on */
    fx_token d = (fx_token)fx_test_argmax(logits + (size_t)n * nv, nv);
    for (int i = 0; i < g.n_chain; i++) {
        if (d != g.chain[i])
            fail_msg("%s: draft %d is %d, golden %d", stem, i, d, g.chain[i]);
        if (i + 1 == g.n_chain)
            break;
        assert_int_equal(fx_forward_mtp(ctx, &d, prev, 1, n + 1 + i, seq, next_h, &err), FX_OK);
        memcpy(prev, next_h, sizeof(float) * (size_t)ne);
        d = (fx_token)fx_test_argmax(seq, nv);
    }

    free(trunk);
    free(h);
    free(hin);
    free(hm);
    free(logits);
    free(seq);
    fx_test_mtp_golden_free(&g);
    fx_context_free(ctx);
    fx_model_free(m);
}

FX_TEST(qwen35_mtp_golden_dense_f32) {
    check_mtp("qwen35-tiny.F32.P1");
}

FX_TEST(qwen35_mtp_golden_dense_q8_0) {
    check_mtp("qwen35-tiny.Q8_0.P1");
}

FX_TEST(qwen35_mtp_golden_moe_f32) {
    check_mtp("qwen35moe-tiny.F32.P1");
}

/* A model without an MTP head refuses the call; the MTP cache continues at its end or earlier;
 * each call enters the worker pool once. */
FX_TEST(qwen35_mtp_refusals) {
    struct fx_model *m;
    struct fx_error err;
    m = fx_test_load_model("models/qwen3-tiny.F32.gguf");
    struct fx_context *ctx;
    assert_int_equal(fx_context_create(m, NULL, &ctx, &err), FX_OK);
    fx_token t = 1;
    float h[1024] = {0}, out[1024];
    assert_int_equal(fx_forward_mtp(ctx, &t, h, 1, 0, out, NULL, &err), FX_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "no multi-token-prediction head"));
    fx_context_free(ctx);
    fx_model_free(m);

    m = fx_test_load_model("qwen35/models/qwen35-tiny.F32.gguf");
    assert_int_equal(fx_context_create(m, NULL, &ctx, &err), FX_OK);
    assert_int_equal(fx_forward_mtp(ctx, &t, h, 1, 1, out, NULL, &err), FX_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "MTP position 1 is not in 0..0"));
    assert_int_equal(fx_forward_mtp(ctx, &t, NULL, 1, 0, out, NULL, &err), FX_ERR_INVALID_ARG);
    /* One pool entry per call, the trunk's (recurrent layers included) and the head's alike. */
    uint64_t before = fx_par_cold_entries();
    assert_int_equal(fx_forward_mtp(ctx, &t, h, 1, 0, out, NULL, &err), FX_OK);
    assert_int_equal(fx_par_cold_entries(), before + 1);
    fx_token p[3] = {1, 403, 407};
    assert_int_equal(fx_forward_batch_last(ctx, p, 3, 0, out, &err), FX_OK);
    assert_int_equal(fx_par_cold_entries(), before + 2);
    /* Each cache is moved by its own calls only. */
    assert_int_equal(fx_context_kv_len(ctx), 3);
    assert_int_equal(fx_context_mtp_len(ctx), 1);
    fx_context_free(ctx);
    fx_model_free(m);
}
