/* libmicrohttpd glue: the daemon, routing, request bodies, authentication, responses, and the
 * suspend/resume handshake with the engine.
 *
 * Why libmicrohttpd: a well-kept Debian library (libmicrohttpd-dev) with its own polling threads
 * (epoll), limits on connections and on the memory of each (a header flood gets 431, not an
 * allocation), idle timeouts per connection, chunked responses from a callback for Server-Sent
 * Events, and suspend/resume: a connection waiting for tokens is parked (no thread, no polling)
 * and the engine resumes it when they come.
 *
 * The handshake: a connection that needs the engine's output and finds none sets c->suspended
 * and suspends itself holding c->mu; the engine, after adding output, takes c->mu and resumes the
 * connection only if it finds c->suspended set (clearing it). A connection is therefore resumed
 * exactly once per suspension, never before it, and is alive while suspended (a suspended
 * connection cannot complete). */
#include <arpa/inet.h>
#include <inttypes.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/error.h"
#include "server/server_impl.h"

/* The chat page is another file's (server/page.c); until it exists a placeholder stands in. */
#if defined(__has_include)
#if __has_include("server/page.h")
#include "server/page.h"
#define FX_HAVE_PAGE 1
#endif
#endif
#ifndef FX_HAVE_PAGE
static const char placeholder_page[] =
    "<!doctype html><html><head><meta charset=\"utf-8\"><title>ferrox</title></head><body>"
    "<h1>ferrox serve</h1><p>The chat page is not built into this binary yet. The API is at "
    "<code>/v1/chat/completions</code>, <code>/v1/completions</code> and "
    "<code>/v1/embeddings</code>; metrics at <a href=\"/metrics\">/metrics</a>.</p></body></html>";

static const char *fx_serve_page_html(size_t *len) {
    *len = sizeof placeholder_page - 1;
    return placeholder_page;
}
#endif

struct fx_server_params fx_server_default_params(void) {
    return (struct fx_server_params){.host = "127.0.0.1",
                                     .port = 8080,
                                     .max_body = 16u << 20,
                                     .timeout_s = 600,
                                     .http_threads = 4,
                                     .conn_max = 256,
                                     .sampler = fx_sampler_default_params(),
                                     .max_tokens = -1};
}

/* ---- responses ------------------------------------------------------------------------------- */

static void count_response(struct fx_server *s, unsigned status) {
    unsigned cls = status / 100;
    if (cls >= 1 && cls <= 5)
        atomic_fetch_add(&s->http_responses[cls], 1);
}

static enum MHD_Result queue(struct fx_conn *c, unsigned status, struct MHD_Response *r,
                             const char *content_type) {
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    if (status == MHD_HTTP_SERVICE_UNAVAILABLE)
        MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    if (status == MHD_HTTP_UNAUTHORIZED)
        MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    enum MHD_Result ok = MHD_queue_response(c->mhd, status, r);
    MHD_destroy_response(r);
    c->responded = true;
    count_response(c->srv, status);
    if (c->srv->p.verbose)
        fprintf(stderr, "ferrox serve: %s %u %.1f ms\n", c->id[0] ? c->id : "-", status,
                (fx_now() - c->t_start) * 1e3);
    return ok;
}

enum MHD_Result fx_http_text(struct fx_conn *c, unsigned status, const char *content_type,
                             const char *text, size_t len, bool copy) {
    struct MHD_Response *r = MHD_create_response_from_buffer(
        len, (void *)text, copy ? MHD_RESPMEM_MUST_COPY : MHD_RESPMEM_PERSISTENT);
    return queue(c, status, r, content_type);
}

enum MHD_Result fx_http_json(struct fx_conn *c, unsigned status, json_t *doc) {
    char *text = doc ? json_dumps(doc, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
    json_decref(doc);
    if (!text)
        return fx_http_text(c, 500, "application/json",
                            "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\"}}",
                            59, false);
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    if (!r)
        free(text);
    return queue(c, status, r, "application/json");
}

enum MHD_Result fx_http_error(struct fx_conn *c, unsigned status, const char *type,
                              const char *param, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    json_t *e = json_pack(
        "{s:o,s:s,s:o,s:n}", "message", fx_json_string_lossy(msg, strlen(msg)), "type", type,
        "param", param && *param ? fx_json_string_lossy(param, strlen(param)) : json_null(),
        "code");
    return fx_http_json(c, status, e ? json_pack("{s:o}", "error", e) : NULL);
}

/* ---- streaming ------------------------------------------------------------------------------- */

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    struct fx_conn *c = cls;
    pthread_mutex_lock(&c->mu);
    int more = 1;
    if (c->out_pos == c->out_len) {
        c->out_pos = c->out_len = 0;
        more = fx_api_stream_fill(c);
    }
    if (c->out_pos < c->out_len) {
        size_t n = c->out_len - c->out_pos < max ? c->out_len - c->out_pos : max;
        memcpy(buf, c->out + c->out_pos, n);
        c->out_pos += n;
        pthread_mutex_unlock(&c->mu);
        return (ssize_t)n;
    }
    if (more < 0) {
        pthread_mutex_unlock(&c->mu);
        return MHD_CONTENT_READER_END_OF_STREAM;
    }
    /* Nothing yet: park the connection until the engine has more. */
    c->suspended = true;
    MHD_suspend_connection(c->mhd);
    pthread_mutex_unlock(&c->mu);
    return 0;
}

enum MHD_Result fx_http_stream(struct fx_conn *c) {
    struct MHD_Response *r =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_reader, c, NULL);
    if (r) {
        MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        MHD_add_response_header(r, "X-Accel-Buffering", "no");
    }
    return queue(c, MHD_HTTP_OK, r, "text/event-stream");
}

bool fx_http_wait(struct fx_conn *c) {
    pthread_mutex_lock(&c->mu);
    bool done = fx_api_job_done(c);
    if (!done) {
        c->suspended = true;
        MHD_suspend_connection(c->mhd);
    }
    pthread_mutex_unlock(&c->mu);
    return !done;
}

void fx_http_notify(void *conn) {
    struct fx_conn *c = conn;
    pthread_mutex_lock(&c->mu);
    bool resume = c->suspended;
    c->suspended = false;
    /* Resumed holding c->mu: c cannot complete (and be freed) before MHD has it back. */
    if (resume)
        MHD_resume_connection(c->mhd);
    pthread_mutex_unlock(&c->mu);
}

/* ---- requests -------------------------------------------------------------------------------- */

static enum fx_route route_of(const char *url, bool *post) {
    static const struct {
        const char *path;
        enum fx_route route;
        bool post;
    } routes[] = {
        {"/", FX_ROUTE_PAGE, false},
        {"/index.html", FX_ROUTE_PAGE, false},
        {"/health", FX_ROUTE_HEALTH, false},
        {"/v1/health", FX_ROUTE_HEALTH, false},
        {"/v1/models", FX_ROUTE_MODELS, false},
        {"/models", FX_ROUTE_MODELS, false},
        {"/metrics", FX_ROUTE_METRICS, false},
        {"/v1/completions", FX_ROUTE_COMPLETIONS, true},
        {"/completions", FX_ROUTE_COMPLETIONS, true},
        {"/v1/chat/completions", FX_ROUTE_CHAT, true},
        {"/chat/completions", FX_ROUTE_CHAT, true},
        {"/v1/embeddings", FX_ROUTE_EMBEDDINGS, true},
        {"/embeddings", FX_ROUTE_EMBEDDINGS, true},
        {"/tokenize", FX_ROUTE_TOKENIZE, true},
        {"/detokenize", FX_ROUTE_DETOKENIZE, true},
    };
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        if (strcmp(url, routes[i].path) == 0) {
            *post = routes[i].post;
            return routes[i].route;
        }
    return FX_ROUTE_NONE;
}

/* The key in constant time: the loop runs over the key's length whatever is given, and every
 * byte is compared. */
static bool key_matches(const char *given, const char *key) {
    size_t n = strlen(given), k = strlen(key);
    unsigned char diff = n != k;
    for (size_t i = 0; i < k; i++)
        diff |= (unsigned char)(key[i] ^ (i < n ? given[i] : 0));
    return diff == 0;
}

static bool authorized(struct fx_conn *c) {
    const char *key = c->srv->p.api_key;
    if (!key || !*key)
        return true;
    if (c->route == FX_ROUTE_PAGE || c->route == FX_ROUTE_HEALTH || c->route == FX_ROUTE_METRICS)
        return true;
    const char *h = MHD_lookup_connection_value(c->mhd, MHD_HEADER_KIND, "Authorization");
    if (!h || strncasecmp(h, "Bearer ", 7) != 0)
        return false;
    h += 7;
    while (*h == ' ')
        h++;
    return key_matches(h, key);
}

static enum MHD_Result respond_get(struct fx_conn *c) {
    struct fx_server *s = c->srv;
    switch (c->route) {
    case FX_ROUTE_PAGE: {
        size_t len;
        const char *html = fx_serve_page_html(&len);
        return fx_http_text(c, 200, "text/html; charset=utf-8", html, len, false);
    }
    case FX_ROUTE_HEALTH:
        if (atomic_load(&s->stopping))
            return fx_http_json(c, 503, json_pack("{s:s}", "status", "shutting down"));
        return fx_http_json(c, 200, json_pack("{s:s}", "status", "ok"));
    case FX_ROUTE_MODELS: {
        json_t *m = json_pack(
            "{s:o,s:s,s:I,s:s,s:{s:s,s:I,s:I,s:I,s:I,s:I,s:I}}", "id",
            fx_json_string_lossy(s->model_name, strlen(s->model_name)), "object", "model",
            "created", (json_int_t)s->created, "owned_by", "ferrox", "meta", "arch",
            fx_model_arch(s->model), "n_vocab", (json_int_t)fx_model_n_vocab(s->model),
            "n_ctx_train", (json_int_t)fx_model_n_ctx_train(s->model), "n_embd",
            (json_int_t)fx_model_n_embd(s->model), "n_params",
            (json_int_t)fx_model_n_params(s->model), "size", (json_int_t)fx_model_size(s->model),
            "n_ctx_seq", (json_int_t)fx_engine_n_ctx_seq(s->engine));
        return fx_http_json(c, 200,
                            m ? json_pack("{s:s,s:[o]}", "object", "list", "data", m) : NULL);
    }
    case FX_ROUTE_METRICS:
        return fx_metrics_respond(c);
    default:
        return fx_http_error(c, 404, "not_found_error", NULL, "not found");
    }
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *connection, const char *url,
                                 const char *method, const char *version, const char *upload,
                                 size_t *upload_size, void **con_cls) {
    (void)version;
    struct fx_server *s = cls;
    struct fx_conn *c = *con_cls;
    if (!c) {
        /* Headers are in: route, method, key and declared size are checked before any body. */
        if (!(c = calloc(1, sizeof *c)))
            return MHD_NO;
        c->srv = s;
        c->mhd = connection;
        c->t_start = fx_now();
        pthread_mutex_init(&c->mu, NULL);
        pthread_mutex_lock(&s->conns_mu);
        c->next = s->conns;
        if (s->conns)
            s->conns->prev = c;
        s->conns = c;
        pthread_mutex_unlock(&s->conns_mu);
        *con_cls = c;
        bool post = false;
        c->route = route_of(url, &post);
        bool is_post = strcmp(method, MHD_HTTP_METHOD_POST) == 0;
        bool is_get =
            strcmp(method, MHD_HTTP_METHOD_GET) == 0 || strcmp(method, MHD_HTTP_METHOD_HEAD) == 0;
        if (c->route == FX_ROUTE_NONE)
            return fx_http_error(c, 404, "not_found_error", NULL, "not found: %.200s %.200s",
                                 method, url);
        if (post ? !is_post : !is_get)
            return fx_http_error(c, 405, "invalid_request_error", NULL,
                                 "%.200s takes %s, not %.20s", url, post ? "POST" : "GET", method);
        if (!authorized(c))
            return fx_http_error(c, 401, "invalid_request_error", NULL,
                                 "a valid API key is needed (Authorization: Bearer KEY)");
        const char *cl = MHD_lookup_connection_value(connection, MHD_HEADER_KIND,
                                                     MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl) {
            char *end;
            unsigned long long n = strtoull(cl, &end, 10);
            if (end != cl && n > s->p.max_body)
                return fx_http_error(c, 413, "invalid_request_error", NULL,
                                     "the body (%llu bytes) is larger than --max-body (%zu)", n,
                                     s->p.max_body);
        }
        return MHD_YES;
    }
    if (c->responded) { /* an early error: the rest of the body is dropped */
        *upload_size = 0;
        return MHD_YES;
    }
    if (*upload_size) {
        size_t n = *upload_size;
        *upload_size = 0;
        /* A body past --max-body without a Content-Length (chunked) is dropped as it comes and
         * answered with 413 once complete (libmicrohttpd takes no response in mid-body); one
         * that goes on past 16 times the limit has its connection closed. */
        if (c->too_big || c->len + n > s->p.max_body) {
            free(c->body);
            c->body = NULL;
            c->cap = 0;
            c->len = c->len + n < c->len ? SIZE_MAX : c->len + n;
            c->too_big = true;
            return c->len / 16 > s->p.max_body ? MHD_NO : MHD_YES;
        }
        if (c->len + n + 1 > c->cap) {
            size_t cap = c->cap ? c->cap : 4096;
            while (cap < c->len + n + 1)
                cap *= 2;
            char *grown = realloc(c->body, cap);
            if (!grown)
                return fx_http_error(c, 500, "server_error", NULL, "out of memory for the body");
            c->body = grown;
            c->cap = cap;
        }
        memcpy(c->body + c->len, upload, n);
        c->len += n;
        c->body[c->len] = '\0';
        return MHD_YES;
    }
    if (c->dispatched)
        return fx_api_resume(c); /* resumed: the job is done, or the stream's response is out */
    c->dispatched = true;
    if (c->too_big)
        return fx_http_error(c, 413, "invalid_request_error", NULL,
                             "the body is larger than --max-body (%zu bytes)", s->p.max_body);
    if (atomic_load(&s->stopping) && c->route != FX_ROUTE_HEALTH)
        return fx_http_error(c, 503, "server_error", NULL, "the server is shutting down");
    if (c->route <= FX_ROUTE_METRICS)
        return respond_get(c);
    return fx_api_dispatch(c);
}

static void on_completed(void *cls, struct MHD_Connection *connection, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    (void)connection;
    (void)toe;
    struct fx_server *s = cls;
    struct fx_conn *c = *con_cls;
    if (!c)
        return;
    *con_cls = NULL;
    /* No notification reaches c after the detach; the release cancels what is not done (a
     * client that went away), freeing its sequences at the engine's next step. */
    if (c->gen) {
        fx_gen_req_detach(c->gen);
        fx_gen_req_release(c->gen);
    }
    if (c->emb) {
        fx_embed_req_detach(c->emb);
        fx_embed_req_release(c->emb);
    }
    pthread_mutex_lock(&s->conns_mu);
    if (c->prev)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    pthread_mutex_unlock(&s->conns_mu);
    fx_api_conn_free(c);
    pthread_mutex_destroy(&c->mu);
    free(c->body);
    free(c);
}

static void mhd_log(void *cls, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));
static void mhd_log(void *cls, const char *fmt, va_list ap) {
    struct fx_server *s = cls;
    if (!s->p.verbose)
        return;
    fputs("ferrox serve: http: ", stderr);
    vfprintf(stderr, fmt, ap);
}

/* ---- the server ------------------------------------------------------------------------------ */

fx_status fx_server_create(struct fx_engine *e, const struct fx_model *m, const struct fx_vocab *v,
                           const struct fx_server_params *params, struct fx_server **out,
                           struct fx_error *err) {
    *out = NULL;
    struct fx_server_params p = params ? *params : fx_server_default_params();
    if (!p.host || !*p.host)
        p.host = "127.0.0.1";
    if (p.port < 0 || p.port > 65535)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET, "--port %d: 0 to 65535", p.port);
    if (p.http_threads < 1)
        p.http_threads = 1;
    if (p.conn_max < 1)
        p.conn_max = 1;
    if (p.timeout_s < 1)
        p.timeout_s = 1;
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *ai = NULL;
    char port[16];
    snprintf(port, sizeof port, "%d", p.port);
    int gai = getaddrinfo(p.host, port, &hints, &ai);
    if (gai != 0 || !ai)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET, "--host %s: %s", p.host,
                            gai_strerror(gai));

    struct fx_server *s = calloc(1, sizeof *s);
    if (!s) {
        freeaddrinfo(ai);
        return fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "out of memory for the server");
    }
    pthread_mutex_init(&s->conns_mu, NULL);
    s->engine = e;
    s->model = m;
    s->vocab = v;
    s->p = p;
    s->created = (long long)time(NULL);
    atomic_init(&s->stopping, false);
    atomic_init(&s->next_id, 1);
    s->model_name = strdup(p.model_name && *p.model_name ? p.model_name : "ferrox");
    s->p.model_name = s->model_name;
    size_t len;
    const char *t;
    fx_token bos = fx_vocab_bos(v), eos = fx_vocab_eos(v);
    t = bos == FX_TOKEN_NULL ? NULL : fx_vocab_token_text(v, bos, &len);
    s->bos_text = t ? strndup(t, len) : NULL;
    t = eos == FX_TOKEN_NULL ? NULL : fx_vocab_token_text(v, eos, &len);
    s->eos_text = t ? strndup(t, len) : NULL;
    if (!s->model_name) {
        freeaddrinfo(ai);
        fx_server_free(s);
        return fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "out of memory for the server");
    }

    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME |
                     MHD_USE_ERROR_LOG;
    if (ai->ai_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    s->daemon = MHD_start_daemon(
        flags, (uint16_t)p.port, NULL, NULL, on_access, s, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned)p.http_threads, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)p.conn_max, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)p.timeout_s,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(64 * 1024), MHD_OPTION_NOTIFY_COMPLETED,
        on_completed, s, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s, MHD_OPTION_LISTENING_ADDRESS_REUSE,
        1u, MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!s->daemon) {
        fx_server_free(s);
        return fx_error_set(err, FX_ERR_IO, FX_NO_OFFSET,
                            "cannot listen on %s port %d (in use, or not an address of this "
                            "machine?)",
                            p.host, p.port);
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->port = info ? info->port : p.port;
    *out = s;
    return FX_OK;
}

int fx_server_port(const struct fx_server *s) {
    return s->port;
}

/* Resumes every suspended connection (the handshake's rule: whoever clears the flag resumes). */
static void resume_all(struct fx_server *s) {
    pthread_mutex_lock(&s->conns_mu);
    for (struct fx_conn *c = s->conns; c; c = c->next)
        fx_http_notify(c);
    pthread_mutex_unlock(&s->conns_mu);
}

void fx_server_shutdown(struct fx_server *s, double grace_s) {
    if (!s || !s->daemon)
        return;
    atomic_store(&s->stopping, true);
    /* No new connections; the listening socket is ours to close. */
    MHD_socket ls = MHD_quiesce_daemon(s->daemon);
    if (ls != MHD_INVALID_SOCKET)
        close(ls);
    fx_engine_drain(s->engine, grace_s);
    /* Every job is done and notified: let the connections send their last bytes (a second at
     * most), then close them. */
    double t0 = fx_now();
    for (;;) {
        pthread_mutex_lock(&s->conns_mu);
        bool busy = false;
        for (struct fx_conn *c = s->conns; c && !busy; c = c->next)
            busy = c->dispatched && (c->gen || c->emb);
        pthread_mutex_unlock(&s->conns_mu);
        if (!busy || fx_now() - t0 > 1.0)
            break;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    resume_all(s);
    MHD_stop_daemon(s->daemon);
    s->daemon = NULL;
}

void fx_server_free(struct fx_server *s) {
    if (!s)
        return;
    if (s->daemon) {
        atomic_store(&s->stopping, true);
        fx_engine_drain(s->engine, 0);
        resume_all(s);
        MHD_stop_daemon(s->daemon);
    }
    free(s->model_name);
    free(s->bos_text);
    free(s->eos_text);
    pthread_mutex_destroy(&s->conns_mu);
    free(s);
}
