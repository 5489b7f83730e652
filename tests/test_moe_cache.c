/* model/expert_cache.c and the MoE block's rounds: a model whose experts stream through a cache
 * computes the resident model's logits byte for byte (prefill, decode, a multi-sequence step),
 * with caches of one expert, one expert per layer, half the experts and all of them; a cache
 * smaller than one expert is refused naming the minimum; a model file that changes or shrinks
 * under a running model gives an error. moe_cache_every_table runs the comparison again in a
 * child process per kernel table this CPU has (the table is chosen once per process). */
#include "fx_test.h"

#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "golden.h"
#include "kernels/kernels.h"

enum { N_DECODE = 4, N_THREADS = 3 };

static const char *const STEMS[] = {"qwen3moe-tiny.F32.P1", "qwen3moe-tiny.Q8_0.P1",
                                    "gptoss-tiny.F32.P1", "gptoss-tiny.MXFP4_MOE.P1"};

static struct fx_model_params with_cache(uint64_t cache) {
    struct fx_model_params mp = fx_model_default_params();
    mp.moe_cache_bytes = cache;
    return mp;
}

static fx_status load(const char *path, uint64_t cache, struct fx_model **m, struct fx_error *err) {
    struct fx_model_params mp = with_cache(cache);
    return fx_model_load(path, &mp, m, err);
}

/* The smallest cache the model accepts, read from the refusal of a 1-byte one. */
static uint64_t min_cache(const char *path) {
    struct fx_model *m;
    struct fx_error err;
    assert_int_equal(load(path, 1, &m, &err), FX_ERR_INVALID_ARG);
    const char *at = strstr(err.msg, "the minimum is ");
    if (!at)
        fail_msg("no minimum in '%s'", err.msg);
    return strtoull(at + strlen("the minimum is "), NULL, 10);
}

/* Logits of the golden's prompt as one batch ([n_prompt][n_vocab]), then of N_DECODE tokens one
 * at a time, then of one multi-sequence step of two sequences' prompts over a paged pool, all
 * into out, from the model loaded with mp. Returns the model's expert-cache counters. */
static struct fx_moe_stats run_all_with(const struct fx_golden *g, const struct fx_model_params *mp,
                                        float *out) {
    struct fx_model *m;
    struct fx_context *ctx;
    struct fx_error err;
    if (fx_model_load(g->model_path, mp, &m, &err) != FX_OK)
        fail_msg("%s", err.msg);
    struct fx_context_params cp = fx_context_default_params();
    cp.n_ctx = 128;
    cp.n_threads = N_THREADS;
    cp.type_k = cp.type_v = FX_TYPE_F32;
    assert_int_equal(fx_context_create(m, &cp, &ctx, &err), FX_OK);
    int np = g->n_prompt, nv = g->n_vocab;
    assert_int_equal(fx_forward_batch(ctx, g->prompt, np, 0, out, &err), FX_OK);
    out += (size_t)np * (size_t)nv;
    for (int i = 0; i < N_DECODE; i++, out += nv)
        assert_int_equal(fx_forward_token(ctx, g->prompt[i], np + i, out, &err), FX_OK);

    struct fx_kv_pool_params pp = fx_kv_pool_default_params();
    pp.n_blocks = 32;
    pp.type_k = pp.type_v = FX_TYPE_F32;
    struct fx_kv_pool *pool;
    assert_int_equal(fx_kv_pool_create(m, &pp, &pool, &err), FX_OK);
    fx_seq_id sq[2];
    fx_token tok[2 * FX_GOLDEN_MAX_IDS];
    int32_t pos[2 * FX_GOLDEN_MAX_IDS];
    fx_seq_id ids[2 * FX_GOLDEN_MAX_IDS];
    int8_t want[2 * FX_GOLDEN_MAX_IDS];
    for (int s = 0; s < 2; s++)
        assert_int_equal(fx_kv_seq_create(pool, &sq[s], &err), FX_OK);
    int n = 0;
    for (int s = 0; s < 2; s++)
        for (int i = s; i < np; i++, n++) { /* the second sequence starts one token later */
            tok[n] = g->prompt[i];
            pos[n] = i - s;
            ids[n] = sq[s];
            want[n] = i == np - 1;
        }
    struct fx_batch b = {.n = n, .token = tok, .pos = pos, .seq = ids, .logits = want};
    assert_int_equal(fx_forward_multi_seq(ctx, pool, &b, out, &err), FX_OK);

    struct fx_moe_stats st;
    fx_model_moe_stats(m, &st);
    fx_kv_pool_free(pool);
    fx_context_free(ctx);
    fx_model_free(m);
    return st;
}

static struct fx_moe_stats run_all(const struct fx_golden *g, uint64_t cache, float *out) {
    struct fx_model_params mp = with_cache(cache);
    return run_all_with(g, &mp, out);
}

static size_t n_logits(const struct fx_golden *g) {
    return (size_t)(g->n_prompt + N_DECODE + 2) * (size_t)g->n_vocab;
}

FX_TEST(moe_cache_identical_to_resident) {
    for (size_t f = 0; f < sizeof STEMS / sizeof STEMS[0]; f++) {
        struct fx_golden g;
        fx_test_golden_load(STEMS[f], &g);
        float *want = malloc(n_logits(&g) * sizeof(float));
        float *got = malloc(n_logits(&g) * sizeof(float));
        assert_non_null(want);
        assert_non_null(got);
        struct fx_moe_stats st = run_all(&g, 0, want);
        assert_int_equal(st.cache_bytes, 0);

        struct fx_model *m;
        struct fx_error err;
        assert_int_equal(load(g.model_path, 0, &m, &err), FX_OK);
        int n_layer = fx_model_n_layer(m);
        fx_model_free(m);
        int n_expert = 4; /* every MoE fixture has 4 experts, 2 used */
        uint64_t one = min_cache(g.model_path);
        /* One expert (less than a step uses: streams), one per layer, half, all. */
        uint64_t sizes[] = {one, one * (uint64_t)n_layer, one * (uint64_t)(n_layer * n_expert / 2),
                            one * (uint64_t)(n_layer * n_expert)};
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
            memset(got, 0xff, n_logits(&g) * sizeof(float));
            st = run_all(&g, sizes[i], got);
            print_message("  %s, cache of %" PRIu64 " experts: %" PRIu64 " misses, %" PRIu64
                          " read ahead, %" PRIu64 " bytes, lookahead %" PRIu64 "/%" PRIu64
                          ", %" PRIu64 " streamed layers\n",
                          STEMS[f], sizes[i] / one, st.misses, st.prefetches, st.bytes_read,
                          st.lookahead_hits, st.lookahead_checked, st.streamed_layers);
            assert_memory_equal(got, want, n_logits(&g) * sizeof(float));
            assert_int_equal(st.n_slots, (int32_t)(sizes[i] / one));
            assert_true(st.misses > 0 && st.bytes_read > 0);
            assert_true(st.experts_used >= st.misses);
            assert_true(st.lookahead_checked > 0 && st.lookahead_hits <= st.lookahead_checked);
            /* One expert is fewer than any step uses (2 a token): it streams, and says so once
             * (seen on stderr); a cache of every expert never has to. */
            if (i == 0)
                assert_true(st.streamed_layers > 0);
            /* A cache of every expert reads each at most once over the whole run: a batched
             * step (prefill, the multi-sequence step) reads the union of its rows' experts
             * once, and nothing is evicted. */
            if (i == 3) {
                assert_int_equal(st.streamed_layers, 0);
                assert_true(st.misses + st.prefetches <= (uint64_t)(n_layer * n_expert));
            }
        }
        free(want);
        free(got);
        fx_test_golden_free(&g);
    }
}

/* The measurement knobs change which experts are read and when, never a result: every lookahead
 * depth (0, none, to the deepest) and every eviction policy give the resident logits, with a cache
 * of one expert per layer (evicts at every step) and of half the experts; out-of-range values are
 * refused. */
FX_TEST(moe_cache_lookahead_and_eviction_identical_to_resident) {
    static const char *const stems[] = {"qwen3moe-tiny.Q8_0.P1", "gptoss-tiny.MXFP4_MOE.P1"};
    for (size_t f = 0; f < sizeof stems / sizeof stems[0]; f++) {
        struct fx_golden g;
        fx_test_golden_load(stems[f], &g);
        float *want = malloc(n_logits(&g) * sizeof(float));
        float *got = malloc(n_logits(&g) * sizeof(float));
        assert_non_null(want);
        assert_non_null(got);
        run_all(&g, 0, want);
        struct fx_model *m;
        struct fx_error err;
        assert_int_equal(load(g.model_path, 0, &m, &err), FX_OK);
        int n_layer = fx_model_n_layer(m);
        fx_model_free(m);
        uint64_t one = min_cache(g.model_path);
        uint64_t sizes[] = {one * (uint64_t)n_layer, one * (uint64_t)(n_layer * 2)};
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
            for (int evict = FX_MOE_EVICT_QUOTA; evict <= FX_MOE_EVICT_LFU; evict++)
                for (int32_t depth = 0; depth <= FX_MOE_LOOKAHEAD_MAX; depth++) {
                    struct fx_model_params mp = with_cache(sizes[i]);
                    mp.moe_evict = (enum fx_moe_evict)evict;
                    mp.moe_lookahead = depth;
                    memset(got, 0xff, n_logits(&g) * sizeof(float));
                    struct fx_moe_stats st = run_all_with(&g, &mp, got);
                    assert_memory_equal(got, want, n_logits(&g) * sizeof(float));
                    assert_true(st.misses > 0);
                    /* A prediction exists for a layer only when depth layers precede it. */
                    if (depth == 0 || depth >= n_layer)
                        assert_true(st.lookahead_checked == 0 && st.prefetches == 0);
                    else
                        assert_true(st.lookahead_checked > 0);
                }
        struct fx_model_params bad = with_cache(one);
        bad.moe_lookahead = FX_MOE_LOOKAHEAD_MAX + 1;
        assert_int_equal(fx_model_load(g.model_path, &bad, &m, &err), FX_ERR_INVALID_ARG);
        assert_non_null(strstr(err.msg, "moe_lookahead"));
        bad = with_cache(one);
        bad.moe_evict = (enum fx_moe_evict)(FX_MOE_EVICT_LFU + 1);
        assert_int_equal(fx_model_load(g.model_path, &bad, &m, &err), FX_ERR_INVALID_ARG);
        free(want);
        free(got);
        fx_test_golden_free(&g);
    }
}

/* One model shared by two contexts that run at once on their own threads, with a cache of one
 * and of two experts (each context's rounds wait for the other's slots): each gets the resident
 * logits. */
struct job {
    struct fx_model *m;
    const struct fx_golden *g;
    float *out; /* [n_prompt][n_vocab] */
    fx_status st;
};

static void *run_job(void *arg) {
    struct job *j = arg;
    struct fx_context *ctx;
    struct fx_error err;
    struct fx_context_params cp = fx_context_default_params();
    cp.n_ctx = 64;
    cp.n_threads = 2;
    cp.type_k = cp.type_v = FX_TYPE_F32;
    if ((j->st = fx_context_create(j->m, &cp, &ctx, &err)))
        return NULL;
    for (int rep = 0; rep < 3 && !j->st; rep++)
        if (!(j->st = fx_forward_batch(ctx, j->g->prompt, j->g->n_prompt, 0, j->out, &err)))
            j->st = fx_context_kv_truncate(ctx, 0, &err);
    fx_context_free(ctx);
    return NULL;
}

FX_TEST(moe_cache_two_contexts_at_once) {
    struct fx_golden g;
    fx_test_golden_load("qwen3moe-tiny.Q8_0.P1", &g);
    size_t n = (size_t)g.n_prompt * (size_t)g.n_vocab;
    float *want = malloc(n * sizeof(float)),
          *got[2] = {malloc(n * sizeof(float)), malloc(n * sizeof(float))};
    assert_true(want && got[0] && got[1]);
    struct fx_model *m;
    struct fx_error err;
    assert_int_equal(load(g.model_path, 0, &m, &err), FX_OK);
    struct job resident = {m, &g, want, FX_OK};
    run_job(&resident);
    assert_int_equal(resident.st, FX_OK);
    fx_model_free(m);
    uint64_t one = min_cache(g.model_path);
    for (uint64_t slots = 1; slots <= 2; slots++) {
        assert_int_equal(load(g.model_path, slots * one, &m, &err), FX_OK);
        struct job jobs[2];
        pthread_t th[2];
        for (int i = 0; i < 2; i++) {
            jobs[i] = (struct job){m, &g, got[i], FX_OK};
            assert_int_equal(pthread_create(&th[i], NULL, run_job, &jobs[i]), 0);
        }
        for (int i = 0; i < 2; i++) {
            pthread_join(th[i], NULL);
            assert_int_equal(jobs[i].st, FX_OK);
            assert_memory_equal(got[i], want, n * sizeof(float));
        }
        fx_model_free(m);
    }
    free(want);
    free(got[0]);
    free(got[1]);
    fx_test_golden_free(&g);
}

FX_TEST(moe_cache_every_table) {
    static const char *const tables[] = {"generic", "avx2", "avx512"};
    char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    assert_true(len > 0);
    self[len] = '\0';
    for (size_t t = 0; t < 3; t++) {
        if (!fx_kernels_named(tables[t]))
            continue; /* this CPU lacks it */
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            setenv("FERROX_CPU", tables[t], 1);
            setenv("FX_TEST_FILTER", "moe_cache_identical_to_resident", 1);
            execl(self, self, (char *)NULL);
            _exit(127);
        }
        int status;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            fail_msg("the %s table's run failed (status %d)", tables[t], status);
    }
}

FX_TEST(moe_cache_smaller_than_one_expert_is_refused) {
    struct fx_golden g;
    fx_test_golden_load("gptoss-tiny.MXFP4_MOE.P1", &g);
    uint64_t one = min_cache(g.model_path);
    struct fx_model *m;
    struct fx_error err;
    assert_int_equal(load(g.model_path, one - 1, &m, &err), FX_ERR_INVALID_ARG);
    char want[64];
    snprintf(want, sizeof want, "the minimum is %" PRIu64 " bytes", one);
    assert_non_null(strstr(err.msg, want));
    assert_null(m);
    assert_int_equal(load(g.model_path, one, &m, &err), FX_OK);
    fx_model_free(m);
    /* The cache reads the model's file: a model loaded from an open file has none to read. */
    struct fx_gguf *file;
    assert_int_equal(fx_gguf_open(g.model_path, &file, &err), FX_OK);
    struct fx_model_params mp = fx_model_default_params();
    mp.moe_cache_bytes = one;
    assert_int_equal(fx_model_load_gguf(file, &mp, &m, &err), FX_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "fx_model_load"));
    fx_gguf_free(file);
    /* A dense model ignores the cache. */
    fx_test_golden_free(&g);
    fx_test_golden_load("llama-tiny.F32.P1", &g);
    assert_int_equal(load(g.model_path, 1, &m, &err), FX_OK);
    struct fx_moe_stats st;
    fx_model_moe_stats(m, &st);
    assert_int_equal(st.cache_bytes, 0);
    fx_model_free(m);
    fx_test_golden_free(&g);
}

/* A copy of the golden's model loaded with a one-expert cache (every expert is read again at
 * each use), after one good forward pass. */
static void load_copy(const struct fx_golden *g, const char *path, struct fx_model **m,
                      struct fx_context **ctx, float *row) {
    size_t size;
    char *bytes = fx_test_read_file(g->model_path, &size);
    fx_test_write_file(path, bytes, size);
    free(bytes);
    struct fx_error err;
    assert_int_equal(load(path, min_cache(path), m, &err), FX_OK);
    struct fx_context_params cp = fx_context_default_params();
    cp.n_ctx = 64;
    cp.n_threads = N_THREADS;
    assert_int_equal(fx_context_create(*m, &cp, ctx, &err), FX_OK);
    assert_int_equal(fx_forward_batch_last(*ctx, g->prompt, g->n_prompt, 0, row, &err), FX_OK);
}

FX_TEST(moe_cache_file_changed_is_an_error) {
    struct fx_golden g;
    fx_test_golden_load("qwen3moe-tiny.F32.P1", &g);
    const char *path = fx_test_tmpfile("moe-changed.gguf");
    float *row = malloc(sizeof(float) * (size_t)g.n_vocab);
    assert_non_null(row);
    struct fx_model *m;
    struct fx_context *ctx;
    struct fx_error err;

    /* Bytes of every expert of layer 0 changed, with the size and time put back: only the
     * checksums of their first reads can tell. */
    load_copy(&g, path, &m, &ctx, row);
    const struct fx_tensor_view *t =
        fx_gguf_find_tensor(fx_model_gguf(m), "blk.0.ffn_up_exps.weight");
    assert_non_null(t);
    struct stat before;
    assert_int_equal(stat(path, &before), 0);
    int fd = open(path, O_WRONLY);
    assert_true(fd >= 0);
    uint64_t off = fx_gguf_data_offset(fx_model_gguf(m)) + t->offset;
    for (int e = 0; e < 4; e++) {
        float v = 1234.5f;
        assert_int_equal(pwrite(fd, &v, sizeof v, (off_t)(off + (uint64_t)e * t->n_bytes / 4)),
                         (ssize_t)sizeof v);
    }
    struct timespec times[2] = {before.st_atim, before.st_mtim};
    assert_int_equal(futimens(fd, times), 0);
    close(fd);
    assert_int_equal(fx_context_kv_truncate(ctx, 0, &err), FX_OK);
    assert_int_equal(fx_forward_batch_last(ctx, g.prompt, g.n_prompt, 0, row, &err), FX_ERR_IO);
    print_message("  changed: %s\n", err.msg);
    assert_non_null(strstr(err.msg, "differ from their first read"));
    assert_non_null(strstr(err.msg, "layer 0"));
    /* The cache still works for what it can read: the context is not left half-written. */
    assert_int_equal(fx_context_kv_len(ctx), 0);
    fx_context_free(ctx);
    fx_model_free(m);

    /* Truncated in the middle of the file's last tensor, an expert stack (what lies before it
     * is read through the mapping, where a cut would fault). */
    load_copy(&g, path, &m, &ctx, row);
    const struct fx_gguf *gg = fx_model_gguf(m);
    const struct fx_tensor_view *last = fx_gguf_tensor_at(gg, 0);
    for (int64_t i = 1; i < fx_gguf_n_tensors(gg); i++)
        if (fx_gguf_tensor_at(gg, i)->offset > last->offset)
            last = fx_gguf_tensor_at(gg, i);
    assert_non_null(strstr(last->name, "_exps.weight"));
    assert_int_equal(
        truncate(path, (off_t)(fx_gguf_data_offset(gg) + last->offset + last->n_bytes / 2)), 0);
    assert_int_equal(fx_forward_token(ctx, g.prompt[0], g.n_prompt, row, &err), FX_ERR_IO);
    print_message("  truncated: %s\n", err.msg);
    assert_non_null(strstr(err.msg, "changed since it was loaded"));
    assert_int_equal(fx_context_kv_len(ctx), g.n_prompt);
    fx_context_free(ctx);
    fx_model_free(m);
    free(row);
    fx_test_golden_free(&g);
}

/* ferrox eval with --moe-cache writes the resident run's logits byte for byte, the decode steps
 * of --greedy included; ferrox run -v reports the cache after each step and says once that a
 * one-expert cache streams; a size below one expert is refused naming the minimum. */
FX_TEST(moe_cache_cli) {
    struct fx_golden g;
    fx_test_golden_load("gptoss-tiny.MXFP4_MOE.P1", &g);
    char ids[1024] = "", *p = ids;
    for (int i = 0; i < g.n_prompt; i++)
        p += snprintf(p, sizeof ids - (size_t)(p - ids), i ? ",%d" : "%d", g.prompt[i]);
    char one[32], below[32];
    snprintf(one, sizeof one, "%" PRIu64, min_cache(g.model_path));
    snprintf(below, sizeof below, "%" PRIu64, min_cache(g.model_path) - 1);
    const char *paths[2] = {fx_test_tmpfile("resident.logits"), fx_test_tmpfile("cache.logits")};
    char *outs[2], *err;
    for (int i = 0; i < 2; i++) {
        const char *args[] = {
            "eval",   "-m", g.model_path, "--ids",    ids, "--logits-out",
            paths[i], "-t", "2",          "--greedy", "8", i ? "--moe-cache" : NULL,
            one,      NULL};
        int rc = fx_test_run_cli(args, NULL, &outs[i], &err);
        if (rc != 0)
            fail_msg("ferrox eval exited %d: %s", rc, err);
        free(err);
    }
    assert_string_equal(outs[0], outs[1]); /* the greedy ids */
    size_t n0, n1;
    char *l0 = fx_test_read_file(paths[0], &n0), *l1 = fx_test_read_file(paths[1], &n1);
    assert_int_equal(n0, n1);
    assert_memory_equal(l0, l1, n0);
    free(l1);
    free(outs[1]);
    /* Another policy and lookahead move only what is read when, not the logits. */
    const char *lru[] = {
        "eval",   "-m",          g.model_path, "--ids",           ids, "--logits-out",
        paths[1], "-t",          "2",          "--greedy",        "8", "--moe-cache",
        one,      "--moe-evict", "lru",        "--moe-lookahead", "2", NULL};
    int rc = fx_test_run_cli(lru, NULL, &outs[1], &err);
    if (rc != 0)
        fail_msg("ferrox eval --moe-evict lru exited %d: %s", rc, err);
    free(err);
    assert_string_equal(outs[0], outs[1]);
    l1 = fx_test_read_file(paths[1], &n1);
    assert_int_equal(n0, n1);
    assert_memory_equal(l0, l1, n0);
    free(l0);
    free(l1);
    free(outs[0]);
    free(outs[1]);
    const char *bad_evict[] = {"bench", "-m",          g.model_path, "--moe-cache",
                               one,     "--moe-evict", "mru",        NULL};
    assert_int_equal(fx_test_run_cli(bad_evict, NULL, NULL, &err), 2);
    assert_non_null(strstr(err, "--moe-evict"));
    free(err);
    const char *bad_ahead[] = {"eval", "-m", g.model_path, "--ids", ids, "--moe-lookahead",
                               "9",    NULL};
    assert_int_equal(fx_test_run_cli(bad_ahead, NULL, NULL, &err), 2);
    assert_non_null(strstr(err, "--moe-lookahead"));
    free(err);

    const char *run[] = {"run",    "-m", g.model_path, "-p",          "Hello", "-n", "3",
                         "--temp", "0",  "-v",         "--moe-cache", one,     NULL};
    rc = fx_test_run_cli(run, NULL, NULL, &err);
    if (rc != 0)
        fail_msg("ferrox run exited %d: %s", rc, err);
    assert_non_null(strstr(err, "moe prompt: "));
    assert_non_null(strstr(err, "moe step: "));
    const char *streams = strstr(err, "experts stream through it");
    assert_non_null(streams);
    assert_null(strstr(streams + 1, "experts stream through it"));
    free(err);

    const char *small[] = {"run", "-m", g.model_path, "-p", "Hi", "--moe-cache", below, NULL};
    assert_int_equal(fx_test_run_cli(small, NULL, NULL, &err), 1);
    char want[64];
    snprintf(want, sizeof want, "the minimum is %s bytes", one);
    assert_non_null(strstr(err, want));
    free(err);
    const char *junk[] = {"run", "-m", g.model_path, "--moe-cache", "12Q", NULL};
    assert_int_equal(fx_test_run_cli(junk, NULL, NULL, &err), 2);
    assert_non_null(strstr(err, "--moe-cache"));
    free(err);
    fx_test_golden_free(&g);
}

/* The MTP block of qwen35moe is a MoE layer after the trunk's: its experts stream through the
 * cache too, and its logits (a prompt's rows, then two single-row drafts) equal the resident
 * run's, with a cache of one expert and of every expert. */
static void mtp_logits(const char *path, uint64_t cache, float *out, int n_vocab, int n_embd) {
    static const fx_token prompt[] = {1, 300, 12, 45, 200, 7, 99, 402};
    enum { N = sizeof prompt / sizeof prompt[0] };
    struct fx_model *m;
    struct fx_context *ctx;
    struct fx_error err;
    if (load(path, cache, &m, &err) != FX_OK)
        fail_msg("%s", err.msg);
    struct fx_context_params cp = fx_context_default_params();
    cp.n_ctx = 64;
    cp.n_threads = N_THREADS;
    assert_int_equal(fx_context_create(m, &cp, &ctx, &err), FX_OK);
    float *trunk = malloc((size_t)N * (size_t)n_vocab * sizeof(float));
    /* [2 N][n_embd]: the trunk's N rows, then the head's N - 1 rows of hidden_out. */
    float *hidden = malloc((size_t)(2 * N) * (size_t)n_embd * sizeof(float));
    assert_non_null(trunk);
    assert_non_null(hidden);
    /* Row i of the head reads token i + 1 and the trunk's hidden state of position i. */
    assert_int_equal(fx_forward_batch_with_hidden(ctx, prompt, N, 0, trunk, hidden, &err), FX_OK);
    assert_int_equal(
        fx_forward_mtp(ctx, prompt + 1, hidden, N - 1, 0, out, hidden + N * n_embd, &err), FX_OK);
    out += (size_t)(N - 1) * (size_t)n_vocab;
    const float *h = hidden + (size_t)(2 * N - 2) * (size_t)n_embd; /* the last row's */
    float *h_next = malloc((size_t)n_embd * sizeof(float));
    assert_non_null(h_next);
    for (int d = 0; d < 2; d++, out += n_vocab) {
        fx_token t = (fx_token)(17 + 5 * d);
        assert_int_equal(fx_forward_mtp(ctx, &t, h, 1, N - 1 + d, out, h_next, &err), FX_OK);
        memcpy(hidden, h_next, (size_t)n_embd * sizeof(float));
        h = hidden;
    }
    free(h_next);
    free(hidden);
    free(trunk);
    fx_context_free(ctx);
    fx_model_free(m);
}

FX_TEST(moe_cache_mtp_block_identical_to_resident) {
    const char *path = fx_test_fixture("qwen35/models/qwen35moe-tiny.F32.gguf");
    struct fx_model *m;
    struct fx_error err;
    assert_int_equal(load(path, 0, &m, &err), FX_OK);
    int n_vocab = fx_model_n_vocab(m), n_embd = fx_model_n_embd(m);
    fx_model_free(m);
    size_t n = (size_t)(7 + 2) * (size_t)n_vocab;
    float *want = malloc(n * sizeof(float)), *got = malloc(n * sizeof(float));
    assert_non_null(want);
    assert_non_null(got);
    mtp_logits(path, 0, want, n_vocab, n_embd);
    uint64_t one = min_cache(path);
    uint64_t sizes[] = {one, 64 * one};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        memset(got, 0xff, n * sizeof(float));
        mtp_logits(path, sizes[i], got, n_vocab, n_embd);
        assert_memory_equal(got, want, n * sizeof(float));
    }
    free(want);
    free(got);
}
