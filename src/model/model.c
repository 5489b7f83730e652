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
#include "model/expert_cache.h"
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
    return (struct fx_model_params){.moe_lookahead = 1, .moe_evict = FX_MOE_EVICT_LFU};
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

/* Whether tensor t is an expert stack the expert cache reads (never touched through the
 * mapping). */
static bool streamed(const struct fx_model *m, bool stream, const struct fx_tensor_view *t) {
    for (int il = 0; stream && il < m->hp.n_layer; il++) {
        const struct fx_layer *l = &m->layers[il];
        if (t->data == l->gate_exps.per.data || t->data == l->up_exps.per.data ||
            t->data == l->down_exps.per.data)
            return true;
    }
    return false;
}

/* Reads one byte of every page of the tensor data the model reads through the mapping (after
 * asking the kernel to read ahead), so that the pages are resident before the first forward
 * pass, reporting the fraction read after each slice of about a hundredth. Streamed experts
 * are skipped: they never go through the page cache. */
static fx_status prefault(const struct fx_model *m, const struct fx_gguf *g, bool stream,
                          const struct fx_model_params *p, struct fx_error *err) {
    uint64_t total = 0, done = 0, next = 0;
    for (int64_t i = 0; i < fx_gguf_n_tensors(g); i++)
        if (!streamed(m, stream, fx_gguf_tensor_at(g, i)))
            total += fx_gguf_tensor_at(g, i)->n_bytes;
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE), slice = total / 100 + 1;
    unsigned char sink = 0;
    for (int64_t i = 0; i < fx_gguf_n_tensors(g); i++) {
        const struct fx_tensor_view *t = fx_gguf_tensor_at(g, i);
        if (streamed(m, stream, t) || t->n_bytes == 0)
            continue;
        const volatile unsigned char *base = t->data;
        uintptr_t start = (uintptr_t)base & ~(uintptr_t)(page - 1);
        /* Only a hint: a caller's buffer (fx_gguf_open_memory) may not be a mapping at all. */
        (void)madvise((void *)start, (size_t)(t->n_bytes + ((uintptr_t)base - start)),
                      MADV_WILLNEED);
        for (uint64_t off = 0; off < t->n_bytes; off += page)
            sink ^= base[off];
        sink ^= base[t->n_bytes - 1];
        done += t->n_bytes;
        if (done >= next && done < total) {
            next = done + slice;
            if (!p->progress((float)((double)done / (double)total), p->progress_user))
                return fx_error_set(err, FX_ERR_CANCELLED, FX_NO_OFFSET, "loading cancelled");
        }
    }
    (void)sink;
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

/* Loads from an open file; path (NULL when there is none) is where experts are read from when
 * params ask for an expert cache. */
static fx_status load(struct fx_gguf *g, const char *path, const struct fx_model_params *params,
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
    m->file = g; /* borrowed until success: the caller frees g on failure */
    bool stream = params && params->moe_cache_bytes > 0 && m->hp.n_expert > 0;
    if (stream && !path) {
        st = fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                          "an expert cache reads the model's file: load it with fx_model_load");
        goto fail;
    }
    if (stream &&
        (params->moe_lookahead < 0 || params->moe_lookahead > FX_MOE_LOOKAHEAD_MAX ||
         params->moe_evict < FX_MOE_EVICT_QUOTA || params->moe_evict > FX_MOE_EVICT_LFU)) {
        st = fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                          "moe_lookahead %d (0 to %d) or moe_evict %d (0 to %d) out of range",
                          (int)params->moe_lookahead, FX_MOE_LOOKAHEAD_MAX, (int)params->moe_evict,
                          (int)FX_MOE_EVICT_LFU);
        goto fail;
    }
    if ((params && params->progress && (st = prefault(m, g, stream, params, err))) ||
        (st = fx_model_pack(m, g, !stream, err)) ||
        (stream && (st = fx_xcache_create(m, path, params->moe_cache_bytes, params->moe_evict,
                                          &m->xcache, err))))
        goto fail;
    m->moe_lookahead = stream ? params->moe_lookahead : 0;
    *out = m;
    return FX_OK;
fail:
    m->file = NULL;
    fx_model_free(m);
    return st;
}

fx_status fx_model_load_gguf(struct fx_gguf *g, const struct fx_model_params *params,
                             struct fx_model **out, struct fx_error *err) {
    return load(g, NULL, params, out, err);
}

fx_status fx_model_load(const char *path, const struct fx_model_params *params,
                        struct fx_model **out, struct fx_error *err) {
    *out = NULL;
    struct fx_gguf *g;
    fx_status st = fx_gguf_open(path, &g, err);
    if (st)
        return st;
    if ((st = load(g, path, params, out, err))) {
        fx_error_prefix(err, "%s", path);
        fx_gguf_free(g);
    }
    return st;
}

void fx_model_free(struct fx_model *m) {
    if (!m)
        return;
    fx_xcache_free(m->xcache);
    for (int64_t i = 0; i < m->n_vecs; i++)
        free(m->vecs[i]);
    free(m->packed);
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

void fx_model_moe_stats(const struct fx_model *m, struct fx_moe_stats *out) {
    *out = (struct fx_moe_stats){0};
    if (m->xcache)
        fx_xcache_stats(m->xcache, out);
}
