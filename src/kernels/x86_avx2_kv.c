/* AVX2 + F16C KV cache rows (kernels.h, kv_store and kv_load). The AVX-512 table has its own
 * (x86_avx512_kv.c).
 *
 * Every result is the generic one bit for bit: the F16C conversions round to nearest even like
 * fx_f32_to_fp16 and widen exactly; a Q8_0 value is (float)q * d, one product that is exact in
 * f32 (8-bit times 11-bit significands), so no order or contraction could change it; Q8_0 rows
 * are encoded by the table's activation quantizer, which is bit-identical to the generic one.
 * NaN payloads are the exception (F16C quiets them, fx_f32_to_fp16 writes a canonical NaN): the
 * cache never holds NaN from finite activations. */
#if defined(__x86_64__)

#include "kernels/x86_avx2.h"

#include "core/error.h"
#include "kernels/half.h"
#include "kernels/types.h"

/* dim f16 at src (any alignment) to f32, 32 at a time while they last, then 8, then singly. */
static void f16_to_f32_row(const uint8_t *src, float *dst, int64_t dim) {
    int64_t i = 0;
    for (; i + 32 <= dim; i += 32) {
        __m256 a = fp16x8(src + 2 * i), b = fp16x8(src + 2 * i + 16);
        __m256 c = fp16x8(src + 2 * i + 32), d = fp16x8(src + 2 * i + 48);
        _mm256_storeu_ps(dst + i, a);
        _mm256_storeu_ps(dst + i + 8, b);
        _mm256_storeu_ps(dst + i + 16, c);
        _mm256_storeu_ps(dst + i + 24, d);
    }
    for (; i + 8 <= dim; i += 8)
        _mm256_storeu_ps(dst + i, fp16x8(src + 2 * i));
    for (; i < dim; i++) {
        uint16_t h;
        memcpy(&h, src + 2 * i, 2);
        dst[i] = fx_fp16_to_f32(h);
    }
}

/* dim/32 Q8_0 blocks at src (any alignment) to f32: q widened to int32, converted, times d. */
static void q8_0_to_f32_row(const uint8_t *src, float *dst, int64_t dim) {
    for (int64_t i = 0; i < dim; i += FX_QK, src += sizeof(struct fx_block_q8_0)) {
        uint16_t h;
        memcpy(&h, src, 2);
        __m256 d = _mm256_set1_ps(_cvtsh_ss(h));
        const uint8_t *qs = src + 2;
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            __m256 q = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(load64(qs + 8 * k)));
            _mm256_storeu_ps(dst + i + 8 * k, _mm256_mul_ps(q, d));
        }
    }
}

void fx_avx2_kv_store(enum fx_type type, const float *src, int64_t dim, void *dst) {
    switch (type) {
    case FX_TYPE_F32:
        memcpy(dst, src, (size_t)dim * sizeof(float));
        return;
    case FX_TYPE_F16: {
        uint8_t *h = dst;
        int64_t i = 0;
        for (; i + 8 <= dim; i += 8)
            _mm_storeu_si128((__m128i *)(h + 2 * i),
                             _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
        for (; i < dim; i++) {
            uint16_t v = fx_f32_to_fp16(src[i]);
            memcpy(h + 2 * i, &v, 2);
        }
        return;
    }
    case FX_TYPE_Q8_0:
        fx_avx2_quantize_act_q8_0(src, dst, dim);
        return;
    default:
        FX_ASSERT(!"not a KV cache type");
    }
}

void fx_avx2_kv_load(enum fx_type type, const void *src, uint64_t src_stride, int64_t n,
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

#endif
