/* model/: loading every fixture architecture into the description the decoder reads, and the
 * errors for files that are wrong. Expected values come from the fixtures' README and
 * manifest (dims per model, which layers slide, which rope base each layer uses). */
#include "fx_test.h"
#include "golden.h"

#include <math.h>
#include <string.h>

#include "gguf_copy.h"
#include "model/model.h"

static void check_dims(const struct fx_model *m, const char *arch, int n_embd, int n_layer,
                       int n_head, int n_head_kv, int n_ff) {
    assert_string_equal(fx_model_arch(m), arch);
    assert_int_equal(m->hp.n_embd, n_embd);
    assert_int_equal(m->hp.n_layer, n_layer);
    assert_int_equal(m->hp.n_head, n_head);
    assert_int_equal(m->hp.n_head_kv, n_head_kv);
    assert_int_equal(m->hp.head_dim, 64);
    assert_int_equal(m->hp.head_dim_v, 64);
    assert_int_equal(m->hp.n_vocab, 512);
    assert_int_equal(m->hp.n_ctx_train, 256);
    if (n_ff)
        assert_int_equal(m->hp.n_ff, n_ff);
    assert_int_equal(m->hp.rope.n_rot, 64);
}

FX_TEST(model_loads_llama_family) {
    struct fx_model *m = fx_test_load_model("models/llama-tiny.F32.gguf");
    check_dims(m, "llama", 256, 2, 4, 2, 256);
    assert_false(m->tied_output);
    assert_int_equal(m->hp.rope.kind, FX_ROPE_NORMAL);
    assert_true(fabsf(m->hp.rms_eps - 1e-5f) < 1e-9f);
    assert_true(fabsf(m->hp.attn_scale - 0.125f) < 1e-7f);
    assert_null(m->layers[0].bq);
    assert_false(m->layers[1].swa);
    assert_true(m->layers[1].rope_base == 10000.0f);
    fx_model_free(m);

    m = fx_test_load_model("models/llama-tiny-tied.Q8_0.gguf");
    check_dims(m, "llama", 128, 2, 2, 1, 128);
    assert_true(m->tied_output);
    assert_ptr_equal(m->output.data, m->tok_embd.data);
    assert_int_equal(m->layers[0].wq.type, FX_TYPE_Q8_0);
    fx_model_free(m);
}

FX_TEST(model_loads_qwen_family) {
    struct fx_model *m = fx_test_load_model("models/qwen2-tiny.F32.gguf");
    check_dims(m, "qwen2", 128, 2, 2, 1, 128);
    assert_int_equal(m->hp.rope.kind, FX_ROPE_NEOX);
    assert_non_null(m->layers[1].bq);
    assert_non_null(m->layers[1].bv);
    assert_null(m->layers[1].bo);
    assert_true(m->hp.rope.freq_base == 1e6f);
    fx_model_free(m);

    m = fx_test_load_model("models/qwen3-tiny.Q4_K_M.gguf");
    check_dims(m, "qwen3", 256, 2, 4, 2, 256);
    assert_true(m->tied_output);
    assert_non_null(m->layers[0].q_norm);
    assert_non_null(m->layers[0].k_norm);
    assert_int_equal(m->layers[1].ffn_down.type, FX_TYPE_Q6_K); /* the Q4_K_M mix */
    assert_int_equal(m->layers[0].ffn_down.type, FX_TYPE_Q4_K);
    fx_model_free(m);

    m = fx_test_load_model("models/qwen3moe-tiny.Q8_0.gguf");
    check_dims(m, "qwen3moe", 128, 2, 4, 2, 0);
    assert_int_equal(m->hp.n_expert, 4);
    assert_int_equal(m->hp.n_expert_used, 2);
    assert_int_equal(m->hp.n_ff_exp, 128);
    assert_int_equal(m->hp.router, FX_ROUTER_SOFTMAX_TOPK);
    assert_true(m->hp.expert_weights_norm);
    assert_int_equal(m->layers[0].gate_exps.n_expert, 4);
    assert_int_equal(m->layers[0].down_exps.per.ne0, 128);
    assert_int_equal(m->layers[0].router.type, FX_TYPE_F32); /* routers stay F32 */
    assert_null(m->layers[0].ffn_gate.data);
    fx_model_free(m);
}

FX_TEST(model_loads_gemma_family) {
    struct fx_model *m = fx_test_load_model("models/gemma2-tiny.F32.gguf");
    check_dims(m, "gemma2", 128, 2, 4, 2, 128);
    assert_true(m->tied_output);
    assert_true(fabsf(m->hp.embd_scale - sqrtf(128.0f)) == 0.0f);
    assert_true(m->hp.attn_softcap == 5.0f);
    assert_true(m->hp.final_softcap == 10.0f);
    assert_int_equal(m->hp.n_swa, 8);
    assert_true(m->layers[0].swa); /* llama.cpp's gemma2 default: even layers slide */
    assert_false(m->layers[1].swa);
    assert_non_null(m->layers[0].post_attn_norm);
    assert_non_null(m->layers[0].post_ffn_norm);
    assert_int_equal(m->hp.act, FX_FFN_GELU);
    fx_model_free(m);

    m = fx_test_load_model("models/gemma3-tiny.Q8_0.gguf");
    check_dims(m, "gemma3", 128, 6, 4, 2, 128);
    assert_true(m->hp.attn_softcap == 0.0f);
    assert_true(m->hp.final_softcap == 0.0f);
    for (int il = 0; il < 5; il++) {
        assert_true(m->layers[il].swa);
        assert_true(m->layers[il].rope_base == 10000.0f);
    }
    assert_false(m->layers[5].swa);
    assert_true(m->layers[5].rope_base == 1e6f);
    assert_non_null(m->layers[3].q_norm);
    fx_model_free(m);
}

FX_TEST(model_loads_gptoss) {
    struct fx_model *m = fx_test_load_model("models/gptoss-tiny.MXFP4_MOE.gguf");
    check_dims(m, "gpt-oss", 128, 2, 4, 2, 128);
    assert_false(m->tied_output);
    assert_true(m->layers[0].swa);
    assert_false(m->layers[1].swa);
    assert_non_null(m->layers[0].sinks);
    assert_non_null(m->layers[0].bo);
    assert_non_null(m->layers[0].router_b);
    assert_non_null(m->layers[0].down_exps_b);
    assert_int_equal(m->layers[0].gate_exps.per.type, FX_TYPE_MXFP4);
    assert_int_equal(m->hp.router, FX_ROUTER_TOPK_SOFTMAX);
    assert_int_equal(m->hp.act, FX_FFN_SWIGLU_OAI);
    assert_true(m->hp.act_limit == 7.0f);
    /* YaRN as the released gpt-oss configs set it. */
    assert_true(fabsf(m->hp.rope.freq_scale - 1.0f / 32.0f) < 1e-9f);
    assert_true(m->hp.rope.ext_factor == 1.0f);
    assert_int_equal(m->hp.rope.n_ctx_orig, 4096);
    assert_true(m->hp.rope.beta_fast == 32.0f && m->hp.rope.beta_slow == 1.0f);
    fx_model_free(m);
}

/* ---- malformed models -------------------------------------------------------------------- */

struct tensor_edit {
    const char *name;
    bool drop;
};

static bool edit_tensor(void *user, const struct fx_tensor_view *t, uint32_t *n_dims, int64_t *ne) {
    const struct tensor_edit *e = user;
    if (strcmp(t->name, e->name) != 0)
        return true;
    if (e->drop)
        return false;
    /* Same element count, wrong shape: [ne0, ne1] -> [ne0 / 2, 2 ne1]. */
    *n_dims = 2;
    ne[0] /= 2;
    ne[1] *= 2;
    return true;
}

static void expect_load_error(const char *path, fx_status code, const char *needle) {
    struct fx_model *m = (struct fx_model *)1;
    struct fx_error err;
    assert_int_equal(fx_model_load(path, NULL, &m, &err), code);
    assert_null(m);
    if (!strstr(err.msg, needle))
        fail_msg("error '%s' does not mention '%s'", err.msg, needle);
}

FX_TEST(model_rejects_missing_tensor) {
    struct tensor_edit e = {"blk.1.ffn_up.weight", true};
    struct fx_test_gguf_edit edit = {.tensor = edit_tensor, .user = &e};
    const char *dst = fx_test_tmpfile("missing.gguf");
    fx_test_gguf_copy(fx_test_fixture("models/llama-tiny-tied.F32.gguf"), dst, &edit);
    expect_load_error(dst, FX_ERR_FORMAT, "missing tensor 'blk.1.ffn_up.weight'");
}

FX_TEST(model_rejects_misshaped_tensor) {
    struct tensor_edit e = {"blk.0.attn_k.weight", false};
    struct fx_test_gguf_edit edit = {.tensor = edit_tensor, .user = &e};
    const char *dst = fx_test_tmpfile("misshaped.gguf");
    fx_test_gguf_copy(fx_test_fixture("models/llama-tiny-tied.F32.gguf"), dst, &edit);
    expect_load_error(dst, FX_ERR_FORMAT,
                      "tensor 'blk.0.attn_k.weight' has shape [64, 128], expected [128, 64]");
}

struct key_edit {
    const char *key;
    uint32_t u32;
    const char *str;
};

static void edit_key(void *user, struct fx_gguf_writer *w) {
    const struct key_edit *e = user;
    struct fx_error err;
    fx_status st = e->str ? fx_gguf_writer_set_str(w, e->key, e->str, &err)
                          : fx_gguf_writer_set_u32(w, e->key, e->u32, &err);
    assert_int_equal(st, FX_OK);
}

static void expect_key_error(const char *key, uint32_t v, const char *str, fx_status code,
                             const char *needle) {
    struct key_edit e = {key, v, str};
    struct fx_test_gguf_edit edit = {.metadata = edit_key, .user = &e};
    const char *dst = fx_test_tmpfile("badkey.gguf");
    fx_test_gguf_copy(fx_test_fixture("models/llama-tiny-tied.F32.gguf"), dst, &edit);
    expect_load_error(dst, code, needle);
}

FX_TEST(model_rejects_absurd_hparams) {
    expect_key_error("llama.attention.head_count", 0, NULL, FX_ERR_FORMAT,
                     "key 'llama.attention.head_count' is 0, expected 1..4096");
    expect_key_error("llama.block_count", 1000000, NULL, FX_ERR_FORMAT,
                     "key 'llama.block_count' is 1000000");
    expect_key_error("llama.attention.head_count_kv", 3, NULL, FX_ERR_FORMAT,
                     "head_count 2 is not a multiple of head_count_kv 3");
    expect_key_error("llama.rope.dimension_count", 65, NULL, FX_ERR_FORMAT,
                     "llama.rope.dimension_count");
    /* More layers than the file has tensors for: the first missing one is named. */
    expect_key_error("llama.block_count", 3, NULL, FX_ERR_FORMAT,
                     "missing tensor 'blk.2.attn_norm.weight'");
    expect_key_error("llama.embedding_length", 256, NULL, FX_ERR_FORMAT,
                     "tensor 'blk.0.attn_norm.weight' has shape [128], expected [256]");
}

FX_TEST(model_rejects_unsupported_architecture) {
    expect_key_error("general.architecture", 0, "phi3", FX_ERR_UNSUPPORTED,
                     "unsupported architecture 'phi3'");
}

FX_TEST(model_loads_real_stories260k) {
    struct fx_model *m = NULL;
    struct fx_error err;
    const char *path = fx_test_model("stories260K.gguf");
    assert_int_equal(fx_model_load(path, NULL, &m, &err), FX_OK);
    /* PROVENANCE.md: dim 64, 5 layers, 8 heads, 4 KV heads, head size 8, 172 FFN. */
    assert_int_equal(m->hp.n_embd, 64);
    assert_int_equal(m->hp.n_layer, 5);
    assert_int_equal(m->hp.n_head, 8);
    assert_int_equal(m->hp.n_head_kv, 4);
    assert_int_equal(m->hp.head_dim, 8);
    assert_int_equal(m->hp.n_ff, 172);
    assert_int_equal(fx_model_n_vocab(m), 512);
    assert_false(m->tied_output);
    fx_model_free(m);
}
