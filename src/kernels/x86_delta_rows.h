/* The chunked delta rule's steps (kernels.h, delta_rows; generic_ssm.c has the readable
 * form), written once for the SIMD tables as register-tiled FMA loops over the state's value
 * axis j. The file that includes this defines, with its own vectors: the vector type vf of VW
 * floats; vload(p, n) and vstore(p, x, n), which touch the first min(n, VW) floats (none when
 * n <= 0); vset1, vfma(a, b, c) = a * b + c and vmul; dot(a, b, n); the tiles' widths in vectors,
 * PJ for the products with M0 (4 PJ accumulators) and RJ for the recurrence and the fold
 * (2 RJ accumulators); and its table's delta_rows as a call of delta_rows_simd. Only files
 * compiled with their ISA's flags include it.
 *
 * Every output is one FMA chain in a fixed order (over i for M0^T k, over the chunk's rows s for
 * u, out and the fold) whatever the number of rows of the call or where a tile starts, so a row
 * gets the same bits alone or in a batch. */
#ifndef FX_KERNELS_X86_DELTA_ROWS_H
#define FX_KERNELS_X86_DELTA_ROWS_H

#include <math.h>
#include <string.h>

#define DR_INLINE static inline __attribute__((always_inline))
/* The tiles' loops over their accumulators unrolled, so that these stay in registers. */
#define DR_UNROLL _Pragma("GCC unroll 8")

/* Columns j0 .. j0 + nv VW - 1 (those below d) of M0^T x_a for the na vectors x_a, into o_a:
 * one pass over M0's rows i, each row's nv vectors multiplied into every x_a[i]. na nv is at
 * most 4 PJ accumulators: 4 vectors x by PJ, or 2 by 2 PJ (a decode row's k and q), which walks
 * each row of M0 whole when 2 PJ VW = d, one stream for the hardware prefetcher. */
DR_INLINE void products_tile(const float *m0, int na, int nv, const float *const *x,
                             float *const *o, int64_t j0, int64_t d) {
    vf acc[4 * PJ];
    DR_UNROLL
    for (int a = 0; a < na; a++)
        DR_UNROLL
    for (int v = 0; v < nv; v++)
        acc[a * nv + v] = vset1(0.0f);
    for (int64_t i = 0; i < d; i++) {
        const float *mi = m0 + i * d + j0;
        vf mv[2 * PJ];
        DR_UNROLL
        for (int v = 0; v < nv; v++)
            mv[v] = vload(mi + v * VW, d - j0 - v * VW);
        DR_UNROLL
        for (int a = 0; a < na; a++) {
            vf xa = vset1(x[a][i]);
            DR_UNROLL
            for (int v = 0; v < nv; v++)
                acc[a * nv + v] = vfma(xa, mv[v], acc[a * nv + v]);
        }
    }
    DR_UNROLL
    for (int a = 0; a < na; a++)
        DR_UNROLL
    for (int v = 0; v < nv; v++)
        vstore(o[a] + j0 + v * VW, acc[a * nv + v], d - j0 - v * VW);
}

/* work[r] = [M0^T k_r | M0^T q_r] for the call's rows, two rows (four products) per pass over
 * M0 (row-major, so each output's chain runs over i in order). */
static void products(const float *m0, int32_t n, const float *q, const float *k, int64_t in_stride,
                     float *work, int64_t d) {
    for (int32_t r = 0; r < n; r += 2) {
        const float *x[4] = {k + r * in_stride, q + r * in_stride, k + (r + 1) * in_stride,
                             q + (r + 1) * in_stride};
        float *o[4] = {work + r * 2 * d, work + r * 2 * d + d, work + (r + 1) * 2 * d,
                       work + (r + 1) * 2 * d + d};
        if (r + 1 < n)
            for (int64_t j0 = 0; j0 < d; j0 += PJ * VW)
                products_tile(m0, 4, PJ, x, o, j0, d);
        else
            for (int64_t j0 = 0; j0 < d; j0 += 2 * PJ * VW)
                products_tile(m0, 2, 2 * PJ, x, o, j0, d);
    }
}

/* The chunk folded into M0 (see the generic fold_chunk): rows i and i + 1 of M0, RJ vectors of
 * j at a time, held in registers over the chunk's 64 rows s. */
DR_INLINE void fold_tile(const struct fx_delta_state *st, const float *w, float decay, int ni,
                         int64_t i, int64_t j0, int64_t d) {
    vf acc[2][RJ];
    DR_UNROLL
    for (int r = 0; r < ni; r++)
        DR_UNROLL
    for (int v = 0; v < RJ; v++)
        acc[r][v] = vmul(vload(st->m0 + (i + r) * d + j0 + v * VW, d - j0 - v * VW), vset1(decay));
    for (int32_t s = 0; s < FX_DELTA_CHUNK; s++) {
        vf us[RJ];
        DR_UNROLL
        for (int v = 0; v < RJ; v++)
            us[v] = vload(st->us + s * d + j0 + v * VW, d - j0 - v * VW);
        DR_UNROLL
        for (int r = 0; r < ni; r++) {
            vf c = vset1(w[s] * st->ks[s * d + i + r]);
            DR_UNROLL
            for (int v = 0; v < RJ; v++)
                acc[r][v] = vfma(c, us[v], acc[r][v]);
        }
    }
    DR_UNROLL
    for (int r = 0; r < ni; r++)
        DR_UNROLL
    for (int v = 0; v < RJ; v++)
        vstore(st->m0 + (i + r) * d + j0 + v * VW, acc[r][v], d - j0 - v * VW);
}

static void fold_chunk(const struct fx_delta_state *st, int64_t d) {
    float g_last = st->gs[FX_DELTA_CHUNK - 1], decay = expf(g_last);
    float w[FX_DELTA_CHUNK];
    for (int32_t s = 0; s < FX_DELTA_CHUNK; s++)
        w[s] = expf(g_last - st->gs[s]);
    for (int64_t i = 0; i < d; i += 2)
        for (int64_t j0 = 0; j0 < d; j0 += RJ * VW) {
            if (i + 1 < d)
                fold_tile(st, w, decay, 2, i, j0, d);
            else
                fold_tile(st, w, decay, 1, i, j0, d);
        }
}

/* u_c and out_c, RJ vectors of j from j0, in registers over the chunk's earlier rows s:
 *   u = beta (v - e mk - sum_(s<c) a_s u_s),  out = scale (e mq + sum_(s<=c) b_s u_s)
 * with a_s = (k_c . k_s) e^(G_c - G_s) and b_s = (q_c . k_s) e^(G_c - G_s), both in ab. */
DR_INLINE void row_tile(const struct fx_delta_state *st, int32_t c, const float *ab,
                        const float *vr, const float *mk, const float *mq, float e, float beta,
                        float scale, float *o, int64_t j0, int64_t d) {
    vf u[RJ], acc[RJ];
    DR_UNROLL
    for (int v = 0; v < RJ; v++) {
        int64_t j = j0 + v * VW, left = d - j;
        u[v] = vfma(vset1(-e), vload(mk + j, left), vload(vr + j, left));
        acc[v] = vmul(vset1(e), vload(mq + j, left));
    }
    for (int32_t s = 0; s < c; s++) {
        vf a = vset1(-ab[2 * s]), b = vset1(ab[2 * s + 1]);
        DR_UNROLL
        for (int v = 0; v < RJ; v++) {
            vf us = vload(st->us + s * d + j0 + v * VW, d - j0 - v * VW);
            u[v] = vfma(a, us, u[v]);
            acc[v] = vfma(b, us, acc[v]);
        }
    }
    vf b = vset1(ab[2 * c + 1]);
    DR_UNROLL
    for (int v = 0; v < RJ; v++) {
        int64_t j = j0 + v * VW, left = d - j;
        u[v] = vmul(u[v], vset1(beta));
        vstore(st->us + c * d + j, u[v], left);
        vstore(o + j, vmul(vfma(b, u[v], acc[v]), vset1(scale)), left);
    }
}

static void delta_rows_simd(const struct fx_delta_state *st, int32_t r0, int32_t n, const float *q,
                            const float *k, const float *v, int64_t in_stride, const float *g,
                            const float *beta, float scale, float *out, int64_t out_stride,
                            float *work, int64_t d) {
    products(st->m0, n, q, k, in_stride, work, d);
    for (int32_t r = 0; r < n; r++) {
        int32_t c = r0 + r;
        const float *kr = k + r * in_stride, *qr = q + r * in_stride;
        float gc = (c == 0 ? 0.0f : st->gs[c - 1]) + g[r];
        float ab[2 * FX_DELTA_CHUNK]; /* [c + 1][a_s, b_s] */
        for (int32_t s = 0; s < c; s++) {
            float x = expf(gc - st->gs[s]);
            ab[2 * s] = dot(kr, st->ks + s * d, d) * x;
            ab[2 * s + 1] = dot(qr, st->ks + s * d, d) * x;
        }
        ab[2 * c + 1] = dot(qr, kr, d); /* e^(G_c - G_c) = 1 */
        memcpy(st->ks + c * d, kr, (size_t)d * sizeof(float));
        st->gs[c] = gc;
        const float *mk = work + r * 2 * d, *mq = mk + d;
        for (int64_t j0 = 0; j0 < d; j0 += RJ * VW)
            row_tile(st, c, ab, v + r * in_stride, mk, mq, expf(gc), beta[r], scale,
                     out + r * out_stride, j0, d);
        if (c == FX_DELTA_CHUNK - 1)
            fold_chunk(st, d);
    }
}

#endif
