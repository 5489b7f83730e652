/* What ferrox bench's two modes share: its llama-bench tests (bench.c) and its
 * llama-batched-bench mode, --parallel (bench_parallel.c). */
#ifndef FX_CLI_BENCH_H
#define FX_CLI_BENCH_H

#include <stdbool.h>
#include <stddef.h>

#include "ferrox.h"

enum fx_bench_output { FX_BENCH_MD, FX_BENCH_CSV, FX_BENCH_JSON };

/* Loads a model file, or synthesises "synth:SHAPE:TYPE" into a temporary file that is unlinked
 * once mapped; NULL after a message on stderr. The caller frees the model. */
struct fx_model *fx_cli_bench_load_model(const char *spec, const struct fx_model_params *mp);

/* "llama 135M Q8_0": architecture, parameter count and the file's weight type. */
void fx_cli_bench_describe(const struct fx_model *m, char *buf, size_t size);

/* n random token ids in [0, n_vocab), the same sequence at every call (seeded), as llama-bench
 * draws them. */
void fx_cli_bench_random_tokens(fx_token *t, int n, int n_vocab);

/* What --parallel runs: every (pp, tg, pl) of the lists, nested in that order as
 * llama-batched-bench nests them, at n_threads threads, for each depth of the list. */
struct fx_bench_parallel {
    const char *model_path;          /* as given, for the JSON lines */
    const char *model_desc;          /* fx_cli_bench_describe's */
    const int *pp, *tg, *pl, *depth; /* depth: positions each sequence starts with (-d) */
    int n_pp, n_tg, n_pl, n_depth;
    bool show_depth; /* -d given: the md table has a D column */
    bool progress;   /* a line on stderr per configuration with the sequences' lengths */
    bool cpu_time;   /* time the process's CPU time instead of the wall clock */
    int n_threads, n_batch, reps;
    enum fx_type type_k, type_v;
    enum fx_bench_output out;
};

/* Runs one warm-up configuration, then every configuration of p, printing a row (md, csv) or a
 * line of JSON per configuration as it finishes. 0, or 1 after a message on stderr. */
int fx_cli_bench_parallel(const struct fx_model *m, const struct fx_bench_parallel *p);

/* The header of the csv rows fx_cli_bench_parallel prints. */
void fx_cli_bench_parallel_csv_header(void);

#endif
