/* AVX2 row operations: RMS and L2 norms, softmax, SiLU, GELU, sigmoid and their gated products, the
 * softcap, add, scale, axpy and rope. The AVX-512 table inherits them but the exp-based
 * activations and the softcap (x86_avx512_rows.c, the same operations 16 lanes at a time).
 *
 * Each computes what the generic one does, in the same f32 operations where it can: add, scale,
 * axpy and rope give the generic bits (no fused multiply-add); RMS norm keeps its sum of squares in
 * double like the generic one (in another order), as the L2 norm does; softmax, SiLU, GELU, sigmoid
 * and the softcap use the exp below, within 2 ulp of expf, so they agree with generic within the
 * row tests' tolerance. */
#if defined(__x86_64__)

#include "kernels/x86_avx2.h"

#include <math.h>

#include "kernels/generic.h"

/* e^x in every lane within 2 ulp (Cephes' expf: x = n ln2 + r, |r| <= ln2/2, a degree-7
 * polynomial for e^r). x below -104 gives +0 (so -inf does, exactly), above 88.72 +inf, NaN
 * NaN. 2^n is applied in two halves so that results down among the subnormals round once more
 * at most, never flush. */
FX_INLINE __m256 exp_f32x8(__m256 x) {
    x = _mm256_min_ps(_mm256_set1_ps(88.8f), _mm256_max_ps(_mm256_set1_ps(-104.0f), x));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i ni = _mm256_cvtps_epi32(n);
    __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
    __m256 s1 =
        _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, _mm256_set1_epi32(127)), 23));
    __m256 s2 =
        _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, _mm256_set1_epi32(127)), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}

/* The first n (1..8) floats of p, the rest 0; and storing the first n. */
FX_INLINE __m256 load_n(const float *p, int64_t n) {
    return n >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, lanes8((int)n));
}

FX_INLINE void store_n(float *p, __m256 v, int64_t n) {
    if (n >= 8)
        _mm256_storeu_ps(p, v);
    else
        _mm256_maskstore_ps(p, lanes8((int)n), v);
}

/* The sum of the f32 squares of x[0 .. n), summed in double (as the generic RMS and L2 norms sum
 * them, in another order: 8 lanes, then the lanes in a fixed order). */
FX_INLINE double sum_squares(const float *x, int64_t n) {
    __m256d acc0 = _mm256_setzero_pd(), acc1 = _mm256_setzero_pd();
    for (int64_t i = 0; i < n; i += 8) {
        __m256 v = load_n(x + i, n - i);
        __m256 sq = _mm256_mul_ps(v, v);
        acc0 = _mm256_add_pd(acc0, _mm256_cvtps_pd(_mm256_castps256_ps128(sq)));
        acc1 = _mm256_add_pd(acc1, _mm256_cvtps_pd(_mm256_extractf128_ps(sq, 1)));
    }
    __m256d s = _mm256_add_pd(acc0, acc1);
    __m128d h = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd(s, 1));
    return _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
}

void fx_avx2_rms_norm(float *out, const float *x, const float *w, int64_t n, float eps) {
    double sum = sum_squares(x, n);
    float mean = (float)(sum / (double)n);
    __m256 scale = _mm256_set1_ps(1.0f / sqrtf(mean + eps));
    for (int64_t i = 0; i < n; i += 8) {
        __m256 v = _mm256_mul_ps(load_n(x + i, n - i), scale);
        if (w)
            v = _mm256_mul_ps(v, load_n(w + i, n - i));
        store_n(out + i, v, n - i);
    }
}

/* x / max(|x|, eps), the generic formula (DeltaNet's queries and keys, a row of 128 a head: the
 * generic loop's chain of double adds was 4% of a qwen35 prefill). The AVX-512 table takes this one
 * too, so the two give the same bits. */
void fx_avx2_l2_norm(float *out, const float *x, int64_t n, float eps) {
    __m256 scale = _mm256_set1_ps(1.0f / fmaxf(sqrtf((float)sum_squares(x, n)), eps));
    for (int64_t i = 0; i < n; i += 8)
        store_n(out + i, _mm256_mul_ps(load_n(x + i, n - i), scale), n - i);
}

void fx_avx2_softmax(float *x, int64_t n, float sink) {
    __m256 vmax = _mm256_set1_ps(sink);
    for (int64_t i = 0; i < n; i += 8) /* masked-off lanes load 0: compare only the real ones */
        vmax = _mm256_blendv_ps(vmax, _mm256_max_ps(vmax, load_n(x + i, n - i)),
                                _mm256_castsi256_ps(lanes8((int)(n - i < 8 ? n - i : 8))));
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(vmax), _mm256_extractf128_ps(vmax, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    float max = _mm_cvtss_f32(m);
    if (max == -INFINITY) { /* everything masked */
        memset(x, 0, (size_t)n * sizeof *x);
        return;
    }
    __m256d acc0 = _mm256_setzero_pd(), acc1 = _mm256_setzero_pd();
    for (int64_t i = 0; i < n; i += 8) {
        __m256 e = exp_f32x8(_mm256_sub_ps(load_n(x + i, n - i), _mm256_set1_ps(max)));
        if (n - i < 8) /* lanes past the row are not summed */
            e = _mm256_and_ps(e, _mm256_castsi256_ps(lanes8((int)(n - i))));
        store_n(x + i, e, n - i);
        acc0 = _mm256_add_pd(acc0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
        acc1 = _mm256_add_pd(acc1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
    }
    __m256d s = _mm256_add_pd(acc0, acc1);
    __m128d h = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd(s, 1));
    double sum = _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
    if (sink != -INFINITY)
        sum += (double)_mm256_cvtss_f32(exp_f32x8(_mm256_set1_ps(sink - max)));
    __m256 inv = _mm256_set1_ps((float)(1.0 / sum));
    for (int64_t i = 0; i < n; i += 8)
        store_n(x + i, _mm256_mul_ps(load_n(x + i, n - i), inv), n - i);
}

/* x / (1 + e^-x) */
FX_INLINE __m256 silu_f32x8(__m256 x) {
    __m256 e = exp_f32x8(_mm256_sub_ps(_mm256_setzero_ps(), x));
    return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

/* One loop per shape, the activation as a parameter (inlined: the loops are always_inline and
 * each caller passes a constant). */
FX_INLINE void act_rows8(float *out, const float *x, int64_t n, __m256 (*f)(__m256)) {
    for (int64_t i = 0; i < n; i += 8)
        store_n(out + i, f(load_n(x + i, n - i)), n - i);
}

FX_INLINE void glu_rows8(float *out, const float *g, const float *u, int64_t n,
                         __m256 (*f)(__m256)) {
    for (int64_t i = 0; i < n; i += 8)
        store_n(out + i, _mm256_mul_ps(f(load_n(g + i, n - i)), load_n(u + i, n - i)), n - i);
}

void fx_avx2_silu(float *out, const float *x, int64_t n) {
    act_rows8(out, x, n, silu_f32x8);
}

void fx_avx2_swiglu(float *out, const float *g, const float *u, int64_t n) {
    glu_rows8(out, g, u, n, silu_f32x8);
}

/* 1 / (1 + e^-x) (qwen35's output and shared-expert gates) */
FX_INLINE __m256 sigmoid_f32x8(__m256 x) {
    __m256 e = exp_f32x8(_mm256_sub_ps(_mm256_setzero_ps(), x));
    return _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

void fx_avx2_sigmoid(float *out, const float *x, int64_t n) {
    act_rows8(out, x, n, sigmoid_f32x8);
}

void fx_avx2_sigmoid_glu(float *out, const float *g, const float *u, int64_t n) {
    glu_rows8(out, g, u, n, sigmoid_f32x8);
}

/* The tanh-approximate GELU, 0.5 x (1 + tanh(z)) with z = sqrt(2/pi) x (1 + 0.044715 x^2),
 * computed as x / (1 + e^(-2z)): the same function (1 + tanh(z) = 2 / (1 + e^(-2z))), without
 * the cancellation of 1 + tanh(z) where tanh(z) nears -1. Gemma's feed-forward activation: libm's
 * tanhf took 12.6 ns an element, 3 ms of a gemma-2-2b token (26 layers of 9,216). */
FX_INLINE __m256 gelu_f32x8(__m256 x) {
    __m256 inner =
        _mm256_fmadd_ps(_mm256_mul_ps(x, x), _mm256_set1_ps(0.044715f), _mm256_set1_ps(1.0f));
    __m256 minus_2z = _mm256_mul_ps(_mm256_mul_ps(x, _mm256_set1_ps(-1.59576912160573071f)), inner);
    return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), exp_f32x8(minus_2z)));
}

void fx_avx2_gelu(float *out, const float *x, int64_t n) {
    act_rows8(out, x, n, gelu_f32x8);
}

void fx_avx2_geglu(float *out, const float *g, const float *u, int64_t n) {
    glu_rows8(out, g, u, n, gelu_f32x8);
}

/* cap tanh(x / cap) (gemma2's final logits, every vocabulary entry of every token), tanh(y) as
 * sign(y) (1 - e) / (1 + e) with e = e^(-2|y|): within a few 2^-24 of |tanh| absolute, i.e. of
 * cap. */
void fx_avx2_softcap(float *x, int64_t n, float cap) {
    const __m256 sign_bit = _mm256_set1_ps(-0.0f), one = _mm256_set1_ps(1.0f);
    for (int64_t i = 0; i < n; i += 8) {
        __m256 y = _mm256_div_ps(load_n(x + i, n - i), _mm256_set1_ps(cap));
        __m256 e = exp_f32x8(_mm256_mul_ps(_mm256_set1_ps(-2.0f), _mm256_andnot_ps(sign_bit, y)));
        __m256 t = _mm256_div_ps(_mm256_sub_ps(one, e), _mm256_add_ps(one, e));
        t = _mm256_or_ps(t, _mm256_and_ps(sign_bit, y));
        store_n(x + i, _mm256_mul_ps(_mm256_set1_ps(cap), t), n - i);
    }
}

/* gpt-oss's gated activation (fx_avx512_swiglu_oai), 8 lanes. */
void fx_avx2_swiglu_oai(float *out, const float *g, const float *u, int64_t n, float alpha,
                        float limit) {
    for (int64_t i = 0; i < n; i += 8) {
        __m256 x = _mm256_min_ps(load_n(g + i, n - i), _mm256_set1_ps(limit));
        __m256 y = _mm256_min_ps(_mm256_max_ps(load_n(u + i, n - i), _mm256_set1_ps(-limit)),
                                 _mm256_set1_ps(limit));
        __m256 e =
            exp_f32x8(_mm256_mul_ps(_mm256_set1_ps(alpha), _mm256_sub_ps(_mm256_setzero_ps(), x)));
        __m256 s = _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
        store_n(out + i, _mm256_mul_ps(s, _mm256_add_ps(y, _mm256_set1_ps(1.0f))), n - i);
    }
}

void fx_avx2_add(float *out, const float *a, const float *b, int64_t n) {
    for (int64_t i = 0; i < n; i += 8)
        store_n(out + i, _mm256_add_ps(load_n(a + i, n - i), load_n(b + i, n - i)), n - i);
}

void fx_avx2_scale(float *out, const float *x, float s, int64_t n) {
    __m256 vs = _mm256_set1_ps(s);
    for (int64_t i = 0; i < n; i += 8)
        store_n(out + i, _mm256_mul_ps(load_n(x + i, n - i), vs), n - i);
}

/* y += a * x, rounding the product first as generic does. */
void fx_avx2_axpy(float *y, const float *x, float a, int64_t n) {
    __m256 va = _mm256_set1_ps(a);
    for (int64_t i = 0; i < n; i += 8)
        store_n(y + i, _mm256_add_ps(load_n(y + i, n - i), _mm256_mul_ps(va, load_n(x + i, n - i))),
                n - i);
}

/* Pairs of 8 lanes rotated by their angles (x0 c - x1 s, x0 s + x1 c), each product rounded and
 * then one add or subtract: the generic rope's operations. */
FX_INLINE void rotate8(__m256 x0, __m256 x1, __m256 c, __m256 s, __m256 *a, __m256 *b) {
    *a = _mm256_sub_ps(_mm256_mul_ps(x0, c), _mm256_mul_ps(x1, s));
    *b = _mm256_add_ps(_mm256_mul_ps(x0, s), _mm256_mul_ps(x1, c));
}

/* Rope 8 pairs at a time, in the generic rope's operations (x1 c + x0 s is x0 s + x1 c: an add
 * does not depend on its order): normal pairs (2i, 2i+1) lie in the lanes of one vector as their
 * (cos, sin) do in cs; neox pairs (i, i + n_dims/2) in two vectors, their cos and sin gathered from
 * cs's 16 floats. Head sizes whose pairs are not a multiple of 8 in both layouts (n_dims not a
 * multiple of 16) take the generic loop. */
void fx_avx2_rope(float *x, int64_t n_heads, int64_t head_stride, int32_t n_dims,
                  enum fx_rope_mode mode, const float *cs) {
    if (n_dims % 16 != 0) {
        fx_rope_generic(x, n_heads, head_stride, n_dims, mode, cs);
        return;
    }
    int32_t half = n_dims / 2;
    for (int64_t h = 0; h < n_heads; h++) {
        float *v = x + h * head_stride;
        if (mode == FX_ROPE_NORMAL) {
            for (int32_t i = 0; i < n_dims; i += 8) {
                __m256 xv = _mm256_loadu_ps(v + i), csv = _mm256_loadu_ps(cs + i);
                __m256 swapped = _mm256_permute_ps(xv, _MM_SHUFFLE(2, 3, 0, 1)); /* x1 x0 .. */
                __m256 p = _mm256_mul_ps(xv, _mm256_moveldup_ps(csv));           /* x0 c, x1 c */
                __m256 q = _mm256_mul_ps(swapped, _mm256_movehdup_ps(csv));      /* x1 s, x0 s */
                _mm256_storeu_ps(v + i, _mm256_addsub_ps(p, q)); /* x0 c - x1 s, x1 c + x0 s */
            }
            continue;
        }
        for (int32_t i = 0; i < half; i += 8) {
            __m256 lo = _mm256_loadu_ps(cs + 2 * i), hi = _mm256_loadu_ps(cs + 2 * i + 8);
            /* in-lane shuffles give cos (sin) of pairs 0 1 4 5 | 2 3 6 7: order the quarters */
            __m256 c = _mm256_castpd_ps(_mm256_permute4x64_pd(
                _mm256_castps_pd(_mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0))),
                _MM_SHUFFLE(3, 1, 2, 0)));
            __m256 s = _mm256_castpd_ps(_mm256_permute4x64_pd(
                _mm256_castps_pd(_mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1))),
                _MM_SHUFFLE(3, 1, 2, 0)));
            __m256 a, b;
            rotate8(_mm256_loadu_ps(v + i), _mm256_loadu_ps(v + half + i), c, s, &a, &b);
            _mm256_storeu_ps(v + i, a);
            _mm256_storeu_ps(v + half + i, b);
        }
    }
}

/* The generic argmax's answer in two passes of 8 lanes, as the AVX-512 table's: the largest value
 * (vmaxps keeps its second operand, the running maximum, where x is NaN, so NaN never wins; the
 * tail is scanned the same way), then the first element equal to it (+0 and -0 compare equal). A
 * row of NaN only has no equal element, and the generic scan answers 0 for it. */
int64_t fx_avx2_argmax(const float *x, int64_t n) {
    __m256 m = _mm256_set1_ps(-INFINITY);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        m = _mm256_max_ps(_mm256_loadu_ps(x + i), m);
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    float best = _mm_cvtss_f32(h); /* a maximum is exact in any order */
    for (; i < n; i++)
        best = x[i] > best ? x[i] : best;
    __m256 bv = _mm256_set1_ps(best);
    for (i = 0; i + 8 <= n; i += 8) {
        int eq = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), bv, _CMP_EQ_OQ));
        if (eq)
            return i + __builtin_ctz((unsigned)eq);
    }
    for (; i < n; i++)
        if (x[i] == best)
            return i;
    return 0;
}

#endif
