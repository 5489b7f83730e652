#include "cli/util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

bool fx_cli_parse_int(const char *s, long lo, long hi, int *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return false;
    *out = (int)v;
    return true;
}

bool fx_cli_parse_int_list(const char *s, long lo, long hi, int **out, int *n) {
    *out = NULL;
    *n = 0;
    int cap = 0;
    const char *p = s;
    for (;;) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (errno || end == p || v < lo || v > hi || (*end && *end != ','))
            goto bad;
        if (*n == cap) {
            cap = cap ? 2 * cap : 8;
            int *grown = realloc(*out, sizeof(int) * (size_t)cap);
            if (!grown)
                goto bad;
            *out = grown;
        }
        (*out)[(*n)++] = (int)v;
        if (!*end)
            return true;
        p = end + 1;
    }
bad:
    free(*out);
    *out = NULL;
    *n = 0;
    return false;
}

bool fx_cli_parse_ids(const char *s, fx_token **out, int *n) {
    int *ids;
    if (!fx_cli_parse_int_list(s, 0, INT32_MAX, &ids, n))
        return false;
    *out = ids; /* fx_token is int32_t, the same as int here */
    return true;
}

double fx_cli_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int fx_cli_write_file(const char *path, const void *data, size_t size) {
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t written = fwrite(data, 1, size, f);
    int close_rc = fclose(f);
    return written == size && close_rc == 0 ? 0 : -1;
}

fx_token fx_cli_argmax(const float *logits, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (logits[i] > logits[best])
            best = i;
    return best;
}
