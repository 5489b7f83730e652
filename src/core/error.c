#include "core/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *fx_status_name(fx_status s) {
    switch (s) {
    case FX_OK:
        return "FX_OK";
    case FX_ERR_NOMEM:
        return "FX_ERR_NOMEM";
    case FX_ERR_IO:
        return "FX_ERR_IO";
    case FX_ERR_FORMAT:
        return "FX_ERR_FORMAT";
    case FX_ERR_UNSUPPORTED:
        return "FX_ERR_UNSUPPORTED";
    case FX_ERR_INVALID_ARG:
        return "FX_ERR_INVALID_ARG";
    case FX_ERR_CAPACITY:
        return "FX_ERR_CAPACITY";
    case FX_ERR_CANCELLED:
        return "FX_ERR_CANCELLED";
    case FX_ERR_NOT_FOUND:
        return "FX_ERR_NOT_FOUND";
    }
    return "FX_ERR_UNKNOWN";
}

fx_status fx_error_set(struct fx_error *err, fx_status code, uint64_t offset, const char *fmt,
                       ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        err->code = code;
        err->offset = offset;
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return code;
}

void fx_error_clear(struct fx_error *err) {
    if (err) {
        err->code = FX_OK;
        err->msg[0] = '\0';
        err->offset = FX_NO_OFFSET;
    }
}

void fx_error_prefix(struct fx_error *err, const char *fmt, ...) {
    if (!err)
        return;
    char prefix[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    /* Room for both parts; the result is cut to the message size. */
    char joined[2 * sizeof err->msg + 2];
    snprintf(joined, sizeof joined, "%s: %s", prefix, err->msg);
    memcpy(err->msg, joined, sizeof err->msg - 1);
    err->msg[sizeof err->msg - 1] = '\0';
}

void fx_assert_fail(const char *cond, const char *file, int line) {
    fprintf(stderr, "ferrox: internal invariant failed: %s (%s:%d)\n", cond, file, line);
    abort();
}
