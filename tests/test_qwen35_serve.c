/* The server's engine (src/engine/) over a hybrid model: several requests decoded together in
 * multi-sequence steps over the paged pool, each greedy text equal to its prompt decoded alone
 * in a contiguous context, with and without speculation.
 *
 * Speculation rolls rejected drafts back to a recurrent state the step kept (fx_batch.snapshot).
 * The tiny model's weights are random and never repeat themselves, so prompt lookup's drafts
 * would all be rejected; a logit bias makes two tokens win every step instead, which of them
 * decided by the model's logits. The text is then a string of the two, its n-grams recur, and
 * drafts are kept and rejected about equally: the tokens and the log-probability of each (the
 * logits, bit for bit) equal those of plain decoding, one request at a time, all at once,
 * sampled with a seed, swapped out of a small pool and recomputed, and for n = 2 choices (a
 * fork). qwen35-tiny F32, f32 KV rows. */
#include "fx_test.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "engine/engine.h"

enum { NV = 512, N_REQ = 4, N_GEN = 40, MAX_PROMPT = 40, N_CHOICES = 2 };

/* The two tokens of a biased request, and their bias (the logits are a few units). */
static const struct fx_logit_bias two[2] = {{100, 30.0f}, {200, 30.0f}};

/* The greedy continuation of prompt[0..n) in a fresh contiguous context, with the bias of two
 * when biased (the sampler's sum, ties to the lower id): out[N_GEN]. */
static void greedy_alone(const struct fx_model *m, const fx_token *prompt, int n, bool biased,
                         fx_token *out) {
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
        for (int b = 0; biased && b < 2; b++)
            logits[two[b].token] += two[b].bias;
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

static void wait_done(struct fx_gen_req *r) {
    while (!req_done(r))
        nanosleep(&(struct timespec){0, 1000000}, NULL);
}

/* How an engine is made and its requests sent. */
struct setup {
    bool spec;     /* prompt lookup, drafting draft_max tokens at every step (--spec-fixed) */
    int parallel;  /* sequences at once */
    int n_ctx;     /* KV positions of the pool */
    bool at_once;  /* every request queued before any is waited for */
    bool sampled;  /* temperature 0.8 with a seed, not greedy */
    bool biased;   /* the bias of two */
    int n_choices; /* choices per request */
};

/* A token as a request returns it. */
struct tok {
    fx_token id;
    float logprob;
};

/* The tokens of every choice of every request (out[r][c][N_GEN]) from an engine made as u says;
 * *met: its counters at the end. */
static void serve(const struct fx_model *m, const struct fx_vocab *v, const struct setup *u,
                  const fx_token prompt[N_REQ][MAX_PROMPT], const int len[N_REQ],
                  struct tok out[N_REQ][N_CHOICES][N_GEN], struct fx_engine_metrics *met) {
    struct fx_engine_params ep = fx_engine_default_params();
    ep.n_parallel = u->parallel;
    ep.n_ctx = u->n_ctx;
    ep.n_threads = 2;
    ep.type_k = ep.type_v = FX_TYPE_F32;
    ep.spec = u->spec;
    ep.spec_params.draft_max = 8;
    ep.spec_params.adaptive = false;
    struct fx_engine *e;
    struct fx_error err;
    if (fx_engine_create(m, v, &ep, &e, &err) != FX_OK)
        fail_msg("engine: %s", err.msg);
    struct fx_gen_req *req[N_REQ];
    for (int r = 0; r < N_REQ; r++) {
        struct fx_gen_params gp = {.prompt = prompt[r],
                                   .n_prompt = len[r],
                                   .max_tokens = N_GEN,
                                   .n = u->n_choices,
                                   .sampler = fx_sampler_default_params(),
                                   .ignore_eos = true,
                                   .logprobs = 0};
        gp.sampler.temperature = u->sampled ? 0.8f : 0;
        gp.sampler.seed = 7;
        if (u->biased) {
            gp.sampler.logit_bias = two;
            gp.sampler.n_logit_bias = 2;
        }
        assert_int_equal(fx_engine_submit(e, &gp, NULL, NULL, &req[r], &err), FX_OK);
        if (!u->at_once)
            wait_done(req[r]);
    }
    for (int r = 0; r < N_REQ; r++) {
        wait_done(req[r]);
        for (int c = 0; c < u->n_choices; c++) {
            const struct fx_gen_choice *ch = &req[r]->choices[c];
            assert_int_equal(ch->finish, FX_FINISH_LENGTH);
            assert_int_equal(ch->n_toks, N_GEN);
            for (int i = 0; i < N_GEN; i++)
                out[r][c][i] = (struct tok){ch->toks[i].id, ch->toks[i].logprob};
        }
        fx_gen_req_release(req[r]);
    }
    fx_engine_metrics(e, met);
    fx_engine_free(e);
}

static void load(struct fx_model **m, struct fx_vocab **v) {
    const char *path = fx_test_fixture("qwen35/models/qwen35-tiny.F32.gguf");
    struct fx_error err;
    if (fx_model_load(path, NULL, m, &err) != FX_OK || fx_vocab_load_file(path, v, &err) != FX_OK)
        fail_msg("%s: %s", path, err.msg);
}

static void make_prompts(fx_token prompt[N_REQ][MAX_PROMPT], const int len[N_REQ], uint64_t seed) {
    struct fx_test_rng rng = {seed};
    for (int r = 0; r < N_REQ; r++) {
        prompt[r][0] = 1;
        for (int i = 1; i < len[r]; i++)
            prompt[r][i] = 3 + (fx_token)(fx_test_rng_u64(&rng) % (NV - 3));
    }
}

static void expect_ids(const struct tok got[N_GEN], const fx_token want[N_GEN]) {
    for (int i = 0; i < N_GEN; i++)
        assert_int_equal(got[i].id, want[i]);
}

static const int prompt_len[N_REQ] = {MAX_PROMPT, 7, 23, 31};

/* Several requests at once, greedy: the text of each prompt alone, with and without
 * speculation. */
FX_TEST(qwen35_serve_equals_alone) {
    struct fx_model *m;
    struct fx_vocab *v;
    load(&m, &v);
    fx_token prompt[N_REQ][MAX_PROMPT], want[N_REQ][N_GEN];
    static struct tok got[N_REQ][N_CHOICES][N_GEN];
    make_prompts(prompt, prompt_len, 3535);
    for (int r = 0; r < N_REQ; r++)
        greedy_alone(m, prompt[r], prompt_len[r], false, want[r]);
    for (int spec = 0; spec <= 1; spec++) {
        struct setup u = {
            .spec = spec, .parallel = N_REQ, .n_ctx = 512, .at_once = true, .n_choices = 1};
        struct fx_engine_metrics met;
        serve(m, v, &u, prompt, prompt_len, got, &met);
        for (int r = 0; r < N_REQ; r++)
            expect_ids(got[r][0], want[r]);
        assert_true(spec ? met.spec_drafts > 0 : met.spec_drafts == 0);
    }
    fx_vocab_free(v);
    fx_model_free(m);
}

/* Drafts kept and rejected (the bias of two): speculation gives the tokens and log-probabilities
 * of plain decoding one request at a time (and the greedy text alone), all at once, sampled with
 * a seed, swapped out of a pool of 128 positions and recomputed, and for two choices of each
 * request forked from one prompt. */
FX_TEST(qwen35_serve_spec_equals_plain) {
    struct fx_model *m;
    struct fx_vocab *v;
    load(&m, &v);
    fx_token prompt[N_REQ][MAX_PROMPT], want[N_REQ][N_GEN];
    static struct tok plain[N_REQ][N_CHOICES][N_GEN], got[N_REQ][N_CHOICES][N_GEN];
    make_prompts(prompt, prompt_len, 1717);
    for (int r = 0; r < N_REQ; r++)
        greedy_alone(m, prompt[r], prompt_len[r], true, want[r]);
    struct fx_engine_metrics met;

    const struct setup cases[] = {
        {.parallel = 1, .n_ctx = 512, .biased = true, .n_choices = 1},
        {.parallel = N_REQ, .n_ctx = 512, .at_once = true, .biased = true, .n_choices = 1},
        {.parallel = N_REQ,
         .n_ctx = 512,
         .at_once = true,
         .sampled = true,
         .biased = true,
         .n_choices = 1},
        {.parallel = N_REQ, .n_ctx = 128, .at_once = true, .biased = true, .n_choices = 1},
        {.parallel = N_REQ * N_CHOICES,
         .n_ctx = 1024,
         .at_once = true,
         .sampled = true,
         .biased = true,
         .n_choices = N_CHOICES},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        struct setup u = cases[k];
        serve(m, v, &u, prompt, prompt_len, plain, &met);
        u.spec = true;
        serve(m, v, &u, prompt, prompt_len, got, &met);
        print_message("case %zu: %llu of %llu drafts kept in %llu verify steps, %llu "
                      "preemptions\n",
                      k, (unsigned long long)met.spec_accepted,
                      (unsigned long long)met.spec_draft_tokens,
                      (unsigned long long)met.spec_drafts, (unsigned long long)met.preemptions);
        assert_true(met.spec_accepted >= 10 && met.spec_accepted < met.spec_draft_tokens);
        for (int r = 0; r < N_REQ; r++)
            for (int c = 0; c < u.n_choices; c++)
                assert_memory_equal(got[r][c], plain[r][c], sizeof plain[r][c]);
        if (!u.sampled)
            for (int r = 0; r < N_REQ; r++)
                expect_ids(got[r][0], want[r]);
    }
    fx_vocab_free(v);
    fx_model_free(m);
}
