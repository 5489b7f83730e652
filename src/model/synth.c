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

struct fx_synth_shape {
    const char *name, *arch, *model_name;
    int64_t n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_vocab;
    uint32_t n_ctx;
    float rope_base, rms_eps;
    bool tied;        /* no output.weight: logits use token_embd.weight */
    bool qk_norm;     /* per-head RMS norm of Q and K (attn_q_norm, attn_k_norm) */
    bool head_keys;   /* attention.key_length / value_length (head_dim != n_embd / n_head) */
    bool llama3_rope; /* rope_freqs.weight with Llama 3.1 scaling (factor 32, 8192 original) */
};

/* The shapes. Dimensions are those of the released models' config.json files. */
static const struct fx_synth_shape shapes[] = {
    {"tiny", "llama", "ferrox-tiny", 128, 4, 2, 1, 64, 384, 2048, 512, 10000.0f, 1e-5f, false,
     false, false, false},
    {"smollm2-135m", "llama", "SmolLM2-135M", 576, 30, 9, 3, 64, 1536, 49152, 8192, 100000.0f,
     1e-5f, true, false, false, false},
    {"qwen3-0.6b", "qwen3", "Qwen3-0.6B", 1024, 28, 16, 8, 128, 3072, 151936, 40960, 1000000.0f,
     1e-6f, true, true, true, false},
    {"llama-3.2-1b", "llama", "Llama-3.2-1B", 2048, 16, 32, 8, 64, 8192, 128256, 131072, 500000.0f,
     1e-5f, true, false, false, true},
};
#define N_SHAPES (sizeof shapes / sizeof shapes[0])

const char *const *fx_synth_shape_names(void) {
    static const char *names[N_SHAPES + 1];
    for (size_t i = 0; i < N_SHAPES; i++)
        names[i] = shapes[i].name;
    return names;
}

/* The type a tensor is stored in: norms and rope factors stay F32 (llama.cpp's converters and
 * quantizers keep 1-D tensors in F32); matrices take the requested weight type. */
static enum fx_type tensor_type(enum fx_synth_role role, enum fx_type weight_type) {
    return role == FX_SYNTH_NORM || role == FX_SYNTH_ROPE_FREQS ? FX_TYPE_F32 : weight_type;
}

static bool can_generate(enum fx_type t) {
    return t == FX_TYPE_F32 || t == FX_TYPE_F16;
}

/* Adds tensor `name` (of layer `layer`, or a global one when layer < 0): [ne0] or [ne0, ne1]. */
static void add(struct fx_synth_model *m, enum fx_synth_role role, int64_t ne0, int64_t ne1,
                int64_t layer, const char *name) {
    struct fx_synth_tensor *t = &m->tensors[m->n_tensors++];
    if (layer >= 0)
        snprintf(t->name, sizeof t->name, "blk.%" PRId64 ".%s", layer, name);
    else
        snprintf(t->name, sizeof t->name, "%s", name);
    t->role = role;
    t->type = tensor_type(role, m->weight_type);
    t->n_dims = ne1 ? 2 : 1;
    t->ne[0] = ne0;
    t->ne[1] = ne1 ? ne1 : 1;
    t->ne[2] = t->ne[3] = 1;
}

fx_status fx_synth_plan(const char *shape, enum fx_type weight_type, uint64_t seed,
                        struct fx_synth_model **out, struct fx_error *err) {
    *out = NULL;
    const struct fx_synth_shape *s = NULL;
    for (size_t i = 0; i < N_SHAPES; i++)
        if (strcmp(shapes[i].name, shape) == 0)
            s = &shapes[i];
    if (!s)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET, "unknown shape '%s'", shape);
    if (!can_generate(weight_type))
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "weight type %s cannot be generated (f32 or f16)",
                            fx_type_name(weight_type));
    struct fx_synth_model *m = calloc(1, sizeof *m);
    int64_t per_layer = 9 + 2 * s->qk_norm;
    if (m)
        m->tensors = calloc((size_t)(4 + per_layer * s->n_layer), sizeof *m->tensors);
    if (!m || !m->tensors) {
        free(m);
        return fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "out of memory planning '%s'", shape);
    }
    m->shape = s;
    m->weight_type = weight_type;
    m->seed = seed;
    int64_t q = s->n_head * s->head_dim, kv = s->n_head_kv * s->head_dim;
    add(m, FX_SYNTH_EMBED, s->n_embd, s->n_vocab, -1, "token_embd.weight");
    if (s->llama3_rope)
        add(m, FX_SYNTH_ROPE_FREQS, s->head_dim / 2, 0, -1, "rope_freqs.weight");
    for (int64_t l = 0; l < s->n_layer; l++) {
        add(m, FX_SYNTH_NORM, s->n_embd, 0, l, "attn_norm.weight");
        add(m, FX_SYNTH_PROJ_IN, s->n_embd, q, l, "attn_q.weight");
        add(m, FX_SYNTH_PROJ_IN, s->n_embd, kv, l, "attn_k.weight");
        add(m, FX_SYNTH_PROJ_IN, s->n_embd, kv, l, "attn_v.weight");
        add(m, FX_SYNTH_PROJ_OUT, q, s->n_embd, l, "attn_output.weight");
        if (s->qk_norm) {
            add(m, FX_SYNTH_NORM, s->head_dim, 0, l, "attn_q_norm.weight");
            add(m, FX_SYNTH_NORM, s->head_dim, 0, l, "attn_k_norm.weight");
        }
        add(m, FX_SYNTH_NORM, s->n_embd, 0, l, "ffn_norm.weight");
        add(m, FX_SYNTH_PROJ_IN, s->n_embd, s->n_ff, l, "ffn_gate.weight");
        add(m, FX_SYNTH_PROJ_IN, s->n_embd, s->n_ff, l, "ffn_up.weight");
        add(m, FX_SYNTH_PROJ_OUT, s->n_ff, s->n_embd, l, "ffn_down.weight");
    }
    add(m, FX_SYNTH_NORM, s->n_embd, 0, -1, "output_norm.weight");
    if (!s->tied)
        add(m, FX_SYNTH_PROJ_IN, s->n_embd, s->n_vocab, -1, "output.weight");
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
        n += m->tensors[i].ne[0] * m->tensors[i].ne[1];
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
    /* llama.cpp's file types: 0 all F32, 1 mostly F16. */
    TRY(fx_gguf_writer_set_u32(w, "general.file_type", m->weight_type == FX_TYPE_F16 ? 1 : 0, err));
    TRY(set_arch_u32(w, a, "vocab_size", s->n_vocab, err));
    TRY(set_arch_u32(w, a, "context_length", s->n_ctx, err));
    TRY(set_arch_u32(w, a, "embedding_length", s->n_embd, err));
    TRY(set_arch_u32(w, a, "block_count", s->n_layer, err));
    TRY(set_arch_u32(w, a, "feed_forward_length", s->n_ff, err));
    TRY(set_arch_u32(w, a, "rope.dimension_count", s->head_dim, err));
    TRY(set_arch_u32(w, a, "attention.head_count", s->n_head, err));
    TRY(set_arch_u32(w, a, "attention.head_count_kv", s->n_head_kv, err));
    if (s->head_keys) {
        TRY(set_arch_u32(w, a, "attention.key_length", s->head_dim, err));
        TRY(set_arch_u32(w, a, "attention.value_length", s->head_dim, err));
    }
    TRY(set_arch_f32(w, a, "attention.layer_norm_rms_epsilon", s->rms_eps, err));
    TRY(set_arch_f32(w, a, "rope.freq_base", s->rope_base, err));
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

/* Uniform in (0, 1] from a splitmix64 stream. */
static double uniform(uint64_t *state) {
    *state += 0x9e3779b97f4a7c15ull;
    return (double)((mix64(*state) >> 11) + 1) * 0x1.0p-53;
}

/* Row `row` of tensor `index` as f32 values: each row has its own stream, seeded from the model
 * seed, the tensor and the row, so any run of rows can be generated alone. */
static void gen_row(const struct fx_synth_model *m, int64_t index, int64_t row, float *out) {
    const struct fx_synth_tensor *t = &m->tensors[index];
    const struct fx_synth_shape *s = m->shape;
    int64_t n = t->ne[0];
    if (t->role == FX_SYNTH_ROPE_FREQS) {
        /* Llama 3.1 frequency scaling, as llama.cpp's converter stores it: 1 for short
         * wavelengths, the factor for long ones, a smooth blend between. */
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
        return;
    }
    double mean = 0, sigma;
    switch (t->role) {
    case FX_SYNTH_EMBED:
        sigma = 1 / sqrt((double)s->n_embd);
        break;
    case FX_SYNTH_PROJ_IN:
        sigma = 1 / sqrt((double)n);
        break;
    case FX_SYNTH_PROJ_OUT:
        sigma = 0.5 / sqrt((double)n);
        break;
    default: /* norms */
        mean = 1, sigma = 0.02;
    }
    uint64_t state = mix64(m->seed ^ mix64(((uint64_t)index << 40) ^ (uint64_t)row));
    for (int64_t i = 0; i < n; i += 2) {
        /* Box-Muller: two normal values from two uniforms. */
        double r = sqrt(-2 * log(uniform(&state))), a = 2 * M_PI * uniform(&state);
        out[i] = (float)(mean + sigma * r * cos(a));
        if (i + 1 < n)
            out[i + 1] = (float)(mean + sigma * r * sin(a));
    }
}

/* IEEE half from float, rounding to nearest even. */
static uint16_t f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000, mant = x & 0x7fffff;
    int32_t exp = (int32_t)((x >> 23) & 0xff);
    if (exp == 0xff)
        return (uint16_t)(sign | 0x7c00 | (mant ? 0x200 : 0));
    int32_t e = exp - 127 + 15;
    if (e >= 31)
        return (uint16_t)(sign | 0x7c00);
    if (e <= 0) {
        if (e < -10)
            return (uint16_t)sign;
        mant |= 0x800000;
        uint32_t shift = (uint32_t)(14 - e), half = mant >> shift;
        uint32_t rem = mant & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1)))
            half++;
        return (uint16_t)(sign | half);
    }
    uint32_t half = sign | ((uint32_t)e << 10) | (mant >> 13), rem = mant & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (half & 1)))
        half++; /* a carry into the exponent is the correct rounding */
    return (uint16_t)half;
}

struct gen {
    const struct fx_synth_model *m;
    float *row; /* [max ne0] */
};

static fx_status fill(void *user, int64_t index, uint64_t offset, void *dst, uint64_t size,
                      struct fx_error *err) {
    struct gen *g = user;
    const struct fx_synth_tensor *t = &g->m->tensors[index];
    uint64_t row_bytes;
    if (!fx_type_row_bytes(t->type, t->ne[0], &row_bytes) || offset % row_bytes || size % row_bytes)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "tensor '%s': chunk is not whole rows", t->name);
    for (uint64_t r = 0; r < size / row_bytes; r++) {
        gen_row(g->m, index, (int64_t)(offset / row_bytes + r), g->row);
        uint8_t *out = (uint8_t *)dst + r * row_bytes;
        if (t->type == FX_TYPE_F32) {
            memcpy(out, g->row, (size_t)row_bytes);
        } else {
            for (int64_t i = 0; i < t->ne[0]; i++) {
                uint16_t h = f32_to_f16(g->row[i]);
                memcpy(out + 2 * i, &h, 2);
            }
        }
    }
    return FX_OK;
}

fx_status fx_synth_write(const struct fx_synth_model *m, const char *path, struct fx_error *err) {
    struct fx_gguf_writer *w;
    fx_status s = fx_gguf_writer_create(&w, err);
    if (s != FX_OK)
        return s;
    int64_t max_row = 0;
    struct gen g = {.m = m};
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
    }
    g.row = malloc((size_t)(max_row + 1) * sizeof *g.row);
    if (!g.row) {
        s = fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "out of memory");
        goto done;
    }
    s = fx_gguf_writer_write(w, path, fill, &g, err);
done:
    free(g.row);
    fx_gguf_writer_free(w);
    return s;
}
