/* gguf/ and `ferrox inspect` on the shared files: every .gguf under ../shared/models and
 * ../shared/fixtures is inspected through the command-line program and checked against what the
 * fixtures' manifests, README and PROVENANCE.md state; each is written back and re-read; and a
 * fixture cut short or with single bytes changed never crashes the reader. */
#include "fx_test.h"

#include <dirent.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "ferrox.h"

/* Runs `ferrox inspect --json path` and parses its output. */
static json_t *inspect_json(const char *path) {
    char *out = NULL, *err = NULL;
    int rc =
        fx_test_run_cli((const char *const[]){"inspect", "--json", path, NULL}, NULL, &out, &err);
    if (rc != 0)
        fail_msg("ferrox inspect --json %s: exit %d: %s", path, rc, err);
    json_error_t je;
    json_t *doc = json_loads(out, 0, &je);
    if (!doc)
        fail_msg("inspect output of %s is not JSON: %s", path, je.text);
    free(out), free(err);
    return doc;
}

static json_t *find_meta(json_t *doc, const char *key) {
    size_t i;
    json_t *kv;
    json_array_foreach(json_object_get(doc, "metadata"), i, kv) {
        if (strcmp(json_string_value(json_object_get(kv, "key")), key) == 0)
            return kv;
    }
    fail_msg("key '%s' missing", key);
    return NULL;
}

static void expect_str(json_t *doc, const char *key, const char *value) {
    json_t *kv = find_meta(doc, key);
    assert_string_equal(json_string_value(json_object_get(kv, "type")), "string");
    assert_string_equal(json_string_value(json_object_get(kv, "value")), value);
}

static void expect_int(json_t *doc, const char *key, json_int_t value) {
    json_t *v = json_object_get(find_meta(doc, key), "value");
    assert_true(json_is_integer(v));
    if (json_integer_value(v) != value)
        fail_msg("key '%s': %lld, expected %lld", key, (long long)json_integer_value(v),
                 (long long)value);
}

static void expect_array(json_t *doc, const char *key, const char *elem, json_int_t length) {
    json_t *kv = find_meta(doc, key);
    assert_string_equal(json_string_value(json_object_get(kv, "type")), "array");
    assert_string_equal(json_string_value(json_object_get(kv, "element_type")), elem);
    assert_int_equal(json_integer_value(json_object_get(kv, "length")), length);
}

static json_int_t geti(json_t *o, const char *k) {
    return json_integer_value(json_object_get(o, k));
}

/* The directory part of path, into buf. */
static const char *dir_of(const char *path, char buf[4096]) {
    const char *slash = strrchr(path, '/');
    snprintf(buf, 4096, "%.*s", slash ? (int)(slash - path) : 1, slash ? path : ".");
    return buf;
}

/* Every .gguf directly under dir (relative to the fixtures or models root). */
static int list_gguf(const char *dir, char names[][128], int max) {
    DIR *d = opendir(dir);
    if (!d)
        fail_msg("cannot list %s", dir);
    int n = 0;
    for (struct dirent *de; (de = readdir(d));) {
        size_t len = strlen(de->d_name);
        if (len > 5 && strcmp(de->d_name + len - 5, ".gguf") == 0) {
            assert_true(n < max);
            snprintf(names[n++], 128, "%.127s", de->d_name);
        }
    }
    closedir(d);
    return n;
}

/* fixtures/models/manifest.json: every tensor (name, type, shape in order), the parameter and
 * byte counts, the type histogram and every metadata value. */
FX_TEST(gguf_inspect_matches_models_manifest) {
    const char *mpath = fx_test_fixture("models/manifest.json");
    char dir[4096];
    dir_of(mpath, dir);
    json_error_t je;
    json_t *manifest = json_load_file(mpath, 0, &je);
    assert_non_null(manifest);
    json_t *models = json_object_get(manifest, "models");
    char files[64][128];
    int n_files = list_gguf(dir, files, 64);
    assert_int_equal(n_files, (int)json_object_size(models));
    for (int f = 0; f < n_files; f++) {
        json_t *m = json_object_get(models, files[f]);
        if (!m)
            fail_msg("%s is not in models/manifest.json", files[f]);
        char path[8400];
        snprintf(path, sizeof path, "%.4000s/%.127s", dir, files[f]);
        json_t *doc = inspect_json(path);
        assert_int_equal(geti(doc, "file_size"), geti(m, "bytes"));
        json_t *want = json_object_get(m, "tensors"), *got = json_object_get(doc, "tensors");
        assert_int_equal(json_array_size(got), json_array_size(want));
        for (size_t i = 0; i < json_array_size(want); i++) {
            json_t *w = json_array_get(want, i), *g = json_array_get(got, i);
            assert_string_equal(json_string_value(json_object_get(g, "name")),
                                json_string_value(json_array_get(w, 0)));
            assert_string_equal(json_string_value(json_object_get(g, "type")),
                                json_string_value(json_array_get(w, 1)));
            assert_true(json_equal(json_object_get(g, "shape"), json_array_get(w, 2)));
        }
        json_t *totals = json_object_get(doc, "totals");
        assert_int_equal(geti(totals, "parameters"), geti(m, "n_params"));
        const char *type;
        json_t *cnt;
        json_t *by_type = json_object_get(totals, "by_type");
        assert_int_equal(json_object_size(by_type),
                         json_object_size(json_object_get(m, "tensor_type_counts")));
        json_object_foreach(json_object_get(m, "tensor_type_counts"), type, cnt) {
            assert_int_equal(geti(json_object_get(by_type, type), "tensors"),
                             json_integer_value(cnt));
        }
        const char *key;
        json_t *value;
        json_object_foreach(json_object_get(m, "metadata"), key, value) {
            json_t *kv = find_meta(doc, key), *v = json_object_get(kv, "value");
            unsigned long long n;
            if (json_is_string(value) &&
                sscanf(json_string_value(value), "<array of %llu>", &n) == 1) {
                assert_string_equal(json_string_value(json_object_get(kv, "type")), "array");
                assert_int_equal(geti(kv, "length"), n);
            } else if (json_is_string(value)) {
                assert_string_equal(json_string_value(v), json_string_value(value));
            } else if (json_is_integer(value)) {
                assert_int_equal(json_integer_value(v), json_integer_value(value));
            } else if (json_is_real(value)) {
                /* The manifest holds the float32 value widened to double. */
                assert_true((float)json_real_value(v) == (float)json_real_value(value));
            } else if (json_is_boolean(value)) {
                assert_int_equal(json_is_true(v), json_is_true(value));
            } else {
                fail_msg("%s: unexpected manifest value for '%s'", files[f], key);
            }
        }
        json_decref(doc);
    }
    json_decref(manifest);
}

/* The four files of ../shared/models, as PROVENANCE.md describes them. */
FX_TEST(gguf_inspect_matches_models_provenance) {
    json_t *doc = inspect_json(fx_test_model("stories260K.gguf"));
    assert_int_equal(geti(doc, "version"), 3);
    assert_int_equal(geti(doc, "n_tensors"), 48);
    assert_int_equal(geti(doc, "n_kv"), 19);
    assert_int_equal(geti(doc, "data_offset"), 14176);
    assert_int_equal(geti(doc, "file_size"), 1185376);
    assert_int_equal(
        geti(json_object_get(json_object_get(json_object_get(doc, "totals"), "by_type"), "F32"),
             "tensors"),
        48);
    expect_str(doc, "general.architecture", "llama");
    expect_int(doc, "llama.embedding_length", 64);
    expect_int(doc, "llama.feed_forward_length", 172);
    expect_int(doc, "llama.block_count", 5);
    expect_int(doc, "llama.attention.head_count", 8);
    expect_int(doc, "llama.attention.head_count_kv", 4);
    expect_int(doc, "llama.rope.dimension_count", 8);
    expect_int(doc, "llama.context_length", 2048);
    expect_str(doc, "tokenizer.ggml.model", "llama");
    expect_array(doc, "tokenizer.ggml.tokens", "string", 512);
    expect_array(doc, "tokenizer.ggml.scores", "float32", 512);
    expect_int(doc, "tokenizer.ggml.bos_token_id", 1);
    expect_int(doc, "tokenizer.ggml.eos_token_id", 2);
    expect_int(doc, "tokenizer.ggml.unknown_token_id", 0);
    float eps = (float)json_real_value(
        json_object_get(find_meta(doc, "llama.attention.layer_norm_rms_epsilon"), "value"));
    assert_true(eps == 1e-5f);
    json_decref(doc);

    doc = inspect_json(fx_test_model("llama-2-tiny-random.gguf"));
    assert_int_equal(geti(doc, "n_tensors"), 12);
    assert_int_equal(geti(doc, "data_offset"), 724416);
    json_t *by_type = json_object_get(json_object_get(doc, "totals"), "by_type");
    assert_int_equal(geti(json_object_get(by_type, "F16"), "tensors"), 9);
    assert_int_equal(geti(json_object_get(by_type, "F32"), "tensors"), 3);
    expect_int(doc, "general.file_type", 1);
    expect_int(doc, "llama.embedding_length", 8);
    expect_int(doc, "llama.block_count", 1);
    expect_int(doc, "llama.feed_forward_length", 32);
    expect_int(doc, "llama.attention.head_count", 2);
    expect_int(doc, "llama.attention.head_count_kv", 2);
    expect_int(doc, "llama.rope.dimension_count", 4);
    expect_int(doc, "llama.context_length", 4096);
    expect_array(doc, "tokenizer.ggml.tokens", "string", 32000);
    json_decref(doc);

    doc = inspect_json(fx_test_model("ggml-vocab-llama-spm.gguf"));
    assert_int_equal(geti(doc, "n_tensors"), 0);
    assert_int_equal(geti(doc, "file_size"), 723869);
    expect_str(doc, "tokenizer.ggml.model", "llama");
    expect_str(doc, "tokenizer.ggml.pre", "default");
    expect_array(doc, "tokenizer.ggml.tokens", "string", 32000);
    assert_true(
        json_is_true(json_object_get(find_meta(doc, "tokenizer.ggml.add_bos_token"), "value")));
    assert_true(
        json_is_false(json_object_get(find_meta(doc, "tokenizer.ggml.add_eos_token"), "value")));
    json_decref(doc);

    doc = inspect_json(fx_test_model("ggml-vocab-gpt-2.gguf"));
    assert_int_equal(geti(doc, "n_tensors"), 0);
    expect_str(doc, "general.architecture", "gpt2");
    expect_str(doc, "tokenizer.ggml.model", "gpt2");
    expect_str(doc, "tokenizer.ggml.pre", "gpt-2");
    expect_array(doc, "tokenizer.ggml.tokens", "string", 50257);
    expect_array(doc, "tokenizer.ggml.merges", "string", 50000);
    expect_int(doc, "tokenizer.ggml.bos_token_id", 50256);
    expect_int(doc, "tokenizer.ggml.eos_token_id", 50256);
    json_decref(doc);

    /* Those are all the GGUF files there. */
    char names[16][128], dir[4096];
    assert_int_equal(list_gguf(dir_of(fx_test_model("PROVENANCE.md"), dir), names, 16), 4);
}

/* fixtures/tokenizer: the table of the fixtures README, section 5 (file bytes, model, pre and
 * vocabulary size), and every file listed in tokenizer/manifest.json. */
FX_TEST(gguf_inspect_matches_tokenizer_fixtures) {
    static const struct {
        const char *file;
        json_int_t bytes;
        const char *model, *pre;
        json_int_t n_tokens;
    } table[] = {
        {"ggml-vocab-bert-bge.gguf", 627549, "bert", "bert-bge", 30522},
        {"ggml-vocab-deepseek-coder.gguf", 1156067, "gpt2", "deepseek-coder", 32256},
        {"ggml-vocab-deepseek-llm.gguf", 3970167, "gpt2", "deepseek-llm", 102400},
        {"ggml-vocab-falcon.gguf", 2287728, "gpt2", "falcon", 65024},
        {"ggml-vocab-gpt-2-pre-llama3.gguf", 1766811, "gpt2", "llama-bpe", 50257},
        {"ggml-vocab-gpt-2-pre-qwen2.gguf", 1766807, "gpt2", "qwen2", 50257},
        {"ggml-vocab-gpt-2-pre-smollm.gguf", 1766808, "gpt2", "smollm", 50257},
        {"ggml-vocab-gpt-2.gguf", 1766807, "gpt2", "gpt-2", 50257},
        {"ggml-vocab-llama-spm.gguf", 723869, "llama", "default", 32000},
        {"ggml-vocab-mpt.gguf", 1771393, "gpt2", "mpt", 50432},
        {"ggml-vocab-phi-3.gguf", 726019, "llama", "default", 32064},
        {"ggml-vocab-refact.gguf", 1720710, "gpt2", "refact", 49216},
        {"ggml-vocab-starcoder.gguf", 1719346, "gpt2", "starcoder", 49152},
    };
    const size_t n = sizeof table / sizeof table[0];
    const char *mpath = fx_test_fixture("tokenizer/manifest.json");
    json_t *manifest = json_load_file(mpath, 0, NULL);
    assert_non_null(manifest);
    assert_int_equal(json_object_size(manifest), n);
    char dir[4096];
    dir_of(mpath, dir);
    char files[32][128];
    assert_int_equal(list_gguf(dir, files, 32), (int)n);
    for (size_t i = 0; i < n; i++) {
        assert_non_null(json_object_get(manifest, table[i].file));
        char path[8400];
        snprintf(path, sizeof path, "%.4000s/%.127s", dir, table[i].file);
        json_t *doc = inspect_json(path);
        assert_int_equal(geti(doc, "file_size"), table[i].bytes);
        assert_int_equal(geti(doc, "n_tensors"), 0);
        expect_str(doc, "tokenizer.ggml.model", table[i].model);
        expect_str(doc, "tokenizer.ggml.pre", table[i].pre);
        expect_array(doc, "tokenizer.ggml.tokens", "string", table[i].n_tokens);
        json_decref(doc);
    }
    json_decref(manifest);
}

/* ---- round trip ------------------------------------------------------------------------------ */

static uint64_t value_bytes(enum fx_gguf_type t) {
    static const uint8_t sizes[FX_GGUF_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return sizes[t];
}

static void assert_same_str(const struct fx_gguf_str *a, const struct fx_gguf_str *b) {
    assert_int_equal(a->len, b->len);
    assert_memory_equal(a->data, b->data, a->len + 1);
}

/* Every pair and every tensor of a equals b's, value for value and byte for byte. */
static void assert_same_contents(const struct fx_gguf *a, const struct fx_gguf *b) {
    assert_int_equal(fx_gguf_n_kv(a), fx_gguf_n_kv(b));
    for (int64_t i = 0; i < fx_gguf_n_kv(a); i++) {
        const struct fx_gguf_kv *x = fx_gguf_kv_at(a, i), *y = fx_gguf_kv_at(b, i);
        assert_string_equal(x->key, y->key);
        assert_int_equal(x->type, y->type);
        if (x->type == FX_GGUF_STRING) {
            assert_same_str(&x->v.str, &y->v.str);
        } else if (x->type != FX_GGUF_ARRAY) {
            assert_memory_equal(&x->v, &y->v, value_bytes(x->type));
        } else {
            assert_int_equal(x->arr_type, y->arr_type);
            assert_int_equal(x->arr_n, y->arr_n);
            if (x->arr_type == FX_GGUF_STRING) {
                for (uint64_t k = 0; k < x->arr_n; k++)
                    assert_same_str((const struct fx_gguf_str *)x->v.arr + k,
                                    (const struct fx_gguf_str *)y->v.arr + k);
            } else if (x->arr_n) {
                assert_memory_equal(x->v.arr, y->v.arr, x->arr_n * value_bytes(x->arr_type));
            }
        }
    }
    assert_int_equal(fx_gguf_n_tensors(a), fx_gguf_n_tensors(b));
    for (int64_t i = 0; i < fx_gguf_n_tensors(a); i++) {
        const struct fx_tensor_view *x = fx_gguf_tensor_at(a, i), *y = fx_gguf_tensor_at(b, i);
        assert_string_equal(x->name, y->name);
        assert_int_equal(x->type, y->type);
        assert_int_equal(x->n_dims, y->n_dims);
        assert_memory_equal(x->ne, y->ne, sizeof x->ne);
        assert_int_equal(x->n_bytes, y->n_bytes);
        assert_memory_equal(x->data, y->data, x->n_bytes);
    }
}

/* Writes g's pairs and tensors (borrowing the tensor data) to path. */
static void rewrite(const struct fx_gguf *g, const char *path) {
    struct fx_gguf_writer *w;
    struct fx_error e;
    assert_int_equal(fx_gguf_writer_create(&w, &e), FX_OK);
    for (int64_t i = 0; i < fx_gguf_n_kv(g); i++)
        if (fx_gguf_writer_set_kv(w, fx_gguf_kv_at(g, i), &e) != FX_OK)
            fail_msg("set_kv: %s", e.msg);
    for (int64_t i = 0; i < fx_gguf_n_tensors(g); i++) {
        const struct fx_tensor_view *t = fx_gguf_tensor_at(g, i);
        if (fx_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, &e) != FX_OK)
            fail_msg("add_tensor: %s", e.msg);
    }
    if (fx_gguf_writer_write(w, path, NULL, NULL, &e) != FX_OK)
        fail_msg("write: %s", e.msg);
    fx_gguf_writer_free(w);
}

static int round_trip_dir(const char *dir) {
    char files[64][128];
    int n = list_gguf(dir, files, 64), identical = 0;
    for (int f = 0; f < n; f++) {
        char src[8400];
        snprintf(src, sizeof src, "%.4000s/%.127s", dir, files[f]);
        struct fx_gguf *a, *b;
        struct fx_error e;
        if (fx_gguf_open(src, &a, &e) != FX_OK)
            fail_msg("%s: %s", src, e.msg);
        const char *dst = fx_test_tmpfile("round-trip.gguf");
        rewrite(a, dst);
        assert_int_equal(fx_gguf_open(dst, &b, &e), FX_OK);
        assert_same_contents(a, b);
        /* The layout is the standard one: a file laid out by gguf-py or llama.cpp comes back
         * identical down to the padding (so llama.cpp reads what ferrox writes). */
        size_t na, nb;
        char *x = fx_test_read_file(src, &na), *y = fx_test_read_file(dst, &nb);
        if (na != nb || memcmp(x, y, na) != 0)
            fail_msg("%s: contents equal, but the layout differs (%zu vs %zu bytes)", files[f], na,
                     nb);
        identical++;
        free(x), free(y);
        fx_gguf_free(a);
        fx_gguf_free(b);
    }
    print_message("  %s: %d of %d files identical after the round trip\n", dir, identical, n);
    return n;
}

FX_TEST(gguf_round_trip_every_fixture) {
    char dir[4096];
    assert_int_equal(round_trip_dir(dir_of(fx_test_fixture("models/manifest.json"), dir)), 27);
    assert_int_equal(round_trip_dir(dir_of(fx_test_fixture("tokenizer/manifest.json"), dir)), 13);
    assert_int_equal(round_trip_dir(dir_of(fx_test_model("PROVENANCE.md"), dir)), 4);
}

/* ---- truncation and mutation ----------------------------------------------------------------- */

/* Where the last tensor's bytes end: a prefix shorter than this must be rejected. */
static uint64_t end_of_data(const struct fx_gguf *g) {
    uint64_t end = 0;
    for (int64_t i = 0; i < fx_gguf_n_tensors(g); i++) {
        const struct fx_tensor_view *t = fx_gguf_tensor_at(g, i);
        uint64_t e = fx_gguf_data_offset(g) + t->offset + t->n_bytes;
        end = e > end ? e : end;
    }
    return end;
}

static void check_truncated(const char *data, size_t n, uint64_t end) {
    char *copy = malloc(n ? n : 1); /* exact size: ASan sees any read past it */
    memcpy(copy, data, n);
    struct fx_gguf *g;
    struct fx_error e;
    fx_status s = fx_gguf_open_memory(copy, n, &g, &e);
    if (n < end && s != FX_ERR_FORMAT)
        fail_msg("prefix of %zu bytes: %s %s", n, fx_status_name(s), e.msg);
    if (n >= end && s != FX_OK)
        fail_msg("prefix of %zu bytes (data ends at %" PRIu64 "): %s", n, end, e.msg);
    if (s == FX_OK)
        fx_gguf_free(g);
    free(copy);
}

FX_TEST(gguf_truncated_fixture_is_rejected) {
    size_t size;
    char *data = fx_test_read_file(fx_test_fixture("models/llama-tiny-tied.Q8_0.gguf"), &size);
    struct fx_gguf *g;
    assert_int_equal(fx_gguf_open_memory(data, size, &g, NULL), FX_OK);
    uint64_t end = end_of_data(g), header = fx_gguf_data_offset(g);
    fx_gguf_free(g);
    /* 256 evenly spaced cuts over the whole file, then every cut in the first 2 KiB and around
     * the start of the data section. */
    for (int i = 0; i <= 256; i++)
        check_truncated(data, (size_t)((uint64_t)size * (uint64_t)i / 256), end);
    for (size_t n = 0; n < 2048; n++)
        check_truncated(data, n, end);
    for (size_t n = header - 64; n < header + 64; n++)
        check_truncated(data, n, end);
    free(data);
}

/* Everything an open file hands out is consistent and inside its memory. Returns a checksum of
 * the bytes read, so that every byte is really touched. */
static uint64_t check_consistent(const struct fx_gguf *g, const char *base, size_t size) {
    uint64_t sum = 0;
    assert_true((fx_gguf_alignment(g) & (fx_gguf_alignment(g) - 1)) == 0);
    for (int64_t i = 0; i < fx_gguf_n_kv(g); i++) {
        const struct fx_gguf_kv *kv = fx_gguf_kv_at(g, i);
        assert_ptr_equal(fx_gguf_find_kv(g, kv->key), kv);
        assert_true((unsigned)kv->type < FX_GGUF_TYPE_COUNT);
        if (kv->type == FX_GGUF_STRING) {
            assert_int_equal(kv->v.str.data[kv->v.str.len], '\0');
            for (uint64_t k = 0; k < kv->v.str.len; k++)
                sum += (uint8_t)kv->v.str.data[k];
        } else if (kv->type == FX_GGUF_ARRAY) {
            assert_true(kv->arr_type != FX_GGUF_ARRAY &&
                        (unsigned)kv->arr_type < FX_GGUF_TYPE_COUNT);
            if (kv->arr_type == FX_GGUF_STRING) {
                const struct fx_gguf_str *s = kv->v.arr;
                for (uint64_t k = 0; k < kv->arr_n; k++) {
                    assert_int_equal(s[k].data[s[k].len], '\0');
                    sum += s[k].len ? (uint8_t)s[k].data[s[k].len - 1] : 0;
                }
            } else {
                uint64_t bytes = kv->arr_n * value_bytes(kv->arr_type);
                for (uint64_t k = 0; k < bytes; k++)
                    sum += ((const uint8_t *)kv->v.arr)[k];
            }
        }
    }
    uint64_t avail = size - fx_gguf_data_offset(g);
    for (int64_t i = 0; i < fx_gguf_n_tensors(g); i++) {
        const struct fx_tensor_view *t = fx_gguf_tensor_at(g, i);
        assert_ptr_equal(fx_gguf_find_tensor(g, t->name), t);
        assert_true(fx_type_is_valid(t->type) && t->n_dims <= 4);
        int64_t n = 1;
        for (int d = 0; d < 4; d++) {
            assert_true(t->ne[d] >= 1);
            n *= t->ne[d];
        }
        assert_int_equal(n, t->n_elements);
        uint64_t row;
        assert_true(fx_type_row_bytes(t->type, t->ne[0], &row));
        assert_int_equal(row * (uint64_t)(n / t->ne[0]), t->n_bytes);
        assert_int_equal(t->offset % fx_gguf_alignment(g), 0);
        assert_true(t->offset <= avail && t->n_bytes <= avail - t->offset);
        assert_ptr_equal(t->data, base + fx_gguf_data_offset(g) + t->offset);
        sum += ((const uint8_t *)t->data)[0] + ((const uint8_t *)t->data)[t->n_bytes - 1];
        for (int64_t j = 0; j < i; j++) {
            const struct fx_tensor_view *u = fx_gguf_tensor_at(g, j);
            assert_true(t->offset >= u->offset + u->n_bytes || u->offset >= t->offset + t->n_bytes);
        }
    }
    return sum;
}

FX_TEST(gguf_mutated_fixture_never_crashes) {
    size_t size;
    char *data = fx_test_read_file(fx_test_fixture("models/llama-tiny-tied.Q8_0.gguf"), &size);
    struct fx_gguf *g;
    assert_int_equal(fx_gguf_open_memory(data, size, &g, NULL), FX_OK);
    uint64_t header = fx_gguf_data_offset(g);
    fx_gguf_free(g);
    char *copy = malloc(size);
    struct fx_test_rng rng = {20240601};
    int accepted = 0, rejected = 0, rewritten = 0;
    for (int i = 0; i < 1000; i++) {
        memcpy(copy, data, size);
        /* Nine in ten mutations hit the metadata and tensor infos, where the parsing is. */
        uint64_t at = fx_test_rng_u64(&rng) % (i % 10 ? header : size);
        uint8_t old = (uint8_t)copy[at], v;
        do
            v = (uint8_t)fx_test_rng_u64(&rng);
        while (v == old);
        copy[at] = (char)v;
        struct fx_error e = {0};
        fx_status s = fx_gguf_open_memory(copy, size, &g, &e);
        if (s != FX_OK) {
            if (s != FX_ERR_FORMAT && s != FX_ERR_UNSUPPORTED)
                fail_msg("byte %" PRIu64 " = 0x%02x: %s %s", at, v, fx_status_name(s), e.msg);
            assert_true(e.msg[0] != '\0');
            assert_true(e.offset < size);
            rejected++;
            continue;
        }
        accepted++;
        check_consistent(g, copy, size);
        /* Now and then, what was accepted must also survive a round trip through the writer. */
        if (accepted % 25 == 1) {
            const char *path = fx_test_tmpfile("mutant.gguf");
            rewrite(g, path);
            struct fx_gguf *h;
            assert_int_equal(fx_gguf_open(path, &h, &e), FX_OK);
            assert_same_contents(g, h);
            fx_gguf_free(h);
            rewritten++;
        }
        fx_gguf_free(g);
    }
    print_message("  %d mutants rejected, %d accepted (%d rewritten)\n", rejected, accepted,
                  rewritten);
    assert_true(rejected > 100 && accepted > 100);
    free(copy);
    free(data);
}
