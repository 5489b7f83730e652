#include "core/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static enum fx_log_level threshold = FX_LOG_WARN;
static pthread_once_t threshold_once = PTHREAD_ONCE_INIT;

static void read_threshold(void) {
    static const char *const names[] = {"error", "warn", "info", "debug"};
    const char *v = getenv("FERROX_LOG");
    if (!v)
        return;
    for (int i = 0; i < 4; i++)
        if (strcmp(v, names[i]) == 0)
            threshold = (enum fx_log_level)i;
}

int fx_log_enabled(enum fx_log_level level) {
    pthread_once(&threshold_once, read_threshold);
    return level <= threshold;
}

void fx_log(enum fx_log_level level, const char *fmt, ...) {
    if (!fx_log_enabled(level))
        return;
    static const char *const tags[] = {"error", "warning", "info", "debug"};
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    /* One fprintf per line so that lines from different threads do not interleave. */
    fprintf(stderr, "ferrox: %s: %s\n", tags[level], line);
}
