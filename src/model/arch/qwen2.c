/* qwen2: llama with Q/K/V biases and neox rope. */
#include "model/loader.h"

fx_status fx_arch_qwen2_load(struct fx_loader *ld) {
    struct fx_model *m = ld->m;
    m->hp.rope.kind = FX_ROPE_NEOX;
    fx_ld_swa_pattern(ld, 0);
    fx_status st;
    for (int il = 0; il < m->hp.n_layer; il++)
        if ((st = fx_ld_attention(ld, il, FX_LD_QKV_BIAS)) ||
            (st = fx_ld_ffn(ld, il, "ffn_norm", 0)))
            return st;
    return FX_OK;
}
