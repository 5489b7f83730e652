/* The HTTP server of `ferrox serve`: OpenAI-compatible endpoints, Server-Sent Events, metrics and
 * the chat page, on libmicrohttpd (its own polling threads, connection limits, per-connection
 * timeouts, and suspend/resume so that a connection waiting for tokens costs no thread), with
 * JSON from jansson. It parses and validates requests, tokenizes and renders chat templates on
 * its own threads, and hands token ids to the engine (engine/engine.h), which owns the model.
 *
 *   GET  /                     the chat page
 *   GET  /health               {"status": "ok"}
 *   GET  /v1/models            the served model
 *   GET  /metrics              Prometheus text, vLLM's names with the prefix ferrox:
 *   POST /v1/completions       prompt -> text (stream true/false)
 *   POST /v1/chat/completions  messages -> the chat template -> text (stream true/false)
 *   POST /v1/embeddings        pooled, L2-normalised final hidden states
 *   POST /tokenize, /detokenize
 *
 * With an API key, /v1/... and /tokenize, /detokenize need "Authorization: Bearer KEY" (compared
 * in constant time; 401 otherwise); the page, /health and /metrics stay open, as in vLLM. */
#ifndef FX_SERVER_H
#define FX_SERVER_H

#include <stddef.h>

#include "engine/engine.h"
#include "ferrox.h"

struct fx_server_params {
    const char *host;       /* default "127.0.0.1" */
    int port;               /* default 8080; 0: any free port (fx_server_port tells which) */
    const char *api_key;    /* NULL: no key */
    size_t max_body;        /* request bodies larger than this get 413; default 16 MiB */
    int timeout_s;          /* an idle connection is closed after this; default 600 */
    int http_threads;       /* polling threads; default 4 */
    int conn_max;           /* connections at once; default 256 */
    const char *model_name; /* the "model" reported and expected; default: the file's name */
    /* What a request does not say: the server's sampling defaults and max_tokens (-1: until
     * the end of text or a full context). */
    struct fx_sampler_params sampler;
    int32_t max_tokens;
    const struct fx_chat_template *tmpl; /* borrowed; NULL: chat requests are refused */
    bool verbose;                        /* one line per request on stderr */
};

struct fx_server_params fx_server_default_params(void);

struct fx_server;

/* Starts listening. The engine, model, vocabulary and template are borrowed. */
fx_status fx_server_create(struct fx_engine *e, const struct fx_model *m, const struct fx_vocab *v,
                           const struct fx_server_params *p, struct fx_server **out,
                           struct fx_error *err);
/* The port it listens on. */
int fx_server_port(const struct fx_server *s);
/* Graceful stop: no new connections, new requests get 503, in-flight ones finish for up to
 * grace_s seconds (then they are cancelled), and every connection is closed. */
void fx_server_shutdown(struct fx_server *s, double grace_s);
void fx_server_free(struct fx_server *s);

#endif
