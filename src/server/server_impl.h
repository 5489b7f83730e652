/* The server's private state, shared by http.c (libmicrohttpd: connections, routing, bodies,
 * authentication, suspend/resume), api.c (the endpoints: requests to the engine and responses
 * back, streamed or not) and metrics.c (the Prometheus text). */
#ifndef FX_SERVER_IMPL_H
#define FX_SERVER_IMPL_H

#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>

#include "server/openai.h"
#include "server/server.h"

enum fx_route {
    FX_ROUTE_NONE,
    FX_ROUTE_PAGE,
    FX_ROUTE_HEALTH,
    FX_ROUTE_MODELS,
    FX_ROUTE_METRICS,
    FX_ROUTE_COMPLETIONS,
    FX_ROUTE_CHAT,
    FX_ROUTE_EMBEDDINGS,
    FX_ROUTE_TOKENIZE,
    FX_ROUTE_DETOKENIZE,
};

struct fx_server {
    struct fx_engine *engine;
    const struct fx_model *model;
    const struct fx_vocab *vocab;
    struct fx_server_params p;
    char *model_name;
    char *bos_text, *eos_text; /* the chat template's bos_token and eos_token */
    struct MHD_Daemon *daemon;
    int port;
    long long created; /* unix time the server started */
    atomic_bool stopping;
    atomic_uint_fast64_t next_id;
    pthread_mutex_t conns_mu; /* guards the list of connections */
    struct fx_conn *conns;
    /* HTTP responses by class, for /metrics. */
    atomic_uint_fast64_t http_responses[6];
};

/* One request on a connection (keep-alive connections carry several, one after another). */
struct fx_conn {
    struct fx_server *srv;
    struct MHD_Connection *mhd;
    struct fx_conn *prev, *next; /* in srv->conns */
    enum fx_route route;
    char *body; /* the request body so far */
    size_t len, cap;
    bool too_big;    /* past max_body: 413 */
    bool dispatched; /* the body was complete and handled */
    bool responded;  /* a response was queued */
    double t_start;

    pthread_mutex_t mu; /* guards suspended, against the engine's notification */
    bool suspended;

    struct fx_oai_request req; /* the parsed request, kept for the response */
    struct fx_gen_req *gen;
    struct fx_embed_req *emb;
    char id[48];
    long long created;

    /* A streamed response: the bytes not sent yet, and what of the output they cover. */
    char *out;
    size_t out_len, out_pos, out_cap;
    size_t *sent_text;  /* [n] bytes of each choice's text sent */
    int32_t *sent_toks; /* [n] tokens of each choice's logprobs sent */
    bool *sent_finish;  /* [n] */
    bool sent_role, sent_usage, sent_done;
};

/* http.c: responses. Each queues one response on c and returns whether MHD took it. */
enum MHD_Result fx_http_json(struct fx_conn *c, unsigned status, json_t *doc);
enum MHD_Result fx_http_error(struct fx_conn *c, unsigned status, const char *type,
                              const char *param, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
enum MHD_Result fx_http_text(struct fx_conn *c, unsigned status, const char *content_type,
                             const char *text, size_t len, bool copy);
/* Queues the streamed (Server-Sent Events) response whose bytes fx_api_stream_fill makes. */
enum MHD_Result fx_http_stream(struct fx_conn *c);
/* After a job was submitted: suspends the connection until the engine notifies that the job is
 * done (then the access handler runs again and calls fx_api_resume), unless it is done already.
 * Returns false when it is done already. */
bool fx_http_wait(struct fx_conn *c);
/* The engine's notification: resumes c when it is suspended. */
void fx_http_notify(void *conn);

/* api.c */
enum MHD_Result fx_api_dispatch(struct fx_conn *c);
enum MHD_Result fx_api_resume(struct fx_conn *c);
bool fx_api_job_done(struct fx_conn *c);
/* Appends to c->out the events of the output that is new; returns 1 when it appended, 0 when
 * there is nothing yet, -1 when the stream is over. */
int fx_api_stream_fill(struct fx_conn *c);
void fx_api_conn_free(struct fx_conn *c);

/* metrics.c */
enum MHD_Result fx_metrics_respond(struct fx_conn *c);

/* A JSON string of len bytes that may not be valid UTF-8 (a token's piece, a cut): invalid bytes
 * become U+FFFD. */
json_t *fx_json_string_lossy(const char *s, size_t len);

#endif
