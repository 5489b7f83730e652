/* Shared loading steps: typed metadata reads and checked tensor lookups (see loader.h). */
#include "model/loader.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "core/error.h"

/* ---- metadata ------------------------------------------------------------------------------ */

static const struct fx_gguf_kv *find_arch_kv(struct fx_loader *ld, const char *suffix, char *key,
                                             size_t key_size) {
    snprintf(key, key_size, "%s.%s", ld->m->arch, suffix);
    return fx_gguf_find_kv(ld->g, key);
}

static bool kv_int(const struct fx_gguf_kv *kv, int64_t *out) {
    switch (kv->type) {
    case FX_GGUF_UINT8:
        *out = kv->v.u8;
        return true;
    case FX_GGUF_INT8:
        *out = kv->v.i8;
        return true;
    case FX_GGUF_UINT16:
        *out = kv->v.u16;
        return true;
    case FX_GGUF_INT16:
        *out = kv->v.i16;
        return true;
    case FX_GGUF_UINT32:
        *out = kv->v.u32;
        return true;
    case FX_GGUF_INT32:
        *out = kv->v.i32;
        return true;
    case FX_GGUF_INT64:
        *out = kv->v.i64;
        return true;
    case FX_GGUF_UINT64:
        if (kv->v.u64 > INT64_MAX)
            return false;
        *out = (int64_t)kv->v.u64;
        return true;
    default:
        return false;
    }
}

static fx_status read_int(struct fx_loader *ld, const char *suffix, int64_t lo, int64_t hi,
                          int32_t *out, bool required) {
    char key[160];
    const struct fx_gguf_kv *kv = find_arch_kv(ld, suffix, key, sizeof key);
    if (!kv) {
        if (!required)
            return FX_OK;
        return fx_error_set(ld->err, FX_ERR_FORMAT, FX_NO_OFFSET, "missing key '%s'", key);
    }
    int64_t v;
    if (!kv_int(kv, &v))
        return fx_error_set(ld->err, FX_ERR_FORMAT, FX_NO_OFFSET,
                            "key '%s' has type %s, expected an integer", key,
                            fx_gguf_type_name(kv->type));
    if (v < lo || v > hi)
        return fx_error_set(ld->err, FX_ERR_FORMAT, FX_NO_OFFSET,
                            "key '%s' is %lld, expected %lld..%lld", key, (long long)v,
                            (long long)lo, (long long)hi);
    *out = (int32_t)v;
    return FX_OK;
}

fx_status fx_ld_int(struct fx_loader *ld, const char *suffix, int64_t lo, int64_t hi,
                    int32_t *out) {
    return read_int(ld, suffix, lo, hi, out, true);
}

fx_status fx_ld_int_opt(struct fx_loader *ld, const char *suffix, int64_t lo, int64_t hi,
                        int32_t *out) {
    return read_int(ld, suffix, lo, hi, out, false);
}

static fx_status read_float(struct fx_loader *ld, const char *suffix, double lo, double hi,
                            float *out, bool required) {
    char key[160];
    const struct fx_gguf_kv *kv = find_arch_kv(ld, suffix, key, sizeof key);
    if (!kv) {
        if (!required)
            return FX_OK;
        return fx_error_set(ld->err, FX_ERR_FORMAT, FX_NO_OFFSET, "missing key '%s'", key);
    }
    double v;
    int64_t iv;
    if (kv->type == FX_GGUF_FLOAT32)
        v = kv->v.f32;
    else if (kv->type == FX_GGUF_FLOAT64)
        v = kv->v.f64;
    else if (kv_int(kv, &iv))
        v = (double)iv;
    else
        return fx_error_set(ld->err, FX_ERR_FORMAT, FX_NO_OFFSET,
                            "key '%s' has type %s, expected a number", key,
                            fx_gguf_type_name(kv->type));
    if (!isfinite(v) || v < lo || v > hi)
        return fx_error_set(ld->err, FX_ERR_FORMAT, FX_NO_OFFSET, "key '%s' is %g, expected %g..%g",
                            key, v, lo, hi);
    *out = (float)v;
    return FX_OK;
}

fx_status fx_ld_float(struct fx_loader *ld, const char *suffix, double lo, double hi, float *out) {
    return read_float(ld, suffix, lo, hi, out, true);
}

fx_status fx_ld_float_opt(struct fx_loader *ld, const char *suffix, double lo, double hi,
                          float *out) {
    return read_float(ld, suffix, lo, hi, out, false);
}

fx_status fx_ld_str_opt(struct fx_loader *ld, const char *suffix, const char **out) {
    char key[160];
    const struct fx_gguf_kv *kv = find_arch_kv(ld, suffix, key, sizeof key);
    *out = NULL;
    if (!kv)
        return FX_OK;
    if (kv->type != FX_GGUF_STRING)
        return fx_error_set(ld->err, FX_ERR_FORMAT, FX_NO_OFFSET,
                            "key '%s' has type %s, expected string", key,
                            fx_gguf_type_name(kv->type));
    *out = kv->v.str.data;
    return FX_OK;
}

/* Limits far beyond any real model; they reject garbage before it sizes an allocation. */
#define MAX_EMBD     (1 << 17)
#define MAX_LAYERS   4096
#define MAX_HEADS    4096
#define MAX_HEAD_DIM 4096
#define MAX_FF       (1 << 20)
#define MAX_EXPERTS  4096
#define MAX_CTX      (1 << 26)

static fx_status read_rope_scaling(struct fx_loader *ld) {
    struct fx_hparams *hp = &ld->m->hp;
    struct fx_rope_config *r = &hp->rope;
    fx_status st;
    const char *type = NULL;
    float factor = 0.0f;
    if ((st = fx_ld_str_opt(ld, "rope.scaling.type", &type)) ||
        (st = fx_ld_float_opt(ld, "rope.scaling.factor", 0.0, 1e6, &factor)))
        return st;
    if (factor == 0.0f && (st = fx_ld_float_opt(ld, "rope.scale_linear", 0.0, 1e6, &factor)))
        return st;
    if (!type)
        type = factor > 1.0f ? "linear" : "none";

    r->freq_scale = 1.0f;
    r->ext_factor = 0.0f;
    r->attn_factor = 1.0f;
    r->beta_fast = 32.0f;
    r->beta_slow = 1.0f;
    r->n_ctx_orig = hp->n_ctx_train;
    if (strcmp(type, "none") == 0)
        return FX_OK;
    if (factor <= 0.0f)
        return fx_error_set(ld->err, FX_ERR_FORMAT, FX_NO_OFFSET,
                            "rope scaling '%s' needs key '%s.rope.scaling.factor' > 0", type,
                            ld->m->arch);
    if (strcmp(type, "linear") == 0) {
        r->freq_scale = 1.0f / factor;
        return FX_OK;
    }
    if (strcmp(type, "yarn") == 0) {
        r->freq_scale = 1.0f / factor;
        r->ext_factor = 1.0f;
        if ((st = fx_ld_int_opt(ld, "rope.scaling.original_context_length", 1, MAX_CTX,
                                &r->n_ctx_orig)) ||
            (st = fx_ld_float_opt(ld, "rope.scaling.yarn_beta_fast", 0.0, 1e4, &r->beta_fast)) ||
            (st = fx_ld_float_opt(ld, "rope.scaling.yarn_beta_slow", 0.0, 1e4, &r->beta_slow)) ||
            (st = fx_ld_float_opt(ld, "rope.scaling.attn_factor", 0.0, 1e4, &r->attn_factor)))
            return st;
        return FX_OK;
    }
    return fx_error_set(ld->err, FX_ERR_UNSUPPORTED, FX_NO_OFFSET,
                        "key '%s.rope.scaling.type' is '%s'; supported: none, linear, yarn",
                        ld->m->arch, type);
}

fx_status fx_ld_common_hparams(struct fx_loader *ld) {
    struct fx_hparams *hp = &ld->m->hp;
    fx_status st;
    if ((st = fx_ld_int(ld, "context_length", 1, MAX_CTX, &hp->n_ctx_train)) ||
        (st = fx_ld_int(ld, "embedding_length", 1, MAX_EMBD, &hp->n_embd)) ||
        (st = fx_ld_int(ld, "block_count", 1, MAX_LAYERS, &hp->n_layer)) ||
        (st = fx_ld_int(ld, "attention.head_count", 1, MAX_HEADS, &hp->n_head)))
        return st;
    hp->n_head_kv = hp->n_head;
    hp->head_dim = hp->n_embd / hp->n_head;
    hp->n_ff = 0;
    if ((st = fx_ld_int_opt(ld, "attention.head_count_kv", 1, MAX_HEADS, &hp->n_head_kv)) ||
        (st = fx_ld_int_opt(ld, "attention.key_length", 1, MAX_HEAD_DIM, &hp->head_dim)) ||
        (st = fx_ld_int_opt(ld, "feed_forward_length", 0, MAX_FF, &hp->n_ff)))
        return st;
    hp->head_dim_v = hp->head_dim;
    if ((st = fx_ld_int_opt(ld, "attention.value_length", 1, MAX_HEAD_DIM, &hp->head_dim_v)) ||
        (st = fx_ld_float(ld, "attention.layer_norm_rms_epsilon", 1e-12, 1.0, &hp->rms_eps)))
        return st;
    if (hp->n_head % hp->n_head_kv != 0)
        return fx_error_set(ld->err, FX_ERR_FORMAT, FX_NO_OFFSET,
                            "%s: head_count %d is not a multiple of head_count_kv %d", ld->m->arch,
                            hp->n_head, hp->n_head_kv);
    if (hp->head_dim == 0)
        return fx_error_set(ld->err, FX_ERR_FORMAT, FX_NO_OFFSET,
                            "%s: embedding_length %d < head_count %d and no key_length",
                            ld->m->arch, hp->n_embd, hp->n_head);

    struct fx_rope_config *r = &hp->rope;
    r->kind = FX_ROPE_NORMAL;
    r->n_rot = hp->head_dim;
    r->freq_base = 10000.0f;
    if ((st = fx_ld_int_opt(ld, "rope.dimension_count", 2, hp->head_dim, &r->n_rot)) ||
        (st = fx_ld_float_opt(ld, "rope.freq_base", 1e-3, 1e12, &r->freq_base)))
        return st;
    if (r->n_rot % 2 != 0)
        return fx_error_set(ld->err, FX_ERR_FORMAT, FX_NO_OFFSET,
                            "key '%s.rope.dimension_count' is %d, expected an even number",
                            ld->m->arch, r->n_rot);
    r->freq_base_swa = r->freq_base;
    if ((st = fx_ld_float_opt(ld, "rope.freq_base_swa", 1e-3, 1e12, &r->freq_base_swa)) ||
        (st = read_rope_scaling(ld)))
        return st;
    r->freq_scale_swa = r->freq_scale;

    hp->embd_scale = 1.0f;
    hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim);
    hp->attn_softcap = 0.0f;
    hp->final_softcap = 0.0f;
    hp->n_swa = 0;
    hp->act = FX_FFN_SILU;
    hp->act_limit = 0.0f;
    hp->n_expert = hp->n_expert_used = hp->n_ff_exp = 0;
    hp->router = FX_ROUTER_SOFTMAX_TOPK;
    hp->expert_weights_norm = true;
    if ((st = fx_ld_float_opt(ld, "attention.scale", 1e-6, 1e6, &hp->attn_scale)) ||
        (st = fx_ld_int_opt(ld, "attention.sliding_window", 0, MAX_CTX, &hp->n_swa)) ||
        (st = fx_ld_int_opt(ld, "expert_count", 0, MAX_EXPERTS, &hp->n_expert)) ||
        (st = fx_ld_int_opt(ld, "expert_used_count", 0, MAX_EXPERTS, &hp->n_expert_used)) ||
        (st = fx_ld_int_opt(ld, "expert_feed_forward_length", 0, MAX_FF, &hp->n_ff_exp)))
        return st;
    if (hp->n_expert > 0) {
        if (hp->n_expert_used < 1 || hp->n_expert_used > hp->n_expert)
            return fx_error_set(ld->err, FX_ERR_FORMAT, FX_NO_OFFSET,
                                "%s: expert_used_count %d, expected 1..expert_count (%d)",
                                ld->m->arch, hp->n_expert_used, hp->n_expert);
        if (hp->n_ff_exp == 0)
            hp->n_ff_exp = hp->n_ff;
        if (hp->n_ff_exp == 0)
            return fx_error_set(ld->err, FX_ERR_FORMAT, FX_NO_OFFSET,
                                "%s: mixture of experts without an expert feed-forward length",
                                ld->m->arch);
    } else if (hp->n_ff == 0) {
        return fx_error_set(ld->err, FX_ERR_FORMAT, FX_NO_OFFSET,
                            "missing key '%s.feed_forward_length'", ld->m->arch);
    }
    return FX_OK;
}

/* ---- tensors ------------------------------------------------------------------------------- */

static void tensor_name(char *buf, size_t size, int il, const char *suffix) {
    if (il >= 0)
        snprintf(buf, size, "blk.%d.%s", il, suffix);
    else
        snprintf(buf, size, "%s", suffix);
}

static void format_shape(char *buf, size_t size, const int64_t *ne, uint32_t n_dims) {
    int off = snprintf(buf, size, "[");
    for (uint32_t d = 0; d < n_dims && off > 0 && (size_t)off < size; d++)
        off += snprintf(buf + off, size - (size_t)off, d ? ", %lld" : "%lld", (long long)ne[d]);
    if (off > 0 && (size_t)off < size)
        snprintf(buf + off, size - (size_t)off, "]");
}

/* Finds a tensor and checks its shape against ne[0..n_dims). *out is NULL when optional and
 * absent. */
static fx_status find_shaped(struct fx_loader *ld, int il, const char *suffix, const int64_t *ne,
                             uint32_t n_dims, enum fx_ld_need need,
                             const struct fx_tensor_view **out) {
    char name[128];
    tensor_name(name, sizeof name, il, suffix);
    const struct fx_tensor_view *t = fx_gguf_find_tensor(ld->g, name);
    *out = NULL;
    if (!t) {
        if (need == FX_LD_OPTIONAL)
            return FX_OK;
        return fx_error_set(ld->err, FX_ERR_FORMAT, FX_NO_OFFSET, "missing tensor '%s'", name);
    }
    bool same = true;
    for (uint32_t d = 0; d < FX_GGUF_MAX_DIMS; d++)
        same = same && t->ne[d] == (d < n_dims ? ne[d] : 1);
    if (!same) {
        char want[96], got[96];
        format_shape(want, sizeof want, ne, n_dims);
        format_shape(got, sizeof got, t->ne, t->n_dims);
        return fx_error_set(ld->err, FX_ERR_FORMAT, FX_NO_OFFSET,
                            "tensor '%s' has shape %s, expected %s", name, got, want);
    }
    *out = t;
    return FX_OK;
}

/* The kernels read block fields and f32 rows in place, so weight data must keep the natural
 * alignment of its type; GGUF's default 32-byte alignment guarantees it. */
static fx_status check_weight(struct fx_loader *ld, const struct fx_tensor_view *t) {
    const struct fx_type_ops *ops = &fx_kernels()->types[t->type];
    if (!ops->vec_dot)
        return fx_error_set(ld->err, FX_ERR_UNSUPPORTED, FX_NO_OFFSET,
                            "tensor '%s' has type %s, which ferrox cannot compute with", t->name,
                            fx_type_name(t->type));
    unsigned align = t->type == FX_TYPE_F32 || t->type == FX_TYPE_Q8_K ? 4 : 2;
    if (t->type == FX_TYPE_MXFP4)
        align = 1;
    if ((uintptr_t)t->data % align != 0)
        return fx_error_set(ld->err, FX_ERR_FORMAT, t->offset,
                            "tensor '%s' data is not %u-byte aligned", t->name, align);
    return FX_OK;
}

static void mat_from_view(const struct fx_tensor_view *t, struct fx_mat *out) {
    *out = (struct fx_mat){
        .type = t->type,
        .ne0 = t->ne[0],
        .ne1 = t->ne[1],
        .row_bytes = t->n_bytes / (uint64_t)(t->ne[1] * t->ne[2] * t->ne[3]),
        .data = t->data,
    };
}

fx_status fx_ld_mat(struct fx_loader *ld, int il, const char *suffix, int64_t ne0, int64_t ne1,
                    enum fx_ld_need need, struct fx_mat *out) {
    const struct fx_tensor_view *t;
    int64_t ne[2] = {ne0, ne1};
    fx_status st = find_shaped(ld, il, suffix, ne, 2, need, &t);
    *out = (struct fx_mat){0};
    if (st || !t)
        return st;
    if ((st = check_weight(ld, t)))
        return st;
    mat_from_view(t, out);
    return FX_OK;
}

fx_status fx_ld_experts(struct fx_loader *ld, int il, const char *suffix, int64_t ne0, int64_t ne1,
                        int64_t n_expert, enum fx_ld_need need, struct fx_experts *out) {
    const struct fx_tensor_view *t;
    int64_t ne[3] = {ne0, ne1, n_expert};
    fx_status st = find_shaped(ld, il, suffix, ne, 3, need, &t);
    *out = (struct fx_experts){0};
    if (st || !t)
        return st;
    if ((st = check_weight(ld, t)))
        return st;
    mat_from_view(t, &out->per);
    out->n_expert = n_expert;
    out->expert_bytes = out->per.row_bytes * (uint64_t)ne1;
    return FX_OK;
}

fx_status fx_ld_vec(struct fx_loader *ld, int il, const char *suffix, int64_t n, int64_t n2,
                    enum fx_ld_need need, const float **out) {
    const struct fx_tensor_view *t;
    int64_t ne[2] = {n, n2};
    fx_status st = find_shaped(ld, il, suffix, ne, n2 > 1 ? 2 : 1, need, &t);
    *out = NULL;
    if (st || !t)
        return st;
    if (t->type != FX_TYPE_F32)
        return fx_error_set(ld->err, FX_ERR_UNSUPPORTED, FX_NO_OFFSET,
                            "tensor '%s' has type %s; norm, bias and sink vectors must be F32",
                            t->name, fx_type_name(t->type));
    struct fx_model *m = ld->m;
    if (m->n_vecs == m->cap_vecs) {
        int64_t cap = m->cap_vecs ? 2 * m->cap_vecs : 64;
        float **grown = realloc(m->vecs, (size_t)cap * sizeof *grown);
        if (!grown)
            return fx_error_set(ld->err, FX_ERR_NOMEM, FX_NO_OFFSET, "out of memory");
        m->vecs = grown;
        m->cap_vecs = cap;
    }
    /* A copy: aligned whatever the file's alignment, and the decoder may read it often. */
    float *copy = malloc((size_t)t->n_bytes);
    if (!copy)
        return fx_error_set(ld->err, FX_ERR_NOMEM, FX_NO_OFFSET,
                            "out of memory copying tensor '%s'", t->name);
    memcpy(copy, t->data, (size_t)t->n_bytes);
    for (int64_t i = 0; i < t->n_elements; i++)
        if (!isfinite(copy[i])) {
            free(copy);
            return fx_error_set(ld->err, FX_ERR_FORMAT, t->offset + (uint64_t)i * 4,
                                "tensor '%s' element %lld is not finite", t->name, (long long)i);
        }
    m->vecs[m->n_vecs++] = copy;
    *out = copy;
    return FX_OK;
}

fx_status fx_ld_attention(struct fx_loader *ld, int il, unsigned flags) {
    const struct fx_hparams *hp = &ld->m->hp;
    struct fx_layer *l = &ld->m->layers[il];
    int64_t q_dim = (int64_t)hp->n_head * hp->head_dim;
    int64_t k_dim = (int64_t)hp->n_head_kv * hp->head_dim;
    int64_t v_dim = (int64_t)hp->n_head_kv * hp->head_dim_v;
    int64_t o_dim = (int64_t)hp->n_head * hp->head_dim_v;
    enum fx_ld_need qkv_bias = (flags & FX_LD_QKV_BIAS) ? FX_LD_REQUIRED : FX_LD_OPTIONAL;
    enum fx_ld_need o_bias = (flags & FX_LD_O_BIAS) ? FX_LD_REQUIRED : FX_LD_OPTIONAL;
    bool any_bias = flags & (FX_LD_QKV_BIAS | FX_LD_O_BIAS | FX_LD_BIAS_OPTIONAL);
    fx_status st;
    if ((st =
             fx_ld_vec(ld, il, "attn_norm.weight", hp->n_embd, 1, FX_LD_REQUIRED, &l->attn_norm)) ||
        (st = fx_ld_mat(ld, il, "attn_q.weight", hp->n_embd, q_dim, FX_LD_REQUIRED, &l->wq)) ||
        (st = fx_ld_mat(ld, il, "attn_k.weight", hp->n_embd, k_dim, FX_LD_REQUIRED, &l->wk)) ||
        (st = fx_ld_mat(ld, il, "attn_v.weight", hp->n_embd, v_dim, FX_LD_REQUIRED, &l->wv)) ||
        (st = fx_ld_mat(ld, il, "attn_output.weight", o_dim, hp->n_embd, FX_LD_REQUIRED, &l->wo)))
        return st;
    if (any_bias && ((st = fx_ld_vec(ld, il, "attn_q.bias", q_dim, 1, qkv_bias, &l->bq)) ||
                     (st = fx_ld_vec(ld, il, "attn_k.bias", k_dim, 1, qkv_bias, &l->bk)) ||
                     (st = fx_ld_vec(ld, il, "attn_v.bias", v_dim, 1, qkv_bias, &l->bv)) ||
                     (st = fx_ld_vec(ld, il, "attn_output.bias", hp->n_embd, 1, o_bias, &l->bo))))
        return st;
    if ((flags & FX_LD_QK_NORM) && ((st = fx_ld_vec(ld, il, "attn_q_norm.weight", hp->head_dim, 1,
                                                    FX_LD_REQUIRED, &l->q_norm)) ||
                                    (st = fx_ld_vec(ld, il, "attn_k_norm.weight", hp->head_dim, 1,
                                                    FX_LD_REQUIRED, &l->k_norm))))
        return st;
    if ((flags & FX_LD_SINKS) &&
        (st = fx_ld_vec(ld, il, "attn_sinks.weight", hp->n_head, 1, FX_LD_REQUIRED, &l->sinks)))
        return st;
    if ((flags & FX_LD_POST_ATTN_NORM) &&
        (st = fx_ld_vec(ld, il, "post_attention_norm.weight", hp->n_embd, 1, FX_LD_REQUIRED,
                        &l->post_attn_norm)))
        return st;
    return FX_OK;
}

fx_status fx_ld_ffn(struct fx_loader *ld, int il, const char *norm, unsigned flags) {
    const struct fx_hparams *hp = &ld->m->hp;
    struct fx_layer *l = &ld->m->layers[il];
    char norm_name[64];
    snprintf(norm_name, sizeof norm_name, "%s.weight", norm);
    fx_status st;
    if ((st = fx_ld_vec(ld, il, norm_name, hp->n_embd, 1, FX_LD_REQUIRED, &l->ffn_norm)))
        return st;
    if ((flags & FX_LD_POST_FFN_NORM) && (st = fx_ld_vec(ld, il, "post_ffw_norm.weight", hp->n_embd,
                                                         1, FX_LD_REQUIRED, &l->post_ffn_norm)))
        return st;
    if (hp->n_expert == 0) {
        if ((st = fx_ld_mat(ld, il, "ffn_gate.weight", hp->n_embd, hp->n_ff, FX_LD_REQUIRED,
                            &l->ffn_gate)) ||
            (st = fx_ld_mat(ld, il, "ffn_up.weight", hp->n_embd, hp->n_ff, FX_LD_REQUIRED,
                            &l->ffn_up)) ||
            (st = fx_ld_mat(ld, il, "ffn_down.weight", hp->n_ff, hp->n_embd, FX_LD_REQUIRED,
                            &l->ffn_down)))
            return st;
        return FX_OK;
    }
    int64_t ne = hp->n_expert, ff = hp->n_ff_exp;
    enum fx_ld_need bias = (flags & FX_LD_MOE_BIASES) ? FX_LD_REQUIRED : FX_LD_OPTIONAL;
    if ((st = fx_ld_mat(ld, il, "ffn_gate_inp.weight", hp->n_embd, ne, FX_LD_REQUIRED,
                        &l->router)) ||
        (st = fx_ld_experts(ld, il, "ffn_gate_exps.weight", hp->n_embd, ff, ne, FX_LD_REQUIRED,
                            &l->gate_exps)) ||
        (st = fx_ld_experts(ld, il, "ffn_up_exps.weight", hp->n_embd, ff, ne, FX_LD_REQUIRED,
                            &l->up_exps)) ||
        (st = fx_ld_experts(ld, il, "ffn_down_exps.weight", ff, hp->n_embd, ne, FX_LD_REQUIRED,
                            &l->down_exps)) ||
        (st = fx_ld_vec(ld, il, "ffn_gate_inp.bias", ne, 1, bias, &l->router_b)) ||
        (st = fx_ld_vec(ld, il, "ffn_gate_exps.bias", ff, ne, bias, &l->gate_exps_b)) ||
        (st = fx_ld_vec(ld, il, "ffn_up_exps.bias", ff, ne, bias, &l->up_exps_b)) ||
        (st = fx_ld_vec(ld, il, "ffn_down_exps.bias", hp->n_embd, ne, bias, &l->down_exps_b)))
        return st;
    return FX_OK;
}

fx_status fx_ld_embeddings(struct fx_loader *ld) {
    struct fx_model *m = ld->m;
    struct fx_hparams *hp = &m->hp;
    const struct fx_tensor_view *t = fx_gguf_find_tensor(ld->g, "token_embd.weight");
    if (!t)
        return fx_error_set(ld->err, FX_ERR_FORMAT, FX_NO_OFFSET,
                            "missing tensor 'token_embd.weight'");
    if (t->n_dims != 2 || t->ne[0] != hp->n_embd || t->ne[1] < 1 || t->ne[1] > INT32_MAX)
        return fx_error_set(ld->err, FX_ERR_FORMAT, FX_NO_OFFSET,
                            "tensor 'token_embd.weight' has shape [%lld, %lld], expected "
                            "[%d, n_vocab]",
                            (long long)t->ne[0], (long long)t->ne[1], hp->n_embd);
    hp->n_vocab = (int32_t)t->ne[1];
    fx_status st;
    if ((st = fx_ld_mat(ld, -1, "token_embd.weight", hp->n_embd, hp->n_vocab, FX_LD_REQUIRED,
                        &m->tok_embd)) ||
        (st = fx_ld_vec(ld, -1, "output_norm.weight", hp->n_embd, 1, FX_LD_REQUIRED,
                        &m->output_norm)) ||
        (st = fx_ld_mat(ld, -1, "output.weight", hp->n_embd, hp->n_vocab, FX_LD_OPTIONAL,
                        &m->output)))
        return st;
    m->tied_output = m->output.data == NULL;
    if (m->tied_output)
        m->output = m->tok_embd;
    return FX_OK;
}

void fx_ld_swa_pattern(struct fx_loader *ld, int period) {
    struct fx_model *m = ld->m;
    for (int il = 0; il < m->hp.n_layer; il++) {
        struct fx_layer *l = &m->layers[il];
        l->swa = m->hp.n_swa > 0 && period > 1 && il % period != period - 1;
        l->rope_base = l->swa ? m->hp.rope.freq_base_swa : m->hp.rope.freq_base;
        l->rope_freq_scale = l->swa ? m->hp.rope.freq_scale_swa : m->hp.rope.freq_scale;
    }
}
