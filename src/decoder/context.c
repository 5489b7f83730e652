/* A context: the worker pool, the KV cache and every scratch buffer a forward pass needs, all
 * planned and allocated here so that no forward call allocates. */
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "core/cpu.h"
#include "core/error.h"
#include "decoder/decoder.h"
#include "kv/state.h"
#include "cuda/decode.h"
#include "model/expert_cache.h"

#define ARENA_ALIGN 64

struct fx_context_params fx_context_default_params(void) {
    return (struct fx_context_params){.n_ctx = 0,
                                      .n_batch = 512,
                                      .n_threads = 0,
                                      .type_k = FX_KV_DEFAULT_TYPE,
                                      .type_v = FX_KV_DEFAULT_TYPE};
}

/* The arena is planned as offsets first (every size overflow-checked), then allocated once. */
struct plan {
    uint64_t size;
    bool overflow;
};

/* Reserves count elements of size bytes, 64-byte aligned; returns the offset. */
static uint64_t reserve(struct plan *p, uint64_t count, uint64_t size) {
    uint64_t bytes, start, end;
    if (fx_mul_overflow_u64(count, size, &bytes) || fx_align_up_u64(p->size, ARENA_ALIGN, &start) ||
        fx_add_overflow_u64(start, bytes, &end)) {
        p->overflow = true;
        return 0;
    }
    p->size = end;
    return start;
}

/* Every matrix a forward pass multiplies by (not the embedding table, which is only looked up). */
static int model_mats(const struct fx_model *m, int il, const struct fx_mat **out) {
    const struct fx_layer *l = &m->layers[il];
    const struct fx_mat *all[] = {&l->wq,
                                  &l->wk,
                                  &l->wv,
                                  &l->wo,
                                  &l->ffn_gate,
                                  &l->ffn_up,
                                  &l->ffn_down,
                                  &l->router,
                                  &l->gate_exps.per,
                                  &l->up_exps.per,
                                  &l->down_exps.per,
                                  &l->ssm_qkv,
                                  &l->ssm_z,
                                  &l->ssm_beta,
                                  &l->ssm_alpha,
                                  &l->ssm_out,
                                  &l->shexp_gate_inp,
                                  &l->shexp_gate,
                                  &l->shexp_up,
                                  &l->shexp_down};
    int n = 0;
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i]->data)
            out[n++] = all[i];
    return n;
}

/* Widens widest[activation format] and, when w's format reads activation metadata,
 * widest_w[weight format] to w's input. */
static void note_input(const struct fx_kernels *k, const struct fx_mat *w, uint64_t *widest,
                       uint64_t *widest_w) {
    enum fx_type t = k->types[w->type].vec_dot_type;
    if ((uint64_t)w->ne0 > widest[t])
        widest[t] = (uint64_t)w->ne0;
    if (k->types[w->type].act_meta && (uint64_t)w->ne0 > widest_w[w->type])
        widest_w[w->type] = (uint64_t)w->ne0;
}

/* Offsets of activation rows (struct fx_act_bufs); UINT64_MAX for none. */
struct act_layout {
    uint64_t rows[FX_TYPE_COUNT], meta[FX_TYPE_COUNT];
};

/* Offsets of one worker's own rows (struct fx_rows) from the start of its part of the arena. */
struct own_layout {
    uint64_t x, xn, h, hid;
    struct act_layout act;
};

/* Offsets of every buffer in the arena, in the order they are planned. */
struct layout {
    uint64_t x, xn, q, k, v, att, h, qg, gate, up, attn_state, kv_tile, att_start;
    struct act_layout act;
    uint64_t rqkv, rconv, rz, rbeta, rg, rwork, ry, shexp, mtp_in;
    uint64_t router, sel, sel_w, slot, slot_row, slot_expert, expert_off, xg, yg, rope[2];
    uint64_t router_next, xused, xslots, xreads, xpred, xstep;
    uint64_t own_rows; /* [n_threads] struct fx_rows */
    uint64_t own_acts; /* [n_threads] struct fx_act_bufs */
    uint64_t own;      /* [n_threads][own_bytes] each worker's own rows, laid out by own_layout */
    uint64_t own_bytes;
    struct own_layout own_at;
};

/* Activation rows for `rows` rows: a buffer per format in use, wide enough for the widest input
 * of any matrix dotted in that format (widest), and a metadata buffer per weight format that
 * reads some, wide enough for its widest input (widest_w). */
static void plan_act(struct plan *p, uint64_t rows, const uint64_t *widest,
                     const uint64_t *widest_w, struct act_layout *o) {
    for (int t = 0; t < FX_TYPE_COUNT; t++) {
        uint64_t row = 0;
        o->rows[t] = UINT64_MAX;
        o->meta[t] = UINT64_MAX;
        if (widest_w[t] != 0)
            o->meta[t] = reserve(p, rows, fx_act_meta_bytes((int64_t)widest_w[t]));
        if (t == FX_TYPE_F32 || widest[t] == 0)
            continue;
        if (!fx_type_row_bytes((enum fx_type)t, (int64_t)widest[t], &row))
            p->overflow = true;
        o->rows[t] = reserve(p, rows, row);
    }
}

static void set_act(uint8_t *base, const struct act_layout *o, struct fx_act_bufs *a) {
    for (int t = 0; t < FX_TYPE_COUNT; t++) {
        a->rows[t] = o->rows[t] == UINT64_MAX ? NULL : base + o->rows[t];
        a->meta[t] = o->meta[t] == UINT64_MAX ? NULL : base + o->meta[t];
    }
}

/* Rows a step may have for its workers to keep their own (struct fx_rows): a decode step, or one
 * of up to 8 sequences. Every worker then does all the rows' row-wise work, which grows with the
 * rows, to save barriers, whose cost does not: on 2 workers, 8 rows (`--parallel 8`) spent 1.8%
 * more of their samples on norms, SwiGLU and quantization and 7.6% less waiting; 16 rows 4%
 * more and 3.8% less (docs/PERFORMANCE.md). Every block but the MoE block works on own rows. */
#define OWN_ROWS_MAX 8

static int32_t own_rows(const struct fx_context *ctx, int n_threads) {
    if (n_threads < 2 || ctx->model->hp.n_expert > 0)
        return 0;
    return ctx->n_batch < OWN_ROWS_MAX ? ctx->n_batch : OWN_ROWS_MAX;
}

static void plan_layout(const struct fx_context *ctx, int n_threads, bool rope_swa_differs,
                        struct plan *p, struct layout *o) {
    const struct fx_model *m = ctx->model;
    const struct fx_hparams *hp = &m->hp;
    uint64_t nb = (uint64_t)ctx->n_batch, nf = (uint64_t)ctx->n_ffn_rows;
    uint64_t e = (uint64_t)hp->n_embd, f4 = sizeof(float), nt = (uint64_t)n_threads;
    uint64_t q_dim = (uint64_t)hp->n_head * (uint64_t)hp->head_dim;
    uint64_t k_dim = (uint64_t)hp->n_head_kv * (uint64_t)hp->head_dim;
    uint64_t v_dim = (uint64_t)hp->n_head_kv * (uint64_t)hp->head_dim_v;
    uint64_t att_dim = (uint64_t)hp->n_head * (uint64_t)hp->head_dim_v;
    uint64_t ff = (uint64_t)(hp->n_ff > hp->n_ff_exp ? hp->n_ff : hp->n_ff_exp);
    if ((uint64_t)hp->n_ff_shexp > ff)
        ff = (uint64_t)hp->n_ff_shexp;
    bool gated = false;
    for (int il = 0; il < hp->n_layer + hp->n_nextn; il++)
        gated = gated || m->layers[il].attn_out_gate;
    uint64_t rec = hp->n_layer_rec > 0 ? nb : 0; /* rows of the Gated DeltaNet buffers */
    uint64_t key_dim = (uint64_t)hp->ssm_d_state * (uint64_t)hp->n_ssm_k_heads;
    uint64_t value_dim = (uint64_t)hp->ssm_d_state * (uint64_t)hp->n_ssm_v_heads;
    uint64_t conv_dim = 2 * key_dim + value_dim;
    o->x = reserve(p, nb * e, f4);
    o->xn = reserve(p, nb * e, f4);
    o->q = reserve(p, nb * q_dim, f4);
    o->k = reserve(p, nb * k_dim, f4);
    o->v = reserve(p, nb * v_dim, f4);
    o->att = reserve(p, nb * att_dim, f4);
    o->h = reserve(p, nb * e, f4);
    o->qg = reserve(p, gated ? nb * 2 * q_dim : 0, f4);
    o->rqkv = reserve(p, rec * conv_dim, f4);
    o->rconv = reserve(p, rec * conv_dim, f4);
    o->rz = reserve(p, rec * value_dim, f4);
    o->rbeta = reserve(p, rec * (uint64_t)hp->n_ssm_v_heads, f4);
    o->rg = reserve(p, rec * (uint64_t)hp->n_ssm_v_heads, f4);
    o->rwork = reserve(
        p, rec ? (uint64_t)n_threads * FX_DELTA_CHUNK * 2 * (uint64_t)hp->ssm_d_state : 0, f4);
    o->ry = reserve(p, rec * value_dim, f4);
    o->shexp = reserve(p, hp->n_ff_shexp > 0 ? nb : 0, f4);
    o->mtp_in = reserve(p, hp->n_nextn > 0 ? nb * 2 * e : 0, f4);
    /* Rows of the FFN hidden buffers (gate, up and their activation rows): a mixture with a
     * shared expert keeps that expert's rows after the routed slots' (moe_block.c,
     * shared_row0), which takes up to n_batch + 1 rows more. */
    uint64_t nh = nf + (hp->n_ff_shexp > 0 ? nb + 1 : 0);
    o->gate = reserve(p, nh * ff, f4);
    o->up = reserve(p, nh * ff, f4);
    o->attn_state = reserve(p, (uint64_t)n_threads * (uint64_t)ctx->attn_state_per_worker, f4);
    o->kv_tile = reserve(p, (uint64_t)n_threads * 2 * FX_ATTN_RUN * (uint64_t)ctx->kv_tile_dim, f4);
    o->att_start = reserve(p, nb + 1, sizeof(int32_t));

    uint64_t widest[FX_TYPE_COUNT] = {0}, widest_w[FX_TYPE_COUNT] = {0};
    const struct fx_mat *mats[24];
    for (int il = 0; il < hp->n_layer + hp->n_nextn; il++) {
        int n = model_mats(m, il, mats);
        for (int i = 0; i < n; i++)
            note_input(ctx->k, mats[i], widest, widest_w);
    }
    note_input(ctx->k, &m->output, widest, widest_w);
    for (int i = 0; i < hp->n_nextn; i++) {
        note_input(ctx->k, &m->mtp[i].eh_proj, widest, widest_w);
        note_input(ctx->k, &m->mtp[i].head, widest, widest_w);
    }
    plan_act(p, nh, widest, widest_w, &o->act);

    /* Each worker's own rows, planned once as offsets within a part of the arena of own_bytes
     * (whole cache lines, so that no two workers write one line). */
    uint64_t nown = (uint64_t)ctx->own_rows;
    struct plan own = {0};
    o->own_at.x = reserve(&own, nown * e, f4);
    o->own_at.xn = reserve(&own, nown * e, f4);
    o->own_at.h = reserve(&own, nown * e, f4);
    o->own_at.hid = reserve(&own, nown * (ff > att_dim ? ff : att_dim), f4);
    plan_act(&own, nown, widest, widest_w, &o->own_at.act);
    p->overflow =
        p->overflow || own.overflow || fx_align_up_u64(own.size, ARENA_ALIGN, &o->own_bytes);
    o->own_rows = reserve(p, nown ? nt : 0, sizeof(struct fx_rows));
    o->own_acts = reserve(p, nown ? nt : 0, sizeof(struct fx_act_bufs));
    o->own = reserve(p, nown ? nt : 0, o->own_bytes);

    uint64_t n_exp = (uint64_t)hp->n_expert, k_used = (uint64_t)hp->n_expert_used;
    o->router = reserve(p, nb * n_exp, f4);
    o->sel = reserve(p, nb * k_used, sizeof(int32_t));
    o->sel_w = reserve(p, nb * k_used, f4);
    o->slot = reserve(p, nb * k_used, sizeof(int32_t));
    o->slot_row = reserve(p, nf, sizeof(int32_t));
    o->slot_expert = reserve(p, nf, sizeof(int32_t));
    o->expert_off = reserve(p, n_exp + 1, sizeof(int32_t));
    o->xg = reserve(p, n_exp ? nf * e : 0, f4);
    o->yg = reserve(p, n_exp ? nf * e : 0, f4);
    o->router_next = reserve(p, m->xcache ? nb * n_exp : 0, f4);
    o->xused = reserve(p, n_exp, sizeof(int32_t));
    o->xslots = reserve(p, n_exp, sizeof(int32_t));
    o->xreads = reserve(p, n_exp, sizeof(int32_t));
    o->xpred = reserve(p, FX_MOE_LOOKAHEAD_MAX * n_exp, 1);
    o->xstep = reserve(p, 1, sizeof(struct fx_moe_step));
    uint64_t rope_floats = (uint64_t)ctx->n_ctx * (uint64_t)hp->rope.n_rot;
    o->rope[0] = reserve(p, rope_floats, f4);
    o->rope[1] = rope_swa_differs ? reserve(p, rope_floats, f4) : o->rope[0];
}

/* Interleaved multi-section rope (llama.cpp's IMROPE) turns pair i by the position component
 * its sector selects: t, h and w take turns over the first 3 x sections[] sectors, the rest
 * take the fourth. A text token's components are (p, p, p, 0), so those pairs do not turn; the
 * others turn as plain rope. False for every pair of a model without sections. */
static bool rope_pair_still(const int32_t *sec, int32_t i) {
    int32_t sum = sec[0] + sec[1] + sec[2] + sec[3];
    if (sum == 0)
        return false;
    int32_t s = i % sum;
    return !((s % 3 == 0 && s < 3 * sec[0]) || (s % 3 == 1 && s < 3 * sec[1]) ||
             (s % 3 == 2 && s < 3 * sec[2]));
}

/* The (cos, sin) table of every position for one layer kind. */
static void fill_rope(const struct fx_context *ctx, float *table, float base, float scale) {
    const struct fx_rope_config *r = &ctx->model->hp.rope;
    struct fx_rope_params p = {
        .n_dims = r->n_rot,
        .freq_base = base,
        .freq_scale = scale,
        .ext_factor = r->ext_factor,
        .attn_factor = r->attn_factor,
        .beta_fast = r->beta_fast,
        .beta_slow = r->beta_slow,
        .n_ctx_orig = r->n_ctx_orig,
        .freq_factors = r->freq_factors,
    };
    for (int32_t pos = 0; pos < ctx->n_ctx; pos++) {
        float *cs = table + (int64_t)pos * r->n_rot;
        fx_rope_cache(&p, (float)pos, cs);
        for (int32_t i = 0; i < r->n_rot / 2; i++)
            if (rope_pair_still(r->sections, i)) {
                cs[2 * i] = 1.0f;
                cs[2 * i + 1] = 0.0f;
            }
    }
}

fx_status fx_context_create(const struct fx_model *m, const struct fx_context_params *params,
                            struct fx_context **out, struct fx_error *err) {
    *out = NULL;
    struct fx_context_params p = params ? *params : fx_context_default_params();
    const struct fx_hparams *hp = &m->hp;
    if (p.n_ctx == 0)
        p.n_ctx = hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096;
    if (p.n_batch == 0)
        p.n_batch = 512;
    if (p.n_ctx < 1 || p.n_ctx > (1 << 24))
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "context size %d is not in 1..%d", p.n_ctx, 1 << 24);
    if (p.n_batch < 1 || p.n_batch > (1 << 16))
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET, "batch size %d is not in 1..%d",
                            p.n_batch, 1 << 16);
    if (p.n_threads < 0 || p.n_threads > FX_POOL_MAX_THREADS)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "thread count %d is not in 0..%d", p.n_threads, FX_POOL_MAX_THREADS);
    if (p.n_gpu_layers < 0)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET, "GPU layers: %d",
                            p.n_gpu_layers);

    struct fx_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx)
        return fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "out of memory");
    ctx->model = m;
    ctx->k = fx_kernels();
    ctx->n_ctx = p.n_ctx;
    ctx->n_batch = p.n_batch;
    ctx->n_ffn_rows = p.n_batch * (hp->n_expert_used > 0 ? hp->n_expert_used : 1);
    int64_t group = hp->n_head / hp->n_head_kv;
    ctx->attn_state_per_worker =
        fx_attn_state_floats(FX_ATT_BLOCK_ROWS * group, hp->head_dim, hp->head_dim_v);
    ctx->kv_tile_dim = hp->head_dim > hp->head_dim_v ? hp->head_dim : hp->head_dim_v;
    ctx->paged_only = p.paged_only;
    const char *dump = getenv("FERROX_DUMP");
    ctx->dump_dir = dump && *dump ? dump : NULL;

    fx_status st = fx_pool_create(p.n_threads, &ctx->pool, err);
    if (st)
        goto fail;
    st = p.paged_only ? fx_rstate_init(&ctx->rs, 0, 0, 0, err)
                      : fx_rstate_init_for(&ctx->rs, m, err);
    if (st)
        goto fail;
    st = fx_kv_contig_init(&ctx->kv, hp->n_layer_kv, p.paged_only ? 0 : p.n_ctx, hp->n_head_kv,
                           hp->head_dim, hp->head_dim_v, p.type_k, p.type_v, err);
    if (st)
        goto fail;

    bool swa_differs = hp->rope.freq_base_swa != hp->rope.freq_base ||
                       hp->rope.freq_scale_swa != hp->rope.freq_scale;
    struct plan plan = {0};
    struct layout o;
    ctx->own_rows = own_rows(ctx, fx_pool_size(ctx->pool));
    plan_layout(ctx, fx_pool_size(ctx->pool), swa_differs, &plan, &o);
    if (plan.overflow || plan.size > SIZE_MAX - ARENA_ALIGN) {
        st = fx_error_set(err, FX_ERR_CAPACITY, FX_NO_OFFSET,
                          "scratch for a batch of %d rows and a context of %d overflows", p.n_batch,
                          p.n_ctx);
        goto fail;
    }
    ctx->arena = aligned_alloc(ARENA_ALIGN,
                               (size_t)(plan.size + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN);
    if (!ctx->arena) {
        st = fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET,
                          "out of memory for %llu bytes of scratch", (unsigned long long)plan.size);
        goto fail;
    }
    /* Touched now so that the first forward pass does not pay for page faults (explicit_bzero:
     * a plain memset of fresh memory may be optimised away). */
    explicit_bzero(ctx->arena, (size_t)plan.size);
    uint8_t *base = ctx->arena;
    struct fx_scratch *s = &ctx->s;
    s->x = (float *)(base + o.x);
    s->xn = (float *)(base + o.xn);
    s->q = (float *)(base + o.q);
    s->k = (float *)(base + o.k);
    s->v = (float *)(base + o.v);
    s->att = (float *)(base + o.att);
    s->h = (float *)(base + o.h);
    s->qg = (float *)(base + o.qg);
    s->rqkv = (float *)(base + o.rqkv);
    s->rconv = (float *)(base + o.rconv);
    s->rz = (float *)(base + o.rz);
    s->rbeta = (float *)(base + o.rbeta);
    s->rg = (float *)(base + o.rg);
    s->rwork = (float *)(base + o.rwork);
    s->ry = (float *)(base + o.ry);
    s->shexp = (float *)(base + o.shexp);
    s->mtp_in = (float *)(base + o.mtp_in);
    s->gate = (float *)(base + o.gate);
    s->up = (float *)(base + o.up);
    s->attn_state = (float *)(base + o.attn_state);
    s->kv_tile = (float *)(base + o.kv_tile);
    s->att_start = (int32_t *)(base + o.att_start);
    set_act(base, &o.act, &s->act);
    if (ctx->own_rows > 0) {
        s->own = (struct fx_rows *)(base + o.own_rows);
        for (int i = 0; i < fx_pool_size(ctx->pool); i++) {
            uint8_t *at = base + o.own + (uint64_t)i * o.own_bytes;
            struct fx_act_bufs *act = (struct fx_act_bufs *)(base + o.own_acts) + i;
            set_act(at, &o.own_at.act, act);
            s->own[i] = (struct fx_rows){.own = true,
                                         .x = (float *)(at + o.own_at.x),
                                         .xn = (float *)(at + o.own_at.xn),
                                         .h = (float *)(at + o.own_at.h),
                                         .hid = (float *)(at + o.own_at.hid),
                                         .att = (float *)(at + o.own_at.hid),
                                         .act = act};
        }
    }
    s->router = (float *)(base + o.router);
    s->sel = (int32_t *)(base + o.sel);
    s->sel_w = (float *)(base + o.sel_w);
    s->slot = (int32_t *)(base + o.slot);
    s->slot_row = (int32_t *)(base + o.slot_row);
    s->slot_expert = (int32_t *)(base + o.slot_expert);
    s->expert_off = (int32_t *)(base + o.expert_off);
    s->xg = (float *)(base + o.xg);
    s->yg = (float *)(base + o.yg);
    s->router_next = (float *)(base + o.router_next);
    s->xused = (int32_t *)(base + o.xused);
    s->xslots = (int32_t *)(base + o.xslots);
    s->xreads = (int32_t *)(base + o.xreads);
    s->xpred = base + o.xpred;
    s->xstep = (struct fx_moe_step *)(base + o.xstep);
    if (m->xcache) {
        uint64_t stage = fx_xcache_stage_bytes(m->xcache) * (uint64_t)fx_pool_size(ctx->pool);
        ctx->xstage = aligned_alloc(FX_XCACHE_ALIGN, (size_t)stage);
        if (!ctx->xstage) {
            st = fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET,
                              "out of memory for %llu bytes of expert staging",
                              (unsigned long long)stage);
            goto fail;
        }
    }
    float *rope0 = (float *)(base + o.rope[0]), *rope1 = (float *)(base + o.rope[1]);
    fill_rope(ctx, rope0, hp->rope.freq_base, hp->rope.freq_scale);
    if (swa_differs)
        fill_rope(ctx, rope1, hp->rope.freq_base_swa, hp->rope.freq_scale_swa);
    s->rope[0] = rope0;
    s->rope[1] = rope1;
    /* GPU layers: the last n_gpu_layers (all of them when more are asked for, as -ngl 99). */
    int32_t n_gpu = p.n_gpu_layers < hp->n_layer ? p.n_gpu_layers : hp->n_layer;
    if (n_gpu > 0 && (st = fx_cuda_decoder_create(ctx, n_gpu, &ctx->dev, err)))
        goto fail;
    *out = ctx;
    return FX_OK;
fail:
    fx_context_free(ctx);
    return st;
}

void fx_context_free(struct fx_context *ctx) {
    if (!ctx)
        return;
    fx_cuda_decoder_free(ctx->dev);
    fx_pool_free(ctx->pool);
    fx_kv_contig_release(&ctx->kv);
    fx_rstate_release(&ctx->rs);
    for (int32_t i = 0; i < ctx->snap_alloc; i++)
        fx_rstate_release(&ctx->snap[i]);
    free(ctx->arena);
    free(ctx->xstage);
    free(ctx);
}

int32_t fx_context_n_ctx(const struct fx_context *ctx) {
    return ctx->n_ctx;
}

int32_t fx_context_kv_len(const struct fx_context *ctx) {
    return ctx->kv.n_filled;
}

int32_t fx_context_mtp_len(const struct fx_context *ctx) {
    return ctx->mtp_len;
}

fx_status fx_context_mtp_truncate(struct fx_context *ctx, int32_t n, struct fx_error *err) {
    if (n < 0 || n > ctx->mtp_len)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "cannot truncate an MTP cache of %d positions to %d", ctx->mtp_len, n);
    ctx->mtp_len = n;
    return FX_OK;
}

fx_status fx_context_kv_truncate(struct fx_context *ctx, int32_t n, struct fx_error *err) {
    if (n < 0 || n > ctx->kv.n_filled)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "cannot truncate a cache of %d positions to %d", ctx->kv.n_filled, n);
    /* Into the rows of the last verify step: its snapshot of the state after position n - 1. */
    int32_t j = n - 1 - ctx->snap_pos0;
    bool snapshot = j >= 0 && j < ctx->n_snap;
    if (ctx->model->hp.n_layer_rec > 0 && n != 0 && n != ctx->kv.n_filled && !snapshot)
        return fx_error_set(err, FX_ERR_UNSUPPORTED, FX_NO_OFFSET,
                            "cannot truncate a sequence of %d positions to %d: the recurrent "
                            "state of %s can only be kept whole or cleared (or cut back into a "
                            "verify step's rows)",
                            ctx->kv.n_filled, n, ctx->model->arch);
    if (n != ctx->kv.n_filled) {
        if (snapshot)
            fx_rstate_copy(&ctx->rs, &ctx->snap[j]);
        ctx->n_snap = 0;
    }
    ctx->kv.n_filled = n;
    if (ctx->dev)
        fx_cuda_decoder_truncate(ctx->dev, n);
    return FX_OK;
}

const struct fx_model *fx_context_model(const struct fx_context *ctx) {
    return ctx->model;
}

fx_status fx_context_state_save(const struct fx_context *ctx, const fx_token *tokens, int32_t n,
                                const char *path, struct fx_error *err) {
    if (!ctx)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET, "the context is NULL");
    /* Rows the device wrote join the host cache first: a copy of what the context holds, so the
     * context is unchanged in what it computes (hence the cast). */
    fx_status st;
    if (ctx->dev &&
        (st = fx_cuda_decoder_kv_to_host(ctx->dev, (struct fx_kv_contig *)&ctx->kv, err)))
        return st;
    return fx_kv_contig_save(&ctx->kv, &ctx->rs, ctx->model, tokens, n, path, err);
}

fx_status fx_context_state_load(struct fx_context *ctx, const char *path, const fx_token *prompt,
                                int32_t n_prompt, int32_t *n_loaded, struct fx_error *err) {
    if (!ctx)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET, "the context is NULL");
    if (ctx->paged_only)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "this context has no contiguous cache (paged_only)");
    ctx->n_snap = 0;
    fx_status st =
        fx_kv_contig_load(&ctx->kv, &ctx->rs, ctx->model, path, prompt, n_prompt, n_loaded, err);
    if (st == FX_OK && ctx->dev)
        st = fx_cuda_decoder_kv_from_host(ctx->dev, &ctx->kv, 0, ctx->kv.n_filled, err);
    return st;
}
