/* Per-call scratch memory (see session.h). */
#include "tok/session.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdlib.h>

#include "core/checked.h"
#include "core/error.h"

fx_status fx_tok_reserve(void **buf, size_t *cap, size_t need, size_t elem, const char *what,
                         struct fx_error *err) {
    if (need <= *cap)
        return FX_OK;
    size_t n = *cap ? *cap : 64, bytes;
    while (n < need)
        if (fx_mul_overflow_size(n, 2, &n))
            return fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "%s: %zu elements is too many",
                                what, need);
    if (fx_mul_overflow_size(n, elem, &bytes))
        return fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "%s: %zu elements is too many", what,
                            need);
    void *grown = realloc(*buf, bytes);
    if (!grown)
        return fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "out of memory (%s, %zu bytes)", what,
                            bytes);
    *buf = grown;
    *cap = n;
    return FX_OK;
}

void fx_tok_scratch_free(struct fx_tok_scratch *s) {
    free(s->frags);
    free(s->frags_next);
    free(s->sym);
    free(s->heap);
    free(s->text);
    free(s->pair_cache);
    pcre2_match_data_free(s->match);
    *s = (struct fx_tok_scratch){0};
}
