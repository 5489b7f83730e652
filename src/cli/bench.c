/* ferrox bench: llama-bench's options and table for ferrox.
 *
 *   pp<N>: prefill of N tokens with fx_forward_batch_last, in a fresh context each repetition
 *   tg<N>: N decode steps with fx_forward_token from an empty cache
 *
 * Each test runs once untimed (warm-up), then R timed repetitions; t/s is the mean +- standard
 * deviation over the repetitions. Tokens are drawn at random from the vocabulary (seeded), as in
 * llama-bench. */
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/util.h"
#include "ferrox.h"
#include "model/ftype.h"
#include "model/synth.h"

enum output { OUT_MD, OUT_CSV, OUT_JSON };

struct opts {
    const char **models; /* paths, or "synth:SHAPE:TYPE" */
    int n_models;
    int *prompts, n_prompts;
    int *gens, n_gens;
    int *threads, n_threads;
    int reps;
    enum output out;
};

struct result {
    const char *path;
    char desc[96];
    uint64_t size, n_params;
    int n_threads, n_prompt, n_gen, reps;
    double *samples_ts; /* [reps] */
    double avg_ts, stddev_ts;
};

static void usage(FILE *out) {
    fprintf(out,
            "usage: ferrox bench [-m MODEL]... [--synth SHAPE:TYPE]... [-p N,N...] [-n N,N...]\n"
            "                    [-t N,N...] [-r REPS] [-o md|csv|json]\n\n"
            "  -m FILE             a GGUF model (repeatable)\n"
            "  --synth SHAPE:TYPE  a model made by 'ferrox synth' for this run, e.g.\n"
            "                      smollm2-135m:Q4_K_M (repeatable)\n"
            "  -p LIST             prompt lengths for pp tests (default 512; 0 for none)\n"
            "  -n LIST             generation lengths for tg tests (default 128; 0 for none)\n"
            "  -t LIST             thread counts (default: the number of CPUs)\n"
            "  -r N                timed repetitions per test (default 5)\n"
            "  -o FORMAT           md (default), csv or json\n");
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

/* "llama 135M Q8_0": architecture, parameter count and the file's weight type. */
static void describe(const struct fx_model *m, char *buf, size_t size) {
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

/* Random token ids in [0, n_vocab), the same sequence for every test. */
static void random_tokens(fx_token *t, int n, int n_vocab) {
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        t[i] = (fx_token)(s % (uint64_t)n_vocab);
    }
}

static struct fx_context *make_context(const struct fx_model *m, int n_ctx, int n_threads) {
    struct fx_context_params p = fx_context_default_params();
    p.n_ctx = n_ctx;
    p.n_batch = n_ctx;
    p.n_threads = n_threads;
    struct fx_context *ctx;
    struct fx_error err;
    if (fx_context_create(m, &p, &ctx, &err) != FX_OK) {
        fprintf(stderr, "ferrox bench: %s\n", err.msg);
        return NULL;
    }
    return ctx;
}

/* One test: pp (n_prompt > 0) or tg (n_gen > 0). Fills r->samples_ts. */
static int run_test(const struct fx_model *m, struct result *r) {
    int n_vocab = fx_model_n_vocab(m);
    int n = r->n_prompt ? r->n_prompt : r->n_gen;
    fx_token *tokens = malloc(sizeof(fx_token) * (size_t)n);
    float *logits = malloc(sizeof(float) * (size_t)n_vocab);
    struct fx_context *ctx = NULL;
    struct fx_error err;
    int rc = 1;
    if (!tokens || !logits)
        goto done;
    random_tokens(tokens, n, n_vocab);
    for (int rep = -1; rep < r->reps; rep++) { /* rep -1: warm-up */
        double t0 = 0.0, t1 = 0.0;
        fx_status st = FX_OK;
        if (r->n_prompt) {
            fx_context_free(ctx);
            if (!(ctx = make_context(m, n, r->n_threads)))
                goto done;
            t0 = fx_cli_now();
            st = fx_forward_batch_last(ctx, tokens, n, 0, logits, &err);
            t1 = fx_cli_now();
        } else {
            if (!ctx && !(ctx = make_context(m, n, r->n_threads)))
                goto done;
            t0 = fx_cli_now();
            for (int i = 0; i < n && st == FX_OK; i++)
                st = fx_forward_token(ctx, tokens[i], i, logits, &err);
            t1 = fx_cli_now();
        }
        if (st) {
            fprintf(stderr, "ferrox bench: %s\n", err.msg);
            goto done;
        }
        if (rep >= 0)
            r->samples_ts[rep] = n / (t1 - t0);
    }
    r->avg_ts = mean(r->samples_ts, r->reps);
    r->stddev_ts = stddev(r->samples_ts, r->reps);
    rc = 0;
done:
    fx_context_free(ctx);
    free(tokens);
    free(logits);
    return rc;
}

static void print_md_header(void) {
    printf("| %-30s | %10s | %10s | %-7s | %7s | %10s | %20s |\n", "model", "size", "params",
           "backend", "threads", "test", "t/s");
    printf("| %.30s | %.9s: | %.9s: | %.7s | %.6s: | %.9s: | %.19s: |\n",
           "------------------------------", "----------", "----------", "-------", "-------",
           "----------", "--------------------");
}

static void print_row(const struct result *r, enum output out, json_t *json) {
    char test[32];
    snprintf(test, sizeof test, r->n_prompt ? "pp%d" : "tg%d",
             r->n_prompt ? r->n_prompt : r->n_gen);
    double mib = (double)r->size / (1024.0 * 1024.0);
    if (out == OUT_MD) {
        char size[32], params[32], ts[48];
        snprintf(size, sizeof size, "%.2f MiB", mib);
        if (r->n_params >= 1000000000ull)
            snprintf(params, sizeof params, "%.2f B", (double)r->n_params / 1e9);
        else
            snprintf(params, sizeof params, "%.2f M", (double)r->n_params / 1e6);
        snprintf(ts, sizeof ts, "%.2f ± %.2f", r->avg_ts, r->stddev_ts);
        printf("| %-30s | %10s | %10s | %-7s | %7d | %10s | %20s |\n", r->desc, size, params, "CPU",
               r->n_threads, test, ts);
    } else if (out == OUT_CSV) {
        printf("\"%s\",\"%s\",%llu,%llu,%d,%d,%d,%.6f,%.6f\n", r->path, r->desc,
               (unsigned long long)r->size, (unsigned long long)r->n_params, r->n_threads,
               r->n_prompt, r->n_gen, r->avg_ts, r->stddev_ts);
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
        json_object_set_new(o, "n_prompt", json_integer(r->n_prompt));
        json_object_set_new(o, "n_gen", json_integer(r->n_gen));
        json_object_set_new(o, "repetitions", json_integer(r->reps));
        json_object_set_new(o, "avg_ts", json_real(r->avg_ts));
        json_object_set_new(o, "stddev_ts", json_real(r->stddev_ts));
        json_object_set_new(o, "samples_ts", samples);
        json_array_append_new(json, o);
    }
    fflush(stdout);
}

/* Loads a model file, or synthesises "synth:SHAPE:TYPE" into a temporary file that is unlinked
 * once mapped. */
static struct fx_model *load_model(const char *spec) {
    struct fx_model *m = NULL;
    struct fx_error err;
    if (strncmp(spec, "synth:", 6) != 0) {
        if (fx_model_load(spec, NULL, &m, &err) != FX_OK)
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
        st = fx_model_load(path, NULL, &m, &err);
    unlink(path);
    if (st)
        fprintf(stderr, "ferrox bench: %s\n", err.msg);
    return m;
}

static int parse_args(int argc, char **argv, struct opts *o) {
    static const struct option opts[] = {{"model", required_argument, NULL, 'm'},
                                         {"synth", required_argument, NULL, 'S'},
                                         {"n-prompt", required_argument, NULL, 'p'},
                                         {"n-gen", required_argument, NULL, 'n'},
                                         {"threads", required_argument, NULL, 't'},
                                         {"repetitions", required_argument, NULL, 'r'},
                                         {"output", required_argument, NULL, 'o'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    optind = 1;
    for (int c; (c = getopt_long(argc, argv, "m:p:n:t:r:o:h", opts, NULL)) != -1;) {
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
        case 't': {
            int **list = c == 'p' ? &o->prompts : c == 'n' ? &o->gens : &o->threads;
            int *count = c == 'p' ? &o->n_prompts : c == 'n' ? &o->n_gens : &o->n_threads;
            free(*list);
            if (!fx_cli_parse_int_list(optarg, c == 't' ? 1 : 0, 1 << 20, list, count)) {
                fprintf(stderr, "ferrox bench: bad list '%s'\n", optarg);
                return 2;
            }
            break;
        }
        case 'r':
            if (!fx_cli_parse_int(optarg, 1, 10000, &o->reps)) {
                fprintf(stderr, "ferrox bench: bad repetitions '%s'\n", optarg);
                return 2;
            }
            break;
        case 'o':
            if (strcmp(optarg, "md") == 0)
                o->out = OUT_MD;
            else if (strcmp(optarg, "csv") == 0)
                o->out = OUT_CSV;
            else if (strcmp(optarg, "json") == 0)
                o->out = OUT_JSON;
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

int fx_cli_bench(int argc, char **argv) {
    struct opts o = {.reps = 5, .out = OUT_MD};
    int rc = parse_args(argc, argv, &o);
    static int default_p = 512, default_n = 128;
    int default_t = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (rc == 0) {
        if (!o.prompts)
            o.prompts = &default_p, o.n_prompts = 1;
        if (!o.gens)
            o.gens = &default_n, o.n_gens = 1;
        if (!o.threads)
            o.threads = &default_t, o.n_threads = 1;
    }
    json_t *json = json_array();
    double *samples = calloc((size_t)o.reps, sizeof(double));
    if (rc == 0 && o.out == OUT_MD)
        print_md_header();
    if (rc == 0 && o.out == OUT_CSV)
        printf("model_filename,model_type,model_size,model_n_params,n_threads,n_prompt,n_gen,"
               "avg_ts,stddev_ts\n");
    for (int mi = 0; rc == 0 && mi < o.n_models; mi++) {
        struct fx_model *m = load_model(o.models[mi]);
        if (!m) {
            rc = 1;
            break;
        }
        struct result r = {.path = o.models[mi],
                           .size = fx_model_size(m),
                           .n_params = fx_model_n_params(m),
                           .reps = o.reps,
                           .samples_ts = samples};
        describe(m, r.desc, sizeof r.desc);
        for (int ti = 0; rc == 0 && ti < o.n_threads; ti++) {
            r.n_threads = o.threads[ti];
            for (int k = 0; rc == 0 && k < o.n_prompts + o.n_gens; k++) {
                r.n_prompt = k < o.n_prompts ? o.prompts[k] : 0;
                r.n_gen = k < o.n_prompts ? 0 : o.gens[k - o.n_prompts];
                if (r.n_prompt == 0 && r.n_gen == 0)
                    continue;
                if ((rc = run_test(m, &r)) == 0)
                    print_row(&r, o.out, json);
            }
        }
        fx_model_free(m);
    }
    if (rc == 0 && o.out == OUT_JSON) {
        char *text = json_dumps(json, JSON_INDENT(2));
        if (text)
            printf("%s\n", text);
        free(text);
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    if (rc == 0)
        fprintf(o.out == OUT_MD ? stdout : stderr, "\nkernels: %s, peak RSS: %.1f MiB\n",
                fx_kernels_name(), (double)ru.ru_maxrss / 1024.0);
    json_decref(json);
    free(samples);
    for (int i = 0; i < o.n_models; i++)
        if (strncmp(o.models[i], "synth:", 6) == 0)
            free((char *)o.models[i]);
    free(o.models);
    if (o.prompts != &default_p)
        free(o.prompts);
    if (o.gens != &default_n)
        free(o.gens);
    if (o.threads != &default_t)
        free(o.threads);
    return rc < 0 ? 0 : rc;
}
