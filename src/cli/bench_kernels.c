/* ferrox bench-kernels: the speed of the matmul kernels, per weight format and kernel table.
 *
 * A case is (table, format, weight shape K x M, activation rows, threads, packed or not). Its
 * body is what the decoder does for one projection: quantize the activation rows to the
 * format's activation type (every worker its share), a barrier, fx_matmul (every worker its
 * share of weight rows), a barrier. The whole timed loop runs inside one fx_par_run, as a
 * forward pass does, so the pool's wake-up is not counted per call.
 *
 * Weights stream from memory as in decoding: the cases cycle through enough copies of the
 * weight matrix to fill --cold-mb, so no call finds its weights in a cache. The streaming read
 * bandwidth is measured the same way: the same pool and the same split reading a buffer of the
 * same size. Each case is timed in --runs runs of at least --min-time seconds; the median is
 * printed. The time is worker 0's wall-clock time, or with --cpu-time the largest of the
 * workers' own CPU times: what the case costs when no worker waits in a run queue, which a
 * machine shared with other work disturbs far less (a worker's waits at the barriers still
 * count while it spins). */
#include <getopt.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "core/alloc.h"
#include "core/clock.h"
#include "core/par.h"
#include "ferrox.h"
#include "kernels/kernels.h"

#define MAX_LIST 16

struct shape {
    int64_t k, m; /* row length, rows */
};

struct opts {
    enum fx_type types[MAX_LIST];
    int n_types;
    const struct fx_kernels *tables[MAX_LIST];
    int n_tables;
    struct shape shapes[MAX_LIST];
    int n_shapes;
    int rows[MAX_LIST], n_rows;
    int threads[MAX_LIST], n_threads;
    int pack; /* 0 no, 1 yes, 2 both */
    int runs;
    double min_time;
    int64_t cold_bytes;
    int bandwidth;
    int cpu_time; /* time each worker's CPU time instead of worker 0's wall-clock time */
};

static void usage(FILE *out) {
    fprintf(out,
            "usage: ferrox bench-kernels [options]\n\n"
            "Matvec and matmul speed per weight format and kernel table: GB/s of weight bytes\n"
            "read and GFLOP/s (2 K M rows / time), medians of several runs, and the machine's\n"
            "streaming read bandwidth measured the same way.\n\n"
            "  -t, --types LIST     weight formats (default q8_0,q4_0,q4_K,q6_K; 'all' for\n"
            "                       every format the kernels support)\n"
            "  -k, --tables LIST    kernel tables: generic, avx2, avx512 or 'all' (default:\n"
            "                       the table this CPU uses)\n"
            "  -s, --sizes LIST     weight shapes KxM: M rows of K elements (default\n"
            "                       576x1536,2048x8192,4096x4096)\n"
            "  -r, --rows LIST      activation rows (default 1,8,512)\n"
            "  -j, --threads LIST   worker threads (default 1,2)\n"
            "  -p, --pack MODE      weights packed for the table: yes (default), no or both\n"
            "      --runs N         timed runs per case, median printed (default 5)\n"
            "      --min-time S     seconds per run at least (default 0.1)\n"
            "      --cold-mb N      copies of the weights fill N MiB so that they stream from\n"
            "                       memory (default 512; 0: one copy, warm caches)\n"
            "      --no-bandwidth   skip the bandwidth measurement\n"
            "      --cpu-time       time each worker's own CPU time and print the largest, not\n"
            "                       wall-clock time (steadier on a machine shared with other\n"
            "                       work)\n");
}

/* ---- options ------------------------------------------------------------------------------- */

/* Splits a comma list, calling parse on each item; false on a bad item or too many. */
static bool parse_list(const char *arg, int *count, bool (*parse)(const char *, int, void *),
                       void *dst) {
    char buf[512];
    snprintf(buf, sizeof buf, "%s", arg);
    *count = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        if (*count == MAX_LIST || !parse(tok, *count, dst))
            return false;
        (*count)++;
    }
    return *count > 0;
}

static bool parse_int(const char *s, int i, void *dst) {
    char *end;
    long v = strtol(s, &end, 10);
    if (*end || v < 1 || v > 1 << 20)
        return false;
    ((int *)dst)[i] = (int)v;
    return true;
}

static bool parse_shape(const char *s, int i, void *dst) {
    long long k, m;
    char tail;
    if (sscanf(s, "%lldx%lld%c", &k, &m, &tail) != 2 || k < 1 || m < 1 || k > 1 << 20 ||
        m > 1 << 24)
        return false;
    ((struct shape *)dst)[i] = (struct shape){k, m};
    return true;
}

static bool parse_type(const char *s, int i, void *dst) {
    enum fx_type t;
    if (!fx_type_from_name(s, &t) || !fx_kernels_named("generic")->types[t].vec_dot)
        return false;
    ((enum fx_type *)dst)[i] = t;
    return true;
}

static bool parse_table(const char *s, int i, void *dst) {
    const struct fx_kernels *k = fx_kernels_named(s);
    if (!k)
        return false;
    ((const struct fx_kernels **)dst)[i] = k;
    return true;
}

static int all_types(enum fx_type *out) {
    static const enum fx_type all[] = {
        FX_TYPE_F32,  FX_TYPE_F16,  FX_TYPE_BF16,   FX_TYPE_Q8_0,   FX_TYPE_Q4_0, FX_TYPE_Q4_1,
        FX_TYPE_Q5_0, FX_TYPE_Q5_1, FX_TYPE_MXFP4,  FX_TYPE_Q2_K,   FX_TYPE_Q3_K, FX_TYPE_Q4_K,
        FX_TYPE_Q5_K, FX_TYPE_Q6_K, FX_TYPE_IQ4_NL, FX_TYPE_IQ4_XS,
    };
    _Static_assert(sizeof all / sizeof all[0] <= MAX_LIST, "every type fits the list");
    memcpy(out, all, sizeof all);
    return (int)(sizeof all / sizeof all[0]);
}

static int all_tables(const struct fx_kernels **out) {
    static const char *const names[] = {"generic", "avx2", "avx512"};
    int n = 0;
    for (int i = 0; i < 3; i++)
        if (fx_kernels_named(names[i]))
            out[n++] = fx_kernels_named(names[i]);
    return n;
}

/* Fills o from argv; 0 on success, else the exit status. */
static int parse_opts(int argc, char **argv, struct opts *o) {
    enum { OPT_RUNS = 256, OPT_MIN_TIME, OPT_COLD, OPT_NO_BW, OPT_CPU_TIME };
    static const struct option longs[] = {
        {"types", required_argument, NULL, 't'},
        {"tables", required_argument, NULL, 'k'},
        {"sizes", required_argument, NULL, 's'},
        {"rows", required_argument, NULL, 'r'},
        {"threads", required_argument, NULL, 'j'},
        {"pack", required_argument, NULL, 'p'},
        {"runs", required_argument, NULL, OPT_RUNS},
        {"min-time", required_argument, NULL, OPT_MIN_TIME},
        {"cold-mb", required_argument, NULL, OPT_COLD},
        {"no-bandwidth", no_argument, NULL, OPT_NO_BW},
        {"cpu-time", no_argument, NULL, OPT_CPU_TIME},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    *o = (struct opts){
        .pack = 1, .runs = 5, .min_time = 0.1, .cold_bytes = 512ll << 20, .bandwidth = 1};
    parse_list("q8_0,q4_0,q4_K,q6_K", &o->n_types, parse_type, o->types);
    o->tables[0] = fx_kernels();
    o->n_tables = 1;
    parse_list("576x1536,2048x8192,4096x4096", &o->n_shapes, parse_shape, o->shapes);
    parse_list("1,8,512", &o->n_rows, parse_int, o->rows);
    parse_list("1,2", &o->n_threads, parse_int, o->threads);
    optind = 1;
    for (int c; (c = getopt_long(argc, argv, "t:k:s:r:j:p:h", longs, NULL)) != -1;) {
        bool ok = true;
        char *end;
        switch (c) {
        case 't':
            if (strcmp(optarg, "all") == 0)
                o->n_types = all_types(o->types);
            else
                ok = parse_list(optarg, &o->n_types, parse_type, o->types);
            break;
        case 'k':
            if (strcmp(optarg, "all") == 0)
                o->n_tables = all_tables(o->tables);
            else
                ok = parse_list(optarg, &o->n_tables, parse_table, (void *)o->tables);
            break;
        case 's':
            ok = parse_list(optarg, &o->n_shapes, parse_shape, o->shapes);
            break;
        case 'r':
            ok = parse_list(optarg, &o->n_rows, parse_int, o->rows);
            break;
        case 'j':
            ok = parse_list(optarg, &o->n_threads, parse_int, o->threads);
            break;
        case 'p':
            o->pack = strcmp(optarg, "no") == 0 ? 0 : strcmp(optarg, "yes") == 0 ? 1 : 2;
            ok = o->pack != 2 || strcmp(optarg, "both") == 0;
            break;
        case OPT_RUNS:
            ok = parse_int(optarg, 0, &o->runs);
            break;
        case OPT_MIN_TIME:
            o->min_time = strtod(optarg, &end);
            ok = !*end && o->min_time > 0 && o->min_time < 100;
            break;
        case OPT_COLD: {
            long v = strtol(optarg, &end, 10);
            ok = !*end && v >= 0 && v <= 1 << 20;
            o->cold_bytes = (int64_t)v << 20;
            break;
        }
        case OPT_NO_BW:
            o->bandwidth = 0;
            break;
        case OPT_CPU_TIME:
            o->cpu_time = 1;
            break;
        case 'h':
            usage(stdout);
            return -1;
        default:
            usage(stderr);
            return 2;
        }
        if (!ok) {
            fprintf(stderr, "ferrox bench-kernels: bad value '%s' for -%c\n", optarg,
                    c < 256 ? c : '-');
            return 2;
        }
    }
    if (optind < argc) {
        usage(stderr);
        return 2;
    }
    return 0;
}

/* ---- timing -------------------------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *x, int n) {
    qsort(x, (size_t)n, sizeof *x, cmp_double);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

/* One case's state, shared by the workers. */
struct job {
    const struct fx_kernels *k;
    struct fx_mat *mats; /* [n_mats] copies */
    int n_mats;
    enum fx_type act_type;
    const float *x; /* [rows][K] f32 activations */
    void *act;      /* [rows] quantized rows, act_stride bytes apart */
    uint64_t act_stride;
    int rows;
    float *out;         /* [rows][M] */
    const uint8_t *buf; /* bandwidth: the buffer to read, buf_bytes long */
    uint64_t buf_bytes;
    uint64_t sink;
    int iters;
    bool cpu_time;          /* see struct opts */
    _Atomic int64_t max_ns; /* the largest worker time of a run so far (cpu_time) */
    double seconds;         /* the run's time for the iterations */
};

/* Seconds on the wall clock, or of the calling thread's CPU time. */
static double job_now(const struct job *j) {
    return fx_clock_seconds(j->cpu_time ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC);
}

/* A worker's time for the run's iterations, t0 its clock at their start: worker 0's wall-clock
 * time, or the largest worker's CPU time (every worker calls this before the run returns). */
static void record_time(struct job *j, const struct fx_worker *w, double t0) {
    double dt = job_now(j) - t0;
    if (!j->cpu_time) {
        if (w->ith == 0)
            j->seconds = dt;
        return;
    }
    int64_t ns = (int64_t)(dt * 1e9), seen = atomic_load(&j->max_ns);
    while (ns > seen && !atomic_compare_exchange_weak(&j->max_ns, &seen, ns))
        ;
}

/* Runs body over the job once; its time in j->seconds. */
static bool run_once(struct fx_pool *pool, fx_par_fn body, struct job *j) {
    atomic_store(&j->max_ns, 0);
    if (fx_par_run(pool, body, j) != FX_OK)
        return false;
    if (j->cpu_time)
        j->seconds = 1e-9 * (double)atomic_load(&j->max_ns);
    return true;
}

static void matmul_body(const struct fx_worker *w, void *arg) {
    struct job *j = arg;
    int64_t k = j->mats[0].ne0;
    fx_par_barrier(w);
    double t0 = job_now(j);
    for (int it = 0; it < j->iters; it++) {
        const struct fx_mat *m = &j->mats[it % j->n_mats];
        const void *act = j->x;
        uint64_t stride = (uint64_t)k * sizeof(float);
        if (j->act_type != FX_TYPE_F32) {
            fx_quantize_act(j->k, j->act_type, j->x, k, j->rows, k, j->act, j->act_stride, w->ith,
                            w->nth);
            fx_par_barrier(w);
            act = j->act;
            stride = j->act_stride;
        }
        fx_matmul(j->k, m, act, stride, j->rows, j->out, m->ne1, w->ith, w->nth, NULL);
        fx_par_barrier(w);
    }
    record_time(j, w, t0);
}

/* 16 bytes as two 64-bit lanes (a GCC vector: SSE2 on any x86-64, no -m flag); the buffer is
 * 64-byte aligned, so the loads below are aligned. */
typedef uint64_t u64x2 __attribute__((vector_size(16)));

/* Reads this worker's share of the buffer (64-byte lines split like matmul rows) with 16-byte
 * loads into four sums, prefetching 4 KiB ahead: as fast as this machine streams memory. */
static void read_body(const struct fx_worker *w, void *arg) {
    struct job *j = arg;
    int64_t b, e;
    fx_par_range((int64_t)(j->buf_bytes / 64), w->ith, w->nth, 1, &b, &e);
    fx_par_barrier(w);
    double t0 = job_now(j);
    u64x2 s0 = {0, 0}, s1 = s0, s2 = s0, s3 = s0;
    for (int it = 0; it < j->iters; it++) {
        const uint8_t *p = j->buf + b * 64, *end = j->buf + e * 64;
        for (; p < end; p += 64) {
            __builtin_prefetch(p + 4096);
            s0 += *(const u64x2 *)p;
            s1 += *(const u64x2 *)(p + 16);
            s2 += *(const u64x2 *)(p + 32);
            s3 += *(const u64x2 *)(p + 48);
        }
        fx_par_barrier(w);
    }
    record_time(j, w, t0);
    if (w->ith == 0) {
        u64x2 t = s0 + s1 + s2 + s3;
        j->sink = t[0] + t[1];
    }
}

/* Times `body` over runs of at least min_time: the median seconds per iteration. */
static double time_job(struct fx_pool *pool, fx_par_fn body, struct job *j, const struct opts *o) {
    /* Calibrate: double the iterations until one run takes a tenth of min_time. */
    j->iters = 1;
    for (;;) {
        if (!run_once(pool, body, j))
            return NAN;
        if (j->seconds >= 0.1 * o->min_time || j->iters >= 1 << 24)
            break;
        j->iters *= 2;
    }
    double per = j->seconds / j->iters;
    j->iters = (int)fmax(1.0, ceil(o->min_time / fmax(per, 1e-9)));
    double t[64];
    int runs = o->runs < 64 ? o->runs : 64;
    for (int r = 0; r < runs; r++) {
        if (!run_once(pool, body, j))
            return NAN;
        t[r] = j->seconds / j->iters;
    }
    return median(t, runs);
}

/* ---- weights ------------------------------------------------------------------------------- */

static uint64_t rng_next(uint64_t *s) {
    *s += 0x9e3779b97f4a7c15ull;
    uint64_t z = *s;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Roughly normal floats (sum of uniforms), scaled like trained weights. */
static void random_floats(float *x, int64_t n, uint64_t *seed) {
    for (int64_t i = 0; i < n; i++) {
        double s = 0;
        for (int k = 0; k < 4; k++)
            s += (double)(rng_next(seed) >> 11) * 0x1p-53 - 0.5;
        x[i] = (float)(s * 0.05);
    }
}

/* A K x M matrix of `type`: a few distinct rows encoded with the reference quantizer (slow for
 * the K formats, hence few), repeated. */
static uint8_t *make_weights(enum fx_type type, struct shape sh, uint64_t row_bytes) {
    enum { DISTINCT = 16 };
    uint8_t *w = fx_alloc_streamed(row_bytes * (uint64_t)sh.m);
    float *x = malloc((size_t)sh.k * sizeof(float));
    if (!w || !x) {
        free(w);
        free(x);
        return NULL;
    }
    uint64_t seed = 42;
    for (int64_t r = 0; r < sh.m; r++) {
        if (r < DISTINCT) {
            random_floats(x, sh.k, &seed);
            fx_kernels_named("generic")->types[type].from_float(x, w + r * row_bytes, sh.k);
        } else {
            memcpy(w + r * row_bytes, w + (r % DISTINCT) * row_bytes, row_bytes);
        }
    }
    free(x);
    return w;
}

/* ---- one case ------------------------------------------------------------------------------ */

/* The copies a case cycles through: n matrices of one content, packed for a table or in the
 * file's layout. */
struct copies {
    struct fx_mat *mats; /* [n] */
    uint8_t **owned;     /* [n] buffers made here (the packed copies, or file-layout copies
                          * 1..n-1; copy 0 of the file layout is the caller's) */
    int n;
    uint64_t bytes; /* of one copy as the kernels read it */
};

static void free_copies(struct copies *c) {
    for (int i = 0; c->owned && i < c->n; i++)
        free(c->owned[i]);
    free(c->owned);
    free(c->mats);
    memset(c, 0, sizeof *c);
}

static bool make_copies(struct copies *c, const struct fx_kernels *k, const struct fx_mat *mat,
                        bool packed, int64_t cold_bytes) {
    uint64_t one = packed ? fx_mat_pack_bytes(k, mat) : mat->row_bytes * (uint64_t)mat->ne1;
    c->bytes = one;
    c->n = cold_bytes > 0 ? (int)((uint64_t)cold_bytes / one + 1) : 1;
    c->mats = calloc((size_t)c->n, sizeof *c->mats);
    c->owned = calloc((size_t)c->n, sizeof *c->owned);
    if (!c->mats || !c->owned)
        return false;
    for (int i = 0; i < c->n; i++) {
        c->mats[i] = *mat;
        if (!packed && i == 0)
            continue;
        c->owned[i] = fx_alloc_streamed(one);
        if (!c->owned[i])
            return false;
        if (packed) {
            fx_mat_pack(k, mat, c->owned[i], 0, 1);
            fx_mat_set_packed(k, &c->mats[i], c->owned[i]);
        } else {
            memcpy(c->owned[i], mat->data, one);
            c->mats[i].data = c->owned[i];
        }
    }
    return true;
}

struct result {
    double seconds; /* per call */
    double gbs, gflops;
};

static bool run_case(const struct fx_kernels *k, const struct copies *c, int rows,
                     struct fx_pool *pool, const float *x, const struct opts *o,
                     struct result *res) {
    const struct fx_mat *m = &c->mats[0];
    enum fx_type at = k->types[m->type].vec_dot_type;
    uint64_t act_stride = 0;
    fx_type_row_bytes(at, m->ne0, &act_stride);
    void *act = fx_alloc_streamed(act_stride * (uint64_t)rows);
    float *out = fx_alloc_streamed((uint64_t)(m->ne1 * rows) * sizeof(float));
    bool ok = act && out;
    if (ok) {
        struct job j = {.k = k,
                        .mats = c->mats,
                        .n_mats = c->n,
                        .act_type = at,
                        .x = x,
                        .act = act,
                        .act_stride = act_stride,
                        .rows = rows,
                        .out = out,
                        .cpu_time = o->cpu_time};
        res->seconds = time_job(pool, matmul_body, &j, o);
        res->gbs = (double)c->bytes / res->seconds * 1e-9;
        res->gflops = 2.0 * (double)m->ne0 * (double)m->ne1 * rows / res->seconds * 1e-9;
        ok = isfinite(res->seconds);
    }
    free(act);
    free(out);
    return ok;
}

/* The streaming read bandwidth of the pool with n threads over `bytes`, in memory allocated as
 * the model's packed weights are (fx_alloc_streamed: huge pages where the kernel gives them), so
 * that a decode's share of this roofline compares like with like. */
static double bandwidth(struct fx_pool *pool, int64_t bytes, const struct opts *o) {
    uint8_t *buf = fx_alloc_streamed((uint64_t)bytes);
    if (!buf)
        return NAN;
    memset(buf, 1, (size_t)bytes); /* touch every page */
    struct job j = {.buf = buf, .buf_bytes = (uint64_t)bytes, .cpu_time = o->cpu_time};
    double s = time_job(pool, read_body, &j, o);
    free(buf);
    return (double)bytes / s * 1e-9;
}

int fx_cli_bench_kernels(int argc, char **argv) {
    struct opts o;
    int rc = parse_opts(argc, argv, &o);
    if (rc)
        return rc < 0 ? 0 : rc;
    struct fx_pool *pools[MAX_LIST] = {0};
    float *x = NULL;
    for (int t = 0; t < o.n_threads; t++) {
        struct fx_error err;
        if (fx_pool_create(o.threads[t], &pools[t], &err) != FX_OK) {
            fprintf(stderr, "ferrox bench-kernels: %s\n", err.msg);
            rc = 1;
            goto done;
        }
    }
    printf("# ferrox bench-kernels: medians of %d runs of >= %.2f s of %s; weights %s\n", o.runs,
           o.min_time, o.cpu_time ? "the largest worker CPU time" : "wall-clock time",
           o.cold_bytes ? "cycle through copies filling the cold working set" : "warm (one copy)");
    int64_t bw_bytes = o.cold_bytes ? o.cold_bytes : 64ll << 20;
    if (o.bandwidth)
        for (int t = 0; t < o.n_threads; t++)
            printf("bandwidth  threads %d  %7.1f GB/s  (streaming read of %lld MiB)\n",
                   o.threads[t], bandwidth(pools[t], bw_bytes, &o), (long long)(bw_bytes >> 20));
    printf("%-8s %-6s %-11s %5s %3s %-4s %10s %8s %9s\n", "table", "type", "KxM", "rows", "thr",
           "pack", "us/call", "GB/s", "GFLOP/s");
    for (int ti = 0; ti < o.n_types; ti++) {
        enum fx_type type = o.types[ti];
        for (int si = 0; si < o.n_shapes; si++) {
            struct shape sh = o.shapes[si];
            uint64_t row_bytes;
            if (!fx_type_row_bytes(type, sh.k, &row_bytes)) {
                fprintf(stderr,
                        "ferrox bench-kernels: %s rows of %lld elements are not whole "
                        "blocks; skipped\n",
                        fx_type_name(type), (long long)sh.k);
                continue;
            }
            int max_rows = 0;
            for (int r = 0; r < o.n_rows; r++)
                max_rows = o.rows[r] > max_rows ? o.rows[r] : max_rows;
            free(x);
            x = malloc((size_t)(sh.k * max_rows) * sizeof(float));
            uint8_t *data = make_weights(type, sh, row_bytes);
            if (!x || !data) {
                fprintf(stderr, "ferrox bench-kernels: out of memory\n");
                free(data);
                rc = 1;
                goto done;
            }
            uint64_t seed = 7;
            random_floats(x, sh.k * max_rows, &seed);
            struct fx_mat mat = {
                .type = type, .ne0 = sh.k, .ne1 = sh.m, .row_bytes = row_bytes, .data = data};
            for (int ki = 0; ki < o.n_tables; ki++) {
                const struct fx_kernels *k = o.tables[ki];
                bool can_pack = fx_mat_pack_bytes(k, &mat) != 0;
                for (int pk = 0; pk < 2; pk++) {
                    bool packed = pk == 1;
                    if ((packed && (!can_pack || o.pack == 0)) ||
                        (!packed && o.pack == 1 && can_pack))
                        continue;
                    struct copies c = {0};
                    if (!make_copies(&c, k, &mat, packed, o.cold_bytes)) {
                        fprintf(stderr, "ferrox bench-kernels: out of memory\n");
                        free_copies(&c);
                        continue;
                    }
                    char name[32];
                    snprintf(name, sizeof name, "%lldx%lld", (long long)sh.k, (long long)sh.m);
                    for (int ri = 0; ri < o.n_rows; ri++) {
                        for (int t = 0; t < o.n_threads; t++) {
                            struct result res;
                            if (!run_case(k, &c, o.rows[ri], pools[t], x, &o, &res)) {
                                fprintf(stderr, "ferrox bench-kernels: a case failed\n");
                                continue;
                            }
                            printf("%-8s %-6s %-11s %5d %3d %-4s %10.1f %8.2f %9.1f\n", k->name,
                                   fx_type_name(type), name, o.rows[ri], o.threads[t],
                                   packed ? "yes" : "no", res.seconds * 1e6, res.gbs, res.gflops);
                            fflush(stdout);
                        }
                    }
                    free_copies(&c);
                }
            }
            free(data);
        }
    }
done:
    free(x);
    for (int t = 0; t < o.n_threads; t++)
        fx_pool_free(pools[t]);
    return rc;
}
