/* The device decode step (decode.h). Read top to bottom, enqueue_step is the forward pass of one
 * token, the CPU decoder's blocks in the CPU decoder's order:
 *
 *   x = embedding(token)
 *   per layer: xn = rms_norm(x) * attn_norm; q, k, v = xn W^T (+ biases); per-head q/k norms;
 *              rope at pos; store k, v at pos; att = attention over positions 0..pos;
 *              x += att Wo^T (+ bo)
 *              xn = rms_norm(x) * ffn_norm; x += (silu(xn Wgate^T) * xn Wup^T) Wdown^T
 *   logits = rms_norm(x) * output_norm, times output^T
 *
 * Every launch goes to one stream; the first step captures them as a graph, the later steps
 * launch it. The step's token and position live in page-locked host memory that the graph copies
 * to the device as its first node, so that nothing in the graph depends on the position. */
#include "cuda/decode.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kernels/kv_tile.h"
#include "cuda/cuda.h"

struct dev_layer {
    const float *attn_norm, *ffn_norm; /* [n_embd] */
    const float *bq, *bk, *bv, *bo;    /* biases or NULL */
    const float *q_norm, *k_norm;      /* [head_dim] or NULL */
    struct fx_cuda_mat wq, wk, wv, wo; /* as the model's, in device memory */
    struct fx_cuda_mat gate, up, down; /* */
    void *k_cache, *v_cache;           /* [n_head_kv][n_ctx][head_dim] of type_k, type_v */
};

struct fx_cuda_decoder {
    const struct fx_model *m;
    int32_t il0; /* the first layer on the device; layers 0 .. il0 - 1 run on the CPU */
    int32_t n_ctx;
    int32_t n_filled;  /* positions 0 .. n_filled - 1 of the device cache hold rows */
    int32_t host_from; /* rows host_from .. n_filled - 1 are not in the host cache yet */
    enum fx_type type_k, type_v;
    void *stream;
    struct dev_layer *layers; /* [n_layer], of which il0 .. n_layer - 1 are on the device */
    struct fx_cuda_mat tok_embd, output;
    const float *output_norm;
    const float *rope; /* [n_ctx][n_rot] (cos, sin) pairs, the CPU context's table */
    /* Scratch of one row: */
    float *x, *xn, *h; /* [n_embd] residual stream, normed input, a block's output */
    float *q, *k, *v;  /* [n_head * hd], [n_head_kv * hd], [n_head_kv * hd] */
    float *att;        /* [n_head * hd] attention output */
    float *gate, *up;  /* [n_ff] */
    float *logits;     /* [n_vocab] */
    int32_t *d_step;   /* [2] token, position: what the graph reads */
    int32_t *h_step;   /* [2] the same in page-locked host memory, written before each launch */
    float *h_x;        /* [n_embd] page-locked: the residual row the CPU's layers left */
    struct fx_cuda_graph *graph;
    void **allocs; /* every device allocation, freed with the decoder */
    int64_t n_allocs, cap_allocs;
};

/* ---- creation ------------------------------------------------------------------------------ */

static void *dev_alloc(struct fx_cuda_decoder *d, size_t bytes, struct fx_error *err) {
    if (d->n_allocs == d->cap_allocs) {
        int64_t cap = d->cap_allocs ? 2 * d->cap_allocs : 64;
        void **grown = realloc(d->allocs, (size_t)cap * sizeof *grown);
        if (!grown) {
            fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "cuda decoder: out of memory");
            return NULL;
        }
        d->allocs = grown;
        d->cap_allocs = cap;
    }
    void *p = fx_cuda_alloc(bytes, err);
    if (p)
        d->allocs[d->n_allocs++] = p;
    return p;
}

/* A device copy of bytes at src; NULL stays NULL (an absent bias or norm). */
static fx_status upload(struct fx_cuda_decoder *d, const void *src, size_t bytes, const float **out,
                        struct fx_error *err) {
    *out = NULL;
    if (!src)
        return FX_OK;
    void *p = dev_alloc(d, bytes, err);
    if (!p)
        return err ? err->code : FX_ERR_NOMEM;
    *out = p;
    return fx_cuda_upload(p, src, bytes, err);
}

static fx_status upload_mat(struct fx_cuda_decoder *d, const struct fx_mat *w,
                            struct fx_cuda_mat *out, struct fx_error *err) {
    const float *p;
    fx_status st = upload(d, w->data, (size_t)(w->row_bytes * (uint64_t)w->ne1), &p, err);
    *out = (struct fx_cuda_mat){w->type, w->ne0, w->ne1, w->row_bytes, p};
    return st;
}

/* The device step restates the CPU decoder's layer recipe, so a new field of the model's
 * description must be either computed here or refused in unsupported() below, never silently
 * ignored: these sizes stop the CUDA build when the description changes, until this file has
 * been checked against it (x86-64 sizes). */
_Static_assert(sizeof(struct fx_layer) == 1376, "struct fx_layer changed: check decode.c");
_Static_assert(sizeof(struct fx_hparams) == 192, "struct fx_hparams changed: check decode.c");

/* What the device step does not compute yet, or NULL when it computes this model. */
static const char *unsupported(const struct fx_context *ctx) {
    const struct fx_model *m = ctx->model;
    const struct fx_hparams *hp = &m->hp;
    if (hp->n_expert > 0)
        return "mixture of experts";
    if (hp->n_layer_rec > 0)
        return "recurrent (Gated DeltaNet) layers";
    if (hp->n_nextn > 0)
        return "multi-token-prediction blocks";
    for (int i = 0; i < 4; i++)
        if (hp->rope.sections[i])
            return "multi-section rope";
    if (hp->act != FX_FFN_SILU)
        return "an FFN activation other than SiLU";
    if (hp->final_softcap > 0.0f)
        return "a final logit softcap";
    if (hp->embd_scale != 1.0f)
        return "an embedding scale";
    if (hp->head_dim_v != hp->head_dim || hp->head_dim > FX_CUDA_ATTN_MAX_DIM)
        return "these head sizes";
    if ((ctx->kv.type_k != FX_TYPE_F32 && ctx->kv.type_k != FX_TYPE_F16) ||
        ctx->kv.type_v != ctx->kv.type_k || ctx->paged_only)
        return "a KV cache other than a contiguous f32 or f16 one (keys and values alike)";
    if (!fx_cuda_type_supported(m->tok_embd.type) || !fx_cuda_type_supported(m->output.type))
        return "the embedding or output weight format";
    for (int il = 0; il < hp->n_layer; il++) {
        const struct fx_layer *l = &m->layers[il];
        if (l->swa)
            return "sliding-window layers";
        if (l->sinks)
            return "attention sinks";
        if (l->post_attn_norm || l->post_ffn_norm)
            return "post-norms";
        if (l->attn_out_gate)
            return "a gated attention output";
        const struct fx_mat *ws[] = {&l->wq,       &l->wk,     &l->wv,      &l->wo,
                                     &l->ffn_gate, &l->ffn_up, &l->ffn_down};
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
            if (!fx_cuda_type_supported(ws[i]->type))
                return "a layer weight format without device kernels";
    }
    return NULL;
}

static fx_status upload_layer(struct fx_cuda_decoder *d, const struct fx_layer *l,
                              struct dev_layer *o, struct fx_error *err) {
    const struct fx_hparams *hp = &d->m->hp;
    size_t embd = (size_t)hp->n_embd * sizeof(float);
    size_t hd = (size_t)hp->head_dim * sizeof(float);
    size_t q_dim = (size_t)hp->n_head * hd, kv_dim = (size_t)hp->n_head_kv * hd;
    fx_status st;
    if ((st = upload(d, l->attn_norm, embd, &o->attn_norm, err)) ||
        (st = upload(d, l->ffn_norm, embd, &o->ffn_norm, err)) ||
        (st = upload(d, l->bq, q_dim, &o->bq, err)) ||
        (st = upload(d, l->bk, kv_dim, &o->bk, err)) ||
        (st = upload(d, l->bv, kv_dim, &o->bv, err)) ||
        (st = upload(d, l->bo, embd, &o->bo, err)) ||
        (st = upload(d, l->q_norm, hd, &o->q_norm, err)) ||
        (st = upload(d, l->k_norm, hd, &o->k_norm, err)) ||
        (st = upload_mat(d, &l->wq, &o->wq, err)) || (st = upload_mat(d, &l->wk, &o->wk, err)) ||
        (st = upload_mat(d, &l->wv, &o->wv, err)) || (st = upload_mat(d, &l->wo, &o->wo, err)) ||
        (st = upload_mat(d, &l->ffn_gate, &o->gate, err)) ||
        (st = upload_mat(d, &l->ffn_up, &o->up, err)) ||
        (st = upload_mat(d, &l->ffn_down, &o->down, err)))
        return st;
    uint64_t rows = (uint64_t)hp->n_head_kv * (uint64_t)d->n_ctx * (uint64_t)hp->head_dim;
    o->k_cache = dev_alloc(d, rows * (uint64_t)fx_type_block_bytes(d->type_k), err);
    o->v_cache = dev_alloc(d, rows * (uint64_t)fx_type_block_bytes(d->type_v), err);
    return o->k_cache && o->v_cache ? FX_OK : err ? err->code : FX_ERR_NOMEM;
}

fx_status fx_cuda_decoder_create(const struct fx_context *ctx, int32_t n_gpu_layers,
                                 struct fx_cuda_decoder **out, struct fx_error *err) {
    *out = NULL;
    if (n_gpu_layers < 1 || n_gpu_layers > ctx->model->hp.n_layer)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "GPU layers: %d of a model of %d layers", n_gpu_layers,
                            ctx->model->hp.n_layer);
    const char *why = unsupported(ctx);
    if (why)
        return fx_error_set(err, FX_ERR_UNSUPPORTED, FX_NO_OFFSET,
                            "cuda decoder: model '%s' has %s, which the device step does not "
                            "compute yet",
                            ctx->model->arch, why);
    char no_device[256];
    if (fx_cuda_device_count(no_device, sizeof no_device) == 0)
        return fx_error_set(err, FX_ERR_UNSUPPORTED, FX_NO_OFFSET, "GPU layers: %s", no_device);
    const struct fx_hparams *hp = &ctx->model->hp;
    struct fx_cuda_decoder *d = calloc(1, sizeof *d);
    if (!d)
        return fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "cuda decoder: out of memory");
    d->m = ctx->model;
    d->il0 = hp->n_layer - n_gpu_layers;
    d->n_ctx = ctx->n_ctx;
    d->type_k = ctx->kv.type_k;
    d->type_v = ctx->kv.type_v;
    d->layers = calloc((size_t)hp->n_layer, sizeof *d->layers);
    fx_status st = FX_ERR_NOMEM;
    if (!d->layers) {
        fx_error_set(err, st, FX_NO_OFFSET, "cuda decoder: out of memory");
        goto fail;
    }
    if (!(d->stream = fx_cuda_stream_create(err)) || !(d->h_step = fx_cuda_host_alloc(8, err)) ||
        !(d->h_x = fx_cuda_host_alloc((size_t)hp->n_embd * sizeof(float), err)))
        goto fail;
    for (int il = d->il0; il < hp->n_layer; il++)
        if ((st = upload_layer(d, &ctx->model->layers[il], &d->layers[il], err)))
            goto fail;
    size_t embd = (size_t)hp->n_embd * sizeof(float);
    if ((st = upload_mat(d, &ctx->model->tok_embd, &d->tok_embd, err)) ||
        (st = upload(d, ctx->model->output_norm, embd, &d->output_norm, err)) ||
        (st = upload(d, ctx->s.rope[0], (size_t)d->n_ctx * (size_t)hp->rope.n_rot * sizeof(float),
                     &d->rope, err)))
        goto fail;
    if (ctx->model->tied_output)
        d->output = d->tok_embd;
    else if ((st = upload_mat(d, &ctx->model->output, &d->output, err)))
        goto fail;

    size_t q_dim = (size_t)hp->n_head * (size_t)hp->head_dim;
    size_t kv_dim = (size_t)hp->n_head_kv * (size_t)hp->head_dim;
    st = FX_ERR_NOMEM;
    if (!(d->x = dev_alloc(d, embd, err)) || !(d->xn = dev_alloc(d, embd, err)) ||
        !(d->h = dev_alloc(d, embd, err)) || !(d->q = dev_alloc(d, q_dim * 4, err)) ||
        !(d->k = dev_alloc(d, kv_dim * 4, err)) || !(d->v = dev_alloc(d, kv_dim * 4, err)) ||
        !(d->att = dev_alloc(d, q_dim * 4, err)) ||
        !(d->gate = dev_alloc(d, (size_t)hp->n_ff * 4, err)) ||
        !(d->up = dev_alloc(d, (size_t)hp->n_ff * 4, err)) ||
        !(d->logits = dev_alloc(d, (size_t)hp->n_vocab * 4, err)) ||
        !(d->d_step = dev_alloc(d, 8, err)))
        goto fail;
    *out = d;
    return FX_OK;
fail:
    fx_cuda_decoder_free(d);
    return err && err->code ? err->code : st;
}

void fx_cuda_decoder_free(struct fx_cuda_decoder *d) {
    if (!d)
        return;
    if (d->stream)
        fx_cuda_stream_sync(d->stream, NULL);
    fx_cuda_graph_free(d->graph);
    for (int64_t i = 0; i < d->n_allocs; i++)
        fx_cuda_free(d->allocs[i]);
    fx_cuda_host_free(d->h_step);
    fx_cuda_host_free(d->h_x);
    fx_cuda_stream_free(d->stream);
    free(d->allocs);
    free(d->layers);
    free(d);
}

/* ---- the step ------------------------------------------------------------------------------ */

/* Stops at the first failed launch: `st` carries it through the rest of the step. */
#define TRY(call)                                                                                  \
    do {                                                                                           \
        if (st == FX_OK)                                                                           \
            st = (call);                                                                           \
    } while (0)

static fx_status matvec(const struct fx_cuda_decoder *d, const struct fx_cuda_mat *w,
                        const float *x, float *y, struct fx_error *err) {
    return fx_cuda_matmul(w, x, w->ne0, 1, y, w->ne1, d->stream, err);
}

static fx_status attention_block(const struct fx_cuda_decoder *d, const struct dev_layer *l,
                                 struct fx_error *err) {
    const struct fx_hparams *hp = &d->m->hp;
    int64_t hd = hp->head_dim, q_dim = hp->n_head * hd, kv_dim = hp->n_head_kv * hd;
    const int32_t *pos = d->d_step + 1;
    void *s = d->stream;
    fx_status st = FX_OK;
    TRY(fx_cuda_rms_norm(d->xn, d->x, l->attn_norm, 1, hp->n_embd, hp->n_embd, hp->rms_eps, s,
                         err));
    TRY(matvec(d, &l->wq, d->xn, d->q, err));
    TRY(matvec(d, &l->wk, d->xn, d->k, err));
    TRY(matvec(d, &l->wv, d->xn, d->v, err));
    if (l->bq) {
        TRY(fx_cuda_add(d->q, d->q, l->bq, q_dim, s, err));
        TRY(fx_cuda_add(d->k, d->k, l->bk, kv_dim, s, err));
        TRY(fx_cuda_add(d->v, d->v, l->bv, kv_dim, s, err));
    }
    if (l->q_norm) {
        TRY(fx_cuda_rms_norm(d->q, d->q, l->q_norm, hp->n_head, hd, hd, hp->rms_eps, s, err));
        TRY(fx_cuda_rms_norm(d->k, d->k, l->k_norm, hp->n_head_kv, hd, hd, hp->rms_eps, s, err));
    }
    int neox = hp->rope.kind == FX_ROPE_NEOX;
    TRY(fx_cuda_rope(d->q, 1, q_dim, hp->n_head, hd, hp->rope.n_rot, neox, d->rope, pos, s, err));
    TRY(fx_cuda_rope(d->k, 1, kv_dim, hp->n_head_kv, hd, hp->rope.n_rot, neox, d->rope, pos, s,
                     err));
    TRY(fx_cuda_kv_store(d->type_k, d->k, 1, hp->n_head_kv, hd, l->k_cache, d->n_ctx, pos, s, err));
    TRY(fx_cuda_kv_store(d->type_v, d->v, 1, hp->n_head_kv, hd, l->v_cache, d->n_ctx, pos, s, err));
    /* The graph reads the position at run time; n_keys bounds it by the cache. */
    struct fx_cuda_attn a = {.kv_type = d->type_k,
                             .n_head = hp->n_head,
                             .n_head_kv = hp->n_head_kv,
                             .dim_k = hd,
                             .dim_v = hd,
                             .k_ctx = d->n_ctx,
                             .v_ctx = d->n_ctx,
                             .n_keys = d->n_ctx,
                             .scale = hp->attn_scale,
                             .softcap = hp->attn_softcap};
    TRY(fx_cuda_attn_decode(&a, pos, d->q, l->k_cache, l->v_cache, NULL, d->att, s, err));
    TRY(matvec(d, &l->wo, d->att, d->h, err));
    if (l->bo)
        TRY(fx_cuda_add(d->h, d->h, l->bo, hp->n_embd, s, err));
    TRY(fx_cuda_add(d->x, d->x, d->h, hp->n_embd, s, err));
    return st;
}

static fx_status ffn_block(const struct fx_cuda_decoder *d, const struct dev_layer *l,
                           struct fx_error *err) {
    const struct fx_hparams *hp = &d->m->hp;
    void *s = d->stream;
    fx_status st = FX_OK;
    TRY(fx_cuda_rms_norm(d->xn, d->x, l->ffn_norm, 1, hp->n_embd, hp->n_embd, hp->rms_eps, s, err));
    TRY(matvec(d, &l->gate, d->xn, d->gate, err));
    TRY(matvec(d, &l->up, d->xn, d->up, err));
    TRY(fx_cuda_swiglu(d->gate, d->gate, d->up, hp->n_ff, s, err));
    TRY(matvec(d, &l->down, d->gate, d->h, err));
    TRY(fx_cuda_add(d->x, d->x, d->h, hp->n_embd, s, err));
    return st;
}

/* The whole step on the stream (captured into the graph once). */
static fx_status enqueue_step(const struct fx_cuda_decoder *d, struct fx_error *err) {
    const struct fx_hparams *hp = &d->m->hp;
    fx_status st = FX_OK;
    TRY(fx_cuda_copy_async(d->d_step, d->h_step, 8, d->stream, err));
    if (d->il0 == 0)
        TRY(fx_cuda_get_rows(&d->tok_embd, d->d_step, 1, d->x, d->stream, err));
    else /* the residual row the CPU's layers left */
        TRY(fx_cuda_copy_async(d->x, d->h_x, (size_t)hp->n_embd * sizeof(float), d->stream, err));
    for (int il = d->il0; il < hp->n_layer; il++) {
        TRY(attention_block(d, &d->layers[il], err));
        TRY(ffn_block(d, &d->layers[il], err));
    }
    TRY(fx_cuda_rms_norm(d->xn, d->x, d->output_norm, 1, hp->n_embd, hp->n_embd, hp->rms_eps,
                         d->stream, err));
    TRY(matvec(d, &d->output, d->xn, d->logits, err));
    return st;
}

fx_status fx_cuda_decoder_step(struct fx_cuda_decoder *d, fx_token token, int32_t pos,
                               const float *x, float *logits, struct fx_error *err) {
    const struct fx_hparams *hp = &d->m->hp;
    if ((d->il0 > 0) != (x != NULL))
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "cuda decoder: the residual row is %s", x ? "not wanted" : "missing");
    if (token < 0 || token >= hp->n_vocab)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "token %d outside the vocabulary of %d", token, hp->n_vocab);
    if (pos < 0 || pos >= d->n_ctx || pos > d->n_filled)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "position %d: the device cache holds %d of %d positions", pos,
                            d->n_filled, d->n_ctx);
    d->h_step[0] = token;
    d->h_step[1] = pos;
    if (x)
        memcpy(d->h_x, x, (size_t)hp->n_embd * sizeof(float));
    fx_status st;
    if (!d->graph) {
        if ((st = fx_cuda_capture_begin(d->stream, err)))
            return st;
        fx_status enq = enqueue_step(d, err);
        struct fx_error end_err = {0};
        st = fx_cuda_capture_end(d->stream, &d->graph, &end_err);
        if (enq)
            return enq;
        if (st) {
            if (err)
                *err = end_err;
            return st;
        }
    }
    if ((st = fx_cuda_graph_launch(d->graph, d->stream, err)) ||
        (st = fx_cuda_stream_sync(d->stream, err)) ||
        (st = fx_cuda_download(logits, d->logits, (size_t)hp->n_vocab * sizeof(float), err)))
        return st;
    d->n_filled = pos + 1;
    if (d->host_from > pos)
        d->host_from = pos;
    return FX_OK;
}

bool fx_cuda_decoder_takes(const struct fx_fwd *f) {
    return f->n == 1 && f->kv.kind == FX_KV_CONTIG && f->logits &&
           (f->logits_rows == FX_LOGITS_ALL || f->logits_rows == FX_LOGITS_LAST) && !f->hidden;
}

int32_t fx_cuda_decoder_cpu_layers(const struct fx_cuda_decoder *d) {
    return d->il0;
}

fx_status fx_cuda_decoder_forward(struct fx_cuda_decoder *d, const struct fx_fwd *f,
                                  struct fx_error *err) {
    const float *x = d->il0 > 0 ? f->ctx->s.x : NULL;
    fx_status st = fx_cuda_decoder_step(d, f->tokens[0], f->kv.u.contig.pos0, x, f->logits, err);
    if (st == FX_OK)
        fx_fwd_finish(f);
    return st;
}

/* Copies rows p0 .. p1 - 1 of every device layer and head between the host cache and the device's:
 * per layer, keys then values, each one strided block (heads n_ctx rows apart on the device).
 * The device keeps keys as rows and the host as tiles (kv/kv.h): they pass through rows, the
 * layer's heads n rows apart, gathered out of the host's tiles or scattered into them. */
static fx_status copy_rows(struct fx_cuda_decoder *d, const struct fx_kv_contig *kv, int32_t p0,
                           int32_t p1, bool to_host, struct fx_error *err) {
    if (p1 <= p0)
        return FX_OK;
    size_t n = (size_t)(p1 - p0), heads = (size_t)kv->n_head_kv;
    uint8_t *keys = malloc(heads * n * kv->k_row); /* [n_head_kv][n][k_row] */
    if (!keys)
        return fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET,
                            "out of memory for %zu key rows to copy", heads * n);
    fx_status st = FX_OK;
    for (int il = d->il0; il < kv->n_layer && !st; il++) {
        const struct dev_layer *l = &d->layers[il];
        size_t k_pitch = (size_t)kv->n_ctx * kv->k_row, k_bytes = n * kv->k_row;
        uint8_t *k_dev = (uint8_t *)l->k_cache + (size_t)p0 * kv->k_row;
        if (!to_host)
            for (size_t g = 0; g < heads; g++)
                for (int32_t p = p0; p < p1; p++) {
                    struct fx_kv_key_at key = fx_kv_contig_key(kv, il, (int)g, p);
                    fx_kv_tile_get(kv->type_k, kv->head_dim, key.tile, key.slot, 0, kv->head_dim,
                                   keys + (g * n + (size_t)(p - p0)) * kv->k_row);
                }
        st = to_host ? fx_cuda_copy_2d(keys, k_bytes, k_dev, k_pitch, k_bytes, heads, err)
                     : fx_cuda_copy_2d(k_dev, k_pitch, keys, k_bytes, k_bytes, heads, err);
        if (!st && to_host)
            for (size_t g = 0; g < heads; g++)
                for (int32_t p = p0; p < p1; p++) {
                    struct fx_kv_key_at key = fx_kv_contig_key(kv, il, (int)g, p);
                    fx_kv_tile_put(kv->type_k, kv->head_dim, key.tile, key.slot, 0, kv->head_dim,
                                   keys + (g * n + (size_t)(p - p0)) * kv->k_row);
                }
        size_t v_pitch = (size_t)kv->n_ctx * kv->v_row;
        uint8_t *v_host = fx_kv_contig_v(kv, il, 0, p0);
        uint8_t *v_dev = (uint8_t *)l->v_cache + (size_t)p0 * kv->v_row;
        if (!st)
            st = to_host
                     ? fx_cuda_copy_2d(v_host, v_pitch, v_dev, v_pitch, n * kv->v_row, heads, err)
                     : fx_cuda_copy_2d(v_dev, v_pitch, v_host, v_pitch, n * kv->v_row, heads, err);
    }
    free(keys);
    return st;
}

fx_status fx_cuda_decoder_kv_to_host(struct fx_cuda_decoder *d, struct fx_kv_contig *kv,
                                     struct fx_error *err) {
    fx_status st = copy_rows(d, kv, d->host_from, d->n_filled, true, err);
    if (st == FX_OK)
        d->host_from = d->n_filled;
    return st;
}

fx_status fx_cuda_decoder_kv_from_host(struct fx_cuda_decoder *d, const struct fx_kv_contig *kv,
                                       int32_t pos0, int32_t n, struct fx_error *err) {
    fx_status st = copy_rows(d, kv, pos0, pos0 + n, false, err);
    if (st == FX_OK)
        d->n_filled = d->host_from = kv->n_filled;
    return st;
}

void fx_cuda_decoder_truncate(struct fx_cuda_decoder *d, int32_t n) {
    if (d->n_filled > n)
        d->n_filled = n;
    if (d->host_from > n)
        d->host_from = n;
}
