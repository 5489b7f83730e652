/* The drafter interface: dispatch to the kind's operations. */
#include "spec/drafter.h"

#include "core/error.h"

void fx_drafter_free(struct fx_drafter *d) {
    if (d)
        d->ops->free(d);
}

const char *fx_drafter_name(const struct fx_drafter *d) {
    return d->ops->name;
}

fx_status fx_drafter_propose(struct fx_drafter *d, const fx_token *seq, int32_t n_seq, int32_t k,
                             fx_token *draft, int32_t *n_draft, struct fx_error *err) {
    *n_draft = 0;
    if (n_seq < 0 || k < 0 || (n_seq > 0 && !seq) || (k > 0 && !draft))
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "drafter: bad proposal request (%d tokens, k %d)", (int)n_seq, (int)k);
    if (k == 0 || n_seq == 0)
        return FX_OK;
    return d->ops->propose(d, seq, n_seq, k, draft, n_draft, err);
}

void fx_drafter_accepted(struct fx_drafter *d, int32_t n_draft, int32_t n_accepted) {
    if (d->ops->accepted)
        d->ops->accepted(d, n_draft, n_accepted);
}

fx_token fx_drafter_argmax(const float *x, int32_t n) {
    fx_token best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}
