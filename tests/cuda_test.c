/* See cuda_test.h. */
#include "cuda_test.h"

#include <stdlib.h>
#include <string.h>

void cuda_test_require(void) {
    char why[256];
    if (fx_cuda_device_count(why, sizeof why) > 0) {
        struct fx_error err = {0};
        cuda_test_ok(fx_cuda_use_device(0, &err), &err);
        return;
    }
    const char *ci = getenv("CI");
    if (ci && strcmp(ci, "true") == 0)
        fail_msg("CUDA device required under CI=true: %s", why);
    print_message("skipping: %s\n", why);
    skip();
}

void cuda_test_ok(fx_status st, const struct fx_error *err) {
    if (st != FX_OK)
        fail_msg("%s: %s", fx_status_name(st), err ? err->msg : "");
}

void *cuda_test_upload(const void *src, size_t bytes) {
    struct fx_error err = {0};
    void *d = fx_cuda_alloc(bytes, &err);
    if (!d)
        fail_msg("%s", err.msg);
    if (src) {
        cuda_test_ok(fx_cuda_upload(d, src, bytes, &err), &err);
    } else {
        void *zero = calloc(1, bytes ? bytes : 1);
        assert_non_null(zero);
        cuda_test_ok(fx_cuda_upload(d, zero, bytes, &err), &err);
        free(zero);
    }
    return d;
}

void cuda_test_download(void *dst, const void *d_src, size_t bytes) {
    struct fx_error err = {0};
    cuda_test_ok(fx_cuda_sync(&err), &err);
    cuda_test_ok(fx_cuda_download(dst, d_src, bytes, &err), &err);
}
