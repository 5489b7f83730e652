/* cuda: decode attention over a contiguous f32 or f16 KV cache, against the generic table's
 * online softmax (attn_begin, attn_run in runs of FX_ATTN_RUN keys, attn_finish), with GQA,
 * sliding windows, softcaps and sinks.
 *
 * Tolerance: 2e-5 of the largest |v| of the head's keys. The device sums each score's dot
 * product, the softmax denominator and the weighted values in other orders than the CPU (lanes
 * and chunks of 128 keys rather than runs of 64), and its expf and tanhf are within 2 ulp; with
 * scores of magnitude up to ~10 these move a weight by a few 1e-7 relative, and the output, a
 * convex combination of values, by a few 1e-7 of max |v|. The bound is derived, not measured
 * (no GPU when it was written). */
#include "fx_test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_test.h"
#include "kernels/generic.h"
#include "kernels/half.h"
#include "kernels_ref.h"

#define TOL 2e-5

struct attn_case {
    int64_t n_head, n_head_kv, dim, n_keys, window;
    float softcap;
    bool sinks;
};

/* The CPU reference for query head h's group: the generic table, over f32 keys and values. */
static void cpu_attention(const struct attn_case *c, const float *q, const float *k, const float *v,
                          int64_t ctx, const float *sinks, float scale, float *out) {
    const struct fx_kernels *g = fx_kernels_named("generic");
    int64_t group = c->n_head / c->n_head_kv, dim = c->dim;
    int64_t j0 = c->window > 0 && c->window < c->n_keys ? c->n_keys - c->window : 0;
    float *mem = aligned_alloc(64, (size_t)fx_attn_state_floats(group, dim, dim) * 4);
    assert_non_null(mem);
    for (int64_t kvh = 0; kvh < c->n_head_kv; kvh++) {
        struct fx_attn_state st;
        g->attn_begin(&st, mem, q + kvh * group * dim, group * dim, 1, group, dim, dim);
        const float *kh = k + kvh * ctx * dim, *vh = v + kvh * ctx * dim;
        for (int64_t r0 = 0; r0 < c->n_keys; r0 += FX_ATTN_RUN) {
            int64_t n = c->n_keys - r0 < FX_ATTN_RUN ? c->n_keys - r0 : FX_ATTN_RUN;
            int32_t first = (int32_t)(j0 > r0 ? j0 - r0 : 0), last = (int32_t)(n - 1);
            struct fx_kv_run kr = {.type = FX_TYPE_F32, .stride = (uint64_t)dim * sizeof(float)};
            struct fx_kv_run vr = kr;
            for (int64_t b = 0; 16 * b < n; b++) {
                kr.grp[b] = (const uint8_t *)(kh + (r0 + 16 * b) * dim);
                vr.grp[b] = (const uint8_t *)(vh + (r0 + 16 * b) * dim);
            }
            g->attn_run(&st, &first, &last, &kr, &vr, n, scale, c->softcap);
        }
        g->attn_finish(out + kvh * group * dim, dim, st.acc, st.m, st.l,
                       sinks ? sinks + kvh * group : NULL, group, dim);
    }
    free(mem);
}

FX_TEST(cuda_attn_decode_matches_generic) {
    cuda_test_require();
    static const struct attn_case cases[] = {
        {8, 2, 64, 1, 0, 0, false},     /* the first token: one key */
        {8, 2, 64, 37, 0, 0, false},    /* GQA 4:1 */
        {8, 8, 128, 300, 0, 0, false},  /* MHA, keys across chunks and runs */
        {8, 1, 64, 300, 100, 0, false}, /* MQA, sliding window */
        {4, 2, 256, 129, 0, 50, false}, /* softcap (gemma2), dim 256 */
        {8, 2, 64, 200, 128, 0, true},  /* sinks and a window (gpt-oss) */
        {16, 4, 128, 1000, 0, 0, true}, /* a longer context */
    };
    struct fx_test_rng rng = {1821};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const struct attn_case *c = &cases[ci];
        int64_t dim = c->dim, ctx = c->n_keys + 7; /* the cache holds more than is filled */
        size_t kv_n = (size_t)(c->n_head_kv * ctx * dim);
        float *q = malloc((size_t)(c->n_head * dim) * 4), *k = malloc(kv_n * 4),
              *v = malloc(kv_n * 4), *sinks = malloc((size_t)c->n_head * 4);
        float *want = malloc((size_t)(c->n_head * dim) * 4),
              *got = malloc((size_t)(c->n_head * dim) * 4);
        uint16_t *k16 = malloc(kv_n * 2), *v16 = malloc(kv_n * 2);
        assert_true(q && k && v && sinks && want && got && k16 && v16);
        kref_normal(q, c->n_head * dim, &rng);
        kref_normal(k, (int64_t)kv_n, &rng);
        kref_normal(v, (int64_t)kv_n, &rng);
        kref_normal(sinks, c->n_head, &rng);
        float scale = 1.0f / sqrtf((float)dim);
        for (int kv_f16 = 0; kv_f16 < 2; kv_f16++) {
            if (kv_f16) { /* the CPU reads the f16 cache as the f32 values it holds */
                for (size_t i = 0; i < kv_n; i++) {
                    k16[i] = fx_f32_to_fp16(k[i]);
                    v16[i] = fx_f32_to_fp16(v[i]);
                    k[i] = fx_fp16_to_f32(k16[i]);
                    v[i] = fx_fp16_to_f32(v16[i]);
                }
            }
            cpu_attention(c, q, k, v, ctx, c->sinks ? sinks : NULL, scale, want);
            float *d_q = cuda_test_upload(q, (size_t)(c->n_head * dim) * 4);
            void *d_k = cuda_test_upload(kv_f16 ? (void *)k16 : (void *)k, kv_n * (kv_f16 ? 2 : 4));
            void *d_v = cuda_test_upload(kv_f16 ? (void *)v16 : (void *)v, kv_n * (kv_f16 ? 2 : 4));
            float *d_s = cuda_test_upload(sinks, (size_t)c->n_head * 4);
            float *d_out = cuda_test_upload(NULL, (size_t)(c->n_head * dim) * 4);
            struct fx_cuda_attn a = {.kv_type = kv_f16 ? FX_TYPE_F16 : FX_TYPE_F32,
                                     .n_head = c->n_head,
                                     .n_head_kv = c->n_head_kv,
                                     .dim_k = dim,
                                     .dim_v = dim,
                                     .k_ctx = ctx,
                                     .v_ctx = ctx,
                                     .n_keys = c->n_keys,
                                     .window = c->window,
                                     .scale = scale,
                                     .softcap = c->softcap};
            /* The f16 runs give the query's position on the device instead (the decode step's
             * way: one graph for every position), n_keys then only bounding it. */
            int32_t pos = (int32_t)(c->n_keys - 1);
            int32_t *d_pos = cuda_test_upload(&pos, sizeof pos);
            if (kv_f16)
                a.n_keys = ctx;
            struct fx_error err = {0};
            cuda_test_ok(fx_cuda_attn_decode(&a, kv_f16 ? d_pos : NULL, d_q, d_k, d_v,
                                             c->sinks ? d_s : NULL, d_out, NULL, &err),
                         &err);
            cuda_test_download(got, d_out, (size_t)(c->n_head * dim) * 4);
            for (int64_t h = 0; h < c->n_head; h++) {
                int64_t kvh = h / (c->n_head / c->n_head_kv);
                float vmax = 0;
                for (int64_t j = 0; j < c->n_keys; j++)
                    for (int64_t i = 0; i < dim; i++)
                        vmax = fmaxf(vmax, fabsf(v[(kvh * ctx + j) * dim + i]));
                for (int64_t i = 0; i < dim; i++) {
                    float gv = got[h * dim + i], wv = want[h * dim + i];
                    if (!(fabsf(gv - wv) <= TOL * vmax))
                        fail_msg("case %zu (%s cache) head %lld dim %lld: device %.9g, generic "
                                 "%.9g (tolerance %.3g)",
                                 ci, kv_f16 ? "f16" : "f32", (long long)h, (long long)i, gv, wv,
                                 TOL * vmax);
                }
            }
            fx_cuda_free(d_q), fx_cuda_free(d_k), fx_cuda_free(d_v), fx_cuda_free(d_s);
            fx_cuda_free(d_out), fx_cuda_free(d_pos);
        }
        free(q), free(k), free(v), free(sinks), free(want), free(got), free(k16), free(v16);
    }
}
