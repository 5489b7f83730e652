/* Rolling a hybrid sequence back (fx_forward_verify, then fx_context_kv_truncate into its rows):
 * the recurrent state and the KV rows after cutting a verify step back to any of its rows are
 * memcmp-equal to those of the plain run that evaluated only the kept tokens, across a delta-rule
 * chunk end; and speculative decoding at temperature 0, with a drafter whose drafts are rejected
 * at every possible row, yields exactly the tokens of plain greedy decoding. qwen35moe-tiny F32,
 * f32 KV rows. */
#include "fx_test.h"
#include "golden.h"

#include <stdlib.h>
#include <string.h>

#include "core/par.h"
#include "decoder/decoder.h"
#include "kernels/kv_tile.h"
#include "spec/drafter.h"

enum { NV = 512 };

static struct fx_model *load(void) {
    return fx_test_load_model("qwen35/models/qwen35moe-tiny.F32.gguf");
}

/* The state of a and b are the same bits: the recurrent state whole, the KV rows of every
 * position held. */
static void assert_same_sequence(const struct fx_context *a, const struct fx_context *b) {
    assert_int_equal(a->kv.n_filled, b->kv.n_filled);
    const struct fx_rstate *x = &a->rs, *y = &b->rs;
    assert_memory_equal(x->conv, y->conv, (size_t)x->n_layer * (size_t)x->conv_floats * 4);
    assert_memory_equal(x->ssm, y->ssm, (size_t)x->n_layer * (size_t)x->ssm_floats * 4);
    const struct fx_kv_contig *k = &a->kv, *l = &b->kv;
    for (int il = 0; il < k->n_layer; il++)
        for (int g = 0; g < k->n_head_kv; g++) {
            for (int32_t pos = 0; pos < k->n_filled; pos++) { /* keys: out of their tiles */
                uint8_t row_a[1 << 12], row_b[1 << 12];
                assert_true(k->k_row <= sizeof row_a);
                struct fx_kv_key_at at = fx_kv_contig_key(k, il, g, pos);
                struct fx_kv_key_at bt = fx_kv_contig_key(l, il, g, pos);
                fx_kv_tile_get(k->type_k, k->head_dim, at.tile, at.slot, 0, k->head_dim, row_a);
                fx_kv_tile_get(l->type_k, l->head_dim, bt.tile, bt.slot, 0, l->head_dim, row_b);
                assert_memory_equal(row_a, row_b, k->k_row);
            }
            assert_memory_equal(fx_kv_contig_v(k, il, g, 0), fx_kv_contig_v(l, il, g, 0),
                                (size_t)k->n_filled * k->v_row);
        }
}

/* After 58 positions, a verify step of 1 + 9 rows (crossing the chunk end at 64) cut back to
 * each length it covers, then continued by one token, against the plain run of those tokens. A
 * plain call keeps no snapshot: cutting back after it is refused, as is a verify step longer
 * than FX_ROLLBACK_MAX + 1 rows. */
FX_TEST(qwen35_rollback_equals_plain) {
    struct fx_model *m = load();
    enum { P = 58, K = 9, N = P + K + 2 };
    fx_token toks[N];
    struct fx_test_rng rng = {1616};
    toks[0] = 1;
    for (int i = 1; i < N; i++)
        toks[i] = 3 + (fx_token)(fx_test_rng_u64(&rng) % (NV - 3));
    float *logits = malloc(sizeof(float) * (K + 1) * NV);
    float a[NV], b[NV];
    struct fx_error err;
    struct fx_context *ctx = fx_test_f32_context(m, 256, 64),
                      *plain = fx_test_f32_context(m, 256, 64);
    for (int keep = 1; keep <= K + 1; keep++) {
        assert_int_equal(fx_forward_batch_last(ctx, toks, P, 0, a, &err), FX_OK);
        uint64_t before = fx_par_cold_entries(); /* snapshots included, one pool entry */
        assert_int_equal(fx_forward_verify(ctx, toks + P, K + 1, P, logits, &err), FX_OK);
        assert_int_equal(fx_par_cold_entries(), before + 1);
        assert_int_equal(fx_context_kv_truncate(ctx, P + keep, &err), FX_OK);
        assert_int_equal(fx_forward_batch_last(plain, toks, P + keep, 0, b, &err), FX_OK);
        assert_memory_equal(logits + (size_t)(keep - 1) * NV, b, sizeof b);
        assert_same_sequence(ctx, plain);
        /* A cut spends the snapshots: another is refused. */
        if (keep > 1 && keep <= K)
            assert_int_equal(fx_context_kv_truncate(ctx, P + 1, &err), FX_ERR_UNSUPPORTED);
        assert_int_equal(fx_forward_token(ctx, toks[P + keep], P + keep, a, &err), FX_OK);
        assert_int_equal(fx_forward_token(plain, toks[P + keep], P + keep, b, &err), FX_OK);
        assert_memory_equal(a, b, sizeof a);
        assert_same_sequence(ctx, plain);
    }
    assert_int_equal(fx_forward_batch_last(ctx, toks, P + 3, 0, a, &err), FX_OK);
    assert_int_equal(fx_context_kv_truncate(ctx, P + 1, &err), FX_ERR_UNSUPPORTED);
    fx_token many[FX_ROLLBACK_MAX + 2] = {0};
    assert_int_equal(fx_forward_verify(ctx, many, FX_ROLLBACK_MAX + 2, P + 3, logits, &err),
                     FX_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "can roll back at most"));
    free(logits);
    fx_context_free(ctx);
    fx_context_free(plain);
    fx_model_free(m);
}

/* A drafter that knows the greedy text and spoils its proposal at a place that moves on with
 * every call (none, then after 0, 1, ... correct tokens). */
struct oracle {
    struct fx_drafter base;
    const fx_token *text; /* the greedy continuation of the whole sequence */
    int32_t n_text, calls;
};

static fx_status oracle_propose(struct fx_drafter *d, const fx_token *seq, int32_t n_seq, int32_t k,
                                fx_token *draft, int32_t *n_draft, struct fx_error *err) {
    (void)seq;
    (void)err;
    struct oracle *o = (struct oracle *)d;
    int32_t bad = o->calls++ % (k + 1); /* k: no spoiled draft */
    int32_t m = 0;
    for (; m < k && n_seq + m < o->n_text; m++)
        draft[m] = m == bad ? (o->text[n_seq + m] + 1) % NV : o->text[n_seq + m];
    *n_draft = m;
    return FX_OK;
}

static const struct fx_drafter_ops oracle_ops = {.name = "oracle", .propose = oracle_propose};

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

FX_TEST(qwen35_spec_equals_plain) {
    struct fx_model *m = load();
    enum { P = 20, G = 80 };
    fx_token text[P + G];
    struct fx_test_rng rng = {77};
    text[0] = 1;
    for (int i = 1; i < P; i++)
        text[i] = 3 + (fx_token)(fx_test_rng_u64(&rng) % (NV - 3));
    struct fx_error err;
    float logits[NV];
    struct fx_context *plain = fx_test_f32_context(m, 256, 64),
                      *ctx = fx_test_f32_context(m, 256, 64);
    assert_int_equal(fx_forward_batch_last(plain, text, P, 0, logits, &err), FX_OK);
    for (int i = P; i < P + G; i++) {
        int best = 0;
        for (int t = 1; t < NV; t++)
            if (logits[t] > logits[best])
                best = t;
        text[i] = best;
        if (i + 1 < P + G)
            assert_int_equal(fx_forward_token(plain, best, i, logits, &err), FX_OK);
    }

    struct oracle o = {.base = {&oracle_ops}, .text = text, .n_text = P + G};
    struct fx_spec_params sp = fx_spec_default_params();
    sp.draft_max = 6;
    sp.adaptive = false;
    struct fx_spec *s;
    assert_int_equal(fx_spec_create(ctx, &o.base, &sp, &s, &err), FX_OK);
    struct fx_sampler_params smp_p = fx_sampler_default_params();
    smp_p.temperature = 0;
    struct fx_sampler *smp;
    assert_int_equal(fx_sampler_create(NV, &smp_p, &smp, &err), FX_OK);
    fx_token seq[P + G];
    memcpy(seq, text, sizeof(fx_token) * P);
    /* The prompt but its last token, which the first step evaluates. */
    assert_int_equal(fx_forward_batch_last(ctx, text, P - 1, 0, logits, &err), FX_OK);
    int32_t n_seq = P;
    while (n_seq < P + G) {
        struct collect c = {seq + n_seq, 0};
        int32_t n_out;
        assert_int_equal(fx_spec_step(s, smp, seq, n_seq, P + G - n_seq, collect, &c, &n_out, &err),
                         FX_OK);
        n_seq += c.n;
    }
    assert_memory_equal(seq, text, sizeof seq);
    struct fx_spec_stats st;
    fx_spec_stats(s, &st);
    assert_true(st.verify_steps > 10 && st.accepted > 0 && st.accepted < st.drafted);
    /* The sequence the speculation left is the plain one, bit for bit (plain holds every
     * position but the last). */
    assert_int_equal(fx_context_kv_len(ctx), P + G - 1);
    assert_same_sequence(ctx, plain);
    fx_spec_free(s);
    fx_sampler_free(smp);
    fx_context_free(ctx);
    fx_context_free(plain);
    fx_model_free(m);
}
