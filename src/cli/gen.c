#include "cli/gen.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli/util.h"
#include "core/clock.h"
#include "core/error.h"

/* ---- options -------------------------------------------------------------------------------- */

void fx_cli_gen_opts_init(struct fx_cli_gen_opts *o) {
    struct fx_context_params cp = fx_context_default_params();
    struct fx_spec_params sp = fx_spec_default_params();
    struct fx_model_params mp = fx_model_default_params();
    *o = (struct fx_cli_gen_opts){.n_predict = -1,
                                  .type_k = cp.type_k,
                                  .type_v = cp.type_v,
                                  .sampler = fx_sampler_default_params(),
                                  .spec = FX_CLI_SPEC_DEFAULT,
                                  .draft_max = sp.draft_max,
                                  .draft_min = sp.draft_min,
                                  .moe_lookahead = mp.moe_lookahead,
                                  .moe_evict = mp.moe_evict};
}

void fx_cli_gen_opts_free(struct fx_cli_gen_opts *o) {
    free(o->bias);
    free((void *)o->stops);
    o->bias = NULL;
    o->stops = NULL;
    o->n_bias = o->n_stops = 0;
}

/* --logit-bias as llama.cpp writes it: TOKEN_ID followed by a signed bias ("15043+1", "2-inf"). */
static bool parse_bias(const char *s, struct fx_logit_bias *out) {
    char *end;
    errno = 0;
    long id = strtol(s, &end, 10);
    if (errno || end == s || id < 0 || id > INT32_MAX || (*end != '+' && *end != '-'))
        return false;
    float bias;
    if (!fx_cli_parse_float(end, -INFINITY, INFINITY, &bias) || bias == INFINITY)
        return false;
    *out = (struct fx_logit_bias){.token = (fx_token)id, .bias = bias};
    return true;
}

static bool parse_seed(const char *s, struct fx_cli_gen_opts *o) {
    if (strcmp(s, "-1") == 0) { /* llama.cpp's "random" */
        o->seed_given = false;
        return true;
    }
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-')
        return false;
    o->sampler.seed = v;
    o->seed_given = true;
    return true;
}

/* Appends one element to a malloc'd array. */
static bool grow_append(void **arr, size_t *n, size_t elem, const void *value) {
    void *grown = realloc(*arr, (*n + 1) * elem);
    if (!grown)
        return false;
    memcpy((char *)grown + *n * elem, value, elem);
    *arr = grown;
    (*n)++;
    return true;
}

void fx_cli_gen_expand_aliases(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "-md") == 0)
            argv[i] = (char *)"--model-draft";
}

static bool parse_spec(const char *s, enum fx_cli_spec *out) {
    static const char *const names[] = {[FX_CLI_SPEC_NONE] = "none",
                                        [FX_CLI_SPEC_NGRAM] = "ngram",
                                        [FX_CLI_SPEC_DRAFT] = "draft",
                                        [FX_CLI_SPEC_MTP] = "mtp"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(s, names[i]) == 0) {
            *out = (enum fx_cli_spec)i;
            return true;
        }
    return false;
}

int fx_cli_gen_opt(struct fx_cli_gen_opts *o, const char *cmd, int c, const char *arg) {
    struct fx_sampler_params *sp = &o->sampler;
    bool ok = true;
    const char *what = NULL;
    switch (c) {
    case 'm':
        o->model_path = arg;
        return 1;
    case 't':
        ok = fx_cli_parse_int(arg, 0, 4096, &o->n_threads), what = "-t (threads, 0: all CPUs)";
        break;
    case 'c':
        ok = fx_cli_parse_int(arg, 0, 1 << 24, &o->n_ctx), what = "-c (context size)";
        break;
    case 'b':
        ok = fx_cli_parse_int(arg, 1, 1 << 24, &o->n_batch), what = "-b (batch size)";
        break;
    case FX_CLI_OPT_CACHE_TYPE_K:
        ok = fx_cli_parse_kv_type(arg, &o->type_k), what = "-ctk (f32, f16 or q8_0)";
        break;
    case FX_CLI_OPT_CACHE_TYPE_V:
        ok = fx_cli_parse_kv_type(arg, &o->type_v), what = "-ctv (f32, f16 or q8_0)";
        break;
    case FX_CLI_OPT_MOE_CACHE:
        ok = fx_cli_parse_size(arg, &o->moe_cache) && o->moe_cache > 0,
        what = "--moe-cache (a size such as 4G, 512M or 256K)";
        break;
    case FX_CLI_OPT_MOE_LOOKAHEAD:
        ok = fx_cli_parse_int(arg, 0, FX_MOE_LOOKAHEAD_MAX, &o->moe_lookahead),
        what = "--moe-lookahead (layers, 0 to 4)";
        break;
    case FX_CLI_OPT_MOE_EVICT:
        ok = fx_cli_parse_moe_evict(arg, &o->moe_evict), what = "--moe-evict (quota, lru or lfu)";
        break;
    case 'n':
        ok = fx_cli_parse_int(arg, INT32_MIN, INT32_MAX, &o->n_predict), what = "-n (tokens)";
        break;
    case 's':
        ok = parse_seed(arg, o), what = "--seed (a number >= 0, or -1 for a random seed)";
        break;
    case 'l': {
        struct fx_logit_bias b;
        ok = parse_bias(arg, &b), what = "--logit-bias (TOKEN_ID+BIAS or TOKEN_ID-BIAS)";
        if (ok && !grow_append((void **)&o->bias, &o->n_bias, sizeof b, &b))
            ok = false, what = "--logit-bias (out of memory)";
        break;
    }
    case 'r':
        ok = arg[0] != '\0', what = "--stop (a non-empty string)";
        if (ok && !grow_append((void **)&o->stops, &o->n_stops, sizeof arg, &arg))
            ok = false, what = "--stop (out of memory)";
        break;
    case FX_CLI_OPT_TEMP:
        ok = fx_cli_parse_float(arg, 0, 1e6, &sp->temperature), what = "--temp (>= 0)";
        break;
    case FX_CLI_OPT_TOP_K:
        ok = fx_cli_parse_int(arg, INT32_MIN, INT32_MAX, &sp->top_k), what = "--top-k (<= 0: off)";
        break;
    case FX_CLI_OPT_TOP_P:
        ok = fx_cli_parse_float(arg, 0, 1, &sp->top_p), what = "--top-p (in [0, 1])";
        break;
    case FX_CLI_OPT_MIN_P:
        ok = fx_cli_parse_float(arg, 0, 1, &sp->min_p), what = "--min-p (in [0, 1])";
        break;
    case FX_CLI_OPT_REPEAT_PENALTY:
        ok = fx_cli_parse_float(arg, 1e-6, 1e6, &sp->repeat_penalty), what = "--repeat-penalty";
        break;
    case FX_CLI_OPT_REPEAT_LAST_N:
        ok = fx_cli_parse_int(arg, -1, 1 << 24, &sp->penalty_last_n),
        what = "--repeat-last-n (0: off, -1: the context size)";
        break;
    case FX_CLI_OPT_PRESENCE_PENALTY:
        ok = fx_cli_parse_float(arg, -1e6, 1e6, &sp->presence_penalty), what = "--presence-penalty";
        break;
    case FX_CLI_OPT_FREQUENCY_PENALTY:
        ok = fx_cli_parse_float(arg, -1e6, 1e6, &sp->frequency_penalty),
        what = "--frequency-penalty";
        break;
    case FX_CLI_OPT_IGNORE_EOS:
        o->ignore_eos = true;
        return 1;
    case FX_CLI_OPT_SPEC:
        ok = parse_spec(arg, &o->spec), what = "--spec (ngram, draft, mtp or none)";
        o->spec_given = true;
        break;
    case FX_CLI_OPT_DRAFT_MAX:
        ok = fx_cli_parse_int(arg, 0, 256, &o->draft_max), what = "--draft-max (0 to 256)";
        break;
    case FX_CLI_OPT_DRAFT_MIN:
        ok = fx_cli_parse_int(arg, 0, 256, &o->draft_min), what = "--draft-min (0 to 256)";
        break;
    case FX_CLI_OPT_MODEL_DRAFT:
        o->draft_path = arg;
        return 1;
    case FX_CLI_OPT_SPEC_FIXED:
        o->spec_fixed = true;
        return 1;
    default:
        return 0;
    }
    if (ok)
        return 1;
    fprintf(stderr, "ferrox %s: bad value '%s' for %s\n", cmd, arg, what);
    return -1;
}

void fx_cli_gen_opts_finish(struct fx_cli_gen_opts *o) {
    if (o->draft_path && !o->spec_given) /* as llama.cpp: a draft model is used when given */
        o->spec = FX_CLI_SPEC_DRAFT;
    if (o->seed_given)
        return;
    uint64_t seed;
    if (getrandom(&seed, sizeof seed, 0) != (ssize_t)sizeof seed) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        seed = (uint64_t)ts.tv_sec * 1000000007u ^ (uint64_t)ts.tv_nsec ^ (uint64_t)getpid();
    }
    /* Small enough to retype. */
    o->sampler.seed = seed % 4294967296u;
}

void fx_cli_gen_usage(FILE *out) {
    fprintf(out,
            "model and context:\n"
            "  -m, --model FILE          a GGUF model\n"
            "  -c, --ctx-size N          context size in tokens (default: the model's training\n"
            "                            context, at most 4096)\n"
            "  -b, --batch-size N        prompt tokens evaluated together (default 512)\n"
            "  -t, --threads N           worker threads (default: one per CPU)\n"
            "  -ctk, --cache-type-k T    KV cache type of keys: f32, f16 or q8_0 (default %s)\n"
            "  -ctv, --cache-type-v T    KV cache type of values (default %s)\n"
            "%s"
            "generation:\n"
            "  -n, --n-predict N         tokens to generate (default -1: until the end of text\n"
            "                            or a full context)\n"
            "  --ignore-eos              never end at an end-of-text token\n"
            "  -r, --stop TEXT           end when TEXT is generated (not shown); repeatable\n"
            "sampling (llama.cpp's order and defaults):\n"
            "  --temp T                  temperature (default 0.8; 0: greedy)\n"
            "  --top-k K                 keep the K most likely tokens (default 40; 0: off)\n"
            "  --top-p P                 keep the most likely tokens up to mass P (default 0.95)\n"
            "  --min-p P                 drop tokens below P times the best one (default 0.05)\n"
            "  --repeat-penalty F        penalise repeated tokens (default 1.0: off)\n"
            "  --repeat-last-n N         tokens the penalties look at (default 64; -1: context)\n"
            "  --presence-penalty F      (default 0: off)\n"
            "  --frequency-penalty F     (default 0: off)\n"
            "  -l, --logit-bias ID+B     add B to token ID's logit (ID-inf bans it); repeatable\n"
            "  -s, --seed S              random seed (default -1: a new one each run, printed)\n"
            "speculative decoding (the same text as without, several tokens per step):\n"
            "  --spec KIND               ngram (prompt lookup), draft (a draft model, -md),\n"
            "                            mtp (the model's own MTP head: Qwen3.5) or none\n"
            "                            (default %s; draft when -md is given)\n"
            "  -md, --model-draft FILE   a draft model with the same vocabulary\n"
            "  --draft-max N             most tokens drafted per step (default %d; 0: none)\n"
            "  --draft-min N             drafts shorter than N are not verified (default %d)\n"
            "  --spec-fixed              always draft --draft-max tokens (no adaptive k, no\n"
            "                            switching off when speculation does not pay)\n",
            fx_cli_kv_type_name(fx_context_default_params().type_k),
            fx_cli_kv_type_name(fx_context_default_params().type_v), FX_CLI_MOE_CACHE_USAGE,
            FX_CLI_SPEC_DEFAULT == FX_CLI_SPEC_NGRAM ? "ngram" : "none",
            fx_spec_default_params().draft_max, fx_spec_default_params().draft_min);
}

/* ---- model loading -------------------------------------------------------------------------- */

/* Files from this size on get a progress bar while their pages are read. */
#define PROGRESS_MIN_BYTES (64ull << 20)

struct progress {
    const char *name;
    int shown; /* percent last drawn, -1 before the first */
};

static bool draw_progress(float fraction, void *user) {
    struct progress *p = user;
    int pct = (int)(fraction * 100.0f);
    if (pct == p->shown)
        return true;
    p->shown = pct;
    char bar[41];
    int fill = pct * 40 / 100;
    for (int i = 0; i < 40; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[40] = '\0';
    fprintf(stderr, "\rloading %s [%s] %3d%%", p->name, bar, pct);
    if (fraction >= 1.0f)
        fprintf(stderr, "\r\033[K");
    fflush(stderr);
    return true;
}

bool fx_cli_model_load(const char *cmd, const char *path, const struct fx_cli_gen_opts *o,
                       struct fx_cli_model *out) {
    *out = (struct fx_cli_model){0};
    struct fx_model_params mp = fx_model_default_params();
    if (o) {
        mp.moe_cache_bytes = o->moe_cache;
        mp.moe_lookahead = o->moe_lookahead;
        mp.moe_evict = o->moe_evict;
    }
    const char *slash = strrchr(path, '/');
    struct progress prog = {.name = slash ? slash + 1 : path, .shown = -1};
    struct stat st;
    if (isatty(STDERR_FILENO) && stat(path, &st) == 0 &&
        (uint64_t)st.st_size >= PROGRESS_MIN_BYTES) {
        mp.progress = draw_progress;
        mp.progress_user = &prog;
    }
    struct fx_error err;
    double t0 = fx_now();
    if (fx_model_load(path, &mp, &out->model, &err) != FX_OK) {
        fprintf(stderr, "ferrox %s: %s\n", cmd, err.msg);
        return false;
    }
    if (fx_vocab_load(fx_model_gguf(out->model), &out->vocab, &err) != FX_OK) {
        fprintf(stderr, "ferrox %s: %s: tokenizer: %s\n", cmd, path, err.msg);
        fx_model_free(out->model);
        out->model = NULL;
        return false;
    }
    out->load_seconds = fx_now() - t0;
    return true;
}

void fx_cli_model_free(struct fx_cli_model *m) {
    fx_vocab_free(m->vocab);
    fx_model_free(m->model);
    *m = (struct fx_cli_model){0};
}

struct fx_context *fx_cli_context_create(const char *cmd, const struct fx_cli_model *m,
                                         const struct fx_cli_gen_opts *o) {
    struct fx_context_params cp = fx_context_default_params();
    cp.n_ctx = o->n_ctx;
    cp.n_batch = o->n_batch;
    cp.n_threads = o->n_threads;
    cp.type_k = o->type_k;
    cp.type_v = o->type_v;
    struct fx_context *ctx;
    struct fx_error err;
    if (fx_context_create(m->model, &cp, &ctx, &err) != FX_OK) {
        fprintf(stderr, "ferrox %s: %s\n", cmd, err.msg);
        return NULL;
    }
    return ctx;
}

/* ---- generation ----------------------------------------------------------------------------- */

const char *fx_cli_gen_end_name(enum fx_cli_gen_end end) {
    switch (end) {
    case FX_CLI_END_EOG:
        return "end of text";
    case FX_CLI_END_STOP_STRING:
        return "stop string";
    case FX_CLI_END_MAX_TOKENS:
        return "token limit (-n)";
    case FX_CLI_END_CONTEXT_FULL:
        return "context full";
    case FX_CLI_END_INTERRUPTED:
        return "interrupted";
    }
    return "?";
}

void fx_cli_gen_free(struct fx_cli_gen *g) {
    if (!g)
        return;
    fx_sampler_free(g->sampler);
    fx_stopper_free(g->stopper);
    fx_spec_free(g->spec);
    fx_drafter_free(g->drafter);
    fx_model_free(g->draft_model);
    free(g->logits);
    free(g->ids);
    free(g->seq);
    free(g->text);
    free(g);
}

/* The drafter and speculation state the options ask for (none with --spec none or
 * --draft-max 0). */
static fx_status spec_create(struct fx_cli_gen *g, const struct fx_cli_gen_opts *o,
                             struct fx_error *err) {
    if (o->spec == FX_CLI_SPEC_NONE || o->draft_max == 0)
        return FX_OK;
    fx_status st;
    if (o->spec == FX_CLI_SPEC_NGRAM) {
        st = fx_drafter_ngram_create(NULL, &g->drafter, err);
    } else if (o->spec == FX_CLI_SPEC_MTP) {
        if ((st = fx_drafter_mtp_create(g->ctx, &g->drafter, err)) != FX_OK)
            fx_error_prefix(err, "--spec mtp");
    } else {
        if (!o->draft_path)
            return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                                "--spec draft needs a draft model (-md FILE)");
        if ((st = fx_model_load(o->draft_path, NULL, &g->draft_model, err)) != FX_OK) {
            fx_error_prefix(err, "draft model %s", o->draft_path);
            return st;
        }
        struct fx_context_params cp = fx_context_default_params();
        cp.n_ctx = fx_context_n_ctx(g->ctx);
        cp.n_threads = o->n_threads;
        st = fx_drafter_model_create(fx_context_model(g->ctx), g->draft_model, &cp, &g->drafter,
                                     err);
        if (st != FX_OK)
            fx_error_prefix(err, "-md %s", o->draft_path);
    }
    if (st != FX_OK)
        return st;
    struct fx_spec_params sp = fx_spec_default_params();
    sp.draft_max = o->draft_max;
    sp.draft_min = o->draft_min;
    sp.adaptive = !o->spec_fixed;
    return fx_spec_create(g->ctx, g->drafter, &sp, &g->spec, err);
}

fx_status fx_cli_gen_create(struct fx_context *ctx, const struct fx_vocab *v,
                            const struct fx_cli_gen_opts *o, struct fx_cli_gen **out,
                            struct fx_error *err) {
    *out = NULL;
    int32_t n_vocab = fx_model_n_vocab(fx_context_model(ctx));
    int32_t n_ctx = fx_context_n_ctx(ctx);
    /* The model's end-of-generation tokens: where generation stops, or with --ignore-eos the
     * tokens banned (llama.cpp's way: a logit bias of -inf). Ids past the vocabulary that the
     * model's output covers cannot be sampled and are left out. */
    int32_t n_tok = fx_vocab_n_tokens(v) < n_vocab ? fx_vocab_n_tokens(v) : n_vocab;
    fx_token *eog = NULL;
    size_t n_eog = 0;
    struct fx_logit_bias *bias = NULL;
    size_t n_bias = o->n_bias;
    fx_status st;
    struct fx_cli_gen *g = calloc(1, sizeof *g);
    if (!g)
        goto fail;
    for (fx_token id = 0; id < n_tok; id++)
        if (fx_vocab_is_eog(v, id) && !grow_append((void **)&eog, &n_eog, sizeof id, &id))
            goto fail;
    bias = malloc((o->n_bias + n_eog + 1) * sizeof *bias);
    if (!bias)
        goto fail;
    if (o->n_bias)
        memcpy(bias, o->bias, o->n_bias * sizeof *bias);
    if (o->ignore_eos)
        for (size_t i = 0; i < n_eog; i++)
            bias[n_bias++] = (struct fx_logit_bias){.token = eog[i], .bias = -INFINITY};
    struct fx_sampler_params sp = o->sampler;
    if (sp.penalty_last_n < 0)
        sp.penalty_last_n = n_ctx;
    sp.logit_bias = bias;
    sp.n_logit_bias = n_bias;
    if ((st = fx_sampler_create(n_vocab, &sp, &g->sampler, err)))
        goto done;
    struct fx_stop_params stp = {
        .strings = o->stops,
        .n_strings = o->n_stops,
        .tokens = o->ignore_eos ? NULL : eog,
        .n_tokens = o->ignore_eos ? 0 : n_eog,
        .max_tokens = o->n_predict > 0 ? o->n_predict : 0,
    };
    if ((st = fx_stopper_create(&stp, &g->stopper, err)))
        goto done;
    g->text_cap = 256;
    g->logits = malloc((size_t)n_vocab * sizeof *g->logits);
    g->ids = malloc(((size_t)n_ctx + 1) * sizeof *g->ids);
    g->text = malloc(g->text_cap);
    g->seq = malloc(((size_t)n_ctx + 1) * sizeof *g->seq);
    if (!g->logits || !g->ids || !g->text || !g->seq)
        goto fail;
    for (int32_t i = 0; i <= n_ctx; i++)
        g->seq[i] = FX_TOKEN_NULL;
    g->ctx = ctx;
    g->vocab = v;
    g->n_vocab = n_vocab;
    g->n_predict = o->n_predict;
    g->text[0] = '\0';
    if ((st = spec_create(g, o, err)))
        goto done;
    *out = g;
    g = NULL;
    st = FX_OK;
    goto done;
fail:
    st = fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "out of memory for the sampler");
done:
    fx_cli_gen_free(g);
    free(bias);
    free(eog);
    return st;
}

fx_status fx_cli_gen_prefill(struct fx_cli_gen *g, const fx_token *tokens, int32_t n, int32_t pos0,
                             struct fx_error *err) {
    /* The sequence first: a drafter that reads the prompt's hidden states (the MTP head) is
     * shown it by fx_spec_prefill. */
    memcpy(g->seq + pos0, tokens, (size_t)n * sizeof *tokens);
    fx_status st = g->spec ? fx_spec_prefill(g->spec, g->seq, pos0 + n, pos0, g->logits, err)
                           : fx_forward_batch_last(g->ctx, tokens, n, pos0, g->logits, err);
    if (g->moe_verbose)
        fx_cli_moe_report(fx_context_model(g->ctx), "prompt", &g->moe_last);
    for (int32_t i = 0; i < n && st == FX_OK; i++)
        st = fx_sampler_accept(g->sampler, tokens[i], err);
    if (st == FX_OK)
        g->n_seq = pos0 + n;
    return st;
}

/* Appends the released text to g->text and writes it out. */
static fx_status emit(struct fx_cli_gen *g, FILE *out, const char *text, size_t len,
                      struct fx_error *err) {
    if (len == 0)
        return FX_OK;
    if (g->text_len + len + 1 > g->text_cap) {
        size_t cap =
            g->text_cap * 2 > g->text_len + len + 1 ? g->text_cap * 2 : g->text_len + len + 1;
        char *grown = realloc(g->text, cap);
        if (!grown)
            return fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "out of memory for the output");
        g->text = grown;
        g->text_cap = cap;
    }
    memcpy(g->text + g->text_len, text, len);
    g->text_len += len;
    g->text[g->text_len] = '\0';
    if (fwrite(text, 1, len, out) != len || fflush(out) != 0)
        return fx_error_set(err, FX_ERR_IO, FX_NO_OFFSET, "cannot write the output: %s",
                            strerror(errno));
    return FX_OK;
}

static enum fx_cli_gen_end end_of(enum fx_stop_reason r) {
    switch (r) {
    case FX_STOP_TOKEN:
        return FX_CLI_END_EOG;
    case FX_STOP_STRING:
        return FX_CLI_END_STOP_STRING;
    default:
        return FX_CLI_END_MAX_TOKENS;
    }
}

/* Takes one sampled (and accepted) token: the stopper decides, the released text is written,
 * and the token joins the sequence. Sets *stop (and g->end) when generation is over. */
static fx_status take_token(void *user, fx_token t, bool *stop, struct fx_error *err) {
    struct fx_cli_gen *g = user;
    struct fx_stop_result r;
    size_t len;
    const char *piece = fx_token_to_piece(g->vocab, t, false, &len);
    fx_status st = fx_stopper_push(g->stopper, t, piece ? piece : "", len, &r, err);
    if (st)
        return st;
    g->n_gen++;
    if (r.reason != FX_STOP_TOKEN)
        g->ids[g->n_ids++] = t;
    g->seq[g->n_seq++] = t;
    if ((st = emit(g, g->out, r.text, r.len, err)))
        return st;
    if (r.reason != FX_STOP_NONE) {
        g->end = end_of(r.reason);
        g->stopped = *stop = true;
    }
    return FX_OK;
}

fx_status fx_cli_gen_run(struct fx_cli_gen *g, FILE *out, const volatile sig_atomic_t *interrupt,
                         enum fx_cli_gen_end *end, struct fx_error *err) {
    g->n_ids = 0;
    g->text_len = 0;
    g->text[0] = '\0';
    g->out = out;
    g->n_gen = 0;
    g->stopped = false;
    g->n_seq = fx_context_kv_len(g->ctx);
    fx_stopper_reset(g->stopper);
    *end = FX_CLI_END_MAX_TOKENS;
    if (g->n_predict == 0)
        return FX_OK;
    int32_t n_ctx = fx_context_n_ctx(g->ctx);
    struct fx_stop_result r;
    fx_status st;
    /* The first token comes from the logits the caller left (the prompt's last row). */
    fx_token t;
    bool stop = false;
    if ((st = fx_sampler_sample(g->sampler, g->logits, &t, err)) ||
        (st = fx_sampler_accept(g->sampler, t, err)) || (st = take_token(g, t, &stop, err)))
        return st;
    /* Each step evaluates the last token (the sequence is the cache and that token): alone, or
     * with drafts after it when speculating. */
    while (!g->stopped) {
        int32_t pos = fx_context_kv_len(g->ctx);
        if (pos >= n_ctx) {
            *end = FX_CLI_END_CONTEXT_FULL;
            goto finish;
        }
        if (interrupt && *interrupt) {
            /* Every token shown is in the cache, the last one too. */
            if ((st = fx_forward_token(g->ctx, g->seq[g->n_seq - 1], pos, g->logits, err)))
                return st;
            *end = FX_CLI_END_INTERRUPTED;
            goto finish;
        }
        if (g->spec) {
            int32_t left = g->n_predict > 0 ? (int32_t)(g->n_predict - g->n_gen) : 0;
            st =
                fx_spec_step(g->spec, g->sampler, g->seq, g->n_seq, left, take_token, g, NULL, err);
        } else {
            t = g->seq[g->n_seq - 1];
            if (!(st = fx_forward_token(g->ctx, t, pos, g->logits, err)) &&
                !(st = fx_sampler_sample(g->sampler, g->logits, &t, err)) &&
                !(st = fx_sampler_accept(g->sampler, t, err)))
                st = take_token(g, t, &stop, err);
        }
        if (st)
            return st;
        if (g->moe_verbose)
            fx_cli_moe_report(fx_context_model(g->ctx), "step", &g->moe_last);
    }
    *end = g->end;
    return FX_OK;
finish:
    /* Ended by the caller or the context: what the stopper held back is output too. */
    fx_stopper_finish(g->stopper, &r);
    return emit(g, out, r.text, r.len, err);
}

void fx_cli_gen_print_spec(const struct fx_cli_gen *g, FILE *f, const char *prefix) {
    if (!g->spec)
        return;
    struct fx_spec_stats s;
    fx_spec_stats(g->spec, &s);
    fprintf(f,
            "%s: speculation (%s): acceptance %.1f%% (%llu of %llu drafts), %.2f tokens per "
            "verify step (%llu steps), %llu plain steps, switched off %llu times\n",
            prefix, fx_drafter_name(g->drafter),
            s.drafted ? 100.0 * (double)s.accepted / (double)s.drafted : 0.0,
            (unsigned long long)s.accepted, (unsigned long long)s.drafted,
            s.verify_steps ? (double)s.verify_out / (double)s.verify_steps : 0.0,
            (unsigned long long)s.verify_steps, (unsigned long long)s.plain_out,
            (unsigned long long)s.switched_off);
}
