/* Mixtral-style mixtures of experts in the llama architecture. No fixture has one, so the test
 * builds it from llama-tiny.F32: every layer's dense FFN becomes 4 experts that are exact copies
 * of it, with a random router choosing 2. Whatever the router picks, the renormalised weights sum
 * to 1 and every expert computes the dense FFN, so the logits must match llama-tiny's golden (to
 * rounding), while the file exercises the loader's llama-MoE path, the routing, the grouping by
 * expert and the weighted sum. */
#include "fx_test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "golden.h"

enum { N_EXPERT = 4, N_USED = 2 };

static bool is_dense_ffn(const char *name) {
    return strstr(name, ".ffn_gate.") || strstr(name, ".ffn_up.") || strstr(name, ".ffn_down.");
}

/* 4 copies of a dense FFN matrix stacked as a 3-D expert tensor. */
static void add_experts(struct fx_gguf_writer *w, const struct fx_gguf *g, int il,
                        const char *dense, const char *experts, void **keep) {
    char name[64];
    snprintf(name, sizeof name, "blk.%d.%s.weight", il, dense);
    const struct fx_tensor_view *t = fx_gguf_find_tensor(g, name);
    assert_non_null(t);
    uint8_t *data = malloc((size_t)t->n_bytes * N_EXPERT);
    assert_non_null(data);
    for (int e = 0; e < N_EXPERT; e++)
        memcpy(data + (size_t)e * t->n_bytes, t->data, (size_t)t->n_bytes);
    int64_t ne[3] = {t->ne[0], t->ne[1], N_EXPERT};
    snprintf(name, sizeof name, "blk.%d.%s.weight", il, experts);
    struct fx_error err;
    assert_int_equal(fx_gguf_writer_add_tensor(w, name, t->type, 3, ne, data, &err), FX_OK);
    *keep = data;
}

static void write_mixtral(const char *src, const char *dst, int used) {
    struct fx_gguf *g;
    struct fx_error err;
    assert_int_equal(fx_gguf_open(src, &g, &err), FX_OK);
    struct fx_gguf_writer *w;
    assert_int_equal(fx_gguf_writer_create(&w, &err), FX_OK);
    for (int64_t i = 0; i < fx_gguf_n_kv(g); i++)
        assert_int_equal(fx_gguf_writer_set_kv(w, fx_gguf_kv_at(g, i), &err), FX_OK);
    assert_int_equal(fx_gguf_writer_set_u32(w, "llama.expert_count", N_EXPERT, &err), FX_OK);
    assert_int_equal(fx_gguf_writer_set_u32(w, "llama.expert_used_count", (uint32_t)used, &err),
                     FX_OK);
    for (int64_t i = 0; i < fx_gguf_n_tensors(g); i++) {
        const struct fx_tensor_view *t = fx_gguf_tensor_at(g, i);
        if (!is_dense_ffn(t->name))
            assert_int_equal(
                fx_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, &err),
                FX_OK);
    }
    int n_embd = 256;
    static float router[2][256 * N_EXPERT];
    void *keep[2][3];
    struct fx_test_rng rng = {42};
    for (int il = 0; il < 2; il++) {
        for (int i = 0; i < n_embd * N_EXPERT; i++)
            router[il][i] = (float)(0.3 * fx_test_rng_normal(&rng));
        char name[64];
        snprintf(name, sizeof name, "blk.%d.ffn_gate_inp.weight", il);
        int64_t ne[2] = {n_embd, N_EXPERT};
        assert_int_equal(fx_gguf_writer_add_tensor(w, name, FX_TYPE_F32, 2, ne, router[il], &err),
                         FX_OK);
        add_experts(w, g, il, "ffn_gate", "ffn_gate_exps", &keep[il][0]);
        add_experts(w, g, il, "ffn_up", "ffn_up_exps", &keep[il][1]);
        add_experts(w, g, il, "ffn_down", "ffn_down_exps", &keep[il][2]);
    }
    assert_int_equal(fx_gguf_writer_write(w, dst, NULL, NULL, &err), FX_OK);
    for (int il = 0; il < 2; il++)
        for (int k = 0; k < 3; k++)
            free(keep[il][k]);
    fx_gguf_writer_free(w);
    fx_gguf_free(g);
}

FX_TEST(decoder_llama_moe_with_copied_experts_equals_dense) {
    struct fx_golden g;
    fx_test_golden_load("llama-tiny.F32.P1", &g);
    const char *path = fx_test_tmpfile("mixtral-tiny.gguf");
    write_mixtral(g.model_path, path, N_USED);

    struct fx_model *m;
    struct fx_context *ctx;
    struct fx_error err;
    if (fx_model_load(path, NULL, &m, &err) != FX_OK)
        fail_msg("%s", err.msg);
    assert_string_equal(fx_model_arch(m), "llama");
    struct fx_context_params cp = fx_context_default_params();
    cp.type_k = cp.type_v = FX_TYPE_F32; /* against the f32-KV golden */
    assert_int_equal(fx_context_create(m, &cp, &ctx, &err), FX_OK);
    float *logits = malloc(sizeof(float) * (size_t)(g.n_prompt * g.n_vocab));
    assert_non_null(logits);
    assert_int_equal(fx_forward_batch(ctx, g.prompt, g.n_prompt, 0, logits, &err), FX_OK);
    double worst = 0.0;
    for (int i = 0; i < g.n_prompt * g.n_vocab; i++)
        worst = fmax(worst, fabs((double)logits[i] - g.logits_kvf32[i]));
    print_message("  max |diff| against llama-tiny's f32-KV golden: %g\n", worst);
    assert_true(worst <= 1e-3);
    free(logits);
    fx_context_free(ctx);
    fx_model_free(m);

    /* More experts used than exist is an error naming the key. */
    write_mixtral(g.model_path, path, N_EXPERT + 1);
    assert_int_equal(fx_model_load(path, NULL, &m, &err), FX_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "expert_used_count 5"));
    fx_test_golden_free(&g);
}
