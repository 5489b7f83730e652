/* Pooled Qwen3.5 sequences (kv/paged.h): each live sequence owns a recurrent state beside its
 * blocks. What must hold bit for bit: a pooled sequence against the contiguous context, rows of
 * several sequences in one multi-sequence step (interleaved, so that the delta rule's runs are
 * cut at each change of sequence) against each sequence alone, and a fork against its parent.
 * The recurrent states themselves are compared too, not only the logits. qwen35moe-tiny F32 with
 * f32 KV rows, as the golden tests run it. */
#include "fx_test.h"
#include "golden.h"

#include <stdlib.h>
#include <string.h>

#include "decoder/decoder.h"
#include "kv/paged.h"
#include "kv/state.h"

enum { NV = 512 };

static struct fx_model *load(void) {
    return fx_test_load_model("qwen35/models/qwen35moe-tiny.F32.gguf");
}

static struct fx_kv_pool *make_pool(const struct fx_model *m) {
    struct fx_kv_pool_params pp = fx_kv_pool_default_params();
    pp.n_blocks = 48;
    pp.n_seq_max = 8;
    pp.type_k = pp.type_v = FX_TYPE_F32;
    struct fx_kv_pool *pool;
    struct fx_error err;
    if (fx_kv_pool_create(m, &pp, &pool, &err) != FX_OK)
        fail_msg("pool: %s", err.msg);
    return pool;
}

static void random_tokens(fx_token *t, int n, uint64_t seed) {
    struct fx_test_rng rng = {seed};
    t[0] = 1;
    for (int i = 1; i < n; i++)
        t[i] = 3 + (fx_token)(fx_test_rng_u64(&rng) % (NV - 3));
}

static void assert_rstate_equal(const struct fx_rstate *a, const struct fx_rstate *b) {
    assert_int_equal(a->n_layer, b->n_layer);
    assert_true(a->n_layer > 0);
    assert_memory_equal(a->conv, b->conv, (size_t)a->n_layer * (size_t)a->conv_floats * 4);
    assert_memory_equal(a->ssm, b->ssm, (size_t)a->n_layer * (size_t)a->ssm_floats * 4);
}

/* Every row's logits of toks[0..n) in a fresh contiguous context: [n][NV]. */
static float *alone(const struct fx_model *m, const fx_token *toks, int n,
                    struct fx_context **keep) {
    float *out = malloc(sizeof(float) * (size_t)n * NV);
    assert_non_null(out);
    struct fx_context *ctx = fx_test_f32_context(m, 256, 512);
    struct fx_error err;
    assert_int_equal(fx_forward_batch(ctx, toks, n, 0, out, &err), FX_OK);
    *keep = ctx;
    return out;
}

/* 100 positions (crossing a delta-rule chunk end at 64 and several block ends): 70 in one
 * multi-sequence step with every row's logits, then 30 one at a time, against one contiguous
 * batch; then the states. */
FX_TEST(qwen35_paged_matches_contiguous) {
    struct fx_model *m = load();
    enum { N = 100, P = 70 };
    fx_token toks[N];
    random_tokens(toks, N, 3501);
    struct fx_context *ref;
    float *want = alone(m, toks, N, &ref);
    struct fx_context *ctx = fx_test_f32_context(m, 256, 32);
    struct fx_kv_pool *pool = make_pool(m);
    struct fx_error err;
    fx_seq_id seq;
    assert_int_equal(fx_kv_seq_create(pool, &seq, &err), FX_OK);
    float *got = calloc((size_t)N * NV, sizeof(float));
    int32_t pos[P];
    fx_seq_id sq[P];
    for (int i = 0; i < P; i++) {
        pos[i] = i;
        sq[i] = seq;
    }
    struct fx_batch b = {.n = P, .token = toks, .pos = pos, .seq = sq};
    assert_int_equal(fx_forward_multi_seq(ctx, pool, &b, got, &err), FX_OK);
    for (int p = P; p < N; p++)
        assert_int_equal(
            fx_forward_token_paged(ctx, pool, seq, toks[p], p, got + (size_t)p * NV, &err), FX_OK);
    assert_memory_equal(got, want, sizeof(float) * (size_t)N * NV);
    assert_rstate_equal(&pool->seqs[seq].rs, &ref->rs);

    /* A hybrid sequence is kept whole or cleared; cleared, it computes the same again. */
    assert_int_equal(fx_kv_seq_truncate(pool, seq, 50, &err), FX_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "can only be kept whole or cleared"));
    assert_int_equal(fx_kv_seq_len(pool, seq), N);
    assert_int_equal(fx_kv_seq_truncate(pool, seq, 0, &err), FX_OK);
    float last[NV];
    assert_int_equal(fx_forward_batch_last_paged(ctx, pool, seq, toks, N, 0, last, &err), FX_OK);
    assert_memory_equal(last, want + (size_t)(N - 1) * NV, sizeof last);
    assert_rstate_equal(&pool->seqs[seq].rs, &ref->rs);

    /* No blocks come from the prefix cache: the state at their ends is not kept. */
    fx_seq_id again;
    int32_t n_cached = -1;
    assert_int_equal(fx_kv_seq_create_cached(pool, toks, N, &again, &n_cached, &err), FX_OK);
    assert_int_equal(n_cached, 0);
    fx_kv_pool_free(pool);
    free(got);
    free(want);
    fx_context_free(ctx);
    fx_context_free(ref);
    fx_model_free(m);
}

/* Three sequences of 37, 70 and 5 prompt tokens in one step, their rows dealt round-robin while
 * each lasts, then one decode row each: every row equal to its sequence computed alone. */
FX_TEST(qwen35_multi_seq_matches_alone) {
    struct fx_model *m = load();
    enum { S = 3, MAXN = 71 };
    const int len[S] = {37, 70, 5};
    fx_token toks[S][MAXN];
    float *want[S];
    struct fx_context *ref[S];
    for (int s = 0; s < S; s++) {
        random_tokens(toks[s], len[s] + 1, 7000 + (uint64_t)s);
        want[s] = alone(m, toks[s], len[s] + 1, &ref[s]);
    }
    struct fx_context *ctx = fx_test_f32_context(m, 256, 64);
    struct fx_kv_pool *pool = make_pool(m);
    struct fx_error err;
    fx_seq_id id[S];
    for (int s = 0; s < S; s++)
        assert_int_equal(fx_kv_seq_create(pool, &id[s], &err), FX_OK);

    enum { ROWS = 37 + 70 + 5 };
    fx_token t[ROWS];
    int32_t pos[ROWS];
    fx_seq_id sq[ROWS];
    int owner[ROWS], n = 0;
    for (int p = 0; p < MAXN; p++)
        for (int s = 0; s < S; s++)
            if (p < len[s]) {
                t[n] = toks[s][p];
                pos[n] = p;
                sq[n] = id[s];
                owner[n++] = s;
            }
    assert_int_equal(n, ROWS);
    float *got = malloc(sizeof(float) * ROWS * NV);
    struct fx_batch b = {.n = ROWS, .token = t, .pos = pos, .seq = sq};
    assert_int_equal(fx_forward_multi_seq(ctx, pool, &b, got, &err), FX_OK);
    for (int i = 0; i < ROWS; i++)
        assert_memory_equal(got + (size_t)i * NV, want[owner[i]] + (size_t)pos[i] * NV,
                            sizeof(float) * NV);

    for (int s = 0; s < S; s++) {
        t[s] = toks[s][len[s]];
        pos[s] = len[s];
        sq[s] = id[s];
    }
    b.n = S;
    assert_int_equal(fx_forward_multi_seq(ctx, pool, &b, got, &err), FX_OK);
    for (int s = 0; s < S; s++) {
        assert_memory_equal(got + (size_t)s * NV, want[s] + (size_t)len[s] * NV,
                            sizeof(float) * NV);
        assert_rstate_equal(&pool->seqs[id[s]].rs, &ref[s]->rs);
        free(want[s]);
        fx_context_free(ref[s]);
    }
    free(got);
    fx_kv_pool_free(pool);
    fx_context_free(ctx);
    fx_model_free(m);
}

/* A fork copies its parent's recurrent state: after 40 shared positions both continue with the
 * same 10 tokens and agree with each other and with the contiguous run; the fork then outlives
 * its freed parent and goes on with other tokens, equal to that sequence computed alone. */
FX_TEST(qwen35_fork_matches_parent) {
    struct fx_model *m = load();
    enum { P = 40, N = 50, M = 60 };
    fx_token toks[N], other[M];
    random_tokens(toks, N, 4242);
    memcpy(other, toks, sizeof(fx_token) * N);
    random_tokens(other + N - 1, M - N + 1, 99); /* other[N - 1] = 1, then random */
    struct fx_context *ref, *ref2;
    float *want = alone(m, toks, N, &ref), *want2 = alone(m, other, M, &ref2);
    struct fx_context *ctx = fx_test_f32_context(m, 256, 16);
    struct fx_kv_pool *pool = make_pool(m);
    struct fx_error err;
    fx_seq_id parent, child;
    float a[NV], c[NV];
    assert_int_equal(fx_kv_seq_create(pool, &parent, &err), FX_OK);
    assert_int_equal(fx_forward_batch_last_paged(ctx, pool, parent, toks, P, 0, a, &err), FX_OK);
    assert_int_equal(fx_kv_seq_fork(pool, parent, &child, &err), FX_OK);
    assert_rstate_equal(&pool->seqs[child].rs, &pool->seqs[parent].rs);
    for (int p = P; p < N - 1; p++) {
        assert_int_equal(fx_forward_token_paged(ctx, pool, parent, toks[p], p, a, &err), FX_OK);
        assert_int_equal(fx_forward_token_paged(ctx, pool, child, toks[p], p, c, &err), FX_OK);
        assert_memory_equal(a, c, sizeof a);
        assert_memory_equal(a, want + (size_t)p * NV, sizeof a);
    }
    assert_rstate_equal(&pool->seqs[child].rs, &pool->seqs[parent].rs);
    fx_kv_seq_free(pool, parent);
    for (int p = N - 1; p < M; p++) {
        assert_int_equal(fx_forward_token_paged(ctx, pool, child, other[p], p, c, &err), FX_OK);
        assert_memory_equal(c, want2 + (size_t)p * NV, sizeof c);
    }
    assert_rstate_equal(&pool->seqs[child].rs, &ref2->rs);
    free(want);
    free(want2);
    fx_kv_pool_free(pool);
    fx_context_free(ctx);
    fx_context_free(ref);
    fx_context_free(ref2);
    fx_model_free(m);
}

/* The checksum at the end of a state file of `size` bytes, after bytes before it were edited. */
static void reseal_file(uint8_t *bytes, size_t size) {
    uint64_t c = fx_kv_state_crc64(0, bytes, size - 8);
    for (int i = 0; i < 8; i++)
        bytes[size - 8 + i] = (uint8_t)(c >> (8 * i));
}

/* Saved state (kv/state.h, version 3) carries the recurrent state: a context's 45 positions
 * saved and loaded into a fresh context for a prompt that continues them, and a pool sequence
 * saved and loaded into a pool, continue exactly as the sequence they came from (logits and
 * states memcmp); a file saved from a context loads into a pool. A prompt that leaves the saved
 * tokens early loads nothing (the state is that of all of them); a version 1 file, which has
 * no recurrent state, is refused for this model, and so is a version 2 file (an older build's
 * layout of the delta-rule states). */
FX_TEST(qwen35_state_save_load) {
    struct fx_model *m = load();
    enum { P = 45, N = 48 };
    fx_token toks[N];
    random_tokens(toks, N, 515);
    struct fx_error err;
    struct fx_context *src = fx_test_f32_context(m, 256, 512),
                      *dst = fx_test_f32_context(m, 256, 512);
    float a[NV], b[NV];
    assert_int_equal(fx_forward_batch_last(src, toks, P, 0, a, &err), FX_OK);
    const char *path = fx_test_tmpfile("q35-ctx.state");
    char saved[4096];
    snprintf(saved, sizeof saved, "%s", path);
    assert_int_equal(fx_context_state_save(src, toks, P, saved, &err), FX_OK);

    int32_t n_loaded = -1;
    assert_int_equal(fx_context_state_load(dst, saved, toks, N, &n_loaded, &err), FX_OK);
    assert_int_equal(n_loaded, P);
    assert_rstate_equal(&dst->rs, &src->rs);
    for (int p = P; p < N; p++) {
        assert_int_equal(fx_forward_token(src, toks[p], p, a, &err), FX_OK);
        assert_int_equal(fx_forward_token(dst, toks[p], p, b, &err), FX_OK);
        assert_memory_equal(a, b, sizeof a);
    }
    fx_token other[N];
    memcpy(other, toks, sizeof other);
    other[30] = toks[30] == 5 ? 6 : 5;
    assert_int_equal(fx_context_state_load(dst, saved, other, N, &n_loaded, &err), FX_OK);
    assert_int_equal(n_loaded, 0);
    assert_int_equal(fx_context_kv_len(dst), 0);

    /* Into a pool, then from the pool into another pool. */
    struct fx_kv_pool *pool = make_pool(m);
    fx_seq_id s1, s2;
    assert_int_equal(fx_kv_seq_load(pool, m, saved, &s1, &err), FX_OK);
    assert_int_equal(fx_kv_seq_len(pool, s1), P);
    const char *path2 = fx_test_tmpfile("q35-seq.state");
    char saved2[4096];
    snprintf(saved2, sizeof saved2, "%s", path2);
    assert_int_equal(fx_kv_seq_save(pool, s1, m, saved2, &err), FX_OK);
    struct fx_kv_pool *pool2 = make_pool(m);
    assert_int_equal(fx_kv_seq_load(pool2, m, saved2, &s2, &err), FX_OK);
    assert_rstate_equal(&pool2->seqs[s2].rs, &pool->seqs[s1].rs);
    struct fx_context *ref;
    float *want = alone(m, toks, N, &ref);
    struct fx_context *ctx = fx_test_f32_context(m, 256, 16);
    for (int p = P; p < N; p++) {
        assert_int_equal(fx_forward_token_paged(ctx, pool, s1, toks[p], p, a, &err), FX_OK);
        assert_int_equal(fx_forward_token_paged(ctx, pool2, s2, toks[p], p, b, &err), FX_OK);
        assert_memory_equal(a, want + (size_t)p * NV, sizeof a);
        assert_memory_equal(b, want + (size_t)p * NV, sizeof b);
    }

    /* The same file made version 1: no recurrent state section, reserved field 0. */
    size_t size;
    uint8_t *bytes = (uint8_t *)fx_test_read_file(saved, &size);
    uint32_t rec = (uint32_t)bytes[92] | (uint32_t)bytes[93] << 8 | (uint32_t)bytes[94] << 16 |
                   (uint32_t)bytes[95] << 24;
    assert_true(bytes[8] == 3 && rec > 0);
    bytes[8] = 2;
    reseal_file(bytes, size);
    fx_test_write_file(saved2, bytes, size);
    assert_int_equal(fx_context_state_load(dst, saved2, toks, N, &n_loaded, &err), FX_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "older build's layout"));
    size_t v1 = size - 4 * (size_t)rec;
    bytes[8] = 1;
    memset(bytes + 92, 0, 4);
    reseal_file(bytes, v1);
    fx_test_write_file(saved2, bytes, v1);
    assert_int_equal(fx_context_state_load(dst, saved2, toks, N, &n_loaded, &err),
                     FX_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "has no recurrent state"));
    free(bytes);
    free(want);
    fx_kv_pool_free(pool);
    fx_kv_pool_free(pool2);
    fx_context_free(ctx);
    fx_context_free(ref);
    fx_context_free(src);
    fx_context_free(dst);
    fx_model_free(m);
}
