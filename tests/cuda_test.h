/* Test support for the CUDA backend's tests (tests/test_cuda_*.c, built with make CUDA=1 only):
 * the skip when no device is present, and device buffers that fail the test instead of
 * returning errors. */
#ifndef FX_TESTS_CUDA_TEST_H
#define FX_TESTS_CUDA_TEST_H

#include <stddef.h>

#include "cuda/cuda.h"
#include "fx_test.h"

/* Returns when a CUDA device is usable (device 0 made current); otherwise reports the test
 * skipped with the reason, or fails it under CI=true like every test whose requirement is
 * missing. */
void cuda_test_require(void);

/* Fails the test with err's message unless st is FX_OK. */
void cuda_test_ok(fx_status st, const struct fx_error *err);

/* A device copy of bytes at src (fx_cuda_free it), or of nothing (zeroed) when src is NULL. */
void *cuda_test_upload(const void *src, size_t bytes);
/* Waits for the device, fails on its errors, then copies bytes back. */
void cuda_test_download(void *dst, const void *d_src, size_t bytes);

#endif
