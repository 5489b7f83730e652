/* model/synth.c and `ferrox synth`: the shapes match the published models, every file type is
 * generated with the same per-tensor types and bytes `ferrox quantize` gives (which the quantize
 * tests pin against llama.cpp), the files load and run with finite activations, and a seed
 * reproduces a file byte for byte whatever the thread count. */
#include "fx_test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ferrox.h"
#include "model/ftype.h"
#include "model/synth.h"

static uint32_t ftype_of(const char *name) {
    uint32_t id;
    if (!fx_file_type_from_name(name, &id))
        fail_msg("unknown file type %s", name);
    return id;
}

static struct fx_synth_model *plan_ok(const char *shape, const char *type, bool pure) {
    struct fx_synth_model *m;
    struct fx_error e;
    if (fx_synth_plan(shape, ftype_of(type), pure, 7, &m, &e) != FX_OK)
        fail_msg("plan %s %s: %s", shape, type, e.msg);
    return m;
}

static const struct fx_synth_tensor *find(const struct fx_synth_model *m, const char *name) {
    for (int64_t i = 0; i < m->n_tensors; i++)
        if (strcmp(m->tensors[i].name, name) == 0)
            return &m->tensors[i];
    return NULL;
}

/* Parameter counts of the released models (their model cards; with tied embeddings counted
 * once), and what each shape adds beyond them: Llama 3.2's 32 rope scaling factors. gpt-oss-20b
 * is 20,914,757,184 parameters, its safetensors' total. */
FX_TEST(synth_shapes_match_published_parameter_counts) {
    static const struct {
        const char *shape;
        int64_t params, extra, tensors;
    } cases[] = {
        {"smollm2-135m", 134515008, 0, 2 + 9 * 30},
        {"qwen3-0.6b", 596049920, 0, 2 + 11 * 28},
        {"llama-3.2-1b", 1235814400, 32, 3 + 9 * 16},
        {"gpt-oss-20b", 20914757184, 0, 3 + 19 * 24},
        {"tiny", 3410176, 0, 3 + 9 * 4},
        {"tiny-moe", 3025680, 0, 3 + 19 * 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct fx_synth_model *m = plan_ok(cases[i].shape, "F16", false);
        assert_int_equal(fx_synth_n_params(m), cases[i].params + cases[i].extra);
        assert_int_equal(m->n_tensors, cases[i].tensors);
        for (int64_t t = 0; t < m->n_tensors; t++) {
            /* Weights take the file type; 1-D tensors, biases and MoE routers stay F32. */
            const struct fx_synth_tensor *x = &m->tensors[t];
            bool weight =
                x->n_dims > 1 && strstr(x->name, ".weight") && !strstr(x->name, "ffn_gate_inp");
            assert_int_equal(x->type, weight ? FX_TYPE_F16 : FX_TYPE_F32);
        }
        fx_synth_model_free(m);
    }
    struct fx_synth_model *m;
    struct fx_error e;
    assert_int_equal(fx_synth_plan("gpt-5", 0, false, 1, &m, &e), FX_ERR_INVALID_ARG);
    assert_non_null(strstr(e.msg, "'gpt-5'"));
    assert_int_equal(fx_synth_plan("tiny", 21 /* Q2_K_S: needs an imatrix */, false, 1, &m, &e),
                     FX_ERR_INVALID_ARG);
}

FX_TEST(synth_qwen3_shape_has_its_own_layout) {
    struct fx_synth_model *m = plan_ok("qwen3-0.6b", "F32", false);
    const struct fx_synth_tensor *t = find(m, "blk.27.attn_q.weight");
    assert_non_null(t);
    /* 16 heads of 128: wider than the 1024 embedding, as in Qwen3. */
    assert_int_equal(t->ne[0], 1024);
    assert_int_equal(t->ne[1], 2048);
    t = find(m, "blk.0.attn_q_norm.weight");
    assert_non_null(t);
    assert_int_equal(t->ne[0], 128);
    assert_null(find(m, "output.weight")); /* tied */
    fx_synth_model_free(m);
}

/* gpt-oss-20b as llama.cpp's MXFP4_MOE: experts MXFP4 [2880, 2880, 32], the other weights
 * Q8_0, routers, biases, norms and sinks F32; 12.1 GB, the size of the published GGUF. */
FX_TEST(synth_gpt_oss_20b_layout) {
    struct fx_synth_model *m = plan_ok("gpt-oss-20b", "MXFP4_MOE", false);
    const struct fx_synth_tensor *t = find(m, "blk.23.ffn_gate_exps.weight");
    assert_non_null(t);
    assert_int_equal(t->type, FX_TYPE_MXFP4);
    assert_int_equal(t->n_dims, 3);
    assert_int_equal(t->ne[0], 2880);
    assert_int_equal(t->ne[1], 2880);
    assert_int_equal(t->ne[2], 32);
    t = find(m, "blk.0.ffn_down_exps.bias");
    assert_int_equal(t->type, FX_TYPE_F32);
    assert_int_equal(t->ne[0], 2880);
    assert_int_equal(t->ne[1], 32);
    assert_int_equal(find(m, "blk.0.attn_q.weight")->ne[1], 4096); /* 64 heads of 64 */
    assert_int_equal(find(m, "blk.0.attn_k.weight")->ne[1], 512);  /* 8 KV heads */
    assert_int_equal(find(m, "blk.0.attn_output.weight")->type, FX_TYPE_Q8_0);
    assert_int_equal(find(m, "token_embd.weight")->type, FX_TYPE_Q8_0);
    assert_int_equal(find(m, "output.weight")->type, FX_TYPE_Q8_0);
    assert_int_equal(find(m, "output.weight")->ne[1], 201088);
    assert_int_equal(find(m, "blk.5.ffn_gate_inp.weight")->type, FX_TYPE_F32);
    assert_int_equal(find(m, "blk.5.attn_sinks.weight")->ne[0], 64);
    /* MXFP4: 17 bytes per 32; Q8_0: 34 per 32. */
    uint64_t experts = 24ull * 3 * 32 * 2880 * 2880, embd = 201088ull * 2880 * 2;
    uint64_t attn = 24ull * (2880 * 4096 * 2 + 2880 * 512 * 2);
    uint64_t f32 =
        24ull * (2 * 2880 + 4096 + 2 * 512 + 2880 + 64 + 2880 * 32 + 32 + 3 * 2880 * 32) + 2880;
    assert_int_equal(fx_synth_n_bytes(m), experts / 32 * 17 + (embd + attn) / 32 * 34 + f32 * 4);
    fx_synth_model_free(m);

    /* A K-quant mix on rows of 2880 (not whole 256-blocks) falls back as llama.cpp does. */
    m = plan_ok("gpt-oss-20b", "Q4_K_M", false);
    assert_int_equal(find(m, "blk.0.ffn_up_exps.weight")->type, FX_TYPE_Q5_0);
    assert_int_equal(find(m, "output.weight")->type, FX_TYPE_Q8_0);
    assert_int_equal(find(m, "blk.0.attn_output.weight")->type, FX_TYPE_Q4_K); /* rows of 4096 */
    fx_synth_model_free(m);
}

/* llama-3.2-1b as llama-quantize's IQ4_XS (no importance matrix): V in Q5_K (32 query heads on
 * 8 KV heads), ffn_down of the first eighth of the 16 layers in Q5_K, the tied embedding (the
 * output) Q6_K, every other weight IQ4_XS. */
FX_TEST(synth_llama_iq4_xs_mix) {
    struct fx_synth_model *m = plan_ok("llama-3.2-1b", "IQ4_XS", false);
    assert_null(find(m, "output.weight"));
    assert_int_equal(find(m, "token_embd.weight")->type, FX_TYPE_Q6_K);
    assert_int_equal(find(m, "blk.0.attn_q.weight")->type, FX_TYPE_IQ4_XS);
    assert_int_equal(find(m, "blk.15.attn_v.weight")->type, FX_TYPE_Q5_K);
    assert_int_equal(find(m, "blk.1.ffn_down.weight")->type, FX_TYPE_Q5_K);
    assert_int_equal(find(m, "blk.2.ffn_down.weight")->type, FX_TYPE_IQ4_XS);
    assert_int_equal(find(m, "blk.2.ffn_up.weight")->type, FX_TYPE_IQ4_XS);
    assert_int_equal(find(m, "blk.2.ffn_norm.weight")->type, FX_TYPE_F32);
    fx_synth_model_free(m);
}

static struct fx_gguf *open_ok(const char *path) {
    struct fx_gguf *g;
    struct fx_error e;
    if (fx_gguf_open(path, &g, &e) != FX_OK)
        fail_msg("%s: %s", path, e.msg);
    return g;
}

static void synth_ok(const char *shape, const char *type, bool pure, const char *seed,
                     const char *threads, const char *path) {
    const char *args[] = {"synth", "--shape", shape, "--type", type,    "-o",
                          path,    "--seed",  seed,  "-t",     threads, pure ? "--pure" : NULL,
                          NULL};
    char *err;
    int rc = fx_test_run_cli(args, NULL, NULL, &err);
    if (rc != 0)
        fail_msg("ferrox synth %s %s exited %d: %s", shape, type, rc, err);
    free(err);
}

/* Synthesising in a file type gives exactly the tensors that quantizing the F32 synthesis to
 * that type gives: the same types (llama.cpp's mix) and, row for row, the same bytes (each
 * generated row goes through the same reference encoder). */
FX_TEST(synth_types_equal_quantized_f32) {
    static const struct {
        const char *shape, *type;
        bool pure;
    } cases[] = {
        {"tiny", "Q4_K_M", false},
        {"tiny", "Q2_K", false},
        {"tiny", "Q3_K_S", true},
        {"tiny", "Q5_1", false},
        {"tiny-moe", "MXFP4_MOE", false},
        {"tiny-moe", "Q6_K", false},
        {"tiny", "IQ4_XS", false},
        {"tiny", "IQ4_NL", false},
        /* the MTP block counts among the layers of the mix, as block_count says */
        {"tiny-qwen35", "Q4_K_M", false},
        {"tiny-qwen35moe", "Q5_K_M", false},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char f32[4096], direct[4096], via[4096];
        snprintf(f32, sizeof f32, "%s", fx_test_tmpfile("synth-master.gguf"));
        snprintf(direct, sizeof direct, "%s", fx_test_tmpfile("synth-direct.gguf"));
        snprintf(via, sizeof via, "%s", fx_test_tmpfile("synth-quantized.gguf"));
        synth_ok(cases[c].shape, "F32", false, "5", "2", f32);
        synth_ok(cases[c].shape, cases[c].type, cases[c].pure, "5", "2", direct);
        struct fx_quantize_params p = fx_quantize_default_params();
        p.type = cases[c].type;
        p.pure = cases[c].pure;
        struct fx_error err;
        if (fx_model_quantize(f32, via, &p, &err) != FX_OK)
            fail_msg("quantize: %s", err.msg);
        struct fx_gguf *a = open_ok(direct), *b = open_ok(via);
        assert_int_equal(fx_gguf_n_tensors(a), fx_gguf_n_tensors(b));
        for (int64_t i = 0; i < fx_gguf_n_tensors(a); i++) {
            const struct fx_tensor_view *x = fx_gguf_tensor_at(a, i);
            const struct fx_tensor_view *y = fx_gguf_find_tensor(b, x->name);
            assert_non_null(y);
            if (x->type != y->type)
                fail_msg("%s %s: %s is %s, quantize made it %s", cases[c].shape, cases[c].type,
                         x->name, fx_type_name(x->type), fx_type_name(y->type));
            assert_int_equal(x->n_bytes, y->n_bytes);
            if (memcmp(x->data, y->data, (size_t)x->n_bytes) != 0)
                fail_msg("%s %s: %s differs", cases[c].shape, cases[c].type, x->name);
        }
        uint32_t fa, fb;
        assert_int_equal(fx_gguf_get_u32(a, "general.file_type", &fa, NULL), FX_OK);
        assert_int_equal(fx_gguf_get_u32(b, "general.file_type", &fb, NULL), FX_OK);
        assert_int_equal(fa, fb);
        fx_gguf_free(a);
        fx_gguf_free(b);
    }
}

/* Every writable file type: the file loads, records its type, and a short batch gives finite,
 * non-degenerate logits (the weights' scales keep activations O(1)). */
FX_TEST(synth_every_type_loads_and_runs) {
    static const char *const types[] = {"F32",    "F16",    "BF16",      "Q8_0",   "Q4_0",
                                        "Q4_1",   "Q5_0",   "Q5_1",      "Q2_K",   "Q3_K_S",
                                        "Q3_K_M", "Q3_K_L", "Q4_K_S",    "Q4_K_M", "Q5_K_S",
                                        "Q5_K_M", "Q6_K",   "MXFP4_MOE", "IQ4_NL", "IQ4_XS"};
    const char *shapes[] = {"tiny", "tiny-moe", "tiny-qwen35", "tiny-qwen35moe"};
    for (size_t s = 0; s < 4; s++)
        for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
            /* The other shapes once per kind of encoder: float, 32-wide, K, MXFP4. */
            if (s == 1 && strcmp(types[i], "BF16") && strcmp(types[i], "Q4_1") &&
                strcmp(types[i], "Q4_K_M") && strcmp(types[i], "MXFP4_MOE"))
                continue;
            const char *path = fx_test_tmpfile("synth-every.gguf");
            struct fx_synth_model *plan = plan_ok(shapes[s], types[i], false);
            struct fx_error err;
            struct fx_synth_write_params wp = {.n_threads = 2};
            if (fx_synth_write(plan, path, &wp, &err) != FX_OK)
                fail_msg("%s %s: %s", shapes[s], types[i], err.msg);
            struct fx_model *m;
            if (fx_model_load(path, NULL, &m, &err) != FX_OK)
                fail_msg("%s %s: %s", shapes[s], types[i], err.msg);
            uint32_t ftype;
            assert_int_equal(fx_gguf_get_u32(fx_model_gguf(m), "general.file_type", &ftype, NULL),
                             FX_OK);
            assert_int_equal(ftype, ftype_of(types[i]));
            /* Every tensor in the file has the type the plan gave it. */
            for (int64_t t = 0; t < plan->n_tensors; t++)
                assert_int_equal(fx_gguf_find_tensor(fx_model_gguf(m), plan->tensors[t].name)->type,
                                 plan->tensors[t].type);
            struct fx_context_params cp = fx_context_default_params();
            cp.n_ctx = 16;
            cp.n_threads = 2;
            struct fx_context *ctx;
            assert_int_equal(fx_context_create(m, &cp, &ctx, &err), FX_OK);
            const fx_token ids[] = {1, 300, 301, 1000, 2047, 5, 700, 42};
            int nv = fx_model_n_vocab(m);
            float *logits = malloc(sizeof(float) * 8 * (size_t)nv);
            assert_non_null(logits);
            assert_int_equal(fx_forward_batch(ctx, ids, 8, 0, logits, &err), FX_OK);
            double sum = 0, sum2 = 0;
            for (int k = 0; k < 8 * nv; k++) {
                if (!isfinite(logits[k]))
                    fail_msg("%s %s: logit %d is %g", shapes[s], types[i], k, logits[k]);
                sum += logits[k], sum2 += (double)logits[k] * logits[k];
            }
            double sd = sqrt(sum2 / (8.0 * nv) - (sum / (8.0 * nv)) * (sum / (8.0 * nv)));
            if (!(sd > 0.1 && sd < 10))
                fail_msg("%s %s: logits have sd %g", shapes[s], types[i], sd);
            free(logits);
            fx_context_free(ctx);
            fx_model_free(m);
            fx_synth_model_free(plan);
        }
}

FX_TEST(synth_tiny_loads_back_and_is_reproducible) {
    const char *f32 = fx_test_tmpfile("tiny-f32.gguf");
    const char *q4 = fx_test_tmpfile("tiny-q4km.gguf");
    const char *again = fx_test_tmpfile("tiny-q4km-again.gguf");
    const char *other = fx_test_tmpfile("tiny-q4km-other.gguf");
    char *out = NULL;
    assert_int_equal(fx_test_run_cli((const char *const[]){"synth", "--shape", "tiny", "--type",
                                                           "f32", "-o", f32, "--seed", "42", NULL},
                                     NULL, &out, NULL),
                     0);
    assert_non_null(strstr(out, "39 tensors, 3410176 parameters"));
    free(out);
    /* The same seed gives the same bytes with 1 or 2 threads; another seed other weights. */
    synth_ok("tiny", "Q4_K_M", false, "42", "1", q4);
    synth_ok("tiny", "Q4_K_M", false, "42", "2", again);
    synth_ok("tiny", "Q4_K_M", false, "43", "2", other);
    size_t na, nb, nc;
    char *a = fx_test_read_file(q4, &na), *b = fx_test_read_file(again, &nb),
         *c = fx_test_read_file(other, &nc);
    assert_int_equal(na, nb);
    assert_memory_equal(a, b, na);
    assert_int_equal(na, nc);
    assert_true(memcmp(a, c, na) != 0);
    free(a), free(b), free(c);

    struct fx_gguf *g = open_ok(f32), *gq = open_ok(q4);
    uint32_t u;
    float eps;
    struct fx_gguf_str s;
    assert_int_equal(fx_gguf_get_str(g, "general.architecture", &s, NULL), FX_OK);
    assert_string_equal(s.data, "llama");
    assert_int_equal(fx_gguf_get_u32(g, "llama.embedding_length", &u, NULL), FX_OK);
    assert_int_equal(u, 256);
    assert_int_equal(fx_gguf_get_u32(g, "llama.block_count", &u, NULL), FX_OK);
    assert_int_equal(u, 4);
    assert_int_equal(fx_gguf_get_u32(g, "llama.attention.head_count_kv", &u, NULL), FX_OK);
    assert_int_equal(u, 2);
    assert_int_equal(fx_gguf_get_u32(g, "general.file_type", &u, NULL), FX_OK);
    assert_int_equal(u, 0);
    assert_int_equal(fx_gguf_get_u32(g, "general.quantization_version", &u, NULL),
                     FX_ERR_NOT_FOUND);
    assert_int_equal(fx_gguf_get_u32(gq, "general.file_type", &u, NULL), FX_OK);
    assert_int_equal(u, 15);
    assert_int_equal(fx_gguf_get_u32(gq, "general.quantization_version", &u, NULL), FX_OK);
    assert_int_equal(u, 2);
    assert_int_equal(fx_gguf_get_f32(g, "llama.attention.layer_norm_rms_epsilon", &eps, NULL),
                     FX_OK);
    assert_true(eps == 1e-5f);

    /* The vocabulary: SentencePiece layout, unique pieces, one per embedding row. */
    const void *arr;
    uint64_t n;
    assert_int_equal(fx_gguf_get_arr(g, "tokenizer.ggml.tokens", FX_GGUF_STRING, &arr, &n, NULL),
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
    assert_int_equal(fx_gguf_get_arr(g, "tokenizer.ggml.token_type", FX_GGUF_INT32, &arr, &n, NULL),
                     FX_OK);
    assert_int_equal(((const int32_t *)arr)[0], 2);
    assert_int_equal(((const int32_t *)arr)[1], 3);
    assert_int_equal(((const int32_t *)arr)[100], 6);
    assert_int_equal(((const int32_t *)arr)[2000], 1);
    assert_int_equal(fx_gguf_get_arr(g, "tokenizer.ggml.scores", FX_GGUF_FLOAT32, &arr, &n, NULL),
                     FX_OK);
    assert_true(((const float *)arr)[300] > ((const float *)arr)[301]);

    const struct fx_tensor_view *e = fx_gguf_find_tensor(g, "token_embd.weight");
    assert_int_equal(e->ne[0], 256);
    assert_int_equal(e->ne[1], 2048);
    assert_int_equal(fx_gguf_find_tensor(g, "blk.3.ffn_down.weight")->ne[0], 512);
    assert_int_equal(fx_gguf_find_tensor(g, "blk.0.attn_k.weight")->ne[1], 128);
    assert_int_equal(fx_gguf_find_tensor(gq, "output_norm.weight")->type, FX_TYPE_F32);
    assert_int_equal(fx_gguf_find_tensor(gq, "output.weight")->type, FX_TYPE_Q6_K);

    /* The values have the intended statistics: embedding rows mean 0, sd 1/sqrt(256), within
     * 3.5 sd; norms near 1. */
    const float *x = e->data;
    double sum = 0, sum2 = 0, amax = 0;
    for (int64_t i = 0; i < e->n_elements; i++) {
        sum += x[i], sum2 += (double)x[i] * x[i];
        amax = fabs(x[i]) > amax ? fabs(x[i]) : amax;
    }
    double mean = sum / (double)e->n_elements;
    double sd = sqrt(sum2 / (double)e->n_elements - mean * mean);
    assert_true(fabs(mean) < 0.001);
    assert_true(fabs(sd - 1 / 16.0) < 0.001);
    assert_true(amax <= 3.47 / 16.0 && amax > 3.0 / 16.0);
    const float *norm = fx_gguf_find_tensor(g, "blk.1.ffn_norm.weight")->data;
    for (int i = 0; i < 256; i++)
        assert_true(norm[i] > 0.9f && norm[i] < 1.1f);
    fx_gguf_free(g);
    fx_gguf_free(gq);
}

FX_TEST(synth_llama32_plan_has_rope_factors) {
    /* The plan only: the file would be 0.8 GB. */
    struct fx_synth_model *m = plan_ok("llama-3.2-1b", "Q4_K_M", false);
    assert_string_equal(m->tensors[1].name, "rope_freqs.weight");
    assert_int_equal(m->tensors[1].ne[0], 32);
    assert_int_equal(m->tensors[1].type, FX_TYPE_F32);
    /* Q4_K_M on a 16-layer model: the tied embedding Q6_K, V and ffn_down of layers 0, 1, 4,
     * 7, 10, 13, 14, 15 in Q6_K (llama.cpp's "more bits" layers), the rest Q4_K. */
    assert_int_equal(find(m, "token_embd.weight")->type, FX_TYPE_Q6_K);
    for (int l = 0; l < 16; l++) {
        bool more = l < 2 || l >= 14 || (l - 2) % 3 == 2;
        char name[64];
        snprintf(name, sizeof name, "blk.%d.ffn_down.weight", l);
        assert_int_equal(find(m, name)->type, more ? FX_TYPE_Q6_K : FX_TYPE_Q4_K);
        snprintf(name, sizeof name, "blk.%d.attn_v.weight", l);
        assert_int_equal(find(m, name)->type, more ? FX_TYPE_Q6_K : FX_TYPE_Q4_K);
        snprintf(name, sizeof name, "blk.%d.ffn_up.weight", l);
        assert_int_equal(find(m, name)->type, FX_TYPE_Q4_K);
    }
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
    assert_int_equal(fx_test_run_cli((const char *const[]){"synth", "--shape", "tiny", "--type",
                                                           "q7_k", "-o", "/dev/null", NULL},
                                     NULL, NULL, &err),
                     2);
    assert_non_null(strstr(err, "unknown type 'q7_k'"));
    free(err);
    assert_int_equal(fx_test_run_cli((const char *const[]){"synth", "--shape", "tiny", "--type",
                                                           "f32", "-o", "x.gguf", "-t", "-1", NULL},
                                     NULL, NULL, NULL),
                     2);
    assert_int_equal(
        fx_test_run_cli((const char *const[]){"synth", "--shape", "tiny", "--type", "f32", "-o",
                                              "/nonexistent/dir/x.gguf", NULL},
                        NULL, NULL, &err),
        1);
    assert_non_null(strstr(err, "/nonexistent/dir/x.gguf"));
    free(err);
}

/* llama.cpp finds what it needs in a file by key and tensor name. Every key of a file llama.cpp
 * wrote for the same architecture (the fixtures) is in ours with the same value type, and every
 * tensor name of its layers that ours has layers for is there with the same number of
 * dimensions. */
FX_TEST(synth_files_carry_the_keys_and_tensors_of_llama_cpp_files) {
    static const char *const pairs[][2] = {
        {"tiny", "models/llama-tiny.F32.gguf"},
        {"tiny-moe", "models/gptoss-tiny.F32.gguf"},
        {"tiny-qwen35", "qwen35/models/qwen35-tiny.F32.gguf"},
        {"tiny-qwen35moe", "qwen35/models/qwen35moe-tiny.F32.gguf"}};
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        const char *ref_path = fx_test_fixture(pairs[i][1]);
        const char *ours_path = fx_test_tmpfile("synth-vs-llama-cpp.gguf");
        synth_ok(pairs[i][0], "F32", false, "1", "1", ours_path);
        struct fx_gguf *ref = open_ok(ref_path), *ours = open_ok(ours_path);
        for (int64_t k = 0; k < fx_gguf_n_kv(ref); k++) {
            const struct fx_gguf_kv *want = fx_gguf_kv_at(ref, k);
            const struct fx_gguf_kv *got = fx_gguf_find_kv(ours, want->key);
            if (!got)
                fail_msg("%s: no key %s (llama.cpp's %s has it)", pairs[i][0], want->key,
                         pairs[i][1]);
            if (got->type != want->type ||
                (want->type == FX_GGUF_ARRAY && got->arr_type != want->arr_type))
                fail_msg("%s: key %s has another type than in %s", pairs[i][0], want->key,
                         pairs[i][1]);
        }
        struct fx_gguf_str arch;
        char key[96];
        uint32_t n_layer;
        assert_int_equal(fx_gguf_get_str(ours, "general.architecture", &arch, NULL), FX_OK);
        snprintf(key, sizeof key, "%s.block_count", arch.data);
        assert_int_equal(fx_gguf_get_u32(ours, key, &n_layer, NULL), FX_OK);
        int64_t checked = 0;
        for (int64_t t = 0; t < fx_gguf_n_tensors(ref); t++) {
            const struct fx_tensor_view *want = fx_gguf_tensor_at(ref, t);
            unsigned layer;
            if (sscanf(want->name, "blk.%u.", &layer) == 1 && layer >= n_layer)
                continue;
            const struct fx_tensor_view *got = fx_gguf_find_tensor(ours, want->name);
            if (!got)
                fail_msg("%s: no tensor %s (llama.cpp's %s has it)", pairs[i][0], want->name,
                         pairs[i][1]);
            assert_int_equal(got->n_dims, want->n_dims);
            checked++;
        }
        assert_true(checked > 10);
        fx_gguf_free(ref);
        fx_gguf_free(ours);
    }
}

/* The same for the tensor names of the benchmark shapes (planned, not written): a llama.cpp
 * file of the same architecture names each of its tensors as ours do. */
FX_TEST(synth_shapes_name_their_tensors_as_llama_cpp_files) {
    static const char *const pairs[][2] = {{"smollm2-135m", "models/llama-tiny-tied.F32.gguf"},
                                           {"llama-3.2-1b", "models/llama-tiny-tied.F32.gguf"},
                                           {"qwen3-0.6b", "models/qwen3-tiny.F32.gguf"},
                                           {"gpt-oss-20b", "models/gptoss-tiny.F32.gguf"}};
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        struct fx_gguf *ref = open_ok(fx_test_fixture(pairs[i][1]));
        struct fx_synth_model *m = plan_ok(pairs[i][0], "F32", false);
        for (int64_t t = 0; t < fx_gguf_n_tensors(ref); t++) {
            const struct fx_tensor_view *want = fx_gguf_tensor_at(ref, t);
            const struct fx_synth_tensor *got = find(m, want->name);
            if (!got)
                fail_msg("%s: no tensor %s (llama.cpp's %s has it)", pairs[i][0], want->name,
                         pairs[i][1]);
            assert_int_equal(got->n_dims, want->n_dims);
        }
        fx_synth_model_free(m);
        fx_gguf_free(ref);
    }
}
