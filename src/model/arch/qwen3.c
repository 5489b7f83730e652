/* qwen3 and qwen3moe: neox rope and a per-head RMS norm on Q and K before rope; qwen3moe
 * replaces the dense FFN by softmax-routed experts whose top-k weights are renormalised. */
#include "core/error.h"
#include "model/loader.h"

static fx_status load_qwen3_family(struct fx_loader *ld) {
    struct fx_model *m = ld->m;
    m->hp.rope.kind = FX_ROPE_NEOX;
    m->hp.router = FX_ROUTER_SOFTMAX_TOPK;
    m->hp.expert_weights_norm = true;
    fx_ld_swa_pattern(ld, 0);
    fx_status st;
    for (int il = 0; il < m->hp.n_layer; il++)
        if ((st = fx_ld_attention(ld, il, FX_LD_QK_NORM)) ||
            (st = fx_ld_ffn(ld, il, "ffn_norm", 0)))
            return st;
    return FX_OK;
}

fx_status fx_arch_qwen3_load(struct fx_loader *ld) {
    if (ld->m->hp.n_expert != 0)
        return fx_error_set(ld->err, FX_ERR_FORMAT, FX_NO_OFFSET,
                            "qwen3 file declares %d experts; mixture-of-experts files use the "
                            "architecture 'qwen3moe'",
                            ld->m->hp.n_expert);
    return load_qwen3_family(ld);
}

fx_status fx_arch_qwen3moe_load(struct fx_loader *ld) {
    if (ld->m->hp.n_expert == 0)
        return fx_error_set(ld->err, FX_ERR_FORMAT, FX_NO_OFFSET,
                            "missing key 'qwen3moe.expert_count'");
    return load_qwen3_family(ld);
}
