/* ferrox eval -m MODEL --ids 1,2,3 [--logits-out FILE] [--greedy N] [--sequential] [--kv paged]
 *
 * Evaluates token ids and writes what another engine can be compared against: all-position
 * logits as raw little-endian float32 [n_ids][n_vocab], and with --greedy N the N greedy
 * continuation ids on stdout as one line. Diagnostics go to stderr. With --kv paged the same
 * tokens run over a paged pool (fx_forward_multi_seq for the batch, fx_forward_token_paged one
 * at a time), which must give the same bytes. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/util.h"
#include "core/clock.h"
#include "ferrox.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: ferrox eval -m MODEL --ids ID,ID,... [--logits-out FILE] [--greedy N]\n"
            "                   [--sequential] [-t THREADS] [-c CTX] [--kv contig|paged]\n"
            "                   [--block-size N] [-ctk f32|f16|q8_0] [-ctv f32|f16|q8_0]\n"
            "                   [--moe-cache SIZE] [--moe-lookahead N] [--moe-evict POLICY]\n\n"
            "Evaluates the ids as one batch (or one token at a time with --sequential) and\n"
            "writes all-position logits as raw little-endian float32 [n_ids x n_vocab];\n"
            "--greedy N prints the N greedy continuation ids on stdout.\n\n%s",
            FX_CLI_MOE_CACHE_USAGE);
}

/* Where the tokens' keys and values go: the context's contiguous cache, or sequence seq of pool
 * (--kv paged). */
struct eval_kv {
    struct fx_context *ctx;
    struct fx_kv_pool *pool; /* NULL: contiguous */
    fx_seq_id seq;
};

static fx_status step(const struct eval_kv *e, fx_token t, int pos, float *logits,
                      struct fx_error *err) {
    return e->pool ? fx_forward_token_paged(e->ctx, e->pool, e->seq, t, pos, logits, err)
                   : fx_forward_token(e->ctx, t, pos, logits, err);
}

static fx_status batch(const struct eval_kv *e, const fx_token *ids, int n, float *logits,
                       struct fx_error *err) {
    if (!e->pool)
        return fx_forward_batch(e->ctx, ids, n, 0, logits, err);
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)n);
    fx_seq_id *seq = malloc(sizeof(fx_seq_id) * (size_t)n);
    fx_status st = FX_ERR_NOMEM;
    if (pos && seq) {
        for (int i = 0; i < n; i++)
            pos[i] = i, seq[i] = e->seq;
        struct fx_batch b = {.n = n, .token = ids, .pos = pos, .seq = seq, .logits = NULL};
        st = fx_forward_multi_seq(e->ctx, e->pool, &b, logits, err);
    } else {
        snprintf(err->msg, sizeof err->msg, "out of memory for a batch of %d rows", n);
    }
    free(pos);
    free(seq);
    return st;
}

static int evaluate(const struct eval_kv *e, const fx_token *ids, int n, bool sequential,
                    float *logits, int n_vocab) {
    struct fx_error err;
    fx_status st = FX_OK;
    if (sequential) {
        for (int i = 0; i < n && st == FX_OK; i++)
            st = step(e, ids[i], i, logits + (size_t)i * (size_t)n_vocab, &err);
    } else {
        st = batch(e, ids, n, logits, &err);
    }
    if (st) {
        fprintf(stderr, "ferrox eval: %s\n", err.msg);
        return 1;
    }
    return 0;
}

static int greedy(const struct eval_kv *e, const float *last, int n_vocab, int pos, int n_gen) {
    float *row = malloc(sizeof(float) * (size_t)n_vocab);
    if (!row) {
        fprintf(stderr, "ferrox eval: out of memory\n");
        return 1;
    }
    memcpy(row, last, sizeof(float) * (size_t)n_vocab);
    struct fx_error err;
    for (int k = 0; k < n_gen; k++) {
        fx_token t = fx_cli_argmax(row, n_vocab);
        printf(k ? " %d" : "%d", t);
        if (k + 1 < n_gen && step(e, t, pos + k, row, &err) != FX_OK) {
            fprintf(stderr, "\nferrox eval: %s\n", err.msg);
            free(row);
            return 1;
        }
    }
    printf("\n");
    free(row);
    return 0;
}

int fx_cli_eval(int argc, char **argv) {
    const char *model_path = NULL, *ids_text = NULL, *logits_out = NULL;
    int n_gen = 0, n_threads = 0, n_ctx = 0, block_size = 16;
    bool sequential = false, paged = false;
    struct fx_model_params mp = fx_model_default_params();
    struct fx_context_params cp = fx_context_default_params();
    static const struct option opts[] = {{"model", required_argument, NULL, 'm'},
                                         {"ids", required_argument, NULL, 'i'},
                                         {"logits-out", required_argument, NULL, 'o'},
                                         {"greedy", required_argument, NULL, 'g'},
                                         {"sequential", no_argument, NULL, 's'},
                                         {"threads", required_argument, NULL, 't'},
                                         {"ctx-size", required_argument, NULL, 'c'},
                                         {"kv", required_argument, NULL, 'k'},
                                         {"block-size", required_argument, NULL, 'B'},
                                         {"cache-type-k", required_argument, NULL, 'K'},
                                         {"cache-type-v", required_argument, NULL, 'V'},
                                         {"moe-cache", required_argument, NULL, 'M'},
                                         {"moe-lookahead", required_argument, NULL, 'L'},
                                         {"moe-evict", required_argument, NULL, 'E'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    optind = 1;
    for (int c; (c = getopt_long(argc, argv, "m:t:c:h", opts, NULL)) != -1;) {
        switch (c) {
        case 'm':
            model_path = optarg;
            break;
        case 'i':
            ids_text = optarg;
            break;
        case 'o':
            logits_out = optarg;
            break;
        case 's':
            sequential = true;
            break;
        case 'k':
            if (strcmp(optarg, "paged") != 0 && strcmp(optarg, "contig") != 0) {
                fprintf(stderr, "ferrox eval: --kv wants contig or paged, got '%s'\n", optarg);
                return 2;
            }
            paged = strcmp(optarg, "paged") == 0;
            break;
        case 'K':
        case 'V':
            if (!fx_cli_parse_kv_type(optarg, c == 'K' ? &cp.type_k : &cp.type_v)) {
                fprintf(stderr, "ferrox eval: %s wants f32, f16 or q8_0, got '%s'\n",
                        c == 'K' ? "-ctk" : "-ctv", optarg);
                return 2;
            }
            break;
        case 'M':
            if (!fx_cli_parse_size(optarg, &mp.moe_cache_bytes) || mp.moe_cache_bytes == 0) {
                fprintf(stderr,
                        "ferrox eval: --moe-cache wants a size (4G, 512M, 256K), got '%s'\n",
                        optarg);
                return 2;
            }
            break;
        case 'L':
            if (!fx_cli_parse_int(optarg, 0, FX_MOE_LOOKAHEAD_MAX, &mp.moe_lookahead)) {
                fprintf(stderr, "ferrox eval: --moe-lookahead wants 0 to %d layers, got '%s'\n",
                        FX_MOE_LOOKAHEAD_MAX, optarg);
                return 2;
            }
            break;
        case 'E':
            if (!fx_cli_parse_moe_evict(optarg, &mp.moe_evict)) {
                fprintf(stderr, "ferrox eval: --moe-evict wants quota, lru or lfu, got '%s'\n",
                        optarg);
                return 2;
            }
            break;
        case 'g':
        case 't':
        case 'c':
        case 'B': {
            int *dst = c == 'g' ? &n_gen : c == 't' ? &n_threads : c == 'c' ? &n_ctx : &block_size;
            if (!fx_cli_parse_int(optarg, c == 'B' ? 1 : 0, 1 << 24, dst)) {
                fprintf(stderr, "ferrox eval: bad number '%s'\n", optarg);
                return 2;
            }
            break;
        }
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (!model_path || !ids_text || optind != argc) {
        usage(stderr);
        return 2;
    }
    fx_token *ids = NULL;
    int n = 0;
    if (!fx_cli_parse_ids(ids_text, &ids, &n) || n == 0) {
        fprintf(stderr, "ferrox eval: --ids wants comma-separated token ids, got '%s'\n", ids_text);
        free(ids);
        return 2;
    }

    struct fx_model *m = NULL;
    struct fx_context *ctx = NULL;
    struct eval_kv e = {0};
    float *logits = NULL;
    struct fx_error err;
    int rc = 1;
    double t0 = fx_now();
    if (fx_model_load(model_path, &mp, &m, &err) != FX_OK) {
        fprintf(stderr, "ferrox eval: %s\n", err.msg);
        goto done;
    }
    cp.n_threads = n_threads;
    cp.n_ctx = n_ctx ? n_ctx : n + n_gen;
    cp.paged_only = paged;
    if (fx_context_create(m, &cp, &ctx, &err) != FX_OK) {
        fprintf(stderr, "ferrox eval: %s\n", err.msg);
        goto done;
    }
    e.ctx = ctx;
    if (paged) {
        struct fx_kv_pool_params pp = fx_kv_pool_default_params();
        pp.block_size = block_size;
        pp.n_blocks = (cp.n_ctx + block_size - 1) / block_size;
        pp.type_k = cp.type_k;
        pp.type_v = cp.type_v;
        if (fx_kv_pool_create(m, &pp, &e.pool, &err) != FX_OK ||
            fx_kv_seq_create(e.pool, &e.seq, &err) != FX_OK) {
            fprintf(stderr, "ferrox eval: %s\n", err.msg);
            goto done;
        }
    }
    int n_vocab = fx_model_n_vocab(m);
    logits = malloc(sizeof(float) * (size_t)n * (size_t)n_vocab);
    if (!logits) {
        fprintf(stderr, "ferrox eval: out of memory for %d x %d logits\n", n, n_vocab);
        goto done;
    }
    double t1 = fx_now();
    if (evaluate(&e, ids, n, sequential, logits, n_vocab))
        goto done;
    double t2 = fx_now();
    fprintf(stderr,
            "ferrox eval: %s (%s), %d ids %s in %.1f ms (load %.1f ms), kernels %s, %s KV %s/%s\n",
            model_path, fx_model_arch(m), n, sequential ? "one at a time" : "as one batch",
            (t2 - t1) * 1e3, (t1 - t0) * 1e3, fx_kernels_name(), paged ? "paged" : "contiguous",
            fx_cli_kv_type_name(cp.type_k), fx_cli_kv_type_name(cp.type_v));
    if (logits_out &&
        fx_cli_write_file(logits_out, logits, sizeof(float) * (size_t)n * (size_t)n_vocab)) {
        fprintf(stderr, "ferrox eval: cannot write %s: %s\n", logits_out, strerror(errno));
        goto done;
    }
    if (n_gen > 0 && greedy(&e, logits + (size_t)(n - 1) * (size_t)n_vocab, n_vocab, n, n_gen))
        goto done;
    rc = 0;
done:
    free(logits);
    free(ids);
    fx_kv_pool_free(e.pool);
    fx_context_free(ctx);
    fx_model_free(m);
    return rc;
}
