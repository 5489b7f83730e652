/* What an architecture file (a file under model/arch/) uses to fill a struct fx_model from a GGUF
 * file: typed reads of "<arch>.<key>" metadata with range checks, and tensor lookups that check the
 * type and shape and name the tensor, the expected and the found shape when they disagree. */
#ifndef FX_MODEL_LOADER_H
#define FX_MODEL_LOADER_H

#include "model/model.h"

struct fx_loader {
    const struct fx_gguf *g;
    struct fx_model *m;
    struct fx_error *err;
};

/* ---- metadata: "<arch>.<suffix>" ---- */

/* A required integer key in [lo, hi]. */
fx_status fx_ld_int(struct fx_loader *ld, const char *suffix, int64_t lo, int64_t hi, int32_t *out);
/* The same, leaving *out (the default) untouched when the key is absent. */
fx_status fx_ld_int_opt(struct fx_loader *ld, const char *suffix, int64_t lo, int64_t hi,
                        int32_t *out);
/* A required / optional finite float key in [lo, hi]. */
fx_status fx_ld_float(struct fx_loader *ld, const char *suffix, double lo, double hi, float *out);
fx_status fx_ld_float_opt(struct fx_loader *ld, const char *suffix, double lo, double hi,
                          float *out);
/* An optional string key; *out is left NULL when absent. */
fx_status fx_ld_str_opt(struct fx_loader *ld, const char *suffix, const char **out);

/* Reads the keys every architecture shares (sizes, heads, norms, rope and its scaling, sliding
 * window, experts, softcaps) into m->hp with the defaults llama.cpp uses, and checks that they are
 * consistent. Architecture files then adjust what differs. */
fx_status fx_ld_common_hparams(struct fx_loader *ld);

/* ---- tensors: a name is "blk.<il>.<suffix>" when il >= 0, else the suffix itself ---- */

enum fx_ld_need { FX_LD_REQUIRED, FX_LD_OPTIONAL };

/* A 2-D weight of ne0 x ne1 (ne0 = row length). When optional and absent, out->data is NULL. */
fx_status fx_ld_mat(struct fx_loader *ld, int il, const char *suffix, int64_t ne0, int64_t ne1,
                    enum fx_ld_need need, struct fx_mat *out);
/* A 3-D expert weight of ne0 x ne1 x n_expert. */
fx_status fx_ld_experts(struct fx_loader *ld, int il, const char *suffix, int64_t ne0, int64_t ne1,
                        int64_t n_expert, enum fx_ld_need need, struct fx_experts *out);
/* An f32 vector of n elements (or n x n2 when n2 > 1), copied into the model. NULL when
 * optional and absent. */
fx_status fx_ld_vec(struct fx_loader *ld, int il, const char *suffix, int64_t n, int64_t n2,
                    enum fx_ld_need need, const float **out);

/* The attention block of layer il: attn_norm, attn_q/k/v/output and the optional parts the
 * flags ask for. */
enum {
    FX_LD_QKV_BIAS = 1 << 0,       /* attn_q/k/v.bias required */
    FX_LD_O_BIAS = 1 << 1,         /* attn_output.bias required */
    FX_LD_BIAS_OPTIONAL = 1 << 2,  /* q/k/v/output biases loaded when present */
    FX_LD_QK_NORM = 1 << 3,        /* attn_q_norm / attn_k_norm required */
    FX_LD_SINKS = 1 << 4,          /* attn_sinks required */
    FX_LD_POST_ATTN_NORM = 1 << 5, /* post_attention_norm applied to the attention output */
};
fx_status fx_ld_attention(struct fx_loader *ld, int il, unsigned flags);

/* The FFN of layer il, dense or mixture-of-experts as m->hp says; `norm` names its pre-norm
 * ("ffn_norm", or "post_attention_norm" for gpt-oss). */
enum {
    FX_LD_POST_FFN_NORM = 1 << 0, /* post_ffw_norm required */
    FX_LD_MOE_BIASES = 1 << 1,    /* router and expert biases required */
};
fx_status fx_ld_ffn(struct fx_loader *ld, int il, const char *norm, unsigned flags);

/* token_embd, output_norm and output (tied to token_embd when absent). */
fx_status fx_ld_embeddings(struct fx_loader *ld);

/* Sliding-window layers: with a period p > 1, layer il is local iff il % p != p - 1, so every
 * p-th layer is global (llama.cpp's swa pattern; gemma2 and gpt-oss use p = 2, gemma3 p = 6). A
 * model without a window has none. Sets swa and rope_base of every layer. */
void fx_ld_swa_pattern(struct fx_loader *ld, int period);

/* ---- one function per architecture family (model/arch/<family>.c) ---- */

fx_status fx_arch_llama_load(struct fx_loader *ld);
fx_status fx_arch_qwen2_load(struct fx_loader *ld);
fx_status fx_arch_qwen3_load(struct fx_loader *ld);
fx_status fx_arch_qwen3moe_load(struct fx_loader *ld);
fx_status fx_arch_gemma2_load(struct fx_loader *ld);
fx_status fx_arch_gemma3_load(struct fx_loader *ld);
fx_status fx_arch_gptoss_load(struct fx_loader *ld);
fx_status fx_arch_qwen35_load(struct fx_loader *ld);
fx_status fx_arch_qwen35moe_load(struct fx_loader *ld);
/* After the embeddings (it needs n_vocab): the MTP blocks of a qwen35 / qwen35moe file. */
fx_status fx_arch_qwen35_load_mtp(struct fx_loader *ld);

#endif
