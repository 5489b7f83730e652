/* Filling a caller's struct fx_error. Library code reports every failure through these. */
#ifndef FX_CORE_ERROR_H
#define FX_CORE_ERROR_H

#include "ferrox.h"

/* Sets err (when not NULL) to code, a formatted message and a byte offset (FX_NO_OFFSET when
 * none applies), and returns code so that callers can write `return fx_error_set(...)`. */
fx_status fx_error_set(struct fx_error *err, fx_status code, uint64_t offset, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Clears err (when not NULL) to FX_OK with an empty message. */
void fx_error_clear(struct fx_error *err);

/* Prepends "prefix: " to an error message already set, keeping code and offset; used when a
 * caller adds context ("loading 'model.gguf': ..."). */
void fx_error_prefix(struct fx_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Invariant checks that stay on in release builds. They guard programmer errors only: data from
 * a file, a socket or a flag is validated and returned as an error instead. */
#define FX_ASSERT(cond)                                                                            \
    do {                                                                                           \
        if (!(cond))                                                                               \
            fx_assert_fail(#cond, __FILE__, __LINE__);                                             \
    } while (0)

_Noreturn void fx_assert_fail(const char *cond, const char *file, int line);

#endif
