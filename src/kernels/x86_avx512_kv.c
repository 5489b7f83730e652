/* AVX-512 KV cache rows (kernels.h, kv_store and kv_load): the AVX2 ones (x86_avx2_kv.c) in 16
 * lanes, with masked tails instead of scalar ones.
 *
 * Every result is the generic one bit for bit: vcvtps2ph rounds to nearest even like
 * fx_f32_to_fp16 and vcvtph2ps widens exactly; a Q8_0 value is (float)q * d, one product that is
 * exact in f32, so no order or contraction could change it; Q8_0 rows are encoded with the same
 * f32 operations as fx_q8_0_quantize_act (see quantize_block_q8_0). NaN payloads are the
 * exception, as in the AVX2 table. */
#if defined(__x86_64__)

#include "kernels/x86_avx512.h"

#include "core/error.h"
#include "kernels/generic.h"
#include "kernels/types.h"

/* dim f16 at src (any alignment) to f32: 32 at a time while they last, then 16, then the rest
 * under a mask. */
static void f16_to_f32_row(const uint8_t *src, float *dst, int64_t dim) {
    int64_t i = 0;
    for (; i + 32 <= dim; i += 32) {
        __m512 a = fp16x16(src + 2 * i), b = fp16x16(src + 2 * i + 32);
        _mm512_storeu_ps(dst + i, a);
        _mm512_storeu_ps(dst + i + 16, b);
    }
    if (i + 16 <= dim) {
        _mm512_storeu_ps(dst + i, fp16x16(src + 2 * i));
        i += 16;
    }
    if (i < dim) {
        __mmask16 m = lanes16((int)(dim - i));
        _mm512_mask_storeu_ps(dst + i, m,
                              _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, src + 2 * i)));
    }
}

/* dim/32 Q8_0 blocks at src (any alignment) to f32: q widened to int32, converted, times d. */
static void q8_0_to_f32_row(const uint8_t *src, float *dst, int64_t dim) {
    for (int64_t i = 0; i < dim; i += FX_QK, src += sizeof(struct fx_block_q8_0)) {
        uint16_t h;
        memcpy(&h, src, 2);
        __m512 d = _mm512_set1_ps(_cvtsh_ss(h));
        __m512 q0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(load128(src + 2)));
        __m512 q1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(load128(src + 18)));
        _mm512_storeu_ps(dst + i, _mm512_mul_ps(q0, d));
        _mm512_storeu_ps(dst + i + 16, _mm512_mul_ps(q1, d));
    }
}

/* x * id clamped to +-127 and rounded half to even (vcvtps2dq under the default MXCSR), as
 * int8; |q| <= 127, so the saturating narrowing never saturates. */
static inline __m128i q8_codes(__m512 x, __m512 id) {
    __m512 c = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(x, id), _mm512_set1_ps(-127.0f)),
                             _mm512_set1_ps(127.0f));
    return _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(c));
}

/* One block of 32 in kernels.h's Q8_0 activation encoding, into the 34 bytes at b (any
 * alignment). The same f32 operations as fx_q8_0_quantize_act: amax is a max (exact in any
 * order; a NaN element is skipped, as fmaxf skips it), then id = 127 / amax, x * id, the clamp,
 * round half to even, and d = amax / 127 rounded to nearest even as fp16. */
static void quantize_block_q8_0(const float *src, uint8_t *b) {
    __m512 v0 = _mm512_loadu_ps(src), v1 = _mm512_loadu_ps(src + 16);
    /* maxps returns its second operand when either is NaN: NaN lanes keep the running max */
    __m512 amax = _mm512_max_ps(_mm512_abs_ps(v0), _mm512_setzero_ps());
    amax = _mm512_max_ps(_mm512_abs_ps(v1), amax);
    float max = _mm512_reduce_max_ps(amax);
    __m512 id = _mm512_set1_ps(max != 0.0f ? 127.0f / max : 0.0f);
    uint16_t d = _cvtss_sh(max / 127.0f, _MM_FROUND_TO_NEAREST_INT);
    memcpy(b, &d, 2);
    _mm_storeu_si128((__m128i *)(b + 2), q8_codes(v0, id));
    _mm_storeu_si128((__m128i *)(b + 18), q8_codes(v1, id));
}

void fx_avx512_kv_store(enum fx_type type, const float *src, int64_t dim, void *dst) {
    uint8_t *out = dst;
    switch (type) {
    case FX_TYPE_F32:
        memcpy(dst, src, (size_t)dim * sizeof(float));
        return;
    case FX_TYPE_F16: {
        int64_t i = 0;
        for (; i + 16 <= dim; i += 16)
            _mm256_storeu_si256(
                (__m256i *)(out + 2 * i),
                _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
        if (i < dim) {
            __mmask16 m = lanes16((int)(dim - i));
            __m512 x = _mm512_maskz_loadu_ps(m, src + i);
            _mm256_mask_storeu_epi16(out + 2 * i, m, _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
        }
        return;
    }
    case FX_TYPE_Q8_0:
        for (int64_t i = 0; i < dim; i += FX_QK, out += sizeof(struct fx_block_q8_0))
            quantize_block_q8_0(src + i, out);
        return;
    default:
        FX_ASSERT(!"not a KV cache type");
    }
}

void fx_avx512_kv_load(enum fx_type type, const void *src, uint64_t src_stride, int64_t n,
                       int64_t dim, float *dst, int64_t dst_stride) {
    for (int64_t j = 0; j < n; j++) {
        const uint8_t *row = (const uint8_t *)src + (uint64_t)j * src_stride;
        float *out = dst + j * dst_stride;
        switch (type) {
        case FX_TYPE_F32:
            memcpy(out, row, (size_t)dim * sizeof(float));
            break;
        case FX_TYPE_F16:
            f16_to_f32_row(row, out, dim);
            break;
        case FX_TYPE_Q8_0:
            q8_0_to_f32_row(row, out, dim);
            break;
        default:
            FX_ASSERT(!"not a KV cache type");
        }
    }
}

/* Slots j0 .. j0 + n - 1 of a tile of type T (kernels.h's layout) as f32 rows: element i0 + r of
 * the 16 slots (one vector each, r = 0 .. 15, widened as kv_load widens them: exact) transposed in
 * registers into 16 elements of each slot. dim: a multiple of 16. */
FX_INLINE void load_tile(const uint8_t *t, int64_t j0, int64_t n, int64_t dim, float *dst,
                         int64_t dst_stride, const enum fx_type T) {
    for (int64_t i0 = 0; i0 < dim; i0 += 16) {
        __m512 v[16];
        __m512 d =
            T == FX_TYPE_Q8_0 ? fp16x16(t + dim * 16 + i0 / FX_QK * 32) : _mm512_setzero_ps();
#pragma GCC unroll 16
        for (int r = 0; r < 16; r++) {
            int64_t i = i0 + r;
            if (T == FX_TYPE_F32)
                v[r] = _mm512_loadu_ps((const float *)t + i * 16);
            else if (T == FX_TYPE_F16)
                v[r] = fp16x16(t + i * 32);
            else
                v[r] =
                    _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(load128(t + i * 16))), d);
        }
        transpose16(v);
        for (int64_t jj = j0; jj < j0 + n; jj++)
            _mm512_storeu_ps(dst + (jj - j0) * dst_stride + i0, v[jj]);
    }
}

void fx_avx512_kv_load_tile(enum fx_type type, const void *tile, int64_t j0, int64_t n, int64_t dim,
                            float *dst, int64_t dst_stride) {
    if (dim % 16) {
        fx_kv_load_tile_generic(type, tile, j0, n, dim, dst, dst_stride);
        return;
    }
    switch (type) {
    case FX_TYPE_F32:
        load_tile(tile, j0, n, dim, dst, dst_stride, FX_TYPE_F32);
        return;
    case FX_TYPE_F16:
        load_tile(tile, j0, n, dim, dst, dst_stride, FX_TYPE_F16);
        return;
    case FX_TYPE_Q8_0:
        load_tile(tile, j0, n, dim, dst, dst_stride, FX_TYPE_Q8_0);
        return;
    default:
        FX_ASSERT(!"not a KV cache type");
    }
}

#endif
