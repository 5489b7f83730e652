/* Random-weight models of real shapes (see synth.h). The tensor names, shapes and metadata keys
 * are the ones llama.cpp reads for each architecture; the vocabulary is a synthetic
 * SentencePiece one of the real size, so the files load in llama.cpp as well as in ferrox. */
#include "model/synth.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "model/encode.h"
#include "model/ftype.h"
#include "model/quant.h"

struct fx_synth_shape {
    const char *name, *arch, *model_name;
    int64_t n_embd, n_layer, n_head, n_head_kv, head_dim, n_vocab;
    int64_t n_ff; /* the dense FFN width, or each expert's */
    uint32_t n_ctx;
    float rope_base, rms_eps;
    bool tied;        /* no output.weight: logits use token_embd.weight */
    bool qk_norm;     /* per-head RMS norm of Q and K (attn_q_norm, attn_k_norm) */
    bool head_keys;   /* attention.key_length / value_length (head_dim != n_embd / n_head) */
    bool llama3_rope; /* rope_freqs.weight with Llama 3.1 scaling (factor 32, 8192 original) */
    int64_t n_expert, n_expert_used; /* gpt-oss, qwen35moe; 0 for a dense model */
    /* gpt-oss only: expert and attention biases, sinks, every second layer sliding, YaRN */
    uint32_t n_swa, yarn_ctx;
    float yarn_factor;
    /* qwen35 / qwen35moe only (ssm_state > 0): Gated DeltaNet layers with ssm_k_heads Q/K and
     * ssm_v_heads V heads of ssm_state, a causal conv of ssm_conv taps; every
     * full_attn_interval-th layer gated attention instead, rotating n_rot dims of each head in
     * rope_sections; n_nextn MTP blocks after the n_layer trunk layers; qwen35moe's experts
     * beside a shared expert of n_ff_shexp. */
    int64_t ssm_state, ssm_k_heads, ssm_v_heads, ssm_conv, full_attn_interval, n_nextn, n_rot;
    int32_t rope_sections[4];
    int64_t n_ff_shexp;
};

/* The shapes. Dimensions are those of the released models' config.json files; the "tiny"
 * shapes are small models of the same layouts for tests, with rows of 256 so that every type,
 * K-quants included, applies to every weight without a fallback. */
static const struct fx_synth_shape shapes[] = {
    {.name = "tiny",
     .arch = "llama",
     .model_name = "ferrox-tiny",
     .n_embd = 256,
     .n_layer = 4,
     .n_head = 4,
     .n_head_kv = 2,
     .head_dim = 64,
     .n_vocab = 2048,
     .n_ff = 512,
     .n_ctx = 512,
     .rope_base = 10000.0f,
     .rms_eps = 1e-5f},
    {.name = "tiny-moe",
     .arch = "gpt-oss",
     .model_name = "ferrox-tiny-moe",
     .n_embd = 256,
     .n_layer = 2,
     .n_head = 4,
     .n_head_kv = 2,
     .head_dim = 64,
     .n_vocab = 2048,
     .n_ff = 256,
     .n_ctx = 131072,
     .rope_base = 150000.0f,
     .rms_eps = 1e-5f,
     .head_keys = true,
     .n_expert = 4,
     .n_expert_used = 2,
     .n_swa = 128,
     .yarn_ctx = 4096,
     .yarn_factor = 32.0f},
    /* The layout of the qwen35 fixtures (4 trunk layers, the last gated attention, and an MTP
     * block) at rows of 256. */
    {.name = "tiny-qwen35",
     .arch = "qwen35",
     .model_name = "ferrox-tiny-qwen35",
     .n_embd = 256,
     .n_layer = 4,
     .n_head = 4,
     .n_head_kv = 2,
     .head_dim = 64,
     .n_vocab = 2048,
     .n_ff = 512,
     .n_ctx = 4096,
     .rope_base = 10000000.0f,
     .rms_eps = 1e-6f,
     .head_keys = true,
     .ssm_state = 64,
     .ssm_k_heads = 2,
     .ssm_v_heads = 4,
     .ssm_conv = 4,
     .full_attn_interval = 4,
     .n_nextn = 1,
     .n_rot = 16,
     .rope_sections = {3, 3, 2, 0}},
    {.name = "tiny-qwen35moe",
     .arch = "qwen35moe",
     .model_name = "ferrox-tiny-qwen35moe",
     .n_embd = 256,
     .n_layer = 4,
     .n_head = 4,
     .n_head_kv = 2,
     .head_dim = 64,
     .n_vocab = 2048,
     .n_ff = 256,
     .n_ctx = 4096,
     .rope_base = 10000000.0f,
     .rms_eps = 1e-6f,
     .head_keys = true,
     .n_expert = 4,
     .n_expert_used = 2,
     .ssm_state = 64,
     .ssm_k_heads = 2,
     .ssm_v_heads = 4,
     .ssm_conv = 4,
     .full_attn_interval = 4,
     .n_nextn = 1,
     .n_rot = 16,
     .rope_sections = {3, 3, 2, 0},
     .n_ff_shexp = 256},
    {.name = "smollm2-135m",
     .arch = "llama",
     .model_name = "SmolLM2-135M",
     .n_embd = 576,
     .n_layer = 30,
     .n_head = 9,
     .n_head_kv = 3,
     .head_dim = 64,
     .n_vocab = 49152,
     .n_ff = 1536,
     .n_ctx = 8192,
     .rope_base = 100000.0f,
     .rms_eps = 1e-5f,
     .tied = true},
    {.name = "qwen3-0.6b",
     .arch = "qwen3",
     .model_name = "Qwen3-0.6B",
     .n_embd = 1024,
     .n_layer = 28,
     .n_head = 16,
     .n_head_kv = 8,
     .head_dim = 128,
     .n_vocab = 151936,
     .n_ff = 3072,
     .n_ctx = 40960,
     .rope_base = 1000000.0f,
     .rms_eps = 1e-6f,
     .tied = true,
     .qk_norm = true,
     .head_keys = true},
    {.name = "llama-3.2-1b",
     .arch = "llama",
     .model_name = "Llama-3.2-1B",
     .n_embd = 2048,
     .n_layer = 16,
     .n_head = 32,
     .n_head_kv = 8,
     .head_dim = 64,
     .n_vocab = 128256,
     .n_ff = 8192,
     .n_ctx = 131072,
     .rope_base = 500000.0f,
     .rms_eps = 1e-5f,
     .tied = true,
     .llama3_rope = true},
    /* openai/gpt-oss-20b: 24 layers of 32 experts (4 used) of width 2880, 64 query and 8 KV
     * heads of 64, a 128-token window on even layers, YaRN x32 over 4096 positions. */
    {.name = "gpt-oss-20b",
     .arch = "gpt-oss",
     .model_name = "gpt-oss-20b",
     .n_embd = 2880,
     .n_layer = 24,
     .n_head = 64,
     .n_head_kv = 8,
     .head_dim = 64,
     .n_vocab = 201088,
     .n_ff = 2880,
     .n_ctx = 131072,
     .rope_base = 150000.0f,
     .rms_eps = 1e-5f,
     .head_keys = true,
     .n_expert = 32,
     .n_expert_used = 4,
     .n_swa = 128,
     .yarn_ctx = 4096,
     .yarn_factor = 32.0f},
    /* Qwen/Qwen3.5-0.8B (text): 24 layers, each fourth gated attention (8 query and 2 KV heads
     * of 256, a quarter of each head rotated, sections [11, 11, 10]), the others Gated DeltaNet
     * (16 Q/K and 16 V heads of 128, 4 conv taps); a 3584 FFN, one MTP block, tied
     * embeddings. */
    {.name = "qwen35-0.8b",
     .arch = "qwen35",
     .model_name = "Qwen3.5-0.8B",
     .n_embd = 1024,
     .n_layer = 24,
     .n_head = 8,
     .n_head_kv = 2,
     .head_dim = 256,
     .n_vocab = 248320,
     .n_ff = 3584,
     .n_ctx = 262144,
     .rope_base = 10000000.0f,
     .rms_eps = 1e-6f,
     .tied = true,
     .head_keys = true,
     .ssm_state = 128,
     .ssm_k_heads = 16,
     .ssm_v_heads = 16,
     .ssm_conv = 4,
     .full_attn_interval = 4,
     .n_nextn = 1,
     .n_rot = 64,
     .rope_sections = {11, 11, 10, 0}},
    /* No Qwen3.5 MoE is small enough for a benchmark machine (the smallest, 35B-A3B, is 37 GB
     * at Q8_0), so this is Qwen/Qwen3.5-35B-A3B cut down: its layers exactly (n_embd 2048, 16
     * query and 2 KV heads of 256, DeltaNet 16 Q/K and 32 V heads of 128, top-8 routing over
     * experts of 512 beside a shared expert of 512, an untied head, one MTP block), but 12 of
     * its 40 layers and 32 of its 256 experts: 2.8 billion parameters, 3.0 GB at Q8_0. A decoded
     * token reads per layer what it would in the real model; in a prompt batch each expert gets
     * 8 times the rows it would get of 256, and the embeddings weigh more. */
    {.name = "qwen35moe-12l-32e",
     .arch = "qwen35moe",
     .model_name = "Qwen3.5-35B-A3B-12L-32E",
     .n_embd = 2048,
     .n_layer = 12,
     .n_head = 16,
     .n_head_kv = 2,
     .head_dim = 256,
     .n_vocab = 248320,
     .n_ff = 512,
     .n_ctx = 262144,
     .rope_base = 10000000.0f,
     .rms_eps = 1e-6f,
     .head_keys = true,
     .n_expert = 32,
     .n_expert_used = 8,
     .ssm_state = 128,
     .ssm_k_heads = 16,
     .ssm_v_heads = 32,
     .ssm_conv = 4,
     .full_attn_interval = 4,
     .n_nextn = 1,
     .n_rot = 64,
     .rope_sections = {11, 11, 10, 0},
     .n_ff_shexp = 512},
};
#define N_SHAPES (sizeof shapes / sizeof shapes[0])

const char *const *fx_synth_shape_names(void) {
    static const char *names[N_SHAPES + 1];
    for (size_t i = 0; i < N_SHAPES; i++)
        names[i] = shapes[i].name;
    return names;
}

/* ---- plan ------------------------------------------------------------------------------------ */

/* The most tensors one block has: a qwen35moe MTP block's 20. */
#define MAX_BLOCK_TENSORS 20

/* Adds tensor `name` (of layer `layer`, or a global one when layer < 0) of shape [ne0], [ne0,
 * ne1] or [ne0, ne1, ne2]; its type is decided once every tensor is known. */
static void add(struct fx_synth_model *m, enum fx_synth_role role, int64_t layer, const char *name,
                int64_t ne0, int64_t ne1, int64_t ne2) {
    struct fx_synth_tensor *t = &m->tensors[m->n_tensors++];
    if (layer >= 0)
        snprintf(t->name, sizeof t->name, "blk.%" PRId64 ".%s", layer, name);
    else
        snprintf(t->name, sizeof t->name, "%s", name);
    t->role = role;
    t->type = FX_TYPE_F32;
    t->n_dims = ne2 ? 3 : ne1 ? 2 : 1;
    t->ne[0] = ne0;
    t->ne[1] = ne1 ? ne1 : 1;
    t->ne[2] = ne2 ? ne2 : 1;
    t->ne[3] = 1;
}

/* Llama, Qwen3: attention (with QK norms for Qwen3) and a gated FFN. */
static void add_dense_layer(struct fx_synth_model *m, int64_t l) {
    const struct fx_synth_shape *s = m->shape;
    int64_t q = s->n_head * s->head_dim, kv = s->n_head_kv * s->head_dim;
    add(m, FX_SYNTH_NORM, l, "attn_norm.weight", s->n_embd, 0, 0);
    add(m, FX_SYNTH_PROJ_IN, l, "attn_q.weight", s->n_embd, q, 0);
    add(m, FX_SYNTH_PROJ_IN, l, "attn_k.weight", s->n_embd, kv, 0);
    add(m, FX_SYNTH_PROJ_IN, l, "attn_v.weight", s->n_embd, kv, 0);
    add(m, FX_SYNTH_PROJ_OUT, l, "attn_output.weight", q, s->n_embd, 0);
    if (s->qk_norm) {
        add(m, FX_SYNTH_NORM, l, "attn_q_norm.weight", s->head_dim, 0, 0);
        add(m, FX_SYNTH_NORM, l, "attn_k_norm.weight", s->head_dim, 0, 0);
    }
    add(m, FX_SYNTH_NORM, l, "ffn_norm.weight", s->n_embd, 0, 0);
    add(m, FX_SYNTH_PROJ_IN, l, "ffn_gate.weight", s->n_embd, s->n_ff, 0);
    add(m, FX_SYNTH_PROJ_IN, l, "ffn_up.weight", s->n_embd, s->n_ff, 0);
    add(m, FX_SYNTH_PROJ_OUT, l, "ffn_down.weight", s->n_ff, s->n_embd, 0);
}

/* gpt-oss: attention with biases and sinks, then experts with biases behind a router with a
 * bias; the pre-FFN norm is called post_attention_norm. */
static void add_gptoss_layer(struct fx_synth_model *m, int64_t l) {
    const struct fx_synth_shape *s = m->shape;
    int64_t q = s->n_head * s->head_dim, kv = s->n_head_kv * s->head_dim;
    int64_t e = s->n_expert, ff = s->n_ff, d = s->n_embd;
    add(m, FX_SYNTH_NORM, l, "attn_norm.weight", d, 0, 0);
    add(m, FX_SYNTH_PROJ_IN, l, "attn_q.weight", d, q, 0);
    add(m, FX_SYNTH_BIAS, l, "attn_q.bias", q, 0, 0);
    add(m, FX_SYNTH_PROJ_IN, l, "attn_k.weight", d, kv, 0);
    add(m, FX_SYNTH_BIAS, l, "attn_k.bias", kv, 0, 0);
    add(m, FX_SYNTH_PROJ_IN, l, "attn_v.weight", d, kv, 0);
    add(m, FX_SYNTH_BIAS, l, "attn_v.bias", kv, 0, 0);
    add(m, FX_SYNTH_PROJ_OUT, l, "attn_output.weight", q, d, 0);
    add(m, FX_SYNTH_BIAS, l, "attn_output.bias", d, 0, 0);
    add(m, FX_SYNTH_SINK, l, "attn_sinks.weight", s->n_head, 0, 0);
    add(m, FX_SYNTH_NORM, l, "post_attention_norm.weight", d, 0, 0);
    add(m, FX_SYNTH_PROJ_IN, l, "ffn_gate_inp.weight", d, e, 0);
    add(m, FX_SYNTH_BIAS, l, "ffn_gate_inp.bias", e, 0, 0);
    add(m, FX_SYNTH_PROJ_IN, l, "ffn_gate_exps.weight", d, ff, e);
    add(m, FX_SYNTH_BIAS, l, "ffn_gate_exps.bias", ff, e, 0);
    add(m, FX_SYNTH_PROJ_IN, l, "ffn_up_exps.weight", d, ff, e);
    add(m, FX_SYNTH_BIAS, l, "ffn_up_exps.bias", ff, e, 0);
    add(m, FX_SYNTH_PROJ_OUT, l, "ffn_down_exps.weight", ff, d, e);
    add(m, FX_SYNTH_BIAS, l, "ffn_down_exps.bias", d, e, 0);
}

/* qwen35: a Gated DeltaNet mixer: [q | k | v] for the causal conv, the output gate z, a beta
 * and an alpha per V head, the decay rate and its bias, the gated norm and the output. */
static void add_delta_net(struct fx_synth_model *m, int64_t l) {
    const struct fx_synth_shape *s = m->shape;
    int64_t d = s->n_embd, hv = s->ssm_v_heads, value = s->ssm_state * hv;
    int64_t conv = 2 * s->ssm_state * s->ssm_k_heads + value;
    add(m, FX_SYNTH_PROJ_IN, l, "attn_qkv.weight", d, conv, 0);
    add(m, FX_SYNTH_PROJ_IN, l, "attn_gate.weight", d, value, 0);
    add(m, FX_SYNTH_PROJ_IN, l, "ssm_conv1d.weight", s->ssm_conv, conv, 0);
    add(m, FX_SYNTH_BIAS, l, "ssm_dt.bias", hv, 0, 0);
    add(m, FX_SYNTH_DECAY, l, "ssm_a", hv, 0, 0);
    add(m, FX_SYNTH_PROJ_IN, l, "ssm_beta.weight", d, hv, 0);
    add(m, FX_SYNTH_PROJ_IN, l, "ssm_alpha.weight", d, hv, 0);
    add(m, FX_SYNTH_NORM, l, "ssm_norm.weight", s->ssm_state, 0, 0);
    add(m, FX_SYNTH_PROJ_OUT, l, "ssm_out.weight", value, d, 0);
}

/* qwen35: gated attention, whose Q projection also yields the output gate of each head. */
static void add_gated_attention(struct fx_synth_model *m, int64_t l) {
    const struct fx_synth_shape *s = m->shape;
    int64_t d = s->n_embd, q = s->n_head * s->head_dim, kv = s->n_head_kv * s->head_dim;
    add(m, FX_SYNTH_PROJ_IN, l, "attn_q.weight", d, 2 * q, 0);
    add(m, FX_SYNTH_PROJ_IN, l, "attn_k.weight", d, kv, 0);
    add(m, FX_SYNTH_PROJ_IN, l, "attn_v.weight", d, kv, 0);
    add(m, FX_SYNTH_PROJ_OUT, l, "attn_output.weight", q, d, 0);
    add(m, FX_SYNTH_NORM, l, "attn_q_norm.weight", s->head_dim, 0, 0);
    add(m, FX_SYNTH_NORM, l, "attn_k_norm.weight", s->head_dim, 0, 0);
}

/* qwen35 block l: a trunk layer (gated attention every full_attn_interval-th, Gated DeltaNet
 * otherwise) or, past the trunk, an MTP block (gated attention and the NextN tensors; it reuses
 * token_embd and the output head, as real conversions do). The FFN is SwiGLU, or for qwen35moe
 * routed experts beside a shared expert with a sigmoid gate of one row. */
static void add_qwen35_layer(struct fx_synth_model *m, int64_t l) {
    const struct fx_synth_shape *s = m->shape;
    int64_t d = s->n_embd, e = s->n_expert, ff = s->n_ff, sh = s->n_ff_shexp;
    bool mtp = l >= s->n_layer;
    add(m, FX_SYNTH_NORM, l, "attn_norm.weight", d, 0, 0);
    if (!mtp && (l + 1) % s->full_attn_interval != 0)
        add_delta_net(m, l);
    else
        add_gated_attention(m, l);
    add(m, FX_SYNTH_NORM, l, "post_attention_norm.weight", d, 0, 0);
    if (e == 0) {
        add(m, FX_SYNTH_PROJ_IN, l, "ffn_gate.weight", d, ff, 0);
        add(m, FX_SYNTH_PROJ_IN, l, "ffn_up.weight", d, ff, 0);
        add(m, FX_SYNTH_PROJ_OUT, l, "ffn_down.weight", ff, d, 0);
    } else {
        add(m, FX_SYNTH_PROJ_IN, l, "ffn_gate_inp.weight", d, e, 0);
        add(m, FX_SYNTH_PROJ_IN, l, "ffn_gate_exps.weight", d, ff, e);
        add(m, FX_SYNTH_PROJ_IN, l, "ffn_up_exps.weight", d, ff, e);
        add(m, FX_SYNTH_PROJ_OUT, l, "ffn_down_exps.weight", ff, d, e);
        add(m, FX_SYNTH_PROJ_IN, l, "ffn_gate_inp_shexp.weight", d, 0, 0);
        add(m, FX_SYNTH_PROJ_IN, l, "ffn_gate_shexp.weight", d, sh, 0);
        add(m, FX_SYNTH_PROJ_IN, l, "ffn_up_shexp.weight", d, sh, 0);
        add(m, FX_SYNTH_PROJ_OUT, l, "ffn_down_shexp.weight", sh, d, 0);
    }
    if (mtp) {
        add(m, FX_SYNTH_PROJ_IN, l, "nextn.eh_proj.weight", 2 * d, d, 0);
        add(m, FX_SYNTH_NORM, l, "nextn.enorm.weight", d, 0, 0);
        add(m, FX_SYNTH_NORM, l, "nextn.hnorm.weight", d, 0, 0);
        add(m, FX_SYNTH_NORM, l, "nextn.shared_head_norm.weight", d, 0, 0);
    }
}

static bool is_gptoss(const struct fx_synth_shape *s) {
    return strcmp(s->arch, "gpt-oss") == 0;
}

static bool is_qwen35(const struct fx_synth_shape *s) {
    return s->ssm_state > 0;
}

/* Each tensor's type: the file type's rules over the whole tensor list. */
static fx_status choose_types(struct fx_synth_model *m, struct fx_error *err) {
    const struct fx_synth_shape *s = m->shape;
    /* llama.cpp counts the MTP blocks in block_count, and so in its mix's layer numbers. */
    struct fx_quant_model qm = {.arch = s->arch,
                                .n_layer = (int32_t)(s->n_layer + s->n_nextn),
                                .n_head = (int32_t)s->n_head,
                                .n_head_kv = (int32_t)s->n_head_kv,
                                .n_expert = (int32_t)s->n_expert};
    struct fx_quant_tensor *qt = malloc((size_t)m->n_tensors * sizeof *qt);
    enum fx_type *types = malloc((size_t)m->n_tensors * sizeof *types);
    fx_status st;
    if (!qt || !types) {
        st = fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "out of memory");
    } else {
        for (int64_t i = 0; i < m->n_tensors; i++) {
            qt[i] = (struct fx_quant_tensor){.name = m->tensors[i].name, .type = FX_TYPE_F32};
            memcpy(qt[i].ne, m->tensors[i].ne, sizeof qt[i].ne);
        }
        st = fx_quant_choose_types(&qm, m->file_type, m->pure, qt, m->n_tensors, types, err);
        for (int64_t i = 0; st == FX_OK && i < m->n_tensors; i++)
            m->tensors[i].type = types[i];
    }
    free(qt);
    free(types);
    return st;
}

fx_status fx_synth_plan(const char *shape, uint32_t file_type, bool pure, uint64_t seed,
                        struct fx_synth_model **out, struct fx_error *err) {
    *out = NULL;
    const struct fx_synth_shape *s = NULL;
    for (size_t i = 0; i < N_SHAPES; i++)
        if (strcmp(shapes[i].name, shape) == 0)
            s = &shapes[i];
    if (!s)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET, "unknown shape '%s'", shape);
    if (fx_file_type_base(file_type) == FX_TYPE_COUNT)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "file type %u (%s) cannot be generated", (unsigned)file_type,
                            fx_file_type_name(file_type) ? fx_file_type_name(file_type) : "?");
    struct fx_synth_model *m = calloc(1, sizeof *m);
    int64_t n_blocks = s->n_layer + s->n_nextn;
    if (m)
        m->tensors = calloc((size_t)(4 + MAX_BLOCK_TENSORS * n_blocks), sizeof *m->tensors);
    if (!m || !m->tensors) {
        free(m);
        return fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "out of memory planning '%s'", shape);
    }
    *m = (struct fx_synth_model){
        .shape = s, .file_type = file_type, .pure = pure, .seed = seed, .tensors = m->tensors};
    add(m, FX_SYNTH_EMBED, -1, "token_embd.weight", s->n_embd, s->n_vocab, 0);
    if (s->llama3_rope)
        add(m, FX_SYNTH_ROPE_FREQS, -1, "rope_freqs.weight", s->head_dim / 2, 0, 0);
    for (int64_t l = 0; l < n_blocks; l++)
        (is_qwen35(s) ? add_qwen35_layer : is_gptoss(s) ? add_gptoss_layer : add_dense_layer)(m, l);
    add(m, FX_SYNTH_NORM, -1, "output_norm.weight", s->n_embd, 0, 0);
    if (!s->tied)
        add(m, FX_SYNTH_PROJ_IN, -1, "output.weight", s->n_embd, s->n_vocab, 0);
    fx_status st = choose_types(m, err);
    if (st != FX_OK) {
        fx_synth_model_free(m);
        return st;
    }
    *out = m;
    return FX_OK;
}

void fx_synth_model_free(struct fx_synth_model *m) {
    if (m) {
        free(m->tensors);
        free(m);
    }
}

int64_t fx_synth_n_params(const struct fx_synth_model *m) {
    int64_t n = 0;
    for (int64_t i = 0; i < m->n_tensors; i++)
        n += m->tensors[i].ne[0] * m->tensors[i].ne[1] * m->tensors[i].ne[2];
    return n;
}

uint64_t fx_synth_n_bytes(const struct fx_synth_model *m) {
    uint64_t n = 0;
    for (int64_t i = 0; i < m->n_tensors; i++) {
        const struct fx_synth_tensor *t = &m->tensors[i];
        uint64_t row;
        if (fx_type_row_bytes(t->type, t->ne[0], &row))
            n += row * (uint64_t)(t->ne[1] * t->ne[2]);
    }
    return n;
}

/* ---- metadata and vocabulary ----------------------------------------------------------------- */

#define TRY(expr)                                                                                  \
    do {                                                                                           \
        fx_status s_ = (expr);                                                                     \
        if (s_ != FX_OK)                                                                           \
            return s_;                                                                             \
    } while (0)

static fx_status set_arch_u32(struct fx_gguf_writer *w, const char *arch, const char *key,
                              int64_t v, struct fx_error *err) {
    char full[128];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    return fx_gguf_writer_set_u32(w, full, (uint32_t)v, err);
}

static fx_status set_arch_f32(struct fx_gguf_writer *w, const char *arch, const char *key, float v,
                              struct fx_error *err) {
    char full[128];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    return fx_gguf_writer_set_f32(w, full, v, err);
}

/* gpt-oss's extra keys: experts, the sliding window (llama.cpp makes every second layer
 * sliding, starting with layer 0) and YaRN. */
static fx_status set_gptoss_metadata(struct fx_gguf_writer *w, const struct fx_synth_shape *s,
                                     struct fx_error *err) {
    const char *a = s->arch;
    char key[128];
    TRY(set_arch_u32(w, a, "expert_count", s->n_expert, err));
    TRY(set_arch_u32(w, a, "expert_used_count", s->n_expert_used, err));
    TRY(set_arch_u32(w, a, "expert_feed_forward_length", s->n_ff, err));
    TRY(set_arch_u32(w, a, "attention.sliding_window", s->n_swa, err));
    snprintf(key, sizeof key, "%s.rope.scaling.type", a);
    TRY(fx_gguf_writer_set_str(w, key, "yarn", err));
    TRY(set_arch_f32(w, a, "rope.scaling.factor", s->yarn_factor, err));
    TRY(set_arch_u32(w, a, "rope.scaling.original_context_length", s->yarn_ctx, err));
    TRY(set_arch_f32(w, a, "rope.scaling.yarn_beta_fast", 32.0f, err));
    TRY(set_arch_f32(w, a, "rope.scaling.yarn_beta_slow", 1.0f, err));
    return FX_OK;
}

/* qwen35's keys: the DeltaNet's sizes (inner_size is the V heads' width), the layer pattern,
 * the MTP blocks, the rope sections; qwen35moe's experts (and, as in llama.cpp's qwen35moe
 * fixture, no feed_forward_length: its FFNs are the experts). */
static fx_status set_qwen35_metadata(struct fx_gguf_writer *w, const struct fx_synth_shape *s,
                                     struct fx_error *err) {
    const char *a = s->arch;
    char key[128];
    TRY(set_arch_u32(w, a, "ssm.conv_kernel", s->ssm_conv, err));
    TRY(set_arch_u32(w, a, "ssm.state_size", s->ssm_state, err));
    TRY(set_arch_u32(w, a, "ssm.group_count", s->ssm_k_heads, err));
    TRY(set_arch_u32(w, a, "ssm.time_step_rank", s->ssm_v_heads, err));
    TRY(set_arch_u32(w, a, "ssm.inner_size", s->ssm_state * s->ssm_v_heads, err));
    TRY(set_arch_u32(w, a, "full_attention_interval", s->full_attn_interval, err));
    TRY(set_arch_u32(w, a, "nextn_predict_layers", s->n_nextn, err));
    snprintf(key, sizeof key, "%s.rope.dimension_sections", a);
    TRY(fx_gguf_writer_set_arr(w, key, FX_GGUF_INT32, s->rope_sections, 4, err));
    if (s->n_expert > 0) {
        TRY(set_arch_u32(w, a, "expert_count", s->n_expert, err));
        TRY(set_arch_u32(w, a, "expert_used_count", s->n_expert_used, err));
        TRY(set_arch_u32(w, a, "expert_feed_forward_length", s->n_ff, err));
        TRY(set_arch_u32(w, a, "expert_shared_feed_forward_length", s->n_ff_shexp, err));
    }
    return FX_OK;
}

static fx_status set_metadata(struct fx_gguf_writer *w, const struct fx_synth_model *m,
                              struct fx_error *err) {
    const struct fx_synth_shape *s = m->shape;
    const char *a = s->arch;
    char desc[160];
    snprintf(desc, sizeof desc,
             "random weights in the shape of %s (ferrox synth, seed %" PRIu64 "), not trained",
             s->model_name, m->seed);
    TRY(fx_gguf_writer_set_str(w, "general.architecture", a, err));
    TRY(fx_gguf_writer_set_str(w, "general.name", s->model_name, err));
    TRY(fx_gguf_writer_set_str(w, "general.description", desc, err));
    TRY(fx_gguf_writer_set_u32(w, "general.file_type", m->file_type, err));
    /* The quantized block layouts' version, as llama.cpp's quantizer records it. */
    enum fx_type base = fx_file_type_base(m->file_type);
    if (base != FX_TYPE_F32 && base != FX_TYPE_F16 && base != FX_TYPE_BF16)
        TRY(fx_gguf_writer_set_u32(w, "general.quantization_version", 2, err));
    TRY(set_arch_u32(w, a, "vocab_size", s->n_vocab, err));
    TRY(set_arch_u32(w, a, "context_length", s->n_ctx, err));
    TRY(set_arch_u32(w, a, "embedding_length", s->n_embd, err));
    TRY(set_arch_u32(w, a, "block_count", s->n_layer + s->n_nextn, err));
    if (!is_qwen35(s) || s->n_expert == 0)
        TRY(set_arch_u32(w, a, "feed_forward_length", s->n_ff, err));
    TRY(set_arch_u32(w, a, "rope.dimension_count", s->n_rot ? s->n_rot : s->head_dim, err));
    TRY(set_arch_u32(w, a, "attention.head_count", s->n_head, err));
    TRY(set_arch_u32(w, a, "attention.head_count_kv", s->n_head_kv, err));
    if (s->head_keys) {
        TRY(set_arch_u32(w, a, "attention.key_length", s->head_dim, err));
        TRY(set_arch_u32(w, a, "attention.value_length", s->head_dim, err));
    }
    TRY(set_arch_f32(w, a, "attention.layer_norm_rms_epsilon", s->rms_eps, err));
    TRY(set_arch_f32(w, a, "rope.freq_base", s->rope_base, err));
    if (is_gptoss(s))
        TRY(set_gptoss_metadata(w, s, err));
    if (is_qwen35(s))
        TRY(set_qwen35_metadata(w, s, err));
    return FX_OK;
}

/* The i-th word of the bijective base-26 numbering: a, b, ..., z, aa, ab, ... */
static size_t word(uint64_t i, char *out) {
    char tmp[16];
    size_t n = 0;
    for (i++; i; i /= 26) {
        i--;
        tmp[n++] = (char)('a' + i % 26);
    }
    for (size_t k = 0; k < n; k++)
        out[k] = tmp[n - 1 - k];
    return n;
}

/* A SentencePiece-style vocabulary: <unk>, <s>, </s>, the 256 byte tokens <0xNN>, then unique
 * pieces alternating between word-initial ("\u2581" + word) and word-internal forms, with
 * decreasing scores as SentencePiece's log probabilities would have. */
static fx_status set_vocabulary(struct fx_gguf_writer *w, int64_t n, struct fx_error *err) {
    /* Token types as llama.cpp numbers them. */
    enum { NORMAL = 1, UNKNOWN = 2, CONTROL = 3, BYTE = 6 };
    char **tokens = malloc((size_t)n * sizeof *tokens);
    char *text = malloc((size_t)n * 24);
    float *scores = malloc((size_t)n * sizeof *scores);
    int32_t *types = malloc((size_t)n * sizeof *types);
    fx_status s = FX_OK;
    if (!tokens || !text || !scores || !types) {
        s = fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "out of memory for the vocabulary");
        goto done;
    }
    char *p = text;
    for (int64_t i = 0; i < n; i++) {
        tokens[i] = p;
        scores[i] = 0.0f;
        if (i < 3) {
            static const char *const special[] = {"<unk>", "<s>", "</s>"};
            p += sprintf(p, "%s", special[i]);
            types[i] = i == 0 ? UNKNOWN : CONTROL;
        } else if (i < 3 + 256) {
            p += sprintf(p, "<0x%02X>", (unsigned)(i - 3));
            types[i] = BYTE;
        } else {
            uint64_t k = (uint64_t)(i - 259);
            if (k % 2 == 0)
                p += sprintf(p, "\xe2\x96\x81");
            p += word(k / 2, p);
            scores[i] = -(float)(k + 1);
            types[i] = NORMAL;
        }
        *p++ = '\0';
    }
    if ((s = fx_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama", err)) != FX_OK ||
        (s = fx_gguf_writer_set_str(w, "tokenizer.ggml.pre", "default", err)) != FX_OK ||
        (s = fx_gguf_writer_set_str_arr(w, "tokenizer.ggml.tokens", (const char *const *)tokens,
                                        (uint64_t)n, err)) != FX_OK ||
        (s = fx_gguf_writer_set_arr(w, "tokenizer.ggml.scores", FX_GGUF_FLOAT32, scores,
                                    (uint64_t)n, err)) != FX_OK ||
        (s = fx_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", FX_GGUF_INT32, types,
                                    (uint64_t)n, err)) != FX_OK ||
        (s = fx_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1, err)) != FX_OK ||
        (s = fx_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2, err)) != FX_OK ||
        (s = fx_gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0, err)) != FX_OK ||
        (s = fx_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true, err)) != FX_OK)
        goto done;
    s = fx_gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", false, err);
done:
    free(tokens), free(text), free(scores), free(types);
    return s;
}

/* ---- tensor data ----------------------------------------------------------------------------- */

static uint64_t mix64(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Llama 3.1 frequency scaling, as llama.cpp's converter stores it: 1 for short wavelengths, the
 * factor for long ones, a smooth blend between. out: [head_dim / 2]. */
static void llama3_rope_factors(const struct fx_synth_shape *s, int64_t n, float *out) {
    const double factor = 32, low = 1, high = 4, old_ctx = 8192;
    for (int64_t i = 0; i < n; i++) {
        double freq = pow(s->rope_base, -2.0 * (double)i / (double)s->head_dim);
        double wavelen = 2 * M_PI / freq;
        double v;
        if (wavelen < old_ctx / high)
            v = 1;
        else if (wavelen > old_ctx / low)
            v = factor;
        else {
            double smooth = (old_ctx / wavelen - low) / (high - low);
            v = 1 / ((1 - smooth) / factor + smooth);
        }
        out[i] = (float)v;
    }
}

/* A row to generate: row `row` of tensor `index`. */
struct row_gen {
    const struct fx_synth_model *m;
    int64_t index;
};

/* Row `row` of a tensor as f32 values. Each row has its own stream, seeded from the model seed,
 * the tensor and the row, so any run of rows can be generated alone, on any thread. A value is
 * the sum of four 16-bit uniforms from one 64-bit hash, centred and scaled to unit variance:
 * close enough to normal for random weights and much cheaper than Box-Muller. */
static void gen_row(const void *user, int64_t row, float *out) {
    const struct row_gen *g = user;
    const struct fx_synth_tensor *t = &g->m->tensors[g->index];
    const struct fx_synth_shape *s = g->m->shape;
    int64_t n = t->ne[0];
    if (t->role == FX_SYNTH_ROPE_FREQS) {
        llama3_rope_factors(s, n, out);
        return;
    }
    float mean = 0.0f, sigma;
    switch (t->role) {
    case FX_SYNTH_EMBED:
        sigma = 1.0f / sqrtf((float)s->n_embd);
        break;
    case FX_SYNTH_PROJ_IN:
        sigma = 1.0f / sqrtf((float)n);
        break;
    case FX_SYNTH_PROJ_OUT:
        sigma = 0.5f / sqrtf((float)n);
        break;
    case FX_SYNTH_BIAS:
        sigma = 0.02f;
        break;
    case FX_SYNTH_SINK:
        sigma = 1.0f;
        break;
    case FX_SYNTH_DECAY: /* within -1 +- 0.875: every head decays, none at once */
        mean = -1.0f, sigma = 0.25f;
        break;
    default: /* norms */
        mean = 1.0f, sigma = 0.02f;
    }
    /* sqrt(3) / 65536: four uniforms on 0..65535 have variance 4 * (65536^2 - 1) / 12. */
    const float scale = sigma * (1.7320508f / 65536.0f);
    uint64_t base = mix64(g->m->seed ^ mix64(((uint64_t)g->index << 40) ^ (uint64_t)row));
    for (int64_t i = 0; i < n; i++) {
        uint64_t h = mix64(base + (uint64_t)i);
        uint32_t sum = (uint32_t)(h & 0xffff) + (uint32_t)((h >> 16) & 0xffff) +
                       (uint32_t)((h >> 32) & 0xffff) + (uint32_t)(h >> 48);
        /* minus the sum's mean, 4 * 32767.5; every step is exact in f32 */
        out[i] = mean + scale * ((float)sum - 131070.0f);
    }
}

struct gen {
    const struct fx_synth_model *m;
    struct fx_encoder *enc;
    const struct fx_synth_write_params *p;
    uint64_t done, total;
};

static fx_status fill(void *user, int64_t index, uint64_t offset, void *dst, uint64_t size,
                      struct fx_error *err) {
    struct gen *g = user;
    const struct fx_synth_tensor *t = &g->m->tensors[index];
    uint64_t row_bytes;
    fx_type_row_bytes(t->type, t->ne[0], &row_bytes); /* checked when the writer took it */
    struct row_gen rg = {g->m, index};
    int64_t n_rows = (int64_t)(size / row_bytes);
    fx_status st = fx_encoder_run(g->enc, t->type, t->ne[0], (int64_t)(offset / row_bytes), n_rows,
                                  gen_row, &rg, dst, err);
    g->done += (uint64_t)(n_rows * t->ne[0]);
    if (st == FX_OK && g->p->progress)
        g->p->progress(g->p->progress_user, g->done, g->total);
    return st;
}

fx_status fx_synth_write(const struct fx_synth_model *m, const char *path,
                         const struct fx_synth_write_params *params, struct fx_error *err) {
    static const struct fx_synth_write_params defaults = {0};
    struct gen g = {.m = m, .p = params ? params : &defaults};
    struct fx_gguf_writer *w;
    fx_status s = fx_gguf_writer_create(&w, err);
    if (s != FX_OK)
        return s;
    int64_t max_row = 1;
    if ((s = set_metadata(w, m, err)) != FX_OK ||
        (s = set_vocabulary(w, m->shape->n_vocab, err)) != FX_OK)
        goto done;
    for (int64_t i = 0; i < m->n_tensors; i++) {
        const struct fx_synth_tensor *t = &m->tensors[i];
        if ((s = fx_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, NULL, err)) !=
            FX_OK)
            goto done;
        if (t->ne[0] > max_row)
            max_row = t->ne[0];
        g.total += (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2]);
    }
    if ((s = fx_encoder_create(g.p->n_threads, max_row, &g.enc, err)) == FX_OK)
        s = fx_gguf_writer_write(w, path, fill, &g, err);
done:
    fx_encoder_free(g.enc);
    fx_gguf_writer_free(w);
    return s;
}
