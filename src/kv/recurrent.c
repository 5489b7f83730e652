#include "kv/recurrent.h"

#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "core/error.h"

fx_status fx_rstate_init(struct fx_rstate *rs, int32_t n_layer, int64_t conv_floats,
                         int64_t ssm_floats, struct fx_error *err) {
    *rs = (struct fx_rstate){
        .n_layer = n_layer, .conv_floats = conv_floats, .ssm_floats = ssm_floats};
    if (n_layer == 0)
        return FX_OK;
    uint64_t conv_bytes, ssm_bytes;
    if (fx_mul_overflow_u64((uint64_t)n_layer * sizeof(float), (uint64_t)conv_floats,
                            &conv_bytes) ||
        fx_mul_overflow_u64((uint64_t)n_layer * sizeof(float), (uint64_t)ssm_floats, &ssm_bytes) ||
        conv_bytes > SIZE_MAX || ssm_bytes > SIZE_MAX)
        return fx_error_set(err, FX_ERR_CAPACITY, FX_NO_OFFSET,
                            "recurrent state of %d layers overflows", n_layer);
    rs->conv = calloc(1, (size_t)conv_bytes);
    rs->ssm = calloc(1, (size_t)ssm_bytes);
    if (!rs->conv || !rs->ssm) {
        fx_rstate_release(rs);
        return fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET,
                            "out of memory for a recurrent state of %llu bytes",
                            (unsigned long long)(conv_bytes + ssm_bytes));
    }
    return FX_OK;
}

void fx_rstate_release(struct fx_rstate *rs) {
    free(rs->conv);
    free(rs->ssm);
    rs->conv = rs->ssm = NULL;
}
