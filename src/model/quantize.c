/* fx_model_quantize (ferrox.h): a GGUF model rewritten with its weights in a llama.cpp file type,
 * laid out as llama-quantize lays it out, so that for the same choices the output is the same
 * file byte for byte. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kernels/kernels.h"
#include "model/encode.h"
#include "model/ftype.h"
#include "model/quant.h"

struct fx_quantize_params fx_quantize_default_params(void) {
    return (struct fx_quantize_params){.type = "Q8_0"};
}

/* One output tensor: its input view and the type it is written in. */
struct out_tensor {
    const struct fx_tensor_view *in;
    enum fx_type type;
};

struct job {
    struct out_tensor *tensors; /* [n] in output order */
    struct fx_encoder *enc;
    const struct fx_quantize_params *p;
    uint64_t done, total; /* elements written, for the progress callback */
};

/* Where input rows come from: a tensor's data, converted to f32. */
struct row_source {
    const uint8_t *data;
    uint64_t row_bytes;
    int64_t ne0;
    fx_to_float_fn to_float;
};

static void read_row(const void *user, int64_t row, float *out) {
    const struct row_source *s = user;
    s->to_float(s->data + (uint64_t)row * s->row_bytes, out, s->ne0);
}

static fx_status fill(void *user, int64_t index, uint64_t offset, void *dst, uint64_t size,
                      struct fx_error *err) {
    struct job *j = user;
    const struct out_tensor *t = &j->tensors[index];
    const struct fx_tensor_view *in = t->in;
    uint64_t in_row = in->n_bytes / (uint64_t)(in->n_elements / in->ne[0]), out_row;
    fx_type_row_bytes(t->type, in->ne[0], &out_row); /* checked when the writer took it */
    int64_t row0 = (int64_t)(offset / out_row), n_rows = (int64_t)(size / out_row);
    fx_status st = FX_OK;
    if (t->type == in->type) {
        memcpy(dst, (const uint8_t *)in->data + offset, (size_t)size);
    } else {
        struct row_source src = {in->data, in_row, in->ne[0],
                                 fx_kernels()->types[in->type].to_float};
        st = fx_encoder_run(j->enc, t->type, in->ne[0], row0, n_rows, read_row, &src, dst, err);
    }
    j->done += (uint64_t)(n_rows * in->ne[0]);
    if (st == FX_OK && j->p->progress)
        j->p->progress(j->p->progress_user, j->done, j->total);
    return st;
}

/* A key the output gets fresh values for, or drops with the split it described. */
static bool replaced_key(const char *key) {
    static const char *const keys[] = {"general.quantization_version", "general.file_type",
                                       "split.no", "split.count", "split.tensors.count"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (strcmp(key, keys[i]) == 0)
            return true;
    return false;
}

static bool readable_weight(enum fx_type t) {
    return t == FX_TYPE_F32 || t == FX_TYPE_F16 || t == FX_TYPE_BF16;
}

/* Decides every output tensor's type and checks that each conversion can be done, before
 * anything is written. */
static fx_status plan(const struct fx_gguf *g, uint32_t ftype, bool pure, struct out_tensor *out,
                      int64_t *max_row, struct fx_error *err) {
    int64_t n = fx_gguf_n_tensors(g);
    struct fx_quant_model qm;
    struct fx_quant_tensor *qt = calloc((size_t)(n > 0 ? n : 1), sizeof *qt);
    int64_t *order = malloc((size_t)(n > 0 ? n : 1) * sizeof *order);
    enum fx_type *types = malloc((size_t)(n > 0 ? n : 1) * sizeof *types);
    fx_status st = FX_OK;
    if (!qt || !order || !types) {
        st = fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "out of memory");
        goto done;
    }
    for (int64_t i = 0; i < n; i++) {
        const struct fx_tensor_view *v = fx_gguf_tensor_at(g, i);
        qt[i] = (struct fx_quant_tensor){.name = v->name, .type = v->type};
        memcpy(qt[i].ne, v->ne, sizeof qt[i].ne);
    }
    if ((st = fx_quant_model_from_gguf(g, &qm, err)) ||
        (st = fx_quant_choose_types(&qm, ftype, pure, qt, n, types, err)) ||
        (st = fx_quant_order(qt, n, order, err)))
        goto done;
    *max_row = 1;
    for (int64_t k = 0; k < n; k++) {
        const struct fx_tensor_view *v = fx_gguf_tensor_at(g, order[k]);
        out[k] = (struct out_tensor){v, types[order[k]]};
        if (out[k].type == v->type)
            continue;
        if (!readable_weight(v->type)) {
            st = fx_error_set(err, FX_ERR_UNSUPPORTED, FX_NO_OFFSET,
                              "tensor '%s' is %s; quantize converts F32, F16 and BF16 weights "
                              "(requantizing is not supported)",
                              v->name, fx_type_name(v->type));
            goto done;
        }
        if (v->ne[0] > *max_row)
            *max_row = v->ne[0];
    }
done:
    free(qt);
    free(order);
    free(types);
    return st;
}

static fx_status write_output(const struct fx_gguf *g, const char *out_path, uint32_t ftype,
                              struct job *j, struct fx_error *err) {
    struct fx_gguf_writer *w;
    fx_status st = fx_gguf_writer_create(&w, err);
    if (st != FX_OK)
        return st;
    for (int64_t i = 0; i < fx_gguf_n_kv(g) && st == FX_OK; i++) {
        const struct fx_gguf_kv *kv = fx_gguf_kv_at(g, i);
        if (!replaced_key(kv->key))
            st = fx_gguf_writer_set_kv(w, kv, err);
    }
    if (st == FX_OK)
        st = fx_gguf_writer_set_u32(w, "general.quantization_version", 2, err);
    if (st == FX_OK)
        st = fx_gguf_writer_set_u32(w, "general.file_type", ftype, err);
    for (int64_t k = 0; k < fx_gguf_n_tensors(g) && st == FX_OK; k++) {
        const struct fx_tensor_view *v = j->tensors[k].in;
        j->total += (uint64_t)v->n_elements;
        st = fx_gguf_writer_add_tensor(w, v->name, j->tensors[k].type, v->n_dims, v->ne, NULL, err);
    }
    if (st == FX_OK)
        st = fx_gguf_writer_write(w, out_path, fill, j, err);
    fx_gguf_writer_free(w);
    return st;
}

fx_status fx_model_quantize(const char *in_path, const char *out_path,
                            const struct fx_quantize_params *params, struct fx_error *err) {
    struct fx_quantize_params p = params ? *params : fx_quantize_default_params();
    uint32_t ftype;
    if (!p.type || !fx_file_type_from_name(p.type, &ftype) ||
        fx_file_type_base(ftype) == FX_TYPE_COUNT) {
        char list[512];
        fx_file_type_list(list, sizeof list);
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "unknown or unsupported type '%s' (one of: %s)",
                            p.type ? p.type : "(null)", list);
    }
    if (p.n_threads < 0)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET, "n_threads %d < 0", p.n_threads);
    struct fx_gguf *g;
    fx_status st = fx_gguf_open(in_path, &g, err);
    if (st != FX_OK) {
        if (err && !strstr(err->msg, in_path)) /* parse errors do not name the file */
            fx_error_prefix(err, "%s", in_path);
        return st;
    }
    int64_t n = fx_gguf_n_tensors(g), max_row = 1;
    struct job j = {.p = &p};
    j.tensors = calloc((size_t)(n > 0 ? n : 1), sizeof *j.tensors);
    if (!j.tensors)
        st = fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "out of memory");
    if (st == FX_OK && (st = plan(g, ftype, p.pure, j.tensors, &max_row, err)) != FX_OK)
        fx_error_prefix(err, "%s", in_path);
    if (st == FX_OK)
        st = fx_encoder_create(p.n_threads, max_row, &j.enc, err);
    if (st == FX_OK)
        st = write_output(g, out_path, ftype, &j, err);
    fx_encoder_free(j.enc);
    free(j.tensors);
    fx_gguf_free(g);
    return st;
}
