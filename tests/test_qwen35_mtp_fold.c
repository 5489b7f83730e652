/* decoder/: the MTP head folded into a forward pass on the Qwen3.5 fixtures. A verify step
 * (fx_forward_verify_mtp) against the same work done by separate calls: the trunk's logits and
 * hidden rows of fx_forward_batch_with_hidden, the head's logits and hidden rows of
 * fx_forward_mtp fed the trunk's argmax and hidden rows, memcmp-equal, in one pool entry; its
 * first MTP row against llama.cpp's golden for the draft position after the prompt. A prefill
 * with the head (fx_forward_prefill_mtp) against the separate prefill and catch-up, in one pool
 * entry and in chunks. What both refuse. */
#include "fx_test.h"
#include "golden.h"

#include <stdlib.h>
#include <string.h>

#include "core/par.h"
#include "ferrox.h"

#define TOL 1e-4 /* as test_qwen35_mtp.c: the measured noise of llama.cpp's MTP goldens */

/* The prompt but its last token through the trunk, keeping the hidden rows, and the head caught
 * up over the prompt (MTP position q reads the token at q and the trunk's hidden row q - 1, zeros
 * at 0). fused: fx_forward_prefill_mtp, one pool entry; else fx_forward_batch_with_hidden, then
 * fx_forward_mtp. Returns the last row's logits in last and the hidden rows in hin
 * ([g->n][n_embd]: zeros, then the prompt's rows but the last's). */
static void prefill(struct fx_context *ctx, const struct fx_mtp_golden *g, bool fused, float *last,
                    float *hin) {
    int n = g->n - 1, ne = g->n_embd, nv = g->n_vocab;
    struct fx_error err;
    if (fused) {
        uint64_t before = fx_par_cold_entries();
        assert_int_equal(fx_forward_prefill_mtp(ctx, g->prompt, n, 0, last, hin, &err), FX_OK);
        assert_int_equal(fx_par_cold_entries(), before + 1);
        /* The head's catch-up row of the prompt's last token reads the last hidden row kept. */
        assert_int_equal(
            fx_forward_mtp(ctx, g->prompt + n, hin + (size_t)n * ne, 1, n, last + nv, NULL, &err),
            FX_OK);
        return;
    }
    float *all = calloc((size_t)n * nv, sizeof(float));
    float *ml = calloc((size_t)(n + 1) * nv, sizeof(float));
    assert_true(all && ml);
    assert_int_equal(fx_forward_batch_with_hidden(ctx, g->prompt, n, 0, all, hin + ne, &err),
                     FX_OK);
    memcpy(last, all + (size_t)(n - 1) * nv, sizeof(float) * (size_t)nv);
    assert_int_equal(fx_forward_mtp(ctx, g->prompt, hin, n + 1, 0, ml, NULL, &err), FX_OK);
    memcpy(last + nv, ml + (size_t)n * nv, sizeof(float) * (size_t)nv);
    free(all);
    free(ml);
}

/* A verify step at the prompt's last position, rows [last prompt token, the trunk's greedy next
 * token, the golden's first draft], folded and separate; the folded side's prefill is folded
 * too, and runs in chunks of 4 rows. */
static void check_folded(const char *stem) {
    struct fx_mtp_golden g;
    fx_test_mtp_golden_load(stem, &g);
    struct fx_model *m;
    struct fx_error err;
    if (fx_model_load(g.model_path, NULL, &m, &err) != FX_OK)
        fail_msg("%s: %s", g.model_path, err.msg);
    struct fx_context *a = fx_test_f32_context(m, 256, 4), *b = fx_test_f32_context(m, 256, 0);
    int nv = g.n_vocab, ne = g.n_embd, pos = g.n - 1;
    enum { N = 3 };
    fx_token rows[N] = {g.prompt[pos], g.next, g.chain[0]}, am[N], bm[N];
    float *la = calloc((size_t)N * nv, 4), *lb = calloc((size_t)N * nv, 4);
    float *ha = calloc((size_t)N * ne, 4), *hb = calloc((size_t)N * ne, 4);
    float *mla = calloc((size_t)N * nv, 4), *mlb = calloc((size_t)N * nv, 4);
    float *mha = calloc((size_t)N * ne, 4), *mhb = calloc((size_t)N * ne, 4);
    /* [2][n_vocab]: the trunk's last prompt row, the head's row of the last prompt token */
    float *last_a = calloc((size_t)2 * nv, 4), *last_b = calloc((size_t)2 * nv, 4);
    assert_true(la && lb && ha && hb && mla && mlb && mha && mhb && last_a && last_b);

    float *pha = calloc((size_t)g.n * ne, 4), *phb = calloc((size_t)g.n * ne, 4);
    assert_true(pha && phb);
    prefill(a, &g, true, last_a, pha);
    prefill(b, &g, false, last_b, phb);
    assert_memory_equal(last_a, last_b, sizeof(float) * (size_t)2 * nv);
    assert_memory_equal(pha, phb, sizeof(float) * (size_t)g.n * ne);
    assert_int_equal(fx_test_argmax(last_a + nv, nv), g.argmax[pos]);
    free(pha);
    free(phb);
    assert_int_equal(fx_context_mtp_len(a), pos + 1);

    /* Folded: one pool entry. */
    struct fx_verify_mtp_out out = {la, ha, am, mla, mha};
    uint64_t before = fx_par_cold_entries();
    assert_int_equal(fx_forward_verify_mtp(a, rows, N, pos, &out, &err), FX_OK);
    assert_int_equal(fx_par_cold_entries(), before + 1);
    assert_int_equal(fx_context_kv_len(a), pos + N);
    assert_int_equal(fx_context_mtp_len(a), pos + N + 1);

    /* Separate: the trunk's rows, then the head over (argmax, hidden) one position later. */
    assert_int_equal(fx_forward_batch_with_hidden(b, rows, N, pos, lb, hb, &err), FX_OK);
    for (int i = 0; i < N; i++)
        bm[i] = (fx_token)fx_test_argmax(lb + (size_t)i * nv, nv);
    assert_int_equal(fx_forward_mtp(b, bm, hb, N, pos + 1, mlb, mhb, &err), FX_OK);
    assert_memory_equal(la, lb, sizeof(float) * (size_t)N * nv);
    assert_memory_equal(ha, hb, sizeof(float) * (size_t)N * ne);
    assert_memory_equal(am, bm, sizeof am);
    assert_memory_equal(mla, mlb, sizeof(float) * (size_t)N * nv);
    assert_memory_equal(mha, mhb, sizeof(float) * (size_t)N * ne);

    /* Row 0 is llama.cpp's draft position after the prompt: the trunk's greedy next token with
     * the prompt's last hidden row. */
    assert_int_equal(am[0], g.next);
    double d = fx_test_max_diff(mla, g.logits + (size_t)g.n * nv, (size_t)nv);
    print_message("  %s: folded MTP row vs llama.cpp max |diff| %.3g\n", stem, d);
    if (!(d <= TOL))
        fail_msg("%s: the folded MTP row differs from llama.cpp's by %g", stem, d);
    assert_int_equal(fx_test_argmax(mla, nv), g.argmax[g.n]);

    /* Accepting one draft: both caches cut back, and the step goes on from there. */
    assert_int_equal(fx_context_kv_truncate(a, pos + 2, &err), FX_OK);
    assert_int_equal(fx_context_mtp_truncate(a, pos + 3, &err), FX_OK);
    assert_int_equal(fx_context_mtp_truncate(a, pos + 4, &err), FX_ERR_INVALID_ARG);
    assert_int_equal(fx_forward_verify_mtp(a, rows + 2, 1, pos + 2, &out, &err), FX_OK);

    free(la);
    free(lb);
    free(ha);
    free(hb);
    free(mla);
    free(mlb);
    free(mha);
    free(mhb);
    free(last_a);
    free(last_b);
    fx_test_mtp_golden_free(&g);
    fx_context_free(a);
    fx_context_free(b);
    fx_model_free(m);
}

FX_TEST(qwen35_mtp_folded_dense_f32) {
    check_folded("qwen35-tiny.F32.P1");
}

FX_TEST(qwen35_mtp_folded_dense_q8_0) {
    check_folded("qwen35-tiny.Q8_0.P1");
}

FX_TEST(qwen35_mtp_folded_moe_f32) {
    check_folded("qwen35moe-tiny.F32.P1");
}

/* What the folded steps refuse: a model without a head, an MTP cache that does not hold what
 * precedes the step's rows. Nothing is changed by a refusal. */
FX_TEST(qwen35_mtp_folded_refusals) {
    struct fx_model *m;
    struct fx_error err;
    m = fx_test_load_model("models/qwen3-tiny.F32.gguf");
    struct fx_context *ctx = fx_test_f32_context(m, 256, 0);
    fx_token t[2] = {1, 403}, am[2];
    static float logits[2 * 1024], hidden[2 * 1024], ml[2 * 1024];
    struct fx_verify_mtp_out out = {logits, hidden, am, ml, NULL};
    assert_int_equal(fx_forward_verify_mtp(ctx, t, 1, 0, &out, &err), FX_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "no multi-token-prediction head"));
    assert_int_equal(fx_forward_prefill_mtp(ctx, t, 2, 0, logits, hidden, &err),
                     FX_ERR_UNSUPPORTED);
    fx_context_free(ctx);
    fx_model_free(m);

    m = fx_test_load_model("qwen35/models/qwen35-tiny.F32.gguf");
    ctx = fx_test_f32_context(m, 256, 0);
    assert_int_equal(fx_forward_verify_mtp(ctx, t, 2, 0, &out, &err), FX_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "needs the MTP cache to hold position 0"));
    assert_int_equal(fx_context_kv_len(ctx), 0);
    float zero[128] = {0};
    assert_int_equal(fx_forward_mtp(ctx, t, zero, 1, 0, ml, NULL, &err), FX_OK);
    out.argmax = NULL;
    assert_int_equal(fx_forward_verify_mtp(ctx, t, 2, 0, &out, &err), FX_ERR_INVALID_ARG);
    out.argmax = am;
    assert_int_equal(fx_forward_verify_mtp(ctx, t, 2, 0, &out, &err), FX_OK);
    assert_int_equal(fx_context_mtp_len(ctx), 3);
    /* A prefill with the head continues the MTP cache at its end or before. */
    assert_int_equal(fx_forward_prefill_mtp(ctx, t, 1, 2, logits, hidden, &err), FX_OK);
    assert_int_equal(fx_context_mtp_len(ctx), 3);
    assert_int_equal(fx_context_mtp_truncate(ctx, 1, &err), FX_OK);
    assert_int_equal(fx_forward_prefill_mtp(ctx, t, 1, 3, logits, hidden, &err),
                     FX_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "needs the MTP cache to hold 3 positions (it holds 1)"));
    assert_int_equal(fx_context_kv_len(ctx), 3);
    fx_context_free(ctx);
    fx_model_free(m);
}
