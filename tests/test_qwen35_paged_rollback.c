/* Rolling pooled hybrid sequences back (fx_batch.snapshot, then fx_kv_seq_truncate into the
 * step's rows): several sequences verify drafts in one multi-sequence step, their rows dealt
 * round-robin, each marked sequence cut back to some row of it (or none, or all kept) while an
 * unmarked one decodes beside them. Against a second pool that only ever saw the kept tokens,
 * stepped plainly: the kept rows' logits, the recurrent states and every KV row held are
 * memcmp-equal after each round, and so are the logits of the next round's rows. Rounds cross a
 * delta-rule chunk end (64) and use all FX_ROLLBACK_MAX snapshots. qwen35-tiny F32 and Q8_0 and
 * qwen35moe-tiny F32. */
#include "fx_test.h"

#include <stdlib.h>
#include <string.h>

#include "core/par.h"
#include "kernels/kv_tile.h"
#include "kv/paged.h"

enum { S = 3, R = FX_ROLLBACK_MAX + 1, ROUNDS = 4, PROMPT_MAX = 58 };

struct rig {
    struct fx_model *m;
    int nv;
    struct fx_context *ctx;
    struct fx_kv_pool *spec, *plain; /* the sequences that verify drafts / see kept tokens only */
    fx_seq_id a[S], b[S];
};

static struct fx_kv_pool *make_pool(const struct fx_model *m, enum fx_type kv) {
    struct fx_kv_pool_params pp = fx_kv_pool_default_params();
    pp.n_blocks = 32;
    pp.n_seq_max = 4;
    pp.type_k = pp.type_v = kv;
    struct fx_kv_pool *pool;
    struct fx_error err;
    if (fx_kv_pool_create(m, &pp, &pool, &err) != FX_OK)
        fail_msg("pool: %s", err.msg);
    return pool;
}

static void rig_init(struct rig *g, const char *model, enum fx_type kv) {
    struct fx_error err;
    const char *path = fx_test_fixture(model);
    if (fx_model_load(path, NULL, &g->m, &err) != FX_OK)
        fail_msg("%s: %s", path, err.msg);
    g->nv = fx_model_n_vocab(g->m);
    struct fx_context_params cp = fx_context_default_params();
    cp.n_ctx = 256;
    cp.n_batch = 16; /* a verify step spans chunks of the call */
    cp.type_k = cp.type_v = kv;
    cp.paged_only = true;
    if (fx_context_create(g->m, &cp, &g->ctx, &err) != FX_OK)
        fail_msg("context: %s", err.msg);
    g->spec = make_pool(g->m, kv);
    g->plain = make_pool(g->m, kv);
    for (int s = 0; s < S; s++) {
        assert_int_equal(fx_kv_seq_create(g->spec, &g->a[s], &err), FX_OK);
        assert_int_equal(fx_kv_seq_create(g->plain, &g->b[s], &err), FX_OK);
    }
}

static void rig_free(struct rig *g) {
    fx_kv_pool_free(g->spec);
    fx_kv_pool_free(g->plain);
    fx_context_free(g->ctx);
    fx_model_free(g->m);
}

/* One multi-sequence step: sequence id[s] gets tok[s][0..n[s]), the rows dealt round-robin,
 * every row's logits asked for; marked[s]: its rows keep their states. out[s]: [n[s]][nv]. */
static fx_status step(struct rig *g, struct fx_kv_pool *pool, const fx_seq_id *id,
                      const fx_token *const *tok, const int *n, const bool *marked, float **out,
                      struct fx_error *err) {
    enum { MAXR = S * PROMPT_MAX + S * R };
    fx_token t[MAXR];
    int32_t pos[MAXR];
    fx_seq_id sq[MAXR];
    int8_t snap[MAXR];
    int owner[MAXR], row[MAXR], rows = 0;
    for (int j = 0, more = 1; more; j++) {
        more = 0;
        for (int s = 0; s < S; s++) {
            if (j >= n[s])
                continue;
            more = 1;
            t[rows] = tok[s][j];
            pos[rows] = fx_kv_seq_len(pool, id[s]) + j;
            sq[rows] = id[s];
            snap[rows] = marked[s];
            owner[rows] = s;
            row[rows++] = j;
        }
    }
    float *logits = malloc(sizeof(float) * (size_t)rows * (size_t)g->nv);
    assert_non_null(logits);
    struct fx_batch b = {.n = rows, .token = t, .pos = pos, .seq = sq, .snapshot = snap};
    fx_status st = fx_forward_multi_seq(g->ctx, pool, &b, logits, err);
    for (int i = 0; st == FX_OK && i < rows; i++)
        memcpy(out[owner[i]] + (size_t)row[i] * (size_t)g->nv, logits + (size_t)i * (size_t)g->nv,
               sizeof(float) * (size_t)g->nv);
    free(logits);
    return st;
}

/* Sequence x of pool p and y of q hold the same bits: length, tokens, recurrent state and the
 * K and V rows of every position, layer and head. */
static void assert_same_seq(struct fx_kv_pool *p, fx_seq_id x, struct fx_kv_pool *q, fx_seq_id y) {
    int32_t len = fx_kv_seq_len(p, x);
    assert_int_equal(len, fx_kv_seq_len(q, y));
    assert_memory_equal(fx_kv_seq_tokens(p, x), fx_kv_seq_tokens(q, y), sizeof(fx_token) * len);
    const struct fx_rstate *u = &p->seqs[x].rs, *v = &q->seqs[y].rs;
    assert_true(u->n_layer > 0);
    assert_memory_equal(u->conv, v->conv, (size_t)u->n_layer * (size_t)u->conv_floats * 4);
    assert_memory_equal(u->ssm, v->ssm, (size_t)u->n_layer * (size_t)u->ssm_floats * 4);
    for (int il = 0; il < p->n_layer; il++)
        for (int h = 0; h < p->n_head_kv; h++)
            for (int32_t pos = 0; pos < len; pos++) {
                uint8_t row_a[1 << 12], row_b[1 << 12]; /* keys: out of their tiles */
                assert_true(p->k_row <= sizeof row_a);
                struct fx_kv_key_at at = fx_kv_pool_key(p, x, il, h, pos);
                struct fx_kv_key_at bt = fx_kv_pool_key(q, y, il, h, pos);
                fx_kv_tile_get(p->type_k, p->head_dim, at.tile, at.slot, 0, p->head_dim, row_a);
                fx_kv_tile_get(q->type_k, q->head_dim, bt.tile, bt.slot, 0, q->head_dim, row_b);
                assert_memory_equal(row_a, row_b, p->k_row);
                assert_memory_equal(fx_kv_pool_v(p, x, il, h, pos), fx_kv_pool_v(q, y, il, h, pos),
                                    p->v_row);
            }
}

static void random_tokens(fx_token *t, int n, int nv, struct fx_test_rng *rng) {
    for (int i = 0; i < n; i++)
        t[i] = 3 + (fx_token)(fx_test_rng_u64(rng) % (uint64_t)(nv - 3));
}

static void rollback_equals_plain(const char *model, enum fx_type kv) {
    struct rig g;
    rig_init(&g, model, kv);
    struct fx_error err;
    struct fx_test_rng rng = {3516};
    fx_token tok[S][PROMPT_MAX];
    const fx_token *tp[S] = {tok[0], tok[1], tok[2]};
    float *out[S], *want[S];
    for (int s = 0; s < S; s++) {
        out[s] = malloc(sizeof(float) * PROMPT_MAX * (size_t)g.nv);
        want[s] = malloc(sizeof(float) * PROMPT_MAX * (size_t)g.nv);
        assert_true(out[s] && want[s]);
    }

    /* The prompts, in one step of each pool. */
    const int prompt[S] = {PROMPT_MAX, 30, 9};
    const bool none[S] = {false, false, false};
    for (int s = 0; s < S; s++) {
        random_tokens(tok[s], prompt[s], g.nv, &rng);
        tok[s][0] = 1;
    }
    assert_int_equal(step(&g, g.spec, g.a, tp, prompt, none, out, &err), FX_OK);
    assert_int_equal(step(&g, g.plain, g.b, tp, prompt, none, want, &err), FX_OK);

    /* Rows per sequence and rows kept, each round; sequence 2 decodes plainly in round 0. */
    static const int rows[ROUNDS][S] = {{10, 5, 1}, {R, 2, 6}, {4, R, 3}, {8, 8, 8}};
    static const int keep[ROUNDS][S] = {{3, 5, 1}, {9, 1, 6}, {1, R, 2}, {8, 2, 5}};
    for (int r = 0; r < ROUNDS; r++) {
        const bool marked[S] = {true, true, r > 0};
        int32_t len[S];
        for (int s = 0; s < S; s++) {
            len[s] = fx_kv_seq_len(g.spec, g.a[s]);
            random_tokens(tok[s], rows[r][s], g.nv, &rng);
        }
        uint64_t entries = fx_par_cold_entries();
        assert_int_equal(step(&g, g.spec, g.a, tp, rows[r], marked, out, &err), FX_OK);
        assert_int_equal(fx_par_cold_entries(), entries + 1);
        for (int s = 0; s < S; s++)
            assert_int_equal(fx_kv_seq_truncate(g.spec, g.a[s], len[s] + keep[r][s], &err), FX_OK);
        /* A cut spends the snapshots: another is refused. */
        if (r == 0)
            assert_int_equal(fx_kv_seq_truncate(g.spec, g.a[0], len[0] + 1, &err),
                             FX_ERR_UNSUPPORTED);
        assert_int_equal(step(&g, g.plain, g.b, tp, keep[r], none, want, &err), FX_OK);
        for (int s = 0; s < S; s++) {
            assert_memory_equal(out[s], want[s], sizeof(float) * (size_t)keep[r][s] * g.nv);
            assert_same_seq(g.spec, g.a[s], g.plain, g.b[s]);
        }
    }
    /* The next token, plainly: the same logits and states. */
    const int one[S] = {1, 1, 1};
    for (int s = 0; s < S; s++)
        tok[s][0] = 7;
    assert_int_equal(step(&g, g.spec, g.a, tp, one, none, out, &err), FX_OK);
    assert_int_equal(step(&g, g.plain, g.b, tp, one, none, want, &err), FX_OK);
    for (int s = 0; s < S; s++) {
        assert_memory_equal(out[s], want[s], sizeof(float) * g.nv);
        assert_same_seq(g.spec, g.a[s], g.plain, g.b[s]);
    }
    /* A plain step keeps nothing to cut back to, and more rows than FX_ROLLBACK_MAX + 1 are
     * refused before anything changes. */
    int32_t len0 = fx_kv_seq_len(g.spec, g.a[0]);
    assert_int_equal(fx_kv_seq_truncate(g.spec, g.a[0], len0 - 1, &err), FX_ERR_UNSUPPORTED);
    const int many[S] = {R + 1, 0, 0};
    const bool first[S] = {true, false, false};
    assert_int_equal(step(&g, g.spec, g.a, tp, many, first, out, &err), FX_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "keeps at most"));
    assert_int_equal(fx_kv_seq_len(g.spec, g.a[0]), len0);
    assert_same_seq(g.spec, g.a[0], g.plain, g.b[0]);
    /* The pool that never asked holds no snapshot. */
    for (int s = 0; s < S; s++)
        assert_int_equal(g.plain->seqs[g.b[s]].snap_alloc, 0);
    for (int s = 0; s < S; s++) {
        free(out[s]);
        free(want[s]);
    }
    rig_free(&g);
}

FX_TEST(qwen35_paged_rollback_f32) {
    rollback_equals_plain("qwen35/models/qwen35-tiny.F32.gguf", FX_TYPE_F32);
}

FX_TEST(qwen35_paged_rollback_q8_0) {
    rollback_equals_plain("qwen35/models/qwen35-tiny.Q8_0.gguf", FX_TYPE_F16);
}

FX_TEST(qwen35_paged_rollback_moe) {
    rollback_equals_plain("qwen35/models/qwen35moe-tiny.F32.gguf", FX_TYPE_F32);
}
