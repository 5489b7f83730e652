/* llama-quantize's per-tensor type choices (see quant.h), restated from what llama.cpp
 * (src/llama-quant.cpp) does for the file types ferrox can write, without an importance matrix
 * and without its manual per-tensor overrides. */
#include "model/quant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "model/ftype.h"

/* llama_ftype ids of the file types with rules of their own. */
enum {
    FT_Q2_K = 10,
    FT_Q3_K_S = 11,
    FT_Q3_K_M = 12,
    FT_Q3_K_L = 13,
    FT_Q4_K_S = 14,
    FT_Q4_K_M = 15,
    FT_Q5_K_S = 16,
    FT_Q5_K_M = 17,
    FT_IQ4_NL = 25,
    FT_IQ4_XS = 30,
    FT_MXFP4_MOE = 38,
};

/* ---- model description ----------------------------------------------------------------------- */

/* An integer key, or the first element of an integer array (per-layer values); `dflt` when
 * absent. */
static fx_status get_count(const struct fx_gguf *g, const char *arch, const char *suffix,
                           bool required, int32_t dflt, int32_t *out, struct fx_error *err) {
    char key[160];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    const struct fx_gguf_kv *kv = fx_gguf_find_kv(g, key);
    *out = dflt;
    if (!kv)
        return required ? fx_error_set(err, FX_ERR_FORMAT, FX_NO_OFFSET, "missing key '%s'", key)
                        : FX_OK;
    if (kv->type == FX_GGUF_ARRAY && kv->arr_n > 0 &&
        (kv->arr_type == FX_GGUF_UINT32 || kv->arr_type == FX_GGUF_INT32)) {
        int64_t v = kv->arr_type == FX_GGUF_UINT32 ? (int64_t)((const uint32_t *)kv->v.arr)[0]
                                                   : ((const int32_t *)kv->v.arr)[0];
        if (v < 0 || v > INT32_MAX)
            return fx_error_set(err, FX_ERR_FORMAT, FX_NO_OFFSET, "key '%s' starts with %lld", key,
                                (long long)v);
        *out = (int32_t)v;
        return FX_OK;
    }
    uint32_t v;
    fx_status st = fx_gguf_get_u32(g, key, &v, err);
    if (st != FX_OK)
        return st;
    if (v > INT32_MAX)
        return fx_error_set(err, FX_ERR_FORMAT, FX_NO_OFFSET, "key '%s' is %u", key, v);
    *out = (int32_t)v;
    return FX_OK;
}

fx_status fx_quant_model_from_gguf(const struct fx_gguf *g, struct fx_quant_model *out,
                                   struct fx_error *err) {
    struct fx_gguf_str arch;
    fx_status st = fx_gguf_get_str(g, "general.architecture", &arch, err);
    if (st == FX_ERR_NOT_FOUND)
        return fx_error_set(err, FX_ERR_FORMAT, FX_NO_OFFSET, "missing key 'general.architecture'");
    if (st != FX_OK)
        return st;
    *out = (struct fx_quant_model){.arch = arch.data};
    if ((st = get_count(g, arch.data, "block_count", true, 0, &out->n_layer, err)) ||
        (st = get_count(g, arch.data, "attention.head_count", false, 0, &out->n_head, err)) ||
        (st = get_count(g, arch.data, "attention.head_count_kv", false, out->n_head,
                        &out->n_head_kv, err)) ||
        (st = get_count(g, arch.data, "expert_count", false, 0, &out->n_expert, err)))
        return st;
    return FX_OK;
}

/* ---- order ----------------------------------------------------------------------------------- */

/* The block number of "blk.N....", or -1 for a tensor outside the blocks. */
static long layer_of(const char *name) {
    if (strncmp(name, "blk.", 4) != 0)
        return -1;
    char *end;
    long v = strtol(name + 4, &end, 10);
    return end == name + 4 ? -1 : v;
}

struct keyed {
    long layer;
    const char *name;
    int64_t index;
};

static int keyed_cmp(const void *pa, const void *pb) {
    const struct keyed *a = pa, *b = pb;
    if (a->layer != b->layer)
        return a->layer < b->layer ? -1 : 1;
    int c = strcmp(a->name, b->name);
    if (c != 0)
        return c;
    return a->index < b->index ? -1 : a->index > b->index;
}

fx_status fx_quant_order(const struct fx_quant_tensor *tensors, int64_t n, int64_t *order,
                         struct fx_error *err) {
    struct keyed *k = malloc((size_t)(n > 0 ? n : 1) * sizeof *k);
    if (!k)
        return fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "out of memory ordering tensors");
    for (int64_t i = 0; i < n; i++)
        k[i] = (struct keyed){layer_of(tensors[i].name), tensors[i].name, i};
    qsort(k, (size_t)n, sizeof *k, keyed_cmp);
    for (int64_t i = 0; i < n; i++)
        order[i] = k[i].index;
    free(k);
    return FX_OK;
}

/* ---- which tensors are converted ------------------------------------------------------------- */

/* Tensors llama.cpp never converts although they are 2-D weights, by name fragment: norms, MoE
 * routers, and small or special tensors of other architectures (so that such files stay what
 * llama.cpp expects). */
static const char *const keep_fragments[] = {
    "_norm.weight",
    "ffn_gate_inp.weight",
    "ffn_gate_tid2eid.weight",
    "altup",
    "laurel",
    "per_layer_model_proj",
    "ssm_conv1d",
    "shortconv.conv.weight",
    "indexer.k_proj.weight",
    "indexer.q_proj.weight",
    "time_mix_first.weight",
    "time_mix_w0.weight",
    "time_mix_w1.weight",
    "time_mix_w2.weight",
    "time_mix_v0.weight",
    "time_mix_v1.weight",
    "time_mix_v2.weight",
    "time_mix_a0.weight",
    "time_mix_a1.weight",
    "time_mix_a2.weight",
    "time_mix_g1.weight",
    "time_mix_g2.weight",
    "time_mix_decay_w1.weight",
    "time_mix_decay_w2.weight",
    "time_mix_lerp_fused.weight",
    "attn_rel_b.weight",
    ".position_embd",
    "sam.pos_embd",
    "sam.neck.",
    "sam.net_",
    ".rel_pos",
    ".patch_embd",
    ".patch_merger",
    "a.rvq.codebook",
    "mm.a.code_embd",
};

static bool converted(const struct fx_quant_tensor *t) {
    /* ggml's dimension count: trailing dimensions of 1 do not count, so [n, 1] is 1-D. */
    int dims = 1;
    for (int d = 1; d < FX_GGUF_MAX_DIMS; d++)
        if (t->ne[d] > 1)
            dims = d + 1;
    size_t len = strlen(t->name);
    if (dims < 2 || len < 6 || strcmp(t->name + len - 6, "weight") != 0)
        return false;
    if (strcmp(t->name, "position_embd.weight") == 0 || strcmp(t->name, "token_types.weight") == 0)
        return false;
    for (size_t i = 0; i < sizeof keep_fragments / sizeof keep_fragments[0]; i++)
        if (strstr(t->name, keep_fragments[i]))
            return false;
    return true;
}

/* ---- the mixes ------------------------------------------------------------------------------- */

enum category {
    CAT_OUTPUT,
    CAT_TOKEN_EMBD,
    CAT_ATTN_V, /* attn_v, and the fused attn_qkv / attn_kv_b that contain it */
    CAT_ATTN_K,
    CAT_ATTN_OUTPUT,
    CAT_FFN_DOWN, /* dense, expert and shared-expert down projections */
    CAT_OTHER,
};

static enum category category_of(const char *name) {
    if (strcmp(name, "output.weight") == 0)
        return CAT_OUTPUT;
    if (strcmp(name, "token_embd.weight") == 0)
        return CAT_TOKEN_EMBD;
    if (strstr(name, "attn_qkv.weight") || strstr(name, "attn_kv_b.weight") ||
        strstr(name, "attn_v.weight"))
        return CAT_ATTN_V;
    if (strstr(name, "attn_k.weight"))
        return CAT_ATTN_K;
    if (strstr(name, "attn_output.weight"))
        return CAT_ATTN_OUTPUT;
    if (strstr(name, "ffn_down"))
        return CAT_FFN_DOWN;
    return CAT_OTHER;
}

struct mix {
    const struct fx_quant_model *m;
    uint32_t ftype;
    enum fx_type base;
    bool falcon, big_llama, tied;
    int n_attn_v, i_attn_v; /* attn_v-like tensors in the model, and seen so far */
    int i_ffn_down;         /* ffn_down tensors seen so far (dense models) */
};

/* The layers llama.cpp gives more bits in the _M mixes: the first and last eighth, and every
 * third one between. */
static bool more_bits(int i, int n) {
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

static bool is_ftype(const struct mix *x, uint32_t a, uint32_t b) {
    return x->ftype == a || x->ftype == b;
}

/* The output projection (or the token embedding that doubles as it): Q6_K, or Q8_0 where Q6_K
 * does not fit or the file is Q8_0 / MXFP4_MOE. */
static enum fx_type output_type(const struct mix *x, const struct fx_quant_tensor *t) {
    if (x->ftype == FT_MXFP4_MOE || x->falcon || t->ne[0] % fx_type_block_elems(x->base) != 0)
        return FX_TYPE_Q8_0;
    return x->base == FX_TYPE_Q8_0 ? FX_TYPE_Q8_0 : FX_TYPE_Q6_K;
}

static enum fx_type attn_v_type(struct mix *x) {
    const struct fx_quant_model *m = x->m;
    int gqa = m->n_head_kv > 0 ? m->n_head / m->n_head_kv : 0;
    int i = x->i_attn_v++;
    enum fx_type t = x->base;
    if (x->ftype == FT_Q2_K)
        t = gqa >= 4 ? FX_TYPE_Q4_K : FX_TYPE_Q3_K;
    else if (x->ftype == FT_Q3_K_M)
        t = i < 2 ? FX_TYPE_Q5_K : FX_TYPE_Q4_K;
    else if (x->ftype == FT_Q3_K_L)
        t = FX_TYPE_Q5_K;
    else if (is_ftype(x, FT_IQ4_NL, FT_IQ4_XS) && gqa >= 4)
        t = FX_TYPE_Q5_K;
    else if (is_ftype(x, FT_Q4_K_M, FT_Q5_K_M) && more_bits(i, x->n_attn_v))
        t = FX_TYPE_Q6_K;
    else if (x->ftype == FT_Q4_K_S && i < 4)
        t = FX_TYPE_Q5_K;
    /* 70B Llama-style models share each V head among 8 query heads: V is small, give it more. */
    if (x->big_llama && (t == FX_TYPE_Q3_K || t == FX_TYPE_Q4_K))
        t = FX_TYPE_Q5_K;
    if (m->n_expert == 8) /* Mixtral 8x: V costs little next to the experts */
        t = FX_TYPE_Q8_0;
    return t;
}

static fx_status ffn_down_type(struct mix *x, const struct fx_quant_tensor *t, enum fx_type *out,
                               struct fx_error *err) {
    int n = x->m->n_layer, i = x->i_ffn_down++;
    if (x->m->n_expert > 1) {
        /* Expert tensors are not one per layer in every file; the name says which layer. */
        long l = layer_of(t->name);
        if (l < 0 || l >= n)
            return fx_error_set(err, FX_ERR_FORMAT, FX_NO_OFFSET,
                                "tensor '%s': layer outside the model's %d blocks", t->name, n);
        i = (int)l;
    }
    enum fx_type r = x->base;
    switch (x->ftype) {
    case FT_Q2_K:
        r = FX_TYPE_Q3_K;
        break;
    case FT_Q3_K_M:
        r = i < n / 16 ? FX_TYPE_Q5_K : !x->falcon || more_bits(i, n) ? FX_TYPE_Q4_K : FX_TYPE_Q3_K;
        break;
    case FT_Q3_K_L:
        r = x->falcon ? FX_TYPE_Q4_K : FX_TYPE_Q5_K;
        break;
    case FT_Q4_K_M:
        if (x->falcon)
            r = i < n / 16 ? FX_TYPE_Q6_K : more_bits(i, n) ? FX_TYPE_Q5_K : FX_TYPE_Q4_K;
        else if (more_bits(i, n))
            r = FX_TYPE_Q6_K;
        break;
    case FT_Q5_K_M:
        if (more_bits(i, n))
            r = FX_TYPE_Q6_K;
        break;
    case FT_Q4_K_S:
        if (!x->falcon && i < n / 8)
            r = FX_TYPE_Q5_K;
        break;
    case FT_IQ4_NL: /* without an importance matrix */
    case FT_IQ4_XS:
        if (i < n / 8)
            r = FX_TYPE_Q5_K;
        break;
    default:
        break;
    }
    *out = r;
    return FX_OK;
}

static enum fx_type attn_output_type(const struct mix *x) {
    if (x->falcon)
        return x->ftype == FT_Q3_K_L ? FX_TYPE_Q4_K : x->base;
    if (x->m->n_expert == 8) {
        static const uint32_t bumped[] = {FT_Q2_K,   FT_Q3_K_S, FT_Q3_K_M, FT_Q4_K_S,
                                          FT_Q4_K_M, FT_IQ4_NL, FT_IQ4_XS};
        for (size_t k = 0; k < sizeof bumped / sizeof bumped[0]; k++)
            if (x->ftype == bumped[k])
                return FX_TYPE_Q5_K;
        return x->base;
    }
    switch (x->ftype) {
    case FT_Q2_K:
        return FX_TYPE_Q3_K;
    case FT_Q3_K_M:
        return FX_TYPE_Q4_K;
    case FT_Q3_K_L:
        return FX_TYPE_Q5_K;
    default:
        return x->base;
    }
}

/* The mix's choice for one converted tensor, before the fallback. */
static fx_status mix_type(struct mix *x, const struct fx_quant_tensor *t, enum fx_type *out,
                          struct fx_error *err) {
    enum category c = category_of(t->name);
    *out = x->base;
    if (c == CAT_OUTPUT || (x->tied && c == CAT_TOKEN_EMBD))
        *out = output_type(x, t);
    else if (x->ftype == FT_MXFP4_MOE) /* experts in MXFP4, the rest Q8_0 */
        *out = t->ne[2] > 1 ? FX_TYPE_MXFP4 : FX_TYPE_Q8_0;
    else if (c == CAT_ATTN_V)
        *out = attn_v_type(x);
    else if (c == CAT_ATTN_K && x->m->n_expert == 8)
        *out = FX_TYPE_Q8_0;
    else if (c == CAT_FFN_DOWN)
        return ffn_down_type(x, t, out, err);
    else if (c == CAT_ATTN_OUTPUT)
        *out = attn_output_type(x);
    return FX_OK;
}

/* A type whose blocks divide the rows, when `want`'s do not: a 32-wide type of about the same
 * size for the 256-wide types (IQ4_NL for the smallest), F16 when even that does not fit. */
static fx_status fit_rows(const struct fx_quant_tensor *t, enum fx_type want, enum fx_type *out,
                          struct fx_error *err) {
    *out = want;
    if (t->ne[0] % fx_type_block_elems(want) == 0)
        return FX_OK;
    switch (want) {
    case FX_TYPE_Q2_K:
    case FX_TYPE_Q3_K:
    case FX_TYPE_IQ4_XS:
        *out = FX_TYPE_IQ4_NL;
        break;
    case FX_TYPE_Q4_K:
        *out = FX_TYPE_Q5_0;
        break;
    case FX_TYPE_Q5_K:
        *out = FX_TYPE_Q5_1;
        break;
    case FX_TYPE_Q6_K:
        *out = FX_TYPE_Q8_0;
        break;
    default:
        return fx_error_set(err, FX_ERR_UNSUPPORTED, FX_NO_OFFSET,
                            "tensor '%s': rows of %lld elements are not whole %s blocks of %lld",
                            t->name, (long long)t->ne[0], fx_type_name(want),
                            (long long)fx_type_block_elems(want));
    }
    if (t->ne[0] % fx_type_block_elems(*out) != 0)
        *out = FX_TYPE_F16;
    return FX_OK;
}

fx_status fx_quant_choose_types(const struct fx_quant_model *m, uint32_t ftype, bool pure,
                                const struct fx_quant_tensor *tensors, int64_t n,
                                enum fx_type *types, struct fx_error *err) {
    enum fx_type base = fx_file_type_base(ftype);
    if (base == FX_TYPE_COUNT)
        return fx_error_set(err, FX_ERR_UNSUPPORTED, FX_NO_OFFSET, "file type %u cannot be written",
                            (unsigned)ftype);
    struct mix x = {
        .m = m,
        .ftype = ftype,
        .base = base,
        .falcon = strcmp(m->arch, "falcon") == 0,
        .big_llama =
            m->n_layer == 80 && (strcmp(m->arch, "qwen2") == 0 ||
                                 (strcmp(m->arch, "llama") == 0 && m->n_head != m->n_head_kv)),
        .tied = true,
    };
    for (int64_t i = 0; i < n; i++) {
        enum category c = category_of(tensors[i].name);
        x.n_attn_v += c == CAT_ATTN_V;
        x.tied &= c != CAT_OUTPUT;
    }
    bool quantized = base != FX_TYPE_F32 && base != FX_TYPE_F16 && base != FX_TYPE_BF16;
    int64_t *order = malloc((size_t)(n > 0 ? n : 1) * sizeof *order);
    if (!order)
        return fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "out of memory");
    /* The counters of the mix advance in llama.cpp's order. */
    fx_status st = fx_quant_order(tensors, n, order, err);
    for (int64_t k = 0; k < n && st == FX_OK; k++) {
        const struct fx_quant_tensor *t = &tensors[order[k]];
        enum fx_type *out = &types[order[k]];
        *out = t->type;
        if (!converted(t))
            continue;
        *out = base;
        if (quantized && !pure)
            st = mix_type(&x, t, out, err);
        if (st == FX_OK && quantized)
            st = fit_rows(t, *out, out, err);
    }
    free(order);
    return st;
}
