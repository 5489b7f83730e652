/* decoder/ over paged KV (ARCHITECTURE.md rule 3): a sequence's logits through a paged pool, in a
 * multi-sequence step beside other sequences, or continued from the prefix cache are the same
 * bytes as through the contiguous cache alone, for every fixture architecture and KV type; a step
 * that does not fit changes nothing. */
#include "fx_test.h"
#include "golden.h"

#include <stdlib.h>
#include <string.h>

#include "core/par.h"
#include "kv/paged.h"

#define NV 512 /* every fixture's vocabulary */

static const char *const ARCH_FILES[] = {
    "models/llama-tiny.F32.gguf",     "models/llama-tiny-tied.Q8_0.gguf",
    "models/qwen2-tiny.F32.gguf",     "models/qwen3-tiny.Q4_K_M.gguf",
    "models/gemma2-tiny.F32.gguf",    "models/gemma3-tiny.Q8_0.gguf",
    "models/qwen3moe-tiny.Q8_0.gguf", "models/gptoss-tiny.MXFP4_MOE.gguf",
};
#define N_ARCH (sizeof ARCH_FILES / sizeof ARCH_FILES[0])

static const enum fx_type KV_TYPES[][2] = {
    {FX_TYPE_F32, FX_TYPE_F32}, {FX_TYPE_F16, FX_TYPE_F16}, {FX_TYPE_Q8_0, FX_TYPE_F16}};

static struct fx_context *context(const struct fx_model *m, int n_ctx, int n_batch, int n_threads,
                                  const enum fx_type *kv, bool paged_only) {
    struct fx_context_params p = {.n_ctx = n_ctx,
                                  .n_batch = n_batch,
                                  .n_threads = n_threads,
                                  .type_k = kv[0],
                                  .type_v = kv[1],
                                  .paged_only = paged_only};
    return fx_test_context(m, &p);
}

static struct fx_kv_pool *pool(const struct fx_model *m, int n_blocks, int block_size,
                               const enum fx_type *kv) {
    struct fx_kv_pool_params p = fx_kv_pool_default_params();
    p.n_blocks = n_blocks;
    p.block_size = block_size;
    p.type_k = kv[0];
    p.type_v = kv[1];
    struct fx_kv_pool *pl;
    struct fx_error err;
    if (fx_kv_pool_create(m, &p, &pl, &err) != FX_OK)
        fail_msg("pool: %s", err.msg);
    return pl;
}

static fx_seq_id new_seq(struct fx_kv_pool *pl) {
    fx_seq_id s;
    struct fx_error err;
    if (fx_kv_seq_create(pl, &s, &err) != FX_OK)
        fail_msg("sequence: %s", err.msg);
    return s;
}

/* Deterministic tokens 3..NV-1 for sequence `salt`. */
static void tokens(fx_token *out, int n, uint64_t salt) {
    struct fx_test_rng r = {0x9e3779b97f4a7c15ull ^ salt};
    for (int i = 0; i < n; i++)
        out[i] = 3 + (fx_token)(fx_test_rng_u64(&r) % (NV - 3));
}

/* ---- one sequence: paged against contiguous ----------------------------------------------- */

/* `steps` token steps of a paged sequence in blocks of block_size against the contiguous cache:
 * the same logits at every step. */
static void paged_steps_match(const struct fx_model *m, const char *file, const enum fx_type *kv,
                              int block_size, int steps, uint64_t salt) {
    fx_token t[256];
    static float ref[NV], got[NV];
    assert_true(steps <= 256);
    struct fx_context *cc = context(m, steps, 512, 2, kv, false);
    struct fx_context *pc = context(m, steps, 512, 2, kv, true);
    struct fx_kv_pool *pl = pool(m, (steps + block_size - 1) / block_size, block_size, kv);
    fx_seq_id s = new_seq(pl);
    tokens(t, steps, salt);
    for (int i = 0; i < steps; i++) {
        FX_TEST_OK(fx_forward_token(cc, t[i], i, ref, &e_));
        FX_TEST_OK(fx_forward_token_paged(pc, pl, s, t[i], i, got, &e_));
        if (memcmp(ref, got, sizeof ref) != 0)
            fail_msg("%s, KV %s/%s, blocks of %d, step %d: paged logits differ", file,
                     fx_type_name(kv[0]), fx_type_name(kv[1]), block_size, i);
    }
    assert_int_equal(fx_kv_seq_len(pl, s), steps);
    fx_kv_pool_free(pl);
    fx_context_free(pc);
    fx_context_free(cc);
}

FX_TEST(decoder_paged_token_matches_contiguous) {
    for (size_t f = 0; f < N_ARCH; f++) {
        struct fx_model *m = fx_test_load_model(ARCH_FILES[f]);
        for (size_t k = 0; k < sizeof KV_TYPES / sizeof KV_TYPES[0]; k++) {
            int block_size = f % 2 ? 16 : 5; /* a block size that does not divide the runs */
            paged_steps_match(m, ARCH_FILES[f], KV_TYPES[k], block_size, 104, f);
        }
        fx_model_free(m);
    }
}

/* Keys are kept in tiles of 16 positions inside each block: blocks of a multiple of 16 hand the
 * kernel whole tiles in place (16, 32, 48: some that divide the runs of 64, some not), others
 * (24, 40) split some groups of 16 over two blocks, and every one gives the contiguous logits,
 * past two runs. */
FX_TEST(decoder_paged_block_sizes_around_key_tiles) {
    static const int sizes[] = {16, 32, 48, 24, 40};
    struct fx_model *m = fx_test_load_model(ARCH_FILES[0]);
    for (size_t k = 0; k < sizeof KV_TYPES / sizeof KV_TYPES[0]; k++)
        for (size_t b = 0; b < sizeof sizes / sizeof sizes[0]; b++)
            paged_steps_match(m, ARCH_FILES[0], KV_TYPES[k], sizes[b], 140, 7);
    fx_model_free(m);
}

FX_TEST(decoder_paged_prefill_matches_contiguous) {
    enum { N = 45 };
    fx_token t[N + 1];
    static float ref[NV], got[NV], step_ref[NV], step_got[NV];
    for (size_t f = 0; f < N_ARCH; f++) {
        struct fx_model *m = fx_test_load_model(ARCH_FILES[f]);
        struct fx_context *cc = context(m, 64, 512, 2, KV_TYPES[0], false);
        /* A batch of 8 rows: the paged prefill runs in chunks too. */
        struct fx_context *pc = context(m, 64, 8, 3, KV_TYPES[0], true);
        struct fx_kv_pool *pl = pool(m, 8, 16, KV_TYPES[0]);
        fx_seq_id s = new_seq(pl);
        tokens(t, N + 1, 100 + f);
        FX_TEST_OK(fx_forward_batch_last(cc, t, N, 0, ref, &e_));
        /* The prompt in two calls of 19 and 26 rows. */
        FX_TEST_OK(fx_forward_batch_last_paged(pc, pl, s, t, 19, 0, got, &e_));
        FX_TEST_OK(fx_forward_batch_last_paged(pc, pl, s, t + 19, N - 19, 19, got, &e_));
        assert_memory_equal(ref, got, sizeof ref);
        FX_TEST_OK(fx_forward_token(cc, t[N], N, step_ref, &e_));
        FX_TEST_OK(fx_forward_token_paged(pc, pl, s, t[N], N, step_got, &e_));
        assert_memory_equal(step_ref, step_got, sizeof step_ref);
        const fx_token *held = fx_kv_seq_tokens(pl, s);
        assert_int_equal(fx_kv_seq_len(pl, s), N + 1);
        assert_memory_equal(held, t, sizeof(fx_token) * (N + 1));
        fx_kv_pool_free(pl);
        fx_context_free(pc);
        fx_context_free(cc);
        fx_model_free(m);
    }
}

/* ---- many sequences in one step ------------------------------------------------------------ */

/* 8 sequences with prompts of different lengths arrive at different steps, prefill in chunks of
 * at most CHUNK rows beside the others' decode rows, generate greedily and leave at different
 * steps. Every logits row the multi-sequence step returned must equal the same sequence's row
 * computed alone through a contiguous cache (fx_forward_batch over its final tokens). */
enum { N_SEQ = 8, MAX_TOK = 64, CHUNK = 7 };

struct sim_seq {
    int arrive, n_prompt, n_gen;
    fx_token tok[MAX_TOK];
    int n_tok;            /* tokens fed so far */
    int n_out;            /* logits rows received */
    int out_pos[MAX_TOK]; /* the position of each received row */
    float *out;           /* [MAX_TOK][NV] */
    fx_seq_id id;
    bool live, done;
};

static void run_multi(struct fx_model *m, int n_threads, const enum fx_type *kv,
                      struct sim_seq *sq) {
    struct fx_context *pc = context(m, MAX_TOK, 32, n_threads, kv, true);
    struct fx_kv_pool *pl = pool(m, N_SEQ * (MAX_TOK / 16 + 1), 16, kv);
    fx_token tok[N_SEQ * CHUNK];
    int32_t pos[N_SEQ * CHUNK];
    fx_seq_id seq[N_SEQ * CHUNK];
    int8_t want[N_SEQ * CHUNK];
    int owner[N_SEQ * CHUNK];
    float *logits = malloc(sizeof(float) * N_SEQ * CHUNK * NV);
    for (int stepno = 0;; stepno++) {
        int n = 0, active = 0;
        for (int j = 0; j < N_SEQ; j++) {
            struct sim_seq *s = &sq[j];
            if (s->done || stepno < s->arrive)
                continue;
            active++;
            if (!s->live) {
                s->id = new_seq(pl);
                s->live = true;
            }
            /* A prompt chunk, or the one token generated last step. */
            int end = s->n_tok < s->n_prompt ? s->n_tok + CHUNK : s->n_tok + 1;
            end = end > s->n_prompt && s->n_tok < s->n_prompt ? s->n_prompt : end;
            for (int p = s->n_tok; p < end; p++, n++) {
                tok[n] = s->tok[p];
                pos[n] = p;
                seq[n] = s->id;
                want[n] = p == end - 1 && end >= s->n_prompt;
                owner[n] = j;
            }
            s->n_tok = end;
        }
        if (active == 0)
            break;
        struct fx_batch b = {.n = n, .token = tok, .pos = pos, .seq = seq, .logits = want};
        FX_TEST_OK(fx_forward_multi_seq(pc, pl, &b, logits, &e_));
        int r = 0;
        for (int i = 0; i < n; i++) {
            if (!want[i])
                continue;
            struct sim_seq *s = &sq[owner[i]];
            memcpy(s->out + (size_t)s->n_out * NV, logits + (size_t)r++ * NV, sizeof(float) * NV);
            s->out_pos[s->n_out++] = pos[i];
            if (s->n_tok == s->n_prompt + s->n_gen) {
                fx_kv_seq_free(pl, s->id); /* retired */
                s->done = true;
            } else {
                s->tok[s->n_tok] = (fx_token)fx_kernels_named("generic")->argmax(
                    logits + (size_t)(r - 1) * NV, NV);
            }
        }
    }
    struct fx_kv_pool_stats st;
    fx_kv_pool_stats(pl, &st);
    assert_int_equal(st.n_seq, 0);
    free(logits);
    fx_kv_pool_free(pl);
    fx_context_free(pc);
}

FX_TEST(decoder_multi_seq_matches_each_alone) {
    static const struct {
        int arrive, n_prompt, n_gen;
    } plan[N_SEQ] = {{0, 20, 9},  {0, 3, 30}, {1, 33, 5}, {2, 1, 12},
                     {2, 16, 16}, {5, 40, 3}, {9, 8, 20}, {14, 12, 1}};
    static float ref[MAX_TOK * NV];
    static const char *const files[] = {
        "models/llama-tiny.Q4_K.gguf", "models/gemma2-tiny.F32.gguf",
        "models/qwen3moe-tiny.F32.gguf", "models/gptoss-tiny.F32.gguf"};
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        struct fx_model *m = fx_test_load_model(files[f]);
        for (int threads = 1; threads <= 3; threads += 2) {
            const enum fx_type *kv = KV_TYPES[f % 3];
            struct sim_seq sq[N_SEQ] = {0};
            for (int j = 0; j < N_SEQ; j++) {
                sq[j].arrive = plan[j].arrive;
                sq[j].n_prompt = plan[j].n_prompt;
                sq[j].n_gen = plan[j].n_gen;
                sq[j].out = malloc(sizeof(float) * MAX_TOK * NV);
                tokens(sq[j].tok, plan[j].n_prompt, 1000 * f + (size_t)j);
            }
            run_multi(m, threads, kv, sq);
            struct fx_context *cc = context(m, MAX_TOK, 512, 2, kv, false);
            for (int j = 0; j < N_SEQ; j++) {
                struct sim_seq *s = &sq[j];
                assert_true(s->done);
                assert_int_equal(s->n_out, s->n_gen + 1);
                FX_TEST_OK(fx_forward_batch(cc, s->tok, s->n_tok, 0, ref, &e_));
                for (int o = 0; o < s->n_out; o++)
                    if (memcmp(s->out + (size_t)o * NV, ref + (size_t)s->out_pos[o] * NV,
                               sizeof(float) * NV) != 0)
                        fail_msg("%s, %d threads: sequence %d's logits at position %d differ "
                                 "from the sequence run alone",
                                 files[f], threads, j, s->out_pos[o]);
                free(s->out);
            }
            fx_context_free(cc);
        }
        fx_model_free(m);
    }
}

/* Steps whose attention blocks are not one per sequence: rows of two sequences interleaved (each
 * sequence's rows in several blocks, a later row reading keys an earlier block's row stores), and
 * one sequence's rows over two blocks beside another's. A step of one row per sequence follows.
 * Every row's logits must be its sequence's alone (the keys a block reads are stored before any
 * block attends), on one worker and on three (where a step of few rows keeps each worker's own
 * copy of the rows): dense architectures with Q/K norms, QKV biases and post-norms. */
FX_TEST(decoder_multi_seq_blocks_sharing_a_sequence_match_each_alone) {
    static const char *const files[] = {
        "models/llama-tiny.Q4_K.gguf", "models/qwen3-tiny.Q4_K_M.gguf",
        "models/qwen2-tiny.F32.gguf", "models/gemma2-tiny.F32.gguf"};
    enum { NA = 4 + 40 + 1, NB = 4 + 1 + 1, MAXN = 41 };
    static float ref_a[NA * NV], ref_b[NB * NV], got[MAXN * NV];
    fx_token ta[NA], tb[NB];
    tokens(ta, NA, 71);
    tokens(tb, NB, 72);
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        struct fx_model *m = fx_test_load_model(files[f]);
        const enum fx_type *kv = KV_TYPES[f % 3];
        struct fx_context *cc = context(m, 64, 512, 1, kv, false);
        FX_TEST_OK(fx_forward_batch(cc, ta, NA, 0, ref_a, &e_));
        FX_TEST_OK(fx_forward_batch(cc, tb, NB, 0, ref_b, &e_));
        fx_context_free(cc);
        for (int threads = 1; threads <= 3; threads += 2) {
            struct fx_context *pc = context(m, 64, 512, threads, kv, true);
            struct fx_kv_pool *pl = pool(m, 8, 16, kv);
            fx_seq_id a = new_seq(pl), b = new_seq(pl);
            /* The first step alternates a and b row by row (8 rows: few enough for own rows). */
            fx_token tok[MAXN];
            int32_t pos[MAXN];
            fx_seq_id seq[MAXN];
            const float *want[MAXN];
            int n = 0;
            for (int i = 0; i < 4; i++) {
                tok[n] = ta[i], pos[n] = i, seq[n] = a, want[n++] = ref_a + i * NV;
                tok[n] = tb[i], pos[n] = i, seq[n] = b, want[n++] = ref_b + i * NV;
            }
            for (int step = 0; step < 3; step++) {
                if (step == 1) { /* b's one row, then 40 of a: two blocks of a */
                    n = 0;
                    tok[n] = tb[4], pos[n] = 4, seq[n] = b, want[n++] = ref_b + 4 * NV;
                    for (int i = 4; i < 44; i++)
                        tok[n] = ta[i], pos[n] = i, seq[n] = a, want[n++] = ref_a + i * NV;
                } else if (step == 2) { /* one row of each */
                    n = 0;
                    tok[n] = ta[44], pos[n] = 44, seq[n] = a, want[n++] = ref_a + 44 * NV;
                    tok[n] = tb[5], pos[n] = 5, seq[n] = b, want[n++] = ref_b + 5 * NV;
                }
                struct fx_batch bt = {.n = n, .token = tok, .pos = pos, .seq = seq};
                FX_TEST_OK(fx_forward_multi_seq(pc, pl, &bt, got, &e_));
                for (int i = 0; i < n; i++)
                    if (memcmp(got + i * NV, want[i], sizeof(float) * NV) != 0)
                        fail_msg("%s, %d threads, step %d: row %d (sequence %d, position %d) "
                                 "differs from the sequence alone",
                                 files[f], threads, step, i, seq[i], pos[i]);
            }
            fx_kv_pool_free(pl);
            fx_context_free(pc);
        }
        fx_model_free(m);
    }
}

/* ---- the prefix cache ---------------------------------------------------------------------- */

FX_TEST(decoder_prefix_cache_continues_bit_identically) {
    enum { N = 40 };
    fx_token a[N], b[N];
    static float ref[NV], got[NV];
    static const char *const files[] = {"models/qwen3-tiny.F32.gguf",
                                        "models/gemma3-tiny.F32.gguf"};
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        struct fx_model *m = fx_test_load_model(files[f]);
        struct fx_context *cc = context(m, 64, 512, 2, KV_TYPES[1], false);
        struct fx_context *pc = context(m, 64, 512, 2, KV_TYPES[1], true);
        struct fx_kv_pool *pl = pool(m, 8, 16, KV_TYPES[1]);
        tokens(a, N, 7 + f);
        memcpy(b, a, sizeof a);
        b[N - 3] = 5; /* b shares a's first 37 tokens: two whole blocks */
        fx_seq_id s = new_seq(pl);
        FX_TEST_OK(fx_forward_batch_last_paged(pc, pl, s, a, N, 0, got, &e_));
        fx_kv_seq_free(pl, s);

        int32_t cached;
        FX_TEST_OK(fx_kv_seq_create_cached(pl, b, N, &s, &cached, &e_));
        assert_int_equal(cached, 32);
        FX_TEST_OK(
            fx_forward_batch_last_paged(pc, pl, s, b + cached, N - cached, cached, got, &e_));
        FX_TEST_OK(fx_forward_batch_last(cc, b, N, 0, ref, &e_));
        assert_memory_equal(ref, got, sizeof ref);
        struct fx_kv_pool_stats st;
        fx_kv_pool_stats(pl, &st);
        assert_int_equal(st.prefix_hits, 2);
        fx_kv_pool_free(pl);
        fx_context_free(pc);
        fx_context_free(cc);
        fx_model_free(m);
    }
}

/* ---- a step that does not fit -------------------------------------------------------------- */

FX_TEST(decoder_multi_seq_full_pool_changes_nothing) {
    struct fx_model *m = fx_test_load_model("models/llama-tiny.F32.gguf");
    struct fx_context *pc = context(m, 64, 512, 2, KV_TYPES[0], true);
    struct fx_kv_pool *pl = pool(m, 5, 4, KV_TYPES[0]); /* 20 positions */
    fx_token t[16];
    tokens(t, 16, 3);
    static float logits[16 * NV], again[NV], ref[NV];
    fx_seq_id a = new_seq(pl), b = new_seq(pl);
    FX_TEST_OK(fx_forward_batch_last_paged(pc, pl, a, t, 9, 0, logits, &e_)); /* 3 blocks */
    fx_seq_id c;
    FX_TEST_OK(fx_kv_seq_fork(pl, a, &c, &e_)); /* shares a's partial third block */
    FX_TEST_OK(fx_forward_batch_last_paged(pc, pl, b, t, 4, 0, logits, &e_)); /* 1 block */
    int32_t refs[5];
    memcpy(refs, pl->refs, sizeof refs);

    /* a's row goes into its shared partial block (a copy: one block, the last free one), b
     * needs a new block too: two blocks, one free. */
    fx_token tok2[2] = {t[9], t[4]};
    int32_t pos2[2] = {9, 4};
    fx_seq_id seq2[2] = {a, b};
    struct fx_batch step2 = {.n = 2, .token = tok2, .pos = pos2, .seq = seq2};
    struct fx_error err;
    assert_int_equal(fx_forward_multi_seq(pc, pl, &step2, logits, &err), FX_ERR_CAPACITY);
    assert_int_equal(fx_kv_seq_len(pl, a), 9);
    assert_int_equal(fx_kv_seq_len(pl, b), 4);
    assert_int_equal(fx_kv_seq_len(pl, c), 9);
    assert_memory_equal(refs, pl->refs, sizeof refs);
    /* A token alone past the pool: never. */
    enum fx_kv_admit why;
    assert_int_equal(fx_kv_seq_reserve(pl, b, 17, &why, &err), FX_ERR_CAPACITY);
    assert_int_equal(why, FX_KV_ADMIT_NEVER);
    assert_int_equal(fx_kv_seq_reserve(pl, b, 5, &why, &err), FX_ERR_CAPACITY);
    assert_int_equal(why, FX_KV_ADMIT_LATER);
    /* Bad rows are refused before anything is reserved. */
    pos2[1] = 6;
    assert_int_equal(fx_forward_multi_seq(pc, pl, &step2, logits, &err), FX_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "position 6"));
    assert_memory_equal(refs, pl->refs, sizeof refs);

    /* Once c lets its share go, a's row fits, and a continues as if nothing had happened. */
    fx_kv_seq_free(pl, c);
    FX_TEST_OK(fx_forward_token_paged(pc, pl, a, t[9], 9, again, &e_));
    struct fx_context *cc = context(m, 64, 512, 2, KV_TYPES[0], false);
    FX_TEST_OK(fx_forward_batch_last(cc, t, 10, 0, ref, &e_));
    assert_memory_equal(ref, again, sizeof ref);
    fx_context_free(cc);
    fx_kv_pool_free(pl);
    fx_context_free(pc);
    fx_model_free(m);
}

FX_TEST(decoder_paged_one_cold_entry_per_forward) {
    struct fx_model *m = fx_test_load_model("models/qwen3moe-tiny.F32.gguf");
    struct fx_context *pc = context(m, 64, 4, 2, KV_TYPES[0], true);
    struct fx_kv_pool *pl = pool(m, 4, 16, KV_TYPES[0]);
    fx_token t[16];
    tokens(t, 16, 9);
    static float logits[16 * NV];
    fx_seq_id s = new_seq(pl);
    uint64_t before = fx_par_cold_entries();
    FX_TEST_OK(fx_forward_batch_last_paged(pc, pl, s, t, 12, 0, logits, &e_)); /* 3 chunks */
    assert_int_equal(fx_par_cold_entries(), before + 1);
    FX_TEST_OK(fx_forward_token_paged(pc, pl, s, t[12], 12, logits, &e_));
    assert_int_equal(fx_par_cold_entries(), before + 2);
    int32_t pos[3] = {13, 14, 15};
    fx_seq_id seq[3] = {s, s, s};
    struct fx_batch b = {.n = 3, .token = t + 13, .pos = pos, .seq = seq};
    FX_TEST_OK(fx_forward_multi_seq(pc, pl, &b, logits, &e_));
    assert_int_equal(fx_par_cold_entries(), before + 3);
    /* The contiguous entry points refuse a paged_only context without entering the pool. */
    struct fx_error err;
    assert_int_equal(fx_forward_token(pc, 5, 0, logits, &err), FX_ERR_INVALID_ARG);
    assert_int_equal(fx_par_cold_entries(), before + 3);
    fx_kv_pool_free(pl);
    fx_context_free(pc);
    fx_model_free(m);
}
