#include "kv/kv.h"

#include <stdlib.h>

#include "core/alloc.h"
#include "core/checked.h"
#include "core/error.h"

fx_status fx_kv_contig_init(struct fx_kv_contig *kv, int32_t n_layer, int32_t n_ctx,
                            int32_t n_head_kv, int64_t head_dim, int64_t head_dim_v,
                            enum fx_type type_k, enum fx_type type_v, struct fx_error *err) {
    *kv = (struct fx_kv_contig){.n_layer = n_layer,
                                .n_ctx = n_ctx,
                                .n_head_kv = n_head_kv,
                                .head_dim = head_dim,
                                .head_dim_v = head_dim_v,
                                .type_k = type_k,
                                .type_v = type_v};
    fx_status st = fx_kv_row_bytes(type_k, head_dim, "K", &kv->k_row, err);
    if (!st)
        st = fx_kv_row_bytes(type_v, head_dim_v, "V", &kv->v_row, err);
    if (st)
        return st;
    /* keys in whole tiles of 16 positions (kv.h) */
    uint64_t heads = (uint64_t)n_layer * (uint64_t)n_head_kv, rows, k_rows, k_bytes, v_bytes;
    if (fx_mul_overflow_u64(heads, (uint64_t)n_ctx, &rows) ||
        fx_mul_overflow_u64(heads, ((uint64_t)n_ctx + 15) / 16 * 16, &k_rows) ||
        fx_mul_overflow_u64(k_rows, kv->k_row, &k_bytes) ||
        fx_mul_overflow_u64(rows, kv->v_row, &v_bytes) || k_bytes > SIZE_MAX - 63 ||
        v_bytes > SIZE_MAX)
        return fx_error_set(err, FX_ERR_CAPACITY, FX_NO_OFFSET,
                            "KV cache of %d layers x %d positions overflows", n_layer, n_ctx);
    if (n_ctx == 0) /* a context that only steps paged pools */
        return FX_OK;
    /* Zeroed here, not lazily: every page of the cache is touched at creation, so no forward pass
     * pays for page faults, and positions never written read as zeros rather than garbage. On
     * streamed memory (huge pages where given): a decode step at depth reads it all. Keys are
     * whole tiles on 64-byte lines. */
    kv->k = fx_alloc_streamed_zero(k_bytes);
    kv->v = fx_alloc_streamed_zero(v_bytes);
    if (!kv->k || !kv->v) {
        fx_kv_contig_release(kv);
        return fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET,
                            "out of memory for a KV cache of %llu bytes",
                            (unsigned long long)(k_bytes + v_bytes));
    }
    return FX_OK;
}

void fx_kv_contig_release(struct fx_kv_contig *kv) {
    free(kv->k);
    free(kv->v);
    kv->k = kv->v = NULL;
    kv->n_filled = 0;
}
