/* What `ferrox run` and `ferrox chat` share: the model, context, sampling and speculation options
 * and their parsing, loading a model (perplexity uses that too), and the generation loop (sample,
 * stop, stream the text, evaluate the token, or draft and verify several at once). */
#ifndef FX_CLI_GEN_H
#define FX_CLI_GEN_H

#include <getopt.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>

#include "ferrox.h"

/* getopt_long codes of the shared long-only options; a command numbers its own from
 * FX_CLI_OPT_OWN. */
enum {
    FX_CLI_OPT_TEMP = 0x100,
    FX_CLI_OPT_TOP_K,
    FX_CLI_OPT_TOP_P,
    FX_CLI_OPT_MIN_P,
    FX_CLI_OPT_REPEAT_PENALTY,
    FX_CLI_OPT_REPEAT_LAST_N,
    FX_CLI_OPT_PRESENCE_PENALTY,
    FX_CLI_OPT_FREQUENCY_PENALTY,
    FX_CLI_OPT_IGNORE_EOS,
    FX_CLI_OPT_CACHE_TYPE_K,
    FX_CLI_OPT_CACHE_TYPE_V,
    FX_CLI_OPT_SPEC,
    FX_CLI_OPT_DRAFT_MAX,
    FX_CLI_OPT_DRAFT_MIN,
    FX_CLI_OPT_MODEL_DRAFT,
    FX_CLI_OPT_SPEC_FIXED,
    FX_CLI_OPT_MOE_CACHE,
    FX_CLI_OPT_MOE_LOOKAHEAD,
    FX_CLI_OPT_MOE_EVICT,
    FX_CLI_OPT_OWN = 0x200,
};

/* The shared options, for a command's getopt_long tables: its own entries follow these. */
#define FX_CLI_GEN_SHORTOPTS "m:t:c:b:n:s:l:r:"
#define FX_CLI_GEN_LONGOPTS                                                                        \
    {"model", required_argument, NULL, 'm'}, {"threads", required_argument, NULL, 't'},            \
        {"ctx-size", required_argument, NULL, 'c'}, {"batch-size", required_argument, NULL, 'b'},  \
        {"n-predict", required_argument, NULL, 'n'}, {"predict", required_argument, NULL, 'n'},    \
        {"seed", required_argument, NULL, 's'}, {"logit-bias", required_argument, NULL, 'l'},      \
        {"reverse-prompt", required_argument, NULL, 'r'}, {"stop", required_argument, NULL, 'r'},  \
        {"temp", required_argument, NULL, FX_CLI_OPT_TEMP},                                        \
        {"top-k", required_argument, NULL, FX_CLI_OPT_TOP_K},                                      \
        {"top-p", required_argument, NULL, FX_CLI_OPT_TOP_P},                                      \
        {"min-p", required_argument, NULL, FX_CLI_OPT_MIN_P},                                      \
        {"repeat-penalty", required_argument, NULL, FX_CLI_OPT_REPEAT_PENALTY},                    \
        {"repeat-last-n", required_argument, NULL, FX_CLI_OPT_REPEAT_LAST_N},                      \
        {"presence-penalty", required_argument, NULL, FX_CLI_OPT_PRESENCE_PENALTY},                \
        {"frequency-penalty", required_argument, NULL, FX_CLI_OPT_FREQUENCY_PENALTY},              \
        {"ignore-eos", no_argument, NULL, FX_CLI_OPT_IGNORE_EOS},                                  \
        {"cache-type-k", required_argument, NULL, FX_CLI_OPT_CACHE_TYPE_K},                        \
        {"cache-type-v", required_argument, NULL, FX_CLI_OPT_CACHE_TYPE_V},                        \
        {"spec", required_argument, NULL, FX_CLI_OPT_SPEC},                                        \
        {"draft-max", required_argument, NULL, FX_CLI_OPT_DRAFT_MAX},                              \
        {"draft", required_argument, NULL, FX_CLI_OPT_DRAFT_MAX},                                  \
        {"draft-n", required_argument, NULL, FX_CLI_OPT_DRAFT_MAX},                                \
        {"draft-min", required_argument, NULL, FX_CLI_OPT_DRAFT_MIN},                              \
        {"draft-n-min", required_argument, NULL, FX_CLI_OPT_DRAFT_MIN},                            \
        {"model-draft", required_argument, NULL, FX_CLI_OPT_MODEL_DRAFT},                          \
        {"spec-fixed", no_argument, NULL, FX_CLI_OPT_SPEC_FIXED},                                  \
        {"moe-cache", required_argument, NULL, FX_CLI_OPT_MOE_CACHE},                              \
        {"moe-lookahead", required_argument, NULL, FX_CLI_OPT_MOE_LOOKAHEAD}, {                    \
        "moe-evict", required_argument, NULL, FX_CLI_OPT_MOE_EVICT                                 \
    }

/* --spec: what drafts tokens for speculative decoding. */
enum fx_cli_spec { FX_CLI_SPEC_NONE, FX_CLI_SPEC_NGRAM, FX_CLI_SPEC_DRAFT, FX_CLI_SPEC_MTP };
/* The default, chosen by measurement (docs/PERFORMANCE.md, "Speculative decoding"). */
#define FX_CLI_SPEC_DEFAULT FX_CLI_SPEC_NGRAM

struct fx_cli_gen_opts {
    const char *model_path; /* -m; NULL when not given */
    int n_threads;          /* 0: one per CPU */
    int n_ctx;              /* 0: the model's training context, at most 4096 */
    int n_batch;            /* 0: the context's default */
    int n_predict;          /* tokens to generate; < 0: until the end of text or a full context */
    enum fx_type type_k, type_v; /* -ctk / -ctv: the KV cache's element types */
    bool seed_given;             /* --seed; otherwise fx_cli_gen_opts_finish draws one */
    bool ignore_eos;             /* end-of-generation tokens are banned (logit bias -inf) */
    struct fx_sampler_params sampler;
    struct fx_logit_bias *bias; /* [n_bias], from --logit-bias */
    size_t n_bias;
    const char **stops; /* [n_stops], from --stop / -r (borrowed from argv) */
    size_t n_stops;
    enum fx_cli_spec spec;  /* --spec; -md alone selects draft */
    bool spec_given;        /* --spec was given */
    int draft_max;          /* --draft-max (0: no speculation) */
    int draft_min;          /* --draft-min */
    bool spec_fixed;        /* --spec-fixed: always draft_max, never switched off */
    const char *draft_path; /* -md / --model-draft; NULL when not given */
    uint64_t moe_cache;     /* --moe-cache bytes (fx_model_params.moe_cache_bytes); 0: resident */
    int32_t moe_lookahead;  /* --moe-lookahead (fx_model_params.moe_lookahead) */
    enum fx_moe_evict moe_evict; /* --moe-evict (fx_model_params.moe_evict) */
};

/* llama.cpp's single-dash spelling -md rewritten in argv as --model-draft (call before
 * getopt_long, which would read -md as -m d). */
void fx_cli_gen_expand_aliases(int argc, char **argv);

/* llama.cpp's defaults (fx_sampler_default_params), no token limit. */
void fx_cli_gen_opts_init(struct fx_cli_gen_opts *o);
void fx_cli_gen_opts_free(struct fx_cli_gen_opts *o);
/* Handles one getopt_long result: 1 when it was a shared option, 0 when it is not one, -1 for a
 * bad value (reported on stderr as "ferrox CMD: ..."). */
int fx_cli_gen_opt(struct fx_cli_gen_opts *o, const char *cmd, int c, const char *arg);
/* After parsing: draws a seed when none was given; -md without --spec selects the draft model. */
void fx_cli_gen_opts_finish(struct fx_cli_gen_opts *o);
/* The help text of the shared options. */
void fx_cli_gen_usage(FILE *out);

/* A model with its vocabulary, loaded for a command. */
struct fx_cli_model {
    struct fx_model *model;
    struct fx_vocab *vocab;
    double load_seconds;
};

/* Loads path (with a progress bar on stderr when it is a terminal and the file is large) and its
 * vocabulary, with the expert cache o asks for (NULL: resident); on failure prints
 * "ferrox CMD: ..." and returns false. */
bool fx_cli_model_load(const char *cmd, const char *path, const struct fx_cli_gen_opts *o,
                       struct fx_cli_model *out);
void fx_cli_model_free(struct fx_cli_model *m);
/* Creates the context the options ask for; on failure prints the error and returns NULL. */
struct fx_context *fx_cli_context_create(const char *cmd, const struct fx_cli_model *m,
                                         const struct fx_cli_gen_opts *o);

/* Why a generation ended. */
enum fx_cli_gen_end {
    FX_CLI_END_EOG,          /* the model ended its text (an end-of-generation token) */
    FX_CLI_END_STOP_STRING,  /* a --stop string appeared */
    FX_CLI_END_MAX_TOKENS,   /* -n tokens were generated */
    FX_CLI_END_CONTEXT_FULL, /* no position was left in the context */
    FX_CLI_END_INTERRUPTED,  /* the interrupt flag was set (Ctrl-C) */
};

/* "end of text", "stop string", ... */
const char *fx_cli_gen_end_name(enum fx_cli_gen_end end);

/* A generator: a sampler and a stopper over one context, and with speculation a drafter (a draft
 * model it loads, with its own context) and the speculation state. It borrows the context and the
 * vocabulary. */
struct fx_cli_gen {
    struct fx_context *ctx;
    const struct fx_vocab *vocab;
    struct fx_sampler *sampler;
    struct fx_stopper *stopper;
    int32_t n_vocab;
    int n_predict; /* as in the options */
    float *logits; /* [n_vocab]: the row the next token is drawn from */
    fx_token *ids; /* [n_ctx + 1]: the last generation's tokens, end-of-generation excluded */
    int32_t n_ids;
    char *text; /* the last generation's text (NUL-terminated), as it was written */
    size_t text_len, text_cap;
    /* The sequence: the tokens the cache holds (FX_TOKEN_NULL where they were loaded from a
     * saved state and are not known) and, while generating, the token sampled last. */
    fx_token *seq; /* [n_ctx + 1] */
    int32_t n_seq;
    struct fx_model *draft_model; /* -md, or NULL */
    struct fx_drafter *drafter;   /* NULL without speculation */
    struct fx_spec *spec;         /* NULL without speculation */
    /* The generation in progress (the loop's state, for the token callback). */
    FILE *out;
    int64_t n_gen; /* tokens sampled */
    bool stopped;  /* the stopper ended it, for the reason in `end` */
    enum fx_cli_gen_end end;
    /* -v: the expert cache's figures after every step (fx_cli_moe_report), and the counters at
     * the previous report. */
    bool moe_verbose;
    struct fx_moe_stats moe_last;
};

fx_status fx_cli_gen_create(struct fx_context *ctx, const struct fx_vocab *v,
                            const struct fx_cli_gen_opts *o, struct fx_cli_gen **out,
                            struct fx_error *err);
void fx_cli_gen_free(struct fx_cli_gen *g);

/* Evaluates tokens[0..n) (n >= 1) at positions pos0.. with fx_forward_batch_last, leaving the
 * last row's logits in g->logits; the tokens join the sampler's penalty window, as llama.cpp's
 * tools have it. */
fx_status fx_cli_gen_prefill(struct fx_cli_gen *g, const fx_token *tokens, int32_t n, int32_t pos0,
                             struct fx_error *err);

/* Generates from g->logits, the next position being the cache's length: each token is sampled,
 * its text (held back while it may be the start of a stop string or of a UTF-8 character) written
 * to out and flushed, and the token evaluated (with speculation: drafts verified with it, several
 * tokens per step, the same tokens as without), until an end-of-generation token (unless
 * ignore_eos), a stop string, n_predict tokens, a full context, or *interrupt set. Every token
 * written is in the cache except the last one. */
fx_status fx_cli_gen_run(struct fx_cli_gen *g, FILE *out, const volatile sig_atomic_t *interrupt,
                         enum fx_cli_gen_end *end, struct fx_error *err);

/* With speculation, one line on f: "PREFIX: speculation (ngram): acceptance 87.5% (...), 6.1
 * tokens per verify step, ..." (counts since the generator was created); nothing without. */
void fx_cli_gen_print_spec(const struct fx_cli_gen *g, FILE *f, const char *prefix);

#endif
