/* ferrox serve, as a client sees it: a real server process on 127.0.0.1 (on a free port it picks
 * itself and prints), driven by the official OpenAI client (the scripts in tests/serve/, run by
 * node) and by raw sockets for what no client library sends: hostile bytes, header floods, huge
 * declared sizes, truncated requests. Every test ends with SIGTERM and checks a clean exit (status
 * 0). */
#include "fx_test.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static bool in_ci(void) {
    const char *ci = getenv("CI");
    return ci && strcmp(ci, "true") == 0;
}

/* ---- the server process ---------------------------------------------------------------------- */

struct server {
    pid_t pid;
    int port;
    char log[512];
};

/* Starts ferrox serve on stories260K with --port 0 and the extra arguments, and waits for the
 * port it prints. */
static void server_start(struct server *s, const char *const *extra) {
    static int n_started;
    const char *bin = getenv("FERROX_BIN");
    if (!bin)
        fail_msg("FERROX_BIN is not set (run the tests with make test)");
    const char *model = fx_test_model("stories260K.gguf");
    snprintf(s->log, sizeof s->log, "%s", fx_test_tmpfile("serve.log"));
    char suffix[32];
    snprintf(suffix, sizeof suffix, ".%d", n_started++);
    strncat(s->log, suffix, sizeof s->log - strlen(s->log) - 1);
    const char *argv[64] = {
        bin, "serve", "-m", model, "--port", "0", "-t", "1", "--shutdown-timeout", "2"};
    int n = 10;
    for (int i = 0; extra && extra[i] && n < 62; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, s->log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int rc = posix_spawn(&s->pid, bin, &fa, NULL, (char *const *)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0)
        fail_msg("cannot start %s: %s", bin, strerror(rc));
    s->port = 0;
    for (double t0 = now_s(); now_s() - t0 < 60;) {
        size_t size;
        char *text = fx_test_read_file(s->log, &size);
        const char *p = strstr(text, "listening on http://127.0.0.1:");
        if (p)
            s->port = atoi(p + strlen("listening on http://127.0.0.1:"));
        free(text);
        if (s->port > 0)
            return;
        int status;
        if (waitpid(s->pid, &status, WNOHANG) == s->pid) {
            text = fx_test_read_file(s->log, &size);
            fail_msg("ferrox serve exited at start:\n%s", text);
        }
        sleep_ms(20);
    }
    kill(s->pid, SIGKILL);
    waitpid(s->pid, NULL, 0);
    fail_msg("ferrox serve did not print its port within 60 s");
}

static bool server_alive(const struct server *s) {
    int status;
    return waitpid(s->pid, &status, WNOHANG) == 0;
}

/* SIGTERM, then the exit status within 20 s (the shutdown itself is bounded by
 * --shutdown-timeout 2); fails the test on anything but a clean exit 0. */
static void server_stop(struct server *s) {
    kill(s->pid, SIGTERM);
    int status = 0;
    double t0 = now_s();
    while (waitpid(s->pid, &status, WNOHANG) == 0) {
        if (now_s() - t0 > 20) {
            kill(s->pid, SIGKILL);
            waitpid(s->pid, &status, 0);
            fail_msg("ferrox serve did not stop within 20 s of SIGTERM");
        }
        sleep_ms(10);
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        size_t size;
        char *text = fx_test_read_file(s->log, &size);
        fail_msg("ferrox serve ended with status %d (signal %d):\n%s",
                 WIFEXITED(status) ? WEXITSTATUS(status) : -1,
                 WIFSIGNALED(status) ? WTERMSIG(status) : 0, text);
    }
}

/* ---- raw HTTP -------------------------------------------------------------------------------- */

static int connect_to(int port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0)
        fail_msg("connect to 127.0.0.1:%d: %s", port, strerror(errno));
    return fd;
}

/* Writes what the peer takes (it may close early). */
static void send_all(int fd, const void *data, size_t len) {
    const char *p = data;
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n <= 0)
            return;
        p += n;
        len -= (size_t)n;
    }
}

/* Reads until the peer closes or timeout_ms pass without data; a malloc'd NUL-terminated string. */
static char *recv_all(int fd, int timeout_ms) {
    size_t len = 0, cap = 4096;
    char *buf = malloc(cap);
    assert_non_null(buf);
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, timeout_ms) <= 0)
            break;
        if (cap - len < 2048) {
            cap *= 2;
            buf = realloc(buf, cap);
            assert_non_null(buf);
        }
        ssize_t n = recv(fd, buf + len, cap - len - 1, 0);
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    buf[len] = '\0';
    return buf;
}

/* One request on a fresh connection; the whole response (status line, headers, body). */
static char *http_raw(int port, const void *req, size_t len) {
    int fd = connect_to(port);
    send_all(fd, req, len);
    char *res = recv_all(fd, 10000);
    close(fd);
    return res;
}

static char *http_post(int port, const char *path, const char *body, const char *extra_headers) {
    size_t blen = strlen(body);
    size_t cap = blen + strlen(path) + (extra_headers ? strlen(extra_headers) : 0) + 256;
    char *req = malloc(cap);
    assert_non_null(req);
    int n = snprintf(req, cap,
                     "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: "
                     "application/json\r\n%sContent-Length: %zu\r\n\r\n%s",
                     path, extra_headers ? extra_headers : "", blen, body);
    char *res = http_raw(port, req, (size_t)n);
    free(req);
    return res;
}

static char *http_get(int port, const char *path, const char *extra_headers) {
    char req[1024];
    int n = snprintf(req, sizeof req,
                     "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n%s\r\n", path,
                     extra_headers ? extra_headers : "");
    return http_raw(port, req, (size_t)n);
}

static int status_of(const char *res) {
    return strncmp(res, "HTTP/1.", 7) == 0 ? atoi(res + 9) : 0;
}

static void expect_status(const char *res, int want, const char *what) {
    if (status_of(res) != want)
        fail_msg("%s: want HTTP %d, got:\n%.2000s", what, want, res);
}

static void expect_contains(const char *res, const char *needle, const char *what) {
    if (!strstr(res, needle))
        fail_msg("%s: no '%s' in:\n%.2000s", what, needle, res);
}

/* The value of metric `ferrox:NAME{...}` (the first line whose labels contain `labels`). */
static double metric(int port, const char *name, const char *labels) {
    char *res = http_get(port, "/metrics", NULL);
    char key[128];
    snprintf(key, sizeof key, "\nferrox:%s{", name);
    double v = -1;
    for (char *p = strstr(res, key); p && v < 0; p = strstr(p + 1, key)) {
        char *eol = strchr(p + 1, '\n');
        if (eol)
            *eol = '\0';
        if (strstr(p, labels))
            v = atof(strrchr(p, ' ') + 1);
        if (eol)
            *eol = '\n';
    }
    free(res);
    if (v < 0)
        fail_msg("metric ferrox:%s{%s} not found", name, labels);
    return v;
}

/* ---- node ------------------------------------------------------------------------------------ */

/* Whether the OpenAI client is installed (make serve-deps); skips the test when not, or fails
 * it under CI=true. */
static void need_openai(void) {
    struct stat st;
    if (stat("tests/serve/node_modules/openai/package.json", &st) == 0)
        return;
    if (in_ci())
        fail_msg("tests/serve/node_modules/openai is missing under CI=true (run make serve-deps)");
    print_message("skipping: the OpenAI client is not installed (make serve-deps)\n");
    skip();
}

/* Runs node tests/serve/SCRIPT against the server with extra environment (NAME=VALUE, ...,
 * NULL); fails the test with the script's output unless it exits 0. */
static void run_node(const char *script, int port, const char *const *env_extra) {
    const char *node = getenv("FERROX_NODE");
    if (!node || !*node)
        node = "node";
    char path[256], url[128], out[512];
    snprintf(path, sizeof path, "tests/serve/%s", script);
    snprintf(url, sizeof url, "FERROX_URL=http://127.0.0.1:%d/v1", port);
    snprintf(out, sizeof out, "%s", fx_test_tmpfile(script));
    const char *envp[256];
    int n = 0;
    for (char **e = environ; *e && n < 200; e++)
        envp[n++] = *e;
    envp[n++] = url;
    for (int i = 0; env_extra && env_extra[i] && n < 254; i++)
        envp[n++] = env_extra[i];
    envp[n] = NULL;
    const char *argv[] = {node, path, NULL};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    pid_t pid;
    int rc = posix_spawnp(&pid, node, &fa, NULL, (char *const *)argv, (char *const *)envp);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0)
        fail_msg("cannot run %s: %s", node, strerror(rc));
    int status;
    waitpid(pid, &status, 0);
    size_t size;
    char *text = fx_test_read_file(out, &size);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("node %s failed (status %d):\n%s", script,
                 WIFEXITED(status) ? WEXITSTATUS(status) : -1, text);
    print_message("node %s: %s", script, text);
    free(text);
}

/* ---- the tests ------------------------------------------------------------------------------- */

FX_TEST(serve_openai_client) {
    need_openai();
    const char *prompt = "Once upon a time";
    const char *args[] = {"run", "-m",     fx_test_model("stories260K.gguf"),
                          "-p",  prompt,   "-n",
                          "24",  "--temp", "0",
                          "-t",  "1",      NULL};
    char *want = NULL, *err = NULL;
    if (fx_test_run_cli(args, NULL, &want, &err) != 0)
        fail_msg("ferrox run failed: %s", err);
    size_t cap = strlen(want) + 32;
    char *expect = malloc(cap);
    snprintf(expect, cap, "EXPECT_TEXT=%s", want);
    struct server s;
    server_start(&s, NULL);
    const char *env[] = {"PROMPT=Once upon a time", "MAX_TOKENS=24", expect, NULL};
    run_node("client.mjs", s.port, env);
    server_stop(&s);
    free(expect);
    free(want);
    free(err);
}

/* 16 concurrent temperature-0 requests equal to each alone, in a pool small enough (12 blocks of
 * 16 positions for 4 sequences) that sequences are swapped out and recomputed on the way. */
FX_TEST(serve_concurrent_deterministic) {
    need_openai();
    struct server s;
    const char *extra[] = {"-np", "4", "-c", "192", NULL};
    server_start(&s, extra);
    run_node("determinism.mjs", s.port, NULL);
    server_stop(&s);
}

FX_TEST(serve_cancelled_streams_free_kv) {
    need_openai();
    struct server s;
    /* A grace of 0: the stop below cancels the stream in flight at once. */
    const char *extra[] = {"-np", "4", "--shutdown-timeout", "0", NULL};
    server_start(&s, extra);
    run_node("cancel.mjs", s.port, NULL);
    /* And a stop while a stream is in flight (its client not reading): cancelled, exit 0, on
     * time. */
    int fd = connect_to(s.port);
    const char *body = "{\"prompt\":\"Once upon a time\",\"max_tokens\":100000,\"ignore_eos\":true,"
                       "\"stream\":true}";
    char req[512];
    int n = snprintf(req, sizeof req,
                     "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %zu\r\n\r\n%s",
                     strlen(body), body);
    send_all(fd, req, (size_t)n);
    sleep_ms(200);
    double t0 = now_s();
    server_stop(&s);
    close(fd);
    if (now_s() - t0 > 10)
        fail_msg("the stop took %.1f s", now_s() - t0);
}

/* A second request sharing a long prefix with the first prefills only its new tokens. */
FX_TEST(serve_prefix_cache_metrics) {
    struct server s;
    server_start(&s, NULL);
    char a[4096] = "{\"prompt\":[1", b[4096] = "{\"prompt\":[1";
    for (int i = 1; i < 100; i++) { /* 100 shared tokens: 6 full blocks of 16 */
        char t[16];
        snprintf(t, sizeof t, ",%d", 300 + (i * 7) % 200);
        strcat(a, t);
        strcat(b, t);
    }
    for (int i = 0; i < 20; i++) { /* and 20 of B's own */
        char t[16];
        snprintf(t, sizeof t, ",%d", 260 + i);
        strcat(b, t);
    }
    strcat(a, "],\"max_tokens\":1,\"temperature\":0}");
    strcat(b, "],\"max_tokens\":1,\"temperature\":0}");
    char *res = http_post(s.port, "/v1/completions", a, NULL);
    expect_status(res, 200, "the first request");
    expect_contains(res, "\"cached_tokens\":0", "the first request's usage");
    free(res);
    double hits0 = metric(s.port, "prefix_cache_hits_total", "");
    double computed0 = metric(s.port, "prefill_tokens_computed_total", "");
    double queries0 = metric(s.port, "prefix_cache_queries_total", "");
    res = http_post(s.port, "/v1/completions", b, NULL);
    expect_status(res, 200, "the second request");
    expect_contains(res, "\"cached_tokens\":96", "the second request's usage");
    free(res);
    assert_true(metric(s.port, "prefix_cache_hits_total", "") - hits0 == 96);
    assert_true(metric(s.port, "prefix_cache_queries_total", "") - queries0 == 120);
    assert_true(metric(s.port, "prefill_tokens_computed_total", "") - computed0 == 24);
    server_stop(&s);
}

/* ferrox-loadgen (tools/loadgen/loadgen.c), N streaming chat clients in C: run against a real
 * server it counts every generated token of every request, and the server's own counters agree;
 * it sends the API key when given one and reports a request it could not make as failed. */
static double number(const json_t *res, const char *key) {
    const json_t *v = json_object_get(res, key);
    if (!json_is_number(v))
        fail_msg("ferrox-loadgen's %s is not a number", key);
    return json_number_value(v);
}

FX_TEST(serve_loadgen_counts_every_token) {
    struct server s;
    const char *extra[] = {"-np", "3", "--api-key", "sesame", NULL};
    server_start(&s, extra);
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/v1", s.port);
    const char *no_key[] = {"--url", url, "--requests", "2", "--max-tokens", "3", NULL};
    char *out = NULL, *err = NULL;
    assert_int_equal(fx_test_run_program("FERROX_LOADGEN", no_key, NULL, &out, &err), 1);
    expect_contains(err, "HTTP status 401", "ferrox-loadgen without the key");
    free(out);
    free(err);

    double generated0 = metric(s.port, "generation_tokens_total", "");
    double length0 = metric(s.port, "request_success_total", "finished_reason=\"length\"");
    const char *args[] = {"--url",      url, "--api-key",    "sesame", "--concurrency",  "3",
                          "--requests", "5", "--max-tokens", "7",      "--prompt-words", "12",
                          "--seed",     "9", "--json",       NULL};
    int rc = fx_test_run_program("FERROX_LOADGEN", args, NULL, &out, &err);
    if (rc != 0)
        fail_msg("ferrox-loadgen failed (%d): %s", rc, err);
    json_t *res = json_loads(out, 0, NULL);
    assert_non_null(res);
    assert_true(number(res, "failures") == 0);
    assert_true(number(res, "requests") == 5);
    assert_true(number(res, "generated_tokens") == 35);
    assert_true(number(res, "tokens_per_s") > 0);
    assert_true(number(res, "ttft_p50_s") > 0);
    assert_true(number(res, "ttft_p50_s") <= number(res, "ttft_p95_s"));
    assert_true(number(res, "itl_p50_s") <= number(res, "itl_p95_s"));
    assert_true(number(res, "itl_p95_s") <= number(res, "itl_p99_s"));
    assert_true(number(res, "itl_p99_s") <= number(res, "itl_max_s"));
    assert_true(number(res, "tpot_p50_s") > 0);
    assert_string_equal(json_string_value(json_object_get(res, "model")), "stories260K.gguf");
    json_decref(res);
    free(out);
    free(err);
    assert_true(metric(s.port, "generation_tokens_total", "") - generated0 == 35);
    assert_true(metric(s.port, "request_success_total", "finished_reason=\"length\"") - length0 ==
                5);
    int port = s.port;
    server_stop(&s);

    /* Nothing listens there now: every request fails, and says why. */
    const char *gone[] = {"--url", url, "--model", "x", "--requests", "2", NULL};
    snprintf(url, sizeof url, "http://127.0.0.1:%d/v1", port);
    assert_int_equal(fx_test_run_program("FERROX_LOADGEN", gone, NULL, &out, &err), 1);
    expect_contains(err, "request 1: connect to 127.0.0.1", "ferrox-loadgen without a server");
    free(out);
    free(err);
}

FX_TEST(serve_hostile_inputs) {
    struct server s;
    const char *extra[] = {"--max-body", "65536", "--timeout", "5", NULL};
    server_start(&s, extra);
    struct {
        const char *body;
        int status;
        const char *needle;
    } bad[] = {
        {"{\"prompt\": \"x\",, }", 400, "invalid JSON at byte 15"},
        {"{\"prompt\": \"x\", \"max_tokens\": \"ten\"}", 400, "\"param\":\"max_tokens\""},
        {"{\"prompt\": 42}", 400, "\"param\":\"prompt\""},
        {"{\"prompt\": \"x\", \"temperature\": -1}", 400, "\"param\":\"temperature\""},
        {"{\"prompt\": \"x\", \"top_p\": 2}", 400, "\"param\":\"top_p\""},
        {"{\"prompt\": \"x\", \"n\": 1000}", 400, "\"param\":\"n\""},
        {"{\"prompt\": \"x\", \"stop\": [1]}", 400, "\"param\":\"stop\""},
        {"{\"prompt\": \"x\", \"logit_bias\": {\"abc\": 1}}", 400, "\"param\":\"logit_bias\""},
        {"{\"prompt\": \"x\", \"logit_bias\": {\"5\": 1000}}", 400, "\"param\":\"logit_bias\""},
        {"{\"prompt\": [1, 2, 99999]}", 400, "not in the vocabulary"},
        {"{\"prompt\": \"x\", \"stream\": \"yes\"}", 400, "\"param\":\"stream\""},
        {"{\"prompt\": \"x\", \"response_format\": {\"type\": \"json_object\"}}", 400,
         "\"param\":\"response_format\""},
        {"[1, 2, 3]", 400, "JSON object"},
        {"", 400, "invalid JSON at byte 0"},
        {"{\"prompt\": \"\xff\xfe\"}", 400, "invalid JSON"},
        {"{\"prompt\": \"x\", \"unknown_field\": {\"deep\": [1, 2]}, \"max_tokens\": 2}", 200,
         "\"text_completion\""},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *res = http_post(s.port, "/v1/completions", bad[i].body, NULL);
        char what[64];
        snprintf(what, sizeof what, "case %zu", i);
        expect_status(res, bad[i].status, what);
        expect_contains(res, bad[i].needle, what);
        free(res);
    }
    char *res = http_post(s.port, "/v1/chat/completions", "{\"messages\": \"hi\"}", NULL);
    expect_status(res, 400, "messages as a string");
    expect_contains(res, "\"param\":\"messages\"", "messages as a string");
    free(res);
    res =
        http_post(s.port, "/v1/chat/completions", "{\"messages\": [{\"content\": \"hi\"}]}", NULL);
    expect_contains(res, "messages[0].role", "a message without a role");
    free(res);
    res = http_post(s.port, "/v1/embeddings", "{\"input\": []}", NULL);
    expect_status(res, 400, "no input");
    free(res);

    /* A prompt longer than a sequence's context (2048). */
    size_t cap = 3000 * 6 + 64;
    char *longp = malloc(cap);
    strcpy(longp, "{\"prompt\":[1");
    for (int i = 0; i < 3000; i++)
        strcat(longp, ",300");
    strcat(longp, "]}");
    res = http_post(s.port, "/v1/completions", longp, NULL);
    expect_status(res, 400, "a prompt longer than the context");
    expect_contains(res, "too long", "a prompt longer than the context");
    free(res);
    /* ... unless the request asks to keep its end. */
    strcpy(longp + strlen(longp) - 1, ",\"truncate_prompt_tokens\":100,\"max_tokens\":2}");
    res = http_post(s.port, "/v1/completions", longp, NULL);
    expect_status(res, 200, "truncate_prompt_tokens");
    expect_contains(res, "\"prompt_tokens\":100,", "the truncated prompt's usage");
    free(res);
    free(longp);

    /* Deep nesting: the parser's depth limit, not the stack. */
    char *deep = malloc(200001);
    memset(deep, '[', 200000);
    deep[200000] = '\0';
    char req[256];
    int n = snprintf(req, sizeof req,
                     "POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                     "Content-Length: 60000\r\n\r\n");
    int fd = connect_to(s.port);
    send_all(fd, req, (size_t)n);
    send_all(fd, deep, 60000);
    res = recv_all(fd, 10000);
    close(fd);
    expect_status(res, 400, "200,000 nested arrays");
    free(res);

    /* A declared body of 1 GB, and a chunked one past --max-body. */
    const char *huge =
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000\r\n\r\n{";
    res = http_raw(s.port, huge, strlen(huge));
    expect_status(res, 413, "Content-Length: 1 GB");
    free(res);
    fd = connect_to(s.port);
    const char *chunked =
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
    send_all(fd, chunked, strlen(chunked));
    memset(deep, 'a', 65536);
    for (int i = 0; i < 3; i++) {
        send_all(fd, "10000\r\n", 7);
        send_all(fd, deep, 65536);
        send_all(fd, "\r\n", 2);
    }
    send_all(fd, "0\r\n\r\n", 5);
    res = recv_all(fd, 10000);
    close(fd);
    expect_status(res, 413, "a chunked body past --max-body");
    free(res);

    /* 10,000 headers, then one header of 1 MB: refused or closed, never a crash. */
    size_t flood_cap = 10000 * 24 + 128;
    char *flood = malloc(flood_cap > 1100000 ? flood_cap : 1100000);
    size_t len = (size_t)sprintf(flood, "GET /health HTTP/1.1\r\nHost: x\r\n");
    for (int i = 0; i < 10000; i++)
        len += (size_t)sprintf(flood + len, "X-Flood-%d: v\r\n", i);
    len += (size_t)sprintf(flood + len, "\r\n");
    res = http_raw(s.port, flood, len);
    assert_true(status_of(res) == 0 || status_of(res) >= 400);
    free(res);
    len = (size_t)sprintf(flood, "GET /health HTTP/1.1\r\nX-Big: ");
    memset(flood + len, 'b', 1 << 20);
    len += 1 << 20;
    len += (size_t)sprintf(flood + len, "\r\n\r\n");
    res = http_raw(s.port, flood, len);
    assert_true(status_of(res) == 0 || status_of(res) >= 400);
    free(res);
    free(flood);

    /* Random bytes, truncated requests, a silent connection. */
    struct fx_test_rng rng = {12345};
    for (int k = 0; k < 8; k++) {
        size_t m = 1 + fx_test_rng_u64(&rng) % 65536;
        for (size_t i = 0; i < m; i++)
            deep[i] = (char)fx_test_rng_u64(&rng);
        res = http_raw(s.port, deep, m);
        free(res);
    }
    const char *cut[] = {
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"prompt\"",
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Le",
        "GET /heal",
        "POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nffff\r\nabc",
    };
    for (size_t i = 0; i < sizeof cut / sizeof cut[0]; i++) {
        fd = connect_to(s.port);
        send_all(fd, cut[i], strlen(cut[i]));
        close(fd);
    }
    fd = connect_to(s.port);
    close(fd);
    free(deep);

    /* Unknown paths and methods. */
    res = http_get(s.port, "/nope", NULL);
    expect_status(res, 404, "an unknown path");
    free(res);
    res = http_get(s.port, "/v1/completions", NULL);
    expect_status(res, 405, "GET on a POST endpoint");
    free(res);

    /* Still serving. */
    assert_true(server_alive(&s));
    res = http_post(s.port, "/v1/completions",
                    "{\"prompt\": \"Once upon a time\", \"max_tokens\": 8, \"temperature\": 0}",
                    NULL);
    expect_status(res, 200, "a normal request afterwards");
    expect_contains(res, "there was a", "a normal request afterwards");
    free(res);
    res = http_get(s.port, "/health", NULL);
    expect_status(res, 200, "/health afterwards");
    free(res);
    server_stop(&s);
}

FX_TEST(serve_api_key) {
    struct server s;
    const char *extra[] = {"--api-key", "sesame", NULL};
    server_start(&s, extra);
    char *res = http_get(s.port, "/v1/models", NULL);
    expect_status(res, 401, "no key");
    free(res);
    res = http_get(s.port, "/v1/models", "Authorization: Bearer sesamf\r\n");
    expect_status(res, 401, "a wrong key");
    free(res);
    res = http_get(s.port, "/v1/models", "Authorization: Bearer sesame-and-more\r\n");
    expect_status(res, 401, "a longer key");
    free(res);
    res = http_get(s.port, "/v1/models", "Authorization: Bearer sesame\r\n");
    expect_status(res, 200, "the key");
    expect_contains(res, "stories260K.gguf", "the model's name");
    free(res);
    res = http_post(s.port, "/tokenize", "{\"content\": \"Hello\"}", NULL);
    expect_status(res, 401, "/tokenize without the key");
    free(res);
    res = http_get(s.port, "/health", NULL);
    expect_status(res, 200, "/health without the key");
    free(res);
    res = http_get(s.port, "/", NULL);
    expect_status(res, 200, "the page without the key");
    expect_contains(res, "text/html", "the page's type");
    free(res);
    server_stop(&s);
}

/* One sequence, one waiting request at most: the third gets 503 with Retry-After. */
FX_TEST(serve_queue_full) {
    struct server s;
    const char *extra[] = {"-np", "1", "--queue-max", "1", NULL};
    server_start(&s, extra);
    const char *body = "{\"prompt\":\"Once upon a time\",\"max_tokens\":100000,\"ignore_eos\":true,"
                       "\"stream\":true}";
    char req[512];
    int n = snprintf(req, sizeof req,
                     "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %zu\r\n\r\n%s",
                     strlen(body), body);
    int running = connect_to(s.port);
    send_all(running, req, (size_t)n);
    double t0 = now_s();
    while (metric(s.port, "num_requests_running", "") < 1 && now_s() - t0 < 10)
        sleep_ms(10);
    int waiting = connect_to(s.port);
    send_all(waiting, req, (size_t)n);
    while (metric(s.port, "num_requests_waiting", "") < 1 && now_s() - t0 < 10)
        sleep_ms(10);
    char *res = http_post(s.port, "/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":1}", NULL);
    expect_status(res, 503, "a request past --queue-max");
    expect_contains(res, "Retry-After: 1", "503's Retry-After");
    free(res);
    close(running);
    close(waiting);
    t0 = now_s();
    while (metric(s.port, "kv_cache_usage_perc", "") > 0 && now_s() - t0 < 10)
        sleep_ms(20);
    assert_true(metric(s.port, "kv_cache_usage_perc", "") == 0);
    res = http_post(s.port, "/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":1}", NULL);
    expect_status(res, 200, "a request once the queue is empty");
    free(res);
    server_stop(&s);
}

/* ---- speculation ----------------------------------------------------------------------------- */

/* choices[0].text of a completion response, as its JSON escapes it (malloc'd). */
static char *completion_text(const char *res) {
    const char *p = strstr(res, "\"text\":\"");
    if (!p)
        fail_msg("no text in:\n%.2000s", res);
    p += strlen("\"text\":\"");
    const char *q = p;
    while (*q && *q != '"')
        q += *q == '\\' && q[1] ? 2 : 1;
    char *text = strndup(p, (size_t)(q - p));
    assert_non_null(text);
    return text;
}

/* Prompts that make prompt lookup right often (repetition) and wrong often (free text). */
#define SPEC_N_PROMPTS 8
static const char *const spec_prompts[SPEC_N_PROMPTS] = {
    "Lily likes cats. Lily likes dogs. Lily likes cats. Lily likes dogs. Lily likes cats. Lily "
    "likes dogs. Lily likes",
    "Once upon a time",
    "Tom had a red ball. Tom had a red ball. Tom had a red ball. Tom had a",
    "The sun was hot. The little bird",
    "Sue said: I want to play. Sue said: I want to play. Sue said: I want to",
    "One day, a big dog",
    "The cat sat. The cat sat. The cat sat. The cat sat. The cat",
    "Once upon a time there was a girl named Lily. She",
};

/* The body of request k of 2 * SPEC_N_PROMPTS: prompt k % SPEC_N_PROMPTS at temperature 0 (k <
 * SPEC_N_PROMPTS) or sampled with a seed. */
typedef void (*spec_body_fn)(char *body, size_t cap, int k);

static void spec_body(char *body, size_t cap, int k) {
    snprintf(body, cap, "{\"prompt\":\"%s\",\"max_tokens\":64,\"ignore_eos\":true,%s}",
             spec_prompts[k % SPEC_N_PROMPTS],
             k >= SPEC_N_PROMPTS ? "\"temperature\":0.8,\"seed\":7" : "\"temperature\":0");
}

/* The texts of the 2 * SPEC_N_PROMPTS requests of `body`, one at a time, from a server started
 * with `extra`. */
static void spec_texts_alone(const char *const *extra, spec_body_fn make_body,
                             char *texts[2 * SPEC_N_PROMPTS], double *accepted) {
    struct server s;
    server_start(&s, extra);
    for (int k = 0; k < 2 * SPEC_N_PROMPTS; k++) {
        char body[512];
        make_body(body, sizeof body, k);
        char *res = http_post(s.port, "/v1/completions", body, NULL);
        expect_status(res, 200, body);
        texts[k] = completion_text(res);
        free(res);
    }
    if (accepted)
        *accepted = metric(s.port, "spec_decode_num_accepted_tokens_total", "");
    server_stop(&s);
}

static void spec_texts_free(char *texts[2 * SPEC_N_PROMPTS]) {
    for (int k = 0; k < 2 * SPEC_N_PROMPTS; k++)
        free(texts[k]);
}

static void spec_expect_equal(char *const got[], char *const want[], int n, const char *what) {
    for (int k = 0; k < n; k++)
        if (strcmp(got[k], want[k]) != 0)
            fail_msg("%s, prompt %d (%s): with speculation\n  %s\nwithout\n  %s", what,
                     k % SPEC_N_PROMPTS, k >= SPEC_N_PROMPTS ? "sampled, seed 7" : "temperature 0",
                     got[k], want[k]);
}

/* One request at a time: the text with prompt lookup (drafting at every step, and adaptive) is
 * the text without, at temperature 0 and sampling with a seed; drafts were kept on the way. */
FX_TEST(serve_spec_text_equals_plain) {
    char *plain[2 * SPEC_N_PROMPTS], *spec[2 * SPEC_N_PROMPTS];
    const char *none[] = {"--spec", "none", NULL};
    double accepted = 0;
    spec_texts_alone(none, spec_body, plain, &accepted);
    assert_true(accepted == 0);
    const char *fixed[] = {"--spec", "ngram", "--spec-fixed", "--draft-max", "8", NULL};
    spec_texts_alone(fixed, spec_body, spec, &accepted);
    print_message("--spec-fixed: %.0f drafts kept\n", accepted);
    assert_true(accepted > 100);
    spec_expect_equal(spec, plain, 2 * SPEC_N_PROMPTS, "--spec ngram --spec-fixed");
    spec_texts_free(spec);
    spec_texts_alone(NULL, spec_body, spec, &accepted); /* the default: ngram, adaptive */
    print_message("adaptive: %.0f drafts kept\n", accepted);
    assert_true(accepted >= 1);
    spec_expect_equal(spec, plain, 2 * SPEC_N_PROMPTS, "--spec ngram (adaptive)");
    spec_texts_free(spec);
    spec_texts_free(plain);
}

/* The 16 requests of spec_texts_alone sent at once to a server with `extra`; each text must be
 * the one without speculation. */
static void spec_concurrent(const char *const *extra, spec_body_fn make_body,
                            char *const plain[2 * SPEC_N_PROMPTS], double min_accepted,
                            const char *what) {
    struct server s;
    server_start(&s, extra);
    int fd[2 * SPEC_N_PROMPTS];
    for (int k = 0; k < 2 * SPEC_N_PROMPTS; k++) {
        char body[512], req[1024];
        make_body(body, sizeof body, k);
        int n = snprintf(req, sizeof req,
                         "POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                         "Content-Length: %zu\r\n\r\n%s",
                         strlen(body), body);
        fd[k] = connect_to(s.port);
        send_all(fd[k], req, (size_t)n);
    }
    char *got[2 * SPEC_N_PROMPTS];
    for (int k = 0; k < 2 * SPEC_N_PROMPTS; k++) {
        char *res = recv_all(fd[k], 60000);
        close(fd[k]);
        expect_status(res, 200, what);
        got[k] = completion_text(res);
        free(res);
    }
    double accepted = metric(s.port, "spec_decode_num_accepted_tokens_total", "");
    double preempted = metric(s.port, "num_preemptions_total", "");
    print_message("%s: %.0f drafts kept, %.0f preemptions\n", what, accepted, preempted);
    server_stop(&s);
    assert_true(accepted >= min_accepted);
    spec_expect_equal(got, plain, 2 * SPEC_N_PROMPTS, what);
    spec_texts_free(got);
}

/* 8 prompts at temperature 0 and the same 8 sampled with a seed, all at once: the texts with
 * prompt lookup equal the texts without, with 8 sequences at once, with 4 in a pool small
 * enough (16 blocks of 16 positions) that drafts are dropped for lack of blocks and sequences
 * are swapped out and recomputed on the way, and with a step budget so small that drafts and
 * prompt chunks compete for a few rows. */
FX_TEST(serve_spec_concurrent_equals_plain) {
    char *plain[2 * SPEC_N_PROMPTS];
    const char *none[] = {"--spec", "none", NULL};
    spec_texts_alone(none, spec_body, plain, NULL);
    const char *wide[] = {"-np", "8", "--spec", "ngram", "--spec-fixed", "--draft-max", "8", NULL};
    spec_concurrent(wide, spec_body, plain, 100, "8 at once");
    const char *small[] = {"-np",          "4",           "-c", "256", "--spec", "ngram",
                           "--spec-fixed", "--draft-max", "8",  NULL};
    spec_concurrent(small, spec_body, plain, 100, "4 at once in 256 positions");
    /* Steps of 6 rows while sequences decode: one for each, drafts and prompt chunks in the
     * rest. */
    const char *narrow[] = {
        "-np", "4", "--max-num-batched-tokens", "6", "--spec-fixed", "--draft-max", "16", NULL};
    spec_concurrent(narrow, spec_body, plain, 50, "4 at once in steps of 6 rows");
    /* Adaptive: how many drafts it keeps depends on the measured times (and it drafts while
     * up to 8 sequences decode, where by default it stops at 2). */
    const char *adaptive[] = {"-np", "8", "--spec-max-batch", "8", NULL};
    spec_concurrent(adaptive, spec_body, plain, 1, "8 at once, adaptive");
    spec_texts_free(plain);
}

/* spec_body for a model with random weights, which never repeats itself: a logit bias makes two
 * tokens win every step, which of them decided by the model's logits, so that prompt lookup's
 * drafts are kept and rejected about equally. */
static void hybrid_body(char *body, size_t cap, int k) {
    snprintf(body, cap,
             "{\"prompt\":\"%s\",\"max_tokens\":48,\"ignore_eos\":true,"
             "\"logit_bias\":{\"100\":30,\"200\":30},%s}",
             spec_prompts[k % SPEC_N_PROMPTS],
             k >= SPEC_N_PROMPTS ? "\"temperature\":0.8,\"seed\":7" : "\"temperature\":0");
}

/* A hybrid model (qwen35-tiny), whose rejected drafts roll the recurrent state back to a
 * snapshot the step kept: speculation is on by default, and the texts with it equal the texts
 * without, one request at a time and 16 at once in 4 slots. */
FX_TEST(serve_hybrid_spec_text_equals_plain) {
    char model[4096];
    snprintf(model, sizeof model, "%s", fx_test_fixture("qwen35/models/qwen35-tiny.F32.gguf"));
    struct server s;
    const char *by_default[] = {"-m", model, NULL};
    server_start(&s, by_default);
    size_t size;
    char *log = fx_test_read_file(s.log, &size);
    bool on = strstr(log, "speculation ngram") != NULL;
    free(log);
    server_stop(&s);
    assert_true(on);

    char *plain[2 * SPEC_N_PROMPTS], *spec[2 * SPEC_N_PROMPTS];
    double accepted = 0;
    const char *none[] = {"-m", model, "--spec", "none", NULL};
    spec_texts_alone(none, hybrid_body, plain, &accepted);
    assert_true(accepted == 0);
    const char *fixed[] = {"-m", model, "--spec-fixed", "--draft-max", "8", NULL};
    spec_texts_alone(fixed, hybrid_body, spec, &accepted);
    print_message("alone: %.0f drafts kept\n", accepted);
    assert_true(accepted > 100);
    spec_expect_equal(spec, plain, 2 * SPEC_N_PROMPTS, "qwen35, --spec-fixed");
    spec_texts_free(spec);
    const char *four[] = {"-m", model, "-np", "4", "--spec-fixed", "--draft-max", "16", NULL};
    spec_concurrent(four, hybrid_body, plain, 100, "qwen35, 4 at once");
    spec_texts_free(plain);
}
