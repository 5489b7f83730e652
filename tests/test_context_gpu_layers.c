/* decoder: GPU layers (fx_context_params.n_gpu_layers) are refused with the reason wherever they
 * cannot run: a build without the CUDA backend, a machine without a device, a negative count.
 * Runs in every build; where a device is present and the build has CUDA, the requests succeed
 * instead (tests/test_cuda_decode.c checks what they compute). */
#include "fx_test.h"
#include "golden.h"

#include <string.h>

#include "ferrox.h"

FX_TEST(context_gpu_layers_refused_with_reason) {
    struct fx_model *m;
    struct fx_error err = {0};
    m = fx_test_load_model("models/llama-tiny.F32.gguf");
    struct fx_context_params p = fx_context_default_params();
    p.n_ctx = 32;
    p.n_threads = 1;
    struct fx_context *ctx = NULL;

    p.n_gpu_layers = -1;
    assert_int_equal(fx_context_create(m, &p, &ctx, &err), FX_ERR_INVALID_ARG);
    assert_null(ctx);
    assert_non_null(strstr(err.msg, "GPU layers"));

    static const int32_t asks[] = {1, 99}; /* the last layer; every layer */
    for (size_t i = 0; i < sizeof asks / sizeof asks[0]; i++) {
        p.n_gpu_layers = asks[i];
        fx_status st = fx_context_create(m, &p, &ctx, &err);
        if (st == FX_OK) {
            print_message("a CUDA device is present: %d GPU layers accepted\n", asks[i]);
            fx_context_free(ctx);
        } else {
            assert_int_equal(st, FX_ERR_UNSUPPORTED);
            assert_null(ctx);
            assert_non_null(strstr(err.msg, "GPU layers"));
        }
    }

    p.n_gpu_layers = 0; /* the default: the CPU */
    assert_int_equal(fx_context_create(m, &p, &ctx, &err), FX_OK);
    fx_context_free(ctx);
    fx_model_free(m);
}
