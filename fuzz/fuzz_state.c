/* libFuzzer target for saved sequence state (kv/state.c): every input becomes a state file that
 * is loaded into a context and into a paged pool of a tiny fixture model read from
 * FERROX_FIXTURES (default ../shared/fixtures).
 *
 *   make FUZZ_BUILD=build/fuzz build/fuzz/fuzz_state && build/fuzz/fuzz_state -max_total_time=600
 *
 * Input: byte 0 picks the mode, the rest is
 *   0: the file, as it is;
 *   1: the file, its last 8 bytes replaced by the right checksum (so the fuzzer gets past it);
 *   2: edits (offset hi, offset lo, xor) to a valid state of the model, then the checksum made
 *      right: forged headers, tokens and rows;
 *   3: the same edits without the checksum, the file cut to a length taken from the last edit.
 * Checked beyond "no crash, no sanitizer report": a refused file has a message and leaves the
 * context's length and the pool's blocks as they were; a loaded one holds at most the prompt's
 * common prefix, and a forward pass over what it loaded runs. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ferrox.h"
#include "kv/state.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_state: check failed: %s (line %d)\n", #cond, __LINE__);          \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

#define N_PROMPT 10
static const fx_token PROMPT[N_PROMPT] = {1, 85, 406, 80, 298, 159, 214, 45, 485, 8};

static struct fx_model *model;
static struct fx_context *ctx;  /* loads into its contiguous cache */
static struct fx_context *pctx; /* steps over the pool */
static struct fx_kv_pool *pool;
static char path[64];
static uint8_t *tmpl; /* a valid state: PROMPT's first 8 positions */
static size_t tmpl_size;
static uint8_t *buf;
static size_t buf_cap;
static float logits[4096];

static void remove_file(void) {
    unlink(path);
}

static void die(const char *what, const struct fx_error *err) {
    fprintf(stderr, "fuzz_state: %s: %s (set FERROX_FIXTURES)\n", what, err->msg);
    exit(1);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    const char *dir = getenv("FERROX_FIXTURES");
    if (!dir || !*dir)
        dir = "../shared/fixtures";
    char model_path[4096];
    snprintf(model_path, sizeof model_path, "%s/models/llama-tiny-tied.F32.gguf", dir);
    struct fx_error err = {0};
    if (fx_model_load(model_path, NULL, &model, &err) != FX_OK)
        die(model_path, &err);
    CHECK(fx_model_n_vocab(model) <= 4096);
    struct fx_context_params cp = fx_context_default_params();
    cp.n_ctx = 16;
    cp.n_threads = 1;
    cp.type_k = cp.type_v = FX_TYPE_F32;
    if (fx_context_create(model, &cp, &ctx, &err) != FX_OK)
        die("context", &err);
    cp.paged_only = true;
    if (fx_context_create(model, &cp, &pctx, &err) != FX_OK)
        die("paged context", &err);
    struct fx_kv_pool_params pp = fx_kv_pool_default_params();
    pp.n_blocks = 4;
    pp.block_size = 4;
    pp.n_seq_max = 2;
    if (fx_kv_pool_create(model, &pp, &pool, &err) != FX_OK)
        die("pool", &err);

    snprintf(path, sizeof path, "/tmp/fuzz_state.%d", (int)getpid());
    atexit(remove_file);
    if (fx_forward_batch_last(ctx, PROMPT, 8, 0, logits, &err) != FX_OK ||
        fx_context_state_save(ctx, PROMPT, 8, path, &err) != FX_OK)
        die("the template state", &err);
    FILE *f = fopen(path, "rb");
    CHECK(f && fseek(f, 0, SEEK_END) == 0);
    tmpl_size = (size_t)ftell(f);
    rewind(f);
    tmpl = malloc(tmpl_size);
    CHECK(tmpl && fread(tmpl, 1, tmpl_size, f) == tmpl_size);
    fclose(f);
    CHECK(fx_context_kv_truncate(ctx, 3, &err) == FX_OK);
    return 0;
}

static uint8_t *room(size_t n) {
    if (n > buf_cap) {
        buf = realloc(buf, n);
        CHECK(buf);
        buf_cap = n;
    }
    return buf;
}

static void reseal(uint8_t *b, size_t n) {
    if (n < 8)
        return;
    uint64_t c = fx_kv_state_crc64(0, b, n - 8);
    for (int i = 0; i < 8; i++)
        b[n - 8 + i] = (uint8_t)(c >> (8 * i));
}

/* The input's file image: *n bytes at the returned pointer. */
static const uint8_t *image(const uint8_t *data, size_t size, size_t *n) {
    int mode = data[0] % 4;
    data++, size--;
    if (mode == 0) {
        *n = size;
        return data;
    }
    if (mode == 1) {
        uint8_t *b = room(size + 1);
        memcpy(b, data, size);
        reseal(b, size);
        *n = size;
        return b;
    }
    uint8_t *b = room(tmpl_size);
    memcpy(b, tmpl, tmpl_size);
    size_t cut = tmpl_size;
    for (size_t i = 0; i + 3 <= size; i += 3) {
        size_t off = ((size_t)data[i] << 8 | data[i + 1]) % tmpl_size;
        b[off] ^= data[i + 2];
        cut = off;
    }
    if (mode == 2)
        reseal(b, tmpl_size);
    *n = mode == 2 ? tmpl_size : cut;
    return b;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1)
        return 0;
    size_t n;
    const uint8_t *file = image(data, size, &n);
    FILE *f = fopen(path, "wb");
    CHECK(f);
    CHECK(n == 0 || fwrite(file, 1, n, f) == n);
    CHECK(fclose(f) == 0);

    /* Into the context. */
    struct fx_error err = {0};
    int32_t before = fx_context_kv_len(ctx), n_loaded = -1;
    fx_status st = fx_context_state_load(ctx, path, PROMPT, N_PROMPT, &n_loaded, &err);
    if (st != FX_OK) {
        CHECK(err.code == st && err.msg[0] != '\0');
        CHECK(fx_context_kv_len(ctx) == before);
    } else {
        CHECK(n_loaded >= 0 && n_loaded <= N_PROMPT - 1);
        CHECK(fx_context_kv_len(ctx) == n_loaded);
        CHECK(fx_forward_token(ctx, PROMPT[n_loaded], n_loaded, logits, &err) == FX_OK);
        CHECK(fx_context_kv_truncate(ctx, n_loaded, &err) == FX_OK);
    }

    /* Into the pool. */
    struct fx_kv_pool_stats a, b;
    fx_kv_pool_stats(pool, &a);
    fx_seq_id s = -1;
    st = fx_kv_seq_load(pool, model, path, &s, &err);
    if (st != FX_OK) {
        CHECK(err.code == st && err.msg[0] != '\0');
        fx_kv_pool_stats(pool, &b);
        CHECK(a.n_free == b.n_free && a.n_seq == b.n_seq && a.n_cached_idle == b.n_cached_idle);
    } else {
        int32_t len = fx_kv_seq_len(pool, s);
        CHECK(len >= 0 && len <= 16); /* the pool's 4 blocks of 4 */
        if (len < 16)
            CHECK(fx_forward_token_paged(pctx, pool, s, 5, len, logits, &err) == FX_OK ||
                  err.code == FX_ERR_CAPACITY);
        fx_kv_seq_free(pool, s);
    }
    fx_kv_pool_clear_cache(pool);
    return 0;
}
