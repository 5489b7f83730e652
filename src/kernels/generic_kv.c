/* KV cache rows in plain C: the reference every table's kv_store and kv_load are tested against
 * (kernels.h). */
#include <string.h>

#include "core/error.h"
#include "kernels/generic.h"
#include "kernels/half.h"

void fx_kv_store_generic(enum fx_type type, const float *src, int64_t dim, void *dst) {
    switch (type) {
    case FX_TYPE_F32:
        memcpy(dst, src, (size_t)dim * sizeof(float));
        return;
    case FX_TYPE_F16:
        fx_f16_from_float(src, dst, dim);
        return;
    case FX_TYPE_Q8_0:
        fx_q8_0_quantize_act(src, dst, dim);
        return;
    default:
        FX_ASSERT(!"not a KV cache type");
    }
}

void fx_kv_load_generic(enum fx_type type, const void *src, uint64_t src_stride, int64_t n,
                        int64_t dim, float *dst, int64_t dst_stride) {
    for (int64_t j = 0; j < n; j++) {
        const void *row = (const uint8_t *)src + (uint64_t)j * src_stride;
        float *out = dst + j * dst_stride;
        switch (type) {
        case FX_TYPE_F32:
            memcpy(out, row, (size_t)dim * sizeof(float));
            break;
        case FX_TYPE_F16:
            fx_f16_to_float(row, out, dim);
            break;
        case FX_TYPE_Q8_0:
            fx_q8_0_to_float(row, out, dim);
            break;
        default:
            FX_ASSERT(!"not a KV cache type");
        }
    }
}

void fx_kv_load_tile_generic(enum fx_type type, const void *tile, int64_t j0, int64_t n,
                             int64_t dim, float *dst, int64_t dst_stride) {
    const uint8_t *t = tile;
    for (int64_t jj = j0; jj < j0 + n; jj++)
        for (int64_t i = 0; i < dim; i++) {
            float *out = dst + (jj - j0) * dst_stride + i;
            switch (type) {
            case FX_TYPE_F32:
                memcpy(out, t + (i * 16 + jj) * 4, sizeof(float));
                break;
            case FX_TYPE_F16: {
                uint16_t h;
                memcpy(&h, t + (i * 16 + jj) * 2, 2);
                *out = fx_fp16_to_f32(h);
                break;
            }
            case FX_TYPE_Q8_0: {
                uint16_t h;
                memcpy(&h, t + dim * 16 + (i / FX_QK * 16 + jj) * 2, 2);
                *out = (float)(int8_t)t[i * 16 + jj] * fx_fp16_to_f32(h);
                break;
            }
            default:
                FX_ASSERT(!"not a KV cache type");
            }
        }
}
