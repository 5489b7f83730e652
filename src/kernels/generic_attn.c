/* Attention with an online softmax (kernels.h, attn_begin / attn_run / attn_finish): the
 * state every table shares, and the plain C reference, query by query. Each key's score is a
 * dot product summed in element order; the weights are summed in the contract's order (sixteen
 * partials by key mod 16, then pairwise); the values are accumulated in key order, each step a
 * multiply and an add. */
#include <math.h>
#include <string.h>

#include "kernels/generic.h"

int64_t fx_attn_state_floats(int64_t n_q, int64_t dim_k, int64_t dim_v) {
    int64_t n_pad = (n_q + 15) / 16 * 16;
    return n_pad * (dim_k + 3 + FX_ATTN_RUN) + (n_q * dim_v + 15) / 16 * 16 +
           (dim_k + 15) / 16 * 16 * FX_ATTN_RUN + FX_ATTN_RUN * ((dim_k + dim_v + 15) / 16 * 16);
}

void fx_attn_layout(struct fx_attn_state *st, float *mem, int64_t n_rows, int64_t group,
                    int64_t dim_k, int64_t dim_v) {
    int64_t n_q = n_rows * group, n_pad = (n_q + 15) / 16 * 16;
    *st = (struct fx_attn_state){.n_rows = n_rows,
                                 .group = group,
                                 .n_q = n_q,
                                 .n_pad = n_pad,
                                 .dim_k = dim_k,
                                 .dim_v = dim_v};
    /* Every array starts at a multiple of 16 floats: lanes of 16 queries load aligned. */
    st->qt = mem;
    st->p = st->qt + dim_k * n_pad;
    st->m = st->p + FX_ATTN_RUN * n_pad;
    st->l = st->m + n_pad;
    st->c = st->l + n_pad;
    st->acc = st->c + n_pad;
    st->kt = st->acc + (n_q * dim_v + 15) / 16 * 16;
    st->rows = st->kt + (dim_k + 15) / 16 * 16 * FX_ATTN_RUN;
    for (int64_t o = 0; o < n_pad; o++) {
        st->m[o] = -INFINITY;
        st->l[o] = 0.0f;
    }
    for (int64_t i = 0; i < n_q * dim_v; i++)
        st->acc[i] = 0.0f;
}

void fx_attn_begin_generic(struct fx_attn_state *st, float *mem, const float *q,
                           int64_t q_row_stride, int64_t n_rows, int64_t group, int64_t dim_k,
                           int64_t dim_v) {
    fx_attn_layout(st, mem, n_rows, group, dim_k, dim_v);
    /* The padding lanes zero (the whole of qt, in vector stores, before the queries' lanes are
     * written one float at a time: decode's 2-8 queries fill a few of 16 lanes), then each
     * query's lane. */
    if (st->n_q < st->n_pad)
        memset(st->qt, 0, (size_t)(dim_k * st->n_pad) * sizeof(float));
    for (int64_t r = 0; r < n_rows; r++)
        for (int64_t h = 0; h < group; h++) {
            const float *qo = q + r * q_row_stride + h * dim_k;
            float *lane = st->qt + r * group + h;
            for (int64_t i = 0; i < dim_k; i++)
                lane[i * st->n_pad] = qo[i];
        }
}

void fx_attn_rows_f32(fx_kv_load_fn load, fx_kv_load_tile_fn load_tile, const struct fx_kv_run *r,
                      int64_t n, int64_t dim, float *dst) {
    for (int64_t j = 0; j < n; j += 16) {
        int64_t rows = n - j < 16 ? n - j : 16;
        if (r->tiled)
            load_tile(r->type, r->grp[j / 16], 0, rows, dim, dst + j * dim, dim);
        else
            load(r->type, r->grp[j / 16], r->stride, rows, dim, dst + j * dim, dim);
    }
}

/* The cache lines of bytes bytes from p. */
static void prefetch_span(const uint8_t *p, uint32_t bytes) {
    for (uintptr_t a = (uintptr_t)p & ~(uintptr_t)63; a < (uintptr_t)p + bytes; a += 64)
        __builtin_prefetch((const void *)a, 0, 3);
}

void fx_attn_prefetch_next(const struct fx_kv_run *keys, const struct fx_kv_run *values) {
    for (int b = 0; b < FX_ATTN_RUN / 16; b++) {
        prefetch_span(keys->next.at[b], keys->next.bytes[b]);
        prefetch_span(values->next.at[b], values->next.bytes[b]);
    }
}

void fx_attn_run_generic(struct fx_attn_state *st, const int32_t *first, const int32_t *last,
                         const struct fx_kv_run *key_run, const struct fx_kv_run *value_run,
                         int64_t n_keys, float scale, float softcap) {
    fx_attn_prefetch_next(key_run, value_run);
    /* Every row's keys lie within the first n_keys: those rows as f32, keys then values. */
    const int64_t k_stride = st->dim_k, v_stride = st->dim_v;
    float *keys = st->rows, *values = st->rows + n_keys * k_stride;
    fx_attn_rows_f32(fx_kv_load_generic, fx_kv_load_tile_generic, key_run, n_keys, k_stride, keys);
    fx_attn_rows_f32(fx_kv_load_generic, fx_kv_load_tile_generic, value_run, n_keys, v_stride,
                     values);
    for (int64_t o = 0; o < st->n_q; o++) {
        int64_t r = o / st->group, j0 = first[r], j1 = last[r];
        if (j0 > j1)
            continue;
        float s[FX_ATTN_RUN];
        float run_max = -INFINITY;
        for (int64_t j = j0; j <= j1; j++) {
            const float *k = keys + j * k_stride;
            float dot = 0.0f;
            for (int64_t i = 0; i < st->dim_k; i++)
                dot += st->qt[i * st->n_pad + o] * k[i];
            s[j - j0] = dot * scale;
            if (softcap > 0.0f)
                s[j - j0] = softcap * tanhf(s[j - j0] / softcap);
            if (s[j - j0] > run_max)
                run_max = s[j - j0];
        }
        float m_new = st->m[o] > run_max ? st->m[o] : run_max;
        float c = expf(st->m[o] - m_new); /* 0 for the first run (m = -inf) */
        float *a = st->acc + o * st->dim_v;
        float part[16] = {0};
        for (int64_t i = 0; i < st->dim_v; i++)
            a[i] *= c;
        for (int64_t j = j0; j <= j1; j++) {
            float p = expf(s[j - j0] - m_new);
            part[j % 16] += p;
            const float *v = values + j * v_stride;
            for (int64_t i = 0; i < st->dim_v; i++)
                a[i] += p * v[i];
        }
        for (int w = 8; w >= 1; w /= 2)
            for (int i = 0; i < w; i++)
                part[i] += part[i + w];
        st->l[o] = st->l[o] * c + part[0];
        st->m[o] = m_new;
    }
}

float fx_attn_finish_factor(float m, float l, const float *sink) {
    if (sink) { /* rescale to the larger of the two maxima so that nothing overflows */
        float top = *sink > m ? *sink : m;
        float c = expf(m - top);
        l = l * c + expf(*sink - top);
        return l > 0.0f ? c / l : 0.0f;
    }
    return l > 0.0f ? 1.0f / l : 0.0f;
}

void fx_attn_finish_generic(float *out, int64_t out_stride, const float *acc, const float *m,
                            const float *l, const float *sinks, int64_t n_q, int64_t dim_v) {
    for (int64_t o = 0; o < n_q; o++) {
        float *y = out + o * out_stride;
        const float *a = acc + o * dim_v;
        float f = fx_attn_finish_factor(m[o], l[o], sinks ? sinks + o : NULL);
        for (int64_t i = 0; i < dim_v; i++)
            y[i] = a[i] * f;
    }
}
