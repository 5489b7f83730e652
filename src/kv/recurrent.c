#include "kv/recurrent.h"

#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/checked.h"
#include "core/error.h"
#include "kernels/kernels.h"
#include "model/model.h"

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
    rs->conv = fx_alloc_streamed_zero(conv_bytes);
    rs->ssm = fx_alloc_streamed_zero(ssm_bytes); /* read and written whole by every token */
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

void fx_rstate_shape(const struct fx_model *m, int64_t *conv_floats, int64_t *ssm_floats) {
    const struct fx_hparams *hp = &m->hp;
    int64_t key_dim = (int64_t)hp->ssm_d_state * hp->n_ssm_k_heads;
    int64_t value_dim = (int64_t)hp->ssm_d_state * hp->n_ssm_v_heads;
    bool any = hp->n_layer_rec > 0;
    *conv_floats = any ? (2 * key_dim + value_dim) * (hp->ssm_d_conv - 1) : 0;
    *ssm_floats = any ? hp->n_ssm_v_heads * fx_delta_state_floats(hp->ssm_d_state) : 0;
}

fx_status fx_rstate_init_for(struct fx_rstate *rs, const struct fx_model *m, struct fx_error *err) {
    int64_t conv_floats, ssm_floats;
    fx_rstate_shape(m, &conv_floats, &ssm_floats);
    return fx_rstate_init(rs, m->hp.n_layer_rec, conv_floats, ssm_floats, err);
}

void fx_rstate_copy(struct fx_rstate *dst, const struct fx_rstate *src) {
    FX_ASSERT(dst->n_layer == src->n_layer && dst->conv_floats == src->conv_floats &&
              dst->ssm_floats == src->ssm_floats);
    if (src->n_layer == 0)
        return;
    memcpy(dst->conv, src->conv, (size_t)src->n_layer * (size_t)src->conv_floats * sizeof(float));
    memcpy(dst->ssm, src->ssm, (size_t)src->n_layer * (size_t)src->ssm_floats * sizeof(float));
}
