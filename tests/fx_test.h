/* The test harness: cmocka, with tests that register themselves.
 *
 *   FX_TEST(gguf_rejects_bad_magic) { ... assert_int_equal(...); ... }
 *
 * Every FX_TEST in every test file under tests/ joins one cmocka group, run by tests/main.c in name
 * order, so a run ends with one cmocka summary. FX_TEST_FILTER (make test TEST_FILTER=...) holds
 * comma-separated shell globs on test names; only matching tests run.
 *
 * Tests that need the shared fixtures call fx_test_fixture() / fx_test_model(): when the file is
 * missing the test is reported as skipped, or fails when the environment has CI=true. */
#ifndef FX_TEST_H
#define FX_TEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>

typedef void (*fx_test_fn)(void **state);

void fx_test_register(const char *name, fx_test_fn fn);

#define FX_TEST(name)                                                                              \
    static void name(void **state);                                                                \
    __attribute__((constructor)) static void name##_register(void) {                               \
        fx_test_register(#name, name);                                                             \
    }                                                                                              \
    static void name(void **state __attribute__((unused)))

/* Path of a file under FERROX_FIXTURES (default ../shared/fixtures), e.g.
 * fx_test_fixture("models/llama-tiny.F32.gguf"). Skips the test (fails under CI=true) when the
 * file does not exist. The string lives in a per-call slot of a small ring; copy it to keep it
 * past a few more calls. */
const char *fx_test_fixture(const char *rel);
/* The same under FERROX_MODELS (default ../shared/models). */
const char *fx_test_model(const char *rel);

/* A fresh directory for this test process's scratch files, removed at exit. */
const char *fx_test_tmpdir(void);
/* tmpdir/name, in the same kind of ring as fx_test_fixture. */
const char *fx_test_tmpfile(const char *name);

/* Reads a whole file into a malloc'd buffer (NUL-terminated, *size without the NUL); fails the
 * test when it cannot. */
char *fx_test_read_file(const char *path, size_t *size);
void fx_test_write_file(const char *path, const void *data, size_t size);

/* Runs the ferrox binary of this build (FERROX_BIN) with the given arguments (NULL-terminated)
 * and optional stdin text, capturing stdout and stderr into malloc'd strings (either out pointer
 * may be NULL). Returns the exit status, or -1 when the process died from a signal. */
int fx_test_run_cli(const char *const *args, const char *stdin_text, char **out, char **err);

/* The same for the program named by the environment variable bin_var (FERROX_LOADGEN: the load
 * generator of this build). */
int fx_test_run_program(const char *bin_var, const char *const *args, const char *stdin_text,
                        char **out, char **err);

/* Deterministic random numbers for tests (splitmix64). */
struct fx_test_rng {
    uint64_t s;
};
uint64_t fx_test_rng_u64(struct fx_test_rng *r);
/* Uniform in [0, 1). */
double fx_test_rng_f64(struct fx_test_rng *r);
/* Standard normal (Box-Muller). */
double fx_test_rng_normal(struct fx_test_rng *r);

#endif
