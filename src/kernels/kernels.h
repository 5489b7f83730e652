/* The kernel table: every numeric operation the decoder needs, as function pointers.
 *
 * kernels/generic*.c fill the complete table in plain C; they are the reference for everything.
 * kernels/x86_avx2.c and kernels/x86_avx512.c fill only the entries they accelerate, and the rest
 * is taken from the generic table when the table is assembled (kernels/dispatch.c). One table is
 * chosen once at start (fx_kernels()) from the CPU features, or forced with
 * FERROX_CPU=generic|avx2|avx512.
 *
 * Kernels never create threads: work is split by the caller into (ith, nth) shares, and a kernel
 * computes its share only (fx_matmul, fx_quantize_act below).
 *
 * Determinism contract (tests pin it, the decoder relies on it): within one table, row j of a
 * matmul over n_act activation rows is bit-identical to the same row computed with n_act = 1,
 * whatever n_act, j, the (ith, nth) split and whether the weights were packed (fx_mat_pack), and
 * bit-identical to the table's vec_dot of that weight row and activation row. Batching and
 * packing are scheduling, not a change of the maths. The SIMD tables meet it by fixing the
 * float operations of every (weight row, activation row) pair: exact integer sums per block,
 * then one fused multiply-add per block into a single f32 accumulator, blocks in order
 * (kernels/r16.h); only the layout around those operations changes with the batch.
 *
 * Between tables, results agree within the per-format tolerances the tests state (summation
 * order differs), with one exception: quantize_act is exact, every table produces the same bytes
 * as the generic one, so that activations never depend on the table.
 */
#ifndef FX_KERNELS_KERNELS_H
#define FX_KERNELS_KERNELS_H

#include <stdbool.h>
#include <stdint.h>

#include "ferrox.h"

/* A weight matrix: ne1 rows of ne0 elements of `type`, rows row_bytes apart. `packed` is an
 * optional copy in a layout a kernel prefers (interleaved rows, made once at load by
 * fx_mat_pack, see below); kernels that do not know `pack_kind` read `data`, which must stay
 * valid either way. */
struct fx_mat {
    enum fx_type type;
    int64_t ne0, ne1;
    uint64_t row_bytes;
    const void *data;
    const void *packed;
    uint32_t pack_kind; /* 0: none */
};

/* Converts n elements (a whole number of blocks) of a row to f32. */
typedef void (*fx_to_float_fn)(const void *restrict src, float *restrict dst, int64_t n);
/* Encodes n f32 elements (a whole number of blocks). */
typedef void (*fx_from_float_fn)(const float *restrict src, void *restrict dst, int64_t n);
/* *s = dot product of n elements of a weight row x and an activation row y (in the weight type's
 * vec_dot_type). */
typedef void (*fx_vec_dot_fn)(int64_t n, float *restrict s, const void *restrict x,
                              const void *restrict y);
/* The piece of a matmul a worker computes after the current one (weight rows from r0 of w), so
 * that the current one's end can ask for its first weights: a hint, which changes no result. */
struct fx_mat_piece {
    const struct fx_mat *w;
    int64_t r0;
};

/* One share of out = act * W^T: for weight rows r0 <= r < r1 and activation rows 0 <= j < n_act,
 * out[j * out_stride + r] = dot(W row r, act row j). r0 is a multiple of FX_MATMUL_ROW_UNIT.
 * Activation rows are in vec_dot_type, act_stride bytes apart; meta is NULL or their metadata
 * from the type's act_meta, rows fx_act_meta_bytes(w->ne0) apart. then: NULL, or the worker's
 * next piece (struct fx_mat_piece). Must equal the table's vec_dot bit for bit, packed or not,
 * with or without meta (the contract above). */
typedef void (*fx_matmul_fn)(const struct fx_mat *w, int64_t r0, int64_t r1, const void *act,
                             uint64_t act_stride, int64_t n_act, float *out, int64_t out_stride,
                             const void *meta, const struct fx_mat_piece *then);
/* What a weight type's matmul reads of an activation row besides its codes (for the R16 formats
 * dotted with Q8_0 and Q8_1 rows: each block's scale as f32, and its code sum times the weight
 * codes' offset): computed once per row into meta, fx_act_meta_bytes(n) bytes, and shared by all
 * the pieces of a matmul, which would otherwise each derive it again. */
typedef void (*fx_act_meta_fn)(const void *act, int64_t n, void *meta);

/* out[i] = f(x[i]); out may be x. */
typedef void (*fx_unary_fn)(float *out, const float *x, int64_t n);
/* out[i] = f(g[i]) * u[i]; out may be g or u. */
typedef void (*fx_glu_fn)(float *out, const float *g, const float *u, int64_t n);

/* Per-type operations. A NULL entry means the type does not support it: vec_dot is set exactly
 * for the weight formats (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K..Q6_K, MXFP4,
 * IQ4_NL, IQ4_XS), quantize_act exactly for the activation formats (F32, Q8_0, Q8_1, Q8_K). */
struct fx_type_ops {
    /* The activation format this weight type is dotted with; the same in every table:
     * Q4_0, Q5_0, Q8_0, MXFP4, IQ4_NL -> Q8_0; Q4_1, Q5_1 -> Q8_1; Q2_K..Q6_K, IQ4_XS -> Q8_K;
     * F32, F16, BF16 -> F32 (activations stay f32, they are not rounded to the weight's
     * precision). */
    enum fx_type vec_dot_type;
    fx_to_float_fn to_float;
    /* The reference encoding: byte for byte what llama.cpp's quantizer writes for this type
     * without an importance matrix (llama-quantize --pure). For writing model files. */
    fx_from_float_fn from_float;
    /* The activation quantizer, used at run time on activation rows. Its result is defined
     * exactly, and every table must produce these bytes:
     *   Q8_0, Q8_1: per 32: amax = max |x|, d = amax / 127, q = round-half-even(x * (127 /
     *     amax)) (0 when amax = 0), d stored as fp16; Q8_1 adds s = fp16(d * sum(q)). This is
     *     what ggml computes at run time on x86, which differs from the Q8_0 file encoding
     *     (from_float: round half away from zero of x * (1 / d)).
     *   Q8_K: per 256: the value m of largest magnitude, iscale = -127 / m, q = min(127,
     *     round-half-even(iscale * x)), d = 1 / iscale as f32, bsums = sums of 16 q.
     *   F32: a copy. */
    fx_from_float_fn quantize_act;
    fx_vec_dot_fn vec_dot;
    fx_matmul_fn matmul;     /* NULL: fx_matmul loops over vec_dot */
    fx_act_meta_fn act_meta; /* NULL: the matmul needs no activation metadata */
    /* The packed layout this table's matmul reads (enum fx_pack_kind); FX_PACK_NONE when it
     * reads `data` only. */
    uint32_t pack_kind;
};

/* Activation functions, as indices into act[] and glu[]. */
enum fx_act {
    FX_ACT_SILU,     /* x / (1 + exp(-x)) */
    FX_ACT_GELU,     /* tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) x (1 + 0.044715 x^2))) */
    FX_ACT_GELU_F16, /* ggml's CPU GELU: x rounded to fp16, GELU of that rounded to fp16;
                      * x <= -10 gives 0, x >= 10 gives x (see the fixtures README) */
    FX_ACT_SIGMOID,  /* 1 / (1 + exp(-x)) (qwen35's output gates) */
    FX_ACT_COUNT
};

enum fx_rope_mode {
    FX_ROPE_NORMAL, /* rotates adjacent pairs (x[2i], x[2i+1]) (llama) */
    FX_ROPE_NEOX,   /* rotates (x[i], x[i + n_dims/2]) (qwen, gemma, gpt-oss) */
};

/* Keys reach attn_run in runs of at most this many (the decoder cuts runs at its multiples). */
#define FX_ATTN_RUN 64

/* Where the next run's rows of the same kind lie, group of 16 by group: bytes[b] bytes from at[b]
 * (0: none). attn_run asks the memory system for them while it works on this run. */
struct fx_kv_ahead {
    const uint8_t *at[FX_ATTN_RUN / 16];
    uint32_t bytes[FX_ATTN_RUN / 16];
};

/* A key tile: 16 consecutive positions of one KV head kept element-major, so that element i of
 * the 16 keys is 16 consecutive values, the key-lane layout of decode attention. Its bytes are
 * those of 16 rows of kv_store's encoding, rearranged: f32 and f16 [dim][16] (element i of slot
 * jj at [i][jj]); q8_0 the codes int8 [dim][16], then the blocks' fp16 scales [dim / 32][16]
 * (slot jj's scale of elements 32 s .. 32 s + 31 at [s][jj]). kernels/kv_tile.h moves rows in
 * and out of one. */
static inline uint64_t fx_kv_tile_bytes(uint64_t row_bytes) {
    return 16 * row_bytes;
}

/* A run's key or value rows as they lie in a KV cache, in groups of 16 (a paged cache's blocks
 * need not lie one after another), in kv_store's encoding of `type` (f32, f16 or q8_0): row j
 * of the run at grp[j / 16] + (j % 16) * stride, or, when tiled, slot j % 16 of the key tile at
 * grp[j / 16] (a tile's slots past the run are read but never seen). */
struct fx_kv_run {
    enum fx_type type;
    bool tiled;
    uint64_t stride; /* bytes between rows of a group (rows) */
    const uint8_t *grp[FX_ATTN_RUN / 16];
    struct fx_kv_ahead next; /* the next run's rows, to prefetch (zeros: none) */
};

/* Running sums of an online-softmax attention for n_rows rows of `group` query heads that share
 * one KV head; query o = r * group + h is head h of row r. Lanes: n_pad is n_q rounded up to
 * 16, so a vector of 16 floats holds one value of 16 queries. */
struct fx_attn_state {
    int64_t n_rows, group, n_q, n_pad, dim_k, dim_v;
    float *qt;   /* [dim_k][n_pad] the queries, transposed (padding lanes 0) */
    float *acc;  /* [n_q][dim_v] sum of weights times values */
    float *m;    /* [n_pad] largest score so far (-INFINITY before any key) */
    float *l;    /* [n_pad] sum of weights */
    float *c;    /* [n_pad] the latest run's rescale of acc and l */
    float *p;    /* [FX_ATTN_RUN][n_pad] one run's scores, then weights */
    float *kt;   /* [dim_k][FX_ATTN_RUN] scratch for a run's keys, transposed */
    float *rows; /* [FX_ATTN_RUN][dim_k + dim_v] scratch for a run's rows as f32 */
};

/* Floats of memory an attention state of n_q queries needs (a multiple of 16). */
int64_t fx_attn_state_floats(int64_t n_q, int64_t dim_k, int64_t dim_v);
/* Lays out st in mem (fx_attn_state_floats floats, 64-byte aligned) with no keys seen: every
 * array but qt, which a table's attn_begin then fills. */
void fx_attn_layout(struct fx_attn_state *st, float *mem, int64_t n_rows, int64_t group,
                    int64_t dim_k, int64_t dim_v);

/* The gated delta rule (Gated DeltaNet) per token t of one head, d x d state M (i indexes keys,
 * j values), decay e^(g_t):
 *   M_t = e^(g_t) M_(t-1) + k_t u_t^T,  u_t = beta_t (v_t - e^(g_t) M_(t-1)^T k_t),
 *   out_t = scale M_t^T q_t.
 * ferrox computes it in chunks of FX_DELTA_CHUNK positions cut at fixed multiples, so that a
 * row's arithmetic does not depend on how a sequence is split into calls: with M0 the state
 * before the chunk, G_t the sum of the chunk's g up to t, and s running over the chunk's rows,
 *   u_t = beta_t (v_t - e^G_t M0^T k_t - sum_(s<t) (k_t . k_s) e^(G_t - G_s) u_s)
 *   out_t = scale (e^G_t M0^T q_t + sum_(s<=t) (q_t . k_s) e^(G_t - G_s) u_s)
 * and M0 <- e^G_last M0 + sum_s e^(G_last - G_s) k_s u_s^T when the chunk's last row is done.
 * M0^T of every row of a call is one matmul-shaped pass over M0; only the chunk's end writes
 * it. */
#define FX_DELTA_CHUNK 64

/* One head's state in that form: floats fx_delta_state_floats(d), laid out by
 * fx_delta_state_at. */
struct fx_delta_state {
    float *m0; /* [d][d] M0 by rows, m0[i * d + j] = M0[i][j]: vectors run along j */
    float *ks; /* [FX_DELTA_CHUNK][d] the chunk's keys so far */
    float *us; /* [FX_DELTA_CHUNK][d] their u */
    float *gs; /* [FX_DELTA_CHUNK] their G */
};

static inline int64_t fx_delta_state_floats(int64_t d) {
    return d * d + 2 * FX_DELTA_CHUNK * d + FX_DELTA_CHUNK;
}

static inline struct fx_delta_state fx_delta_state_at(float *mem, int64_t d) {
    return (struct fx_delta_state){.m0 = mem,
                                   .ks = mem + d * d,
                                   .us = mem + d * d + FX_DELTA_CHUNK * d,
                                   .gs = mem + d * d + 2 * FX_DELTA_CHUNK * d};
}

struct fx_kernels {
    const char *name; /* "generic", "avx2", "avx512" */
    struct fx_type_ops types[FX_TYPE_COUNT];

    /* Row operations. Rows are contiguous f32; n is the element count (any n >= 1). */

    /* out = x / sqrt(mean(x^2) + eps) * w, w NULL for none; out may be x. */
    void (*rms_norm)(float *out, const float *x, const float *w, int64_t n, float eps);
    /* x = cap * tanh(x / cap), in place (attention and final-logit softcaps). */
    void (*softcap)(float *x, int64_t n, float cap);
    /* x = softmax(x), in place. -INFINITY entries (masked) give exactly 0. `sink` is an extra
     * logit that joins the denominator only (gpt-oss attention sinks); -INFINITY for none. A row
     * with nothing but -INFINITY gives all zeros. */
    void (*softmax)(float *x, int64_t n, float sink);
    /* Rotates the first n_dims elements of each of n_heads heads (head_stride floats apart) in
     * place by the angles of one position: cs is [n_dims/2][2] (cos, sin), from fx_rope_cache.
     * Elements n_dims.. of a head are left as they are. */
    void (*rope)(float *x, int64_t n_heads, int64_t head_stride, int32_t n_dims,
                 enum fx_rope_mode mode, const float *cs);
    fx_unary_fn act[FX_ACT_COUNT];
    fx_glu_fn glu[FX_ACT_COUNT]; /* gated products: act(g) * u */
    /* gpt-oss: out = min(g, limit) * sigmoid(alpha * min(g, limit)) * (clamp(u, -limit, limit) +
     * 1); alpha 1.702 and limit 7 in the released models. out may be g or u. */
    void (*swiglu_oai)(float *out, const float *g, const float *u, int64_t n, float alpha,
                       float limit);
    void (*add)(float *out, const float *a, const float *b, int64_t n); /* out may be a or b */
    void (*scale)(float *out, const float *x, float s, int64_t n);      /* out may be x */
    void (*axpy)(float *y, const float *x, float a, int64_t n);         /* y += a * x */
    /* Starts an attention state in mem (fx_attn_layout) with the queries of row r, head h at
     * q + r * q_row_stride + h * dim_k in st->qt. */
    void (*attn_begin)(struct fx_attn_state *st, float *mem, const float *q, int64_t q_row_stride,
                       int64_t n_rows, int64_t group, int64_t dim_k, int64_t dim_v);
    /* Attention, one run of consecutive keys at a time (online softmax), for the queries of a
     * struct fx_attn_state (attn_begin). Row r's queries see keys first[r] .. last[r] of the
     * run (none when first[r] > last[r]); for each query o and the keys j it sees (rows j of
     * keys and values, taken as kv_load's exact f32):
     *   s_j = scale * (q_o . k_j), then s_j = softcap * tanh(s_j / softcap) when softcap > 0
     *   m' = max(m, max_j s_j);  c = e^(m - m');  p_j = e^(s_j - m')
     *   l = l * c + sum_j p_j;   acc = acc * c + sum_j p_j v_j  (keys in order)
     * where sum_j p_j is added in one fixed order: sixteen partial sums, key j (of the run) into
     * partial j mod 16 in key order, then partial i + partial i + 8, that + i + 4, + i + 2,
     * + i + 1 (a kernel may then hold a run's keys in lanes or its queries, to the same bits).
     * A query whose keys come in the same runs always gets the same bits, whatever the other
     * queries of the state see (the decoder cuts runs at fixed absolute positions). Prefetches
     * keys->next and values->next (the rows of the next run) while it works, spread over its
     * work where it can: a burst of a whole run's lines stalls the core until most arrive. (A
     * kernel may ask for rows nearer their use instead: this run's values while it scores, the
     * next run's keys while it sums values.) */
    void (*attn_run)(struct fx_attn_state *st, const int32_t *first, const int32_t *last,
                     const struct fx_kv_run *keys, const struct fx_kv_run *values, int64_t n_keys,
                     float scale, float softcap);
    /* out[o * out_stride ..] = acc_o / (l_o + e^(sink_o - m_o)), sinks NULL for none (the sink
     * is a logit that joins the denominator only). An output that saw no key is zeros. */
    void (*attn_finish)(float *out, int64_t out_stride, const float *acc, const float *m,
                        const float *l, const float *sinks, int64_t n_q, int64_t dim_v);
    /* KV cache rows (kv/kv.h). kv_store writes one row of dim floats as `type`: F32 a copy, F16
     * rounded to nearest even, Q8_0 exactly as quantize_act (what llama.cpp's CPU backend writes
     * into a q8_0 cache). kv_load converts n rows of dim elements of `type`, src_stride bytes
     * apart, to f32 rows dst_stride floats apart; exact (every f16 and every q8_0 value d * q is
     * an f32), so every table loads the same floats. dim is a whole number of the type's blocks. */
    void (*kv_store)(enum fx_type type, const float *src, int64_t dim, void *dst);
    void (*kv_load)(enum fx_type type, const void *src, uint64_t src_stride, int64_t n, int64_t dim,
                    float *dst, int64_t dst_stride);
    /* Slots j0 .. j0 + n - 1 (j0 + n <= 16) of a key tile of `type` to f32 rows dst_stride floats
     * apart: the floats kv_load gives for the same rows. */
    void (*kv_load_tile)(enum fx_type type, const void *tile, int64_t j0, int64_t n, int64_t dim,
                         float *dst, int64_t dst_stride);
    /* Index of the largest element, ties to the lowest index; NaN never wins. */
    int64_t (*argmax)(const float *x, int64_t n);

    /* Gated DeltaNet (qwen35's linear attention), one token at a time. */

    /* out = x / max(||x||_2, eps); out may be x. */
    void (*l2_norm)(float *out, const float *x, int64_t n, float eps);
    /* n steps of a depthwise causal conv over n_ch channels with d_conv taps, one per row of x
     * (rows stride floats apart, as out's): for channel c of a row,
     *   out[c] = sum_t w[c][t] * win[c][t] (t < d_conv - 1, oldest first) + w[c][d_conv-1] * x[c]
     * taps summed in that order, then win[c] drops its oldest input and takes x[c]. A row's
     * bits do not depend on n. w is [n_ch][d_conv], win [n_ch][d_conv - 1]. */
    void (*conv_rows)(float *out, float *win, const float *x, int64_t n, int64_t stride,
                      const float *w, int64_t n_ch, int32_t d_conv);
    /* Rows r0..r0+n-1 (r0 + n <= FX_DELTA_CHUNK) of one chunk of the gated delta rule for one
     * head (struct fx_delta_state); row r reads q, k, v at + r * in_stride, its log decay g[r]
     * (<= 0) and beta[r], and writes out + r * out_stride. work: [n][2 d] floats. See
     * struct fx_delta_state for the arithmetic; a row's bits depend on the state and its own
     * inputs only, whatever n. */
    void (*delta_rows)(const struct fx_delta_state *st, int32_t r0, int32_t n, const float *q,
                       const float *k, const float *v, int64_t in_stride, const float *g,
                       const float *beta, float scale, float *out, int64_t out_stride, float *work,
                       int64_t d);
};

/* The table chosen for this process (thread-safe, decided once): FERROX_CPU when set and
 * supported, else the best table this CPU runs. An unknown or unsupported FERROX_CPU is reported
 * once on stderr and the best table is used instead. */
const struct fx_kernels *fx_kernels(void);
/* A table by name, or NULL when unknown or unsupported by this CPU. */
const struct fx_kernels *fx_kernels_named(const char *name);

/* ---- drivers: a worker's share of a whole operation ---------------------------------------- */

/* Worker shares of a matmul start at multiples of this many weight rows, so a kernel working on
 * interleaved groups of up to 16 rows gets whole groups (the last share may end early). */
#define FX_MATMUL_ROW_UNIT 16

/* Worker ith's share of out = act * W^T (see fx_matmul_fn): its range of weight rows against
 * all n_act activation rows, each weight row read once for all of them. act holds n_act rows in
 * the vec_dot_type of w->type (f32 rows for F32/F16/BF16 weights), act_stride bytes apart;
 * out[j * out_stride + r]. meta: NULL, or the activation rows' metadata when w's type has
 * act_meta (see fx_act_meta_fn). */
void fx_matmul(const struct fx_kernels *k, const struct fx_mat *w, const void *act,
               uint64_t act_stride, int64_t n_act, float *out, int64_t out_stride, int ith, int nth,
               const void *meta);
/* Weight rows [r0, r1) of the same product (r0 a multiple of FX_MATMUL_ROW_UNIT; r1 past the
 * last row means up to it): a piece of a matmul that workers share dynamically (fx_par_claim).
 * A row's result is the same whichever piece and worker compute it. then: NULL, or the piece
 * this worker computes next, whose first weights are asked for while this one ends. */
void fx_matmul_rows(const struct fx_kernels *k, const struct fx_mat *w, int64_t r0, int64_t r1,
                    const void *act, uint64_t act_stride, int64_t n_act, float *out,
                    int64_t out_stride, const void *meta, const struct fx_mat_piece *then);

/* Bytes of the metadata of an activation row of n elements (fx_act_meta_fn). */
uint64_t fx_act_meta_bytes(int64_t n);

/* Worker ith's share of quantizing n_rows rows of n f32 (src_stride floats apart) into `type`
 * (an activation format, n a whole number of its blocks), rows dst_stride bytes apart. The rows'
 * blocks are split across workers, so one long row is shared too. The matmul that reads dst must
 * wait until every worker has finished its share. */
void fx_quantize_act(const struct fx_kernels *k, enum fx_type type, const float *src,
                     int64_t src_stride, int64_t n_rows, int64_t n, void *dst, uint64_t dst_stride,
                     int ith, int nth);

/* ---- packed weights ------------------------------------------------------------------------ */

/* Weight layouts a table's matmul may prefer to the file's. Packing is an optional speed-up for
 * weights that are multiplied many times (every weight of a model): it never changes a result,
 * since a table packs on the fly, a piece at a time, whatever it finds unpacked.
 *   FX_PACK_R16: 16 rows interleaved block by block, codes regrouped for int8 dot products
 *   (kernels/r16.h); about the size of the original (at most 4% more: Q3_K). */
enum fx_pack_kind { FX_PACK_NONE = 0, FX_PACK_R16 = 1 };

/* Bytes of the packed copy of w that table k reads, or 0 when k has no packed layout for
 * w->type (leave w unpacked). The model loader, once per weight matrix:
 *
 *     uint64_t bytes = fx_mat_pack_bytes(k, &w);
 *     if (bytes) {
 *         void *p = aligned_alloc(64, round_up(bytes, 64));   // owned by the loader
 *         for each worker: fx_mat_pack(k, &w, p, ith, nth);  // any thread, any order
 *         fx_mat_set_packed(k, &w, p);                         // after every share is written
 *     }
 *
 * and frees p with the model. w->data must stay valid (other tables and embedding lookups read
 * it). The copy is independent of the table within a kind: any table whose types[].pack_kind is
 * the same reads it. A stack of experts is packed one expert (one fx_mat) at a time. */
uint64_t fx_mat_pack_bytes(const struct fx_kernels *k, const struct fx_mat *w);
/* Worker ith's share (whole groups of 16 rows) of writing the packed copy of w into dst
 * (fx_mat_pack_bytes(k, w) bytes, 64-byte aligned for speed). */
void fx_mat_pack(const struct fx_kernels *k, const struct fx_mat *w, void *dst, int ith, int nth);
/* Points w at its packed copy: w->packed = packed, w->pack_kind = k's kind for w->type. */
void fx_mat_set_packed(const struct fx_kernels *k, struct fx_mat *w, const void *packed);

/* ---- rope angles --------------------------------------------------------------------------- */

/* RoPE as llama.cpp computes it. Pair i (0 <= i < n_dims/2) of position p turns by
 *   theta_i = p * freq_base^(-2i/n_dims) / freq_factors[i]
 * then, scaled: theta = freq_scale * theta_i, or with YaRN (ext_factor != 0) a mix of that and
 * the unscaled theta_i, ramped between the correction dims from (n_dims, n_ctx_orig, freq_base,
 * beta_fast, beta_slow) and weighted by ext_factor, with cos and sin multiplied by
 * attn_factor * (1 + 0.1 ln(1 / freq_scale)). Linear scaling is freq_scale = 1/factor with
 * ext_factor 0; llama3 scaling is freq_factors (the rope_freqs tensor). */
struct fx_rope_params {
    int32_t n_dims;            /* rotated dimensions, even */
    float freq_base;           /* default 10000 */
    float freq_scale;          /* 1 / scaling factor; 1 for none */
    float ext_factor;          /* YaRN mix; 0 disables YaRN */
    float attn_factor;         /* magnitude scale; 1 for none */
    float beta_fast;           /* YaRN correction bounds (32 and 1 in most configs) */
    float beta_slow;           /* */
    int32_t n_ctx_orig;        /* the context length the model was trained for (YaRN only) */
    const float *freq_factors; /* [n_dims/2] divisors of each pair's angle, or NULL */
};

/* The (cos, sin) of every pair at position pos: cs is [n_dims/2][2]. Computed like ggml (f32,
 * the angle advanced by repeated multiplication), so angles match llama.cpp's bit for bit where
 * libm agrees. */
void fx_rope_cache(const struct fx_rope_params *p, float pos, float *cs);

#endif
