/* Loading a model: open the GGUF file, read the shared hyper-parameters, let the architecture's
 * file fill in the rest of the description and the layers, then the embeddings. */
#include "model/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "model/loader.h"

struct arch_entry {
    const char *name;
    fx_status (*load)(struct fx_loader *ld);
};

static const struct arch_entry archs[] = {
    {"llama", fx_arch_llama_load},    {"qwen2", fx_arch_qwen2_load},
    {"qwen3", fx_arch_qwen3_load},    {"qwen3moe", fx_arch_qwen3moe_load},
    {"gemma2", fx_arch_gemma2_load},  {"gemma3", fx_arch_gemma3_load},
    {"gpt-oss", fx_arch_gptoss_load},
};

#define N_ARCHS (sizeof archs / sizeof archs[0])

struct fx_model_params fx_model_default_params(void) {
    return (struct fx_model_params){0};
}

static fx_status find_arch(const struct fx_gguf *g, const struct arch_entry **out,
                           struct fx_error *err) {
    struct fx_gguf_str name;
    fx_status st = fx_gguf_get_str(g, "general.architecture", &name, err);
    if (st == FX_ERR_NOT_FOUND)
        return fx_error_set(err, FX_ERR_FORMAT, FX_NO_OFFSET, "missing key 'general.architecture'");
    if (st)
        return st;
    for (size_t i = 0; i < N_ARCHS; i++)
        if (strcmp(archs[i].name, name.data) == 0 && strlen(name.data) == name.len) {
            *out = &archs[i];
            return FX_OK;
        }
    char list[160] = "";
    for (size_t i = 0; i < N_ARCHS; i++) {
        strncat(list, i ? ", " : "", sizeof list - strlen(list) - 1);
        strncat(list, archs[i].name, sizeof list - strlen(list) - 1);
    }
    return fx_error_set(err, FX_ERR_UNSUPPORTED, FX_NO_OFFSET,
                        "unsupported architecture '%.64s' (supported: %s)", name.data, list);
}

fx_status fx_model_load_gguf(struct fx_gguf *g, const struct fx_model_params *params,
                             struct fx_model **out, struct fx_error *err) {
    (void)params;
    *out = NULL;
    const struct arch_entry *arch = NULL;
    fx_status st = find_arch(g, &arch, err);
    if (st)
        return st;
    struct fx_model *m = calloc(1, sizeof *m);
    if (!m)
        return fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "out of memory");
    snprintf(m->arch, sizeof m->arch, "%s", arch->name);
    struct fx_loader ld = {.g = g, .m = m, .err = err};
    if ((st = fx_ld_common_hparams(&ld)))
        goto fail;
    m->layers = calloc((size_t)m->hp.n_layer, sizeof *m->layers);
    if (!m->layers) {
        st = fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "out of memory");
        goto fail;
    }
    if ((st = arch->load(&ld)) || (st = fx_ld_embeddings(&ld)))
        goto fail;
    m->file = g;
    *out = m;
    return FX_OK;
fail:
    fx_model_free(m);
    return st;
}

fx_status fx_model_load(const char *path, const struct fx_model_params *params,
                        struct fx_model **out, struct fx_error *err) {
    *out = NULL;
    struct fx_gguf *g;
    fx_status st = fx_gguf_open(path, &g, err);
    if (st)
        return st;
    if ((st = fx_model_load_gguf(g, params, out, err))) {
        fx_error_prefix(err, "%s", path);
        fx_gguf_free(g);
    }
    return st;
}

void fx_model_free(struct fx_model *m) {
    if (!m)
        return;
    for (int64_t i = 0; i < m->n_vecs; i++)
        free(m->vecs[i]);
    free(m->vecs);
    free(m->layers);
    fx_gguf_free(m->file);
    free(m);
}

const char *fx_model_arch(const struct fx_model *m) {
    return m->arch;
}

int32_t fx_model_n_vocab(const struct fx_model *m) {
    return m->hp.n_vocab;
}

int32_t fx_model_n_embd(const struct fx_model *m) {
    return m->hp.n_embd;
}

int32_t fx_model_n_layer(const struct fx_model *m) {
    return m->hp.n_layer;
}

int32_t fx_model_n_ctx_train(const struct fx_model *m) {
    return m->hp.n_ctx_train;
}

const struct fx_gguf *fx_model_gguf(const struct fx_model *m) {
    return m->file;
}

uint64_t fx_model_n_params(const struct fx_model *m) {
    uint64_t n = 0;
    for (int64_t i = 0; i < fx_gguf_n_tensors(m->file); i++)
        n += (uint64_t)fx_gguf_tensor_at(m->file, i)->n_elements;
    return n;
}

uint64_t fx_model_size(const struct fx_model *m) {
    uint64_t n = 0;
    for (int64_t i = 0; i < fx_gguf_n_tensors(m->file); i++)
        n += fx_gguf_tensor_at(m->file, i)->n_bytes;
    return n;
}
