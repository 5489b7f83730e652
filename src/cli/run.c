/* ferrox run -m MODEL -p PROMPT [-f FILE] [-n N] [sampling options] [--truncate]
 *            [--prompt-cache FILE]
 *
 * Tokenizes the prompt, prefills it, and streams the generated text (the continuation only, not
 * the prompt) to stdout as it comes; load time and speeds go to stderr. Without -m it runs a
 * small random-weight model that it builds once into the user's cache directory, so that the
 * first command on a fresh machine works. With --prompt-cache, the part of the prompt a saved
 * state (kv/state.c) shares is loaded instead of computed, and the state of the prompt and the
 * generated text is saved afterwards. */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/gen.h"
#include "cli/util.h"
#include "core/clock.h"
#include "core/error.h"
#include "model/ftype.h"
#include "model/synth.h"

enum { OPT_TRUNCATE = FX_CLI_OPT_OWN, OPT_PROMPT_CACHE };

static bool verbose; /* -v: speculation's figures after the run */

static void usage(FILE *out) {
    fprintf(out,
            "usage: ferrox run [-m MODEL] (-p PROMPT | -f FILE) [-n N] [options]\n\n"
            "Generates a continuation of the prompt and streams it to stdout; load time and\n"
            "speeds go to stderr. Without -m, a small model with random weights (built once\n"
            "into ~/.cache/ferrox) shows that everything works.\n\n"
            "prompt:\n"
            "  -p, --prompt TEXT         the prompt\n"
            "  -f, --file FILE           read the prompt from FILE ('-': standard input; one\n"
            "                            final newline is dropped, as llama.cpp does)\n"
            "  --truncate                keep the end of a prompt too long for the context\n"
            "                            (room is left for -n tokens, at most half of it)\n"
            "  --prompt-cache FILE       load the prompt's longest prefix saved in FILE (if it\n"
            "                            exists) instead of computing it, and save the state\n"
            "                            of the prompt and the generated text to FILE\n"
            "  -v, --verbose             print speculation's acceptance rate and tokens per\n"
            "                            verify step after the run; with --moe-cache, the\n"
            "                            expert cache's figures after every step\n");
    fx_cli_gen_usage(out);
}

/* ---- the model made when none is given ------------------------------------------------------ */

#define DEFAULT_SHAPE "tiny"
#define DEFAULT_TYPE  "f16"
#define DEFAULT_FILE  "random-tiny.F16.gguf"

/* mkdir -p for a directory path of at most PATH_MAX bytes. */
static int make_dirs(const char *path) {
    char buf[PATH_MAX];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1;; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char c = *p;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return -1;
        if (c == '\0')
            return 0;
        *p = c;
    }
}

/* $XDG_CACHE_HOME/ferrox, or ~/.cache/ferrox (XDG: a relative XDG_CACHE_HOME is ignored). */
static bool cache_dir(char *out, size_t cap) {
    const char *xdg = getenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    int n;
    if (xdg && xdg[0] == '/')
        n = snprintf(out, cap, "%s/ferrox", xdg);
    else if (home && home[0] == '/')
        n = snprintf(out, cap, "%s/.cache/ferrox", home);
    else
        return false;
    return n > 0 && (size_t)n < cap;
}

static bool build_default_model(const char *path) {
    struct fx_synth_model *plan;
    struct fx_error err;
    uint32_t ftype;
    bool known = fx_file_type_from_name(DEFAULT_TYPE, &ftype);
    FX_ASSERT(known);
    if (fx_synth_plan(DEFAULT_SHAPE, ftype, false, 1, &plan, &err) != FX_OK) {
        fprintf(stderr, "ferrox run: %s\n", err.msg);
        return false;
    }
    fprintf(stderr, "ferrox run: building a small random-weight model into %s ...\n", path);
    fx_status st = fx_synth_write(plan, path, NULL, &err);
    fx_synth_model_free(plan);
    if (st != FX_OK)
        fprintf(stderr, "ferrox run: %s: %s\n", path, err.msg);
    return st == FX_OK;
}

/* Loads the cached random-weight model, building it first when it is missing or unreadable. */
static bool load_default_model(struct fx_cli_model *m, char *path, size_t cap) {
    char dir[PATH_MAX - 64];
    if (!cache_dir(dir, sizeof dir)) {
        fprintf(stderr, "ferrox run: no model given (-m) and no cache directory (set HOME or "
                        "XDG_CACHE_HOME) to build one in\n");
        return false;
    }
    snprintf(path, cap, "%s/%s", dir, DEFAULT_FILE);
    if (make_dirs(dir) != 0) {
        fprintf(stderr, "ferrox run: cannot create %s: %s\n", dir, strerror(errno));
        return false;
    }
    fprintf(stderr,
            "ferrox run: no model given (-m): running a small model with RANDOM weights that\n"
            "ferrox built itself (%s), so the text below is gibberish.\n"
            "For real text, download a GGUF model (for example SmolLM2-135M-Instruct, from\n"
            "Hugging Face) and pass it with -m FILE.\n",
            path);
    if (access(path, R_OK) == 0) {
        struct fx_error err;
        struct fx_model *probe;
        if (fx_model_load(path, NULL, &probe, &err) == FX_OK) {
            fx_model_free(probe);
            return fx_cli_model_load("run", path, NULL, m);
        }
        fprintf(stderr, "ferrox run: rebuilding the cached model: %s\n", err.msg);
    }
    return build_default_model(path) && fx_cli_model_load("run", path, NULL, m);
}

/* ---- the command ---------------------------------------------------------------------------- */

static double per_second(double n, double seconds) {
    return seconds > 0 ? n / seconds : 0.0;
}

/* Shortens ids to fit the context with room to generate, keeping the BOS the vocabulary adds and
 * the end of the prompt. */
static int32_t truncate_prompt(const struct fx_vocab *v, fx_token *ids, int32_t n, int32_t n_ctx,
                               int n_predict) {
    int32_t room = n_ctx / 2;
    if (n_predict > 0 && n_predict < room)
        room = n_predict;
    int32_t keep = n_ctx - room;
    if (n <= keep)
        return n;
    int32_t head = fx_vocab_add_bos(v) && ids[0] == fx_vocab_bos(v) ? 1 : 0;
    memmove(ids + head, ids + n - (keep - head), (size_t)(keep - head) * sizeof *ids);
    return keep;
}

/* --prompt-cache FILE before the prompt is evaluated: when FILE exists, loads the prompt's
 * longest prefix it holds (at most all but the last token) into the context. The loaded tokens
 * join the sampler's penalty window and the generator's sequence, as prefilled ones do. A file that
 * is refused (damaged, of another model or KV type) is an error, as in llama.cpp. */
static bool load_prompt_cache(struct fx_cli_gen *g, const char *path, const fx_token *ids,
                              int32_t n_prompt, int32_t *n_cached) {
    struct fx_error err;
    *n_cached = 0;
    if (access(path, F_OK) != 0 && errno == ENOENT) {
        fprintf(stderr, "ferrox run: prompt cache %s does not exist yet; it will be written\n",
                path);
        return true;
    }
    if (fx_context_state_load(g->ctx, path, ids, n_prompt, n_cached, &err) != FX_OK) {
        fprintf(stderr, "ferrox run: --prompt-cache %s: %s\n", path, err.msg);
        return false;
    }
    for (int32_t i = 0; i < *n_cached; i++)
        if (fx_sampler_accept(g->sampler, ids[i], &err) != FX_OK) {
            fprintf(stderr, "ferrox run: %s\n", err.msg);
            return false;
        }
    memcpy(g->seq, ids, (size_t)*n_cached * sizeof *ids); /* their tokens are known */
    fprintf(stderr, "ferrox run: prompt cache %s: %d of the %d prompt tokens loaded from it\n",
            path, *n_cached, n_prompt);
    return true;
}

/* --prompt-cache FILE after the run: saves what the cache holds (the prompt, then every
 * generated token but the last, which was never evaluated) with those tokens. *all receives the
 * token buffer (the caller frees it). */
static bool save_prompt_cache(const struct fx_cli_gen *g, const char *path, const fx_token *ids,
                              int32_t n_prompt, fx_token **all) {
    struct fx_error err;
    int32_t n = fx_context_kv_len(g->ctx);
    /* Never more than the prompt and the tokens made (fx_cli_gen_run); rows whose token is not
     * known would not be saved. */
    if (n > n_prompt + g->n_ids)
        n = n_prompt + g->n_ids;
    if (!(*all = malloc(((size_t)n_prompt + (size_t)g->n_ids) * sizeof **all + 1))) {
        fprintf(stderr, "ferrox run: out of memory\n");
        return false;
    }
    memcpy(*all, ids, (size_t)n_prompt * sizeof **all);
    memcpy(*all + n_prompt, g->ids, (size_t)g->n_ids * sizeof **all);
    if (fx_context_state_save(g->ctx, *all, n, path, &err) != FX_OK) {
        fprintf(stderr, "ferrox run: --prompt-cache %s: %s\n", path, err.msg);
        return false;
    }
    fprintf(stderr, "ferrox run: prompt cache %s: saved %d tokens\n", path, n);
    return true;
}

static int parse_args(int argc, char **argv, struct fx_cli_gen_opts *o, const char **prompt,
                      const char **file, bool *truncate, const char **prompt_cache) {
    static const struct option opts[] = {
        FX_CLI_GEN_LONGOPTS,
        {"prompt", required_argument, NULL, 'p'},
        {"file", required_argument, NULL, 'f'},
        {"truncate", no_argument, NULL, OPT_TRUNCATE},
        {"prompt-cache", required_argument, NULL, OPT_PROMPT_CACHE},
        {"verbose", no_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    fx_cli_gen_expand_aliases(argc, argv);
    optind = 1;
    for (int c; (c = getopt_long(argc, argv, FX_CLI_GEN_SHORTOPTS "p:f:hv", opts, NULL)) != -1;) {
        int r = fx_cli_gen_opt(o, "run", c, optarg);
        if (r < 0)
            return 2;
        if (r > 0)
            continue;
        switch (c) {
        case 'p':
            *prompt = optarg;
            break;
        case 'f':
            *file = optarg;
            break;
        case OPT_TRUNCATE:
            *truncate = true;
            break;
        case OPT_PROMPT_CACHE:
            *prompt_cache = optarg;
            break;
        case 'v':
            verbose = true;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "ferrox run: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (!*prompt == !*file) {
        fprintf(stderr, "ferrox run: give the prompt with -p TEXT or -f FILE (one of them)\n");
        return 2;
    }
    return -1;
}

int fx_cli_run(int argc, char **argv) {
    struct fx_cli_gen_opts o;
    fx_cli_gen_opts_init(&o);
    const char *prompt = NULL, *file = NULL, *prompt_cache = NULL;
    bool truncate = false;
    int rc = parse_args(argc, argv, &o, &prompt, &file, &truncate, &prompt_cache);
    if (rc >= 0) {
        fx_cli_gen_opts_free(&o);
        return rc;
    }
    fx_cli_gen_opts_finish(&o);
    rc = 1;

    struct fx_cli_model m = {0};
    struct fx_context *ctx = NULL;
    struct fx_cli_gen *g = NULL;
    fx_token *ids = NULL, *all = NULL;
    char *text = NULL;
    struct fx_error err;
    size_t text_len = prompt ? strlen(prompt) : 0;
    if (file && !(text = fx_cli_read_file(file, &text_len))) {
        fprintf(stderr, "ferrox run: cannot read %s: %s\n", file, strerror(errno));
        goto done;
    }
    if (file && text_len > 0 && text[text_len - 1] == '\n') /* as llama.cpp's -f */
        text[--text_len] = '\0';
    char default_path[PATH_MAX];
    const char *path = o.model_path;
    if (path ? !fx_cli_model_load("run", path, &o, &m)
             : !load_default_model(&m, default_path, sizeof default_path))
        goto done;
    if (!path)
        path = default_path;
    fprintf(stderr, "ferrox run: %s: %s, %.2f M parameters, %.1f MiB, loaded in %.1f ms\n", path,
            fx_model_arch(m.model), (double)fx_model_n_params(m.model) * 1e-6,
            (double)fx_model_size(m.model) / (1 << 20), m.load_seconds * 1e3);
    if (!(ctx = fx_cli_context_create("run", &m, &o)))
        goto done;

    size_t n_ids;
    if (fx_tokenize_alloc(m.vocab, file ? text : prompt, text_len, true, true, &ids, &n_ids,
                          &err)) {
        fprintf(stderr, "ferrox run: tokenizing the prompt: %s\n", err.msg);
        goto done;
    }
    int32_t n_ctx = fx_context_n_ctx(ctx);
    if (n_ids == 0) {
        fprintf(stderr, "ferrox run: the prompt is empty\n");
        goto done;
    }
    if (n_ids > (size_t)n_ctx && !truncate) {
        fprintf(stderr,
                "ferrox run: the prompt is %zu tokens, longer than the context of %d tokens; "
                "raise -c, or pass --truncate to keep the end of the prompt\n",
                n_ids, n_ctx);
        goto done;
    }
    int32_t n_prompt = (int32_t)n_ids;
    if (truncate) {
        n_prompt = truncate_prompt(m.vocab, ids, n_prompt, n_ctx, o.n_predict);
        if ((size_t)n_prompt < n_ids)
            fprintf(stderr, "ferrox run: prompt truncated: kept %d of its %zu tokens\n", n_prompt,
                    n_ids);
    }

    if (fx_cli_gen_create(ctx, m.vocab, &o, &g, &err) != FX_OK) {
        fprintf(stderr, "ferrox run: %s\n", err.msg);
        goto done;
    }
    g->moe_verbose = verbose;
    int32_t n_cached = 0;
    if (prompt_cache && !load_prompt_cache(g, prompt_cache, ids, n_prompt, &n_cached))
        goto done;
    double t0 = fx_now();
    if (fx_cli_gen_prefill(g, ids + n_cached, n_prompt - n_cached, n_cached, &err) != FX_OK) {
        fprintf(stderr, "ferrox run: prompt: %s\n", err.msg);
        goto done;
    }
    double t1 = fx_now();
    enum fx_cli_gen_end end;
    fx_status st = fx_cli_gen_run(g, stdout, NULL, &end, &err);
    double t2 = fx_now();
    if (isatty(STDOUT_FILENO))
        fputc('\n', stdout);
    fflush(stdout);
    if (st != FX_OK) {
        fprintf(stderr, "ferrox run: %s\n", err.msg);
        goto done;
    }
    fprintf(stderr, "ferrox run: prompt: %d tokens in %.2f ms (%.1f tokens/s)\n",
            n_prompt - n_cached, (t1 - t0) * 1e3, per_second(n_prompt - n_cached, t1 - t0));
    fprintf(stderr,
            "ferrox run: generated: %d tokens in %.2f ms (%.1f tokens/s), ended by %s; seed "
            "%" PRIu64 "\n",
            g->n_ids, (t2 - t1) * 1e3, per_second(g->n_ids, t2 - t1), fx_cli_gen_end_name(end),
            o.sampler.seed);
    if (verbose)
        fx_cli_gen_print_spec(g, stderr, "ferrox run");
    if (end == FX_CLI_END_CONTEXT_FULL)
        fprintf(stderr, "ferrox run: the context (%d tokens) is full; raise -c for more\n", n_ctx);
    if (prompt_cache && !save_prompt_cache(g, prompt_cache, ids, n_prompt, &all))
        goto done;
    rc = 0;
done:
    fx_cli_gen_free(g);
    free(all);
    free(ids);
    free(text);
    fx_context_free(ctx);
    fx_cli_model_free(&m);
    fx_cli_gen_opts_free(&o);
    return rc;
}
