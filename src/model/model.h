/* A loaded model: hyper-parameters and weight views, described as data so that one decoder runs
 * every architecture (ARCHITECTURE.md section 5). Each family under model/arch/ fills this
 * description from its GGUF keys and tensors; the decoder reads only the description, never the
 * architecture name.
 *
 * A model is immutable once loaded and may be shared by any number of contexts and threads.
 * Weight matrices point into the read-only mapping of the GGUF file; small vectors (norms,
 * biases, sinks) are owned f32 copies. */
#ifndef FX_MODEL_MODEL_H
#define FX_MODEL_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "ferrox.h"
#include "kernels/kernels.h"

/* How positions are turned into rotation angles, as llama.cpp defines them: theta_i = pos *
 * freq_scale * base^(-2i/n_rot) / freq_factors[i], with YaRN blending when ext_factor > 0. */
struct fx_rope_config {
    enum fx_rope_mode kind; /* FX_ROPE_NORMAL or FX_ROPE_NEOX (kernels.h) */
    int32_t n_rot;          /* rotated dimensions per head (even, <= head_dim) */
    float freq_base;        /* base of global layers */
    float freq_base_swa;    /* base of sliding-window layers (gemma3); equals freq_base otherwise */
    float freq_scale;       /* 1 / linear or YaRN factor; 1 when unscaled */
    float freq_scale_swa;   /* the same for sliding-window layers (gemma3 leaves them unscaled) */
    float ext_factor;       /* YaRN extrapolation mix; 0 when YaRN is off */
    float attn_factor;      /* YaRN magnitude factor before the log correction; 1 by default */
    float beta_fast, beta_slow;
    int32_t n_ctx_orig;        /* training context YaRN corrects against */
    const float *freq_factors; /* [n_rot / 2] divisors (llama3 rope_freqs.weight), or NULL */
    /* Interleaved multi-section rope (qwen35): pair i takes its position from component
     * s = i % (sum of sections): t, h or w while s is within their interleaved sections, else
     * the fourth. Text positions are (p, p, p, 0). All zero for plain rope. */
    int32_t sections[4];
};

enum fx_ffn_act {
    FX_FFN_SILU,       /* down(silu(gate x) * up x) */
    FX_FFN_GELU,       /* down(gelu_tanh(gate x) * up x) */
    FX_FFN_SWIGLU_OAI, /* gpt-oss: min(g, L) * sigmoid(1.702 min(g, L)) * (clamp(u, -L, L) + 1) */
};

enum fx_router_kind {
    FX_ROUTER_SOFTMAX_TOPK, /* softmax over all experts, keep the top k (qwen3moe, mixtral) */
    FX_ROUTER_TOPK_SOFTMAX, /* keep the top k logits, softmax over those (gpt-oss) */
};

struct fx_hparams {
    int32_t n_vocab;
    int32_t n_ctx_train;
    int32_t n_embd;
    int32_t n_layer;
    int32_t n_head, n_head_kv;
    int32_t head_dim;                          /* K (and Q) head size */
    int32_t head_dim_v;                        /* V head size */
    int32_t n_ff;                              /* dense FFN width (0 when every layer is MoE) */
    int32_t n_expert, n_expert_used, n_ff_exp; /* 0 for dense models */

    float rms_eps;
    float embd_scale;    /* multiplies the input embedding (sqrt(n_embd) for gemma), else 1 */
    float attn_scale;    /* multiplies Q K^T */
    float attn_softcap;  /* s = c tanh(s / c) on attention logits; 0 = off */
    float final_softcap; /* the same on output logits; 0 = off */
    int32_t n_swa;       /* window of sliding layers: key visible iff pos - key_pos < n_swa */

    enum fx_ffn_act act;
    float act_limit; /* clamp L of FX_ACT_SWIGLU_OAI */
    enum fx_router_kind router;
    bool expert_weights_norm; /* renormalise the selected experts' weights to sum 1 */
    int32_t n_ff_shexp;       /* width of the gated shared expert beside the routed ones, or 0 */

    /* Hybrid models (qwen35): Gated DeltaNet layers beside the attention layers. 0 when the
     * model has none. Their q and k have n_ssm_k_heads heads of ssm_d_state, v has
     * n_ssm_v_heads heads of ssm_d_state; v head h reads q/k head h % n_ssm_k_heads. */
    int32_t n_layer_rec;                  /* recurrent layers among the n_layer */
    int32_t ssm_d_state;                  /* S: size of a q, k and v head of those layers */
    int32_t n_ssm_k_heads, n_ssm_v_heads; /* HK, HV (HV a multiple of HK) */
    int32_t ssm_d_conv;                   /* taps of the causal conv over [q | k | v] */
    int32_t n_layer_kv; /* layers that keep K and V: the trunk's attention layers, then MTP's */
    int32_t n_nextn;    /* MTP blocks stored after the trunk's n_layer */

    struct fx_rope_config rope;
};

/* The experts of one MoE weight: n_expert matrices of `per` shape stored back to back (and, when
 * packed, their packed copies too). */
struct fx_experts {
    struct fx_mat per; /* one expert's matrix; `data` (and `packed`) are expert 0's */
    int64_t n_expert;
    uint64_t expert_bytes; /* distance between consecutive experts */
    uint64_t packed_bytes; /* distance between consecutive packed experts */
};

/* One transformer block. Optional parts are NULL (vectors) or have data == NULL (matrices). */
struct fx_layer {
    bool recurrent;        /* a Gated DeltaNet layer (the ssm_* weights) instead of attention */
    int32_t kv_il;         /* attention layers: index of this layer's K/V in the caches */
    int32_t rec_il;        /* recurrent layers: index of this layer's recurrent state */
    bool swa;              /* sliding-window attention on this layer */
    float rope_base;       /* this layer's rope base */
    float rope_freq_scale; /* this layer's rope frequency scale */

    const float *attn_norm; /* [n_embd] */
    struct fx_mat wq, wk, wv,
        wo; /* [n_head*hd][n_embd], [n_kv*hd][n_embd], ..., [n_embd][n_head*hd_v] */
    const float *bq, *bk, *bv, *bo; /* biases or NULL */
    const float *q_norm, *k_norm;   /* [head_dim] per-head RMS norm weights or NULL */
    const float *sinks;             /* [n_head] attention sink logits or NULL */
    const float *post_attn_norm;    /* [n_embd] norm of the attention output, or NULL */
    /* qwen35: wq gives [q | gate] per head ([n_head][2][head_dim] rows) and the attention output
     * of each head is multiplied by sigmoid(gate) before wo. */
    bool attn_out_gate;

    /* Gated DeltaNet (recurrent layers; key_dim = HK * S, value_dim = HV * S,
     * conv_dim = 2 * key_dim + value_dim). */
    struct fx_mat ssm_qkv;   /* [conv_dim][n_embd]: [q | k | v] before the conv */
    struct fx_mat ssm_z;     /* [value_dim][n_embd]: the output gate z */
    struct fx_mat ssm_beta;  /* [HV][n_embd]: sigmoid of it is the write strength */
    struct fx_mat ssm_alpha; /* [HV][n_embd]: with dt_b and a, the decay */
    const float *ssm_conv;   /* [conv_dim][d_conv] taps per channel, the oldest input first */
    const float *ssm_dt_b;   /* [HV] */
    const float *ssm_a;      /* [HV] negative rates: log decay = softplus(alpha + dt_b) * a */
    const float *ssm_norm;   /* [S] RMS norm of each head's output, shared by the heads */
    struct fx_mat ssm_out;   /* [n_embd][value_dim] */

    const float *ffn_norm;                    /* [n_embd] pre-FFN norm */
    struct fx_mat ffn_gate, ffn_up, ffn_down; /* dense FFN (data NULL on MoE layers) */
    const float *post_ffn_norm;               /* [n_embd] norm of the FFN output, or NULL */

    struct fx_mat router;  /* [n_expert][n_embd] (data NULL on dense layers) */
    const float *router_b; /* [n_expert] or NULL */
    struct fx_experts gate_exps, up_exps, down_exps;
    const float *gate_exps_b, *up_exps_b; /* [n_expert][n_ff_exp] or NULL */
    const float *down_exps_b;             /* [n_expert][n_embd] or NULL */
    /* Shared expert (qwen35moe): added to the routed experts' sum, scaled by
     * sigmoid(shexp_gate_inp . xn), one scalar per row. data NULL when absent. */
    struct fx_mat shexp_gate_inp;                   /* [1][n_embd] */
    struct fx_mat shexp_gate, shexp_up, shexp_down; /* [n_ff_shexp][n_embd], ..., [n_embd][..] */
};

/* A multi-token-prediction (NextN) block: its transformer layer is m->layers[n_layer + i]; these
 * are the tensors around it. Loaded with the model; the trunk's forward pass never runs it. */
struct fx_mtp {
    struct fx_mat eh_proj;      /* [n_embd][2 n_embd]: [rms(embedding) | rms(hidden)] -> x */
    const float *enorm, *hnorm; /* [n_embd] */
    const float *head_norm;     /* [n_embd] shared_head_norm, or NULL: output_norm */
    struct fx_mat embed;        /* [n_vocab][n_embd]; the model's tok_embd when absent */
    struct fx_mat head;         /* [n_vocab][n_embd]; the model's output when absent */
};

struct fx_model {
    struct fx_gguf *file; /* owns the mapping every fx_mat points into */
    char arch[32];
    struct fx_hparams hp;
    struct fx_mat tok_embd;   /* [n_vocab][n_embd] */
    const float *output_norm; /* [n_embd] */
    struct fx_mat output;     /* [n_vocab][n_embd]; equals tok_embd when tied */
    bool tied_output;
    struct fx_layer *layers; /* [n_layer + n_nextn]: the trunk, then the MTP blocks */
    struct fx_mtp *mtp;      /* [n_nextn], NULL when none */
    float **vecs;            /* every owned vector copy, freed with the model */
    int64_t n_vecs, cap_vecs;
    void *packed; /* the one allocation of the packed weight copies (model/pack.c), or NULL */
    /* The cache the experts are read into (model/expert_cache.h), or NULL when they are
     * resident. The one part of a model that changes after loading; it has its own lock. */
    struct fx_xcache *xcache;
    int32_t moe_lookahead; /* fx_model_params.moe_lookahead with xcache, else 0 */
};

/* Packs every weight matrix into the layout the kernel table's matmul prefers (once, at load,
 * on a temporary worker pool), and releases the pages of g that the packed copies replace.
 * Expert stacks are left alone unless `experts` (an expert cache packs them as it reads them). */
fx_status fx_model_pack(struct fx_model *m, const struct fx_gguf *g, bool experts,
                        struct fx_error *err);

/* The matrix of expert e. */
static inline struct fx_mat fx_experts_get(const struct fx_experts *x, int64_t e) {
    struct fx_mat m = x->per;
    m.data = (const uint8_t *)x->per.data + (uint64_t)e * x->expert_bytes;
    if (m.packed)
        m.packed = (const uint8_t *)x->per.packed + (uint64_t)e * x->packed_bytes;
    return m;
}

/* A 64-bit hash of what the model computes with (model/identity.c): its hyper-parameter metadata
 * (every key but general.* and tokenizer.*), every tensor's name, type and shape, and the first
 * bytes of every tensor's data. Saved state records it and refuses to load into a model whose
 * fingerprint differs. */
uint64_t fx_model_fingerprint(const struct fx_model *m);

#endif
