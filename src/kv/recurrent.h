/* The recurrent state of one sequence of a hybrid model (qwen35): for every Gated DeltaNet
 * layer, the conv window (each channel's last d_conv - 1 inputs) and the delta-rule state of
 * each V head (the matrix at the start of the current chunk and the chunk's rows so far). Its size
 * does not depend on the sequence's length. It lives beside the sequence's KV rows (ARCHITECTURE.md
 * section 4): the contiguous context holds one, each live sequence of a paged pool one more
 * (kv/paged.h), and saved state carries it (kv/state.h).
 *
 * Unlike KV rows a recurrent state cannot be truncated: it is either the state after the
 * sequence's last position or, at position 0, the zero state (the forward pass treats a row at
 * position 0 as the start of its sequence and starts from zeros). */
#ifndef FX_KV_RECURRENT_H
#define FX_KV_RECURRENT_H

#include <stdbool.h>
#include <stdint.h>

#include "ferrox.h"

struct fx_rstate {
    int32_t n_layer;     /* recurrent layers */
    int64_t conv_floats; /* per layer: conv_dim * (d_conv - 1) */
    int64_t ssm_floats;  /* per layer: n_v_heads * fx_delta_state_floats(d_state) */
    float *conv;         /* [n_layer][conv_dim][d_conv - 1], each channel's inputs oldest first */
    float *ssm;          /* [n_layer][n_v_heads][fx_delta_state_floats(d_state)]: each head's
                          * delta-rule state in the chunked form (kernels.h, fx_delta_state) */
};

struct fx_model;

/* Sizes the state of n_layer layers (0: none, nothing allocated) and zeroes it. */
fx_status fx_rstate_init(struct fx_rstate *rs, int32_t n_layer, int64_t conv_floats,
                         int64_t ssm_floats, struct fx_error *err);
/* The floats per layer of a recurrent state of model m (zeros for a model without). */
void fx_rstate_shape(const struct fx_model *m, int64_t *conv_floats, int64_t *ssm_floats);
/* fx_rstate_init for a sequence of model m (none when m has no recurrent layers). */
fx_status fx_rstate_init_for(struct fx_rstate *rs, const struct fx_model *m, struct fx_error *err);
void fx_rstate_release(struct fx_rstate *rs);
/* Copies src into dst, both of the same shape (a fork, a snapshot, a rollback). */
void fx_rstate_copy(struct fx_rstate *dst, const struct fx_rstate *src);

/* Recurrent layer rl's conv window and delta-rule matrices. */
static inline float *fx_rstate_conv(const struct fx_rstate *rs, int32_t rl) {
    return rs->conv + (int64_t)rl * rs->conv_floats;
}

static inline float *fx_rstate_ssm(const struct fx_rstate *rs, int32_t rl) {
    return rs->ssm + (int64_t)rl * rs->ssm_floats;
}

#endif
