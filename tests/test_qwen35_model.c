/* model/arch/qwen35.c: the Qwen3.5 fixtures (fixtures/qwen35/README.md) load into the
 * description the decoder reads, with the hyper-parameters and layer kinds the README lists,
 * and malformed copies of them are refused with a message naming what is wrong. */
#include "fx_test.h"
#include "golden.h"

#include <string.h>

#include "gguf_copy.h"
#include "model/model.h"

/* What both fixture architectures share (README "Hyperparameters"). */
static void check_hybrid(const struct fx_model *m, const char *arch) {
    const struct fx_hparams *hp = &m->hp;
    assert_string_equal(fx_model_arch(m), arch);
    assert_int_equal(hp->n_embd, 128);
    assert_int_equal(hp->n_vocab, 512);
    assert_int_equal(hp->n_layer, 4); /* block_count 5 less the MTP block */
    assert_int_equal(hp->n_nextn, 1);
    assert_int_equal(hp->n_layer_rec, 3);
    assert_int_equal(hp->n_layer_kv, 2); /* layer 3 and the MTP block */
    assert_int_equal(hp->n_head, 4);
    assert_int_equal(hp->n_head_kv, 2);
    assert_int_equal(hp->head_dim, 64);
    assert_int_equal(hp->rope.n_rot, 16);
    assert_int_equal(hp->rope.kind, FX_ROPE_NEOX);
    assert_true(hp->rope.freq_base == 1e7f);
    int32_t sections[4] = {3, 3, 2, 0};
    assert_memory_equal(hp->rope.sections, sections, sizeof sections);
    assert_int_equal(hp->ssm_d_state, 32);
    assert_int_equal(hp->n_ssm_k_heads, 2);
    assert_int_equal(hp->n_ssm_v_heads, 4);
    assert_int_equal(hp->ssm_d_conv, 4);
    for (int il = 0; il < 4; il++) {
        const struct fx_layer *l = &m->layers[il];
        assert_int_equal(l->recurrent, il != 3);
        if (l->recurrent) {
            assert_int_equal(l->rec_il, il);
            assert_int_equal(l->ssm_qkv.ne1, 256);
            assert_int_equal(l->ssm_z.ne1, 128);
            assert_int_equal(l->ssm_out.ne0, 128);
            assert_non_null(l->ssm_conv);
            assert_non_null(l->ssm_norm);
            assert_true(l->ssm_a[0] < 0.0f);
            assert_null(l->wq.data);
        } else {
            assert_int_equal(l->kv_il, 0);
            assert_true(l->attn_out_gate);
            assert_int_equal(l->wq.ne1, 512);
            assert_non_null(l->q_norm);
        }
        assert_non_null(l->ffn_norm);
    }
    /* The MTP block is loaded beside the trunk. */
    assert_non_null(m->mtp);
    assert_non_null(m->layers[4].attn_norm);
    assert_true(m->layers[4].attn_out_gate);
    assert_int_equal(m->layers[4].kv_il, 1);
    assert_int_equal(m->mtp[0].eh_proj.ne0, 256);
    assert_non_null(m->mtp[0].enorm);
    assert_non_null(m->mtp[0].hnorm);
    assert_non_null(m->mtp[0].head_norm);
    assert_ptr_equal(m->mtp[0].embed.data, m->tok_embd.data);
    assert_ptr_equal(m->mtp[0].head.data, m->output.data);
    assert_false(m->tied_output);
}

FX_TEST(qwen35_model_loads_dense) {
    struct fx_model *m = fx_test_load_model("qwen35/models/qwen35-tiny.F32.gguf");
    check_hybrid(m, "qwen35");
    assert_int_equal(m->hp.n_ff, 256);
    assert_int_equal(m->hp.n_expert, 0);
    assert_int_equal(m->layers[0].ssm_beta.type, FX_TYPE_F32);
    fx_model_free(m);

    m = fx_test_load_model("qwen35/models/qwen35-tiny.Q8_0.gguf");
    check_hybrid(m, "qwen35");
    assert_int_equal(m->layers[0].ssm_qkv.type, FX_TYPE_Q8_0);
    assert_int_equal(m->layers[0].ssm_beta.type, FX_TYPE_Q8_0);
    fx_model_free(m);
}

FX_TEST(qwen35_model_loads_moe) {
    struct fx_model *m = fx_test_load_model("qwen35/models/qwen35moe-tiny.F32.gguf");
    check_hybrid(m, "qwen35moe");
    assert_int_equal(m->hp.n_expert, 4);
    assert_int_equal(m->hp.n_expert_used, 2);
    assert_int_equal(m->hp.n_ff_exp, 64);
    assert_int_equal(m->hp.n_ff_shexp, 96);
    for (int il = 0; il < 5; il++) {
        assert_int_equal(m->layers[il].shexp_gate_inp.ne0, 128);
        assert_int_equal(m->layers[il].shexp_gate_inp.ne1, 1);
        assert_int_equal(m->layers[il].shexp_down.ne0, 96);
    }
    fx_model_free(m);
}

/* ---- malformed copies -------------------------------------------------------------------- */

struct edit {
    const char *drop; /* tensor to leave out, or NULL */
    const char *key;  /* key to set (u32) or remove, or NULL */
    uint32_t u32;
    bool remove;
};

static bool edit_tensor(void *user, const struct fx_tensor_view *t, uint32_t *n_dims, int64_t *ne) {
    (void)n_dims;
    (void)ne;
    const struct edit *e = user;
    return !e->drop || strcmp(t->name, e->drop) != 0;
}

static void edit_metadata(void *user, struct fx_gguf_writer *w) {
    const struct edit *e = user;
    struct fx_error err;
    if (!e->key)
        return;
    if (e->remove)
        fx_gguf_writer_remove_kv(w, e->key);
    else
        assert_int_equal(fx_gguf_writer_set_u32(w, e->key, e->u32, &err), FX_OK);
}

static void expect_error(struct edit e, fx_status code, const char *needle) {
    struct fx_test_gguf_edit edit = {.tensor = edit_tensor, .metadata = edit_metadata, .user = &e};
    const char *dst = fx_test_tmpfile("qwen35-bad.gguf");
    fx_test_gguf_copy(fx_test_fixture("qwen35/models/qwen35-tiny.F32.gguf"), dst, &edit);
    struct fx_model *m = (struct fx_model *)1;
    struct fx_error err;
    assert_int_equal(fx_model_load(dst, NULL, &m, &err), code);
    assert_null(m);
    if (!strstr(err.msg, needle))
        fail_msg("error '%s' does not mention '%s'", err.msg, needle);
}

FX_TEST(qwen35_model_rejects_malformed) {
    expect_error((struct edit){.drop = "blk.1.ssm_conv1d.weight"}, FX_ERR_FORMAT,
                 "missing tensor 'blk.1.ssm_conv1d.weight'");
    expect_error((struct edit){.drop = "blk.3.attn_q_norm.weight"}, FX_ERR_FORMAT,
                 "missing tensor 'blk.3.attn_q_norm.weight'");
    expect_error((struct edit){.drop = "blk.4.nextn.eh_proj.weight"}, FX_ERR_FORMAT,
                 "missing tensor 'blk.4.nextn.eh_proj.weight'");
    expect_error((struct edit){.key = "qwen35.ssm.state_size", .remove = true}, FX_ERR_FORMAT,
                 "missing key 'qwen35.ssm.state_size'");
    expect_error((struct edit){.key = "qwen35.rope.dimension_sections", .remove = true},
                 FX_ERR_FORMAT, "missing key 'qwen35.rope.dimension_sections'");
    expect_error((struct edit){.key = "qwen35.ssm.time_step_rank", .u32 = 3}, FX_ERR_FORMAT,
                 "ssm.time_step_rank 3 (V heads) is not a multiple of ssm.group_count 2");
    expect_error((struct edit){.key = "qwen35.ssm.inner_size", .u32 = 96}, FX_ERR_FORMAT,
                 "ssm.inner_size 96 is not ssm.state_size 32 x ssm.time_step_rank 4");
    /* Layer 3 becomes recurrent with an interval of 5: its Gated DeltaNet tensors are missing. */
    expect_error((struct edit){.key = "qwen35.full_attention_interval", .u32 = 5}, FX_ERR_FORMAT,
                 "missing tensor 'blk.3.attn_qkv.weight'");
    expect_error((struct edit){.key = "qwen35.full_attention_interval", .u32 = 0}, FX_ERR_FORMAT,
                 "key 'qwen35.full_attention_interval' is 0");
    expect_error((struct edit){.key = "qwen35.ssm.state_size", .u32 = 16}, FX_ERR_FORMAT,
                 "ssm.inner_size 128 is not ssm.state_size 16");
}
