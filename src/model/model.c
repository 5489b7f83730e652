/* Loading a model: open the GGUF file, read the shared hyper-parameters, let the architecture's
 * file fill in the rest of the description and the layers, then the embeddings. */
#include "model/model.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/error.h"
#include "model/loader.h"

struct arch_entry {
    const char *name;
    fx_status (*load)(struct fx_loader *ld);
    fx_status (*load_after_embd)(struct fx_loader *ld); /* NULL for none */
};

static const struct arch_entry archs[] = {
    {"llama", fx_arch_llama_load, NULL},
    {"qwen2", fx_arch_qwen2_load, NULL},
    {"qwen3", fx_arch_qwen3_load, NULL},
    {"qwen3moe", fx_arch_qwen3moe_load, NULL},
    {"gemma2", fx_arch_gemma2_load, NULL},
    {"gemma3", fx_arch_gemma3_load, NULL},
    {"gpt-oss", fx_arch_gptoss_load, NULL},
    {"qwen35", fx_arch_qwen35_load, fx_arch_qwen35_load_mtp},
    {"qwen35moe", fx_arch_qwen35moe_load, fx_arch_qwen35_load_mtp},
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

/* Reads one byte of every page of the tensor data (after asking the kernel to read ahead), so
 * that the pages are resident before the first forward pass, reporting the fraction read after
 * each slice. The data section is contiguous: it starts `offset` bytes before any tensor's data. */
static fx_status prefault(const struct fx_gguf *g, const struct fx_model_params *p,
                          struct fx_error *err) {
    uint64_t size = fx_gguf_file_size(g) - fx_gguf_data_offset(g);
    if (fx_gguf_n_tensors(g) > 0 && size > 0) {
        const struct fx_tensor_view *t0 = fx_gguf_tensor_at(g, 0);
        const volatile unsigned char *base = (const unsigned char *)t0->data - t0->offset;
        uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
        uintptr_t start = (uintptr_t)base & ~(uintptr_t)(page - 1);
        /* Only a hint: a caller's buffer (fx_gguf_open_memory) may not be a mapping at all. */
        (void)madvise((void *)start, (size_t)(size + ((uintptr_t)base - start)), MADV_WILLNEED);
        /* About a hundred reports, each covering whole pages. */
        uint64_t slice = (size / 100 / page + 1) * page;
        unsigned char sink = 0;
        for (uint64_t off = 0; off < size;) {
            uint64_t end = size - off > slice ? off + slice : size;
            for (uint64_t i = off; i < end; i += page)
                sink ^= base[i];
            off = end;
            if (off < size && !p->progress((float)((double)off / (double)size), p->progress_user))
                return fx_error_set(err, FX_ERR_CANCELLED, FX_NO_OFFSET, "loading cancelled");
        }
        (void)sink;
    }
    if (!p->progress(1.0f, p->progress_user))
        return fx_error_set(err, FX_ERR_CANCELLED, FX_NO_OFFSET, "loading cancelled");
    return FX_OK;
}

/* Each attention layer's index in the KV caches and each recurrent layer's in the recurrent
 * state, so that neither reserves room for the other kind. The MTP blocks keep K and V after
 * the trunk's attention layers. */
static void number_layers(struct fx_model *m) {
    int32_t n_kv = 0, n_rec = 0;
    for (int il = 0; il < m->hp.n_layer; il++) {
        struct fx_layer *l = &m->layers[il];
        if (l->recurrent)
            l->rec_il = n_rec++;
        else
            l->kv_il = n_kv++;
    }
    for (int i = 0; i < m->hp.n_nextn; i++)
        m->layers[m->hp.n_layer + i].kv_il = n_kv++;
    m->hp.n_layer_kv = n_kv;
    m->hp.n_layer_rec = n_rec;
}

fx_status fx_model_load_gguf(struct fx_gguf *g, const struct fx_model_params *params,
                             struct fx_model **out, struct fx_error *err) {
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
    if ((st = arch->load(&ld)) || (st = fx_ld_embeddings(&ld)) ||
        (arch->load_after_embd && (st = arch->load_after_embd(&ld))))
        goto fail;
    number_layers(m);
    if ((params && params->progress && (st = prefault(g, params, err))) ||
        (st = fx_model_pack(m, g, err)))
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
    for (int64_t i = 0; i < m->n_packs; i++)
        free(m->packs[i]);
    free(m->packs);
    free(m->vecs);
    free(m->layers);
    free(m->mtp);
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

int32_t fx_model_n_nextn(const struct fx_model *m) {
    return m->hp.n_nextn;
}

bool fx_model_has_recurrent_state(const struct fx_model *m) {
    return m->hp.n_layer_rec > 0;
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
