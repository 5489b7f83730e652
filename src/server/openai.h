/* The OpenAI request schema: a JSON body to a validated request struct. Pure (no model, no
 * engine, no I/O), so that it can be fuzzed on its own (fuzz/fuzz_request.c).
 *
 * Every field a request may carry is checked for its type and range; a failure is a 400 whose
 * message names the field ("temperature: 3.5 is out of range [0, 2]") and, for a body that is
 * not JSON, the byte offset where the parser stopped. Unknown fields are ignored, and null reads
 * as "not given", as OpenAI's server does. */
#ifndef FX_SERVER_OPENAI_H
#define FX_SERVER_OPENAI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ferrox.h"

enum fx_oai_endpoint {
    FX_OAI_COMPLETIONS, /* POST /v1/completions */
    FX_OAI_CHAT,        /* POST /v1/chat/completions */
    FX_OAI_EMBEDDINGS,  /* POST /v1/embeddings */
    FX_OAI_TOKENIZE,    /* POST /tokenize */
    FX_OAI_DETOKENIZE,  /* POST /detokenize */
};

/* An OpenAI-style error: HTTP status, the field it is about ("" for none) and a message. */
struct fx_oai_error {
    int status;
    char param[96];
    char message[320];
};

/* A prompt or one input: text to tokenize, or token ids given as they are. */
struct fx_oai_text {
    char *text; /* NUL-terminated; len bytes */
    size_t len;
    fx_token *ids;
    int32_t n_ids;
    bool is_ids;
};

/* What the parser needs to know of the server: the vocabulary size (token ids and logit_bias
 * keys are checked against it) and the most choices a request may ask for. */
struct fx_oai_limits {
    int32_t n_vocab;
    int32_t n_max;
};

#define FX_OAI_MAX_STOPS  16
#define FX_OAI_MAX_INPUTS 2048

struct fx_oai_request {
    enum fx_oai_endpoint endpoint;
    char *model;               /* NULL when not given */
    struct fx_oai_text *input; /* n_input: the prompt (1), embeddings inputs, tokenize content */
    size_t n_input;
    char *messages_json;              /* chat: the messages array, compact JSON */
    char *template_vars;              /* chat: chat_template_kwargs as a JSON object, or NULL */
    int32_t max_tokens;               /* -1: not given */
    int32_t n;                        /* choices (default 1) */
    struct fx_sampler_params sampler; /* the server's defaults with the request's fields */
    bool seed_given;
    char **stops; /* n_stops non-empty strings */
    size_t n_stops;
    struct fx_logit_bias *bias; /* n_bias entries (also sampler.logit_bias) */
    size_t n_bias;
    bool stream, include_usage;
    int32_t logprobs; /* -1: none; else alternatives per token (0..20) */
    bool ignore_eos;
    bool add_special, parse_special, with_pieces; /* tokenize */
    bool base64;                                  /* embeddings: encoding_format "base64" */
    int32_t dimensions;                           /* embeddings: 0, or a size to cut to */
    int32_t truncate; /* truncate_prompt_tokens (vLLM's): keep the prompt's last N tokens;
                         0: a prompt too long for the context is refused */
};

/* Parses and validates body[0..len) for endpoint. On failure err says why (status 400) and out
 * holds nothing to free; on success free out with fx_oai_request_free. */
bool fx_oai_parse(enum fx_oai_endpoint endpoint, const char *body, size_t len,
                  const struct fx_oai_limits *lim, const struct fx_sampler_params *defaults,
                  struct fx_oai_request *out, struct fx_oai_error *err);
void fx_oai_request_free(struct fx_oai_request *r);

/* Fills err with a status, a field and a printf-style message; returns false. */
bool fx_oai_fail(struct fx_oai_error *err, int status, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
