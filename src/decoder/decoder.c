/* The forward body and the shared steps of every block. Read top to bottom, a forward call is:
 * embed the chunk's tokens, run each layer's attention (or Gated DeltaNet) and FFN (or MoE) block,
 * then normalise the rows that need output and project them to logits. */
#include "decoder/decoder.h"

#include <math.h>
#include <string.h>

#include "core/error.h"
#include "kernels/types.h"

/* Bytes of one activation row of n_in elements in `type`. Every input width of a model is a whole
 * number of blocks of the formats its matrices are dotted with (the loader checked the shapes). */
static uint64_t act_row_bytes(enum fx_type type, int64_t n_in) {
    uint64_t bytes = 0;
    fx_type_row_bytes(type, n_in, &bytes);
    return bytes;
}

void fx_dec_quantize_cols(const struct fx_context *ctx, const struct fx_act_bufs *a,
                          const float *src, int64_t r0, int64_t r1, int64_t n_in, int64_t c0,
                          int64_t c1, int nw, const struct fx_mat *const *ws) {
    const struct fx_kernels *k = ctx->k;
    uint64_t done = 0; /* bit t: rows already quantized to type t */
    for (int i = 0; i < nw; i++) {
        enum fx_type t = k->types[ws[i]->type].vec_dot_type;
        if (t == FX_TYPE_F32 || (done >> t) & 1)
            continue;
        done |= 1ull << t;
        uint64_t stride = act_row_bytes(t, n_in), skip = act_row_bytes(t, c0);
        for (int64_t r = r0; r < r1; r++)
            k->types[t].quantize_act(src + r * n_in + c0, (uint8_t *)a->rows[t] + r * stride + skip,
                                     c1 - c0);
    }
    /* The rows' metadata for each weight format that reads some, from the blocks just made. */
    uint64_t meta_done = 0; /* bit t: metadata made for weight format t */
    for (int i = 0; i < nw; i++) {
        enum fx_type wt = ws[i]->type, t = k->types[wt].vec_dot_type;
        if (!k->types[wt].act_meta || (meta_done >> wt) & 1)
            continue;
        meta_done |= 1ull << wt;
        uint64_t stride = act_row_bytes(t, n_in), skip = act_row_bytes(t, c0);
        for (int64_t r = r0; r < r1; r++)
            k->types[wt].act_meta((uint8_t *)a->rows[t] + r * stride + skip, c1 - c0,
                                  (uint8_t *)fx_dec_act_meta(a, wt, n_in, r) +
                                      fx_act_meta_bytes(c0));
    }
}

bool fx_dec_cols_whole_blocks(const struct fx_context *ctx, int64_t width, int nw,
                              const struct fx_mat *const *ws) {
    for (int i = 0; i < nw; i++) {
        enum fx_type t = ctx->k->types[ws[i]->type].vec_dot_type;
        if (width % fx_type_block_elems(t) != 0 ||
            (ctx->k->types[ws[i]->type].act_meta && width % FX_QK != 0))
            return false;
    }
    return true;
}

void fx_dec_quantize_rows(const struct fx_context *ctx, const struct fx_act_bufs *a,
                          const float *src, int64_t r0, int64_t r1, int64_t n_in, int nw,
                          const struct fx_mat *const *ws) {
    fx_dec_quantize_cols(ctx, a, src, r0, r1, n_in, 0, n_in, nw, ws);
}

void fx_dec_norm_input_on_worker(const struct fx_worker *w, const struct fx_context *ctx,
                                 const struct fx_rows *r, float *out, const float *in,
                                 const float *weight, int64_t n, int64_t dim, int nw,
                                 const struct fx_mat *const *ws) {
    int64_t b, e;
    fx_dec_rows_range(w, r, n, &b, &e);
    for (int64_t i = b; i < e; i++)
        ctx->k->rms_norm(out + i * dim, in + i * dim, weight, dim, ctx->model->hp.rms_eps);
    fx_dec_quantize_rows(ctx, r->act, out, b, e, dim, nw, ws);
    fx_dec_rows_done(w, r);
}

const void *fx_dec_act_rows(const struct fx_context *ctx, const struct fx_act_bufs *a,
                            enum fx_type w_type, const float *src, int64_t n_in, int64_t r,
                            uint64_t *stride) {
    enum fx_type t = ctx->k->types[w_type].vec_dot_type;
    if (t == FX_TYPE_F32) {
        *stride = (uint64_t)n_in * sizeof(float);
        return src + r * n_in;
    }
    *stride = act_row_bytes(t, n_in);
    return (const uint8_t *)a->rows[t] + (uint64_t)r * *stride;
}

void *fx_dec_act_meta(const struct fx_act_bufs *a, enum fx_type w_type, int64_t n_in, int64_t r) {
    uint8_t *meta = a->meta[w_type];
    return meta ? meta + (uint64_t)r * fx_act_meta_bytes(n_in) : NULL;
}

/* Batches of more rows than this share their matmuls dynamically, in pieces of PIECE_ROWS
 * weight rows: a piece is then long enough (128 x n_in x n multiply-adds) that claiming it costs
 * nothing, and a worker that the machine slows down takes fewer pieces instead of making the
 * others wait. Fewer rows (decode) keep the static split: its pieces would be too short. */
#define DYNAMIC_MIN_ROWS 8
#define PIECE_ROWS       128
_Static_assert(PIECE_ROWS % FX_MATMUL_ROW_UNIT == 0, "pieces start on row units");

/* Steps of at most this many rows claim their next piece before computing the current one, so
 * that its first weights come from memory while the current one ends (struct fx_mat_piece): a
 * piece of 16 rows is four pairs of panels, and the first pair's wait was a quarter of it. More
 * rows keep the weights of a piece in L2 for longer (the wait is a small share), and a held piece
 * would cost more balance. */
#define HOLD_MAX_ROWS 16

/* The matrix of the list ws whose pieces hold piece p (pieces[i]: pieces of the matrices
 * before i), from matrix i on. */
static int piece_matrix(const int64_t *pieces, int i, int64_t p) {
    while (p >= pieces[i + 1])
        i++;
    return i;
}

void fx_dec_matmuls_on_worker(const struct fx_worker *w, const struct fx_context *ctx,
                              const struct fx_act_bufs *a, const float *src, int64_t n,
                              int64_t n_in, int nw, const struct fx_mat *const *ws,
                              float *const *outs) {
    const void *act[FX_DEC_MAX_MATMULS], *meta[FX_DEC_MAX_MATMULS];
    uint64_t stride[FX_DEC_MAX_MATMULS];
    int64_t pieces[FX_DEC_MAX_MATMULS + 1] = {0}; /* pieces of matrices before i */
    FX_ASSERT(nw <= FX_DEC_MAX_MATMULS);
    for (int i = 0; i < nw; i++) {
        act[i] = fx_dec_act_rows(ctx, a, ws[i]->type, src, n_in, 0, &stride[i]);
        meta[i] = fx_dec_act_meta(a, ws[i]->type, n_in, 0);
        pieces[i + 1] = pieces[i] + (ws[i]->ne1 + PIECE_ROWS - 1) / PIECE_ROWS;
    }
    if (n > DYNAMIC_MIN_ROWS) {
        /* Claimed pieces: p now, q next (held while p runs, while more than enough pieces are
         * left for every worker: the last ones go to whoever is free). A failed claim ends the
         * loop: each worker draws exactly one (fx_par_claim). */
        int64_t p, q = 0, total = pieces[nw];
        bool have = fx_par_claim(w, total, &p);
        for (int i = 0; have;) {
            i = piece_matrix(pieces, i, p);
            bool hold = n <= HOLD_MAX_ROWS && p + 2 * w->nth < total, next = false;
            struct fx_mat_piece then = {0};
            if (hold && (next = fx_par_claim(w, total, &q))) {
                int iq = piece_matrix(pieces, i, q);
                then = (struct fx_mat_piece){ws[iq], (q - pieces[iq]) * PIECE_ROWS};
            }
            int64_t r0 = (p - pieces[i]) * PIECE_ROWS;
            fx_matmul_rows(ctx->k, ws[i], r0, r0 + PIECE_ROWS, act[i], stride[i], n, outs[i],
                           ws[i]->ne1, meta[i], next ? &then : NULL);
            if (hold) {
                have = next;
                p = q;
            } else {
                have = fx_par_claim(w, total, &p);
            }
        }
    } else {
        for (int i = 0; i < nw; i++)
            fx_matmul(ctx->k, ws[i], act[i], stride[i], n, outs[i], ws[i]->ne1, w->ith, w->nth,
                      meta[i]);
    }
    fx_par_barrier(w);
}

void fx_dec_add_output_rows(const struct fx_context *ctx, const struct fx_rows *r,
                            const float *bias, const float *post_norm, int64_t b, int64_t e) {
    const struct fx_kernels *k = ctx->k;
    int64_t dim = ctx->model->hp.n_embd;
    for (int64_t i = b; i < e; i++) {
        const float *h = ctx->s.h + i * dim;
        float *ho = r->h + i * dim, *x = r->x + i * dim;
        if (bias) {
            k->add(ho, h, bias, dim);
            h = ho;
        }
        if (post_norm) {
            k->rms_norm(ho, h, post_norm, dim, ctx->model->hp.rms_eps);
            h = ho;
        }
        k->add(x, x, h, dim);
    }
}

/* x[i] = embedding of token i, times the architecture's embedding scale. */
static void embed_on_worker(const struct fx_worker *w, const struct fx_chunk *c) {
    const struct fx_context *ctx = c->f->ctx;
    const struct fx_model *m = ctx->model;
    const struct fx_mat *e = &m->tok_embd;
    int64_t dim = m->hp.n_embd;
    int64_t b, end;
    fx_dec_rows_range(w, c->rows, c->n, &b, &end);
    for (int64_t i = b; i < end; i++) {
        fx_token t = c->f->tokens[c->row0 + i];
        float *x = c->rows->x + i * dim;
        ctx->k->types[e->type].to_float((const uint8_t *)e->data + (uint64_t)t * e->row_bytes, x,
                                        dim);
        if (m->hp.embd_scale != 1.0f)
            ctx->k->scale(x, x, m->hp.embd_scale, dim);
    }
    fx_dec_dump(w, c, "inp_embd", -1, c->rows->x, c->n, dim);
}

/* The MTP head's input rows: x = eh_proj [rms(embedding of the token) * enorm |
 * rms(hidden_in) * hnorm] (a zero hidden row stays zero). */
static void mtp_input_on_worker(const struct fx_worker *w, const struct fx_chunk *c) {
    const struct fx_context *ctx = c->f->ctx;
    const struct fx_model *m = ctx->model;
    const struct fx_mtp *x = &m->mtp[0];
    const struct fx_mat *e = &x->embed;
    int64_t dim = m->hp.n_embd;
    int64_t b, end;
    FX_ASSERT(!c->rows->own); /* the projection writes the shared x */
    fx_dec_own_rows(w, c->n, &b, &end);
    for (int64_t i = b; i < end; i++) {
        fx_token t = c->f->tokens[c->row0 + i];
        float *emb = ctx->s.xn + i * dim, *in = ctx->s.mtp_in + i * 2 * dim;
        ctx->k->types[e->type].to_float((const uint8_t *)e->data + (uint64_t)t * e->row_bytes, emb,
                                        dim);
        ctx->k->rms_norm(in, emb, x->enorm, dim, m->hp.rms_eps);
        ctx->k->rms_norm(in + dim, c->f->hidden_in + (c->row0 + i) * dim, x->hnorm, dim,
                         m->hp.rms_eps);
    }
    const struct fx_mat *ws[1] = {&x->eh_proj};
    float *outs[1] = {ctx->s.x};
    fx_dec_quantize_rows(ctx, &ctx->s.act, ctx->s.mtp_in, b, end, 2 * dim, 1, ws);
    fx_par_barrier(w);
    fx_dec_matmuls_on_worker(w, ctx, &ctx->s.act, ctx->s.mtp_in, c->n, 2 * dim, 1, ws, outs);
    fx_dec_dump(w, c, "mtp_inp", -1, ctx->s.x, c->n, dim);
}

/* The rows of the chunk that produce output: all of them, the call's last row only, or (hidden
 * states only) all of them without logits. */
static void output_on_worker(const struct fx_worker *w, const struct fx_chunk *c) {
    const struct fx_fwd *f = c->f;
    const struct fx_context *ctx = f->ctx;
    const struct fx_model *m = ctx->model;
    int64_t dim = m->hp.n_embd, n_vocab = m->hp.n_vocab;
    int64_t r0 = 0, nr = c->n;
    /* The MTP head has its own final norm and vocabulary projection (the trunk's when the file
     * shares them). */
    const float *out_norm = m->output_norm;
    const struct fx_mat *head = &m->output;
    if (f->hidden_in) {
        out_norm = m->mtp[0].head_norm ? m->mtp[0].head_norm : m->output_norm;
        head = &m->mtp[0].head;
    }
    if (f->logits_rows == FX_LOGITS_NONE && !f->hidden)
        return; /* a call kept for its cache rows only (the MTP head's catch-up) */
    const struct fx_rows *rows = c->rows;
    const float *x = rows->x;
    float *logits = f->logits + c->row0 * n_vocab;
    if (f->logits_rows == FX_LOGITS_LAST) {
        /* A prefill that keeps every row's hidden state (for the MTP head): the rows' norms
         * here, the last row's logits below as without. Each worker copies out its own rows
         * (shared), or a share of them (own: it has them all). */
        if (f->hidden) {
            int64_t b, e;
            fx_dec_norm_input_on_worker(w, ctx, rows, rows->xn, x, out_norm, c->n, dim, 0, NULL);
            fx_dec_own_rows(w, c->n, &b, &e);
            memcpy(f->hidden + (c->row0 + b) * dim, rows->xn + b * dim,
                   (size_t)((e - b) * dim) * sizeof(float));
        }
        if (c->row0 + c->n != f->n)
            return; /* the call's last row is in a later chunk */
        r0 = c->n - 1;
        nr = 1;
        logits = f->logits;
    }
    /* The rows this region normalises may belong to another worker (the last row alone). */
    fx_dec_rows_done(w, rows);
    if (f->logits_rows == FX_LOGITS_MARKED && f->marked) {
        /* The marked rows, gathered in order into h (free between blocks); their logits follow
         * those of the marked rows of earlier chunks. */
        int64_t before = 0, b, e;
        for (int64_t i = 0; i < c->row0; i++)
            before += f->marked[i] != 0;
        fx_dec_rows_range(w, rows, c->n, &b, &e);
        nr = 0;
        for (int64_t i = 0; i < c->n; i++)
            if (f->marked[c->row0 + i]) {
                if (i >= b && i < e)
                    memcpy(rows->h + nr * dim, x + i * dim, (size_t)dim * sizeof(float));
                nr++;
            }
        fx_dec_rows_done(w, rows);
        if (nr == 0)
            return;
        x = rows->h;
        logits = f->logits + before * n_vocab;
    }
    float *xn = rows->xn + r0 * dim;
    const struct fx_mat *ws[1] = {head};
    int nw = f->logits_rows == FX_LOGITS_NONE ? 0 : 1;
    fx_dec_norm_input_on_worker(w, ctx, rows, xn, x + r0 * dim, out_norm, nr, dim, nw, ws);
    fx_dec_dump(w, c, "result_norm", -1, xn, nr, dim);
    if (f->hidden) {
        int64_t b, e;
        fx_par_range(nr, w->ith, w->nth, 1, &b, &e);
        memcpy(f->hidden + (c->row0 + r0 + b) * dim, xn + b * dim,
               (size_t)((e - b) * dim) * sizeof(float));
    }
    if (f->logits_rows == FX_LOGITS_NONE)
        return;
    float *outs[1] = {logits};
    fx_dec_matmuls_on_worker(w, ctx, rows->act, xn, nr, dim, 1, ws, outs);
    if (m->hp.final_softcap > 0.0f) {
        int64_t b, e;
        fx_par_range(nr, w->ith, w->nth, 1, &b, &e);
        for (int64_t i = b; i < e; i++)
            ctx->k->softcap(logits + i * n_vocab, n_vocab, m->hp.final_softcap);
    }
    fx_dec_dump(w, c, "result_output", -1, logits, nr, n_vocab);
}

/* The most attention blocks of a chunk checked for prepare_in_attention (a step of that many
 * sequences at most; the check compares every pair). */
#define ALONE_MAX_BLOCKS 64

/* The chunk's attention blocks (n_att): runs of consecutive rows of one sequence, at most
 * FX_ATT_BLOCK_ROWS each. Every worker counts them; worker 0 writes their first rows to
 * att_start, which the attention reads after the barrier of the QKV matmuls. Also sets
 * prepare_in_attention: no two blocks of one sequence (one block, or one per sequence). */
static void attention_blocks(const struct fx_worker *w, struct fx_chunk *c) {
    int32_t *start = c->f->ctx->s.att_start;
    int64_t first[ALONE_MAX_BLOCKS];
    int64_t n_att = 0, b0 = 0;
    bool alone = true;
    for (int64_t i = 0; i < c->n; i++)
        if (i == 0 || i - b0 == FX_ATT_BLOCK_ROWS || !fx_kv_step_same_seq(&c->kv, b0, i)) {
            if (w->ith == 0)
                start[n_att] = (int32_t)i;
            alone = alone && n_att < ALONE_MAX_BLOCKS;
            for (int64_t j = 0; alone && j < n_att; j++)
                alone = !fx_kv_step_same_seq(&c->kv, first[j], i);
            if (alone)
                first[n_att] = i;
            n_att++;
            b0 = i;
        }
    if (w->ith == 0)
        start[n_att] = (int32_t)c->n;
    c->n_att = n_att;
    c->prepare_in_attention = alone;
}

/* This worker's rows for a chunk of n rows of f: its own when there are few and its context keeps
 * them, else the shared ones. The MTP head's input and a device's layers work on the shared x. */
static struct fx_rows chunk_rows(const struct fx_worker *w, const struct fx_fwd *f, int64_t n) {
    const struct fx_context *ctx = f->ctx;
    const struct fx_scratch *s = &ctx->s;
    if (s->own && n <= ctx->own_rows && !f->hidden_in && f->cpu_layers == 0)
        return s->own[w->ith];
    return (struct fx_rows){
        .x = s->x, .xn = s->xn, .h = s->h, .hid = s->gate, .att = s->att, .act = &s->act};
}

/* One call's chunks. */
static void call_on_worker(const struct fx_worker *w, const struct fx_fwd *f) {
    const struct fx_context *ctx = f->ctx;
    const struct fx_model *m = ctx->model;
    for (int64_t row0 = 0; row0 < f->n; row0 += ctx->n_batch) {
        struct fx_chunk c = {
            .f = f,
            .row0 = row0,
            .n = f->n - row0 < ctx->n_batch ? f->n - row0 : ctx->n_batch,
            .kv = fx_kv_step_from(&f->kv, row0),
        };
        struct fx_rows rows = chunk_rows(w, f, c.n);
        c.rows = &rows;
        attention_blocks(w, &c);
        /* The trunk's layers, or the MTP head's block after them. */
        int il0 = 0, il1 = f->cpu_layers > 0 ? f->cpu_layers : m->hp.n_layer;
        if (f->hidden_in) {
            mtp_input_on_worker(w, &c);
            il0 = m->hp.n_layer;
            il1 = il0 + 1;
        } else {
            embed_on_worker(w, &c);
        }
        for (int il = il0; il < il1; il++) {
            if (m->layers[il].recurrent)
                fx_delta_block_on_worker(w, &c, il);
            else
                fx_attn_block_on_worker(w, &c, il);
            if (m->hp.n_expert > 0)
                fx_moe_block_on_worker(w, &c, il);
            else
                fx_ffn_block_on_worker(w, &c, il);
        }
        if (f->cpu_layers > 0) { /* the device takes the residual stream from here */
            fx_par_barrier(w);
            continue;
        }
        output_on_worker(w, &c);
        /* The next chunk, or the call after this one, overwrites the scratch every worker may
         * still be reading. After the last, the end of the run orders everything. */
        if (row0 + c.n < f->n || f->then)
            fx_par_barrier(w);
    }
}

void fx_forward_on_worker(const struct fx_worker *w, void *arg) {
    const struct fx_fwd *f = arg;
    call_on_worker(w, f);
    if (!f->then)
        return;
    if (f->argmax) { /* the second call's tokens: the greedy token of each of this call's rows */
        int64_t n_vocab = f->ctx->model->hp.n_vocab, b, e;
        fx_dec_own_rows(w, f->n, &b, &e);
        for (int64_t i = b; i < e; i++)
            f->argmax[i] = (fx_token)f->ctx->k->argmax(f->logits + i * n_vocab, n_vocab);
        fx_par_barrier(w);
    }
    call_on_worker(w, f->then);
}
