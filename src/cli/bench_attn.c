/* ferrox bench-attn: the speed of decode (or prefill) attention per KV cache type at a given
 * depth.
 *
 * A case is (KV types, depth, head shape, threads). Its body is what the decoder's attention does
 * for one new token in one layer (or, with --rows R, for one block of R new rows, as prefill's
 * blocks of FX_ATT_BLOCK_ROWS): for every KV head, the queries of its group attend to `depth`
 * cached keys and values (row r of R to the first depth - R + r + 1, causally), fed to the kernel
 * in runs of FX_ATTN_RUN through the KV step (read in place, the kernel converting f16 and q8_0),
 * the workers claiming heads as the decoder does. The cache is filled with random rows once;
 * cycling through enough layers' worth of cache (--cold-mb) keeps every call reading from memory,
 * as a real token does. Prints the median microseconds per layer and the GB/s of cache bytes read;
 * one thread is timed in CPU time. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "cli/util.h"
#include "core/clock.h"
#include "core/par.h"
#include "decoder/decoder.h"
#include "kernels/kernels.h"
#include "kv/kv.h"

struct attn_job {
    const struct fx_kernels *k;
    struct fx_kv_contig *kv;
    int n_layer, group, rows;
    int64_t head_dim;
    int32_t depth;
    const float *q; /* [rows][n_head_kv * group][head_dim] */
    float *out;     /* [n_head_kv][rows * group][head_dim] */
    float *state;   /* [nth][state floats] */
    float *tile;    /* [nth][2][FX_ATTN_RUN][head_dim] */
    int64_t state_floats;
    int iters;
};

/* KV head g's queries against the cache, as the decoder's attention block feeds them: row r of
 * the block at position depth - rows + r sees keys 0 .. that position. */
static void attend_head(const struct attn_job *j, int il, int g, float *state, float *tile) {
    const struct fx_kernels *k = j->k;
    int64_t hd = j->head_dim;
    int64_t n_q = (int64_t)j->kv->n_head_kv * j->group;
    struct fx_kv_step s = {.kind = FX_KV_CONTIG,
                           .u.contig = {.kv = j->kv, .pos0 = j->depth - j->rows}};
    struct fx_block_keys bk = {.lo_min = 0, .pos_max = j->depth - 1}; /* every lo[r] 0 */
    for (int r = 0; r < j->rows; r++)
        bk.pos[r] = j->depth - j->rows + r;
    struct fx_attn_state st;
    k->attn_begin(&st, state, j->q + (int64_t)g * j->group * hd, n_q * hd, j->rows, j->group, hd,
                  hd);
    fx_dec_attend_runs(k, &s, il, 0, g, j->rows, &bk, tile, hd, 0.125f, 0.0f, NULL, &st);
    k->attn_finish(j->out + (int64_t)g * st.n_q * hd, hd, st.acc, st.m, st.l, NULL, st.n_q, hd);
}

static void attn_body(const struct fx_worker *w, void *arg) {
    const struct attn_job *j = arg;
    float *state = j->state + (int64_t)w->ith * j->state_floats;
    float *tile = j->tile + (int64_t)w->ith * 2 * FX_ATTN_RUN * j->head_dim;
    for (int it = 0; it < j->iters; it++) {
        int il = it % j->n_layer;
        for (int64_t g; fx_par_claim(w, j->kv->n_head_kv, &g);)
            attend_head(j, il, (int)g, state, tile);
        fx_par_barrier(w);
    }
}

/* One thread is timed in its process's CPU time, which a machine shared with other work
 * disturbs far less than the wall clock; several threads by the wall clock (their spinning at
 * barriers would count as CPU time). */
static clockid_t clock_id = CLOCK_MONOTONIC;

static double now(void) {
    return fx_clock_seconds(clock_id);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void usage(FILE *out) {
    fprintf(out,
            "usage: ferrox bench-attn [-d DEPTHS] [-ctk TYPES] [--heads KV:GROUP:DIM] [-j N]\n"
            "                         [--rows R] [--runs N] [--cold-mb MB]\n\n"
            "Decode attention of one token (or a prefill block of R rows) over DEPTH cached\n"
            "positions, per KV cache type (keys and values of the same type): microseconds per\n"
            "layer and GB/s of cache read.\n\n"
            "  -d LIST          depths (default 4096,32768)\n"
            "  -ctk LIST        cache types (default f32,f16,q8_0)\n"
            "  --heads K:G:D    K KV heads of D elements, G query heads each (default 8:4:64,\n"
            "                   llama-3.2-1b)\n"
            "  -j N             threads (default 2)\n"
            "  --rows R         new rows per layer, the last R positions of the depth, as one\n"
            "                   prefill block (default 1, decode; at most %d)\n"
            "  --runs N         timed runs, the median is printed (default 5)\n"
            "  --cold-mb MB     cache bytes cycled through (default 512)\n",
            FX_ATT_BLOCK_ROWS);
}

int fx_cli_bench_attn(int argc, char **argv) {
    int *depths = NULL, n_depths = 0, n_threads = 2, runs = 5, cold_mb = 512;
    int n_head_kv = 8, group = 4, head_dim = 64, rows = 1;
    enum fx_type types[3] = {FX_TYPE_F32, FX_TYPE_F16, FX_TYPE_Q8_0};
    int n_types = 3;
    static const struct option opts[] = {{"cache-type-k", required_argument, NULL, 'c'},
                                         {"heads", required_argument, NULL, 'H'},
                                         {"runs", required_argument, NULL, 'r'},
                                         {"rows", required_argument, NULL, 'R'},
                                         {"cold-mb", required_argument, NULL, 'm'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    optind = 1;
    for (int c; (c = getopt_long(argc, argv, "d:j:h", opts, NULL)) != -1;) {
        bool ok = true;
        switch (c) {
        case 'd':
            free(depths);
            ok = fx_cli_parse_int_list(optarg, 1, 1 << 24, &depths, &n_depths);
            break;
        case 'j':
            ok = fx_cli_parse_int(optarg, 1, 256, &n_threads);
            break;
        case 'r':
            ok = fx_cli_parse_int(optarg, 1, 1000, &runs);
            break;
        case 'R':
            ok = fx_cli_parse_int(optarg, 1, FX_ATT_BLOCK_ROWS, &rows);
            break;
        case 'm':
            ok = fx_cli_parse_int(optarg, 0, 1 << 20, &cold_mb);
            break;
        case 'H':
            ok = sscanf(optarg, "%d:%d:%d", &n_head_kv, &group, &head_dim) == 3 && n_head_kv >= 1 &&
                 n_head_kv <= 256 && group >= 1 && group <= 64 && head_dim >= 32 &&
                 head_dim <= 512 && head_dim % 32 == 0;
            break;
        case 'c': {
            n_types = 0;
            char buf[64];
            snprintf(buf, sizeof buf, "%s", optarg);
            for (char *sv = NULL, *t = strtok_r(buf, ",", &sv); t && ok;
                 t = strtok_r(NULL, ",", &sv))
                ok = n_types < 3 && fx_cli_parse_kv_type(t, &types[n_types++]);
            ok = ok && n_types > 0;
            break;
        }
        case 'h':
            usage(stdout);
            free(depths);
            return 0;
        default:
            usage(stderr);
            free(depths);
            return 2;
        }
        if (!ok) {
            fprintf(stderr, "ferrox bench-attn: bad value '%s'\n", optarg);
            free(depths);
            return 2;
        }
    }
    if (!depths) {
        static const int def[] = {4096, 32768};
        n_depths = 2;
        depths = malloc(sizeof def);
        if (!depths)
            return 1;
        memcpy(depths, def, sizeof def);
    }
    for (int d = 0; d < n_depths; d++)
        if (depths[d] < rows) {
            fprintf(stderr, "ferrox bench-attn: depth %d holds fewer than %d rows\n", depths[d],
                    rows);
            free(depths);
            return 2;
        }
    clock_id = n_threads == 1 ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC;
    const struct fx_kernels *k = fx_kernels();
    struct fx_pool *pool;
    struct fx_error err;
    if (fx_pool_create(n_threads, &pool, &err) != FX_OK) {
        fprintf(stderr, "ferrox bench-attn: %s\n", err.msg);
        free(depths);
        return 1;
    }
    int64_t n_q = (int64_t)rows * n_head_kv * group;
    int64_t state_floats = fx_attn_state_floats((int64_t)rows * group, head_dim, head_dim);
    float *q = malloc(sizeof(float) * (size_t)(n_q * head_dim));
    float *out = malloc(sizeof(float) * (size_t)(n_q * head_dim));
    float *state = aligned_alloc(64, sizeof(float) * (size_t)(state_floats * n_threads));
    float *tile =
        aligned_alloc(64, sizeof(float) * (size_t)(2 * FX_ATTN_RUN * head_dim * n_threads));
    float *row = malloc(sizeof(float) * (size_t)head_dim);
    int rc = 1;
    if (!q || !out || !state || !tile || !row)
        goto done;
    uint64_t seed = 1;
    for (int64_t i = 0; i < n_q * head_dim; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        q[i] = (float)((seed >> 40) & 0xffff) / 65536.0f - 0.5f;
    }
    printf("| kv type | depth | rows | heads (kv x group x dim) | threads | us / layer | GB/s |\n"
           "|---|---:|---:|---|---:|---:|---:|\n");
    for (int t = 0; t < n_types; t++)
        for (int d = 0; d < n_depths; d++) {
            uint64_t row_bytes;
            fx_type_row_bytes(types[t], head_dim, &row_bytes);
            uint64_t layer_bytes = 2 * row_bytes * (uint64_t)n_head_kv * (uint64_t)depths[d];
            int n_layer = (int)((uint64_t)cold_mb * (1u << 20) / layer_bytes);
            n_layer = n_layer < 1 ? 1 : n_layer;
            struct fx_kv_contig kv;
            if (fx_kv_contig_init(&kv, n_layer, depths[d], n_head_kv, head_dim, head_dim, types[t],
                                  types[t], &err) != FX_OK) {
                fprintf(stderr, "ferrox bench-attn: %s\n", err.msg);
                goto done;
            }
            for (int il = 0; il < n_layer; il++)
                for (int g = 0; g < n_head_kv; g++)
                    for (int32_t p = 0; p < depths[d]; p++) {
                        for (int i = 0; i < head_dim; i++) {
                            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
                            row[i] = (float)((seed >> 40) & 0xffff) / 32768.0f - 1.0f;
                        }
                        /* the key and value of position p of every head, as a step writes them */
                        struct fx_kv_step s = {.kind = FX_KV_CONTIG, .u.contig = {.kv = &kv}};
                        fx_kv_step_store(&s, k, il, p, g, row, row);
                    }
            kv.n_filled = depths[d];
            struct attn_job j = {.k = k,
                                 .kv = &kv,
                                 .n_layer = n_layer,
                                 .group = group,
                                 .rows = rows,
                                 .head_dim = head_dim,
                                 .depth = depths[d],
                                 .q = q,
                                 .out = out,
                                 .state = state,
                                 .tile = tile,
                                 .state_floats = state_floats,
                                 .iters = n_layer};
            /* Enough iterations for about 0.2 s a run, after one untimed pass. */
            /* fx_par_run fails only when called from inside a parallel region: not here. */
            fx_status st = fx_par_run(pool, attn_body, &j);
            double t0 = now();
            st = st ? st : fx_par_run(pool, attn_body, &j);
            double per = (now() - t0) / n_layer;
            j.iters = (int)(0.2 / (per > 1e-7 ? per : 1e-7)) + 1;
            double times[1000];
            for (int r = 0; r < runs; r++) {
                t0 = now();
                st = st ? st : fx_par_run(pool, attn_body, &j);
                times[r] = (now() - t0) / j.iters;
            }
            fx_kv_contig_release(&kv);
            if (st)
                goto done;
            qsort(times, (size_t)runs, sizeof times[0], cmp_double);
            double med = times[runs / 2];
            printf("| %s | %d | %d | %d x %d x %d | %d | %.1f | %.1f |\n",
                   fx_cli_kv_type_name(types[t]), depths[d], rows, n_head_kv, group, head_dim,
                   n_threads, med * 1e6, (double)layer_bytes / med / 1e9);
            fflush(stdout);
        }
    printf("\nkernels: %s\n", k->name);
    rc = 0;
done:
    free(q);
    free(out);
    free(state);
    free(tile);
    free(row);
    free(depths);
    fx_pool_free(pool);
    return rc;
}
