/* Small helpers shared by the subcommands: number and list parsing, a clock, file output. */
#ifndef FX_CLI_UTIL_H
#define FX_CLI_UTIL_H

#include <stdbool.h>
#include <stddef.h>

#include "ferrox.h"

/* A whole decimal number in [lo, hi]; false for anything else (empty, junk, out of range). */
bool fx_cli_parse_int(const char *s, long lo, long hi, int *out);
/* A comma-separated list of such numbers into a malloc'd array (*out, *n). */
bool fx_cli_parse_int_list(const char *s, long lo, long hi, int **out, int *n);
/* Comma-separated token ids (>= 0) into a malloc'd array. */
bool fx_cli_parse_ids(const char *s, fx_token **out, int *n);

/* Seconds on a monotonic clock. */
double fx_cli_now(void);

/* Writes size bytes to path; 0, or -1 with errno set. */
int fx_cli_write_file(const char *path, const void *data, size_t size);

/* Index of the largest logit, ties to the lowest index. */
fx_token fx_cli_argmax(const float *logits, int n);

#endif
