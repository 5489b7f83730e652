/* The server's engine (src/engine/) over a hybrid model: several requests decoded together in
 * multi-sequence steps over the paged pool, each greedy text equal to its prompt decoded alone
 * in a contiguous context; and speculation, which would roll sequences back, refused with the
 * reason. qwen35-tiny F32, f32 KV rows. */
#include "fx_test.h"

#include <string.h>
#include <time.h>

#include "engine/engine.h"

enum { NV = 512, N_REQ = 3, N_GEN = 12, MAX_PROMPT = 40 };

/* The greedy continuation of prompt[0..n) in a fresh contiguous context: out[N_GEN]. */
static void greedy_alone(const struct fx_model *m, const fx_token *prompt, int n, fx_token *out) {
    struct fx_context_params cp = fx_context_default_params();
    cp.n_ctx = 128;
    cp.type_k = cp.type_v = FX_TYPE_F32;
    struct fx_context *ctx;
    struct fx_error err;
    if (fx_context_create(m, &cp, &ctx, &err) != FX_OK)
        fail_msg("context: %s", err.msg);
    float logits[NV];
    assert_int_equal(fx_forward_batch_last(ctx, prompt, n, 0, logits, &err), FX_OK);
    for (int i = 0; i < N_GEN; i++) {
        int best = 0;
        for (int t = 1; t < NV; t++)
            if (logits[t] > logits[best])
                best = t;
        out[i] = best;
        if (i + 1 < N_GEN)
            assert_int_equal(fx_forward_token(ctx, best, n + i, logits, &err), FX_OK);
    }
    fx_context_free(ctx);
}

static bool req_done(struct fx_gen_req *r) {
    fx_gen_req_lock(r);
    bool done = r->done;
    fx_gen_req_unlock(r);
    return done;
}

FX_TEST(qwen35_serve_equals_alone) {
    const char *path = fx_test_fixture("qwen35/models/qwen35-tiny.F32.gguf");
    struct fx_model *m;
    struct fx_vocab *v;
    struct fx_error err;
    if (fx_model_load(path, NULL, &m, &err) != FX_OK || fx_vocab_load_file(path, &v, &err) != FX_OK)
        fail_msg("%s: %s", path, err.msg);

    struct fx_engine_params ep = fx_engine_default_params();
    ep.n_parallel = N_REQ;
    ep.n_ctx = 512;
    ep.n_threads = 2;
    ep.type_k = ep.type_v = FX_TYPE_F32;
    ep.spec = true;
    struct fx_engine *e;
    assert_int_equal(fx_engine_create(m, v, &ep, &e, &err), FX_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "cannot be rolled back"));
    ep.spec = false;
    if (fx_engine_create(m, v, &ep, &e, &err) != FX_OK)
        fail_msg("engine: %s", err.msg);

    const int len[N_REQ] = {MAX_PROMPT, 7, 23};
    fx_token prompt[N_REQ][MAX_PROMPT], want[N_REQ][N_GEN];
    struct fx_test_rng rng = {3535};
    struct fx_gen_req *req[N_REQ];
    for (int r = 0; r < N_REQ; r++) {
        prompt[r][0] = 1;
        for (int i = 1; i < len[r]; i++)
            prompt[r][i] = 3 + (fx_token)(fx_test_rng_u64(&rng) % (NV - 3));
        greedy_alone(m, prompt[r], len[r], want[r]);
        struct fx_gen_params gp = {.prompt = prompt[r],
                                   .n_prompt = len[r],
                                   .max_tokens = N_GEN,
                                   .n = 1,
                                   .sampler = fx_sampler_default_params(),
                                   .ignore_eos = true,
                                   .logprobs = 0};
        gp.sampler.temperature = 0;
        assert_int_equal(fx_engine_submit(e, &gp, NULL, NULL, &req[r], &err), FX_OK);
    }
    for (int r = 0; r < N_REQ; r++) {
        while (!req_done(req[r]))
            nanosleep(&(struct timespec){0, 1000000}, NULL);
        const struct fx_gen_choice *c = &req[r]->choices[0];
        assert_int_equal(c->n_toks, N_GEN);
        for (int i = 0; i < N_GEN; i++)
            assert_int_equal(c->toks[i].id, want[r][i]);
        fx_gen_req_release(req[r]);
    }
    fx_engine_free(e);
    fx_vocab_free(v);
    fx_model_free(m);
}
