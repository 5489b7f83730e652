/* Test helper: writes edited copies of GGUF files (a tensor dropped or reshaped, metadata
 * changed), to build malformed or variant models from the fixtures with the project's writer. */
#ifndef FX_TEST_GGUF_COPY_H
#define FX_TEST_GGUF_COPY_H

#include <stdbool.h>

#include "ferrox.h"

struct fx_test_gguf_edit {
    /* Called per tensor; return false to leave it out. May change the dims it is written with
     * (the data written is the original bytes, so only shapes with the same element count stay
     * readable). NULL keeps every tensor. */
    bool (*tensor)(void *user, const struct fx_tensor_view *t, uint32_t *n_dims, int64_t *ne);
    /* Called once after the metadata is copied, to change it. NULL for none. */
    void (*metadata)(void *user, struct fx_gguf_writer *w);
    void *user;
};

/* Copies src to dst with the edit applied; fails the test on any error. */
void fx_test_gguf_copy(const char *src, const char *dst, const struct fx_test_gguf_edit *edit);

#endif
