/* ferrox eval -m MODEL --ids 1,2,3 [--logits-out FILE] [--greedy N] [--sequential]
 *
 * Evaluates token ids and writes what another engine can be compared against: all-position
 * logits as raw little-endian float32 [n_ids][n_vocab], and with --greedy N the N greedy
 * continuation ids on stdout as one line. Diagnostics go to stderr. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "cli/util.h"
#include "ferrox.h"

static void usage(FILE *out) {
    fprintf(out, "usage: ferrox eval -m MODEL --ids ID,ID,... [--logits-out FILE] [--greedy N]\n"
                 "                   [--sequential] [-t THREADS] [-c CTX]\n\n"
                 "Evaluates the ids as one batch (or one token at a time with --sequential) and\n"
                 "writes all-position logits as raw little-endian float32 [n_ids x n_vocab];\n"
                 "--greedy N prints the N greedy continuation ids on stdout.\n");
}

static int evaluate(struct fx_context *ctx, const fx_token *ids, int n, bool sequential,
                    float *logits, int n_vocab) {
    struct fx_error err;
    fx_status st = FX_OK;
    if (sequential) {
        for (int i = 0; i < n && st == FX_OK; i++)
            st = fx_forward_token(ctx, ids[i], i, logits + (size_t)i * (size_t)n_vocab, &err);
    } else {
        st = fx_forward_batch(ctx, ids, n, 0, logits, &err);
    }
    if (st) {
        fprintf(stderr, "ferrox eval: %s\n", err.msg);
        return 1;
    }
    return 0;
}

static int greedy(struct fx_context *ctx, const float *last, int n_vocab, int pos, int n_gen) {
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
        if (k + 1 < n_gen && fx_forward_token(ctx, t, pos + k, row, &err) != FX_OK) {
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
    int n_gen = 0, n_threads = 0, n_ctx = 0;
    bool sequential = false;
    static const struct option opts[] = {{"model", required_argument, NULL, 'm'},
                                         {"ids", required_argument, NULL, 'i'},
                                         {"logits-out", required_argument, NULL, 'o'},
                                         {"greedy", required_argument, NULL, 'g'},
                                         {"sequential", no_argument, NULL, 's'},
                                         {"threads", required_argument, NULL, 't'},
                                         {"ctx-size", required_argument, NULL, 'c'},
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
        case 'g':
        case 't':
        case 'c': {
            int *dst = c == 'g' ? &n_gen : c == 't' ? &n_threads : &n_ctx;
            if (!fx_cli_parse_int(optarg, 0, 1 << 24, dst)) {
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
    float *logits = NULL;
    struct fx_error err;
    int rc = 1;
    double t0 = fx_cli_now();
    if (fx_model_load(model_path, NULL, &m, &err) != FX_OK) {
        fprintf(stderr, "ferrox eval: %s\n", err.msg);
        goto done;
    }
    struct fx_context_params cp = fx_context_default_params();
    cp.n_threads = n_threads;
    cp.n_ctx = n_ctx ? n_ctx : n + n_gen;
    if (fx_context_create(m, &cp, &ctx, &err) != FX_OK) {
        fprintf(stderr, "ferrox eval: %s\n", err.msg);
        goto done;
    }
    int n_vocab = fx_model_n_vocab(m);
    logits = malloc(sizeof(float) * (size_t)n * (size_t)n_vocab);
    if (!logits) {
        fprintf(stderr, "ferrox eval: out of memory for %d x %d logits\n", n, n_vocab);
        goto done;
    }
    double t1 = fx_cli_now();
    if (evaluate(ctx, ids, n, sequential, logits, n_vocab))
        goto done;
    double t2 = fx_cli_now();
    fprintf(stderr, "ferrox eval: %s (%s), %d ids %s in %.1f ms (load %.1f ms), kernels %s\n",
            model_path, fx_model_arch(m), n, sequential ? "one at a time" : "as one batch",
            (t2 - t1) * 1e3, (t1 - t0) * 1e3, fx_kernels_name());
    if (logits_out &&
        fx_cli_write_file(logits_out, logits, sizeof(float) * (size_t)n * (size_t)n_vocab)) {
        fprintf(stderr, "ferrox eval: cannot write %s: %s\n", logits_out, strerror(errno));
        goto done;
    }
    if (n_gen > 0 && greedy(ctx, logits + (size_t)(n - 1) * (size_t)n_vocab, n_vocab, n, n_gen))
        goto done;
    rc = 0;
done:
    free(logits);
    free(ids);
    fx_context_free(ctx);
    fx_model_free(m);
    return rc;
}
