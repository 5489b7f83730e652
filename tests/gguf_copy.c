#include "gguf_copy.h"

#include "fx_test.h"

void fx_test_gguf_copy(const char *src, const char *dst, const struct fx_test_gguf_edit *edit) {
    struct fx_gguf *g;
    struct fx_error err;
    if (fx_gguf_open(src, &g, &err) != FX_OK)
        fail_msg("open %s: %s", src, err.msg);
    struct fx_gguf_writer *w;
    assert_int_equal(fx_gguf_writer_create(&w, &err), FX_OK);
    for (int64_t i = 0; i < fx_gguf_n_kv(g); i++)
        if (fx_gguf_writer_set_kv(w, fx_gguf_kv_at(g, i), &err) != FX_OK)
            fail_msg("copy key: %s", err.msg);
    if (edit && edit->metadata)
        edit->metadata(edit->user, w);
    for (int64_t i = 0; i < fx_gguf_n_tensors(g); i++) {
        const struct fx_tensor_view *t = fx_gguf_tensor_at(g, i);
        uint32_t n_dims = t->n_dims;
        int64_t ne[FX_GGUF_MAX_DIMS];
        for (int d = 0; d < FX_GGUF_MAX_DIMS; d++)
            ne[d] = t->ne[d];
        if (edit && edit->tensor && !edit->tensor(edit->user, t, &n_dims, ne))
            continue;
        if (fx_gguf_writer_add_tensor(w, t->name, t->type, n_dims, ne, t->data, &err) != FX_OK)
            fail_msg("add tensor %s: %s", t->name, err.msg);
    }
    if (fx_gguf_writer_write(w, dst, NULL, NULL, &err) != FX_OK)
        fail_msg("write %s: %s", dst, err.msg);
    fx_gguf_writer_free(w);
    fx_gguf_free(g);
}
