/* ferrox bench: llama-bench's options and table for ferrox.
 *
 *   pp<N>: prefill of N tokens with fx_forward_batch_last
 *   tg<N>: N decode steps with fx_forward_token
 *
 * both after D tokens are already in the cache (-d, llama-bench's depth; "pp512 @ d4096"). The D
 * tokens are evaluated once per test, untimed; before each repetition the cache is truncated
 * back to them, so every repetition starts from the same D positions. Each test runs once
 * untimed (warm-up), then R timed repetitions; t/s is the mean +- standard deviation over the
 * repetitions. Tokens are drawn at random from the vocabulary (seeded), as in llama-bench.
 * -ctk / -ctv set the cache's key and value types.
 *
 * With --parallel the command is llama-batched-bench instead (many sequences over a paged pool):
 * see bench_parallel.c. */
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "cli/bench.h"
#include "cli/cli.h"
#include "cli/util.h"
#include "core/clock.h"
#include "ferrox.h"
#include "model/ftype.h"
#include "model/synth.h"

struct opts {
    const char **models; /* paths, or "synth:SHAPE:TYPE" */
    int n_models;
    int *prompts, n_prompts;
    int *gens, n_gens;
    int *depths, n_depths;
    int *threads, n_threads;
    int reps;
    bool reps_set;
    enum fx_bench_output out;
    enum fx_type type_k, type_v;
    bool kv_set;   /* -ctk or -ctv given: the md table shows the types */
    bool progress; /* --progress: a line on stderr per test and repetition */
    int n_gpu_layers;
    /* --parallel: llama-batched-bench's lists (NULL: not that mode) and rows per step */
    int *par_pl, n_par_pl;
    int *par_pp, n_par_pp;
    int *par_tg, n_par_tg;
    int n_batch;
    bool cpu_time;                /* --cpu-time: --parallel times the process's CPU time */
    struct fx_model_params model; /* --moe-cache, --moe-lookahead, --moe-evict */
};

struct result {
    const char *path;
    char desc[96];
    uint64_t size, n_params;
    int n_threads, n_prompt, n_gen, n_depth, reps;
    enum fx_type type_k, type_v;
    int n_gpu_layers;
    double *samples_ts; /* [reps] */
    double avg_ts, stddev_ts;
};

static void usage(FILE *out) {
    fprintf(out,
            "usage: ferrox bench [-m MODEL]... [--synth SHAPE:TYPE]... [-p N,N...] [-n N,N...]\n"
            "                    [-d N,N...] [-t N,N...] [-r REPS] [-o md|csv|json] [-ctk TYPE]\n"
            "                    [-ctv TYPE] [--progress] [-ngl N] [--moe-cache SIZE]\n"
            "                    [--moe-lookahead N] [--moe-evict POLICY]\n"
            "       ferrox bench [-m MODEL]... [--synth SHAPE:TYPE]... --parallel N,N...\n"
            "                    [-npp N,N...] [-ntg N,N...] [-d N,N...] [-b N] [-t N,N...]\n"
            "                    [-r REPS] ...\n\n"
            "  -m FILE             a GGUF model (repeatable)\n"
            "  --synth SHAPE:TYPE  a model made by 'ferrox synth' for this run, e.g.\n"
            "                      smollm2-135m:Q4_K_M (repeatable)\n"
            "  -p LIST             prompt lengths for pp tests (default 512; 0 for none)\n"
            "  -n LIST             generation lengths for tg tests (default 128; 0 for none)\n"
            "  -d, --n-depth LIST  tokens already in the cache when each test starts (default 0)\n"
            "  -t LIST             thread counts (default: the number of CPUs)\n"
            "  -r N                timed repetitions per test (default 5)\n"
            "  -o FORMAT           md (default), csv or json\n"
            "  --progress          a line on stderr as each test and repetition starts, with the\n"
            "                      positions the cache holds\n"
            "  -ctk, --cache-type-k TYPE\n"
            "  -ctv, --cache-type-v TYPE\n"
            "                      KV cache key / value type: f32, f16 (default) or q8_0\n"
            "  -ngl, --n-gpu-layers N\n"
            "                      layers on the GPU, the last N (a build with make CUDA=1):\n"
            "                      tg runs them on the device, pp still runs on the CPU\n"
            "  -npl, --parallel LIST\n"
            "                      llama-batched-bench instead: LIST sequences (default\n"
            "                      1,4,16,64) prefilled and decoded together over a paged pool\n"
            "  -npp, --n-prompt-parallel LIST\n"
            "                      prompt tokens per sequence for --parallel (default 128)\n"
            "  -ntg, --n-gen-parallel LIST\n"
            "                      generated tokens per sequence for --parallel (default 128)\n"
            "  -b, --batch-size N  rows per step of a --parallel prefill (default 512)\n"
            "                      (with -d, the depth is one sequence's, which every sequence\n"
            "                      shares as a common prefix, as a system prompt is shared)\n"
            "                      (-r defaults to 1 with --parallel; figures are means)\n"
            "  --cpu-time          --parallel times the process's CPU time (all threads, waits\n"
            "                      included), which other processes on the machine disturb less\n"
            "                      than the wall clock\n"
            "%s"
            "                            (and each test's expert-cache figures on stderr)\n",
            FX_CLI_MOE_CACHE_USAGE);
}

static double mean(const double *x, int n) {
    double s = 0.0;
    for (int i = 0; i < n; i++)
        s += x[i];
    return s / n;
}

static double stddev(const double *x, int n) {
    if (n < 2)
        return 0.0;
    double m = mean(x, n), s = 0.0;
    for (int i = 0; i < n; i++)
        s += (x[i] - m) * (x[i] - m);
    return sqrt(s / (n - 1));
}

/* The type most of a file's weight bytes are in, for files without general.file_type. */
static const char *dominant_type(const struct fx_gguf *g) {
    uint64_t bytes[FX_TYPE_COUNT] = {0};
    enum fx_type best = FX_TYPE_F32;
    for (int64_t i = 0; i < fx_gguf_n_tensors(g); i++) {
        const struct fx_tensor_view *t = fx_gguf_tensor_at(g, i);
        bytes[t->type] += t->n_bytes;
        if (bytes[t->type] > bytes[best])
            best = t->type;
    }
    return fx_type_name(best);
}

void fx_cli_bench_describe(const struct fx_model *m, char *buf, size_t size) {
    double n = (double)fx_model_n_params(m);
    char count[32];
    if (n >= 1e9)
        snprintf(count, sizeof count, "%.1fB", n / 1e9);
    else if (n >= 1e7)
        snprintf(count, sizeof count, "%.0fM", n / 1e6);
    else
        snprintf(count, sizeof count, "%.2fM", n / 1e6);
    uint32_t ftype = UINT32_MAX;
    const char *type = NULL;
    if (fx_gguf_get_u32(fx_model_gguf(m), "general.file_type", &ftype, NULL) == FX_OK)
        type = fx_file_type_name(ftype);
    snprintf(buf, size, "%s %s %s", fx_model_arch(m), count,
             type ? type : dominant_type(fx_model_gguf(m)));
}

void fx_cli_bench_random_tokens(fx_token *t, int n, int n_vocab) {
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        t[i] = (fx_token)(s % (uint64_t)n_vocab);
    }
}

/* A context of n_ctx positions whose calls run in chunks of at most max(n_batch, 512) rows:
 * a pp test is one call of n_batch rows, a deep cache is filled 512 rows a call at most. */
static struct fx_context *make_context(const struct fx_model *m, int n_ctx, int n_batch,
                                       const struct result *r) {
    struct fx_context_params p = fx_context_default_params();
    p.n_ctx = n_ctx;
    p.n_batch = n_batch > 512 ? n_batch : 512;
    p.n_batch = p.n_batch < n_ctx ? p.n_batch : n_ctx;
    p.n_threads = r->n_threads;
    p.type_k = r->type_k;
    p.type_v = r->type_v;
    p.n_gpu_layers = r->n_gpu_layers; /* -ngl 99: every layer, as in llama.cpp */
    struct fx_context *ctx;
    struct fx_error err;
    if (fx_context_create(m, &p, &ctx, &err) != FX_OK) {
        fprintf(stderr, "ferrox bench: %s\n", err.msg);
        return NULL;
    }
    return ctx;
}

/* One test: pp (n_prompt > 0) or tg (n_gen > 0) after n_depth tokens. Fills r->samples_ts.
 * tokens: [n_depth + n], the depth's tokens then the test's. */
static int run_test(const struct fx_model *m, struct result *r, bool progress) {
    int n_vocab = fx_model_n_vocab(m);
    int n = r->n_prompt ? r->n_prompt : r->n_gen, d = r->n_depth;
    fx_token *tokens = malloc(sizeof(fx_token) * ((size_t)d + (size_t)n));
    float *logits = malloc(sizeof(float) * (size_t)n_vocab);
    struct fx_context *ctx = NULL;
    struct fx_error err;
    fx_status st = FX_OK;
    int rc = 1;
    if (!tokens || !logits || !(ctx = make_context(m, d + n, r->n_prompt, r)))
        goto done;
    fx_cli_bench_random_tokens(tokens, d + n, n_vocab);
    if (d > 0 && (st = fx_forward_batch_last(ctx, tokens, d, 0, logits, &err)))
        goto done;
    for (int rep = -1; rep < r->reps; rep++) { /* rep -1: warm-up */
        if ((st = fx_context_kv_truncate(ctx, d, &err)))
            goto done;
        if (progress)
            fprintf(stderr, "ferrox bench: %s%d @ d%d, %s %d: the cache holds %d positions\n",
                    r->n_prompt ? "pp" : "tg", n, d, rep < 0 ? "warm-up" : "repetition",
                    rep < 0 ? 1 : rep + 1, fx_context_kv_len(ctx));
        double t0 = fx_now();
        if (r->n_prompt)
            st = fx_forward_batch_last(ctx, tokens + d, n, d, logits, &err);
        else
            for (int i = 0; i < n && st == FX_OK; i++)
                st = fx_forward_token(ctx, tokens[d + i], d + i, logits, &err);
        double t1 = fx_now();
        if (st)
            goto done;
        if (rep >= 0)
            r->samples_ts[rep] = n / (t1 - t0);
    }
    r->avg_ts = mean(r->samples_ts, r->reps);
    r->stddev_ts = stddev(r->samples_ts, r->reps);
    rc = 0;
done:
    if (st)
        fprintf(stderr, "ferrox bench: %s\n", err.msg);
    fx_context_free(ctx);
    free(tokens);
    free(logits);
    return rc;
}

/* The md table shows type_k and type_v only when -ctk or -ctv was given, as llama-bench shows
 * only the columns whose values are not the defaults. The test column is wider when a test
 * carries a depth ("pp512 @ d16384"). */
static bool any_depth(const struct opts *o) {
    for (int i = 0; i < o->n_depths; i++)
        if (o->depths[i] > 0)
            return true;
    return false;
}

static int test_width(const struct opts *o) {
    return any_depth(o) ? 16 : 10;
}

static void print_md_header(bool kv, int tw) {
    printf("| %-30s | %10s | %10s | %-7s | %7s |", "model", "size", "params", "backend", "threads");
    if (kv)
        printf(" %6s | %6s |", "type_k", "type_v");
    printf(" %*s | %20s |\n", tw, "test", "t/s");
    printf("| %.30s | %.9s: | %.9s: | %.7s | %.6s: |", "------------------------------",
           "----------", "----------", "-------", "-------");
    if (kv)
        printf(" %.6s | %.6s |", "------", "------");
    printf(" %.*s: | %.19s: |\n", tw - 1, "----------------", "--------------------");
}

static void print_row(const struct result *r, enum fx_bench_output out, bool kv, int tw,
                      json_t *json) {
    const char *tk = fx_cli_kv_type_name(r->type_k), *tv = fx_cli_kv_type_name(r->type_v);
    char test[48];
    int len = snprintf(test, sizeof test, r->n_prompt ? "pp%d" : "tg%d",
                       r->n_prompt ? r->n_prompt : r->n_gen);
    if (r->n_depth > 0)
        snprintf(test + len, sizeof test - (size_t)len, " @ d%d", r->n_depth);
    double mib = (double)r->size / (1024.0 * 1024.0);
    if (out == FX_BENCH_MD) {
        char size[32], params[32], ts[48];
        snprintf(size, sizeof size, "%.2f MiB", mib);
        if (r->n_params >= 1000000000ull)
            snprintf(params, sizeof params, "%.2f B", (double)r->n_params / 1e9);
        else
            snprintf(params, sizeof params, "%.2f M", (double)r->n_params / 1e6);
        snprintf(ts, sizeof ts, "%.2f ± %.2f", r->avg_ts, r->stddev_ts);
        /* With GPU layers, decode (tg) runs on the device; prefill (pp) still runs on the CPU. */
        const char *backend = r->n_gpu_layers > 0 && !r->n_prompt ? "CUDA" : "CPU";
        printf("| %-30s | %10s | %10s | %-7s | %7d |", r->desc, size, params, backend,
               r->n_threads);
        if (kv)
            printf(" %6s | %6s |", tk, tv);
        printf(" %*s | %20s |\n", tw, test, ts);
    } else if (out == FX_BENCH_CSV) {
        printf("\"%s\",\"%s\",%llu,%llu,%d,%s,%s,%d,%d,%d,%.6f,%.6f\n", r->path, r->desc,
               (unsigned long long)r->size, (unsigned long long)r->n_params, r->n_threads, tk, tv,
               r->n_prompt, r->n_gen, r->n_depth, r->avg_ts, r->stddev_ts);
    } else {
        json_t *samples = json_array();
        for (int i = 0; i < r->reps; i++)
            json_array_append_new(samples, json_real(r->samples_ts[i]));
        json_t *o = json_object();
        json_object_set_new(o, "model_filename", json_string(r->path));
        json_object_set_new(o, "model_type", json_string(r->desc));
        json_object_set_new(o, "model_size", json_integer((json_int_t)r->size));
        json_object_set_new(o, "model_n_params", json_integer((json_int_t)r->n_params));
        json_object_set_new(o, "cpu_info", json_string(fx_kernels_name()));
        json_object_set_new(o, "n_threads", json_integer(r->n_threads));
        json_object_set_new(o, "type_k", json_string(tk));
        json_object_set_new(o, "type_v", json_string(tv));
        json_object_set_new(o, "n_prompt", json_integer(r->n_prompt));
        json_object_set_new(o, "n_gen", json_integer(r->n_gen));
        json_object_set_new(o, "n_depth", json_integer(r->n_depth));
        json_object_set_new(o, "repetitions", json_integer(r->reps));
        json_object_set_new(o, "avg_ts", json_real(r->avg_ts));
        json_object_set_new(o, "stddev_ts", json_real(r->stddev_ts));
        json_object_set_new(o, "samples_ts", samples);
        json_array_append_new(json, o);
    }
    fflush(stdout);
}

struct fx_model *fx_cli_bench_load_model(const char *spec, const struct fx_model_params *mp) {
    struct fx_model *m = NULL;
    struct fx_error err;
    if (strncmp(spec, "synth:", 6) != 0) {
        if (fx_model_load(spec, mp, &m, &err) != FX_OK)
            fprintf(stderr, "ferrox bench: %s\n", err.msg);
        return m;
    }
    char shape[64];
    const char *colon = strchr(spec + 6, ':');
    uint32_t ftype;
    if (!colon || (size_t)(colon - spec - 6) >= sizeof shape ||
        !fx_file_type_from_name(colon + 1, &ftype)) {
        fprintf(stderr, "ferrox bench: --synth wants SHAPE:TYPE, got '%s'\n", spec + 6);
        return NULL;
    }
    snprintf(shape, sizeof shape, "%.*s", (int)(colon - spec - 6), spec + 6);
    const char *tmp = getenv("TMPDIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/ferrox-bench-%ld.gguf", tmp && *tmp ? tmp : "/tmp",
             (long)getpid());
    struct fx_synth_model *plan;
    if (fx_synth_plan(shape, ftype, false, 1, &plan, &err) != FX_OK) {
        fprintf(stderr, "ferrox bench: %s\n", err.msg);
        return NULL;
    }
    fprintf(stderr, "ferrox bench: synthesising %s %s ...\n", shape, fx_file_type_name(ftype));
    fx_status st = fx_synth_write(plan, path, NULL, &err);
    fx_synth_model_free(plan);
    if (st == FX_OK)
        st = fx_model_load(path, mp, &m, &err);
    unlink(path); /* an expert cache keeps the file open */
    if (st)
        fprintf(stderr, "ferrox bench: %s\n", err.msg);
    return m;
}

static int parse_args(int argc, char **argv, struct opts *o) {
    static const struct option opts[] = {{"model", required_argument, NULL, 'm'},
                                         {"synth", required_argument, NULL, 'S'},
                                         {"n-prompt", required_argument, NULL, 'p'},
                                         {"n-gen", required_argument, NULL, 'n'},
                                         {"n-depth", required_argument, NULL, 'd'},
                                         {"progress", no_argument, NULL, 'R'},
                                         {"threads", required_argument, NULL, 't'},
                                         {"repetitions", required_argument, NULL, 'r'},
                                         {"output", required_argument, NULL, 'o'},
                                         {"cache-type-k", required_argument, NULL, 'K'},
                                         {"cache-type-v", required_argument, NULL, 'V'},
                                         {"parallel", required_argument, NULL, 'P'},
                                         {"n-prompt-parallel", required_argument, NULL, 'Q'},
                                         {"n-gen-parallel", required_argument, NULL, 'G'},
                                         {"batch-size", required_argument, NULL, 'b'},
                                         {"cpu-time", no_argument, NULL, 'C'},
                                         {"n-gpu-layers", required_argument, NULL, 'g'},
                                         {"moe-cache", required_argument, NULL, 'M'},
                                         {"moe-lookahead", required_argument, NULL, 'L'},
                                         {"moe-evict", required_argument, NULL, 'E'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    optind = 1;
    for (int c; (c = getopt_long(argc, argv, "m:p:n:d:t:r:o:b:h", opts, NULL)) != -1;) {
        switch (c) {
        case 'm':
        case 'S': {
            const char **grown = realloc(o->models, sizeof(char *) * (size_t)(o->n_models + 1));
            if (!grown)
                return 1;
            o->models = grown;
            if (c == 'm') {
                o->models[o->n_models++] = optarg;
            } else {
                char *spec = malloc(strlen(optarg) + 7);
                if (!spec)
                    return 1;
                sprintf(spec, "synth:%s", optarg);
                o->models[o->n_models++] = spec;
            }
            break;
        }
        case 'p':
        case 'n':
        case 'd':
        case 't': {
            int **list = c == 'p'   ? &o->prompts
                         : c == 'n' ? &o->gens
                         : c == 'd' ? &o->depths
                                    : &o->threads;
            int *count = c == 'p'   ? &o->n_prompts
                         : c == 'n' ? &o->n_gens
                         : c == 'd' ? &o->n_depths
                                    : &o->n_threads;
            free(*list);
            *list = NULL;
            if (!fx_cli_parse_int_list(optarg, c == 't' ? 1 : 0, 1 << 20, list, count)) {
                fprintf(stderr, "ferrox bench: bad list '%s'\n", optarg);
                return 2;
            }
            break;
        }
        case 'P':
        case 'Q':
        case 'G': {
            int **list = c == 'P' ? &o->par_pl : c == 'Q' ? &o->par_pp : &o->par_tg;
            int *count = c == 'P' ? &o->n_par_pl : c == 'Q' ? &o->n_par_pp : &o->n_par_tg;
            free(*list);
            *list = NULL;
            if (!fx_cli_parse_int_list(optarg, 1, 1 << 16, list, count)) {
                fprintf(stderr, "ferrox bench: bad list '%s'\n", optarg);
                return 2;
            }
            break;
        }
        case 'g':
            if (!fx_cli_parse_int(optarg, 0, 1 << 16, &o->n_gpu_layers)) {
                fprintf(stderr, "ferrox bench: bad GPU layer count '%s'\n", optarg);
                return 2;
            }
            break;
        case 'b':
            if (!fx_cli_parse_int(optarg, 1, 1 << 16, &o->n_batch)) {
                fprintf(stderr, "ferrox bench: bad batch size '%s'\n", optarg);
                return 2;
            }
            break;
        case 'K':
        case 'V':
            if (!fx_cli_parse_kv_type(optarg, c == 'K' ? &o->type_k : &o->type_v)) {
                fprintf(stderr, "ferrox bench: cache type must be f32, f16 or q8_0, got '%s'\n",
                        optarg);
                return 2;
            }
            o->kv_set = true;
            break;
        case 'R':
            o->progress = true;
            break;
        case 'C':
            o->cpu_time = true;
            break;
        case 'r':
            if (!fx_cli_parse_int(optarg, 1, 10000, &o->reps)) {
                fprintf(stderr, "ferrox bench: bad repetitions '%s'\n", optarg);
                return 2;
            }
            o->reps_set = true;
            break;
        case 'M':
            if (!fx_cli_parse_size(optarg, &o->model.moe_cache_bytes) ||
                o->model.moe_cache_bytes == 0) {
                fprintf(stderr, "ferrox bench: --moe-cache wants a size (4G, 512M, 256K)\n");
                return 2;
            }
            break;
        case 'L':
            if (!fx_cli_parse_int(optarg, 0, FX_MOE_LOOKAHEAD_MAX, &o->model.moe_lookahead)) {
                fprintf(stderr, "ferrox bench: --moe-lookahead wants 0 to %d layers, got '%s'\n",
                        FX_MOE_LOOKAHEAD_MAX, optarg);
                return 2;
            }
            break;
        case 'E':
            if (!fx_cli_parse_moe_evict(optarg, &o->model.moe_evict)) {
                fprintf(stderr, "ferrox bench: --moe-evict wants quota, lru or lfu, got '%s'\n",
                        optarg);
                return 2;
            }
            break;
        case 'o':
            if (strcmp(optarg, "md") == 0)
                o->out = FX_BENCH_MD;
            else if (strcmp(optarg, "csv") == 0)
                o->out = FX_BENCH_CSV;
            else if (strcmp(optarg, "json") == 0)
                o->out = FX_BENCH_JSON;
            else {
                fprintf(stderr, "ferrox bench: output must be md, csv or json\n");
                return 2;
            }
            break;
        case 'h':
            usage(stdout);
            return -1;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind != argc || o->n_models == 0) {
        usage(stderr);
        return 2;
    }
    return 0;
}

/* --parallel: llama-batched-bench over each model and thread count. */
static int bench_parallel(const struct opts *o) {
    static const int default_pl[] = {1, 4, 16, 64}, default_ptg = 128;
    struct fx_bench_parallel p = {
        .pp = o->par_pp ? o->par_pp : &default_ptg,
        .n_pp = o->par_pp ? o->n_par_pp : 1,
        .tg = o->par_tg ? o->par_tg : &default_ptg,
        .n_tg = o->par_tg ? o->n_par_tg : 1,
        .pl = o->par_pl ? o->par_pl : default_pl,
        .n_pl = o->par_pl ? o->n_par_pl : 4,
        .depth = o->depths,
        .n_depth = o->n_depths,
        .show_depth = any_depth(o),
        .progress = o->progress,
        .cpu_time = o->cpu_time,
        .n_batch = o->n_batch,
        .reps = o->reps_set ? o->reps : 1,
        .type_k = o->type_k,
        .type_v = o->type_v,
        .out = o->out,
    };
    if (o->out == FX_BENCH_CSV)
        fx_cli_bench_parallel_csv_header();
    int rc = 0;
    for (int mi = 0; rc == 0 && mi < o->n_models; mi++) {
        struct fx_model *m = fx_cli_bench_load_model(o->models[mi], &o->model);
        if (!m)
            return 1;
        char desc[96];
        fx_cli_bench_describe(m, desc, sizeof desc);
        p.model_path = o->models[mi];
        p.model_desc = desc;
        for (int ti = 0; rc == 0 && ti < o->n_threads; ti++) {
            p.n_threads = o->threads[ti];
            rc = fx_cli_bench_parallel(m, &p);
        }
        fx_model_free(m);
    }
    return rc;
}

static void print_footer(enum fx_bench_output out) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    fprintf(out == FX_BENCH_MD ? stdout : stderr, "\nkernels: %s, peak RSS: %.1f MiB\n",
            fx_kernels_name(), (double)ru.ru_maxrss / 1024.0);
}

/* pp and tg tests over each model and thread count. */
static int bench_tests(const struct opts *o) {
    json_t *json = json_array();
    double *samples = calloc((size_t)o->reps, sizeof(double));
    int rc = json && samples ? 0 : 1;
    int tw = test_width(o);
    if (rc == 0 && o->out == FX_BENCH_MD)
        print_md_header(o->kv_set, tw);
    if (rc == 0 && o->out == FX_BENCH_CSV)
        printf("model_filename,model_type,model_size,model_n_params,n_threads,type_k,type_v,"
               "n_prompt,n_gen,n_depth,avg_ts,stddev_ts\n");
    for (int mi = 0; rc == 0 && mi < o->n_models; mi++) {
        struct fx_model *m = fx_cli_bench_load_model(o->models[mi], &o->model);
        if (!m) {
            rc = 1;
            break;
        }
        struct result r = {.path = o->models[mi],
                           .size = fx_model_size(m),
                           .n_params = fx_model_n_params(m),
                           .reps = o->reps,
                           .type_k = o->type_k,
                           .type_v = o->type_v,
                           .n_gpu_layers = o->n_gpu_layers,
                           .samples_ts = samples};
        fx_cli_bench_describe(m, r.desc, sizeof r.desc);
        struct fx_moe_stats moe = {0};
        for (int ti = 0; rc == 0 && ti < o->n_threads; ti++) {
            r.n_threads = o->threads[ti];
            for (int k = 0; rc == 0 && k < o->n_prompts + o->n_gens; k++) {
                r.n_prompt = k < o->n_prompts ? o->prompts[k] : 0;
                r.n_gen = k < o->n_prompts ? 0 : o->gens[k - o->n_prompts];
                if (r.n_prompt == 0 && r.n_gen == 0)
                    continue;
                for (int di = 0; rc == 0 && di < o->n_depths; di++) { /* llama-bench's order */
                    r.n_depth = o->depths[di];
                    if ((rc = run_test(m, &r, o->progress)) == 0)
                        print_row(&r, o->out, o->kv_set, tw, json);
                }
                char what[48];
                snprintf(what, sizeof what, "pp%d tg%d (all repetitions)", r.n_prompt, r.n_gen);
                fx_cli_moe_report(m, what, &moe);
            }
        }
        fx_model_free(m);
    }
    if (rc == 0 && o->out == FX_BENCH_JSON) {
        char *text = json_dumps(json, JSON_INDENT(2));
        if (text)
            printf("%s\n", text);
        free(text);
    }
    json_decref(json);
    free(samples);
    return rc;
}

int fx_cli_bench(int argc, char **argv) {
    struct fx_context_params cp = fx_context_default_params();
    struct opts o = {.reps = 5,
                     .out = FX_BENCH_MD,
                     .type_k = cp.type_k,
                     .type_v = cp.type_v,
                     .n_batch = 512,
                     .model = fx_model_default_params()};
    int rc = parse_args(argc, argv, &o);
    static int default_p = 512, default_n = 128, default_d = 0;
    int default_t = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (rc == 0) {
        if (!o.prompts)
            o.prompts = &default_p, o.n_prompts = 1;
        if (!o.gens)
            o.gens = &default_n, o.n_gens = 1;
        if (!o.depths)
            o.depths = &default_d, o.n_depths = 1;
        if (!o.threads)
            o.threads = &default_t, o.n_threads = 1;
        bool parallel = o.par_pl || o.par_pp || o.par_tg;
        rc = parallel ? bench_parallel(&o) : bench_tests(&o);
        if (rc == 0)
            print_footer(o.out);
    }
    for (int i = 0; i < o.n_models; i++)
        if (strncmp(o.models[i], "synth:", 6) == 0)
            free((char *)o.models[i]);
    free(o.models);
    if (o.prompts != &default_p)
        free(o.prompts);
    if (o.gens != &default_n)
        free(o.gens);
    if (o.depths != &default_d)
        free(o.depths);
    if (o.threads != &default_t)
        free(o.threads);
    free(o.par_pl);
    free(o.par_pp);
    free(o.par_tg);
    return rc < 0 ? 0 : rc;
}
