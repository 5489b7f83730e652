/* decoder/: the rules the forward passes keep (ARCHITECTURE.md section 2): one pool entry per
 * call, entry points only in entry.c, results independent of threads and batching, failed calls
 * change nothing; plus hidden-state outputs, rewinding and FERROX_DUMP. */
#include "fx_test.h"
#include "golden.h"

#include <ftw.h>
#include <math.h>
#include <regex.h>
#include <stdlib.h>
#include <string.h>

#include "core/par.h"

/* The fixtures' P1 prompt. */
static const fx_token P1[16] = {1,   85, 406, 80,  298, 159, 214, 45,
                                485, 8,  75,  475, 239, 95,  307, 247};
#define NV 512

static struct fx_context *context(const struct fx_model *m, int n_ctx, int n_batch, int n_threads) {
    struct fx_context_params p = {.n_ctx = n_ctx, .n_batch = n_batch, .n_threads = n_threads};
    return fx_test_context(m, &p);
}

FX_TEST(decoder_one_cold_entry_per_forward) {
    struct fx_error err;
    static const char *files[] = {"models/llama-tiny-tied.F32.gguf", "models/gemma3-tiny.F32.gguf",
                                  "models/qwen3moe-tiny.F32.gguf"};
    static float logits[16 * NV], hidden[16 * 256];
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        struct fx_model *m = fx_test_load_model(files[f]);
        struct fx_context *ctx = context(m, 64, 4, 2); /* 16 rows: four chunks, one entry */
        uint64_t before = fx_par_cold_entries();
        assert_int_equal(fx_forward_batch(ctx, P1, 16, 0, logits, &err), FX_OK);
        assert_int_equal(fx_par_cold_entries(), before + 1);
        assert_int_equal(fx_forward_token(ctx, 5, 16, logits, &err), FX_OK);
        assert_int_equal(fx_par_cold_entries(), before + 2);
        assert_int_equal(fx_forward_batch_last(ctx, P1, 16, 0, logits, &err), FX_OK);
        assert_int_equal(fx_par_cold_entries(), before + 3);
        assert_int_equal(fx_forward_batch_with_hidden(ctx, P1, 16, 0, logits, hidden, &err), FX_OK);
        assert_int_equal(fx_par_cold_entries(), before + 4);
        assert_int_equal(fx_forward_hidden_batch(ctx, P1, 16, 0, hidden, &err), FX_OK);
        assert_int_equal(fx_par_cold_entries(), before + 5);
        assert_int_equal(fx_forward_verify(ctx, P1, 16, 0, logits, &err), FX_OK);
        assert_int_equal(fx_par_cold_entries(), before + 6);
        /* A rejected call does not enter the pool at all. */
        assert_int_equal(fx_forward_token(ctx, -1, 16, logits, &err), FX_ERR_INVALID_ARG);
        assert_int_equal(fx_par_cold_entries(), before + 6);
        fx_context_free(ctx);
        fx_model_free(m);
    }
}

/* ---- public forward functions are defined in src/decoder/entry.c only ---------------------- */

static regex_t definition;
static int stray_definitions, entry_definitions;

static int scan_file(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)ftw;
    size_t len = strlen(path);
    if (flag != FTW_F || len < 2 || strcmp(path + len - 2, ".c") != 0)
        return 0;
    char *text = fx_test_read_file(path, NULL);
    bool is_entry = strcmp(path, "src/decoder/entry.c") == 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"))
        if (regexec(&definition, line, 0, NULL, 0) == 0) {
            if (is_entry) {
                entry_definitions++;
            } else {
                print_message("public forward function outside entry.c: %s: %s\n", path, line);
                stray_definitions++;
            }
        }
    free(text);
    return 0;
}

FX_TEST(decoder_forward_functions_only_in_entry_c) {
    /* A definition at the start of a line, not static: "fx_status fx_forward_xxx(". */
    assert_int_equal(regcomp(&definition, "^[a-z_ ]*fx_status[[:space:]]+fx_forward_[a-z_]*[(]",
                             REG_EXTENDED | REG_NOSUB),
                     0);
    stray_definitions = entry_definitions = 0;
    assert_int_equal(nftw("src", scan_file, 16, FTW_PHYS), 0);
    regfree(&definition);
    assert_int_equal(stray_definitions, 0);
    assert_int_equal(entry_definitions, 12); /* the twelve entry points; the scan itself works */
}

/* ---- the maths does not depend on scheduling --------------------------------------------- */

FX_TEST(decoder_bit_identical_across_threads_and_chunks) {
    static const char *files[] = {"models/llama-tiny.Q4_K.gguf",
                                  "models/gptoss-tiny.MXFP4_MOE.gguf",
                                  "models/gemma2-tiny.F32.gguf"};
    static float ref[16 * NV], got[16 * NV];
    struct fx_error err;
    const int configs[][2] = {{3, 2}, {16, 3}, {1, 1}, {5, 4}}; /* n_batch, n_threads */
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        struct fx_model *m = fx_test_load_model(files[f]);
        struct fx_context *ctx = context(m, 32, 512, 1);
        assert_int_equal(fx_forward_batch(ctx, P1, 16, 0, ref, &err), FX_OK);
        fx_context_free(ctx);
        for (size_t c = 0; c < sizeof configs / sizeof configs[0]; c++) {
            ctx = context(m, 32, configs[c][0], configs[c][1]);
            assert_int_equal(fx_forward_batch(ctx, P1, 16, 0, got, &err), FX_OK);
            assert_memory_equal(got, ref, sizeof ref);
            fx_context_free(ctx);
        }
        fx_model_free(m);
    }
}

/* Decode steps (one row) share each matmul among the workers by weight rows, a split that
 * depends on the worker count (and on which worker is free first where it is claimed); the
 * experts of a mixture-of-experts layer go whole to the workers when these divide them evenly
 * (the fixtures' 2 experts a token on 2 workers) and are shared by rows otherwise. Whatever the
 * split, every step's logits are the one-thread steps' bit for bit: odd worker counts, more
 * workers than some matrices have row units; Q8_0, Q4_K, gemma3, Gated DeltaNet and expert
 * layers. */
FX_TEST(decoder_token_steps_bit_identical_across_threads) {
    static const char *files[] = {
        "models/qwen3-tiny.Q8_0.gguf",       "models/llama-tiny.Q4_K.gguf",
        "models/gemma3-tiny.Q8_0.gguf",      "qwen35/models/qwen35-tiny.Q8_0.gguf",
        "models/gptoss-tiny.MXFP4_MOE.gguf", "models/qwen3moe-tiny.Q8_0.gguf"};
    static float ref[16 * NV], got[NV];
    struct fx_error err;
    const int threads[] = {2, 3, 4, 7};
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        struct fx_model *m = fx_test_load_model(files[f]);
        struct fx_context *ctx = context(m, 32, 512, 1);
        for (int i = 0; i < 16; i++)
            assert_int_equal(fx_forward_token(ctx, P1[i], i, ref + i * NV, &err), FX_OK);
        fx_context_free(ctx);
        for (size_t t = 0; t < sizeof threads / sizeof threads[0]; t++) {
            ctx = context(m, 32, 512, threads[t]);
            for (int i = 0; i < 16; i++) {
                assert_int_equal(fx_forward_token(ctx, P1[i], i, got, &err), FX_OK);
                assert_memory_equal(got, ref + i * NV, sizeof got);
            }
            fx_context_free(ctx);
        }
        fx_model_free(m);
    }
}

/* ---- failed calls change nothing ----------------------------------------------------------- */

FX_TEST(decoder_rejects_bad_calls_without_changes) {
    struct fx_model *m = fx_test_load_model("models/qwen2-tiny.F32.gguf");
    struct fx_context *ctx = context(m, 20, 512, 2);
    static float ref[16 * NV], got[16 * NV];
    struct fx_error err;
    assert_int_equal(fx_forward_batch(ctx, P1, 8, 0, ref, &err), FX_OK);
    assert_int_equal(fx_context_kv_len(ctx), 8);

    fx_token bad[3] = {5, 512, 7};
    assert_int_equal(fx_forward_batch(ctx, bad, 3, 8, got, &err), FX_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "token 512 at index 1"));
    assert_int_equal(fx_forward_token(ctx, -3, 8, got, &err), FX_ERR_INVALID_ARG);
    assert_int_equal(fx_forward_token(ctx, 5, 9, got, &err), FX_ERR_INVALID_ARG); /* a gap */
    assert_non_null(strstr(err.msg, "position 9"));
    assert_int_equal(fx_forward_batch(ctx, P1 + 8, 13, 8, got, &err), FX_ERR_CAPACITY);
    assert_non_null(strstr(err.msg, "exceed the context of 20"));
    assert_int_equal(fx_forward_batch(ctx, P1, 0, 0, got, &err), FX_ERR_INVALID_ARG);
    assert_int_equal(fx_context_kv_len(ctx), 8);

    /* The cache still holds exactly the first 8 positions: continuing gives what one batch of
     * 16 gives. */
    assert_int_equal(fx_forward_batch(ctx, P1 + 8, 8, 8, got + 8 * NV, &err), FX_OK);
    memcpy(got, ref, sizeof(float) * 8 * NV);
    struct fx_context *fresh = context(m, 20, 512, 2);
    assert_int_equal(fx_forward_batch(fresh, P1, 16, 0, ref, &err), FX_OK);
    assert_memory_equal(got, ref, sizeof ref);

    /* Rewinding: evaluating at position 4 again replaces what followed. */
    assert_int_equal(fx_context_kv_truncate(ctx, 4, &err), FX_OK);
    assert_int_equal(fx_forward_batch(ctx, P1 + 4, 12, 4, got, &err), FX_OK);
    assert_memory_equal(got, ref + 4 * NV, sizeof(float) * 12 * NV);
    assert_int_equal(fx_context_kv_truncate(ctx, 17, &err), FX_ERR_INVALID_ARG);

    fx_context_free(fresh);
    fx_context_free(ctx);
    fx_model_free(m);
}

/* ---- hidden states ------------------------------------------------------------------------- */

FX_TEST(decoder_hidden_states_project_to_logits) {
    /* Tied F32 model: logits = hidden . token_embd rows, recomputed here in double. */
    struct fx_model *m = fx_test_load_model("models/llama-tiny-tied.F32.gguf");
    struct fx_context *ctx = context(m, 32, 512, 2);
    enum { N = 16, E = 128 };
    static float logits[N * NV], logits2[N * NV], hidden[N * E], hidden2[N * E];
    struct fx_error err;
    assert_int_equal(fx_forward_batch_with_hidden(ctx, P1, N, 0, logits, hidden, &err), FX_OK);
    assert_int_equal(fx_forward_batch(ctx, P1, N, 0, logits2, &err), FX_OK);
    assert_memory_equal(logits, logits2, sizeof logits);
    assert_int_equal(fx_forward_hidden_batch(ctx, P1, N, 0, hidden2, &err), FX_OK);
    assert_memory_equal(hidden, hidden2, sizeof hidden);

    const struct fx_tensor_view *emb = fx_gguf_find_tensor(fx_model_gguf(m), "token_embd.weight");
    assert_non_null(emb);
    assert_int_equal(emb->type, FX_TYPE_F32);
    const float *w = emb->data;
    for (int r = 0; r < N; r++)
        for (int v = 0; v < NV; v++) {
            double dot = 0.0;
            for (int i = 0; i < E; i++)
                dot += (double)hidden[r * E + i] * w[v * E + i];
            if (fabs(dot - logits[r * NV + v]) > 1e-4)
                fail_msg("row %d token %d: logit %g, hidden . embedding %g", r, v,
                         logits[r * NV + v], dot);
        }
    fx_context_free(ctx);
    fx_model_free(m);
}

/* ---- FERROX_DUMP --------------------------------------------------------------------------- */

static size_t file_size(const char *dir, const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    size_t size;
    free(fx_test_read_file(path, &size));
    return size;
}

FX_TEST(decoder_dump_writes_named_intermediates) {
    struct fx_model *m = fx_test_load_model("models/qwen3-tiny.F32.gguf");
    const char *dir = fx_test_tmpdir();
    setenv("FERROX_DUMP", dir, 1);
    struct fx_context *ctx = context(m, 32, 512, 2);
    unsetenv("FERROX_DUMP");
    static float logits[16 * NV];
    struct fx_error err;
    assert_int_equal(fx_forward_batch(ctx, P1, 16, 0, logits, &err), FX_OK);
    assert_int_equal(file_size(dir, "inp_embd.bin"), 16 * 256 * 4);
    assert_int_equal(file_size(dir, "attn_norm-0.bin"), 16 * 256 * 4);
    assert_int_equal(file_size(dir, "q-1.bin"), 16 * 4 * 64 * 4);
    assert_int_equal(file_size(dir, "k-1.bin"), 16 * 2 * 64 * 4);
    assert_int_equal(file_size(dir, "l_out-1.bin"), 16 * 256 * 4);
    char path[4096];
    snprintf(path, sizeof path, "%s/result_output.bin", dir);
    size_t size;
    char *out = fx_test_read_file(path, &size);
    assert_int_equal(size, sizeof logits);
    assert_memory_equal(out, logits, sizeof logits);
    free(out);
    fx_context_free(ctx);
    fx_model_free(m);
}
