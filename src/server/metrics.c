/* GET /metrics: the Prometheus text format (version 0.0.4), with vLLM's metric names, types,
 * labels and histogram buckets under the prefix "ferrox:", so that dashboards and the Gateway API
 * Inference Extension's endpoint picker (queue length, running requests, KV-cache use) read
 * ferrox as they read vLLM, with their metric-name flags pointed at these names. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/server_impl.h"

struct text {
    char *buf;
    size_t len, cap;
    bool failed;
};

static void put(struct text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct text *t, const char *fmt, ...) {
    for (int attempt = 0; attempt < 2 && !t->failed; attempt++) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            t->failed = true;
            return;
        }
        if ((size_t)n < t->cap - t->len) {
            t->len += (size_t)n;
            return;
        }
        size_t cap = t->cap * 2 > t->len + (size_t)n + 1 ? t->cap * 2 : t->len + (size_t)n + 1;
        char *grown = realloc(t->buf, cap);
        if (!grown) {
            t->failed = true;
            return;
        }
        t->buf = grown;
        t->cap = cap;
    }
}

static void header(struct text *t, const char *name, const char *type, const char *help) {
    put(t, "# HELP ferrox:%s %s\n# TYPE ferrox:%s %s\n", name, help, name, type);
}

static void gauge(struct text *t, const char *model, const char *name, const char *help, double v) {
    header(t, name, "gauge", help);
    put(t, "ferrox:%s{model_name=\"%s\"} %.17g\n", name, model, v);
}

static void counter(struct text *t, const char *model, const char *name, const char *help,
                    uint64_t v) {
    header(t, name, "counter", help);
    put(t, "ferrox:%s{model_name=\"%s\"} %llu\n", name, model, (unsigned long long)v);
}

static void histogram(struct text *t, const char *model, const char *name, const char *help,
                      const struct fx_histogram *h) {
    header(t, name, "histogram", help);
    uint64_t cum = 0;
    for (int i = 0; i < h->n_bounds; i++) {
        cum += h->counts[i];
        put(t, "ferrox:%s_bucket{le=\"%g\",model_name=\"%s\"} %llu\n", name, h->bounds[i], model,
            (unsigned long long)cum);
    }
    cum += h->counts[h->n_bounds];
    put(t, "ferrox:%s_bucket{le=\"+Inf\",model_name=\"%s\"} %llu\n", name, model,
        (unsigned long long)cum);
    put(t, "ferrox:%s_count{model_name=\"%s\"} %llu\n", name, model, (unsigned long long)h->count);
    put(t, "ferrox:%s_sum{model_name=\"%s\"} %.17g\n", name, model, h->sum);
}

enum MHD_Result fx_metrics_respond(struct fx_conn *c) {
    struct fx_server *s = c->srv;
    struct fx_engine_metrics m;
    fx_engine_metrics(s->engine, &m);
    /* A label value escapes backslash, quote and newline; the name is the server's own. */
    char model[256];
    size_t o = 0;
    for (const char *p = s->model_name; *p && o + 2 < sizeof model; p++) {
        if (*p == '\\' || *p == '"' || *p == '\n') {
            model[o++] = '\\';
            model[o++] = *p == '\n' ? 'n' : *p;
        } else {
            model[o++] = *p;
        }
    }
    model[o] = '\0';
    struct text t = {.cap = 8192};
    if (!(t.buf = malloc(t.cap)))
        return fx_http_error(c, 500, "server_error", NULL, "out of memory");
    t.buf[0] = '\0';
    gauge(&t, model, "num_requests_running", "Number of requests in model execution batches.",
          m.n_running);
    gauge(&t, model, "num_requests_waiting", "Number of requests waiting to be processed.",
          m.n_waiting);
    gauge(&t, model, "kv_cache_usage_perc",
          "KV-cache usage. 1 means 100 percent usage (blocks held by sequences).", m.kv_usage);
    counter(&t, model, "prompt_tokens_total", "Number of prefill tokens processed.",
            m.prompt_tokens);
    counter(&t, model, "generation_tokens_total", "Number of generation tokens processed.",
            m.generation_tokens);
    counter(&t, model, "prefix_cache_queries_total",
            "Prefix cache queries, in terms of number of queried tokens.", m.prefix_queries);
    counter(&t, model, "prefix_cache_hits_total",
            "Prefix cache hits, in terms of number of cached tokens.", m.prefix_hits);
    counter(&t, model, "prefill_tokens_computed_total",
            "Prompt tokens computed (not taken from the prefix cache).", m.prefill_tokens);
    counter(&t, model, "num_preemptions_total", "Cumulative number of preemptions.", m.preemptions);
    header(&t, "request_success_total", "counter", "Count of successfully processed requests.");
    static const struct {
        enum fx_finish f;
        const char *label;
    } reasons[] = {{FX_FINISH_STOP, "stop"},
                   {FX_FINISH_LENGTH, "length"},
                   {FX_FINISH_ABORT, "abort"},
                   {FX_FINISH_ERROR, "error"}};
    for (size_t i = 0; i < sizeof reasons / sizeof reasons[0]; i++)
        put(&t, "ferrox:request_success_total{finished_reason=\"%s\",model_name=\"%s\"} %llu\n",
            reasons[i].label, model, (unsigned long long)m.finished[reasons[i].f]);
    counter(&t, model, "embedding_requests_total", "Embedding requests served.", m.embed_requests);
    counter(&t, model, "embedding_tokens_total", "Tokens embedded.", m.embed_tokens);
    counter(&t, model, "engine_steps_total", "Batched forward steps run.", m.steps);
    /* The expert cache (serve --moe-cache); all zero when the experts are resident. */
    struct fx_moe_stats x;
    fx_model_moe_stats(s->model, &x);
    gauge(&t, model, "moe_cache_bytes", "Size of the expert cache (0: experts resident).",
          (double)x.cache_bytes);
    counter(&t, model, "moe_experts_used_total", "Experts used by MoE layer steps.",
            x.experts_used);
    counter(&t, model, "moe_misses_total", "Experts read when needed (not cached nor read ahead).",
            x.misses);
    counter(&t, model, "moe_prefetches_total", "Experts read ahead by the lookahead.",
            x.prefetches);
    counter(&t, model, "moe_bytes_read_total", "Bytes of experts read from the model file.",
            x.bytes_read);
    counter(&t, model, "moe_lookahead_checked_total",
            "Used experts of layers the lookahead made a prediction for.", x.lookahead_checked);
    counter(&t, model, "moe_lookahead_hits_total", "Of those, experts the lookahead predicted.",
            x.lookahead_hits);
    counter(&t, model, "moe_io_nanoseconds_total", "Time spent reading and packing experts.",
            x.io_ns);
    counter(&t, model, "moe_wait_nanoseconds_total", "Time forward passes waited for experts.",
            x.wait_ns);
    counter(&t, model, "spec_decode_num_drafts_total",
            "Number of spec decoding drafts (a sequence's verify rows in a step).", m.spec_drafts);
    counter(&t, model, "spec_decode_num_draft_tokens_total", "Number of draft tokens.",
            m.spec_draft_tokens);
    counter(&t, model, "spec_decode_num_accepted_tokens_total", "Number of accepted tokens.",
            m.spec_accepted);
    histogram(&t, model, "time_to_first_token_seconds",
              "Histogram of time to first token in seconds.", &m.ttft);
    histogram(&t, model, "inter_token_latency_seconds",
              "Histogram of inter-token latency in seconds.", &m.itl);
    histogram(&t, model, "e2e_request_latency_seconds",
              "Histogram of end to end request latency in seconds.", &m.e2e);
    header(&t, "http_responses_total", "counter", "HTTP responses by status class.");
    for (int cls = 1; cls <= 5; cls++)
        put(&t, "ferrox:http_responses_total{code=\"%dxx\"} %llu\n", cls,
            (unsigned long long)atomic_load(&s->http_responses[cls]));
    if (t.failed) {
        free(t.buf);
        return fx_http_error(c, 500, "server_error", NULL, "out of memory");
    }
    struct MHD_Response *r = MHD_create_response_from_buffer(t.len, t.buf, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(t.buf);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; version=0.0.4");
    enum MHD_Result ok = MHD_queue_response(c->mhd, 200, r);
    MHD_destroy_response(r);
    c->responded = true;
    return ok;
}
