/* The contiguous KV cache of one sequence, and the step descriptor that tells the attention block
 * where each row of a forward step writes and reads its keys and values.
 *
 * K and V are stored as f32: the goldens' tightest reference (llama.cpp with an f32 cache) is then
 * reproduced to ~1e-5, nothing is rounded between the projection and the dot product, and at the
 * context sizes of the small models ferrox targets first the cache is a small fraction of the
 * weights. An f16 cache is a later option for long contexts. */
#ifndef FX_KV_KV_H
#define FX_KV_KV_H

#include <stdint.h>

#include "ferrox.h"

/* Head-major: the keys of one KV head are consecutive rows of head_dim floats, so attention
 * streams them contiguously. (Position-major rows of n_head_kv * head_dim floats are often 4 KiB
 * or a multiple, which maps every key of a head to the same L1 set.) */
struct fx_kv_contig {
    int32_t n_layer;
    int32_t n_ctx;
    int32_t n_head_kv;
    int64_t head_dim, head_dim_v;
    float *k;         /* [n_layer][n_head_kv][n_ctx][head_dim] */
    float *v;         /* [n_layer][n_head_kv][n_ctx][head_dim_v] */
    int32_t n_filled; /* positions 0..n_filled-1 hold rows written by forward passes */
};

fx_status fx_kv_contig_init(struct fx_kv_contig *kv, int32_t n_layer, int32_t n_ctx,
                            int32_t n_head_kv, int64_t head_dim, int64_t head_dim_v,
                            struct fx_error *err);
void fx_kv_contig_release(struct fx_kv_contig *kv);

/* K (V) of KV head g at position pos of layer il. */
static inline float *fx_kv_contig_k(const struct fx_kv_contig *kv, int il, int g, int64_t pos) {
    return kv->k + (((int64_t)il * kv->n_head_kv + g) * kv->n_ctx + pos) * kv->head_dim;
}

static inline float *fx_kv_contig_v(const struct fx_kv_contig *kv, int il, int g, int64_t pos) {
    return kv->v + (((int64_t)il * kv->n_head_kv + g) * kv->n_ctx + pos) * kv->head_dim_v;
}

/* Where the rows of one forward step keep their K and V. The attention block is written once
 * against this; each backing is a kind (paged and multi-sequence steps join as new kinds). */
enum fx_kv_kind {
    FX_KV_CONTIG, /* rows 0..n-1 are positions pos0..pos0+n-1 of one contiguous cache */
};

struct fx_kv_step {
    enum fx_kv_kind kind;
    union {
        struct {
            struct fx_kv_contig *kv;
            int32_t pos0;
        } contig;
    } u;
};

/* The position of step row i in its sequence. */
static inline int32_t fx_kv_step_pos(const struct fx_kv_step *s, int64_t i) {
    switch (s->kind) {
    case FX_KV_CONTIG:
        return s->u.contig.pos0 + (int32_t)i;
    }
    return -1;
}

/* K (and V) of KV head g for the key at position pos of row i's sequence, in layer il; row i
 * writes its own K and V at pos = fx_kv_step_pos(s, i). */
static inline float *fx_kv_step_k(const struct fx_kv_step *s, int il, int64_t i, int g,
                                  int64_t pos) {
    (void)i; /* one sequence: every row reads the same cache */
    switch (s->kind) {
    case FX_KV_CONTIG:
        return fx_kv_contig_k(s->u.contig.kv, il, g, pos);
    }
    return NULL;
}

/* Floats between the K rows of consecutive positions of one head of row i's sequence: keys
 * from pos_a on lie at fx_kv_step_k(.., pos_a) + (pos - pos_a) * stride. */
static inline int64_t fx_kv_step_k_stride(const struct fx_kv_step *s, int64_t i) {
    (void)i;
    switch (s->kind) {
    case FX_KV_CONTIG:
        return s->u.contig.kv->head_dim;
    }
    return 0;
}

static inline int64_t fx_kv_step_v_stride(const struct fx_kv_step *s, int64_t i) {
    (void)i;
    switch (s->kind) {
    case FX_KV_CONTIG:
        return s->u.contig.kv->head_dim_v;
    }
    return 0;
}

static inline float *fx_kv_step_v(const struct fx_kv_step *s, int il, int64_t i, int g,
                                  int64_t pos) {
    (void)i;
    switch (s->kind) {
    case FX_KV_CONTIG:
        return fx_kv_contig_v(s->u.contig.kv, il, g, pos);
    }
    return NULL;
}

#endif
