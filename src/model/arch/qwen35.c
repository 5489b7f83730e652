/* qwen35 and qwen35moe (Qwen3.5): a hybrid of Gated DeltaNet layers (a causal conv over
 * [q | k | v], then the gated delta rule with a matrix state per V head) and, every
 * full_attention_interval-th layer, gated attention (QK norms, partial multi-section rope, the
 * output multiplied by sigmoid of a gate that the Q projection also produces). qwen35moe adds a
 * gated shared expert to softmax-routed experts. block_count counts the trunk and the
 * nextn_predict_layers MTP blocks that follow it; the MTP blocks are loaded, not run. */
#include <stdio.h>
#include <stdlib.h>

#include "core/error.h"
#include "model/loader.h"

#define MAX_SSM_DIM   4096
#define MAX_SSM_HEADS 1024
#define MAX_CONV      64

/* The Gated DeltaNet and rope keys, checked against each other. */
static fx_status read_hybrid_hparams(struct fx_loader *ld) {
    struct fx_hparams *hp = &ld->m->hp;
    const char *arch = ld->m->arch;
    int32_t inner = 0, interval = 0;
    fx_status st;
    if ((st = fx_ld_int(ld, "ssm.conv_kernel", 2, MAX_CONV, &hp->ssm_d_conv)) ||
        (st = fx_ld_int(ld, "ssm.state_size", 1, MAX_SSM_DIM, &hp->ssm_d_state)) ||
        (st = fx_ld_int(ld, "ssm.group_count", 1, MAX_SSM_HEADS, &hp->n_ssm_k_heads)) ||
        (st = fx_ld_int(ld, "ssm.time_step_rank", 1, MAX_SSM_HEADS, &hp->n_ssm_v_heads)) ||
        (st = fx_ld_int(ld, "ssm.inner_size", 1, MAX_SSM_DIM * MAX_SSM_HEADS, &inner)) ||
        (st = fx_ld_int(ld, "full_attention_interval", 1, hp->n_layer, &interval)))
        return st;
    hp->n_nextn = 0;
    if ((st = fx_ld_int_opt(ld, "nextn_predict_layers", 0, hp->n_layer - 1, &hp->n_nextn)))
        return st;
    if (hp->n_ssm_v_heads % hp->n_ssm_k_heads != 0)
        return fx_error_set(ld->err, FX_ERR_FORMAT, FX_NO_OFFSET,
                            "%s: ssm.time_step_rank %d (V heads) is not a multiple of "
                            "ssm.group_count %d (K heads)",
                            arch, hp->n_ssm_v_heads, hp->n_ssm_k_heads);
    if ((int64_t)hp->ssm_d_state * hp->n_ssm_v_heads != inner)
        return fx_error_set(ld->err, FX_ERR_FORMAT, FX_NO_OFFSET,
                            "%s: ssm.inner_size %d is not ssm.state_size %d x ssm.time_step_rank "
                            "%d",
                            arch, inner, hp->ssm_d_state, hp->n_ssm_v_heads);

    /* Interleaved multi-section rope (IMROPE). A text token's position components are
     * (p, p, p, 0): pairs whose section is the fourth do not turn (fill_rope in context.c). */
    char key[96];
    snprintf(key, sizeof key, "%s.rope.dimension_sections", arch);
    const void *data = NULL;
    uint64_t n = 0;
    if ((st = fx_gguf_get_arr(ld->g, key, FX_GGUF_INT32, &data, &n, ld->err))) {
        if (st == FX_ERR_NOT_FOUND)
            return fx_error_set(ld->err, FX_ERR_FORMAT, FX_NO_OFFSET, "missing key '%s'", key);
        return st;
    }
    const int32_t *sec = data;
    int64_t sum = 0;
    if (n != 4)
        return fx_error_set(ld->err, FX_ERR_FORMAT, FX_NO_OFFSET,
                            "key '%s' has %llu elements, expected 4", key, (unsigned long long)n);
    for (int i = 0; i < 4; i++) {
        if (sec[i] < 0 || sec[i] > hp->rope.n_rot / 2)
            return fx_error_set(ld->err, FX_ERR_FORMAT, FX_NO_OFFSET,
                                "key '%s' element %d is %d, expected 0..%d", key, i, sec[i],
                                hp->rope.n_rot / 2);
        hp->rope.sections[i] = sec[i];
        sum += sec[i];
    }
    if (sum == 0)
        return fx_error_set(ld->err, FX_ERR_FORMAT, FX_NO_OFFSET, "key '%s' is all zeros", key);
    hp->rope.kind = FX_ROPE_NEOX;

    /* The trunk is block_count - nextn layers; layer il is recurrent unless il + 1 is a
     * multiple of the interval (llama.cpp's rule). */
    hp->n_layer -= hp->n_nextn;
    for (int il = 0; il < hp->n_layer; il++)
        ld->m->layers[il].recurrent = (il + 1) % interval != 0;
    return FX_OK;
}

/* A Gated DeltaNet layer's mixer and its norms. */
static fx_status load_delta_net(struct fx_loader *ld, int il) {
    const struct fx_hparams *hp = &ld->m->hp;
    struct fx_layer *l = &ld->m->layers[il];
    int64_t e = hp->n_embd, s = hp->ssm_d_state, hv = hp->n_ssm_v_heads;
    int64_t key_dim = s * hp->n_ssm_k_heads, value_dim = s * hv;
    int64_t conv_dim = 2 * key_dim + value_dim;
    fx_status st;
    if ((st = fx_ld_vec(ld, il, "attn_norm.weight", e, 1, FX_LD_REQUIRED, &l->attn_norm)) ||
        (st = fx_ld_mat(ld, il, "attn_qkv.weight", e, conv_dim, FX_LD_REQUIRED, &l->ssm_qkv)) ||
        (st = fx_ld_mat(ld, il, "attn_gate.weight", e, value_dim, FX_LD_REQUIRED, &l->ssm_z)) ||
        (st = fx_ld_mat(ld, il, "ssm_beta.weight", e, hv, FX_LD_REQUIRED, &l->ssm_beta)) ||
        (st = fx_ld_mat(ld, il, "ssm_alpha.weight", e, hv, FX_LD_REQUIRED, &l->ssm_alpha)) ||
        (st = fx_ld_vec(ld, il, "ssm_conv1d.weight", hp->ssm_d_conv, conv_dim, FX_LD_REQUIRED,
                        &l->ssm_conv)) ||
        (st = fx_ld_vec(ld, il, "ssm_dt.bias", hv, 1, FX_LD_REQUIRED, &l->ssm_dt_b)) ||
        (st = fx_ld_vec(ld, il, "ssm_a", hv, 1, FX_LD_REQUIRED, &l->ssm_a)) ||
        (st = fx_ld_vec(ld, il, "ssm_norm.weight", s, 1, FX_LD_REQUIRED, &l->ssm_norm)) ||
        (st = fx_ld_mat(ld, il, "ssm_out.weight", value_dim, e, FX_LD_REQUIRED, &l->ssm_out)))
        return st;
    return FX_OK;
}

/* Gated attention: Q and its gate come from one projection of n_head * 2 * head_dim rows. */
static fx_status load_gated_attention(struct fx_loader *ld, int il) {
    const struct fx_hparams *hp = &ld->m->hp;
    struct fx_layer *l = &ld->m->layers[il];
    int64_t e = hp->n_embd, hd = hp->head_dim;
    int64_t k_dim = (int64_t)hp->n_head_kv * hd, v_dim = (int64_t)hp->n_head_kv * hp->head_dim_v;
    int64_t o_dim = (int64_t)hp->n_head * hp->head_dim_v;
    l->attn_out_gate = true;
    if (hp->head_dim != hp->head_dim_v) /* the gate of a head multiplies its output */
        return fx_error_set(ld->err, FX_ERR_FORMAT, FX_NO_OFFSET,
                            "%s: attention.key_length %d differs from value_length %d", ld->m->arch,
                            hp->head_dim, hp->head_dim_v);
    fx_status st;
    if ((st = fx_ld_vec(ld, il, "attn_norm.weight", e, 1, FX_LD_REQUIRED, &l->attn_norm)) ||
        (st = fx_ld_mat(ld, il, "attn_q.weight", e, 2 * hp->n_head * hd, FX_LD_REQUIRED, &l->wq)) ||
        (st = fx_ld_mat(ld, il, "attn_k.weight", e, k_dim, FX_LD_REQUIRED, &l->wk)) ||
        (st = fx_ld_mat(ld, il, "attn_v.weight", e, v_dim, FX_LD_REQUIRED, &l->wv)) ||
        (st = fx_ld_mat(ld, il, "attn_output.weight", o_dim, e, FX_LD_REQUIRED, &l->wo)) ||
        (st = fx_ld_vec(ld, il, "attn_q_norm.weight", hd, 1, FX_LD_REQUIRED, &l->q_norm)) ||
        (st = fx_ld_vec(ld, il, "attn_k_norm.weight", hd, 1, FX_LD_REQUIRED, &l->k_norm)))
        return st;
    return FX_OK;
}

/* The gated shared expert of a qwen35moe layer. */
static fx_status load_shared_expert(struct fx_loader *ld, int il) {
    const struct fx_hparams *hp = &ld->m->hp;
    struct fx_layer *l = &ld->m->layers[il];
    int64_t e = hp->n_embd, ff = hp->n_ff_shexp;
    fx_status st;
    if ((st = fx_ld_mat(ld, il, "ffn_gate_inp_shexp.weight", e, 1, FX_LD_REQUIRED,
                        &l->shexp_gate_inp)) ||
        (st = fx_ld_mat(ld, il, "ffn_gate_shexp.weight", e, ff, FX_LD_REQUIRED, &l->shexp_gate)) ||
        (st = fx_ld_mat(ld, il, "ffn_up_shexp.weight", e, ff, FX_LD_REQUIRED, &l->shexp_up)) ||
        (st = fx_ld_mat(ld, il, "ffn_down_shexp.weight", ff, e, FX_LD_REQUIRED, &l->shexp_down)))
        return st;
    return FX_OK;
}

/* Block il: its mixer, its FFN (pre-norm post_attention_norm) and, for the MoE, the shared
 * expert. */
static fx_status load_block(struct fx_loader *ld, int il, bool recurrent) {
    fx_status st = recurrent ? load_delta_net(ld, il) : load_gated_attention(ld, il);
    if (!st)
        st = fx_ld_ffn(ld, il, "post_attention_norm", 0);
    if (!st && ld->m->hp.n_expert > 0)
        st = load_shared_expert(ld, il);
    return st;
}

/* MTP block i (layer n_layer + i): a gated-attention block plus the NextN tensors. */
static fx_status load_mtp(struct fx_loader *ld, int i) {
    const struct fx_hparams *hp = &ld->m->hp;
    struct fx_mtp *x = &ld->m->mtp[i];
    int il = hp->n_layer + i;
    int64_t e = hp->n_embd;
    fx_status st;
    if ((st = load_block(ld, il, false)) ||
        (st = fx_ld_mat(ld, il, "nextn.eh_proj.weight", 2 * e, e, FX_LD_REQUIRED, &x->eh_proj)) ||
        (st = fx_ld_vec(ld, il, "nextn.enorm.weight", e, 1, FX_LD_REQUIRED, &x->enorm)) ||
        (st = fx_ld_vec(ld, il, "nextn.hnorm.weight", e, 1, FX_LD_REQUIRED, &x->hnorm)) ||
        (st = fx_ld_vec(ld, il, "nextn.shared_head_norm.weight", e, 1, FX_LD_OPTIONAL,
                        &x->head_norm)) ||
        (st = fx_ld_mat(ld, il, "nextn.embed_tokens.weight", e, hp->n_vocab, FX_LD_OPTIONAL,
                        &x->embed)) ||
        (st = fx_ld_mat(ld, il, "nextn.shared_head_head.weight", e, hp->n_vocab, FX_LD_OPTIONAL,
                        &x->head)))
        return st;
    return FX_OK;
}

static fx_status load_qwen35_family(struct fx_loader *ld) {
    struct fx_model *m = ld->m;
    struct fx_hparams *hp = &m->hp;
    m->hp.router = FX_ROUTER_SOFTMAX_TOPK;
    m->hp.expert_weights_norm = true;
    fx_status st = read_hybrid_hparams(ld);
    if (st)
        return st;
    fx_ld_swa_pattern(ld, 0);
    for (int il = 0; il < hp->n_layer; il++)
        if ((st = load_block(ld, il, m->layers[il].recurrent)))
            return st;
    return FX_OK;
}

/* The MTP blocks need the vocabulary size, known once the embeddings are loaded. */
fx_status fx_arch_qwen35_load_mtp(struct fx_loader *ld) {
    struct fx_model *m = ld->m;
    if (m->hp.n_nextn == 0)
        return FX_OK;
    m->mtp = calloc((size_t)m->hp.n_nextn, sizeof *m->mtp);
    if (!m->mtp)
        return fx_error_set(ld->err, FX_ERR_NOMEM, FX_NO_OFFSET, "out of memory");
    fx_status st;
    for (int i = 0; i < m->hp.n_nextn; i++) {
        if ((st = load_mtp(ld, i)))
            return st;
        if (!m->mtp[i].embed.data)
            m->mtp[i].embed = m->tok_embd;
        if (!m->mtp[i].head.data)
            m->mtp[i].head = m->output;
    }
    return FX_OK;
}

fx_status fx_arch_qwen35_load(struct fx_loader *ld) {
    if (ld->m->hp.n_expert != 0)
        return fx_error_set(ld->err, FX_ERR_FORMAT, FX_NO_OFFSET,
                            "qwen35 file declares %d experts; mixture-of-experts files use the "
                            "architecture 'qwen35moe'",
                            ld->m->hp.n_expert);
    return load_qwen35_family(ld);
}

fx_status fx_arch_qwen35moe_load(struct fx_loader *ld) {
    struct fx_hparams *hp = &ld->m->hp;
    if (hp->n_expert == 0)
        return fx_error_set(ld->err, FX_ERR_FORMAT, FX_NO_OFFSET,
                            "missing key 'qwen35moe.expert_count'");
    fx_status st = fx_ld_int(ld, "expert_shared_feed_forward_length", 1, 1 << 20, &hp->n_ff_shexp);
    if (st)
        return st;
    return load_qwen35_family(ld);
}
