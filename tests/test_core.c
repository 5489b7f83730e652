/* core/: type traits, checked arithmetic, errors, allocation. */
#include "fx_test.h"

#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/checked.h"
#include "core/cpu.h"
#include "core/error.h"
#include "ferrox.h"

FX_TEST(core_type_traits_match_ggml) {
    /* Block sizes as GGUF files use them (ggml's type traits). */
    static const struct {
        enum fx_type t;
        int64_t elems, bytes;
    } expect[] = {
        {FX_TYPE_F32, 1, 4},        {FX_TYPE_F16, 1, 2},      {FX_TYPE_BF16, 1, 2},
        {FX_TYPE_Q4_0, 32, 18},     {FX_TYPE_Q4_1, 32, 20},   {FX_TYPE_Q5_0, 32, 22},
        {FX_TYPE_Q5_1, 32, 24},     {FX_TYPE_Q8_0, 32, 34},   {FX_TYPE_Q8_1, 32, 36},
        {FX_TYPE_Q2_K, 256, 84},    {FX_TYPE_Q3_K, 256, 110}, {FX_TYPE_Q4_K, 256, 144},
        {FX_TYPE_Q5_K, 256, 176},   {FX_TYPE_Q6_K, 256, 210}, {FX_TYPE_Q8_K, 256, 292},
        {FX_TYPE_MXFP4, 32, 17},    {FX_TYPE_IQ4_NL, 32, 18}, {FX_TYPE_IQ4_XS, 256, 136},
        {FX_TYPE_IQ2_XXS, 256, 66}, {FX_TYPE_TQ2_0, 256, 66}, {FX_TYPE_I64, 1, 8},
    };
    for (size_t i = 0; i < sizeof expect / sizeof expect[0]; i++) {
        assert_true(fx_type_is_valid(expect[i].t));
        assert_int_equal(fx_type_block_elems(expect[i].t), expect[i].elems);
        assert_int_equal(fx_type_block_bytes(expect[i].t), expect[i].bytes);
    }
    /* Ids that ggml removed are not types. */
    assert_false(fx_type_is_valid(4));
    assert_false(fx_type_is_valid(31));
    assert_false(fx_type_is_valid(FX_TYPE_COUNT));
    assert_string_equal(fx_type_name(FX_TYPE_Q4_K), "Q4_K");
    assert_string_equal(fx_type_name((enum fx_type)4), "?");
}

FX_TEST(core_type_names_round_trip) {
    for (uint32_t t = 0; t < FX_TYPE_COUNT; t++) {
        if (!fx_type_is_valid(t))
            continue;
        enum fx_type back;
        assert_true(fx_type_from_name(fx_type_name((enum fx_type)t), &back));
        assert_int_equal(back, t);
    }
    enum fx_type t;
    assert_true(fx_type_from_name("q8_0", &t));
    assert_int_equal(t, FX_TYPE_Q8_0);
    assert_false(fx_type_from_name("q9_9", &t));
}

FX_TEST(core_row_bytes_checks_blocks_and_overflow) {
    uint64_t b;
    assert_true(fx_type_row_bytes(FX_TYPE_Q4_K, 512, &b));
    assert_int_equal(b, 288);
    assert_false(fx_type_row_bytes(FX_TYPE_Q4_K, 100, &b)); /* not whole blocks */
    assert_false(fx_type_row_bytes(FX_TYPE_F32, -1, &b));
    assert_false(fx_type_row_bytes(FX_TYPE_F64, INT64_MAX, &b)); /* 8 * INT64_MAX overflows */
    assert_false(fx_type_row_bytes((enum fx_type)5, 32, &b));
}

FX_TEST(core_checked_arithmetic) {
    uint64_t r;
    assert_false(fx_add_overflow_u64(1, 2, &r));
    assert_int_equal(r, 3);
    assert_true(fx_add_overflow_u64(UINT64_MAX, 1, &r));
    assert_true(fx_mul_overflow_u64(UINT64_MAX / 2 + 1, 2, &r));
    assert_false(fx_align_up_u64(33, 32, &r));
    assert_int_equal(r, 64);
    assert_true(fx_align_up_u64(UINT64_MAX - 3, 32, &r));
    assert_true(fx_is_pow2_u64(64));
    assert_false(fx_is_pow2_u64(0));
    assert_false(fx_is_pow2_u64(48));
}

FX_TEST(core_error_set_and_prefix) {
    struct fx_error e;
    assert_int_equal(fx_error_set(&e, FX_ERR_FORMAT, 42, "key '%s' bad", "x"), FX_ERR_FORMAT);
    assert_int_equal(e.code, FX_ERR_FORMAT);
    assert_int_equal(e.offset, 42);
    assert_string_equal(e.msg, "key 'x' bad");
    fx_error_prefix(&e, "loading %s", "m.gguf");
    assert_string_equal(e.msg, "loading m.gguf: key 'x' bad");
    assert_int_equal(fx_error_set(NULL, FX_ERR_IO, 0, "ignored"), FX_ERR_IO);
    fx_error_clear(&e);
    assert_int_equal(e.code, FX_OK);
    assert_string_equal(fx_status_name(FX_ERR_CAPACITY), "FX_ERR_CAPACITY");
}

FX_TEST(core_cpu_count_is_positive) {
    assert_true(fx_cpu_count() >= 1);
    const struct fx_cpu_features *f = fx_cpu_features();
    /* AVX-512 implies AVX2 on every CPU that has it. */
    if (f->avx512f)
        assert_true(f->avx2);
}

FX_TEST(core_alloc_streamed_aligns_holds_every_byte_and_zeroes) {
    /* Below a huge page, across it, and a size of no whole pages. */
    const uint64_t sizes[] = {1, 100, (2u << 20) - 1, 2u << 20, (5u << 20) + 3};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        uint64_t n = sizes[i];
        uint8_t *p = fx_alloc_streamed(n);
        assert_non_null(p);
        assert_int_equal((uintptr_t)p % 64, 0);
        if (n >= 2u << 20)
            assert_int_equal((uintptr_t)p % (2u << 20), 0);
        for (uint64_t j = 0; j < n; j++)
            p[j] = (uint8_t)(j * 7 + i);
        for (uint64_t j = 0; j < n; j += 4093)
            assert_int_equal(p[j], (uint8_t)(j * 7 + i));
        assert_int_equal(p[n - 1], (uint8_t)((n - 1) * 7 + i));
        free(p);
        uint8_t *z = fx_alloc_streamed_zero(n);
        assert_non_null(z);
        for (uint64_t j = 0; j < n; j++)
            assert_int_equal(z[j], 0);
        free(z);
    }
}
