/* `ferrox inspect`: text and JSON output, and one clean error line for a bad file. */
#include "fx_test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "ferrox.h"
#include "gguf_bytes.h"

static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

FX_TEST(gguf_inspect_bad_file_prints_one_error_line) {
    struct gb b;
    struct gb_layout l;
    gb_valid_file(&b, &l);
    const char *path = fx_test_tmpfile("cut.gguf");
    fx_test_write_file(path, b.p, l.t0_type_at + 2); /* cut inside tensor 'a' */
    for (int json = 0; json < 2; json++) {
        char *out = NULL, *err = NULL;
        const char *args[] = {"inspect", path, json ? "--json" : NULL, NULL};
        assert_int_equal(fx_test_run_cli(args, NULL, &out, &err), 1);
        assert_string_equal(out, "");
        assert_int_equal(count_lines(err), 1);
        assert_non_null(strstr(err, "ferrox inspect: "));
        assert_non_null(strstr(err, "tensor 'a': truncated: tensor type needs 4 bytes"));
        free(out), free(err);
    }
    /* Garbage, an empty file and a missing one: the same, never a crash. */
    const char *junk = fx_test_tmpfile("junk.gguf");
    fx_test_write_file(junk, "GGUF\x03\0\0\0\xff\xff\xff\xff\xff\xff\xff\xff", 16);
    const char *empty = fx_test_tmpfile("empty.gguf");
    fx_test_write_file(empty, "", 0);
    const char *bad[] = {junk, empty, fx_test_tmpfile("missing.gguf")};
    for (int i = 0; i < 3; i++) {
        char *err = NULL;
        assert_int_equal(
            fx_test_run_cli((const char *const[]){"inspect", bad[i], NULL}, NULL, NULL, &err), 1);
        assert_int_equal(count_lines(err), 1);
        free(err);
    }
    assert_int_equal(fx_test_run_cli((const char *const[]){"inspect", NULL}, NULL, NULL, NULL), 2);
    assert_int_equal(
        fx_test_run_cli((const char *const[]){"inspect", path, "--bogus", NULL}, NULL, NULL, NULL),
        2);
    gb_free(&b);
}

FX_TEST(gguf_inspect_prints_header_metadata_tensors_totals) {
    struct fx_gguf_writer *w;
    assert_int_equal(fx_gguf_writer_create(&w, NULL), FX_OK);
    assert_int_equal(fx_gguf_writer_set_str(w, "general.architecture", "llama", NULL), FX_OK);
    static const uint8_t bad_utf8[] = {'o', 'k', 0xff, '\n'};
    struct fx_gguf_kv kv = {.key = "x.bytes", .type = FX_GGUF_STRING};
    kv.v.str = (struct fx_gguf_str){(const char *)bad_utf8, 4};
    assert_int_equal(fx_gguf_writer_set_kv(w, &kv, NULL), FX_OK);
    assert_int_equal(fx_gguf_writer_set_u64(w, "x.big", UINT64_MAX, NULL), FX_OK);
    assert_int_equal(fx_gguf_writer_set_f32(w, "x.nan", NAN, NULL), FX_OK);
    int32_t ids[40];
    for (int i = 0; i < 40; i++)
        ids[i] = i * 3;
    assert_int_equal(fx_gguf_writer_set_arr(w, "x.ids", FX_GGUF_INT32, ids, 40, NULL), FX_OK);
    static float data[64 * 4];
    assert_int_equal(
        fx_gguf_writer_add_tensor(w, "w.f32", FX_TYPE_F32, 2, (const int64_t[]){64, 4}, data, NULL),
        FX_OK);
    assert_int_equal(
        fx_gguf_writer_add_tensor(w, "w.q8", FX_TYPE_Q8_0, 2, (const int64_t[]){64, 2}, data, NULL),
        FX_OK);
    const char *path = fx_test_tmpfile("inspect.gguf");
    assert_int_equal(fx_gguf_writer_write(w, path, NULL, NULL, NULL), FX_OK);
    fx_gguf_writer_free(w);

    char *out = NULL;
    assert_int_equal(
        fx_test_run_cli((const char *const[]){"inspect", path, NULL}, NULL, &out, NULL), 0);
    assert_non_null(strstr(out, "GGUF version 3"));
    assert_non_null(strstr(out, "alignment     32"));
    assert_non_null(strstr(out, "\"ok\\xff\\n\""));
    assert_non_null(strstr(out, "18446744073709551615"));
    assert_non_null(strstr(out, "40 elements: [0, 3, 6, 9, 12, 15, 18, 21, ...]"));
    assert_non_null(strstr(out, "w.q8"));
    assert_non_null(strstr(out, "[64, 2]"));
    assert_non_null(strstr(out, "parameters    384"));
    assert_non_null(strstr(out, "Q8_0          1 tensors, 128 elements, 136 bytes"));
    free(out);

    assert_int_equal(
        fx_test_run_cli((const char *const[]){"inspect", "--json", path, NULL}, NULL, &out, NULL),
        0);
    json_t *doc = json_loads(out, 0, NULL);
    assert_non_null(doc); /* valid JSON even with invalid UTF-8, NaN and values above INT64_MAX */
    json_t *meta = json_object_get(doc, "metadata");
    assert_int_equal(json_array_size(meta), 5);
    assert_string_equal(json_string_value(json_object_get(json_array_get(meta, 1), "value")),
                        "ok\xef\xbf\xbd\n");
    assert_string_equal(json_string_value(json_object_get(json_array_get(meta, 2), "value")),
                        "18446744073709551615");
    json_t *ids_kv = json_array_get(meta, 4);
    assert_int_equal(json_integer_value(json_object_get(ids_kv, "length")), 40);
    assert_int_equal(json_array_size(json_object_get(ids_kv, "values")), 8);
    assert_true(json_is_true(json_object_get(ids_kv, "truncated")));
    json_t *t = json_array_get(json_object_get(doc, "tensors"), 1);
    assert_string_equal(json_string_value(json_object_get(t, "type")), "Q8_0");
    assert_int_equal(json_integer_value(json_object_get(t, "bytes")), 136);
    assert_int_equal(json_integer_value(json_object_get(t, "offset")), 1024);
    json_t *totals = json_object_get(doc, "totals");
    assert_int_equal(json_integer_value(json_object_get(totals, "parameters")), 384);
    assert_int_equal(json_integer_value(json_object_get(totals, "bytes")), 1024 + 136);
    json_decref(doc);
    free(out);
}
