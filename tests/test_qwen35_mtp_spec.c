/* Speculative decoding with the model's own MTP head (--spec mtp) on the Qwen3.5 fixtures.
 *
 * The folded verify step (fx_forward_verify_mtp) against the same work done by separate calls:
 * the trunk's logits and hidden rows of fx_forward_batch_with_hidden, the head's logits and hidden
 * rows of fx_forward_mtp fed the trunk's argmax and hidden rows, memcmp-equal, in one pool entry;
 * its first MTP row against llama.cpp's golden for the draft position after the prompt. Then
 * speculation with the head: greedy output equals plain decoding through the library, with the
 * head's own drafts and with drafts that are kept for several rows, after which the head's cache
 * is the one plain bookkeeping builds, bit for bit; and through `ferrox run` and `ferrox chat`,
 * greedy and seeded sampling, whatever the thread count. */
#include "fx_test.h"
#include "golden.h"

#include <stdlib.h>
#include <string.h>

#include "core/par.h"
#include "decoder/decoder.h"
#include "ferrox.h"
#include "spec/drafter.h"

#define TOL 1e-4 /* as test_qwen35_mtp.c: the measured noise of llama.cpp's MTP goldens */

/* n_batch 0: the default. */
static struct fx_context *make_ctx(const struct fx_model *m, int n_batch) {
    struct fx_context_params cp = fx_context_default_params();
    cp.n_ctx = 512;
    cp.n_batch = n_batch;
    cp.type_k = cp.type_v = FX_TYPE_F32;
    struct fx_context *ctx;
    struct fx_error err;
    if (fx_context_create(m, &cp, &ctx, &err) != FX_OK)
        fail_msg("context: %s", err.msg);
    return ctx;
}

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
    struct fx_context *a = make_ctx(m, 4), *b = make_ctx(m, 0);
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

FX_TEST(qwen35_mtp_spec_folded_dense_f32) {
    check_folded("qwen35-tiny.F32.P1");
}

FX_TEST(qwen35_mtp_spec_folded_dense_q8_0) {
    check_folded("qwen35-tiny.Q8_0.P1");
}

FX_TEST(qwen35_mtp_spec_folded_moe_f32) {
    check_folded("qwen35moe-tiny.F32.P1");
}

/* What the folded steps refuse: a model without a head, an MTP cache that does not hold what
 * precedes the step's rows. Nothing is changed by a refusal. */
FX_TEST(qwen35_mtp_spec_folded_refusals) {
    struct fx_model *m;
    struct fx_error err;
    const char *path = fx_test_fixture("models/qwen3-tiny.F32.gguf");
    if (fx_model_load(path, NULL, &m, &err) != FX_OK)
        fail_msg("%s: %s", path, err.msg);
    struct fx_context *ctx = make_ctx(m, 0);
    fx_token t[2] = {1, 403}, am[2];
    static float logits[2 * 1024], hidden[2 * 1024], ml[2 * 1024];
    struct fx_verify_mtp_out out = {logits, hidden, am, ml, NULL};
    assert_int_equal(fx_forward_verify_mtp(ctx, t, 1, 0, &out, &err), FX_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "no multi-token-prediction head"));
    assert_int_equal(fx_forward_prefill_mtp(ctx, t, 2, 0, logits, hidden, &err),
                     FX_ERR_UNSUPPORTED);
    fx_context_free(ctx);
    fx_model_free(m);

    path = fx_test_fixture("qwen35/models/qwen35-tiny.F32.gguf");
    if (fx_model_load(path, NULL, &m, &err) != FX_OK)
        fail_msg("%s: %s", path, err.msg);
    ctx = make_ctx(m, 0);
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

/* ---- speculation ------------------------------------------------------------------------- */

static const char *const MODELS[] = {"qwen35-tiny.F32", "qwen35-tiny.Q8_0", "qwen35moe-tiny.F32"};

static struct fx_model *load_model(const char *name) {
    char rel[128];
    snprintf(rel, sizeof rel, "qwen35/models/%s.gguf", name);
    struct fx_model *m;
    struct fx_error err;
    if (fx_model_load(fx_test_fixture(rel), NULL, &m, &err) != FX_OK)
        fail_msg("%s: %s", rel, err.msg);
    return m;
}

/* A drafter over the MTP drafter that knows the greedy text: the MTP drafter proposes (catching
 * its head up and chaining, as it always does) and runs every forward pass, but the proposal is
 * replaced by the greedy text spoiled at a place that moves on with every call (none, then after
 * 0, 1, ... right tokens), so that drafts are kept for several rows. */
struct oracle {
    struct fx_drafter base;
    struct fx_drafter *mtp;
    const fx_token *text;
    int32_t n_text, calls, n_vocab;
};

static fx_status oracle_propose(struct fx_drafter *d, const fx_token *seq, int32_t n_seq, int32_t k,
                                fx_token *draft, int32_t *n_draft, struct fx_error *err) {
    struct oracle *o = (struct oracle *)d;
    fx_status st = o->mtp->ops->propose(o->mtp, seq, n_seq, k, draft, n_draft, err);
    int32_t bad = o->calls++ % (*n_draft + 1); /* n_draft: no spoiled draft */
    int32_t m = 0;
    for (; m < *n_draft && n_seq + m < o->n_text; m++)
        draft[m] = m == bad ? (o->text[n_seq + m] + 1) % o->n_vocab : o->text[n_seq + m];
    *n_draft = m;
    return st;
}

static fx_status oracle_verify(struct fx_drafter *d, const fx_token *seq, int32_t n_seq,
                               const fx_token *rows, int32_t n, float *logits,
                               struct fx_error *err) {
    struct oracle *o = (struct oracle *)d;
    return o->mtp->ops->verify(o->mtp, seq, n_seq, rows, n, logits, err);
}

static fx_status oracle_prefill(struct fx_drafter *d, const fx_token *seq, int32_t n_seq,
                                int32_t pos0, float *logits, struct fx_error *err) {
    struct oracle *o = (struct oracle *)d;
    return o->mtp->ops->prefill(o->mtp, seq, n_seq, pos0, logits, err);
}

static const struct fx_drafter_ops oracle_ops = {.name = "oracle",
                                                 .propose = oracle_propose,
                                                 .verify = oracle_verify,
                                                 .prefill = oracle_prefill};

struct collect {
    fx_token *out;
    int32_t n;
};

static fx_status collect(void *user, fx_token token, bool *stop, struct fx_error *err) {
    (void)stop;
    (void)err;
    struct collect *c = user;
    c->out[c->n++] = token;
    return FX_OK;
}

/* Prompt tokens (P1, or a long prompt of MAX_P) and generated tokens of the speculation runs. */
enum { P = 10, MAX_P = 300, G = 60 };

static struct fx_sampler *sampler(int32_t n_vocab, float temperature) {
    struct fx_sampler_params p = fx_sampler_default_params();
    p.temperature = temperature;
    p.seed = 7;
    struct fx_sampler *smp;
    struct fx_error err;
    assert_int_equal(fx_sampler_create(n_vocab, &p, &smp, &err), FX_OK);
    return smp;
}

/* Decoding of text[0..np) on to np + G tokens at temperature t (seed 7) with speculation over
 * drafter d (whose context is ctx); fails unless the tokens are text's. */
static void speculate(struct fx_context *ctx, struct fx_drafter *d, const fx_token *text,
                      int32_t np, float t, struct fx_spec_stats *stats) {
    int32_t nv = fx_model_n_vocab(fx_context_model(ctx));
    struct fx_error err;
    struct fx_spec_params sp = fx_spec_default_params();
    sp.draft_max = 4;
    sp.adaptive = false;
    struct fx_spec *s;
    assert_int_equal(fx_spec_create(ctx, d, &sp, &s, &err), FX_OK);
    struct fx_sampler *smp = sampler(nv, t);
    fx_token seq[MAX_P + G];
    float *logits = malloc(sizeof(float) * (size_t)nv);
    assert_non_null(logits);
    memcpy(seq, text, sizeof(fx_token) * (size_t)np);
    /* The prompt but its last token, which the first step evaluates. */
    assert_int_equal(fx_spec_prefill(s, seq, np - 1, 0, logits, &err), FX_OK);
    int32_t n_seq = np;
    while (n_seq < np + G) {
        struct collect c = {seq + n_seq, 0};
        assert_int_equal(fx_spec_step(s, smp, seq, n_seq, np + G - n_seq, collect, &c, NULL, &err),
                         FX_OK);
        n_seq += c.n;
    }
    assert_memory_equal(seq, text, sizeof(fx_token) * (size_t)(np + G));
    fx_spec_stats(s, stats);
    free(logits);
    fx_spec_free(s);
    fx_sampler_free(smp);
}

/* The keys and values of the head's layer at MTP positions 0..n-1 of a and b are the same bits. */
static void assert_same_mtp_cache(const struct fx_context *a, const struct fx_context *b,
                                  int32_t n) {
    const struct fx_model *m = a->model;
    int kl = m->layers[m->hp.n_layer].kv_il;
    assert_true(fx_context_mtp_len(a) >= n && fx_context_mtp_len(b) >= n);
    for (int g = 0; g < a->kv.n_head_kv; g++) {
        assert_memory_equal(fx_kv_contig_k(&a->kv, kl, g, 0), fx_kv_contig_k(&b->kv, kl, g, 0),
                            (size_t)n * a->kv.k_row);
        assert_memory_equal(fx_kv_contig_v(&a->kv, kl, g, 0), fx_kv_contig_v(&b->kv, kl, g, 0),
                            (size_t)n * a->kv.v_row);
    }
}

/* Plain decoding at temperature t, then with the head's own drafts (on random weights they are
 * seldom kept), then with drafts kept for several rows: the same text each time, and at the end
 * the head's cache, once caught up with the sequence, and its draft for the next position are
 * those of plain bookkeeping (the trunk's hidden rows of every position, the head over every
 * position). At t > 0 many kept tokens are not the trunk's argmax, whose head rows the drafter
 * computes again. The prompt: P1, or MAX_P tokens drawn at random (the drafter's prefill then
 * runs in two passes). */
static void check_library(const char *name, float t, bool long_prompt) {
    struct fx_model *m = load_model(name);
    int32_t nv = fx_model_n_vocab(m), ne = fx_model_n_embd(m);
    struct fx_error err;
    fx_token text[MAX_P + G] = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376};
    int32_t np = long_prompt ? MAX_P : P;
    struct fx_test_rng rng = {35};
    for (int32_t i = P; i < np; i++)
        text[i] = 3 + (fx_token)(fx_test_rng_u64(&rng) % (uint64_t)(nv - 3));
    struct fx_context *plain = make_ctx(m, 0);
    struct fx_sampler *smp = sampler(nv, t);
    float *logits = malloc(sizeof(float) * (size_t)(np + G) * nv);
    float *hin = calloc((size_t)(np + G) * ne, sizeof(float));
    assert_true(logits && hin);
    assert_int_equal(fx_forward_batch_last(plain, text, np, 0, logits, &err), FX_OK);
    for (int i = np; i < np + G; i++) {
        assert_int_equal(fx_sampler_sample(smp, logits, &text[i], &err), FX_OK);
        assert_int_equal(fx_sampler_accept(smp, text[i], &err), FX_OK);
        if (i + 1 < np + G)
            assert_int_equal(fx_forward_token(plain, text[i], i, logits, &err), FX_OK);
    }
    fx_sampler_free(smp);
    assert_int_equal(fx_context_kv_truncate(plain, 0, &err), FX_OK);
    assert_int_equal(
        fx_forward_batch_with_hidden(plain, text, np + G - 1, 0, logits, hin + ne, &err), FX_OK);
    assert_int_equal(fx_forward_mtp(plain, text, hin, np + G, 0, logits, NULL, &err), FX_OK);
    fx_token next = (fx_token)fx_test_argmax(logits + (size_t)(np + G - 1) * nv, nv);

    struct fx_context *ctx = make_ctx(m, 0);
    struct fx_drafter *d;
    struct fx_spec_stats st;
    assert_int_equal(fx_drafter_mtp_create(ctx, &d, &err), FX_OK);
    assert_string_equal(fx_drafter_name(d), "mtp");
    speculate(ctx, d, text, np, t, &st);
    assert_true(st.drafted > 0);
    fx_drafter_free(d);
    fx_context_free(ctx);

    ctx = make_ctx(m, 0);
    assert_int_equal(fx_drafter_mtp_create(ctx, &d, &err), FX_OK);
    struct oracle o = {
        .base = {&oracle_ops, ctx}, .mtp = d, .text = text, .n_text = np + G, .n_vocab = nv};
    speculate(ctx, &o.base, text, np, t, &st);
    print_message("  %s, %d prompt tokens, temperature %g: %llu of %llu drafts kept, %llu verify "
                  "steps\n",
                  name, (int)np, (double)t, (unsigned long long)st.accepted,
                  (unsigned long long)st.drafted, (unsigned long long)st.verify_steps);
    assert_true(st.accepted > 10 && st.accepted < st.drafted);
    fx_token draft[1];
    int32_t n_draft;
    assert_int_equal(fx_drafter_propose(d, text, np + G, 1, draft, &n_draft, &err), FX_OK);
    assert_int_equal(n_draft, 1);
    assert_int_equal(draft[0], next);
    assert_int_equal(fx_context_mtp_len(ctx), np + G);
    assert_same_mtp_cache(ctx, plain, np + G);

    fx_drafter_free(d);
    fx_context_free(ctx);
    fx_context_free(plain);
    free(logits);
    free(hin);
    fx_model_free(m);
}

FX_TEST(qwen35_mtp_spec_library_greedy_equals_plain) {
    for (size_t f = 0; f < sizeof MODELS / sizeof MODELS[0]; f++)
        check_library(MODELS[f], 0.0f, false);
    check_library(MODELS[2], 0.0f, true);
}

FX_TEST(qwen35_mtp_spec_library_sampled_equals_plain) {
    for (size_t f = 0; f < sizeof MODELS / sizeof MODELS[0]; f++)
        check_library(MODELS[f], 0.8f, false);
}

/* Greedy, one draft per step: after the first step (whose head row for the prompt's last token
 * is computed on the way), each step is one pool entry, the folded verify step: its head row of
 * the kept token is the next step's draft. */
FX_TEST(qwen35_mtp_spec_one_pool_entry_per_step) {
    struct fx_model *m = load_model(MODELS[2]);
    int32_t nv = fx_model_n_vocab(m);
    struct fx_context *ctx = make_ctx(m, 0);
    struct fx_drafter *d;
    struct fx_spec *s;
    struct fx_error err;
    assert_int_equal(fx_drafter_mtp_create(ctx, &d, &err), FX_OK);
    struct fx_spec_params sp = fx_spec_default_params();
    sp.draft_max = 1;
    sp.adaptive = false;
    assert_int_equal(fx_spec_create(ctx, d, &sp, &s, &err), FX_OK);
    struct fx_sampler *smp = sampler(nv, 0.0f);
    fx_token seq[P + G] = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376};
    float *logits = malloc(sizeof(float) * (size_t)nv);
    assert_non_null(logits);
    assert_int_equal(fx_spec_prefill(s, seq, P - 1, 0, logits, &err), FX_OK);
    int32_t n_seq = P, steps = 0;
    uint64_t entries = 0;
    while (n_seq < P + G) {
        struct collect c = {seq + n_seq, 0};
        uint64_t before = fx_par_cold_entries();
        assert_int_equal(fx_spec_step(s, smp, seq, n_seq, P + G - n_seq, collect, &c, NULL, &err),
                         FX_OK);
        if (n_seq > P) {
            entries += fx_par_cold_entries() - before;
            steps++;
        }
        n_seq += c.n;
    }
    assert_true(steps > 20);
    assert_int_equal(entries, (uint64_t)steps);
    free(logits);
    fx_sampler_free(smp);
    fx_spec_free(s);
    fx_drafter_free(d);
    fx_context_free(ctx);
    fx_model_free(m);
}

/* A drafter made for one context is refused for another. */
FX_TEST(qwen35_mtp_spec_refuses_another_context) {
    struct fx_model *m = load_model(MODELS[0]);
    struct fx_context *a = make_ctx(m, 0), *b = make_ctx(m, 0);
    struct fx_drafter *d;
    struct fx_spec *s;
    struct fx_error err;
    assert_int_equal(fx_drafter_mtp_create(a, &d, &err), FX_OK);
    assert_int_equal(fx_spec_create(b, d, NULL, &s, &err), FX_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "the mtp drafter works in another context"));
    fx_drafter_free(d);
    fx_context_free(a);
    fx_context_free(b);
    fx_model_free(m);
}

/* ---- through the CLI --------------------------------------------------------------------- */

/* ferrox with args (NULL-terminated, at most 31); fails unless it exits with want. Returns
 * stdout, and stderr into *err when err is not NULL. */
static char *run_cli(const char *const *args, const char *stdin_text, int want, char **err) {
    char *out, *e;
    int rc = fx_test_run_cli(args, stdin_text, &out, &e);
    if (rc != want) {
        char line[2048] = "";
        for (int i = 0; args[i]; i++) {
            strncat(line, args[i], sizeof line - strlen(line) - 2);
            strncat(line, " ", sizeof line - strlen(line) - 1);
        }
        fail_msg("ferrox %s exited %d (want %d): %s", line, rc, want, e);
    }
    if (err)
        *err = e;
    else
        free(e);
    return out;
}

/* `ferrox CMD -m MODEL` then base, then extra, then -t threads. */
static char *ferrox(const char *cmd, const char *model, const char *const *base,
                    const char *const *extra, const char *threads, const char *stdin_text,
                    char **err) {
    char rel[128];
    snprintf(rel, sizeof rel, "qwen35/models/%s.gguf", model);
    const char *args[32] = {cmd, "-m", fx_test_fixture(rel)};
    int n = 3;
    for (int i = 0; base[i]; i++)
        args[n++] = base[i];
    for (int i = 0; extra && extra[i]; i++)
        args[n++] = extra[i];
    args[n++] = "-t";
    args[n++] = threads;
    assert_true(n < 32);
    args[n] = NULL;
    return run_cli(args, stdin_text, 0, err);
}

static const char *const PROMPT = "Once upon a time, there was a little";

FX_TEST(qwen35_mtp_spec_cli_run_greedy_equals_plain) {
    static const char *const base[] = {"-p", PROMPT,         "-n", "48", "--temp",
                                       "0",  "--ignore-eos", "-v", NULL};
    for (size_t f = 0; f < sizeof MODELS / sizeof MODELS[0]; f++) {
        char *err;
        char *want = ferrox("run", MODELS[f], base, (const char *const[]){"--spec", "none", NULL},
                            "1", NULL, NULL);
        static const char *const modes[][4] = {{"--spec", "mtp", NULL},
                                               {"--spec", "mtp", "--spec-fixed", NULL}};
        for (size_t k = 0; k < 2; k++) {
            char *got = ferrox("run", MODELS[f], base, modes[k], "1", NULL, &err);
            assert_string_equal(got, want);
            /* -v reports the head's acceptance and the tokens per verify step. */
            const char *line = strstr(err, "speculation (mtp): acceptance ");
            assert_non_null(line);
            assert_non_null(strstr(line, "tokens per verify step"));
            if (k == 1)
                print_message("  %s: %.*s", MODELS[f], (int)strcspn(line, "\n") + 1, line);
            free(got);
            free(err);
        }
        free(want);
    }
}

FX_TEST(qwen35_mtp_spec_cli_run_seeded_sampling_equals_plain) {
    /* The head drafts deterministically (argmax), so a row is sampled with plain decoding's
     * random number and the seeded text is plain decoding's at any temperature; sampled tokens
     * that are not the trunk's argmax make the drafter compute the head's row again. The same
     * with one worker or three. */
    static const char *const base[] = {"-p",  PROMPT, "-n", "48",           "--temp",
                                       "0.8", "-s",   "7",  "--ignore-eos", NULL};
    static const char *const mtp[] = {"--spec", "mtp", "--spec-fixed", NULL};
    for (size_t f = 0; f < sizeof MODELS / sizeof MODELS[0]; f++) {
        char *want = ferrox("run", MODELS[f], base, (const char *const[]){"--spec", "none", NULL},
                            "1", NULL, NULL);
        char *got1 = ferrox("run", MODELS[f], base, mtp, "1", NULL, NULL);
        char *got3 = ferrox("run", MODELS[f], base, mtp, "3", NULL, NULL);
        assert_string_equal(got1, want);
        assert_string_equal(got3, want);
        free(want);
        free(got1);
        free(got3);
    }
}

FX_TEST(qwen35_mtp_spec_cli_chat_turns_equal_plain) {
    /* Three turns: each prompt is prefilled through the drafter, which catches its head up. */
    static const char *const base[] = {"--chat-template", "chatml", "-n", "24", "--temp", "0",
                                       "--ignore-eos",    "-v",     NULL};
    const char *input = "Tell me a story.\nAnd then?\nOnce upon a time Once upon a time\n";
    char *want = ferrox("chat", MODELS[2], base, (const char *const[]){"--spec", "none", NULL}, "1",
                        input, NULL);
    char *err;
    char *got =
        ferrox("chat", MODELS[2], base,
               (const char *const[]){"--spec", "mtp", "--spec-fixed", NULL}, "1", input, &err);
    assert_string_equal(got, want);
    assert_non_null(strstr(err, "chat: speculation (mtp)"));
    free(got);
    free(err);
    free(want);
}

FX_TEST(qwen35_mtp_spec_cli_refuses_a_model_without_a_head) {
    const char *args[] = {"run", "-m",     fx_test_fixture("models/qwen3-tiny.F32.gguf"),
                          "-p",  "Once",   "-n",
                          "4",   "--spec", "mtp",
                          NULL};
    char *err;
    free(run_cli(args, NULL, 1, &err));
    print_message("  %s", err);
    assert_non_null(strstr(err, "--spec mtp: this qwen3 model has no multi-token-prediction head"));
    free(err);
}
