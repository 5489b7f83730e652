/* cuda: device discovery, and the argument checks every entry point makes before it touches a
 * device (these run on any machine: a build with CUDA=1 but no GPU still tests them). */
#include "fx_test.h"

#include <string.h>

#include "cuda_test.h"

/* Without a device the count is 0 and the reason is a sentence, not a failure; with one, every
 * device describes itself. The test is skipped (failed under CI=true) when there is none. */
FX_TEST(cuda_device_count_reports_or_lists) {
    char why[256] = "unset";
    int n = fx_cuda_device_count(why, sizeof why);
    assert_true(n >= 0);
    if (n == 0)
        assert_int_equal(strncmp(why, "no CUDA device", 14), 0);
    else
        assert_string_equal(why, "");
    cuda_test_require();
    for (int d = 0; d < n; d++) {
        struct fx_cuda_info info;
        struct fx_error err = {0};
        cuda_test_ok(fx_cuda_device_info(d, &info, &err), &err);
        print_message("cuda device %d: %s, compute %d.%d, %d SMs, %.1f GiB\n", d, info.name,
                      info.cc_major, info.cc_minor, info.n_sm,
                      (double)info.mem_bytes / (1024.0 * 1024 * 1024));
        assert_true(info.cc_major >= 1 && info.n_sm > 0 && info.mem_bytes > 0);
    }
}

/* The formats with device kernels are exactly the ones cuda.h lists. */
FX_TEST(cuda_type_support_list) {
    static const enum fx_type yes[] = {
        FX_TYPE_F32,  FX_TYPE_F16,  FX_TYPE_BF16, FX_TYPE_Q4_0,  FX_TYPE_Q4_1,
        FX_TYPE_Q5_0, FX_TYPE_Q5_1, FX_TYPE_Q8_0, FX_TYPE_Q2_K,  FX_TYPE_Q3_K,
        FX_TYPE_Q4_K, FX_TYPE_Q5_K, FX_TYPE_Q6_K, FX_TYPE_MXFP4,
    };
    int n_yes = 0;
    for (int t = 0; t < FX_TYPE_COUNT; t++) {
        bool listed = false;
        for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++)
            listed |= yes[i] == (enum fx_type)t;
        assert_int_equal(fx_cuda_type_supported((enum fx_type)t), listed);
        n_yes += listed;
    }
    assert_int_equal(n_yes, (int)(sizeof yes / sizeof yes[0]));
}

/* Bad shapes and unsupported formats are refused with an error naming them, before any launch
 * (no device is needed to see it). */
FX_TEST(cuda_refuses_bad_arguments_before_launch) {
    struct fx_error err = {0};
    struct fx_cuda_mat w = {.type = FX_TYPE_IQ4_XS, .ne0 = 256, .ne1 = 4, .row_bytes = 136};
    assert_int_equal(fx_cuda_matmul(&w, NULL, 256, 1, NULL, 4, NULL, &err), FX_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "IQ4_XS"));
    w = (struct fx_cuda_mat){.type = FX_TYPE_Q4_K, .ne0 = 100, .ne1 = 4, .row_bytes = 144};
    assert_int_equal(fx_cuda_matmul(&w, NULL, 256, 1, NULL, 4, NULL, &err), FX_ERR_INVALID_ARG);
    assert_int_equal(fx_cuda_dequantize(FX_TYPE_Q8_0, NULL, 33, NULL, NULL, &err),
                     FX_ERR_INVALID_ARG);
    assert_int_equal(fx_cuda_top_k(NULL, 10, 0, NULL, NULL, NULL, &err), FX_ERR_INVALID_ARG);
    assert_int_equal(fx_cuda_top_k(NULL, 10, FX_CUDA_TOP_K_MAX + 1, NULL, NULL, NULL, &err),
                     FX_ERR_INVALID_ARG);
    struct fx_cuda_attn a = {.kv_type = FX_TYPE_Q8_0,
                             .n_head = 4,
                             .n_head_kv = 2,
                             .dim_k = 64,
                             .dim_v = 64,
                             .k_ctx = 8,
                             .v_ctx = 8,
                             .n_keys = 4,
                             .scale = 1};
    assert_int_equal(fx_cuda_attn_decode(&a, NULL, NULL, NULL, NULL, NULL, NULL, NULL, &err),
                     FX_ERR_UNSUPPORTED);
    a.kv_type = FX_TYPE_F16;
    a.n_head_kv = 3; /* 4 query heads do not share 3 KV heads evenly */
    assert_int_equal(fx_cuda_attn_decode(&a, NULL, NULL, NULL, NULL, NULL, NULL, NULL, &err),
                     FX_ERR_INVALID_ARG);
    a.n_head_kv = 2;
    a.n_keys = 9; /* more keys than the cache holds */
    assert_int_equal(fx_cuda_attn_decode(&a, NULL, NULL, NULL, NULL, NULL, NULL, NULL, &err),
                     FX_ERR_INVALID_ARG);
    assert_int_equal(fx_cuda_rope(NULL, 1, 64, 1, 64, 3, 0, NULL, NULL, NULL, &err),
                     FX_ERR_INVALID_ARG);
}
