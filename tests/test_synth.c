/* model/synth.c and `ferrox synth`: the shapes match the published models, the files load back
 * with the right tensors and metadata, and a seed reproduces a file byte for byte. */
#include "fx_test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ferrox.h"
#include "model/synth.h"

/* Parameter counts of the released models (their model cards; with tied embeddings counted
 * once), and what each shape adds beyond them: Llama 3.2's 32 rope scaling factors. */
FX_TEST(synth_shapes_match_published_parameter_counts) {
    static const struct {
        const char *shape;
        int64_t params, extra, tensors;
    } cases[] = {
        {"smollm2-135m", 134515008, 0, 2 + 9 * 30},
        {"qwen3-0.6b", 596049920, 0, 2 + 11 * 28},
        {"llama-3.2-1b", 1235814400, 32, 3 + 9 * 16},
        {"tiny", 1311872, 0, 3 + 9 * 4},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct fx_synth_model *m;
        struct fx_error e;
        assert_int_equal(fx_synth_plan(cases[i].shape, FX_TYPE_F16, 7, &m, &e), FX_OK);
        assert_int_equal(fx_synth_n_params(m), cases[i].params + cases[i].extra);
        assert_int_equal(m->n_tensors, cases[i].tensors);
        for (int64_t t = 0; t < m->n_tensors; t++) {
            /* 1-D tensors stay F32; matrices take the weight type. */
            enum fx_type want = m->tensors[t].n_dims == 1 ? FX_TYPE_F32 : FX_TYPE_F16;
            assert_int_equal(m->tensors[t].type, want);
        }
        fx_synth_model_free(m);
    }
    struct fx_synth_model *m;
    struct fx_error e;
    assert_int_equal(fx_synth_plan("gpt-5", FX_TYPE_F32, 1, &m, &e), FX_ERR_INVALID_ARG);
    assert_non_null(strstr(e.msg, "'gpt-5'"));
    assert_int_equal(fx_synth_plan("tiny", FX_TYPE_Q4_K, 1, &m, &e), FX_ERR_INVALID_ARG);
}

FX_TEST(synth_qwen3_shape_has_its_own_layout) {
    struct fx_synth_model *m;
    assert_int_equal(fx_synth_plan("qwen3-0.6b", FX_TYPE_F32, 1, &m, NULL), FX_OK);
    const struct fx_synth_tensor *t = NULL;
    for (int64_t i = 0; i < m->n_tensors; i++)
        if (strcmp(m->tensors[i].name, "blk.27.attn_q.weight") == 0)
            t = &m->tensors[i];
    assert_non_null(t);
    /* 16 heads of 128: wider than the 1024 embedding, as in Qwen3. */
    assert_int_equal(t->ne[0], 1024);
    assert_int_equal(t->ne[1], 2048);
    bool q_norm = false, output = false;
    for (int64_t i = 0; i < m->n_tensors; i++) {
        q_norm |= strcmp(m->tensors[i].name, "blk.0.attn_q_norm.weight") == 0 &&
                  m->tensors[i].ne[0] == 128;
        output |= strcmp(m->tensors[i].name, "output.weight") == 0;
    }
    assert_true(q_norm);
    assert_false(output); /* tied */
    fx_synth_model_free(m);
}

static float f16_to_f32(uint16_t h) {
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    float v = e == 0 ? ldexpf((float)m, -24) : ldexpf((float)(m | 0x400), e - 25);
    return (h & 0x8000) ? -v : v;
}

static struct fx_gguf *open_ok(const char *path) {
    struct fx_gguf *g;
    struct fx_error e;
    if (fx_gguf_open(path, &g, &e) != FX_OK)
        fail_msg("%s: %s", path, e.msg);
    return g;
}

FX_TEST(synth_tiny_loads_back_and_is_reproducible) {
    const char *f32 = fx_test_tmpfile("tiny-f32.gguf");
    const char *f16 = fx_test_tmpfile("tiny-f16.gguf");
    const char *again = fx_test_tmpfile("tiny-f16-again.gguf");
    const char *other = fx_test_tmpfile("tiny-f16-other.gguf");
    char *out = NULL;
    assert_int_equal(fx_test_run_cli((const char *const[]){"synth", "--shape", "tiny", "--type",
                                                           "f32", "-o", f32, "--seed", "42", NULL},
                                     NULL, &out, NULL),
                     0);
    assert_non_null(strstr(out, "39 tensors, 1311872 parameters"));
    free(out);
    const char *f16_args[] = {"synth", "--shape", "tiny",   "--type", "f16",
                              "-o",    f16,       "--seed", "42",     NULL};
    assert_int_equal(fx_test_run_cli(f16_args, NULL, NULL, NULL), 0);
    f16_args[6] = again;
    assert_int_equal(fx_test_run_cli(f16_args, NULL, NULL, NULL), 0);
    f16_args[6] = other;
    f16_args[8] = "43";
    assert_int_equal(fx_test_run_cli(f16_args, NULL, NULL, NULL), 0);

    /* The same seed gives the same bytes; another seed other weights. */
    size_t na, nb, nc;
    char *a = fx_test_read_file(f16, &na), *b = fx_test_read_file(again, &nb),
         *c = fx_test_read_file(other, &nc);
    assert_int_equal(na, nb);
    assert_memory_equal(a, b, na);
    assert_int_equal(na, nc);
    assert_true(memcmp(a, c, na) != 0);
    free(a), free(b), free(c);

    struct fx_gguf *g32 = open_ok(f32), *g16 = open_ok(f16);
    uint32_t u;
    float eps;
    struct fx_gguf_str s;
    assert_int_equal(fx_gguf_get_str(g16, "general.architecture", &s, NULL), FX_OK);
    assert_string_equal(s.data, "llama");
    assert_int_equal(fx_gguf_get_u32(g16, "llama.embedding_length", &u, NULL), FX_OK);
    assert_int_equal(u, 128);
    assert_int_equal(fx_gguf_get_u32(g16, "llama.block_count", &u, NULL), FX_OK);
    assert_int_equal(u, 4);
    assert_int_equal(fx_gguf_get_u32(g16, "llama.attention.head_count_kv", &u, NULL), FX_OK);
    assert_int_equal(u, 1);
    assert_int_equal(fx_gguf_get_u32(g16, "general.file_type", &u, NULL), FX_OK);
    assert_int_equal(u, 1);
    assert_int_equal(fx_gguf_get_u32(g32, "general.file_type", &u, NULL), FX_OK);
    assert_int_equal(u, 0);
    assert_int_equal(fx_gguf_get_f32(g16, "llama.attention.layer_norm_rms_epsilon", &eps, NULL),
                     FX_OK);
    assert_true(eps == 1e-5f);

    /* The vocabulary: SentencePiece layout, unique pieces, one per embedding row. */
    const void *arr;
    uint64_t n;
    assert_int_equal(fx_gguf_get_arr(g16, "tokenizer.ggml.tokens", FX_GGUF_STRING, &arr, &n, NULL),
                     FX_OK);
    assert_int_equal(n, 2048);
    const struct fx_gguf_str *tok = arr;
    assert_string_equal(tok[0].data, "<unk>");
    assert_string_equal(tok[1].data, "<s>");
    assert_string_equal(tok[2].data, "</s>");
    assert_string_equal(tok[3].data, "<0x00>");
    assert_string_equal(tok[258].data, "<0xFF>");
    assert_string_equal(tok[259].data, "\xe2\x96\x81"
                                       "a");
    assert_string_equal(tok[260].data, "a");
    for (uint64_t i = 1; i < n; i++)
        for (uint64_t j = i > 300 ? i - 300 : 0; j < i; j++)
            assert_false(tok[i].len == tok[j].len &&
                         memcmp(tok[i].data, tok[j].data, tok[i].len) == 0);
    assert_int_equal(
        fx_gguf_get_arr(g16, "tokenizer.ggml.token_type", FX_GGUF_INT32, &arr, &n, NULL), FX_OK);
    assert_int_equal(((const int32_t *)arr)[0], 2);
    assert_int_equal(((const int32_t *)arr)[1], 3);
    assert_int_equal(((const int32_t *)arr)[100], 6);
    assert_int_equal(((const int32_t *)arr)[2000], 1);
    assert_int_equal(fx_gguf_get_arr(g16, "tokenizer.ggml.scores", FX_GGUF_FLOAT32, &arr, &n, NULL),
                     FX_OK);
    assert_true(((const float *)arr)[300] > ((const float *)arr)[301]);

    const struct fx_tensor_view *e32 = fx_gguf_find_tensor(g32, "token_embd.weight");
    const struct fx_tensor_view *e16 = fx_gguf_find_tensor(g16, "token_embd.weight");
    assert_int_equal(e32->ne[0], 128);
    assert_int_equal(e32->ne[1], 2048);
    assert_int_equal(e16->type, FX_TYPE_F16);
    assert_int_equal(fx_gguf_find_tensor(g16, "blk.3.ffn_down.weight")->ne[0], 384);
    assert_int_equal(fx_gguf_find_tensor(g16, "blk.0.attn_k.weight")->ne[1], 64);
    assert_int_equal(fx_gguf_find_tensor(g16, "output_norm.weight")->type, FX_TYPE_F32);
    assert_non_null(fx_gguf_find_tensor(g16, "output.weight"));

    /* The F16 file holds the F32 file's values rounded to half precision, and the values have
     * the intended statistics: embedding rows N(0, 1/sqrt(128)), norms near 1. */
    const float *x = e32->data;
    const uint16_t *h = e16->data;
    double sum = 0, sum2 = 0;
    for (int64_t i = 0; i < e32->n_elements; i++) {
        float r = f16_to_f32(h[i]);
        assert_true(fabsf(r - x[i]) <= fabsf(x[i]) * 0x1p-11f + 0x1p-25f);
        sum += x[i], sum2 += (double)x[i] * x[i];
    }
    double mean = sum / (double)e32->n_elements;
    double sd = sqrt(sum2 / (double)e32->n_elements - mean * mean);
    assert_true(fabs(mean) < 0.002);
    assert_true(fabs(sd - 1 / sqrt(128.0)) < 0.002);
    const float *norm = fx_gguf_find_tensor(g32, "blk.1.ffn_norm.weight")->data;
    for (int i = 0; i < 128; i++)
        assert_true(norm[i] > 0.9f && norm[i] < 1.1f);
    fx_gguf_free(g32);
    fx_gguf_free(g16);
}

FX_TEST(synth_llama32_plan_has_rope_factors) {
    /* The plan only: the file would be 2.5 GB. */
    struct fx_synth_model *m;
    assert_int_equal(fx_synth_plan("llama-3.2-1b", FX_TYPE_F16, 1, &m, NULL), FX_OK);
    assert_string_equal(m->tensors[1].name, "rope_freqs.weight");
    assert_int_equal(m->tensors[1].ne[0], 32);
    assert_int_equal(m->tensors[1].type, FX_TYPE_F32);
    fx_synth_model_free(m);
}

FX_TEST(synth_rejects_bad_arguments) {
    char *err = NULL;
    assert_int_equal(
        fx_test_run_cli((const char *const[]){"synth", "--shape", "tiny", NULL}, NULL, NULL, NULL),
        2);
    assert_int_equal(fx_test_run_cli((const char *const[]){"synth", "--shape", "huge", "--type",
                                                           "f32", "-o", "/dev/null", NULL},
                                     NULL, NULL, &err),
                     2);
    assert_non_null(strstr(err, "unknown shape 'huge'"));
    free(err);
    assert_int_equal(
        fx_test_run_cli((const char *const[]){"synth", "--shape", "tiny", "--type", "f32", "-o",
                                              "/nonexistent/dir/x.gguf", NULL},
                        NULL, NULL, &err),
        1);
    assert_non_null(strstr(err, "/nonexistent/dir/x.gguf"));
    free(err);
}
