/* gguf/: the writer and reader together: every value type, tensors with borrowed and generated
 * data, alignment, lookup and the typed getters. */
#include "fx_test.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "ferrox.h"

#define OK(expr)                                                                                   \
    do {                                                                                           \
        struct fx_error e_ = {0};                                                                  \
        fx_status s_ = (expr);                                                                     \
        if (s_ != FX_OK)                                                                           \
            fail_msg("%s: %s: %s", #expr, fx_status_name(s_), e_.msg);                             \
    } while (0)

/* Deterministic bytes for tensor `index` at byte `off`, so that data written through the fill
 * callback can be checked without keeping a copy. */
static uint8_t pattern(int64_t index, uint64_t off) {
    return (uint8_t)((off * 131u) ^ ((uint64_t)index * 7u + (off >> 8)));
}

static fx_status fill_pattern(void *user, int64_t index, uint64_t offset, void *dst, uint64_t size,
                              struct fx_error *err) {
    (void)err;
    int *calls = user;
    (*calls)++;
    for (uint64_t i = 0; i < size; i++)
        ((uint8_t *)dst)[i] = pattern(index, offset + i);
    return FX_OK;
}

static const char *const strs[] = {"alpha", "", "gamma with spaces", "\xe2\x96\x81piece"};

/* A writer with one pair of every type and four tensors, two of them filled by the callback. */
static struct fx_gguf_writer *build_all_types(float *f32_data, uint16_t *f16_data) {
    struct fx_gguf_writer *w;
    OK(fx_gguf_writer_create(&w, &e_));
    struct fx_gguf_kv kv = {.key = "t.u8", .type = FX_GGUF_UINT8};
    kv.v.u8 = 200;
    OK(fx_gguf_writer_set_kv(w, &kv, &e_));
    kv = (struct fx_gguf_kv){.key = "t.i8", .type = FX_GGUF_INT8};
    kv.v.i8 = -100;
    OK(fx_gguf_writer_set_kv(w, &kv, &e_));
    kv = (struct fx_gguf_kv){.key = "t.u16", .type = FX_GGUF_UINT16};
    kv.v.u16 = 60000;
    OK(fx_gguf_writer_set_kv(w, &kv, &e_));
    kv = (struct fx_gguf_kv){.key = "t.i16", .type = FX_GGUF_INT16};
    kv.v.i16 = -30000;
    OK(fx_gguf_writer_set_kv(w, &kv, &e_));
    OK(fx_gguf_writer_set_u32(w, "t.u32", 4000000000u, &e_));
    OK(fx_gguf_writer_set_i32(w, "t.i32", -2000000000, &e_));
    OK(fx_gguf_writer_set_f32(w, "t.f32", 0.1f, &e_));
    OK(fx_gguf_writer_set_bool(w, "t.bool", true, &e_));
    OK(fx_gguf_writer_set_str(w, "t.str", "hello", &e_));
    OK(fx_gguf_writer_set_u64(w, "t.u64", UINT64_MAX, &e_));
    kv = (struct fx_gguf_kv){.key = "t.i64", .type = FX_GGUF_INT64};
    kv.v.i64 = INT64_MIN;
    OK(fx_gguf_writer_set_kv(w, &kv, &e_));
    kv = (struct fx_gguf_kv){.key = "t.f64", .type = FX_GGUF_FLOAT64};
    kv.v.f64 = 1e300;
    OK(fx_gguf_writer_set_kv(w, &kv, &e_));
    /* A string with an embedded NUL: the length is authoritative. */
    kv = (struct fx_gguf_kv){.key = "t.nul", .type = FX_GGUF_STRING};
    kv.v.str = (struct fx_gguf_str){"a\0b", 3};
    OK(fx_gguf_writer_set_kv(w, &kv, &e_));
    static const int32_t i32s[] = {1, -2, 3};
    static const float f32s[] = {0.5f, -1.25f};
    static const bool bools[] = {true, false, true};
    OK(fx_gguf_writer_set_arr(w, "a.i32", FX_GGUF_INT32, i32s, 3, &e_));
    OK(fx_gguf_writer_set_arr(w, "a.f32", FX_GGUF_FLOAT32, f32s, 2, &e_));
    OK(fx_gguf_writer_set_arr(w, "a.bool", FX_GGUF_BOOL, bools, 3, &e_));
    OK(fx_gguf_writer_set_arr(w, "a.empty", FX_GGUF_UINT64, NULL, 0, &e_));
    OK(fx_gguf_writer_set_str_arr(w, "a.str", strs, 4, &e_));

    for (int i = 0; i < 6 * 5; i++)
        f32_data[i] = (float)i * 0.5f - 3.0f;
    for (int i = 0; i < 64 * 2 * 3; i++)
        f16_data[i] = (uint16_t)(i * 37);
    OK(fx_gguf_writer_add_tensor(w, "m.f32", FX_TYPE_F32, 2, (const int64_t[]){6, 5}, f32_data,
                                 &e_));
    OK(fx_gguf_writer_add_tensor(w, "m.q4k", FX_TYPE_Q4_K, 2, (const int64_t[]){512, 3}, NULL,
                                 &e_));
    OK(fx_gguf_writer_add_tensor(w, "m.f16", FX_TYPE_F16, 3, (const int64_t[]){64, 2, 3}, f16_data,
                                 &e_));
    OK(fx_gguf_writer_add_tensor(w, "m.scalar", FX_TYPE_I8, 0, NULL, NULL, &e_));
    return w;
}

FX_TEST(gguf_write_read_every_value_type) {
    float f32_data[30];
    uint16_t f16_data[384];
    struct fx_gguf_writer *w = build_all_types(f32_data, f16_data);
    const char *path = fx_test_tmpfile("all.gguf");
    int calls = 0;
    OK(fx_gguf_writer_write(w, path, fill_pattern, &calls, &e_));
    assert_true(calls >= 2);
    fx_gguf_writer_free(w);

    struct fx_gguf *g;
    OK(fx_gguf_open(path, &g, &e_));
    assert_int_equal(fx_gguf_version(g), 3);
    assert_int_equal(fx_gguf_alignment(g), 32);
    assert_int_equal(fx_gguf_n_kv(g), 18);
    assert_int_equal(fx_gguf_n_tensors(g), 4);
    assert_string_equal(fx_gguf_kv_at(g, 0)->key, "t.u8");
    assert_string_equal(fx_gguf_kv_at(g, 17)->key, "a.str");
    assert_null(fx_gguf_kv_at(g, 18));
    assert_null(fx_gguf_find_kv(g, "missing"));

    const struct fx_gguf_kv *kv = fx_gguf_find_kv(g, "t.u8");
    assert_int_equal(kv->type, FX_GGUF_UINT8);
    assert_int_equal(kv->v.u8, 200);
    assert_int_equal(fx_gguf_find_kv(g, "t.i8")->v.i8, -100);
    assert_int_equal(fx_gguf_find_kv(g, "t.u16")->v.u16, 60000);
    assert_int_equal(fx_gguf_find_kv(g, "t.i16")->v.i16, -30000);
    assert_true(fx_gguf_find_kv(g, "t.f64")->v.f64 == 1e300);
    assert_true(fx_gguf_find_kv(g, "t.i64")->v.i64 == INT64_MIN);
    kv = fx_gguf_find_kv(g, "t.nul");
    assert_int_equal(kv->v.str.len, 3);
    assert_memory_equal(kv->v.str.data, "a\0b", 4);

    uint32_t u32;
    int32_t i32;
    int64_t i64;
    uint64_t u64;
    float f;
    bool b;
    struct fx_gguf_str s;
    OK(fx_gguf_get_u32(g, "t.u32", &u32, &e_));
    assert_int_equal(u32, 4000000000u);
    OK(fx_gguf_get_u32(g, "t.u8", &u32, &e_)); /* any integer type that fits */
    assert_int_equal(u32, 200);
    OK(fx_gguf_get_i32(g, "t.i32", &i32, &e_));
    assert_int_equal(i32, -2000000000);
    OK(fx_gguf_get_i32(g, "t.i16", &i32, &e_));
    assert_int_equal(i32, -30000);
    OK(fx_gguf_get_i64(g, "t.i64", &i64, &e_));
    assert_true(i64 == INT64_MIN);
    OK(fx_gguf_get_u64(g, "t.u64", &u64, &e_));
    assert_true(u64 == UINT64_MAX);
    OK(fx_gguf_get_f32(g, "t.f32", &f, &e_));
    assert_true(f == 0.1f);
    OK(fx_gguf_get_bool(g, "t.bool", &b, &e_));
    assert_true(b);
    OK(fx_gguf_get_str(g, "t.str", &s, &e_));
    assert_string_equal(s.data, "hello");
    assert_int_equal(s.len, 5);

    const void *arr;
    uint64_t n;
    OK(fx_gguf_get_arr(g, "a.i32", FX_GGUF_INT32, &arr, &n, &e_));
    assert_int_equal(n, 3);
    assert_int_equal(((const int32_t *)arr)[1], -2);
    assert_int_equal((uintptr_t)arr % 4, 0);
    OK(fx_gguf_get_arr(g, "a.f32", FX_GGUF_FLOAT32, &arr, &n, &e_));
    assert_true(((const float *)arr)[1] == -1.25f);
    OK(fx_gguf_get_arr(g, "a.bool", FX_GGUF_BOOL, &arr, &n, &e_));
    assert_memory_equal(arr, ((const uint8_t[]){1, 0, 1}), 3);
    OK(fx_gguf_get_arr(g, "a.empty", FX_GGUF_UINT64, &arr, &n, &e_));
    assert_int_equal(n, 0);
    OK(fx_gguf_get_arr(g, "a.str", FX_GGUF_STRING, &arr, &n, &e_));
    assert_int_equal(n, 4);
    const struct fx_gguf_str *ss = arr;
    for (int i = 0; i < 4; i++) {
        assert_int_equal(ss[i].len, strlen(strs[i]));
        assert_string_equal(ss[i].data, strs[i]);
    }

    const struct fx_tensor_view *t = fx_gguf_find_tensor(g, "m.f32");
    assert_non_null(t);
    assert_int_equal(t->type, FX_TYPE_F32);
    assert_int_equal(t->n_dims, 2);
    assert_int_equal(t->ne[0], 6);
    assert_int_equal(t->ne[1], 5);
    assert_int_equal(t->ne[2], 1);
    assert_int_equal(t->n_elements, 30);
    assert_int_equal(t->n_bytes, 120);
    assert_int_equal(t->offset, 0);
    assert_memory_equal(t->data, f32_data, 120);
    t = fx_gguf_find_tensor(g, "m.q4k");
    assert_int_equal(t->n_bytes, 2 * 144 * 3);
    assert_int_equal(t->offset, 128); /* 120 padded to 32 */
    for (uint64_t i = 0; i < t->n_bytes; i++)
        assert_int_equal(((const uint8_t *)t->data)[i], pattern(1, i));
    t = fx_gguf_find_tensor(g, "m.f16");
    assert_int_equal(t->n_dims, 3);
    assert_int_equal(t->ne[2], 3);
    assert_memory_equal(t->data, f16_data, sizeof(uint16_t) * 384);
    t = fx_gguf_find_tensor(g, "m.scalar");
    assert_int_equal(t->n_dims, 0);
    assert_int_equal(t->n_elements, 1);
    assert_int_equal(((const uint8_t *)t->data)[0], pattern(3, 0));
    for (int64_t i = 0; i < 4; i++) {
        t = fx_gguf_tensor_at(g, i);
        assert_int_equal(t->offset % 32, 0);
        assert_ptr_equal(fx_gguf_find_tensor(g, t->name), t);
        assert_int_equal((fx_gguf_data_offset(g) + t->offset) % 32, 0);
    }
    assert_null(fx_gguf_tensor_at(g, 4));
    assert_null(fx_gguf_find_tensor(g, "m"));
    /* The file ends with the last tensor's padding. */
    assert_int_equal(fx_gguf_file_size(g) % 32, 0);
    fx_gguf_free(g);
    fx_gguf_free(NULL);
}

FX_TEST(gguf_getters_check_type_and_range) {
    struct fx_gguf_writer *w;
    OK(fx_gguf_writer_create(&w, &e_));
    OK(fx_gguf_writer_set_i32(w, "neg", -1, &e_));
    OK(fx_gguf_writer_set_u64(w, "big", (uint64_t)UINT32_MAX + 1, &e_));
    OK(fx_gguf_writer_set_str(w, "name", "x", &e_));
    static const uint8_t bytes[] = {1, 2, 3};
    OK(fx_gguf_writer_set_arr(w, "tokenizer.ggml.scores", FX_GGUF_UINT8, bytes, 3, &e_));
    const char *path = fx_test_tmpfile("getters.gguf");
    OK(fx_gguf_writer_write(w, path, NULL, NULL, &e_));
    fx_gguf_writer_free(w);
    struct fx_gguf *g;
    OK(fx_gguf_open(path, &g, &e_));

    struct fx_error e;
    uint32_t u32;
    int32_t i32;
    float f;
    assert_int_equal(fx_gguf_get_u32(g, "neg", &u32, &e), FX_ERR_FORMAT);
    assert_non_null(strstr(e.msg, "'neg'"));
    assert_non_null(strstr(e.msg, "-1"));
    assert_int_equal(fx_gguf_get_u32(g, "big", &u32, &e), FX_ERR_FORMAT);
    assert_non_null(strstr(e.msg, "4294967296"));
    assert_int_equal(fx_gguf_get_i32(g, "big", &i32, &e), FX_ERR_FORMAT);
    assert_int_equal(fx_gguf_get_f32(g, "name", &f, &e), FX_ERR_FORMAT);
    assert_non_null(strstr(e.msg, "has type string, expected float32"));
    assert_int_equal(fx_gguf_get_u32(g, "nope", &u32, &e), FX_ERR_NOT_FOUND);
    assert_non_null(strstr(e.msg, "'nope'"));
    /* An array of the wrong element type is refused, never reinterpreted: a loader asking for
     * float scores gets an error, not 4-byte reads from a 1-byte array. */
    const void *arr;
    uint64_t n;
    assert_int_equal(fx_gguf_get_arr(g, "tokenizer.ggml.scores", FX_GGUF_FLOAT32, &arr, &n, &e),
                     FX_ERR_FORMAT);
    assert_non_null(strstr(e.msg, "array of uint8, expected array of float32"));
    assert_int_equal(fx_gguf_get_arr(g, "name", FX_GGUF_STRING, &arr, &n, &e), FX_ERR_FORMAT);
    fx_gguf_free(g);
}

FX_TEST(gguf_writer_replaces_removes_and_aligns) {
    struct fx_gguf_writer *w;
    OK(fx_gguf_writer_create(&w, &e_));
    OK(fx_gguf_writer_set_str(w, "a", "first", &e_));
    OK(fx_gguf_writer_set_u32(w, "b", 1, &e_));
    OK(fx_gguf_writer_set_u32(w, "c", 2, &e_));
    OK(fx_gguf_writer_set_str(w, "a", "second", &e_)); /* replaced in place */
    fx_gguf_writer_remove_kv(w, "b");
    fx_gguf_writer_remove_kv(w, "absent");
    OK(fx_gguf_writer_set_alignment(w, 64, &e_));
    struct fx_error e;
    assert_int_equal(fx_gguf_writer_set_alignment(w, 48, &e), FX_ERR_INVALID_ARG);
    assert_int_equal(fx_gguf_writer_set_i32(w, "general.alignment", 64, &e), FX_ERR_INVALID_ARG);
    float x[3] = {1, 2, 3};
    OK(fx_gguf_writer_add_tensor(w, "x", FX_TYPE_F32, 1, (const int64_t[]){3}, x, &e_));
    OK(fx_gguf_writer_add_tensor(w, "y", FX_TYPE_F32, 1, (const int64_t[]){3}, x, &e_));
    const char *path = fx_test_tmpfile("align.gguf");
    OK(fx_gguf_writer_write(w, path, NULL, NULL, &e_));
    fx_gguf_writer_free(w);

    struct fx_gguf *g;
    OK(fx_gguf_open(path, &g, &e_));
    assert_int_equal(fx_gguf_n_kv(g), 3);
    assert_string_equal(fx_gguf_kv_at(g, 0)->key, "a");
    assert_string_equal(fx_gguf_kv_at(g, 0)->v.str.data, "second");
    assert_string_equal(fx_gguf_kv_at(g, 1)->key, "c");
    assert_string_equal(fx_gguf_kv_at(g, 2)->key, "general.alignment");
    assert_null(fx_gguf_find_kv(g, "b"));
    assert_int_equal(fx_gguf_alignment(g), 64);
    assert_int_equal(fx_gguf_data_offset(g) % 64, 0);
    assert_int_equal(fx_gguf_find_tensor(g, "y")->offset, 64);
    fx_gguf_free(g);
}

FX_TEST(gguf_writer_rejects_bad_arguments) {
    struct fx_gguf_writer *w;
    OK(fx_gguf_writer_create(&w, &e_));
    struct fx_error e;
    float x[32] = {0};
    assert_int_equal(fx_gguf_writer_set_u32(w, "", 1, &e), FX_ERR_INVALID_ARG);
    assert_int_equal(
        fx_gguf_writer_add_tensor(w, "t", FX_TYPE_F32, 5, (const int64_t[]){1, 1, 1, 1, 1}, x, &e),
        FX_ERR_INVALID_ARG);
    assert_int_equal(fx_gguf_writer_add_tensor(w, "t", FX_TYPE_F32, 1, (const int64_t[]){0}, x, &e),
                     FX_ERR_INVALID_ARG);
    assert_int_equal(
        fx_gguf_writer_add_tensor(w, "t", FX_TYPE_Q4_0, 1, (const int64_t[]){31}, x, &e),
        FX_ERR_INVALID_ARG);
    assert_non_null(strstr(e.msg, "'t'"));
    assert_int_equal(
        fx_gguf_writer_add_tensor(w, "t", (enum fx_type)4, 1, (const int64_t[]){1}, x, &e),
        FX_ERR_INVALID_ARG);
    assert_int_equal(
        fx_gguf_writer_add_tensor(w, "t", FX_TYPE_F32, 1, (const int64_t[]){INT64_MAX}, x, &e),
        FX_ERR_INVALID_ARG);
    char long_name[80];
    memset(long_name, 'n', sizeof long_name - 1);
    long_name[79] = '\0';
    assert_int_equal(
        fx_gguf_writer_add_tensor(w, long_name, FX_TYPE_F32, 1, (const int64_t[]){1}, x, &e),
        FX_ERR_INVALID_ARG);
    OK(fx_gguf_writer_add_tensor(w, "t", FX_TYPE_F32, 1, (const int64_t[]){32}, NULL, &e_));
    assert_int_equal(fx_gguf_writer_add_tensor(w, "t", FX_TYPE_F32, 1, (const int64_t[]){1}, x, &e),
                     FX_ERR_INVALID_ARG);
    assert_non_null(strstr(e.msg, "duplicate"));
    /* No data and no fill callback. */
    const char *path = fx_test_tmpfile("nofill.gguf");
    assert_int_equal(fx_gguf_writer_write(w, path, NULL, NULL, &e), FX_ERR_INVALID_ARG);
    assert_int_not_equal(access(path, F_OK), 0);
    fx_gguf_writer_free(w);
    fx_gguf_writer_free(NULL);
}

static fx_status fill_fails(void *user, int64_t index, uint64_t offset, void *dst, uint64_t size,
                            struct fx_error *err) {
    (void)user, (void)dst, (void)size;
    if (offset > 0 || index > 0)
        return fx_error_set(err, FX_ERR_CANCELLED, FX_NO_OFFSET, "stopped by the test");
    memset(dst, 0, size);
    return FX_OK;
}

FX_TEST(gguf_failed_write_leaves_no_file) {
    struct fx_gguf_writer *w;
    OK(fx_gguf_writer_create(&w, &e_));
    OK(fx_gguf_writer_add_tensor(w, "a", FX_TYPE_F32, 1, (const int64_t[]){8}, NULL, &e_));
    OK(fx_gguf_writer_add_tensor(w, "b", FX_TYPE_F32, 1, (const int64_t[]){8}, NULL, &e_));
    const char *path = fx_test_tmpfile("failed.gguf");
    struct fx_error e;
    assert_int_equal(fx_gguf_writer_write(w, path, fill_fails, NULL, &e), FX_ERR_CANCELLED);
    assert_non_null(strstr(e.msg, "tensor 'b'"));
    assert_int_not_equal(access(path, F_OK), 0);
    /* Nor a temporary file beside it. */
    DIR *d = opendir(fx_test_tmpdir());
    assert_non_null(d);
    for (struct dirent *de; (de = readdir(d));)
        assert_null(strstr(de->d_name, "failed.gguf"));
    closedir(d);
    fx_gguf_writer_free(w);
}

FX_TEST(gguf_open_reports_missing_and_non_regular_files) {
    struct fx_gguf *g = (struct fx_gguf *)1;
    struct fx_error e;
    assert_int_equal(fx_gguf_open(fx_test_tmpfile("does-not-exist.gguf"), &g, &e),
                     FX_ERR_NOT_FOUND);
    assert_null(g);
    assert_non_null(strstr(e.msg, "does-not-exist.gguf"));
    assert_int_equal(fx_gguf_open(fx_test_tmpdir(), &g, &e), FX_ERR_IO);
    const char *empty = fx_test_tmpfile("empty.gguf");
    fx_test_write_file(empty, "", 0);
    assert_int_equal(fx_gguf_open(empty, &g, &e), FX_ERR_FORMAT);
    assert_non_null(strstr(e.msg, "0 bytes"));
}
