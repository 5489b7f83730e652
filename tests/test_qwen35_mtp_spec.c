/* spec/mtp.c: speculative decoding with the model's own MTP head through the library, on the
 * Qwen3.5 fixtures. Greedy and sampled output equals plain decoding with the head's own drafts
 * and with drafts that are kept for several rows, after which the head's cache and its next
 * draft are those plain bookkeeping builds, bit for bit (also after a prompt longer than one
 * prefill pass); a greedy step is one pool entry; a step that drafts nothing computes no head
 * logits, and speculation switched off and on again drafts plain bookkeeping's tokens; a drafter
 * is refused for another context. */
#include "fx_test.h"
#include "golden.h"

#include <stdlib.h>
#include <string.h>

#include "core/par.h"
#include "decoder/decoder.h"
#include "ferrox.h"
#include "kernels/kv_tile.h"
#include "spec/drafter.h"

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
    uint8_t *ka = malloc(a->kv.k_row), *kb = malloc(a->kv.k_row);
    assert_non_null(ka);
    assert_non_null(kb);
    for (int g = 0; g < a->kv.n_head_kv; g++) {
        for (int32_t p = 0; p < n; p++) { /* keys: each row out of its tile slot */
            struct fx_kv_key_at at = fx_kv_contig_key(&a->kv, kl, g, p);
            struct fx_kv_key_at bt = fx_kv_contig_key(&b->kv, kl, g, p);
            fx_kv_tile_get(a->kv.type_k, a->kv.head_dim, at.tile, at.slot, 0, a->kv.head_dim, ka);
            fx_kv_tile_get(b->kv.type_k, b->kv.head_dim, bt.tile, bt.slot, 0, b->kv.head_dim, kb);
            assert_memory_equal(ka, kb, (size_t)a->kv.k_row);
        }
        assert_memory_equal(fx_kv_contig_v(&a->kv, kl, g, 0), fx_kv_contig_v(&b->kv, kl, g, 0),
                            (size_t)n * a->kv.v_row);
    }
    free(ka);
    free(kb);
}

/* Plain decoding of text[0..np) on to n tokens at temperature t (seed 7) on plain, into text. */
static void plain_text(struct fx_context *plain, fx_token *text, int32_t np, int32_t n, float t) {
    int32_t nv = fx_model_n_vocab(fx_context_model(plain));
    struct fx_error err;
    struct fx_sampler *smp = sampler(nv, t);
    float *logits = malloc(sizeof(float) * (size_t)nv);
    assert_non_null(logits);
    assert_int_equal(fx_forward_batch_last(plain, text, np, 0, logits, &err), FX_OK);
    for (int32_t i = np; i < n; i++) {
        assert_int_equal(fx_sampler_sample(smp, logits, &text[i], &err), FX_OK);
        assert_int_equal(fx_sampler_accept(smp, text[i], &err), FX_OK);
        if (i + 1 < n)
            assert_int_equal(fx_forward_token(plain, text[i], i, logits, &err), FX_OK);
    }
    free(logits);
    fx_sampler_free(smp);
}

/* Plain bookkeeping of the head over text[0..n) on plain (whose caches it replaces): the trunk's
 * hidden rows of every position, the head over every position. Returns the head's draft for
 * position n. */
static fx_token plain_head(struct fx_context *plain, const fx_token *text, int32_t n) {
    const struct fx_model *m = fx_context_model(plain);
    int32_t nv = fx_model_n_vocab(m), ne = fx_model_n_embd(m);
    struct fx_error err;
    float *logits = malloc(sizeof(float) * (size_t)n * nv);
    float *hin = calloc((size_t)n * ne, sizeof(float));
    assert_true(logits && hin);
    assert_int_equal(fx_context_kv_truncate(plain, 0, &err), FX_OK);
    assert_int_equal(fx_forward_batch_with_hidden(plain, text, n - 1, 0, logits, hin + ne, &err),
                     FX_OK);
    assert_int_equal(fx_forward_mtp(plain, text, hin, n, 0, logits, NULL, &err), FX_OK);
    fx_token next = (fx_token)fx_test_argmax(logits + (size_t)(n - 1) * nv, nv);
    free(logits);
    free(hin);
    return next;
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
    int32_t nv = fx_model_n_vocab(m);
    struct fx_error err;
    fx_token text[MAX_P + G] = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376};
    int32_t np = long_prompt ? MAX_P : P;
    struct fx_test_rng rng = {35};
    for (int32_t i = P; i < np; i++)
        text[i] = 3 + (fx_token)(fx_test_rng_u64(&rng) % (uint64_t)(nv - 3));
    struct fx_context *plain = fx_test_f32_context(m, 512, 0);
    plain_text(plain, text, np, np + G, t);
    fx_token next = plain_head(plain, text, np + G);

    struct fx_context *ctx = fx_test_f32_context(m, 512, 0);
    struct fx_drafter *d;
    struct fx_spec_stats st;
    assert_int_equal(fx_drafter_mtp_create(ctx, &d, &err), FX_OK);
    assert_string_equal(fx_drafter_name(d), "mtp");
    speculate(ctx, d, text, np, t, &st);
    assert_true(st.drafted > 0);
    fx_drafter_free(d);
    fx_context_free(ctx);

    ctx = fx_test_f32_context(m, 512, 0);
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
    struct fx_context *ctx = fx_test_f32_context(m, 512, 0);
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

/* Speculation switched off and on again (blocks of steps with n_max 1, which draft nothing,
 * between blocks that draft, greedy): a plain step is one pool entry that leaves the head one
 * position short of the verify step's (no head row for the token it yields, the row whose logits
 * are the head's vocabulary projection); the next draft computes that row in one pool entry of
 * its own, and the text, the head's cache and its draft are plain bookkeeping's. */
FX_TEST(qwen35_mtp_spec_plain_step_skips_head_logits) {
    enum { N = P + 100, BLOCK = 5 };
    for (size_t f = 0; f < sizeof MODELS / sizeof MODELS[0]; f++) {
        struct fx_model *m = load_model(MODELS[f]);
        int32_t nv = fx_model_n_vocab(m);
        struct fx_error err;
        fx_token text[N] = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376};
        struct fx_context *plain = fx_test_f32_context(m, 512, 0);
        plain_text(plain, text, P, N, 0.0f);

        struct fx_context *ctx = fx_test_f32_context(m, 512, 0);
        struct fx_drafter *d;
        struct fx_spec *s;
        assert_int_equal(fx_drafter_mtp_create(ctx, &d, &err), FX_OK);
        struct fx_spec_params sp = fx_spec_default_params();
        sp.draft_max = 4;
        sp.adaptive = false;
        assert_int_equal(fx_spec_create(ctx, d, &sp, &s, &err), FX_OK);
        struct fx_sampler *smp = sampler(nv, 0.0f);
        fx_token seq[N];
        float *logits = malloc(sizeof(float) * (size_t)nv);
        assert_non_null(logits);
        memcpy(seq, text, sizeof(fx_token) * P);
        assert_int_equal(fx_spec_prefill(s, seq, P - 1, 0, logits, &err), FX_OK);
        int32_t n_seq = P;
        /* Blocks 0, 2, 4 draft; 1, 3, 5 are plain, the last one too. */
        for (int block = 0; block < 6; block++)
            for (int j = 0; j < BLOCK; j++) {
                bool on = block % 2 == 0;
                struct collect c = {seq + n_seq, 0};
                uint64_t before = fx_par_cold_entries();
                assert_int_equal(
                    fx_spec_step(s, smp, seq, n_seq, on ? N - n_seq : 1, collect, &c, NULL, &err),
                    FX_OK);
                n_seq += c.n;
                if (!on) {
                    assert_int_equal(fx_par_cold_entries() - before, 1);
                    assert_int_equal(fx_context_mtp_len(ctx), n_seq - 1);
                }
            }
        assert_memory_equal(seq, text, sizeof(fx_token) * (size_t)n_seq);
        fx_token next = plain_head(plain, text, n_seq);
        fx_token draft[1];
        int32_t n_draft;
        uint64_t before = fx_par_cold_entries();
        assert_int_equal(fx_drafter_propose(d, seq, n_seq, 1, draft, &n_draft, &err), FX_OK);
        assert_int_equal(fx_par_cold_entries() - before, 1);
        assert_int_equal(n_draft, 1);
        assert_int_equal(draft[0], next);
        assert_int_equal(fx_context_mtp_len(ctx), n_seq);
        assert_same_mtp_cache(ctx, plain, n_seq);

        free(logits);
        fx_sampler_free(smp);
        fx_spec_free(s);
        fx_drafter_free(d);
        fx_context_free(ctx);
        fx_context_free(plain);
        fx_model_free(m);
    }
}

/* A drafter made for one context is refused for another. */
FX_TEST(qwen35_mtp_spec_refuses_another_context) {
    struct fx_model *m = load_model(MODELS[0]);
    struct fx_context *a = fx_test_f32_context(m, 512, 0), *b = fx_test_f32_context(m, 512, 0);
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
