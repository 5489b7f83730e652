/* llama: Llama 1/2/3, Mistral, TinyLlama, SmolLM2, the stories models, and Mixtral-style
 * mixtures of experts (the same file with expert tensors). Normal rope, optional biases, llama3
 * frequency factors from rope_freqs.weight. */
#include "model/loader.h"

fx_status fx_arch_llama_load(struct fx_loader *ld) {
    struct fx_model *m = ld->m;
    fx_status st = fx_ld_vec(ld, -1, "rope_freqs.weight", m->hp.rope.n_rot / 2, 1, FX_LD_OPTIONAL,
                             &m->hp.rope.freq_factors);
    if (st)
        return st;
    fx_ld_swa_pattern(ld, 0);
    for (int il = 0; il < m->hp.n_layer; il++)
        if ((st = fx_ld_attention(ld, il, FX_LD_BIAS_OPTIONAL)) ||
            (st = fx_ld_ffn(ld, il, "ffn_norm", 0)))
            return st;
    return FX_OK;
}
