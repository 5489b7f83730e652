/* The Gated DeltaNet block (qwen35's linear attention), per sequence in position order:
 *
 *   xn = rms_norm(x) * attn_norm
 *   qkv = xn Wqkv^T, z = xn Wz^T, b = xn Wbeta^T, a = xn Walpha^T
 *   c = silu(causal depthwise conv of qkv over the sequence's last d_conv inputs)
 *   q, k = the first two key_dim of c, L2-normed per head of S; v = the last value_dim
 *   per V head h (its q/k head h % HK):   beta = sigmoid(b_h)
 *     g = softplus(a_h + dt_b_h) * ssm_a_h                    (log decay, <= 0)
 *     M_h = e^g M_h;  M_h += k (beta (v_h - M_h^T k))^T;  o_h = M_h^T q / sqrt(S)
 *     y_h = rms_norm(o_h) * ssm_norm * silu(z_h)
 *   h = y Wout^T, x += h
 *
 * The delta rule runs in the chunked form of kernels.h (struct fx_delta_state): a call's rows of
 * one chunk read the chunk's starting matrix in one matmul-shaped pass, and only a chunk's end
 * writes it. Chunks are cut at fixed positions, so a row's arithmetic does not depend on how the
 * sequence's rows are split into calls: batched prefill and token-by-token decode give the same
 * bits. The conv window and the delta-rule states are the sequence's recurrent state
 * (kv/recurrent.h), read and written in place; a row at position 0 starts from zeros.
 *
 * A verify step (fx_forward_verify) copies the state after each row but the last into that row's
 * snapshot (fx_fwd_snap): each worker the conv channels and V heads of the K-head groups it
 * claims, the delta rule then run one row at a time (the same bits, as above).
 *
 * Everything between the input projections and the output projection runs per K-head group in
 * one claimed pass (group_rows): one barrier instead of one after each of the conv, the norms
 * and gates, and the heads, which in a decode step cost more than their arithmetic. */
#include <math.h>
#include <string.h>

#include "decoder/decoder.h"

#define FLOATS_PER_LINE 16 /* a 64-byte cache line */

/* ggml's softplus: linear above 20, where log(1 + e^x) rounds to x. */
static float softplus(float x) {
    return x > 20.0f ? x : logf(1.0f + expf(x));
}

/* The conv of channels [b, e) over the chunk's rows in order, then silu: rconv from rqkv. The
 * channels belong to the caller's K-head group (group_rows), so no two workers touch the same
 * window. */
static void conv_channels(const struct fx_chunk *c, const struct fx_layer *l, int64_t b, int64_t e,
                          int64_t conv_dim) {
    const struct fx_context *ctx = c->f->ctx;
    const struct fx_kernels *k = ctx->k;
    const struct fx_scratch *s = &ctx->s;
    int32_t d_conv = ctx->model->hp.ssm_d_conv;
    for (int64_t i = 0, n; i < c->n; i += n) {
        /* A run of consecutive positions of one sequence, up to a row whose window is kept. */
        int32_t pos = fx_kv_step_pos(&c->kv, i);
        for (n = 1;
             i + n < c->n && !fx_fwd_snap(c->f, c->row0 + i + n - 1) &&
             fx_kv_step_same_seq(&c->kv, i, i + n) && fx_kv_step_pos(&c->kv, i + n) == pos + n;
             n++)
            ;
        float *win = fx_rstate_conv(fx_kv_step_rstate(&c->kv, i), l->rec_il) + b * (d_conv - 1);
        if (pos == 0)
            memset(win, 0, (size_t)((e - b) * (d_conv - 1)) * sizeof(float));
        float *out = s->rconv + i * conv_dim + b;
        k->conv_rows(out, win, s->rqkv + i * conv_dim + b, n, conv_dim, l->ssm_conv + b * d_conv,
                     e - b, d_conv);
        for (int64_t r = 0; r < n; r++)
            k->act[FX_ACT_SILU](out + r * conv_dim, out + r * conv_dim, e - b);
        const struct fx_rstate *snap = fx_fwd_snap(c->f, c->row0 + i + n - 1);
        if (snap)
            memcpy(fx_rstate_conv(snap, l->rec_il) + b * (d_conv - 1), win,
                   (size_t)((e - b) * (d_conv - 1)) * sizeof(float));
    }
}

/* Asks for the cache lines of channels [b, e) that the conv reads for the chunk's first row: its
 * taps, its sequence's window and its input. In decode they are cold at every token (the weight
 * stream evicted them, or another worker's projection wrote the input), and the conv's gathers
 * set off no hardware prefetcher, so its blocks of channels would each wait a trip to memory;
 * asked for together, a group's lines arrive in one. */
static void prefetch_conv(const struct fx_chunk *c, const struct fx_layer *l, int64_t b,
                          int64_t e) {
    int32_t d_conv = c->f->ctx->model->hp.ssm_d_conv;
    const float *w = l->ssm_conv + b * d_conv, *x = c->f->ctx->s.rqkv + b;
    const float *win = fx_rstate_conv(fx_kv_step_rstate(&c->kv, 0), l->rec_il) + b * (d_conv - 1);
    for (int64_t i = 0; i < (e - b) * d_conv; i += FLOATS_PER_LINE)
        __builtin_prefetch(w + i);
    for (int64_t i = 0; i < (e - b) * (d_conv - 1); i += FLOATS_PER_LINE)
        __builtin_prefetch(win + i);
    for (int64_t i = 0; i < e - b; i += FLOATS_PER_LINE)
        __builtin_prefetch(x + i);
}

/* For every row of the chunk: q and k of K head hk L2-normed (in rconv), and for the V heads
 * that read it (hk, hk + HK, ...) beta = sigmoid(b) and the log decay g. */
static void gates_rows(const struct fx_chunk *c, const struct fx_layer *l, int64_t hk,
                       int64_t conv_dim) {
    const struct fx_context *ctx = c->f->ctx;
    const struct fx_kernels *k = ctx->k;
    const struct fx_hparams *hp = &ctx->model->hp;
    const struct fx_scratch *s = &ctx->s;
    int64_t d = hp->ssm_d_state, n_hk = hp->n_ssm_k_heads, n_hv = hp->n_ssm_v_heads;
    for (int64_t i = 0; i < c->n; i++) {
        float *q = s->rconv + i * conv_dim + hk * d, *kh = q + n_hk * d;
        k->l2_norm(q, q, d, hp->rms_eps);
        k->l2_norm(kh, kh, d, hp->rms_eps);
        float *beta = s->rbeta + i * n_hv, *g = s->rg + i * n_hv;
        for (int64_t h = hk; h < n_hv; h += n_hk) {
            k->act[FX_ACT_SIGMOID](beta + h, beta + h, 1);
            g[h] = softplus(g[h] + l->ssm_dt_b[h]) * l->ssm_a[h];
        }
    }
}

/* V head hv over the chunk's rows, a run of one sequence's rows of one delta-rule chunk at a
 * time: the delta
 * rule on its state, then the gated norm of its output into ry. work: the worker's
 * [FX_DELTA_CHUNK][2 d] floats. */
static void head_rows(const struct fx_chunk *c, const struct fx_layer *l, int64_t hv,
                      int64_t conv_dim, float *work) {
    const struct fx_context *ctx = c->f->ctx;
    const struct fx_kernels *k = ctx->k;
    const struct fx_hparams *hp = &ctx->model->hp;
    const struct fx_scratch *s = &ctx->s;
    int64_t d = hp->ssm_d_state, n_hv = hp->n_ssm_v_heads;
    int64_t key_dim = d * hp->n_ssm_k_heads, value_dim = d * n_hv;
    int64_t hk = hv % hp->n_ssm_k_heads; /* GGUF tiles the V heads over the K heads */
    float scale = 1.0f / sqrtf((float)d);
    for (int64_t i = 0, n; i < c->n; i += n) {
        int32_t pos = fx_kv_step_pos(&c->kv, i), r0 = pos % FX_DELTA_CHUNK;
        int64_t most = FX_DELTA_CHUNK - r0 < c->n - i ? FX_DELTA_CHUNK - r0 : c->n - i;
        if (fx_fwd_snap(c->f, c->row0 + i))
            most = 1; /* the state after this row is kept */
        /* A run is consecutive positions of one sequence (a multi-sequence step may interleave
         * sequences' rows). */
        for (n = 1; n < most && fx_kv_step_same_seq(&c->kv, i, i + n) &&
                    fx_kv_step_pos(&c->kv, i + n) == pos + n;
             n++)
            ;
        float *mem =
            fx_rstate_ssm(fx_kv_step_rstate(&c->kv, i), l->rec_il) + hv * fx_delta_state_floats(d);
        struct fx_delta_state st = fx_delta_state_at(mem, d);
        if (pos == 0) /* the chunk's rows so far are none; only the matrix needs zeros */
            memset(st.m0, 0, (size_t)(d * d) * sizeof(float));
        float g[FX_DELTA_CHUNK], beta[FX_DELTA_CHUNK];
        for (int64_t r = 0; r < n; r++) {
            g[r] = s->rg[(i + r) * n_hv + hv];
            beta[r] = s->rbeta[(i + r) * n_hv + hv];
        }
        const float *row = s->rconv + i * conv_dim;
        float *y = s->ry + i * value_dim + hv * d;
        k->delta_rows(&st, r0, (int32_t)n, row + hk * d, row + key_dim + hk * d,
                      row + 2 * key_dim + hv * d, conv_dim, g, beta, scale, y, value_dim, work, d);
        for (int64_t r = 0; r < n; r++) {
            float *yr = y + r * value_dim;
            k->rms_norm(yr, yr, l->ssm_norm, d, hp->rms_eps);
            k->glu[FX_ACT_SILU](yr, s->rz + (i + r) * value_dim + hv * d, yr, d);
        }
        const struct fx_rstate *snap = fx_fwd_snap(c->f, c->row0 + i + n - 1);
        if (snap)
            memcpy(fx_rstate_ssm(snap, l->rec_il) + hv * fx_delta_state_floats(d), mem,
                   (size_t)fx_delta_state_floats(d) * sizeof(float));
    }
}

/* K head hk's group over the chunk's rows: the conv of its q and k channels and of the channels
 * of the V heads that read them (hk, hk + HK, ...), the norms and gates, then each of those V
 * heads' delta rule and gated norm. A group reads and writes only its own channels, heads and
 * state, so the groups need no barrier between these steps. */
static void group_rows(const struct fx_chunk *c, const struct fx_layer *l, int64_t hk,
                       int64_t conv_dim, bool quantize_y, float *work) {
    const struct fx_context *ctx = c->f->ctx;
    const struct fx_hparams *hp = &ctx->model->hp;
    int64_t d = hp->ssm_d_state, n_hk = hp->n_ssm_k_heads, n_hv = hp->n_ssm_v_heads;
    int64_t key_dim = d * n_hk;
    const struct fx_mat *out[1] = {&l->ssm_out};
    /* The group's d-channel ranges: q of hk, k of hk, then v of hk, hk + HK, ...; every range's
     * lines asked for (pass 0) before the first conv (pass 1). */
    int64_t n_ranges = 2 + (n_hv - hk + n_hk - 1) / n_hk;
    for (int pass = 0; pass < 2; pass++)
        for (int64_t r = 0; r < n_ranges; r++) {
            int64_t b = r < 2 ? r * key_dim + hk * d : 2 * key_dim + (hk + (r - 2) * n_hk) * d;
            if (pass == 0)
                prefetch_conv(c, l, b, b + d);
            else
                conv_channels(c, l, b, b + d, conv_dim);
        }
    gates_rows(c, l, hk, conv_dim);
    for (int64_t hv = hk; hv < n_hv; hv += n_hk) {
        head_rows(c, l, hv, conv_dim, work);
        if (quantize_y)
            fx_dec_quantize_cols(ctx, c->rows->act, ctx->s.ry, 0, c->n, d * n_hv, hv * d,
                                 (hv + 1) * d, 1, out);
    }
}

void fx_delta_block_on_worker(const struct fx_worker *w, const struct fx_chunk *c, int il) {
    const struct fx_context *ctx = c->f->ctx;
    const struct fx_hparams *hp = &ctx->model->hp;
    const struct fx_layer *l = &ctx->model->layers[il];
    const struct fx_scratch *s = &ctx->s;
    int64_t dim = hp->n_embd, n = c->n;
    int64_t value_dim = (int64_t)hp->ssm_d_state * hp->n_ssm_v_heads;
    int64_t conv_dim = 2 * (int64_t)hp->ssm_d_state * hp->n_ssm_k_heads + value_dim;

    const struct fx_mat *in[4] = {&l->ssm_qkv, &l->ssm_z, &l->ssm_beta, &l->ssm_alpha};
    float *in_out[4] = {s->rqkv, s->rz, s->rbeta, s->rg};
    const struct fx_rows *r = c->rows;
    fx_dec_norm_input_on_worker(w, ctx, r, r->xn, r->x, l->attn_norm, n, dim, 4, in);
    fx_dec_dump(w, c, "attn_norm", il, r->xn, n, dim);
    fx_dec_matmuls_on_worker(w, ctx, r->act, r->xn, n, dim, 4, in, in_out);

    /* The K-head groups are independent; each worker claims whole groups, and quantizes its
     * heads' blocks of y for the output projection when the heads are whole blocks of its
     * activation format (Q8_0 and the 32-wide formats; not Q8_K, whose blocks span two heads
     * of 128), which saves a barrier; otherwise the rows' owners quantize y after the pass, or
     * with own rows every worker all of y into its own activation rows, with no barrier. */
    const struct fx_mat *out[1] = {&l->ssm_out};
    bool quantize_y = !r->own && fx_dec_cols_whole_blocks(ctx, hp->ssm_d_state, 1, out);
    float *work = s->rwork + (int64_t)w->ith * FX_DELTA_CHUNK * 2 * hp->ssm_d_state;
    for (int64_t hk; fx_par_claim(w, hp->n_ssm_k_heads, &hk);)
        group_rows(c, l, hk, conv_dim, quantize_y, work);
    fx_par_barrier(w);
    fx_dec_dump(w, c, "conv", il, s->rconv, n, conv_dim);
    fx_dec_dump(w, c, "ssm_y", il, s->ry, n, value_dim);

    float *out_out[1] = {s->h};
    int64_t b, e;
    fx_dec_rows_range(w, r, n, &b, &e);
    if (!quantize_y) {
        fx_dec_quantize_rows(ctx, r->act, s->ry, b, e, value_dim, 1, out);
        fx_dec_rows_done(w, r);
    }
    fx_dec_matmuls_on_worker(w, ctx, r->act, s->ry, n, value_dim, 1, out, out_out);
    fx_dec_add_output_rows(ctx, r, NULL, NULL, b, e);
    fx_dec_dump(w, c, "ffn_inp", il, r->x, n, dim);
}
