/* kv/state.c: saved sequence state. A prompt loaded from a file continues bit for bit as the run
 * that computed it (every KV type, contiguous and paged, both ways); only the common prefix with
 * a new prompt is loaded; every damaged, truncated or foreign file is refused with a message
 * naming what is wrong and leaves the context as it was; and `ferrox run --prompt-cache`. */
#include "fx_test.h"
#include "golden.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include "ferrox.h"
#include "kernels/kernels.h"
#include "kv/state.h"

#define NV 512 /* every fixture's vocabulary */

/* The fixtures' P1 prompt. */
static const fx_token P1[16] = {1,   85, 406, 80,  298, 159, 214, 45,
                                485, 8,  75,  475, 239, 95,  307, 247};
/* Another prompt, for the context a refused load must leave alone. */
static const fx_token P2[8] = {1, 17, 300, 42, 99, 250, 7, 411};

static const enum fx_type KV_TYPES[][2] = {{FX_TYPE_F32, FX_TYPE_F32},
                                           {FX_TYPE_F16, FX_TYPE_F16},
                                           {FX_TYPE_Q8_0, FX_TYPE_Q8_0},
                                           {FX_TYPE_Q8_0, FX_TYPE_F16}};
#define N_KV_TYPES (sizeof KV_TYPES / sizeof KV_TYPES[0])
static const enum fx_type F32_KV[2] = {FX_TYPE_F32, FX_TYPE_F32};

static struct fx_context *context(const struct fx_model *m, int n_ctx, const enum fx_type *kv,
                                  bool paged_only) {
    struct fx_context_params p = {.n_ctx = n_ctx,
                                  .n_batch = 512,
                                  .n_threads = 2,
                                  .type_k = kv[0],
                                  .type_v = kv[1],
                                  .paged_only = paged_only};
    return fx_test_context(m, &p);
}

static fx_token argmax(const float *logits) {
    fx_token best = 0;
    for (fx_token i = 1; i < NV; i++)
        if (logits[i] > logits[best])
            best = i;
    return best;
}

/* Greedy decoding from logits[0] (the row after position pos): steps more rows, each evaluated
 * with fx_forward_token, into logits[1..steps]. */
static void greedy(struct fx_context *ctx, int32_t pos, int steps, float *logits) {
    for (int i = 0; i < steps; i++)
        FX_TEST_OK(fx_forward_token(ctx, argmax(logits + (size_t)i * NV), pos + i,
                                    logits + (size_t)(i + 1) * NV, &e_));
}

/* ---- the checksum ---------------------------------------------------------------------------- */

FX_TEST(kv_state_crc64_check_value) {
    /* The CRC-64/XZ catalogue's check value, whole and fed in pieces. */
    assert_true(fx_kv_state_crc64(0, "123456789", 9) == 0x995dc9bbdf1939faull);
    uint64_t c = fx_kv_state_crc64(0, "1234", 4);
    assert_true(fx_kv_state_crc64(c, "56789", 5) == 0x995dc9bbdf1939faull);
    assert_true(fx_kv_state_crc64(0, "", 0) == 0);
}

/* ---- a loaded prompt continues as the run that computed it --------------------------------- */

enum { STEPS = 8 };

FX_TEST(kv_state_round_trip_bit_identical) {
    static const char *const files[] = {"models/llama-tiny.F32.gguf", "models/qwen3-tiny.Q8_0.gguf",
                                        "models/gemma2-tiny.F32.gguf"};
    static float a[(STEPS + 1) * NV], b[(STEPS + 1) * NV];
    const char *path = fx_test_tmpfile("round-trip.state");
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        struct fx_model *m = fx_test_load_model(files[f]);
        for (size_t k = 0; k < N_KV_TYPES; k++) {
            /* A: one context, the prompt then greedy steps. */
            struct fx_context *ctx = context(m, 64, KV_TYPES[k], false);
            FX_TEST_OK(fx_forward_batch_last(ctx, P1, 16, 0, a, &e_));
            greedy(ctx, 16, STEPS, a);
            fx_context_free(ctx);

            /* B: the prompt, saved; a fresh context loads it and continues. */
            ctx = context(m, 64, KV_TYPES[k], false);
            FX_TEST_OK(fx_forward_batch_last(ctx, P1, 16, 0, b, &e_));
            FX_TEST_OK(fx_context_state_save(ctx, P1, 16, path, &e_));
            fx_context_free(ctx);
            ctx = context(m, 64, KV_TYPES[k], false);
            int32_t n_loaded = -1;
            FX_TEST_OK(fx_context_state_load(ctx, path, P1, 16, &n_loaded, &e_));
            assert_int_equal(n_loaded, 15); /* the last prompt token is left to evaluate */
            assert_int_equal(fx_context_kv_len(ctx), 15);
            memset(b, 0, sizeof b);
            FX_TEST_OK(fx_forward_token(ctx, P1[15], 15, b, &e_));
            greedy(ctx, 16, STEPS, b);
            for (int i = 0; i <= STEPS; i++)
                if (memcmp(a + (size_t)i * NV, b + (size_t)i * NV, NV * sizeof(float)) != 0)
                    fail_msg("%s, KV %s/%s, row %d: logits after loading differ", files[f],
                             fx_type_name(KV_TYPES[k][0]), fx_type_name(KV_TYPES[k][1]), i);

            /* The state after generation too: prompt and generated tokens, then a longer
             * prompt that continues them loads all of them. */
            fx_token all[16 + STEPS + 1];
            memcpy(all, P1, sizeof P1);
            for (int i = 0; i <= STEPS; i++)
                all[16 + i] = argmax(a + (size_t)i * NV);
            assert_int_equal(fx_context_kv_len(ctx), 16 + STEPS);
            FX_TEST_OK(fx_context_state_save(ctx, all, 16 + STEPS, path, &e_));
            fx_context_free(ctx);
            ctx = context(m, 64, KV_TYPES[k], false);
            FX_TEST_OK(fx_context_state_load(ctx, path, all, 16 + STEPS + 1, &n_loaded, &e_));
            assert_int_equal(n_loaded, 16 + STEPS);
            FX_TEST_OK(fx_forward_token(ctx, all[16 + STEPS], 16 + STEPS, b, &e_));
            struct fx_context *ref = context(m, 64, KV_TYPES[k], false);
            FX_TEST_OK(fx_forward_batch_last(ref, all, 16 + STEPS + 1, 0, a, &e_));
            assert_memory_equal(a, b, NV * sizeof(float));
            fx_context_free(ref);
            fx_context_free(ctx);
        }
        fx_model_free(m);
    }
}

/* Files keep keys as rows whatever the cache's layout: a prompt saved by the build before keys
 * were kept in tiles (tests/state, written with commit 4805e2a's library on its avx512 table:
 * llama-tiny.F32, P1, a context of 64) loads whole and saves again to the same bytes on any
 * table; and on the table that wrote it, it continues bit for bit as the prompt computed here
 * (another table computes other roundings of the same rows, so it would continue otherwise). */
FX_TEST(kv_state_loads_files_written_before_key_tiles) {
    static float a[(STEPS + 1) * NV], b[(STEPS + 1) * NV];
    struct fx_model *m = fx_test_load_model("models/llama-tiny.F32.gguf");
    const char *again = fx_test_tmpfile("saved-again.state");
    fx_token longer[17]; /* P1 and one token more, so that all 16 saved positions load */
    memcpy(longer, P1, sizeof P1);
    longer[16] = P1[1];
    for (size_t k = 0; k < N_KV_TYPES; k++) {
        char path[256];
        snprintf(path, sizeof path, "tests/state/llama-tiny.F32.%s-%s.state",
                 fx_type_name(KV_TYPES[k][0]), fx_type_name(KV_TYPES[k][1]));
        struct fx_context *ctx = context(m, 64, KV_TYPES[k], false);
        int32_t n_loaded = -1;
        FX_TEST_OK(fx_context_state_load(ctx, path, longer, 17, &n_loaded, &e_));
        assert_int_equal(n_loaded, 16);
        FX_TEST_OK(fx_context_state_save(ctx, P1, 16, again, &e_));
        fx_context_free(ctx);
        size_t n_old = 0, n_new = 0;
        char *old = fx_test_read_file(path, &n_old), *new = fx_test_read_file(again, &n_new);
        assert_non_null(old);
        assert_non_null(new);
        assert_int_equal(n_old, n_new);
        if (memcmp(old, new, n_old) != 0)
            fail_msg("%s: saved again after loading, the bytes differ", path);
        free(old);
        free(new);

        if (strcmp(fx_kernels()->name, "avx512") != 0)
            continue;
        ctx = context(m, 64, KV_TYPES[k], false);
        FX_TEST_OK(fx_forward_batch_last(ctx, P1, 16, 0, a, &e_));
        greedy(ctx, 16, STEPS, a);
        fx_context_free(ctx);
        ctx = context(m, 64, KV_TYPES[k], false);
        FX_TEST_OK(fx_context_state_load(ctx, path, P1, 16, &n_loaded, &e_));
        assert_int_equal(n_loaded, 15);
        FX_TEST_OK(fx_forward_token(ctx, P1[15], 15, b, &e_));
        greedy(ctx, 16, STEPS, b);
        for (int i = 0; i <= STEPS; i++)
            if (memcmp(a + (size_t)i * NV, b + (size_t)i * NV, NV * sizeof(float)) != 0)
                fail_msg("%s, row %d: logits after loading differ", path, i);
        fx_context_free(ctx);
    }
    fx_model_free(m);
}

FX_TEST(kv_state_loads_common_prefix) {
    struct fx_model *m = fx_test_load_model("models/llama-tiny.F32.gguf");
    const char *path = fx_test_tmpfile("prefix.state");
    static float logits[NV], ref[NV];
    struct fx_context *ctx = context(m, 64, F32_KV, false);
    FX_TEST_OK(fx_forward_batch_last(ctx, P1, 16, 0, logits, &e_));
    FX_TEST_OK(fx_context_state_save(ctx, P1, 16, path, &e_));
    fx_context_free(ctx);

    /* A prompt that diverges at position 5: five positions come from the file, the rest is
     * evaluated, and the result is what the whole prompt gives in a fresh context. */
    fx_token p[20];
    memcpy(p, P1, sizeof P1);
    p[5] = (P1[5] + 1) % NV;
    ctx = context(m, 64, F32_KV, false);
    int32_t n_loaded = -1;
    FX_TEST_OK(fx_context_state_load(ctx, path, p, 16, &n_loaded, &e_));
    assert_int_equal(n_loaded, 5);
    assert_int_equal(fx_context_kv_len(ctx), 5);
    FX_TEST_OK(fx_forward_batch_last(ctx, p + 5, 11, 5, logits, &e_));
    struct fx_context *fresh = context(m, 64, F32_KV, false);
    FX_TEST_OK(fx_forward_batch_last(fresh, p, 16, 0, ref, &e_));
    assert_memory_equal(logits, ref, sizeof ref);
    fx_context_free(fresh);

    /* Shorter and longer prompts, and an empty one: at most n_prompt - 1, at most the file. */
    memcpy(p, P1, sizeof P1);
    p[16] = 3, p[17] = 4, p[18] = 5, p[19] = 6;
    const int32_t n_prompt[] = {10, 1, 0, 16, 17, 20};
    const int32_t want[] = {9, 0, 0, 15, 16, 16};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        FX_TEST_OK(
            fx_context_state_load(ctx, path, n_prompt[i] ? p : NULL, n_prompt[i], &n_loaded, &e_));
        assert_int_equal(n_loaded, want[i]);
        assert_int_equal(fx_context_kv_len(ctx), want[i]);
    }
    /* A prompt that differs at once loads nothing, and clears the cache. */
    p[0] = 2;
    FX_TEST_OK(fx_context_state_load(ctx, path, p, 16, &n_loaded, &e_));
    assert_int_equal(n_loaded, 0);
    assert_int_equal(fx_context_kv_len(ctx), 0);
    fx_context_free(ctx);
    fx_model_free(m);
}

/* ---- refusals: each names what is wrong and changes nothing ------------------------------- */

/* The context a refused load must leave alone: P2[0..8) evaluated; and the logits of the next
 * token that a fresh context with the same eight positions gives. */
struct victim {
    const struct fx_model *m;
    struct fx_context *ctx;
    float next[NV];
};

static void victim_init(struct victim *v, const struct fx_model *m, int n_ctx) {
    static float scratch[NV];
    v->m = m;
    v->ctx = context(m, n_ctx, F32_KV, false);
    FX_TEST_OK(fx_forward_batch_last(v->ctx, P2, 8, 0, scratch, &e_));
    struct fx_context *fresh = context(m, n_ctx, F32_KV, false);
    FX_TEST_OK(fx_forward_batch_last(fresh, P2, 8, 0, scratch, &e_));
    FX_TEST_OK(fx_forward_token(fresh, 5, 8, v->next, &e_));
    fx_context_free(fresh);
}

/* Loading path into the victim fails with code and a message containing want; the victim still
 * holds its eight positions, and continuing it gives what a fresh context gives. */
static void expect_refused(struct victim *v, const char *path, fx_status code, const char *want,
                           const char *what) {
    static float got[NV];
    struct fx_error err = {0};
    int32_t n_loaded = 1234;
    fx_status st = fx_context_state_load(v->ctx, path, P1, 16, &n_loaded, &err);
    if (st != code || !strstr(err.msg, want))
        fail_msg("%s: got %s '%s', want %s '%s'", what, fx_status_name(st), err.msg,
                 fx_status_name(code), want);
    assert_int_equal(n_loaded, 1234);
    assert_int_equal(fx_context_kv_len(v->ctx), 8);
    FX_TEST_OK(fx_forward_token(v->ctx, 5, 8, got, &e_));
    if (memcmp(got, v->next, sizeof got) != 0)
        fail_msg("%s: the refused load changed the cache", what);
    FX_TEST_OK(fx_context_kv_truncate(v->ctx, 8, &e_));
}

/* Saves P1's 16 positions computed by model file rel with KV types kv to path. */
static void save_p1(const char *rel, const enum fx_type *kv, int n_ctx, const char *path) {
    static float scratch[NV];
    struct fx_model *m = fx_test_load_model(rel);
    struct fx_context *ctx = context(m, n_ctx, kv, false);
    FX_TEST_OK(fx_forward_batch_last(ctx, P1, 16, 0, scratch, &e_));
    FX_TEST_OK(fx_context_state_save(ctx, P1, 16, path, &e_));
    fx_context_free(ctx);
    fx_model_free(m);
}

static void put_le32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* Rewrites the checksum of a state file's bytes, as a forger would. */
static void reseal(uint8_t *b, size_t size) {
    uint64_t c = fx_kv_state_crc64(0, b, size - 8);
    for (int i = 0; i < 8; i++)
        b[size - 8 + i] = (uint8_t)(c >> (8 * i));
}

FX_TEST(kv_state_refuses_damaged_files) {
    struct fx_model *m = fx_test_load_model("models/llama-tiny.F32.gguf");
    struct victim v;
    victim_init(&v, m, 64);
    const char *good = fx_test_tmpfile("good.state");
    char good_path[4096];
    snprintf(good_path, sizeof good_path, "%s", good);
    save_p1("models/llama-tiny.F32.gguf", F32_KV, 64, good_path);
    size_t size;
    uint8_t *bytes = (uint8_t *)fx_test_read_file(good_path, &size);
    /* header + 16 tokens + 2 layers x 2 heads x 16 positions x (256 + 256) bytes + checksum */
    assert_int_equal(size, 96 + 16 * 4 + 2 * 2 * 16 * 512 + 8);

    /* The intact file loads (and the victim is put back). */
    int32_t n_loaded;
    struct fx_context *other = context(m, 64, F32_KV, false);
    FX_TEST_OK(fx_context_state_load(other, good_path, P1, 16, &n_loaded, &e_));
    assert_int_equal(n_loaded, 15);
    fx_context_free(other);

    const char *bad = fx_test_tmpfile("bad.state");
    char bad_path[4096];
    snprintf(bad_path, sizeof bad_path, "%s", bad);

    /* One flipped bit anywhere. */
    const struct {
        size_t off;
        uint8_t x;
        const char *want;
    } flips[] = {
        {0, 0x01, "not a ferrox state file"},
        {7, 0x80, "not a ferrox state file"},
        {8, 0x04, "version 5 is not supported"},
        {8, 0x03, "version 2 holds a recurrent state in an older build"},
        {8, 0x01, "version 0 is not supported"},
        {12, 0x01, "checksum"},             /* architecture name */
        {12 + 31, 0x41, "checksum"},        /* its NUL padding */
        {44, 0x01, "damaged or truncated"}, /* n_layer: another size */
        {48, 0x04, "checksum"},             /* n_embd: same size */
        {68, 0x01, "checksum"},             /* n_vocab */
        {72, 0x10, "checksum"},             /* fingerprint */
        {80, 0x01, "damaged or truncated"}, /* K type F32 -> F16: another size */
        {80, 0x40, "is not a KV row"},      /* K type 64: no such type */
        {84, 0x08, "damaged or truncated"}, /* V type F32 -> Q8_0 */
        {88, 0x01, "damaged or truncated"}, /* n */
        {91, 0x80, "damaged"},              /* n past INT32_MAX */
        {92, 0x01, "reserved"},
        {96, 0x01, "checksum"},                             /* first token */
        {96 + 60, 0x80, "checksum"},                        /* last token */
        {96 + 64, 0x01, "checksum"},                        /* first K row */
        {96 + 64 + 2 * 2 * 16 * 256 + 3, 0x20, "checksum"}, /* first V row */
        {0, 0, NULL},                                       /* the last row byte, set below */
        {0, 0, NULL},                                       /* the checksum itself */
    };
    size_t n_flips = sizeof flips / sizeof flips[0];
    for (size_t i = 0; i < n_flips; i++) {
        size_t off = flips[i].want ? flips[i].off : size - (i == n_flips - 1 ? 1 : 9);
        uint8_t x = flips[i].want ? flips[i].x : 0x01;
        bytes[off] ^= x;
        fx_test_write_file(bad_path, bytes, size);
        bytes[off] ^= x;
        char what[64];
        snprintf(what, sizeof what, "bit flip at byte %zu", off);
        expect_refused(&v, bad_path, FX_ERR_FORMAT, flips[i].want ? flips[i].want : "checksum",
                       what);
    }

    /* Truncated anywhere, down to nothing; and one byte too many. */
    const size_t lengths[] = {0,  1,   7,   8,   11,       12,       50,      95,
                              96, 103, 104, 160, size / 2, size - 8, size - 1};
    for (size_t i = 0; i < sizeof lengths / sizeof lengths[0]; i++) {
        fx_test_write_file(bad_path, bytes, lengths[i]);
        char what[64];
        snprintf(what, sizeof what, "truncated to %zu bytes", lengths[i]);
        expect_refused(&v, bad_path, FX_ERR_FORMAT, "truncated", what);
    }
    uint8_t *longer = malloc(size + 1);
    memcpy(longer, bytes, size);
    longer[size] = 0;
    fx_test_write_file(bad_path, longer, size + 1);
    char want[128];
    snprintf(want, sizeof want, "it is %zu bytes, its header describes %zu", size + 1, size);
    expect_refused(&v, bad_path, FX_ERR_FORMAT, want, "one byte too many");
    free(longer);

    /* Forged files with a correct checksum: a token outside the vocabulary, a newer version. */
    put_le32(bytes + 96 + 4 * 3, NV);
    reseal(bytes, size);
    fx_test_write_file(bad_path, bytes, size);
    expect_refused(&v, bad_path, FX_ERR_FORMAT, "token 512 at position 3 is outside the vocabulary",
                   "forged token");
    put_le32(bytes + 96 + 4 * 3, (uint32_t)P1[3]);
    uint8_t arch[32];
    memcpy(arch, bytes + 12, 32);
    memset(bytes + 12, 'a', 32);
    reseal(bytes, size);
    fx_test_write_file(bad_path, bytes, size);
    expect_refused(&v, bad_path, FX_ERR_FORMAT, "architecture name is not terminated",
                   "forged architecture name");
    memcpy(bytes + 12, arch, 32);
    put_le32(bytes + 8, 4);
    reseal(bytes, size);
    fx_test_write_file(bad_path, bytes, size);
    expect_refused(&v, bad_path, FX_ERR_FORMAT, "version 4 is not supported", "version 4");
    /* Version 3 is a file with a recurrent state: one that declares none is damaged. */
    put_le32(bytes + 8, 3);
    reseal(bytes, size);
    fx_test_write_file(bad_path, bytes, size);
    expect_refused(&v, bad_path, FX_ERR_FORMAT, "version 3 file without a recurrent state",
                   "version 3 without a state");

    /* Not there, or not a file. */
    expect_refused(&v, fx_test_tmpfile("missing.state"), FX_ERR_NOT_FOUND, "cannot open",
                   "missing file");
    expect_refused(&v, fx_test_tmpdir(), FX_ERR_IO, "not a regular file", "a directory");

    free(bytes);
    fx_context_free(v.ctx);
    fx_model_free(m);
}

FX_TEST(kv_state_refuses_foreign_files) {
    struct fx_model *m = fx_test_load_model("models/llama-tiny.F32.gguf");
    struct victim v;
    victim_init(&v, m, 64);
    char path[4096];
    snprintf(path, sizeof path, "%s", fx_test_tmpfile("foreign.state"));

    save_p1("models/qwen3-tiny.Q8_0.gguf", F32_KV, 64, path);
    expect_refused(&v, path, FX_ERR_INVALID_ARG,
                   "state file is for another model (architecture qwen3, this model is llama)",
                   "qwen3-tiny's state");
    save_p1("models/llama-tiny-tied.F32.gguf", F32_KV, 64, path);
    expect_refused(&v, path, FX_ERR_INVALID_ARG,
                   "state file is for another model (n_embd 128, this model has 256)",
                   "llama-tiny-tied's state");
    /* The same architecture and sizes, other weights. */
    save_p1("models/llama-tiny.Q8_0.gguf", F32_KV, 64, path);
    expect_refused(&v, path, FX_ERR_INVALID_ARG, "the weights' fingerprint differs",
                   "llama-tiny.Q8_0's state");
    /* This model, other KV types. */
    const enum fx_type f16[2] = {FX_TYPE_F16, FX_TYPE_F16}, q8[2] = {FX_TYPE_Q8_0, FX_TYPE_F32};
    save_p1("models/llama-tiny.F32.gguf", f16, 64, path);
    expect_refused(&v, path, FX_ERR_INVALID_ARG,
                   "state file holds K/V rows of types F16/F16, this context's cache holds "
                   "F32/F32",
                   "an f16 cache's state");
    save_p1("models/llama-tiny.F32.gguf", q8, 64, path);
    expect_refused(&v, path, FX_ERR_INVALID_ARG, "types Q8_0/F32", "a q8_0 cache's state");
    fx_context_free(v.ctx);

    /* More positions than the context holds. */
    victim_init(&v, m, 12);
    save_p1("models/llama-tiny.F32.gguf", F32_KV, 64, path);
    expect_refused(&v, path, FX_ERR_CAPACITY,
                   "state file holds 16 positions, more than the context of 12",
                   "16 positions into 12");
    fx_context_free(v.ctx);
    fx_model_free(m);
}

FX_TEST(kv_state_save_checks_its_arguments) {
    struct fx_model *m = fx_test_load_model("models/llama-tiny.F32.gguf");
    static float logits[NV];
    struct fx_context *ctx = context(m, 64, F32_KV, false);
    FX_TEST_OK(fx_forward_batch_last(ctx, P1, 8, 0, logits, &e_));
    struct fx_error err;
    const char *path = fx_test_tmpfile("args.state");
    assert_int_equal(fx_context_state_save(ctx, P1, 9, path, &err), FX_ERR_INVALID_ARG);
    assert_int_equal(fx_context_state_save(ctx, P1, -1, path, &err), FX_ERR_INVALID_ARG);
    const fx_token bad[4] = {1, 2, NV, 3};
    assert_int_equal(fx_context_state_save(ctx, bad, 4, path, &err), FX_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "token 512 at index 2"));
    /* A directory that does not exist: an error, and no file (temporary or final) anywhere. */
    char missing[4096];
    snprintf(missing, sizeof missing, "%s/no/such/dir/x.state", fx_test_tmpdir());
    assert_int_equal(fx_context_state_save(ctx, P1, 8, missing, &err), FX_ERR_IO);
    /* An empty state is a valid state. */
    FX_TEST_OK(fx_context_state_save(ctx, NULL, 0, path, &e_));
    int32_t n_loaded = -1;
    FX_TEST_OK(fx_context_state_load(ctx, path, P1, 8, &n_loaded, &e_));
    assert_int_equal(n_loaded, 0);
    /* No temporary file is left behind by the saves of this process. */
    DIR *d = opendir(fx_test_tmpdir());
    assert_non_null(d);
    for (struct dirent *de; (de = readdir(d));)
        if (strstr(de->d_name, ".tmp-"))
            fail_msg("temporary file left: %s", de->d_name);
    closedir(d);
    fx_context_free(ctx);
    fx_model_free(m);
}

/* ---- a context's state loads into a pool and back ------------------------------------------ */

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

FX_TEST(kv_state_pool_round_trip) {
    static const char *const files[] = {"models/llama-tiny.F32.gguf", "models/qwen3-tiny.Q8_0.gguf",
                                        "models/gemma2-tiny.F32.gguf"};
    static float a[(STEPS + 1) * NV], b[(STEPS + 1) * NV], c[NV], d[NV];
    char path[4096], path2[4096];
    snprintf(path, sizeof path, "%s", fx_test_tmpfile("pool.state"));
    snprintf(path2, sizeof path2, "%s", fx_test_tmpfile("pool2.state"));
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        struct fx_model *m = fx_test_load_model(files[f]);
        for (size_t k = 0; k < N_KV_TYPES; k++) {
            const enum fx_type *kv = KV_TYPES[k];
            /* Contiguous: the prompt (saved), then greedy steps. */
            struct fx_context *cc = context(m, 64, kv, false);
            FX_TEST_OK(fx_forward_batch_last(cc, P1, 16, 0, a, &e_));
            FX_TEST_OK(fx_context_state_save(cc, P1, 16, path, &e_));
            greedy(cc, 16, STEPS, a);

            /* Paged: the file into a pool whose block size does not divide it, then the same
             * steps. */
            struct fx_context *pc = context(m, 64, kv, true);
            struct fx_kv_pool *pl = pool(m, 8, 5, kv);
            fx_seq_id s = -1;
            FX_TEST_OK(fx_kv_seq_load(pl, m, path, &s, &e_));
            assert_int_equal(fx_kv_seq_len(pl, s), 16);
            assert_memory_equal(fx_kv_seq_tokens(pl, s), P1, sizeof P1);
            memcpy(b, a, NV * sizeof(float));
            for (int i = 0; i < STEPS; i++)
                FX_TEST_OK(fx_forward_token_paged(pc, pl, s, argmax(b + (size_t)i * NV), 16 + i,
                                                  b + (size_t)(i + 1) * NV, &e_));
            for (int i = 1; i <= STEPS; i++)
                if (memcmp(a + (size_t)i * NV, b + (size_t)i * NV, NV * sizeof(float)) != 0)
                    fail_msg("%s, KV %s/%s, step %d: paged logits after loading differ", files[f],
                             fx_type_name(kv[0]), fx_type_name(kv[1]), i);

            /* And back: the pool's sequence (prompt and steps) into a fresh context. */
            FX_TEST_OK(fx_kv_seq_save(pl, s, m, path2, &e_));
            fx_token all[16 + STEPS + 1];
            memcpy(all, fx_kv_seq_tokens(pl, s), (16 + STEPS) * sizeof(fx_token));
            all[16 + STEPS] = argmax(a + (size_t)STEPS * NV);
            struct fx_context *back = context(m, 64, kv, false);
            int32_t n_loaded;
            FX_TEST_OK(fx_context_state_load(back, path2, all, 16 + STEPS + 1, &n_loaded, &e_));
            assert_int_equal(n_loaded, 16 + STEPS);
            FX_TEST_OK(fx_forward_token(back, all[16 + STEPS], 16 + STEPS, c, &e_));
            FX_TEST_OK(fx_forward_token(cc, all[16 + STEPS], 16 + STEPS, d, &e_));
            assert_memory_equal(c, d, sizeof c);
            fx_context_free(back);

            /* A pool too small for the file, or out of sequences: refused, nothing changed. */
            struct fx_kv_pool *small = pool(m, 3, 5, kv);
            struct fx_kv_pool_stats before, after;
            fx_kv_pool_stats(small, &before);
            struct fx_error err;
            fx_seq_id s2 = 77;
            assert_int_equal(fx_kv_seq_load(small, m, path, &s2, &err), FX_ERR_CAPACITY);
            assert_int_equal(s2, 77);
            fx_kv_pool_stats(small, &after);
            assert_memory_equal(&before, &after, sizeof before);
            fx_kv_pool_free(small);

            fx_kv_pool_free(pl);
            fx_context_free(pc);
            fx_context_free(cc);
        }
        fx_model_free(m);
    }
}

FX_TEST(kv_state_pool_refuses_foreign_files) {
    struct fx_model *m = fx_test_load_model("models/llama-tiny.F32.gguf");
    struct fx_model *q = fx_test_load_model("models/qwen3-tiny.Q8_0.gguf");
    char path[4096];
    snprintf(path, sizeof path, "%s", fx_test_tmpfile("pool-foreign.state"));
    save_p1("models/llama-tiny.F32.gguf", F32_KV, 64, path);
    const enum fx_type f16[2] = {FX_TYPE_F16, FX_TYPE_F16};
    struct fx_kv_pool *pl = pool(m, 8, 16, f16);
    struct fx_kv_pool_stats before, after;
    fx_kv_pool_stats(pl, &before);
    struct fx_error err;
    fx_seq_id s;
    assert_int_equal(fx_kv_seq_load(pl, m, path, &s, &err), FX_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "this pool's cache holds F16/F16"));
    fx_kv_pool_stats(pl, &after);
    assert_memory_equal(&before, &after, sizeof before);
    /* A pool made for another model. */
    assert_int_equal(fx_kv_seq_load(pl, q, path, &s, &err), FX_ERR_INVALID_ARG);
    fx_kv_pool_free(pl);
    /* A qwen3 pool of the same shape refuses llama's state by name. */
    pl = pool(q, 8, 16, F32_KV);
    assert_int_equal(fx_kv_seq_load(pl, q, path, &s, &err), FX_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "architecture llama, this model is qwen3"));
    /* A sequence that is not alive cannot be saved. */
    assert_int_equal(fx_kv_seq_save(pl, 3, q, path, &err), FX_ERR_INVALID_ARG);
    fx_kv_pool_free(pl);
    fx_model_free(q);
    fx_model_free(m);
}

/* ---- ferrox run --prompt-cache --------------------------------------------------------------- */

static int run(const char *const *args, char **out, char **err) {
    int rc = fx_test_run_cli(args, NULL, out, err);
    return rc;
}

FX_TEST(kv_state_cli_prompt_cache) {
    char cache[4096];
    snprintf(cache, sizeof cache, "%s", fx_test_tmpfile("run.prompt-cache"));
    const char *model = fx_test_model("stories260K.gguf");
    const char *args[] = {"run", "-m", model,    "-p", "Once upon a time",
                          "-n",  "8",  "--temp", "0",  "--prompt-cache",
                          cache, NULL};
    const char *plain[] = {"run", "-m", model,    "-p", "Once upon a time",
                           "-n",  "8",  "--temp", "0",  NULL};
    char *out0, *err0, *out1, *err1, *out2, *err2;
    assert_int_equal(run(plain, &out0, &err0), 0);
    assert_int_equal(run(args, &out1, &err1), 0);
    assert_non_null(strstr(err1, "does not exist yet"));
    assert_non_null(strstr(err1, "saved 12 tokens")); /* 5 prompt tokens + 7 of the 8 made */
    assert_int_equal(run(args, &out2, &err2), 0);
    if (!strstr(err2, "4 of the 5 prompt tokens loaded from it"))
        fail_msg("second run's stderr:\n%s", err2);
    assert_non_null(strstr(err2, "prompt: 1 tokens"));
    assert_string_equal(out1, out0);
    assert_string_equal(out2, out1);
    free(out0), free(err0), free(out1), free(err1), free(out2), free(err2);

    /* A longer prompt that starts with the saved text loads all of it. */
    const char *longer[] = {"run", "-m", model,    "-p", "Once upon a time, there was a big",
                            "-n",  "4",  "--temp", "0",  "--prompt-cache",
                            cache, NULL};
    assert_int_equal(run(longer, &out1, &err1), 0);
    const char *p = strstr(err1, "prompt cache");
    if (!p || atoi(strstr(p, ": ") + 2) < 5)
        fail_msg("longer prompt's stderr:\n%s", err1);
    free(out1), free(err1);

    /* The cache of another model is refused, as llama.cpp refuses it: exit status 1. */
    const char *other[] = {"run",
                           "-m",
                           fx_test_fixture("models/llama-tiny.F32.gguf"),
                           "-p",
                           "Once upon a time",
                           "-n",
                           "2",
                           "--temp",
                           "0",
                           "--prompt-cache",
                           cache,
                           NULL};
    assert_int_equal(run(other, &out1, &err1), 1);
    assert_non_null(strstr(err1, "state file is for another model"));
    assert_string_equal(out1, "");
    free(out1), free(err1);
    /* So is a damaged one, and the file stays as it was. */
    size_t size;
    char *bytes = fx_test_read_file(cache, &size);
    bytes[size / 2] ^= 1;
    fx_test_write_file(cache, bytes, size);
    assert_int_equal(run(args, &out1, &err1), 1);
    assert_non_null(strstr(err1, "checksum"));
    free(out1), free(err1);
    char *again = fx_test_read_file(cache, NULL);
    assert_memory_equal(again, bytes, size);
    free(again);
    free(bytes);
}
