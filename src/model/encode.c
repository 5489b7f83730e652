#include "model/encode.h"

#include <stdlib.h>

#include "core/error.h"
#include "core/par.h"
#include "kernels/kernels.h"

struct fx_encoder {
    struct fx_pool *pool;
    int64_t max_row;
    float **scratch; /* [n_threads][max_row]: each worker's f32 row */
};

fx_status fx_encoder_create(int n_threads, int64_t max_row, struct fx_encoder **out,
                            struct fx_error *err) {
    *out = NULL;
    if (max_row < 1 || (uint64_t)max_row > SIZE_MAX / sizeof(float))
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET, "rows of %lld elements",
                            (long long)max_row);
    struct fx_encoder *e = calloc(1, sizeof *e);
    if (!e)
        return fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "out of memory");
    fx_status st = fx_pool_create(n_threads, &e->pool, err);
    if (st != FX_OK) {
        free(e);
        return st;
    }
    int n = fx_pool_size(e->pool);
    e->max_row = max_row;
    e->scratch = calloc((size_t)n, sizeof *e->scratch);
    for (int i = 0; e->scratch && i < n; i++)
        if (!(e->scratch[i] = malloc((size_t)max_row * sizeof(float)))) {
            fx_encoder_free(e);
            return fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET,
                                "out of memory for %d rows of %lld floats", n, (long long)max_row);
        }
    if (!e->scratch) {
        fx_encoder_free(e);
        return fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "out of memory");
    }
    *out = e;
    return FX_OK;
}

void fx_encoder_free(struct fx_encoder *e) {
    if (!e)
        return;
    if (e->scratch)
        for (int i = 0; i < fx_pool_size(e->pool); i++)
            free(e->scratch[i]);
    free(e->scratch);
    fx_pool_free(e->pool);
    free(e);
}

int fx_encoder_threads(const struct fx_encoder *e) {
    return fx_pool_size(e->pool);
}

struct job {
    const struct fx_encoder *e;
    fx_from_float_fn encode;
    int64_t ne0, row0, n_rows;
    uint64_t row_bytes;
    fx_row_source_fn source;
    const void *user;
    uint8_t *dst;
};

static void encode_share(const struct fx_worker *w, void *arg) {
    const struct job *j = arg;
    float *row = j->e->scratch[w->ith];
    int64_t begin, end;
    fx_par_range(j->n_rows, w->ith, w->nth, 1, &begin, &end);
    for (int64_t r = begin; r < end; r++) {
        j->source(j->user, j->row0 + r, row);
        j->encode(row, j->dst + (uint64_t)r * j->row_bytes, j->ne0);
    }
}

fx_status fx_encoder_run(struct fx_encoder *e, enum fx_type type, int64_t ne0, int64_t row0,
                         int64_t n_rows, fx_row_source_fn source, const void *user, void *dst,
                         struct fx_error *err) {
    struct job j = {.e = e,
                    .ne0 = ne0,
                    .row0 = row0,
                    .n_rows = n_rows,
                    .source = source,
                    .user = user,
                    .dst = dst};
    if ((unsigned)type >= FX_TYPE_COUNT || !(j.encode = fx_kernels()->types[type].from_float))
        return fx_error_set(err, FX_ERR_UNSUPPORTED, FX_NO_OFFSET, "no encoder for type %s",
                            fx_type_name(type));
    if (ne0 < 1 || ne0 > e->max_row || !fx_type_row_bytes(type, ne0, &j.row_bytes))
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "rows of %lld elements cannot be encoded as %s", (long long)ne0,
                            fx_type_name(type));
    if (n_rows <= 0)
        return FX_OK;
    return fx_par_run(e->pool, encode_share, &j) == FX_OK
               ? FX_OK
               : fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                              "encoding from inside a worker pool");
}
