/* ferrox-loadgen: the load generator of loadgen.mjs in C. N concurrent clients each send
 * streaming chat requests back to back to an OpenAI-compatible server (ferrox serve,
 * llama-server, vLLM) and it reports the same figures: aggregate generated tokens/s, time to
 * first token (TTFT) p50/p95, inter-token latency (ITL, between content chunks) p50/p95/p99 and
 * the longest, and time per output token (TPOT).
 *
 *   ferrox-loadgen --url http://127.0.0.1:8080/v1 --concurrency 16 --requests 32 \
 *                  --max-tokens 64 --prompt-words 80 [--seed S] [--model NAME] [--json]
 *
 * Why a second client: on a machine of two CPUs the client shares them with the server it
 * measures, and Node with the OpenAI package spends about 0.5 ms of CPU on each streamed chunk
 * (a second of CPU in a 4-second run at concurrency 16, an eighth of the machine). This client
 * spends about a tenth of that: a thread per connection, blocking reads, a chunk parsed by
 * jansson.
 *
 * For the same --seed it sends byte for byte the request bodies loadgen.mjs sends (the same
 * fields, and the same random words from the same generator), so the two clients' figures
 * compare.
 *
 * Exit status: 0 when every request succeeded, 1 when one failed, 2 on bad arguments. */
#include "stream.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

struct opts {
    char url[256];
    char host[128], port[16], prefix[128]; /* from url: http://host:port/prefix */
    int concurrency, requests, max_tokens, prompt_words;
    double seed;
    const char *model, *api_key;
    double timeout_s;
    bool json;
};

/* What one request saw. */
struct outcome {
    double t0, first, last; /* when it was sent, its first and last content chunk */
    int n_chunks;
    json_int_t usage_tokens; /* usage.completion_tokens, -1 if the server sent none */
    bool done;               /* data: [DONE] arrived */
    double *gaps;            /* [n_chunks - 1] seconds between content chunks */
    int gaps_cap;
    char error[200];
};

struct run {
    const struct opts *o;
    const char *model;
    char **prompts; /* [requests] */
    atomic_int next;
    struct outcome *out; /* [requests] */
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- prompts ----------------------------------------------------------------------------------
 */

static const char *const words[] = {
    "time",     "year",    "people",    "way",    "day",        "man",    "thing",   "woman",
    "life",     "child",   "world",     "school", "state",      "family", "student", "group",
    "country",  "problem", "hand",      "part",   "place",      "case",   "week",    "company",
    "system",   "program", "question",  "work",   "government", "number", "night",   "point",
    "home",     "water",   "room",      "mother", "area",       "money",  "story",   "fact",
    "month",    "lot",     "right",     "study",  "book",       "eye",    "job",     "word",
    "business", "issue",   "side",      "kind",   "head",       "house",  "service", "friend",
    "father",   "power",   "hour",      "game",   "line",       "end",    "member",  "law",
    "car",      "city",    "community", "name",
};
#define N_WORDS (sizeof words / sizeof words[0])

/* loadgen.mjs's generator, in its arithmetic: JavaScript numbers are doubles, so the product
 * (up to 2^61) is rounded to a double before the remainder, as here. */
static double next_random(double *seed) {
    *seed = fmod(*seed * 1103515245.0 + 12345.0, 2147483648.0);
    return *seed / 2147483648.0;
}

/* "Write a story using these words: " and n_words words, space-separated (room for the longest
 * word and a space each). */
static char *make_prompt(double *seed, int n_words) {
    static const char head[] = "Write a story using these words: ";
    size_t longest = 0;
    for (size_t i = 0; i < N_WORDS; i++) {
        size_t wl = strlen(words[i]);
        longest = wl > longest ? wl : longest;
    }
    size_t len = sizeof head - 1;
    char *p = malloc(sizeof head + (size_t)n_words * (longest + 1));
    if (!p)
        return NULL;
    memcpy(p, head, len);
    for (int i = 0; i < n_words; i++) {
        const char *w = words[(size_t)floor(next_random(seed) * N_WORDS)];
        size_t wl = strlen(w);
        if (i)
            p[len++] = ' ';
        memcpy(p + len, w, wl);
        len += wl;
    }
    p[len] = '\0';
    return p;
}

/* ---- HTTP -------------------------------------------------------------------------------------
 */

static int connect_server(const struct opts *o, char *err, size_t err_size) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai;
    int rc = getaddrinfo(o->host, o->port, &hints, &ai);
    if (rc) {
        snprintf(err, err_size, "%s:%s: %s", o->host, o->port, gai_strerror(rc));
        return -1;
    }
    int fd = -1;
    for (struct addrinfo *a = ai; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) {
            snprintf(err, err_size, "socket: %s", strerror(errno));
        } else if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
            snprintf(err, err_size, "connect to %s:%s: %s", o->host, o->port, strerror(errno));
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(ai);
    if (fd < 0)
        return -1;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct timeval tv = {(time_t)o->timeout_s,
                         (suseconds_t)((o->timeout_s - floor(o->timeout_s)) * 1e6)};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    return fd;
}

/* Sends METHOD prefix/PATH with an optional JSON body and reads the response into s (whose
 * on_data sees a streamed body as it arrives). Returns false with err set when the exchange
 * failed (the status is the caller's to judge). */
static bool exchange(const struct opts *o, const char *method, const char *path, const char *body,
                     struct lg_stream *s, char *err, size_t err_size) {
    int fd = connect_server(o, err, err_size);
    if (fd < 0)
        return false;
    size_t body_len = body ? strlen(body) : 0;
    char auth[300] = "";
    if (o->api_key)
        snprintf(auth, sizeof auth, "Authorization: Bearer %s\r\n", o->api_key);
    char head[1024];
    int n = snprintf(head, sizeof head,
                     "%s %s/%s HTTP/1.1\r\nHost: %s:%s\r\nAccept: application/json, "
                     "text/event-stream\r\nContent-Type: application/json\r\n%sContent-Length: "
                     "%zu\r\nConnection: close\r\n\r\n",
                     method, o->prefix, path, o->host, o->port, auth, body_len);
    bool ok = n > 0 && (size_t)n < sizeof head;
    if (!ok)
        snprintf(err, err_size, "the request head is too long");
    for (size_t i = 0, len = (size_t)n; ok && i < len + body_len;) {
        const char *p = i < len ? head + i : body + (i - len);
        size_t left = i < len ? len - i : len + body_len - i;
        ssize_t sent = send(fd, p, left, MSG_NOSIGNAL);
        if (sent <= 0) {
            snprintf(err, err_size, "send: %s", sent < 0 ? strerror(errno) : "closed");
            ok = false;
        } else {
            i += (size_t)sent;
        }
    }
    char buf[16384];
    while (ok) {
        ssize_t got = recv(fd, buf, sizeof buf, 0);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            snprintf(err, err_size, "recv: %s", errno == EAGAIN ? "timed out" : strerror(errno));
            ok = false;
        } else if (got == 0) {
            lg_stream_closed(s);
            break;
        } else if (!lg_stream_feed(s, buf, (size_t)got)) {
            break;
        }
    }
    close(fd);
    if (ok && s->error[0]) {
        snprintf(err, err_size, "%s", s->error);
        ok = false;
    }
    return ok;
}

/* ---- one streamed chat request ----------------------------------------------------------------
 */

/* A `data:` payload of the stream: a chat.completion.chunk, or [DONE]. */
static void on_event(void *user, const char *data, size_t len) {
    struct outcome *r = user;
    if (len == 6 && memcmp(data, "[DONE]", 6) == 0) {
        r->done = true;
        return;
    }
    double t = now_s();
    json_t *chunk = json_loadb(data, len, 0, NULL);
    if (!chunk) {
        if (!r->error[0]) /* data is not NUL-terminated: at most len bytes of it */
            snprintf(r->error, sizeof r->error, "a stream event is not JSON: %.*s",
                     (int)(len < 60 ? len : 60), data);
        return;
    }
    json_t *usage = json_object_get(chunk, "usage");
    json_t *tokens = json_object_get(usage, "completion_tokens");
    if (json_is_integer(tokens))
        r->usage_tokens = json_integer_value(tokens);
    json_t *error = json_object_get(chunk, "error");
    const char *message = json_string_value(json_object_get(error, "message"));
    if (error && !r->error[0])
        snprintf(r->error, sizeof r->error, "the server: %s", message ? message : "an error event");
    json_t *delta = json_object_get(json_array_get(json_object_get(chunk, "choices"), 0), "delta");
    const char *content = json_string_value(json_object_get(delta, "content"));
    if (content && *content) {
        if (r->n_chunks == 0) {
            r->first = t;
        } else {
            if (r->n_chunks > r->gaps_cap) {
                int cap = r->gaps_cap ? 2 * r->gaps_cap : 64;
                double *grown = realloc(r->gaps, sizeof *r->gaps * (size_t)cap);
                if (!grown) {
                    snprintf(r->error, sizeof r->error, "out of memory for the chunks' times");
                    json_decref(chunk);
                    return;
                }
                r->gaps = grown;
                r->gaps_cap = cap;
            }
            r->gaps[r->n_chunks - 1] = t - r->last;
        }
        r->last = t;
        r->n_chunks++;
    }
    json_decref(chunk);
}

static void chat_request(struct run *run, int i) {
    const struct opts *o = run->o;
    struct outcome *r = &run->out[i];
    r->usage_tokens = -1;
    json_t *req = json_pack("{s:s, s:[{s:s, s:s}], s:i, s:i, s:b, s:b, s:{s:b}}", "model",
                            run->model, "messages", "role", "user", "content", run->prompts[i],
                            "max_tokens", o->max_tokens, "temperature", 0, "stream", 1,
                            "ignore_eos", 1, "stream_options", "include_usage", 1);
    char *body = req ? json_dumps(req, JSON_COMPACT) : NULL;
    json_decref(req);
    if (!body) {
        snprintf(r->error, sizeof r->error, "out of memory for the request");
        return;
    }
    struct lg_stream s;
    char err[200] = "";
    r->t0 = now_s();
    if (!lg_stream_init(&s, on_event, r)) {
        snprintf(r->error, sizeof r->error, "out of memory for the stream");
    } else if (!exchange(o, "POST", "chat/completions", body, &s, err, sizeof err)) {
        snprintf(r->error, sizeof r->error, "%s", err);
    } else if (s.status != 200) {
        snprintf(r->error, sizeof r->error, "HTTP status %d", s.status);
    } else if (!r->done && !r->error[0]) {
        snprintf(r->error, sizeof r->error, "the stream ended without [DONE]");
    }
    lg_stream_free(&s);
    free(body);
}

static void *client(void *arg) {
    struct run *run = arg;
    for (int i; (i = atomic_fetch_add(&run->next, 1)) < run->o->requests;) {
        chat_request(run, i);
        if (run->out[i].error[0])
            fprintf(stderr, "ferrox-loadgen: request %d: %s\n", i, run->out[i].error);
    }
    return NULL;
}

/* The model the server lists first (GET prefix/models), as loadgen.mjs takes it. */
static char *first_model(const struct opts *o) {
    struct lg_stream s;
    char err[200] = "";
    char *id = NULL;
    if (!lg_stream_init(&s, NULL, NULL))
        return NULL;
    if (!exchange(o, "GET", "models", NULL, &s, err, sizeof err))
        fprintf(stderr, "ferrox-loadgen: %s/models: %s\n", o->url, err);
    else if (s.status != 200)
        fprintf(stderr, "ferrox-loadgen: %s/models: HTTP status %d\n", o->url, s.status);
    else {
        json_t *list = json_loads(s.body ? s.body : "", 0, NULL);
        const char *name = json_string_value(
            json_object_get(json_array_get(json_object_get(list, "data"), 0), "id"));
        if (name)
            id = strdup(name);
        else
            fprintf(stderr, "ferrox-loadgen: %s/models lists no model\n", o->url);
        json_decref(list);
    }
    lg_stream_free(&s);
    return id;
}

/* ---- figures ----------------------------------------------------------------------------------
 */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* loadgen.mjs's percentile: element floor(p n) of the sorted values (the last at most); NaN for
 * none. xs is sorted in place. */
static double pct(double *xs, size_t n, double p) {
    if (n == 0)
        return NAN;
    qsort(xs, n, sizeof *xs, cmp_double);
    size_t k = (size_t)floor(p * (double)n);
    return xs[k < n - 1 ? k : n - 1];
}

/* A figure for the JSON output: null where JavaScript's JSON.stringify writes NaN as null. */
static json_t *figure(double x) {
    return isnan(x) ? json_null() : json_real(x);
}

static int report(const struct run *run, double wall) {
    const struct opts *o = run->o;
    size_t n_gaps = 0, n_ttft = 0, n_tpot = 0;
    for (int i = 0; i < o->requests; i++)
        n_gaps += run->out[i].n_chunks > 1 ? (size_t)run->out[i].n_chunks - 1 : 0;
    /* one element more than needed, so that none of them is malloc(0) */
    double *ttft = malloc(sizeof(double) * ((size_t)o->requests + 1));
    double *tpot = malloc(sizeof(double) * ((size_t)o->requests + 1));
    double *itl = malloc(sizeof(double) * (n_gaps + 1));
    if (!ttft || !tpot || !itl) {
        fprintf(stderr, "ferrox-loadgen: out of memory for the figures\n");
        free(ttft);
        free(tpot);
        free(itl);
        return 1;
    }
    long long generated = 0;
    int failures = 0;
    double itl_max = NAN;
    n_gaps = 0;
    for (int i = 0; i < o->requests; i++) {
        const struct outcome *r = &run->out[i];
        if (r->error[0]) {
            failures++;
            continue;
        }
        /* As loadgen.mjs: the usage's count, else the content chunks. */
        long long tokens = r->usage_tokens >= 0 ? r->usage_tokens : r->n_chunks;
        generated += tokens;
        if (r->n_chunks > 0) {
            ttft[n_ttft++] = r->first - r->t0;
            if (tokens > 1)
                tpot[n_tpot++] = (r->last - r->first) / (double)(tokens - 1);
        }
        for (int k = 0; k + 1 < r->n_chunks; k++) {
            itl[n_gaps++] = r->gaps[k];
            if (isnan(itl_max) || r->gaps[k] > itl_max)
                itl_max = r->gaps[k];
        }
    }
    double rate = (double)generated / wall;
    double ttft50 = pct(ttft, n_ttft, 0.5), ttft95 = pct(ttft, n_ttft, 0.95);
    double itl50 = pct(itl, n_gaps, 0.5), itl95 = pct(itl, n_gaps, 0.95);
    double itl99 = pct(itl, n_gaps, 0.99);
    double tpot50 = pct(tpot, n_tpot, 0.5), tpot95 = pct(tpot, n_tpot, 0.95);
    if (o->json) {
        json_t *res = json_pack(
            "{s:s, s:s, s:i, s:i, s:i, s:i, s:f, s:I, s:f, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o}",
            "url", o->url, "model", run->model, "concurrency", o->concurrency, "requests",
            o->requests, "max_tokens", o->max_tokens, "failures", failures, "wall_s", wall,
            "generated_tokens", (json_int_t)generated, "tokens_per_s", rate, "ttft_p50_s",
            figure(ttft50), "ttft_p95_s", figure(ttft95), "itl_p50_s", figure(itl50), "itl_p95_s",
            figure(itl95), "itl_p99_s", figure(itl99), "itl_max_s", figure(itl_max), "tpot_p50_s",
            figure(tpot50), "tpot_p95_s", figure(tpot95));
        char *text = res ? json_dumps(res, JSON_COMPACT) : NULL;
        if (text)
            printf("%s\n", text);
        free(text);
        json_decref(res);
    } else {
        printf("concurrency %d: %.1f tok/s, TTFT p50 %.3f s p95 %.3f s, ITL p50 %.4f s p95 %.4f s "
               "p99 %.4f s max %.4f s, TPOT p50 %.4f s p95 %.4f s (%d requests, %d failed)\n",
               o->concurrency, rate, ttft50, ttft95, itl50, itl95, itl99, itl_max, tpot50, tpot95,
               o->requests, failures);
    }
    free(ttft);
    free(tpot);
    free(itl);
    return failures ? 1 : 0;
}

/* ---- arguments --------------------------------------------------------------------------------
 */

static void usage(void) {
    fprintf(
        stderr,
        "usage: ferrox-loadgen [--url http://HOST:PORT/v1] [--concurrency N] [--requests N]\n"
        "                      [--max-tokens N] [--prompt-words N] [--seed S] [--model NAME]\n"
        "                      [--api-key KEY] [--timeout S] [--json]\n"
        "N clients send streaming chat requests back to back (as loadgen.mjs; defaults:\n"
        "concurrency 4, requests 2 x concurrency, max-tokens 64, prompt-words 150, seed 12345,\n"
        "the server's first model, timeout 3600 s).\n");
}

static bool positive(const char *text, int *out) {
    char *end;
    long v = strtol(text, &end, 10);
    if (*end || end == text || v < 1 || v > 1000000)
        return false;
    *out = (int)v;
    return true;
}

static bool parse_url(struct opts *o) {
    const char *p = o->url;
    if (strncmp(p, "http://", 7) != 0)
        return false;
    p += 7;
    size_t host_len = strcspn(p, ":/");
    if (host_len == 0 || host_len >= sizeof o->host)
        return false;
    memcpy(o->host, p, host_len);
    o->host[host_len] = '\0';
    p += host_len;
    snprintf(o->port, sizeof o->port, "80");
    if (*p == ':') {
        size_t port_len = strcspn(++p, "/");
        if (port_len == 0 || port_len >= sizeof o->port)
            return false;
        memcpy(o->port, p, port_len);
        o->port[port_len] = '\0';
        p += port_len;
    }
    size_t len = strlen(p);
    while (len > 0 && p[len - 1] == '/')
        len--;
    if (len >= sizeof o->prefix)
        return false;
    memcpy(o->prefix, p, len);
    o->prefix[len] = '\0';
    return true;
}

static bool parse_args(int argc, char **argv, struct opts *o) {
    *o = (struct opts){
        .concurrency = 4, .max_tokens = 64, .prompt_words = 150, .seed = 12345, .timeout_s = 3600};
    snprintf(o->url, sizeof o->url, "http://127.0.0.1:8080/v1");
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--json") == 0) {
            o->json = true;
            continue;
        }
        if (!v) {
            fprintf(stderr, "ferrox-loadgen: %s needs a value\n", a);
            return false;
        }
        i++;
        bool ok = true;
        if (strcmp(a, "--url") == 0)
            ok = snprintf(o->url, sizeof o->url, "%s", v) < (int)sizeof o->url;
        else if (strcmp(a, "--concurrency") == 0)
            ok = positive(v, &o->concurrency);
        else if (strcmp(a, "--requests") == 0)
            ok = positive(v, &o->requests);
        else if (strcmp(a, "--max-tokens") == 0)
            ok = positive(v, &o->max_tokens);
        else if (strcmp(a, "--prompt-words") == 0)
            ok = positive(v, &o->prompt_words);
        else if (strcmp(a, "--seed") == 0) {
            char *end;
            o->seed = strtod(v, &end);
            ok = *v && !*end && o->seed >= 0 && o->seed < 2147483648.0;
        } else if (strcmp(a, "--model") == 0)
            o->model = v;
        else if (strcmp(a, "--api-key") == 0)
            o->api_key = v;
        else if (strcmp(a, "--timeout") == 0) {
            char *end;
            o->timeout_s = strtod(v, &end);
            ok = *v && !*end && o->timeout_s > 0 && o->timeout_s < 1e6;
        } else {
            fprintf(stderr, "ferrox-loadgen: unknown option %s\n", a);
            return false;
        }
        if (!ok) {
            fprintf(stderr, "ferrox-loadgen: %s %s: not a valid value\n", a, v);
            return false;
        }
    }
    if (!parse_url(o)) {
        fprintf(stderr, "ferrox-loadgen: --url %s: not http://HOST[:PORT][/PREFIX]\n", o->url);
        return false;
    }
    if (o->requests == 0)
        o->requests = o->concurrency * 2;
    if (o->concurrency > 4096) {
        fprintf(stderr, "ferrox-loadgen: --concurrency %d: at most 4096\n", o->concurrency);
        return false;
    }
    return true;
}

int main(int argc, char **argv) {
    struct opts o;
    if (!parse_args(argc, argv, &o)) {
        usage();
        return 2;
    }
    struct run run = {.o = &o};
    char *listed = o.model ? NULL : first_model(&o);
    run.model = o.model ? o.model : listed;
    if (!run.model)
        return 1;
    run.prompts = calloc((size_t)o.requests, sizeof *run.prompts);
    run.out = calloc((size_t)o.requests, sizeof *run.out);
    pthread_t *threads = calloc((size_t)o.concurrency, sizeof *threads);
    bool ok = run.prompts && run.out && threads;
    for (int i = 0; ok && i < o.requests; i++)
        ok = (run.prompts[i] = make_prompt(&o.seed, o.prompt_words)) != NULL;
    if (!ok) {
        fprintf(stderr, "ferrox-loadgen: out of memory\n");
        return 1;
    }
    atomic_init(&run.next, 0);
    int started = 0;
    double start = now_s();
    for (; started < o.concurrency; started++) {
        int rc = pthread_create(&threads[started], NULL, client, &run);
        if (rc) {
            fprintf(stderr, "ferrox-loadgen: client thread %d: %s\n", started, strerror(rc));
            break;
        }
    }
    for (int i = 0; i < started; i++)
        pthread_join(threads[i], NULL);
    double wall = now_s() - start;
    int status = started > 0 ? report(&run, wall) : 1;
    for (int i = 0; i < o.requests; i++) {
        free(run.prompts[i]);
        free(run.out[i].gaps);
    }
    free(run.prompts);
    free(run.out);
    free(threads);
    free(listed);
    return status;
}
