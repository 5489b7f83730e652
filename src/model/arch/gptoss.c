/* gpt-oss: Q/K/V/O biases, attention sinks, every second layer local, neox rope with YaRN,
 * experts routed by the top-k logits (softmax over those k) with router and expert biases and
 * the clamped SwiGLU. Its pre-FFN norm is stored as post_attention_norm. */
#include "core/error.h"
#include "model/loader.h"

fx_status fx_arch_gptoss_load(struct fx_loader *ld) {
    struct fx_hparams *hp = &ld->m->hp;
    if (hp->n_expert == 0)
        return fx_error_set(ld->err, FX_ERR_FORMAT, FX_NO_OFFSET,
                            "missing key 'gpt-oss.expert_count'");
    hp->rope.kind = FX_ROPE_NEOX;
    hp->act = FX_FFN_SWIGLU_OAI;
    hp->act_limit = 7.0f;
    hp->router = FX_ROUTER_TOPK_SOFTMAX;
    hp->expert_weights_norm = false;
    int32_t period = 2;
    fx_status st;
    if ((st = fx_ld_int_opt(ld, "attention.sliding_window_pattern", 1, 1 << 16, &period)))
        return st;
    fx_ld_swa_pattern(ld, period);
    for (int il = 0; il < hp->n_layer; il++)
        if ((st = fx_ld_attention(ld, il, FX_LD_QKV_BIAS | FX_LD_O_BIAS | FX_LD_SINKS)) ||
            (st = fx_ld_ffn(ld, il, "post_attention_norm", FX_LD_MOE_BIASES)))
            return st;
    return FX_OK;
}
