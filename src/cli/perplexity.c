/* ferrox perplexity -m MODEL -f TEXT [-c CTX] [-b BATCH] [-t N] [--chunks N]
 *
 * Perplexity as llama.cpp's perplexity tool computes it, so that the figures compare: the whole
 * text, less one final newline (llama.cpp's -f drops it), is tokenized once (BOS added as the
 * vocabulary says) and cut into chunks of CTX tokens
 * (the remainder is dropped); each chunk is evaluated from an empty cache with its first token
 * replaced by BOS when the vocabulary adds one, and only the second half of each window is
 * scored - the logits at positions CTX/2 .. CTX-2 predicting the tokens after them - so every
 * scored token has at least CTX/2 tokens of context. After each chunk the running figure is
 * printed as "[i]ppl,"; at the end "Final estimate: PPL = X +/- Y", Y being the standard error
 * of the mean negative log-likelihood carried through exp(). */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/gen.h"
#include "cli/util.h"
#include "core/clock.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: ferrox perplexity -m MODEL -f FILE [-c CTX] [-b BATCH] [-t N] [--chunks N]\n\n"
            "Perplexity of the text in FILE as llama.cpp's perplexity tool computes it: chunks of\n"
            "CTX tokens (default 512), each scored on its second half. The text must hold at\n"
            "least 2 x CTX tokens.\n\n"
            "  -m, --model FILE     a GGUF model\n"
            "  -f, --file FILE      the text ('-': standard input)\n"
            "  -c, --ctx-size N     tokens per chunk (default 512)\n"
            "  -b, --batch-size N   tokens evaluated together (default 2048, at most CTX)\n"
            "  -t, --threads N      worker threads (default: one per CPU)\n"
            "  --chunks N           score at most N chunks (default: all)\n"
            "  -ctk, --cache-type-k T  KV cache type of keys: f32, f16 or q8_0 (default %s)\n"
            "  -ctv, --cache-type-v T  KV cache type of values (default %s)\n",
            fx_cli_kv_type_name(fx_context_default_params().type_k),
            fx_cli_kv_type_name(fx_context_default_params().type_v));
}

struct opts {
    const char *model, *file;
    int n_ctx, n_batch, n_threads, max_chunks;
    enum fx_type type_k, type_v;
};

static int parse_args(int argc, char **argv, struct opts *o) {
    static const struct option opts[] = {{"model", required_argument, NULL, 'm'},
                                         {"file", required_argument, NULL, 'f'},
                                         {"ctx-size", required_argument, NULL, 'c'},
                                         {"batch-size", required_argument, NULL, 'b'},
                                         {"threads", required_argument, NULL, 't'},
                                         {"chunks", required_argument, NULL, 'k'},
                                         {"cache-type-k", required_argument, NULL, 'K'},
                                         {"cache-type-v", required_argument, NULL, 'V'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    optind = 1;
    for (int c; (c = getopt_long(argc, argv, "m:f:c:b:t:h", opts, NULL)) != -1;) {
        int *num = NULL;
        long lo = 0;
        switch (c) {
        case 'm':
            o->model = optarg;
            continue;
        case 'f':
            o->file = optarg;
            continue;
        case 'c':
            num = &o->n_ctx, lo = 4;
            break;
        case 'b':
            num = &o->n_batch, lo = 1;
            break;
        case 't':
            num = &o->n_threads, lo = 0;
            break;
        case 'k':
            num = &o->max_chunks, lo = 1;
            break;
        case 'K':
        case 'V':
            if (!fx_cli_parse_kv_type(optarg, c == 'K' ? &o->type_k : &o->type_v)) {
                fprintf(stderr, "ferrox perplexity: %s wants f32, f16 or q8_0, got '%s'\n",
                        c == 'K' ? "-ctk" : "-ctv", optarg);
                return 2;
            }
            continue;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
        if (!fx_cli_parse_int(optarg, lo, 1 << 24, num)) {
            fprintf(stderr, "ferrox perplexity: bad value '%s' for %s (a number >= %ld)\n", optarg,
                    c == 'k'   ? "--chunks"
                    : c == 'c' ? "-c"
                    : c == 'b' ? "-b"
                               : "-t",
                    lo);
            return 2;
        }
    }
    if (optind != argc || !o->model || !o->file) {
        usage(stderr);
        return 2;
    }
    return -1;
}

/* -log p(tok) under softmax(logits), as llama.cpp's tool computes it: the maximum and the
 * exponentials in float, their sum in double. */
static double neg_log_prob(const float *logits, int n_vocab, fx_token tok) {
    float max = logits[0];
    for (int i = 1; i < n_vocab; i++)
        max = logits[i] > max ? logits[i] : max;
    double sum = 0.0;
    for (int i = 0; i < n_vocab; i++)
        sum += expf(logits[i] - max);
    return -((double)(logits[tok] - max) - log(sum));
}

/* Running sums over the scored tokens. */
struct score {
    double nll, nll2;
    long count;
};

/* Evaluates one chunk of n_ctx tokens and adds its second half to s. window: [n_ctx] scratch;
 * logits: [n_rows][n_vocab]. */
static fx_status score_chunk(struct fx_context *ctx, const struct fx_vocab *v, const fx_token *tok,
                             int n_ctx, fx_token *window, float *logits, int n_rows,
                             struct score *s, struct fx_error *err) {
    int n_vocab = fx_model_n_vocab(fx_context_model(ctx));
    int first = n_ctx / 2;
    /* The last token is only a target: it is never evaluated. */
    memcpy(window, tok, (size_t)(n_ctx - 1) * sizeof *window);
    if (fx_vocab_add_bos(v))
        window[0] = fx_vocab_bos(v);
    fx_status st = fx_forward_batch_last(ctx, window, first, 0, logits, err);
    for (int p = first; p < n_ctx - 1 && st == FX_OK; p += n_rows) {
        int k = n_ctx - 1 - p < n_rows ? n_ctx - 1 - p : n_rows;
        if ((st = fx_forward_batch(ctx, window + p, k, p, logits, err)))
            break;
        for (int r = 0; r < k; r++) {
            double nll =
                neg_log_prob(logits + (size_t)r * (size_t)n_vocab, n_vocab, tok[p + r + 1]);
            s->nll += nll;
            s->nll2 += nll * nll;
            s->count++;
        }
    }
    return st;
}

static void progress(int done, int total, double seconds_per_chunk, bool tty) {
    double eta = seconds_per_chunk * (total - done);
    if (tty) {
        fprintf(stderr, "\rperplexity: chunk %d/%d, %.2f s per chunk, ETA %.1f s\033[K", done,
                total, seconds_per_chunk, eta);
        if (done == total)
            fprintf(stderr, "\r\033[K");
    } else if (done == 1) {
        fprintf(stderr, "perplexity: %.2f seconds per chunk, ETA %.2f minutes\n", seconds_per_chunk,
                eta / 60.0);
    }
}

int fx_cli_perplexity(int argc, char **argv) {
    struct opts o = {.n_ctx = 512,
                     .n_batch = 2048,
                     .type_k = fx_context_default_params().type_k,
                     .type_v = fx_context_default_params().type_v};
    int rc = parse_args(argc, argv, &o);
    if (rc >= 0)
        return rc;
    rc = 1;
    struct fx_cli_model cm = {0};
    struct fx_context *ctx = NULL;
    fx_token *tokens = NULL, *window = NULL;
    float *logits = NULL;
    struct fx_error err;
    size_t len, n_tokens;
    char *text = fx_cli_read_file(o.file, &len);
    if (!text) {
        fprintf(stderr, "ferrox perplexity: cannot read %s: %s\n", o.file, strerror(errno));
        goto done;
    }
    if (len > 0 && text[len - 1] == '\n') /* llama.cpp's -f drops one final newline */
        text[--len] = '\0';
    if (!fx_cli_model_load("perplexity", o.model, NULL, &cm))
        goto done;
    const struct fx_model *m = cm.model;
    const struct fx_vocab *v = cm.vocab;
    if (fx_vocab_add_eos(v)) {
        fprintf(stderr,
                "ferrox perplexity: %s: the vocabulary adds EOS to every text, which "
                "llama.cpp's perplexity does not handle either\n",
                o.model);
        goto done;
    }
    if (fx_tokenize_alloc(v, text, len, true, false, &tokens, &n_tokens, &err) != FX_OK) {
        fprintf(stderr, "ferrox perplexity: tokenizing %s: %s\n", o.file, err.msg);
        goto done;
    }
    for (size_t i = 0; i < n_tokens; i++)
        if (tokens[i] >= fx_model_n_vocab(m)) {
            fprintf(stderr, "ferrox perplexity: %s: token %d is outside the model's %d outputs\n",
                    o.model, tokens[i], fx_model_n_vocab(m));
            goto done;
        }
    if (n_tokens < 2 * (size_t)o.n_ctx) {
        fprintf(stderr,
                "ferrox perplexity: %s is %zu tokens; a context of %d needs at least %d "
                "(2 x CTX): give a longer text or a smaller -c\n",
                o.file, n_tokens, o.n_ctx, 2 * o.n_ctx);
        goto done;
    }
    if (o.n_ctx > fx_model_n_ctx_train(m))
        fprintf(stderr,
                "ferrox perplexity: warning: the model was trained on %d tokens of "
                "context (%d asked)\n",
                fx_model_n_ctx_train(m), o.n_ctx);
    int n_chunk = (int)(n_tokens / (size_t)o.n_ctx);
    if (o.max_chunks > 0 && o.max_chunks < n_chunk)
        n_chunk = o.max_chunks;
    int n_batch = o.n_batch < o.n_ctx ? o.n_batch : o.n_ctx;
    struct fx_context_params cp = fx_context_default_params();
    cp.n_ctx = o.n_ctx;
    cp.n_batch = n_batch;
    cp.n_threads = o.n_threads;
    cp.type_k = o.type_k;
    cp.type_v = o.type_v;
    if (fx_context_create(m, &cp, &ctx, &err) != FX_OK) {
        fprintf(stderr, "ferrox perplexity: %s\n", err.msg);
        goto done;
    }
    /* Scored rows are evaluated n_batch at a time (at most the half window). */
    int n_rows = o.n_ctx - 1 - o.n_ctx / 2 < n_batch ? o.n_ctx - 1 - o.n_ctx / 2 : n_batch;
    int n_vocab = fx_model_n_vocab(m);
    window = malloc((size_t)o.n_ctx * sizeof *window);
    logits = malloc((size_t)n_rows * (size_t)n_vocab * sizeof *logits);
    if (!window || !logits) {
        fprintf(stderr, "ferrox perplexity: out of memory for %d x %d logits\n", n_rows, n_vocab);
        goto done;
    }
    fprintf(stderr,
            "perplexity: %s: %zu tokens, %d chunks of %d tokens (second half scored), batch %d\n",
            o.file, n_tokens, n_chunk, o.n_ctx, n_batch);
    bool tty = isatty(STDERR_FILENO);
    struct score s = {0};
    double t0 = fx_now();
    for (int i = 0; i < n_chunk; i++) {
        if (score_chunk(ctx, v, tokens + (size_t)i * (size_t)o.n_ctx, o.n_ctx, window, logits,
                        n_rows, &s, &err) != FX_OK) {
            fprintf(stderr, "\nferrox perplexity: chunk %d: %s\n", i + 1, err.msg);
            goto done;
        }
        printf("[%d]%.4f,", i + 1, exp(s.nll / (double)s.count));
        fflush(stdout);
        progress(i + 1, n_chunk, (fx_now() - t0) / (i + 1), tty);
    }
    printf("\n");
    double mean = s.nll / (double)s.count;
    double var = s.nll2 / (double)s.count - mean * mean;
    double ppl = exp(mean);
    if (var > 0 && s.count > 1)
        printf("Final estimate: PPL = %.4f +/- %.5f\n", ppl,
               sqrt(var / (double)(s.count - 1)) * ppl);
    else
        printf("Final estimate: PPL = %.4f (every token scored the same: no uncertainty)\n", ppl);
    rc = 0;
done:
    free(logits);
    free(window);
    free(tokens);
    free(text);
    fx_context_free(ctx);
    fx_cli_model_free(&cm);
    return rc;
}
