/* Small helpers shared by the subcommands: number and list parsing, a clock, file output. */
#ifndef FX_CLI_UTIL_H
#define FX_CLI_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ferrox.h"

/* A whole decimal number in [lo, hi]; false for anything else (empty, junk, out of range). */
bool fx_cli_parse_int(const char *s, long lo, long hi, int *out);
/* A size in bytes: a whole number with an optional binary suffix K, M, G or T (any case), as in
 * "4G", "512M", "256K"; false for anything else or for more than 2^64 - 1 bytes. */
bool fx_cli_parse_size(const char *s, uint64_t *out);
/* A comma-separated list of such numbers into a malloc'd array (*out, *n). */
bool fx_cli_parse_int_list(const char *s, long lo, long hi, int **out, int *n);
/* Comma-separated token ids (>= 0) into a malloc'd array. */
bool fx_cli_parse_ids(const char *s, fx_token **out, int *n);

/* A KV cache element type as llama.cpp names it for -ctk / -ctv ("f32", "f16", "q8_0", any
 * case); false for anything else. */
bool fx_cli_parse_kv_type(const char *s, enum fx_type *out);

/* An expert cache's eviction policy by its --moe-evict name ("quota", "lru", "lfu"); false for
 * anything else. */
bool fx_cli_parse_moe_evict(const char *s, enum fx_moe_evict *out);

/* "f32", "f16" or "q8_0". */
const char *fx_cli_kv_type_name(enum fx_type t);

/* llama.cpp's single-dash long options (-ctk, -ctv, -npp, -ntg, -npl, -ngl) rewritten in argv as
 * their double-dash names (--cache-type-k, ...), so that getopt_long reads both spellings. */
void fx_cli_expand_aliases(int argc, char **argv);

/* Writes size bytes to path; 0, or -1 with errno set. */
int fx_cli_write_file(const char *path, const void *data, size_t size);

/* Index of the largest logit, ties to the lowest index. */
fx_token fx_cli_argmax(const float *logits, int n);

/* A decimal floating-point number (or "inf", "-inf") in [lo, hi]; false for anything else. */
bool fx_cli_parse_float(const char *s, double lo, double hi, float *out);

/* Reads a whole file ("-": standard input) into a malloc'd buffer with a NUL after its *len
 * bytes; NULL with errno set when it cannot. */
char *fx_cli_read_file(const char *path, size_t *len);

/* The help line of --moe-cache, shared by every command that takes it. */
#define FX_CLI_MOE_CACHE_USAGE                                                                     \
    "  --moe-cache SIZE          keep a mixture of experts' experts on disk, read into a cache\n"  \
    "                            of SIZE bytes (4G, 512M, 256K) with one layer of lookahead;\n"    \
    "                            every other weight stays in memory (default: all in memory)\n"    \
    "  --moe-lookahead N         with --moe-cache: layers the read-ahead looks ahead\n"            \
    "                            (0 to 4; 0: none; default 1, which missed least)\n"               \
    "  --moe-evict POLICY        with --moe-cache: lfu (the default: least used, the\n"            \
    "                            counts halved every 32 steps), lru, or quota (per-layer\n"        \
    "                            shares, LRU inside)\n"
/* Prints the expert cache's figures since *last (what the step just run did) and updates *last;
 * nothing for a model without an expert cache. */
void fx_cli_moe_report(const struct fx_model *m, const char *what, struct fx_moe_stats *last);

#endif
