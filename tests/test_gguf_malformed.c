/* gguf/: hostile files. Every malformed case gets the specific error: its code, a message naming
 * the key or tensor and the offending value, and the byte offset where it was found. Files are
 * opened from an exact-size heap copy, so AddressSanitizer catches any read past the end. */
#include "fx_test.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "ferrox.h"
#include "gguf_bytes.h"

/* Opens bytes that must be rejected and checks the error. needle2 may be NULL. */
static void expect_reject(const void *data, size_t size, fx_status code, uint64_t offset,
                          const char *needle1, const char *needle2) {
    void *copy = malloc(size ? size : 1);
    assert_non_null(copy);
    memcpy(copy, data, size);
    struct fx_gguf *g = (struct fx_gguf *)1;
    struct fx_error e = {0};
    fx_status s = fx_gguf_open_memory(copy, size, &g, &e);
    if (s != code)
        fail_msg("expected %s, got %s: %s", fx_status_name(code), fx_status_name(s), e.msg);
    assert_null(g);
    assert_int_equal(e.code, code);
    if (e.offset != offset)
        fail_msg("expected offset %" PRIu64 ", got %" PRIu64 ": %s", offset, e.offset, e.msg);
    char at[40];
    snprintf(at, sizeof at, "at byte %" PRIu64, offset);
    if (!strstr(e.msg, at) || !strstr(e.msg, needle1) || (needle2 && !strstr(e.msg, needle2)))
        fail_msg("message lacks '%s' / '%s' / '%s': %s", at, needle1, needle2 ? needle2 : "",
                 e.msg);
    free(copy);
}

FX_TEST(gguf_small_valid_file_opens) {
    struct gb b;
    struct gb_layout l;
    gb_valid_file(&b, &l);
    struct fx_gguf *g;
    struct fx_error e;
    assert_int_equal(fx_gguf_open_memory(b.p, b.n, &g, &e), FX_OK);
    assert_int_equal(fx_gguf_n_tensors(g), 2);
    assert_int_equal(fx_gguf_data_offset(g), l.data_at);
    assert_int_equal(fx_gguf_find_tensor(g, "b")->offset, 64);
    fx_gguf_free(g);
    gb_free(&b);
}

/* One field of the small valid file patched to a bad value. */
struct patch {
    const char *what;
    size_t field; /* offsetof(struct gb_layout, ...) of the patched field */
    int width;    /* 4 or 8 */
    uint64_t value;
    fx_status code;
    const char *needle1, *needle2;
};

#define AT(f) offsetof(struct gb_layout, f)

static const struct patch patches[] = {
    {"huge metadata count", AT(n_kv_at), 8, UINT64_MAX, FX_ERR_FORMAT,
     "metadata count 18446744073709551615", "cannot fit"},
    {"huge tensor count", AT(n_tensors_at), 8, 1ull << 40, FX_ERR_FORMAT,
     "tensor count 1099511627776", "cannot fit"},
    {"huge key length", AT(key0_len_at), 8, 1ull << 62, FX_ERR_FORMAT, "metadata pair #0",
     "key length 4611686018427387904 exceeds"},
    {"empty key", AT(key0_len_at), 8, 0, FX_ERR_FORMAT, "pair #0", "empty key"},
    {"unknown value type", AT(value0_type_at), 4, 13, FX_ERR_FORMAT, "key 'general.architecture'",
     "unknown value type 13"},
    {"unknown array element type", AT(arr_type_at), 4, 0x7fffffff, FX_ERR_FORMAT,
     "key 'tokenizer.ggml.tokens'", "unknown array element type 2147483647"},
    {"nested arrays", AT(arr_type_at), 4, 9, FX_ERR_UNSUPPORTED, "key 'tokenizer.ggml.tokens'",
     "arrays of arrays"},
    {"huge string array count", AT(arr_n_at), 8, UINT64_MAX / 2, FX_ERR_FORMAT,
     "key 'tokenizer.ggml.tokens'", "array of 9223372036854775807 strings cannot fit"},
    {"huge element length", AT(arr_elem1_len_at), 8, UINT64_MAX, FX_ERR_FORMAT,
     "key 'tokenizer.ggml.tokens'", "element 1 length 18446744073709551615 exceeds"},
    {"tensor name too long", AT(t0_name_len_at), 8, 64, FX_ERR_FORMAT, "tensor info #0",
     "exceeds the limit of 63"},
    {"too many dims", AT(t0_ndims_at), 4, 5, FX_ERR_FORMAT, "tensor 'a'", "n_dims 5 exceeds 4"},
    {"zero dim", AT(t0_ne1_at), 8, 0, FX_ERR_FORMAT, "tensor 'a'", "dimension 1 is 0"},
    {"dim above INT64_MAX", AT(t0_ne0_at), 8, 1ull << 63, FX_ERR_FORMAT, "tensor 'a'",
     "dimension 0 is 9223372036854775808"},
    {"removed tensor type", AT(t0_type_at), 4, 4, FX_ERR_FORMAT, "tensor 'a'",
     "unknown tensor type 4"},
    {"tensor type past the table", AT(t0_type_at), 4, 40, FX_ERR_FORMAT, "tensor 'a'",
     "unknown tensor type 40"},
    {"negative tensor type", AT(t0_type_at), 4, UINT32_MAX, FX_ERR_FORMAT, "tensor 'a'",
     "unknown tensor type 4294967295"},
    {"misaligned offset", AT(t0_offset_at), 8, 4, FX_ERR_FORMAT, "tensor 'a'",
     "data offset 4 is not a multiple of the alignment 32"},
    {"data past the end", AT(t1_offset_at), 8, 96, FX_ERR_FORMAT, "tensor 'b'",
     "16 bytes at data offset 96 run past the end of the file"},
    {"offset near UINT64_MAX", AT(t1_offset_at), 8, UINT64_MAX - 31, FX_ERR_FORMAT, "tensor 'b'",
     "run past the end"},
    {"overlapping tensors", AT(t1_offset_at), 8, 32, FX_ERR_FORMAT, "tensor 'b'",
     "data offset 32 overlaps tensor 'a' at [0, 64)"},
};

FX_TEST(gguf_rejects_each_patched_field) {
    for (size_t i = 0; i < sizeof patches / sizeof patches[0]; i++) {
        const struct patch *p = &patches[i];
        struct gb b;
        struct gb_layout l;
        gb_valid_file(&b, &l);
        size_t at;
        memcpy(&at, (const char *)&l + p->field, sizeof at);
        if (p->width == 4)
            gb_put_u32(&b, at, (uint32_t)p->value);
        else
            gb_put_u64(&b, at, p->value);
        print_message("  %s\n", p->what);
        expect_reject(b.p, b.n, p->code, at, p->needle1, p->needle2);
        gb_free(&b);
    }
}

FX_TEST(gguf_rejects_bad_header) {
    struct gb b;
    struct gb_layout l;
    gb_valid_file(&b, &l);
    memcpy(b.p, "GGML", 4);
    expect_reject(b.p, b.n, FX_ERR_FORMAT, 0, "bad magic 0x47474d4c", "expected \"GGUF\"");
    memcpy(b.p, "GGUF", 4);
    gb_put_u32(&b, 4, 1);
    expect_reject(b.p, b.n, FX_ERR_UNSUPPORTED, 4, "version 1 is not supported", NULL);
    gb_put_u32(&b, 4, 4);
    expect_reject(b.p, b.n, FX_ERR_FORMAT, 4, "unknown GGUF version 4", NULL);
    gb_put_u32(&b, 4, 0);
    expect_reject(b.p, b.n, FX_ERR_FORMAT, 4, "unknown GGUF version 0", NULL);
    gb_put_u32(&b, 4, 0x03000000);
    expect_reject(b.p, b.n, FX_ERR_UNSUPPORTED, 4, "big-endian", NULL);
    expect_reject(b.p, 3, FX_ERR_FORMAT, 0, "3 bytes, too short", NULL);
    gb_put_u32(&b, 4, 3);
    expect_reject(b.p, 20, FX_ERR_FORMAT, 16, "truncated: metadata count needs 8 bytes", NULL);
    /* Version 2 has the same layout and is read. */
    gb_put_u32(&b, 4, 2);
    struct fx_gguf *g;
    assert_int_equal(fx_gguf_open_memory(b.p, b.n, &g, NULL), FX_OK);
    assert_int_equal(fx_gguf_version(g), 2);
    fx_gguf_free(g);
    gb_free(&b);
}

/* Every prefix of a valid file that cuts into its header or its tensor data is rejected. */
FX_TEST(gguf_rejects_truncation_at_every_byte) {
    struct gb b;
    struct gb_layout l;
    gb_valid_file(&b, &l);
    size_t end_of_data = l.data_at + 64 + 16;
    for (size_t n = 0; n < end_of_data; n++) {
        void *copy = malloc(n ? n : 1);
        memcpy(copy, b.p, n);
        struct fx_gguf *g;
        struct fx_error e;
        fx_status s = fx_gguf_open_memory(copy, n, &g, &e);
        if (s != FX_ERR_FORMAT)
            fail_msg("prefix of %zu bytes: %s", n, fx_status_name(s));
        assert_true(e.offset <= n || n < l.data_at);
        free(copy);
    }
    /* The trailing padding after the last tensor is optional. */
    struct fx_gguf *g;
    assert_int_equal(fx_gguf_open_memory(b.p, end_of_data, &g, NULL), FX_OK);
    fx_gguf_free(g);
    gb_free(&b);
}

static void build_one_kv(struct gb *b, const char *key, uint32_t type, const void *value,
                         size_t value_size) {
    *b = (struct gb){0};
    gb_header(b, 3, 0, 1);
    gb_str(b, key);
    gb_u32(b, type);
    gb_bytes(b, value, value_size);
}

FX_TEST(gguf_rejects_bad_values) {
    struct gb b;
    /* A bool must be 0 or 1, alone or in an array. */
    build_one_kv(&b, "x.flag", 7, "\x02", 1);
    expect_reject(b.p, b.n, FX_ERR_FORMAT, 24 + 8 + 6 + 4, "key 'x.flag'", "bool value 2");
    gb_free(&b);
    build_one_kv(&b, "x.flags", 9, "\x07\0\0\0\x03\0\0\0\0\0\0\0\x01\x00\x05", 15);
    expect_reject(b.p, b.n, FX_ERR_FORMAT, 24 + 8 + 7 + 4 + 12 + 2, "key 'x.flags'",
                  "bool element 2 is 5");
    gb_free(&b);
    /* A numeric array whose byte size overflows: 2^62 uint32 values. */
    build_one_kv(&b, "x.ids", 9, "\x04\0\0\0\0\0\0\0\0\0\0\x40", 12);
    expect_reject(b.p, b.n, FX_ERR_FORMAT, 24 + 8 + 5 + 4 + 4, "key 'x.ids'",
                  "array of 4611686018427387904 uint32 values cannot fit");
    gb_free(&b);
    /* A string value longer than the file. */
    build_one_kv(&b, "x.name", 8, "\xff\xff\xff\xff\0\0\0\0abc", 11);
    expect_reject(b.p, b.n, FX_ERR_FORMAT, 24 + 8 + 6 + 4, "key 'x.name'",
                  "string value length 4294967295 exceeds the 3 bytes left");
    gb_free(&b);
    /* A key with a NUL inside cannot be looked up as a C string. */
    b = (struct gb){0};
    gb_header(&b, 3, 0, 1);
    gb_u64(&b, 3);
    gb_bytes(&b, "a\0b", 3);
    gb_u32(&b, 4);
    gb_u32(&b, 1);
    expect_reject(b.p, b.n, FX_ERR_FORMAT, 24, "pair #0", "contains a NUL byte");
    gb_free(&b);
    /* The specification's key limit is 65535 bytes. */
    char *key = malloc(65537);
    memset(key, 'k', 65536);
    key[65536] = '\0';
    b = (struct gb){0};
    gb_header(&b, 3, 0, 1);
    gb_kv_u32(&b, key, 1);
    expect_reject(b.p, b.n, FX_ERR_FORMAT, 24, "pair #0", "key length 65536 exceeds the limit");
    free(key);
    gb_free(&b);
}

FX_TEST(gguf_rejects_duplicates) {
    struct gb b = {0};
    gb_header(&b, 3, 0, 3);
    gb_kv_u32(&b, "a.b", 1);
    gb_kv_u32(&b, "c", 2);
    size_t second = b.n;
    gb_kv_str(&b, "a.b", "again");
    expect_reject(b.p, b.n, FX_ERR_FORMAT, second, "key 'a.b'",
                  "duplicate key (first defined by pair #0 at byte 24)");
    gb_free(&b);

    b = (struct gb){0};
    gb_header(&b, 3, 2, 0);
    gb_tensor(&b, "w", 1, (const uint64_t[]){8}, 0, 0);
    second = b.n;
    gb_tensor(&b, "w", 1, (const uint64_t[]){8}, 0, 32);
    gb_data(&b, 32, 64);
    expect_reject(b.p, b.n, FX_ERR_FORMAT, second, "tensor 'w'",
                  "duplicate tensor name (first defined by tensor #0 at byte 24)");
    gb_free(&b);
}

FX_TEST(gguf_rejects_bad_alignment) {
    static const struct {
        uint32_t value;
        const char *needle;
    } cases[] = {{0, "alignment 0 is not a power of two"},
                 {3, "alignment 3 is not"},
                 {48, "alignment 48 is not"}};
    for (size_t i = 0; i < 3; i++) {
        struct gb b = {0};
        gb_header(&b, 3, 0, 2);
        gb_kv_str(&b, "general.name", "m");
        size_t at = b.n;
        gb_kv_u32(&b, "general.alignment", cases[i].value);
        expect_reject(b.p, b.n, FX_ERR_FORMAT, at, "key 'general.alignment'", cases[i].needle);
        gb_free(&b);
    }
    struct gb b = {0};
    gb_header(&b, 3, 0, 1);
    gb_kv_str(&b, "general.alignment", "32");
    expect_reject(b.p, b.n, FX_ERR_FORMAT, 24, "key 'general.alignment'",
                  "has type string, expected uint32");
    gb_free(&b);
    /* A valid custom alignment places the data section and is checked on offsets. */
    b = (struct gb){0};
    gb_header(&b, 3, 1, 1);
    gb_kv_u32(&b, "general.alignment", 64);
    size_t off_at = b.n + 8 + 1 + 4 + 8 + 4;
    gb_tensor(&b, "t", 1, (const uint64_t[]){4}, 0, 32);
    gb_data(&b, 64, 64);
    expect_reject(b.p, b.n, FX_ERR_FORMAT, off_at, "tensor 't'",
                  "data offset 32 is not a multiple of the alignment 64");
    gb_free(&b);
}

FX_TEST(gguf_rejects_size_overflows_and_bad_rows) {
    struct gb b = {0};
    /* 2^32 x 2^32 elements overflow int64. */
    gb_header(&b, 3, 1, 0);
    gb_tensor(&b, "big", 2, (const uint64_t[]){1ull << 32, 1ull << 32}, 0, 0);
    expect_reject(b.p, b.n, FX_ERR_FORMAT, 24 + 8 + 3, "tensor 'big'",
                  "element count of [4294967296, 4294967296, 1, 1] overflows");
    gb_free(&b);
    /* A Q4_0 row must be whole 32-element blocks. */
    b = (struct gb){0};
    gb_header(&b, 3, 1, 0);
    gb_tensor(&b, "q", 2, (const uint64_t[]){31, 2}, 2, 0);
    gb_data(&b, 32, 64);
    expect_reject(b.p, b.n, FX_ERR_FORMAT, 24 + 8 + 1 + 4, "tensor 'q'",
                  "row length 31 is not a multiple of the Q4_0 block size 32");
    gb_free(&b);
}

/* Found by fuzz/fuzz_gguf.c: a file that ends inside the padding before its data section was
 * rejected with an error offset past the end of the file. The offset is now where the file's
 * tensor infos end. */
FX_TEST(gguf_rejects_file_ending_before_its_data_section) {
    struct gb b = {0};
    gb_header(&b, 3, 1, 0);
    gb_tensor(&b, "t", 1, (const uint64_t[]){4}, 0, 0);
    expect_reject(b.p, b.n, FX_ERR_FORMAT, 57,
                  "the data section would start at byte 64, past the end of the file (57 bytes)",
                  NULL);
    gb_free(&b);
}

/* ---- known parser vulnerabilities of other engines, each rebuilt here ------------------------ */

/* CVE-2024-23496 (Cisco Talos, llama.cpp commit 18c2e17, February 2024): gguf_fread_str read a
 * u64 string length n from the file, allocated n + 1 bytes and then read n bytes into it. With
 * n = 2^64 - 1 the allocation size wrapped to 0 and the read overflowed the heap. Here the same
 * length is refused against the bytes that remain, for a key, a string value and an element of a
 * string array, before anything is allocated. */
FX_TEST(gguf_cve_2024_23496_string_length_wraps) {
    struct gb b;
    struct gb_layout l;
    gb_valid_file(&b, &l);
    gb_put_u64(&b, l.key0_len_at, UINT64_MAX);
    expect_reject(b.p, b.n, FX_ERR_FORMAT, l.key0_len_at, "key length 18446744073709551615",
                  "exceeds");
    gb_free(&b);
    gb_valid_file(&b, &l);
    gb_put_u64(&b, l.value0_type_at + 4, UINT64_MAX);
    expect_reject(b.p, b.n, FX_ERR_FORMAT, l.value0_type_at + 4, "key 'general.architecture'",
                  "string value length 18446744073709551615 exceeds");
    gb_free(&b);
    gb_valid_file(&b, &l);
    gb_put_u64(&b, l.arr_elem1_len_at, UINT64_MAX);
    expect_reject(b.p, b.n, FX_ERR_FORMAT, l.arr_elem1_len_at, "key 'tokenizer.ggml.tokens'",
                  "element 1 length 18446744073709551615");
    gb_free(&b);
}

/* CVE-2025-53630 (llama.cpp, fixed July 2025): gguf_init_from_file_impl summed the padded byte
 * sizes of all tensors into a size_t without an overflow check; tensors whose sizes add up past
 * 2^64 wrapped the total, the context was allocated far too small, and reading the tensor data
 * wrote past it. Here four I8 tensors of 2^62 bytes each (2^64 in all) are described; each one is
 * checked against the bytes the file really has, so the first is refused. */
FX_TEST(gguf_cve_2025_53630_total_size_wraps) {
    struct gb b = {0};
    gb_header(&b, 3, 4, 0);
    size_t first_offset = 0;
    for (uint64_t i = 0; i < 4; i++) {
        char name[8];
        snprintf(name, sizeof name, "t%" PRIu64, i);
        gb_tensor(&b, name, 1, (const uint64_t[]){1ull << 62}, 24 /* I8 */, i << 62);
        if (i == 0)
            first_offset = b.n - 8;
    }
    gb_data(&b, 32, 64);
    expect_reject(b.p, b.n, FX_ERR_FORMAT, first_offset, "tensor 't0'",
                  "4611686018427387904 bytes at data offset 0 run past the end of the file");
    gb_free(&b);
}

/* CVE-2026-27940 (llama.cpp GHSA-3p4r-fq3f-q74v, fixed in b8146), the bypass of the fix above:
 * the running sum was now checked, but the context size computed from it, n_tensors times the
 * per-tensor overhead plus the data size, was not; a data size just below 2^64 wrapped that sum
 * to a small allocation and fread wrote 528+ bytes past it. Here one tensor claims 2^64 - 64
 * bytes: no size derived from it is ever added to anything or allocated; it is compared with the
 * file, and refused. */
FX_TEST(gguf_cve_2026_27940_context_size_wraps) {
    struct gb b = {0};
    gb_header(&b, 3, 2, 0);
    gb_tensor(&b, "small", 1, (const uint64_t[]){8}, 0, 0);
    /* I8 with 2^63 - 64 elements: the largest aligned size whose element count fits int64. */
    gb_tensor(&b, "huge", 1, (const uint64_t[]){(1ull << 63) - 64}, 24, 32);
    size_t huge_offset = b.n - 8;
    gb_data(&b, 32, 64);
    expect_reject(b.p, b.n, FX_ERR_FORMAT, huge_offset, "tensor 'huge'",
                  "9223372036854775744 bytes at data offset 32 run past the end");
    gb_free(&b);
}

/* CVE-2026-33298 (llama.cpp GHSA-96jg-mvhq-q7q7, fixed in b7824): ggml_nbytes multiplied a
 * valid element count by the type size without an overflow check, so a tensor of exabytes got a
 * byte size of a few bytes (F32 with ne0 = 2^62: 4 * 2^62 wraps to 0) and the undersized buffer
 * overflowed; ggml_row_size also multiplied the block size in before dividing, so quantized
 * types wrapped too. Here the byte size is computed per block with checked arithmetic: where it
 * overflows that is the error, and where it does not (quantized types cannot exceed 2^64 bytes
 * with an int64 element count) the exact size is compared with the file and refused. */
FX_TEST(gguf_cve_2026_33298_tensor_bytes_wrap) {
    static const struct {
        uint32_t type;
        uint64_t ne0, ne1;
        uint64_t offset;
        const char *needle;
    } cases[] = {
        {0, 1ull << 62, 1, 33, "byte size of 4611686018427387904 F32 elements overflows"},
        {0, 1ull << 31, 1ull << 31, 33, "byte size of 4611686018427387904 F32 elements overflows"},
        {28, 1ull << 61, 1, 33, "byte size of 2305843009213693952 F64 elements overflows"},
        {8, 1ull << 62, 1, 57, "4899916394579099648 bytes at data offset 0 run past the end"},
        {12, 1ull << 61, 2, 57, "2594073385365405696 bytes at data offset 0 run past the end"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct gb b = {0};
        gb_header(&b, 3, 1, 0);
        gb_tensor(&b, "w", 2, (const uint64_t[]){cases[i].ne0, cases[i].ne1}, cases[i].type, 0);
        gb_data(&b, 32, 64);
        expect_reject(b.p, b.n, FX_ERR_FORMAT, cases[i].offset, "tensor 'w'", cases[i].needle);
        gb_free(&b);
    }
}

/* CVE-2025-49847 (llama.cpp GHSA-8wwf-w4qm-gpqr, fixed in b5662): the vocabulary loader kept a
 * token's text length, which comes from the file, in a 32-bit int; a token longer than
 * INT32_MAX became negative, passed the buffer-size check in token_to_piece and overflowed the
 * caller's buffer. Here a token in tokenizer.ggml.tokens that claims 2^31 + 8 bytes is refused
 * against the file, and the lengths handed out are 64-bit. */
FX_TEST(gguf_cve_2025_49847_vocabulary_token_length) {
    struct gb b = {0};
    gb_header(&b, 3, 0, 2);
    gb_kv_str(&b, "tokenizer.ggml.model", "llama");
    gb_str(&b, "tokenizer.ggml.tokens");
    gb_u32(&b, 9);
    gb_u32(&b, 8);
    gb_u64(&b, 2);
    gb_str(&b, "a");
    size_t at = b.n;
    gb_u64(&b, (1ull << 31) + 8);
    gb_bytes(&b, "short", 5);
    expect_reject(b.p, b.n, FX_ERR_FORMAT, at, "key 'tokenizer.ggml.tokens'",
                  "element 1 length 2147483656 exceeds the 5 bytes left");
    gb_free(&b);
}

/* ---- the fuzzer's seed corpus -----------------------------------------------------------------
 */

static int n_seeds;

/* Writes one seed into the corpus directory, after checking that the reader's verdict on it is
 * the expected one (a corpus of mislabelled seeds would fuzz the wrong paths). */
static void seed(const char *dir, const void *p, size_t n, bool valid) {
    struct fx_gguf *g;
    fx_status s = fx_gguf_open_memory(p, n, &g, NULL);
    assert_int_equal(s == FX_OK, valid);
    if (s == FX_OK)
        fx_gguf_free(g);
    char path[4200];
    snprintf(path, sizeof path, "%.4000s/seed-%03d.gguf", dir, n_seeds++);
    fx_test_write_file(path, p, n);
}

/* Small files of every kind the reader meets, valid and malformed, for fuzz/fuzz_gguf.c:
 * `make fuzz-corpus` runs this test with FX_GGUF_CORPUS=fuzz/corpus-gguf. Without it the seeds go
 * to the test's scratch directory and are only checked. */
FX_TEST(gguf_fuzz_seed_corpus) {
    const char *dir = getenv("FX_GGUF_CORPUS");
    if (!dir || !*dir)
        dir = fx_test_tmpdir();
    struct gb b;
    struct gb_layout l;
    gb_valid_file(&b, &l);
    seed(dir, b.p, b.n, true);
    for (size_t i = 0; i < sizeof patches / sizeof patches[0]; i++) {
        struct gb v;
        gb_valid_file(&v, &l);
        size_t at;
        memcpy(&at, (const char *)&l + patches[i].field, sizeof at);
        if (patches[i].width == 4)
            gb_put_u32(&v, at, (uint32_t)patches[i].value);
        else
            gb_put_u64(&v, at, patches[i].value);
        seed(dir, v.p, v.n, false);
        gb_free(&v);
    }
    gb_put_u32(&b, 4, 2); /* version 2 */
    seed(dir, b.p, b.n, true);
    gb_free(&b);

    /* Every value type, and tensors of plain, k-quant and MXFP4 types. */
    struct fx_gguf_writer *w;
    assert_int_equal(fx_gguf_writer_create(&w, NULL), FX_OK);
    static const uint8_t bytes[64 * 17];
    for (int t = 0; t < FX_GGUF_TYPE_COUNT; t++) {
        char key[32];
        snprintf(key, sizeof key, "k.%s", fx_gguf_type_name((enum fx_gguf_type)t));
        struct fx_gguf_kv kv = {.key = key, .type = (enum fx_gguf_type)t};
        if (t == FX_GGUF_STRING)
            kv.v.str = (struct fx_gguf_str){"value", 5};
        if (t == FX_GGUF_ARRAY) {
            static const char *const strs[] = {"a", "bc", ""};
            assert_int_equal(fx_gguf_writer_set_str_arr(w, key, strs, 3, NULL), FX_OK);
            continue;
        }
        assert_int_equal(fx_gguf_writer_set_kv(w, &kv, NULL), FX_OK);
    }
    assert_int_equal(fx_gguf_writer_set_arr(w, "k.f32s", FX_GGUF_FLOAT32, bytes, 4, NULL), FX_OK);
    assert_int_equal(fx_gguf_writer_set_arr(w, "k.bools", FX_GGUF_BOOL, bytes, 4, NULL), FX_OK);
    static const struct {
        const char *name;
        enum fx_type type;
        int64_t ne0, ne1;
    } tensors[] = {{"f32", FX_TYPE_F32, 8, 2},     {"f16", FX_TYPE_F16, 16, 1},
                   {"q4_0", FX_TYPE_Q4_0, 32, 2},  {"q8_0", FX_TYPE_Q8_0, 64, 1},
                   {"q4_k", FX_TYPE_Q4_K, 256, 1}, {"mxfp4", FX_TYPE_MXFP4, 64, 1}};
    for (size_t i = 0; i < sizeof tensors / sizeof tensors[0]; i++)
        assert_int_equal(fx_gguf_writer_add_tensor(
                             w, tensors[i].name, tensors[i].type, 2,
                             (const int64_t[]){tensors[i].ne0, tensors[i].ne1}, bytes, NULL),
                         FX_OK);
    const char *path = fx_test_tmpfile("seed-types.gguf");
    assert_int_equal(fx_gguf_writer_write(w, path, NULL, NULL, NULL), FX_OK);
    assert_int_equal(fx_gguf_writer_set_alignment(w, 64, NULL), FX_OK);
    const char *path64 = fx_test_tmpfile("seed-types-64.gguf");
    assert_int_equal(fx_gguf_writer_write(w, path64, NULL, NULL, NULL), FX_OK);
    fx_gguf_writer_free(w);
    const char *written[] = {path, path64};
    for (int i = 0; i < 2; i++) {
        size_t n;
        char *data = fx_test_read_file(written[i], &n);
        seed(dir, data, n, true);
        seed(dir, data, n / 2, false);
        free(data);
    }
    assert_true(n_seeds > 25);
}
