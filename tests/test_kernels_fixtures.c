/* kernels: the file encodings against llama.cpp. Every quantized or half-precision tensor of
 * the fixture models was written by llama-quantize from the F32 master (fixtures README,
 * "Files and quantization"); encoding the master's tensor with our from_float must give the
 * same bytes. Each file's tensors are also decoded with every table and compared with the
 * independent float64 decoder, so a layout read wrongly by both sides would still show. */
#include "fx_test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels_ref.h"

struct mismatch {
    int64_t tensors, rows, bad_rows;
};

static struct fx_gguf *open_fixture(const char *rel) {
    struct fx_gguf *g = NULL;
    struct fx_error err = {0};
    const char *path = fx_test_fixture(rel);
    if (fx_gguf_open(path, &g, &err) != FX_OK)
        fail_msg("%s: %s", path, err.msg);
    return g;
}

/* Re-encodes every non-F32 tensor of `quant_rel` from its F32 master and compares the bytes,
 * row by row. Types outside `expect` fail the test (a file holding something unexpected). */
static void check_file(const char *master_rel, const char *quant_rel, const enum fx_type *expect,
                       int n_expect) {
    const struct fx_kernels *g = fx_kernels_named("generic");
    struct fx_gguf *master = open_fixture(master_rel), *quant = open_fixture(quant_rel);
    int64_t checked = 0;
    for (int64_t ti = 0; ti < fx_gguf_n_tensors(quant); ti++) {
        const struct fx_tensor_view *q = fx_gguf_tensor_at(quant, ti);
        if (q->type == FX_TYPE_F32)
            continue;
        bool expected = false;
        for (int e = 0; e < n_expect; e++)
            expected |= q->type == expect[e];
        if (!expected)
            fail_msg("%s: tensor '%s' has type %s", quant_rel, q->name, fx_type_name(q->type));
        const struct fx_tensor_view *m = fx_gguf_find_tensor(master, q->name);
        assert_non_null(m);
        assert_int_equal(m->type, FX_TYPE_F32);
        assert_int_equal(m->n_elements, q->n_elements);
        int64_t n = q->ne[0], rows = q->n_elements / n;
        uint64_t row_bytes;
        assert_true(fx_type_row_bytes(q->type, n, &row_bytes));
        assert_int_equal(row_bytes * (uint64_t)rows, q->n_bytes);
        uint8_t *mine = malloc(row_bytes);
        assert_non_null(mine);
        int64_t bad = 0, first_bad = -1;
        for (int64_t r = 0; r < rows; r++) {
            const float *src = (const float *)m->data + r * n;
            const uint8_t *theirs = (const uint8_t *)q->data + (uint64_t)r * row_bytes;
            g->types[q->type].from_float(src, mine, n);
            if (memcmp(mine, theirs, row_bytes) != 0) {
                bad++;
                if (first_bad < 0)
                    first_bad = r;
            }
        }
        if (bad)
            fail_msg("%s: tensor '%s' (%s): %lld of %lld rows differ from llama.cpp's encoding, "
                     "first row %lld",
                     quant_rel, q->name, fx_type_name(q->type), (long long)bad, (long long)rows,
                     (long long)first_bad);
        free(mine);
        checked++;
    }
    assert_true(checked > 0);
    fx_gguf_free(master);
    fx_gguf_free(quant);
}

#define CHECK(master, quant, ...)                                                                  \
    do {                                                                                           \
        static const enum fx_type types_[] = {__VA_ARGS__};                                        \
        check_file("models/" master, "models/" quant, types_,                                      \
                   (int)(sizeof types_ / sizeof types_[0]));                                       \
    } while (0)

FX_TEST(kernels_fixture_bytes_f16_bf16) {
    CHECK("llama-tiny.F32.gguf", "llama-tiny.F16.gguf", FX_TYPE_F16);
    CHECK("llama-tiny.F32.gguf", "llama-tiny.BF16.gguf", FX_TYPE_BF16);
}

FX_TEST(kernels_fixture_bytes_q8_0) {
    CHECK("llama-tiny.F32.gguf", "llama-tiny.Q8_0.gguf", FX_TYPE_Q8_0);
    CHECK("llama-tiny-tied.F32.gguf", "llama-tiny-tied.Q8_0.gguf", FX_TYPE_Q8_0);
    CHECK("qwen2-tiny.F32.gguf", "qwen2-tiny.Q8_0.gguf", FX_TYPE_Q8_0);
    CHECK("qwen3-tiny.F32.gguf", "qwen3-tiny.Q8_0.gguf", FX_TYPE_Q8_0);
    CHECK("gemma3-tiny.F32.gguf", "gemma3-tiny.Q8_0.gguf", FX_TYPE_Q8_0);
    CHECK("qwen3moe-tiny.F32.gguf", "qwen3moe-tiny.Q8_0.gguf", FX_TYPE_Q8_0);
}

FX_TEST(kernels_fixture_bytes_q4_q5) {
    CHECK("llama-tiny.F32.gguf", "llama-tiny.Q4_0.gguf", FX_TYPE_Q4_0);
    CHECK("llama-tiny.F32.gguf", "llama-tiny.Q4_1.gguf", FX_TYPE_Q4_1);
    CHECK("llama-tiny.F32.gguf", "llama-tiny.Q5_0.gguf", FX_TYPE_Q5_0);
    CHECK("llama-tiny.F32.gguf", "llama-tiny.Q5_1.gguf", FX_TYPE_Q5_1);
}

FX_TEST(kernels_fixture_bytes_k_quants) {
    CHECK("llama-tiny.F32.gguf", "llama-tiny.Q2_K.gguf", FX_TYPE_Q2_K);
    CHECK("llama-tiny.F32.gguf", "llama-tiny.Q3_K.gguf", FX_TYPE_Q3_K);
    CHECK("llama-tiny.F32.gguf", "llama-tiny.Q4_K.gguf", FX_TYPE_Q4_K);
    CHECK("llama-tiny.F32.gguf", "llama-tiny.Q5_K.gguf", FX_TYPE_Q5_K);
    CHECK("llama-tiny.F32.gguf", "llama-tiny.Q6_K.gguf", FX_TYPE_Q6_K);
    CHECK("qwen3-tiny.F32.gguf", "qwen3-tiny.Q4_K_M.gguf", FX_TYPE_Q4_K, FX_TYPE_Q6_K);
}

FX_TEST(kernels_fixture_bytes_mxfp4) {
    CHECK("gptoss-tiny.F32.gguf", "gptoss-tiny.MXFP4_MOE.gguf", FX_TYPE_MXFP4, FX_TYPE_Q8_0);
}

/* The IQ4 files (fixtures/iq4/README.md): llama-quantize's mix, the output in Q6_K. */
FX_TEST(kernels_fixture_bytes_iq4) {
    static const enum fx_type nl[] = {FX_TYPE_IQ4_NL, FX_TYPE_Q6_K};
    static const enum fx_type xs[] = {FX_TYPE_IQ4_XS, FX_TYPE_Q6_K};
    check_file("models/llama-tiny.F32.gguf", "iq4/models/llama-tiny.IQ4_NL.gguf", nl, 2);
    check_file("models/llama-tiny.F32.gguf", "iq4/models/llama-tiny.IQ4_XS.gguf", xs, 2);
}

/* Every tensor of every quantized fixture decodes, in every table, to the float64 decoder's
 * values (f32 rounding of the terms aside). */
FX_TEST(kernels_fixture_tensors_decode) {
    static const char *const files[] = {
        "llama-tiny.F16.gguf",    "llama-tiny.BF16.gguf",       "llama-tiny.Q8_0.gguf",
        "llama-tiny.Q4_0.gguf",   "llama-tiny.Q4_1.gguf",       "llama-tiny.Q5_0.gguf",
        "llama-tiny.Q5_1.gguf",   "llama-tiny.Q2_K.gguf",       "llama-tiny.Q3_K.gguf",
        "llama-tiny.Q4_K.gguf",   "llama-tiny.Q5_K.gguf",       "llama-tiny.Q6_K.gguf",
        "qwen3-tiny.Q4_K_M.gguf", "gptoss-tiny.MXFP4_MOE.gguf",
    };
    static const char *const iq4_files[] = {"llama-tiny.IQ4_NL.gguf", "llama-tiny.IQ4_XS.gguf"};
    const size_t n_main = sizeof files / sizeof files[0], n_iq4 = 2;
    const struct fx_kernels *tables[3];
    int n_tables = kref_tables(tables);
    char rel[128];
    for (size_t f = 0; f < n_main + n_iq4; f++) {
        if (f < n_main)
            snprintf(rel, sizeof rel, "models/%s", files[f]);
        else
            snprintf(rel, sizeof rel, "iq4/models/%s", iq4_files[f - n_main]);
        struct fx_gguf *g = open_fixture(rel);
        for (int64_t ti = 0; ti < fx_gguf_n_tensors(g); ti++) {
            const struct fx_tensor_view *t = fx_gguf_tensor_at(g, ti);
            int64_t n = t->ne[0];
            float *row = malloc((size_t)n * sizeof *row);
            assert_non_null(row);
            uint64_t row_bytes;
            assert_true(fx_type_row_bytes(t->type, n, &row_bytes));
            /* The first, a middle and the last row: enough to catch a layout error. */
            int64_t rows = t->n_elements / n, pick[3] = {0, rows / 2, rows - 1};
            for (int k = 0; k < n_tables; k++) {
                for (int p = 0; p < 3; p++) {
                    const uint8_t *src = (const uint8_t *)t->data + (uint64_t)pick[p] * row_bytes;
                    tables[k]->types[t->type].to_float(src, row, n);
                    for (int64_t i = 0; i < n; i++) {
                        double mag, want = kref_elem(t->type, src, i, &mag);
                        if (fabs((double)row[i] - want) > 0x1p-23 * mag)
                            fail_msg("%s '%s' row %lld element %lld (%s): %.9g, want %.9g", rel,
                                     t->name, (long long)pick[p], (long long)i, tables[k]->name,
                                     (double)row[i], want);
                    }
                }
            }
            free(row);
        }
        fx_gguf_free(g);
    }
}
