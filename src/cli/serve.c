/* ferrox serve -m MODEL [--host H] [--port P] [--api-key KEY] [-np N] [-c CTX] [options]
 *
 * An OpenAI-compatible HTTP server (src/server/) over the continuous-batching engine
 * (src/engine/). SIGINT and SIGTERM stop it gracefully: no new connections, requests in flight
 * finish within --shutdown-timeout seconds (then they are cancelled), exit status 0. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/gen.h"
#include "cli/util.h"
#include "engine/engine.h"
#include "server/server.h"

enum {
    OPT_HOST = FX_CLI_OPT_OWN,
    OPT_PORT,
    OPT_API_KEY,
    OPT_PARALLEL,
    OPT_QUEUE_MAX,
    OPT_MAX_BODY,
    OPT_TEMPLATE,
    OPT_TEMPLATE_FILE,
    OPT_ALIAS,
    OPT_POOLING,
    OPT_TIMEOUT,
    OPT_HTTP_THREADS,
    OPT_CONN_MAX,
    OPT_SHUTDOWN_TIMEOUT,
    OPT_STEP_TOKENS,
    OPT_SPEC_MAX_BATCH,
    OPT_BLOCK_SIZE,
};

static void usage(FILE *out) {
    fprintf(out,
            "usage: ferrox serve -m MODEL [--host H] [--port P] [options]\n\n"
            "An OpenAI-compatible server: /v1/completions, /v1/chat/completions (streamed or\n"
            "not), /v1/embeddings, /v1/models, /tokenize, /detokenize, /health, /metrics\n"
            "(Prometheus, vLLM's names with the prefix ferrox:) and a chat page at /.\n\n"
            "server:\n"
            "  --host H                  address to listen on (default 127.0.0.1)\n"
            "  --port P                  port (default 8080; 0: any free port, printed)\n"
            "  --api-key KEY             require 'Authorization: Bearer KEY' on /v1/...\n"
            "  -np, --parallel N         sequences decoded at once (default 4)\n"
            "  -c, --ctx-size N          KV positions of all sequences together (default 4096);\n"
            "                            one sequence holds at most this, and at most the\n"
            "                            model's training context\n"
            "  -b, --batch-size N        rows of a step at most (serve's default %d)\n"
            "  --max-num-batched-tokens N\n"
            "                            rows of a step while sequences decode: one per\n"
            "                            decoding sequence, drafts and prompt chunks share the\n"
            "                            rest (default: -b)\n"
            "  --spec-max-batch N        adaptive speculation drafts only while at most N\n"
            "                            sequences decode (default %d)\n"
            "  --block-size N            positions per KV block, the prefix cache's unit\n"
            "                            (default %d)\n"
            "  --queue-max N             requests waiting at most; past it 503 (default 64)\n"
            "  --max-body BYTES          largest request body; past it 413 (default 16 MiB)\n"
            "  --timeout S               close connections idle for S seconds (default 600)\n"
            "  --threads-http N          HTTP polling threads (default 4)\n"
            "  --conn-max N              connections at once (default 256)\n"
            "  --shutdown-timeout S      on SIGINT/SIGTERM, let requests finish for S seconds\n"
            "                            before cancelling them (default 5)\n"
            "  --alias NAME              the model name reported (default: the file's name)\n"
            "  --chat-template NAME      a built-in chat template instead of the model's\n"
            "  --chat-template-file F    a Jinja chat template from a file\n"
            "  --pooling mean|last       embeddings' pooling (default mean)\n"
            "  -v, --verbose             one line per request on stderr\n"
            "The sampling options below are the defaults of requests that do not say;\n"
            "-n is the default max_tokens. Speculation: --spec ngram (prompt lookup per\n"
            "sequence, the default) or none; draft models are not served.\n",
            FX_ENGINE_N_BATCH, FX_ENGINE_SPEC_MAX_BATCH, FX_ENGINE_BLOCK_SIZE);
    fx_cli_gen_usage(out);
}

static bool load_template(const struct fx_cli_model *m, const char *name, const char *file,
                          struct fx_chat_template **out) {
    struct fx_error err;
    fx_status st;
    *out = NULL;
    if (file) {
        size_t len;
        char *src = fx_cli_read_file(file, &len);
        if (!src) {
            fprintf(stderr, "ferrox serve: cannot read %s: %s\n", file, strerror(errno));
            return false;
        }
        st = fx_chat_template_create(src, len, out, &err);
        free(src);
    } else if (name) {
        st = fx_chat_template_builtin(name, out, &err);
    } else {
        struct fx_gguf_str src;
        st = fx_gguf_get_str(fx_model_gguf(m->model), "tokenizer.chat_template", &src, &err);
        if (st == FX_ERR_NOT_FOUND) {
            fprintf(stderr, "ferrox serve: the model has no chat template; chat requests use "
                            "chatml (choose another with --chat-template)\n");
            st = fx_chat_template_builtin("chatml", out, &err);
        } else if (st == FX_OK) {
            st = fx_chat_template_create(src.data, (size_t)src.len, out, &err);
        }
    }
    if (st != FX_OK) {
        fprintf(stderr, "ferrox serve: chat template: %s\n", err.msg);
        return false;
    }
    return true;
}

struct serve_opts {
    struct fx_cli_gen_opts gen;
    struct fx_server_params server;
    struct fx_engine_params engine;
    const char *template_name, *template_file;
    int shutdown_timeout;
};

static int parse_args(int argc, char **argv, struct serve_opts *o) {
    static const struct option opts[] = {
        FX_CLI_GEN_LONGOPTS,
        {"host", required_argument, NULL, OPT_HOST},
        {"port", required_argument, NULL, OPT_PORT},
        {"api-key", required_argument, NULL, OPT_API_KEY},
        {"parallel", required_argument, NULL, OPT_PARALLEL},
        {"queue-max", required_argument, NULL, OPT_QUEUE_MAX},
        {"max-body", required_argument, NULL, OPT_MAX_BODY},
        {"chat-template", required_argument, NULL, OPT_TEMPLATE},
        {"chat-template-file", required_argument, NULL, OPT_TEMPLATE_FILE},
        {"alias", required_argument, NULL, OPT_ALIAS},
        {"pooling", required_argument, NULL, OPT_POOLING},
        {"timeout", required_argument, NULL, OPT_TIMEOUT},
        {"threads-http", required_argument, NULL, OPT_HTTP_THREADS},
        {"conn-max", required_argument, NULL, OPT_CONN_MAX},
        {"shutdown-timeout", required_argument, NULL, OPT_SHUTDOWN_TIMEOUT},
        {"max-num-batched-tokens", required_argument, NULL, OPT_STEP_TOKENS},
        {"spec-max-batch", required_argument, NULL, OPT_SPEC_MAX_BATCH},
        {"block-size", required_argument, NULL, OPT_BLOCK_SIZE},
        {"verbose", no_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    /* llama-server's single-dash spellings. */
    fx_cli_gen_expand_aliases(argc, argv);
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "-np") == 0)
            argv[i] = (char *)"--parallel";
        else if (strcmp(argv[i], "-to") == 0)
            argv[i] = (char *)"--timeout";
    optind = 1;
    for (int c; (c = getopt_long(argc, argv, FX_CLI_GEN_SHORTOPTS "vh", opts, NULL)) != -1;) {
        int r = fx_cli_gen_opt(&o->gen, "serve", c, optarg);
        if (r < 0)
            return 2;
        if (r > 0)
            continue;
        int v = 0;
        bool ok = true;
        const char *what = NULL;
        switch (c) {
        case OPT_HOST:
            o->server.host = optarg;
            break;
        case OPT_PORT:
            ok = fx_cli_parse_int(optarg, 0, 65535, &o->server.port), what = "--port (0..65535)";
            break;
        case OPT_API_KEY:
            o->server.api_key = optarg;
            break;
        case OPT_PARALLEL:
            ok = fx_cli_parse_int(optarg, 1, 1024, &o->engine.n_parallel),
            what = "--parallel (1..1024)";
            break;
        case OPT_QUEUE_MAX:
            ok = fx_cli_parse_int(optarg, 0, 1 << 20, &o->engine.queue_max),
            what = "--queue-max (>= 0)";
            break;
        case OPT_MAX_BODY:
            ok = fx_cli_parse_int(optarg, 1, 1 << 30, &v), what = "--max-body (bytes, >= 1)";
            o->server.max_body = (size_t)v;
            break;
        case OPT_TEMPLATE:
            o->template_name = optarg;
            break;
        case OPT_TEMPLATE_FILE:
            o->template_file = optarg;
            break;
        case OPT_ALIAS:
            o->server.model_name = optarg;
            break;
        case OPT_POOLING:
            ok = strcmp(optarg, "mean") == 0 || strcmp(optarg, "last") == 0,
            what = "--pooling (mean or last)";
            o->engine.pooling = strcmp(optarg, "last") == 0 ? FX_POOLING_LAST : FX_POOLING_MEAN;
            break;
        case OPT_TIMEOUT:
            ok = fx_cli_parse_int(optarg, 1, 1 << 24, &o->server.timeout_s),
            what = "--timeout (seconds, >= 1)";
            break;
        case OPT_HTTP_THREADS:
            ok = fx_cli_parse_int(optarg, 1, 256, &o->server.http_threads),
            what = "--threads-http (1..256)";
            break;
        case OPT_CONN_MAX:
            ok = fx_cli_parse_int(optarg, 1, 1 << 16, &o->server.conn_max),
            what = "--conn-max (1..65536)";
            break;
        case OPT_STEP_TOKENS:
            ok = fx_cli_parse_int(optarg, 1, 1 << 20, &o->engine.step_tokens),
            what = "--max-num-batched-tokens (>= 1)";
            break;
        case OPT_SPEC_MAX_BATCH:
            ok = fx_cli_parse_int(optarg, 1, 1 << 20, &o->engine.spec_max_batch),
            what = "--spec-max-batch (sequences, >= 1)";
            break;
        case OPT_BLOCK_SIZE:
            ok = fx_cli_parse_int(optarg, 1, 4096, &o->engine.block_size),
            what = "--block-size (positions, 1..4096)";
            break;
        case OPT_SHUTDOWN_TIMEOUT:
            ok = fx_cli_parse_int(optarg, 0, 3600, &o->shutdown_timeout),
            what = "--shutdown-timeout (seconds, 0..3600)";
            break;
        case 'v':
            o->server.verbose = true;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
        if (!ok) {
            fprintf(stderr, "ferrox serve: bad value '%s' for %s\n", optarg, what);
            return 2;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "ferrox serve: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (!o->gen.model_path) {
        fprintf(stderr, "ferrox serve: give the model with -m FILE\n");
        return 2;
    }
    if (o->gen.spec == FX_CLI_SPEC_DRAFT || o->gen.draft_path) {
        fprintf(stderr, "ferrox serve: draft models (--spec draft, -md) are not served yet: use "
                        "--spec ngram or --spec none\n");
        return 2;
    }
    return -1;
}

int fx_cli_serve(int argc, char **argv) {
    struct serve_opts o = {.server = fx_server_default_params(),
                           .engine = fx_engine_default_params(),
                           .shutdown_timeout = 5};
    fx_cli_gen_opts_init(&o.gen);
    int rc = parse_args(argc, argv, &o);
    if (rc >= 0) {
        fx_cli_gen_opts_free(&o.gen);
        return rc;
    }
    rc = 1;
    struct fx_cli_model m = {0};
    struct fx_chat_template *tmpl = NULL;
    struct fx_engine *engine = NULL;
    struct fx_server *server = NULL;
    struct fx_error err;
    if (!fx_cli_model_load("serve", o.gen.model_path, &o.gen, &m) ||
        !load_template(&m, o.template_name, o.template_file, &tmpl))
        goto done;

    /* Signals are taken by sigwait below: blocked here, before any thread starts, so that every
     * thread inherits the mask and none is interrupted. */
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);
    signal(SIGPIPE, SIG_IGN);

    o.engine.n_ctx = o.gen.n_ctx > 0 ? o.gen.n_ctx : 4096;
    o.engine.n_batch = o.gen.n_batch > 0 ? o.gen.n_batch : FX_ENGINE_N_BATCH;
    o.engine.n_threads = o.gen.n_threads;
    o.engine.type_k = o.gen.type_k;
    o.engine.type_v = o.gen.type_v;
    o.engine.spec = o.gen.spec == FX_CLI_SPEC_NGRAM && o.gen.draft_max > 0;
    o.engine.spec_params.draft_max = o.gen.draft_max > 0 ? o.gen.draft_max : 1;
    o.engine.spec_params.draft_min = o.gen.draft_min;
    o.engine.spec_params.adaptive = !o.gen.spec_fixed;
    if (fx_engine_create(m.model, m.vocab, &o.engine, &engine, &err) != FX_OK) {
        fprintf(stderr, "ferrox serve: %s\n", err.msg);
        goto done;
    }
    const char *slash = strrchr(o.gen.model_path, '/');
    if (!o.server.model_name)
        o.server.model_name = slash ? slash + 1 : o.gen.model_path;
    o.server.sampler = o.gen.sampler;
    o.server.max_tokens = o.gen.n_predict;
    o.server.tmpl = tmpl;
    if (fx_server_create(engine, m.model, m.vocab, &o.server, &server, &err) != FX_OK) {
        fprintf(stderr, "ferrox serve: %s\n", err.msg);
        goto done;
    }
    const char *name = fx_chat_template_builtin_name(tmpl);
    fprintf(stderr,
            "ferrox serve: %s: %s, %.2f M parameters; %d sequences, %d KV positions (%d per "
            "sequence); chat template %s; speculation %s\n",
            o.gen.model_path, fx_model_arch(m.model), (double)fx_model_n_params(m.model) * 1e-6,
            fx_engine_n_parallel(engine), o.engine.n_ctx, fx_engine_n_ctx_seq(engine),
            name ? name : "from the model", o.engine.spec ? "ngram" : "none");
    bool v6 = strchr(o.server.host, ':') != NULL;
    fprintf(stderr, "ferrox serve: listening on http://%s%s%s:%d\n", v6 ? "[" : "", o.server.host,
            v6 ? "]" : "", fx_server_port(server));

    int sig = 0;
    sigwait(&stop_signals, &sig);
    fprintf(stderr, "ferrox serve: %s: shutting down (requests in flight get %d s)\n",
            sig == SIGINT ? "SIGINT" : "SIGTERM", o.shutdown_timeout);
    fx_server_shutdown(server, o.shutdown_timeout);
    fprintf(stderr, "ferrox serve: stopped\n");
    rc = 0;
done:
    fx_server_free(server);
    fx_engine_free(engine);
    fx_chat_template_free(tmpl);
    fx_cli_model_free(&m);
    fx_cli_gen_opts_free(&o.gen);
    return rc;
}
