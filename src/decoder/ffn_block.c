/* The dense feed-forward block:
 *
 *   xn = rms_norm(x) * ffn_norm
 *   a = act(xn Wgate^T) * (xn Wup^T)       act: SiLU, GELU or gpt-oss's clamped SwiGLU
 *   h = a Wdown^T, post-norm (gemma), x += h
 *
 * The gated activation is shared with the MoE block (fx_dec_gated_act_rows). */
#include "decoder/decoder.h"

void fx_dec_gated_act_rows(const struct fx_context *ctx, float *out, const float *gate,
                           const float *up, int64_t n_ff, int64_t r0, int64_t r1) {
    const struct fx_kernels *k = ctx->k;
    const struct fx_hparams *hp = &ctx->model->hp;
    for (int64_t r = r0; r < r1; r++) {
        float *o = out + r * n_ff;
        const float *g = gate + r * n_ff, *u = up + r * n_ff;
        switch (hp->act) {
        case FX_FFN_SILU:
            k->glu[FX_ACT_SILU](o, g, u, n_ff);
            break;
        case FX_FFN_GELU:
            k->glu[FX_ACT_GELU](o, g, u, n_ff);
            break;
        case FX_FFN_SWIGLU_OAI:
            k->swiglu_oai(o, g, u, n_ff, 1.702f, hp->act_limit);
            break;
        }
    }
}

void fx_ffn_block_on_worker(const struct fx_worker *w, const struct fx_chunk *c, int il) {
    const struct fx_context *ctx = c->f->ctx;
    const struct fx_hparams *hp = &ctx->model->hp;
    const struct fx_layer *l = &ctx->model->layers[il];
    const struct fx_scratch *s = &ctx->s;
    const struct fx_rows *r = c->rows;
    int64_t dim = hp->n_embd, n_ff = hp->n_ff, n = c->n;

    const struct fx_mat *gate_up[2] = {&l->ffn_gate, &l->ffn_up};
    float *gate_up_out[2] = {s->gate, s->up};
    fx_dec_norm_input_on_worker(w, ctx, r, r->xn, r->x, l->ffn_norm, n, dim, 2, gate_up);
    fx_dec_dump(w, c, "ffn_norm", il, r->xn, n, dim);
    fx_dec_matmuls_on_worker(w, ctx, r->act, r->xn, n, dim, 2, gate_up, gate_up_out);

    const struct fx_mat *down[1] = {&l->ffn_down};
    float *down_out[1] = {s->h};
    int64_t b, e;
    fx_dec_rows_range(w, r, n, &b, &e);
    fx_dec_gated_act_rows(ctx, r->hid, s->gate, s->up, n_ff, b, e);
    fx_dec_quantize_rows(ctx, r->act, r->hid, b, e, n_ff, 1, down);
    fx_dec_rows_done(w, r);
    fx_dec_matmuls_on_worker(w, ctx, r->act, r->hid, n, n_ff, 1, down, down_out);

    fx_dec_add_output_rows(ctx, r, NULL, l->post_ffn_norm, b, e);
    fx_dec_dump(w, c, "l_out", il, r->x, n, dim);
}
