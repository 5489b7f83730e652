/* gemma2 and gemma3: embeddings scaled by sqrt(n_embd), neox rope, GELU-gated FFN, norms after
 * the attention and the FFN outputs, sliding-window layers. gemma2 adds logit softcaps (every
 * second layer local); gemma3 adds Q/K norms and separate rope bases (five local layers per
 * global one, local layers unscaled). Norm weights in GGUF already include Gemma's "1 + w". */
#include <math.h>
#include <stdio.h>

#include "model/loader.h"

/* Q is scaled by 1/sqrt(head_dim), except for the 27B models, trained with
 * query_pre_attn_scalar = n_embd / n_head (recognised by their layer count, as llama.cpp
 * does). An explicit attention.scale key has already been read and wins. */
static void gemma_attn_scale(struct fx_loader *ld, int n_layer_27b) {
    struct fx_hparams *hp = &ld->m->hp;
    char key[96];
    snprintf(key, sizeof key, "%s.attention.scale", ld->m->arch);
    if (fx_gguf_find_kv(ld->g, key))
        return;
    if (hp->n_layer == n_layer_27b)
        hp->attn_scale = 1.0f / sqrtf((float)(hp->n_embd / hp->n_head));
}

static fx_status load_gemma_layers(struct fx_loader *ld, unsigned attn_flags) {
    fx_status st;
    for (int il = 0; il < ld->m->hp.n_layer; il++)
        if ((st = fx_ld_attention(ld, il, attn_flags | FX_LD_POST_ATTN_NORM)) ||
            (st = fx_ld_ffn(ld, il, "ffn_norm", FX_LD_POST_FFN_NORM)))
            return st;
    return FX_OK;
}

fx_status fx_arch_gemma2_load(struct fx_loader *ld) {
    struct fx_hparams *hp = &ld->m->hp;
    hp->rope.kind = FX_ROPE_NEOX;
    hp->embd_scale = sqrtf((float)hp->n_embd);
    hp->act = FX_FFN_GELU;
    hp->attn_softcap = 50.0f;
    hp->final_softcap = 30.0f;
    int32_t period = 2;
    fx_status st;
    if ((st = fx_ld_float_opt(ld, "attn_logit_softcapping", 0.0, 1e6, &hp->attn_softcap)) ||
        (st = fx_ld_float_opt(ld, "final_logit_softcapping", 0.0, 1e6, &hp->final_softcap)) ||
        (st = fx_ld_int_opt(ld, "attention.sliding_window_pattern", 1, 1 << 16, &period)))
        return st;
    gemma_attn_scale(ld, 46);
    fx_ld_swa_pattern(ld, period);
    return load_gemma_layers(ld, 0);
}

fx_status fx_arch_gemma3_load(struct fx_loader *ld) {
    struct fx_hparams *hp = &ld->m->hp;
    hp->rope.kind = FX_ROPE_NEOX;
    hp->embd_scale = sqrtf((float)hp->n_embd);
    hp->act = FX_FFN_GELU;
    /* Local layers keep base 10000 and no frequency scaling unless the file says otherwise. */
    hp->rope.freq_base_swa = 10000.0f;
    hp->rope.freq_scale_swa = 1.0f;
    int32_t period = 6;
    fx_status st;
    if ((st = fx_ld_float_opt(ld, "rope.freq_base_swa", 1e-3, 1e12, &hp->rope.freq_base_swa)) ||
        (st = fx_ld_int_opt(ld, "attention.sliding_window_pattern", 1, 1 << 16, &period)))
        return st;
    gemma_attn_scale(ld, 62);
    fx_ld_swa_pattern(ld, period);
    return load_gemma_layers(ld, FX_LD_QK_NORM);
}
