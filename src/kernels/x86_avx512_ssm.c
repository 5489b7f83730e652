/* AVX-512 kernels of the Gated DeltaNet layers: the causal conv sixteen channels at a time (the
 * generic kernel's products and sums, so the same bits), and the chunked delta rule
 * (kernels.h, delta_rows) as the shared register-tiled body (x86_delta_rows.h) sixteen values at
 * a time, tails under masks. */
#if defined(__x86_64__)

#include "kernels/x86_avx512_ssm.h"

#include "kernels/generic.h"
#include "kernels/x86_avx512.h"

#include <immintrin.h>

static inline float dot(const float *a, const float *b, int64_t n) {
    __m512 acc = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc);
    if (i < n) {
        __mmask16 m = lanes16(n - i);
        acc =
            _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), acc);
    }
    return _mm512_reduce_add_ps(acc);
}

/* Sixteen channels at a time over all n rows: their taps gathered once from the [n_ch][d_conv]
 * weights and the [n_ch][d_conv - 1] windows, the windows then kept in registers from row to row;
 * each row's products and sums as the generic kernel's. Wider convs than qwen35's (4) go to the
 * generic kernel. */
void fx_avx512_conv_rows(float *out, float *win, const float *x, int64_t n, int64_t stride,
                         const float *w, int64_t n_ch, int32_t d_conv) {
    enum { TAPS = 8 };
    if (d_conv > TAPS) {
        fx_conv_rows_generic(out, win, x, n, stride, w, n_ch, d_conv);
        return;
    }
    int32_t keep = d_conv - 1;
    __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    __m512i w_at = _mm512_mullo_epi32(lane, _mm512_set1_epi32(d_conv));
    __m512i h_at = _mm512_mullo_epi32(lane, _mm512_set1_epi32(keep));
    __m512 none = _mm512_setzero_ps();
    /* The windows go back channel-major: vector v of a block's [16][keep] floats holds element
     * e = 16 v + l in lane l, which is channel e / keep's tap e % keep. */
    __m512i back_at[TAPS];
    __mmask16 back_tap[TAPS][TAPS] = {{0}};
    int32_t at[16 * TAPS];
    for (int32_t e = 0, ch = 0, t = 0; e < 16 * keep; e++) {
        at[e] = ch;
        back_tap[e / 16][t] |= (__mmask16)(1u << (e % 16));
        if (++t == keep) {
            t = 0;
            ch++;
        }
    }
    for (int32_t v = 0; v < keep; v++)
        back_at[v] = _mm512_loadu_si512(at + 16 * v);
    for (int64_t c = 0; c < n_ch; c += 16) {
        __mmask16 m = lanes16(n_ch - c);
        float *h = win + c * keep;
        __m512 wt[TAPS], ht[TAPS];
        for (int32_t t = 0; t < d_conv; t++)
            wt[t] = _mm512_mask_i32gather_ps(none, m, _mm512_add_epi32(w_at, _mm512_set1_epi32(t)),
                                             w + c * d_conv, 4);
        for (int32_t t = 0; t < keep; t++)
            ht[t] = _mm512_mask_i32gather_ps(none, m, _mm512_add_epi32(h_at, _mm512_set1_epi32(t)),
                                             h, 4);
        for (int64_t r = 0; r < n; r++) {
            __m512 xr = _mm512_maskz_loadu_ps(m, x + r * stride + c), sum = none;
            for (int32_t t = 0; t < keep; t++)
                sum = _mm512_add_ps(sum, _mm512_mul_ps(wt[t], ht[t]));
            sum = _mm512_add_ps(sum, _mm512_mul_ps(wt[keep], xr));
            _mm512_mask_storeu_ps(out + r * stride + c, m, sum);
            for (int32_t t = 0; t + 1 < keep; t++)
                ht[t] = ht[t + 1];
            if (keep > 0)
                ht[keep - 1] = xr;
        }
        /* The block's windows back, [16][keep] from the registers' [keep][16]. */
        int64_t left = (n_ch - c < 16 ? n_ch - c : 16) * keep;
        for (int32_t v = 0; v < keep; v++) {
            __m512 o = none;
            for (int32_t t = 0; t < keep; t++)
                o = _mm512_mask_permutexvar_ps(o, back_tap[v][t], back_at[v], ht[t]);
            _mm512_mask_storeu_ps(h + 16 * v, lanes16(left - 16 * v), o);
        }
    }
}

typedef __m512 vf;
#define VW 16
#define PJ 4 /* 16 accumulators and 4 loads of the 32 registers */
#define RJ 8 /* d = 128 in one tile */

static inline vf vload(const float *p, int64_t n) {
    return n >= 16 ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(lanes16(n), p);
}

static inline void vstore(float *p, vf x, int64_t n) {
    if (n >= 16)
        _mm512_storeu_ps(p, x);
    else
        _mm512_mask_storeu_ps(p, lanes16(n), x);
}

static inline vf vset1(float x) {
    return _mm512_set1_ps(x);
}

static inline vf vfma(vf a, vf b, vf c) {
    return _mm512_fmadd_ps(a, b, c);
}

static inline vf vmul(vf a, vf b) {
    return _mm512_mul_ps(a, b);
}

#include "kernels/x86_delta_rows.h"

void fx_avx512_delta_rows(const struct fx_delta_state *st, int32_t r0, int32_t n, const float *q,
                          const float *k, const float *v, int64_t in_stride, const float *g,
                          const float *beta, float scale, float *out, int64_t out_stride,
                          float *work, int64_t d) {
    delta_rows_simd(st, r0, n, q, k, v, in_stride, g, beta, scale, out, out_stride, work, d);
}

#endif
