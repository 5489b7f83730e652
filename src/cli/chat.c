/* ferrox chat -m MODEL [--system TEXT] [--chat-template NAME] [sampling options]
 *
 * An interactive chat. Every turn renders the whole conversation with the chat template,
 * tokenizes it, and compares it with the tokens the KV cache holds: the cache is cut back to the
 * longest common prefix and only the rest is prefilled. Usually that is the new user message, but
 * the comparison (rather than an assumed append) also covers templates that rewrite earlier turns
 * and answers that tokenize differently once they are part of the rendered text.
 *
 * Ctrl-C stops the answer being generated (or clears the line being typed), end of input exits,
 * "/clear" starts a new conversation. --verbose prints, per turn, the token counts and the ids of
 * the prompt and of the answer on stderr. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/gen.h"
#include "cli/util.h"
#include "core/clock.h"

enum {
    OPT_SYSTEM = FX_CLI_OPT_OWN,
    OPT_TEMPLATE,
    OPT_TEMPLATE_FILE,
    OPT_VERBOSE,
};

static void usage(FILE *out) {
    fprintf(out, "usage: ferrox chat -m MODEL [--system TEXT] [--chat-template NAME] [options]\n\n"
                 "An interactive chat with the model's chat template (tokenizer.chat_template).\n"
                 "Type a message and Enter; Ctrl-C stops an answer, /clear starts a new\n"
                 "conversation, /exit or end of input (Ctrl-D) quits.\n\n"
                 "chat:\n"
                 "  --system TEXT             a system message opening the conversation\n"
                 "  --chat-template NAME      a built-in template instead of the model's:\n"
                 "                           ");
    for (size_t i = 0; fx_chat_builtin_name(i); i++)
        fprintf(out, "%s%s", i % 6 == 0 && i ? "\n                            " : " ",
                fx_chat_builtin_name(i));
    fprintf(out, "\n"
                 "  --chat-template-file FILE a Jinja chat template from a file\n"
                 "  -v, --verbose             per turn on stderr: tokens taken from the cache and\n"
                 "                            prefilled, speeds, and the prompt and answer ids;\n"
                 "                            with --moe-cache, the expert cache's figures after\n"
                 "                            every step\n");
    fx_cli_gen_usage(out);
}

/* ---- Ctrl-C and input ------------------------------------------------------------------------ */

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig) {
    (void)sig;
    interrupted = 1;
}

/* Lines from standard input. The wait for input is a ppoll() that unblocks SIGINT only while it
 * waits, so that a Ctrl-C either finds the flag already set or interrupts the wait: none is lost
 * between the check and the wait (and ppoll is never restarted after a handler, whatever
 * SA_RESTART says). */
struct line_reader {
    char *buf; /* [cap]: [start, len) not handed out yet */
    size_t start, len, cap;
    bool eof;
};

enum { LINE_OK, LINE_EOF, LINE_INTERRUPTED, LINE_ERROR };

/* The next line, its newline removed, NUL-terminated in the reader's buffer (valid until the
 * next call). */
static int read_line(struct line_reader *r, char **line) {
    for (;;) {
        char *nl = r->buf ? memchr(r->buf + r->start, '\n', r->len - r->start) : NULL;
        if (nl || (r->eof && r->len > r->start)) {
            size_t end = nl ? (size_t)(nl - r->buf) : r->len;
            *line = r->buf + r->start;
            r->buf[end] = '\0';
            r->start = nl ? end + 1 : end;
            return LINE_OK;
        }
        if (r->eof)
            return LINE_EOF;
        if (r->start > 0) {
            memmove(r->buf, r->buf + r->start, r->len - r->start);
            r->len -= r->start;
            r->start = 0;
        }
        if (r->cap - r->len < 4096) {
            char *grown = realloc(r->buf, r->cap * 2 + 4096);
            if (!grown)
                return LINE_ERROR;
            r->buf = grown;
            r->cap = r->cap * 2 + 4096;
        }
        sigset_t block, old;
        sigemptyset(&block);
        sigaddset(&block, SIGINT);
        sigprocmask(SIG_BLOCK, &block, &old);
        if (interrupted) {
            sigprocmask(SIG_SETMASK, &old, NULL);
            return LINE_INTERRUPTED;
        }
        struct pollfd p = {.fd = STDIN_FILENO, .events = POLLIN};
        int ready = ppoll(&p, 1, NULL, &old);
        int e = errno;
        sigprocmask(SIG_SETMASK, &old, NULL);
        ssize_t n = ready > 0 ? read(STDIN_FILENO, r->buf + r->len, r->cap - r->len - 1) : -1;
        if (n < 0) {
            if (ready > 0)
                e = errno;
            if (e != EINTR)
                return LINE_ERROR;
            continue; /* the flag is checked before the next wait */
        }
        if (n == 0)
            r->eof = true;
        r->len += (size_t)n;
    }
}

/* ---- the conversation ------------------------------------------------------------------------ */

struct chat {
    struct fx_cli_model m;
    struct fx_context *ctx;
    struct fx_cli_gen *gen;
    struct fx_chat_template *tmpl;
    struct fx_chat_params params;
    char *bos_text, *eos_text;        /* the template's bos_token and eos_token */
    struct fx_chat_msg *msgs;         /* [n_msgs]; contents are malloc'd */
    size_t n_msgs, cap_msgs, n_fixed; /* the first n_fixed (the system message) survive /clear */
    struct fx_chat_text rendered;
    fx_token *cache; /* [n_ctx]: the tokens the KV cache holds, in order */
    int32_t n_cache;
    bool verbose;
};

static bool push_msg(struct chat *c, const char *role, const char *content, size_t len) {
    if (c->n_msgs == c->cap_msgs) {
        size_t cap = c->cap_msgs ? 2 * c->cap_msgs : 16;
        struct fx_chat_msg *grown = realloc(c->msgs, cap * sizeof *grown);
        if (!grown)
            return false;
        c->msgs = grown;
        c->cap_msgs = cap;
    }
    char *copy = malloc(len + 1);
    if (!copy)
        return false;
    memcpy(copy, content, len);
    copy[len] = '\0';
    c->msgs[c->n_msgs++] = (struct fx_chat_msg){.role = role, .content = copy};
    return true;
}

static void pop_msgs(struct chat *c, size_t keep) {
    while (c->n_msgs > keep)
        free((char *)c->msgs[--c->n_msgs].content);
}

/* A token's stored text, as the template's bos_token / eos_token; NULL when there is none. */
static char *token_text(const struct fx_vocab *v, fx_token id) {
    size_t len;
    const char *t = id == FX_TOKEN_NULL ? NULL : fx_vocab_token_text(v, id, &len);
    if (!t)
        return NULL;
    char *copy = malloc(len + 1);
    if (copy) {
        memcpy(copy, t, len);
        copy[len] = '\0';
    }
    return copy;
}

static bool load_template(struct chat *c, const char *name, const char *file) {
    struct fx_error err;
    fx_status st;
    if (file) {
        size_t len;
        char *src = fx_cli_read_file(file, &len);
        if (!src) {
            fprintf(stderr, "ferrox chat: cannot read %s: %s\n", file, strerror(errno));
            return false;
        }
        st = fx_chat_template_create(src, len, &c->tmpl, &err);
        free(src);
    } else if (name) {
        st = fx_chat_template_builtin(name, &c->tmpl, &err);
    } else {
        struct fx_gguf_str src;
        st = fx_gguf_get_str(fx_model_gguf(c->m.model), "tokenizer.chat_template", &src, &err);
        if (st == FX_ERR_NOT_FOUND) {
            fprintf(stderr,
                    "ferrox chat: the model has no chat template (tokenizer.chat_template); name "
                    "a built-in one with --chat-template NAME (see --help), or give one with "
                    "--chat-template-file FILE\n");
            return false;
        }
        if (st == FX_OK)
            st = fx_chat_template_create(src.data, (size_t)src.len, &c->tmpl, &err);
    }
    if (st != FX_OK) {
        fprintf(stderr, "ferrox chat: %s\n", err.msg);
        return false;
    }
    return true;
}

static void print_ids(const char *label, const fx_token *ids, int32_t n) {
    fprintf(stderr, "chat: %s ids:", label);
    for (int32_t i = 0; i < n; i++)
        fprintf(stderr, " %d", ids[i]);
    fputc('\n', stderr);
}

static double per_second(double n, double seconds) {
    return seconds > 0 ? n / seconds : 0.0;
}

/* One exchange: the user's message is already the last one. Returns false on an error that ends
 * the program (reported); a conversation that no longer fits is reported and undone instead. */
static bool turn(struct chat *c) {
    struct fx_error err;
    int32_t n_ctx = fx_context_n_ctx(c->ctx);
    if (fx_chat_render(c->tmpl, c->msgs, c->n_msgs, &c->params, &c->rendered, &err) != FX_OK) {
        fprintf(stderr, "ferrox chat: %s\n", err.msg);
        pop_msgs(c, c->n_msgs - 1);
        return true; /* a template that rejects this conversation: the user may go on */
    }
    fx_token *ids;
    size_t n;
    if (fx_tokenize_alloc(c->m.vocab, c->rendered.data, c->rendered.len, true, true, &ids, &n,
                          &err) != FX_OK) {
        fprintf(stderr, "ferrox chat: %s\n", err.msg);
        return false;
    }
    if (n == 0 || n >= (size_t)n_ctx) {
        fprintf(stderr,
                "ferrox chat: the context is full: the conversation is %zu tokens and the "
                "context holds %d; /clear starts a new one (or restart with a larger -c)\n",
                n, n_ctx);
        free(ids);
        pop_msgs(c, c->n_msgs - 1);
        return true;
    }
    int32_t n_prompt = (int32_t)n;
    int32_t keep = 0;
    while (keep < c->n_cache && keep < n_prompt && c->cache[keep] == ids[keep])
        keep++;
    if (keep == n_prompt) /* the last token is evaluated again for its logits */
        keep--;
    /* A recurrent state is kept whole or recomputed from the start. */
    if (fx_model_has_recurrent_state(fx_context_model(c->ctx)) && keep != fx_context_kv_len(c->ctx))
        keep = 0;
    double t0 = fx_now();
    if (fx_context_kv_truncate(c->ctx, keep, &err) != FX_OK ||
        fx_cli_gen_prefill(c->gen, ids + keep, n_prompt - keep, keep, &err) != FX_OK) {
        fprintf(stderr, "ferrox chat: %s\n", err.msg);
        free(ids);
        return false;
    }
    double t1 = fx_now();
    memcpy(c->cache + keep, ids + keep, (size_t)(n_prompt - keep) * sizeof *ids);
    c->n_cache = n_prompt;

    /* A Ctrl-C since the line was read (during the prefill) ends the answer before it starts. */
    enum fx_cli_gen_end end;
    fx_status st = fx_cli_gen_run(c->gen, stdout, &interrupted, &end, &err);
    double t2 = fx_now();
    fputc('\n', stdout);
    fflush(stdout);
    /* The answer's tokens that were evaluated follow the prompt in the cache. */
    int32_t kv = fx_context_kv_len(c->ctx);
    memcpy(c->cache + n_prompt, c->gen->ids, (size_t)(kv - n_prompt) * sizeof *ids);
    c->n_cache = kv;
    if (st != FX_OK) {
        fprintf(stderr, "ferrox chat: %s\n", err.msg);
        free(ids);
        return false;
    }
    if (c->verbose) {
        fprintf(stderr,
                "chat: prompt %d tokens: %d from the cache, %d prefilled in %.2f ms (%.1f "
                "tokens/s)\n",
                n_prompt, keep, n_prompt - keep, (t1 - t0) * 1e3,
                per_second(n_prompt - keep, t1 - t0));
        print_ids("prompt", ids, n_prompt);
        fprintf(stderr,
                "chat: answer %d tokens in %.2f ms (%.1f tokens/s), ended by %s; cache %d "
                "tokens\n",
                c->gen->n_ids, (t2 - t1) * 1e3, per_second(c->gen->n_ids, t2 - t1),
                fx_cli_gen_end_name(end), kv);
        print_ids("answer", c->gen->ids, c->gen->n_ids);
        fx_cli_gen_print_spec(c->gen, stderr, "chat");
    }
    free(ids);
    if (end == FX_CLI_END_CONTEXT_FULL)
        fprintf(stderr,
                "ferrox chat: the context is full (%d tokens): the answer was cut; /clear starts "
                "a new conversation (or restart with a larger -c)\n",
                n_ctx);
    if (!push_msg(c, "assistant", c->gen->text, c->gen->text_len)) {
        fprintf(stderr, "ferrox chat: out of memory\n");
        return false;
    }
    return true;
}

static void clear(struct chat *c) {
    pop_msgs(c, c->n_fixed);
    fx_context_kv_truncate(c->ctx, 0, NULL);
    c->n_cache = 0;
    fx_sampler_reset(c->gen->sampler);
    fprintf(stderr, "ferrox chat: conversation cleared\n");
}

/* Reads messages until end of input or /exit; false when an error ended it. */
static bool loop(struct chat *c) {
    bool tty = isatty(STDIN_FILENO);
    struct line_reader in = {0};
    bool ok = true;
    for (;;) {
        /* A Ctrl-C from here on is for the line about to be typed. */
        interrupted = 0;
        if (tty) {
            fputs("> ", stdout);
            fflush(stdout);
        }
        char *line;
        int r = read_line(&in, &line);
        if (r == LINE_INTERRUPTED) {
            fputs("\n(Ctrl-D or /exit to quit)\n", stdout);
            continue;
        }
        if (r == LINE_ERROR) {
            fprintf(stderr, "ferrox chat: reading input: %s\n", strerror(errno));
            ok = false;
            break;
        }
        if (r == LINE_EOF) {
            if (tty)
                fputc('\n', stdout);
            break;
        }
        size_t len = strlen(line);
        if (len > 0 && line[len - 1] == '\r')
            line[--len] = '\0';
        if (len == 0)
            continue;
        if (strcmp(line, "/exit") == 0 || strcmp(line, "/quit") == 0)
            break;
        if (strcmp(line, "/clear") == 0) {
            clear(c);
            continue;
        }
        if (!push_msg(c, "user", line, len)) {
            fprintf(stderr, "ferrox chat: out of memory\n");
            ok = false;
            break;
        }
        if (!(ok = turn(c)))
            break;
    }
    free(in.buf);
    return ok;
}

static int parse_args(int argc, char **argv, struct fx_cli_gen_opts *o, const char **system,
                      const char **tmpl_name, const char **tmpl_file, bool *verbose) {
    static const struct option opts[] = {
        FX_CLI_GEN_LONGOPTS,
        {"system", required_argument, NULL, OPT_SYSTEM},
        {"chat-template", required_argument, NULL, OPT_TEMPLATE},
        {"chat-template-file", required_argument, NULL, OPT_TEMPLATE_FILE},
        {"verbose", no_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    fx_cli_gen_expand_aliases(argc, argv);
    optind = 1;
    for (int c; (c = getopt_long(argc, argv, FX_CLI_GEN_SHORTOPTS "vh", opts, NULL)) != -1;) {
        int r = fx_cli_gen_opt(o, "chat", c, optarg);
        if (r < 0)
            return 2;
        if (r > 0)
            continue;
        switch (c) {
        case OPT_SYSTEM:
            *system = optarg;
            break;
        case OPT_TEMPLATE:
            *tmpl_name = optarg;
            break;
        case OPT_TEMPLATE_FILE:
            *tmpl_file = optarg;
            break;
        case 'v':
            *verbose = true;
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
        fprintf(stderr, "ferrox chat: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (!o->model_path) {
        fprintf(stderr, "ferrox chat: give a model with -m FILE\n");
        return 2;
    }
    if (*tmpl_name && *tmpl_file) {
        fprintf(stderr, "ferrox chat: --chat-template and --chat-template-file exclude each "
                        "other\n");
        return 2;
    }
    return -1;
}

int fx_cli_chat(int argc, char **argv) {
    struct fx_cli_gen_opts o;
    fx_cli_gen_opts_init(&o);
    const char *system = NULL, *tmpl_name = NULL, *tmpl_file = NULL;
    struct chat c = {0};
    int rc = parse_args(argc, argv, &o, &system, &tmpl_name, &tmpl_file, &c.verbose);
    if (rc >= 0) {
        fx_cli_gen_opts_free(&o);
        return rc;
    }
    fx_cli_gen_opts_finish(&o);
    rc = 1;
    struct fx_error err;
    if (!fx_cli_model_load("chat", o.model_path, &o, &c.m) ||
        !load_template(&c, tmpl_name, tmpl_file))
        goto done;
    if (!(c.ctx = fx_cli_context_create("chat", &c.m, &o)))
        goto done;
    if (fx_cli_gen_create(c.ctx, c.m.vocab, &o, &c.gen, &err) != FX_OK) {
        fprintf(stderr, "ferrox chat: %s\n", err.msg);
        goto done;
    }
    c.gen->moe_verbose = c.verbose;
    c.cache = malloc((size_t)fx_context_n_ctx(c.ctx) * sizeof *c.cache);
    c.bos_text = token_text(c.m.vocab, fx_vocab_bos(c.m.vocab));
    c.eos_text = token_text(c.m.vocab, fx_vocab_eos(c.m.vocab));
    if (!c.cache || (system && !push_msg(&c, "system", system, strlen(system)))) {
        fprintf(stderr, "ferrox chat: out of memory\n");
        goto done;
    }
    c.n_fixed = c.n_msgs;
    fx_chat_default_params(&c.params);
    c.params.bos_token = c.bos_text;
    c.params.eos_token = c.eos_text;

    const char *builtin = fx_chat_template_builtin_name(c.tmpl);
    fprintf(stderr,
            "ferrox chat: %s (%s), template %s, context %d tokens, seed %llu\n"
            "ferrox chat: Ctrl-C stops an answer, /clear starts over, /exit or Ctrl-D quits\n",
            o.model_path, fx_model_arch(c.m.model),
            builtin ? builtin : (tmpl_file ? tmpl_file : "from the model"), fx_context_n_ctx(c.ctx),
            (unsigned long long)o.sampler.seed);

    /* Ctrl-C sets a flag that the generation loop checks after every token; the pool's worker
     * threads block the signal, so the handler runs on this thread. */
    struct sigaction sa = {.sa_handler = on_sigint, .sa_flags = SA_RESTART};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    rc = loop(&c) ? 0 : 1;
    signal(SIGINT, SIG_DFL);
done:
    pop_msgs(&c, 0);
    free(c.msgs);
    free(c.cache);
    free(c.bos_text);
    free(c.eos_text);
    fx_chat_text_free(&c.rendered);
    fx_chat_template_free(c.tmpl);
    fx_cli_gen_free(c.gen);
    fx_context_free(c.ctx);
    fx_cli_model_free(&c.m);
    fx_cli_gen_opts_free(&o);
    return rc;
}
