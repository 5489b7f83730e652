/* The OpenAI request schema: JSON body -> struct fx_oai_request, every field checked. */
#include "server/openai.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool fx_oai_fail(struct fx_oai_error *err, int status, const char *param, const char *fmt, ...) {
    err->status = status;
    snprintf(err->param, sizeof err->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return false;
}

#define BAD(param, ...) fx_oai_fail(err, 400, param, __VA_ARGS__)

static const char *type_name(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "an object";
    case JSON_ARRAY:
        return "an array";
    case JSON_STRING:
        return "a string";
    case JSON_INTEGER:
        return "an integer";
    case JSON_REAL:
        return "a number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "a boolean";
    case JSON_NULL:
        return "null";
    }
    return "?";
}

/* The member key of doc, or NULL when absent or null. */
static json_t *opt(json_t *doc, const char *key) {
    json_t *v = json_object_get(doc, key);
    return v && !json_is_null(v) ? v : NULL;
}

static bool get_number(json_t *doc, const char *key, double lo, double hi, float *out,
                       struct fx_oai_error *err) {
    json_t *v = opt(doc, key);
    if (!v)
        return true;
    if (!json_is_number(v))
        return BAD(key, "%s: expected a number, got %s", key, type_name(v));
    double x = json_number_value(v);
    if (!(x >= lo && x <= hi))
        return BAD(key, "%s: %g is out of range [%g, %g]", key, x, lo, hi);
    *out = (float)x;
    return true;
}

/* An integer, or a number with an integral value (16.0). */
static bool int_value(json_t *v, int64_t *out) {
    if (json_is_integer(v)) {
        *out = json_integer_value(v);
        return true;
    }
    if (json_is_real(v)) {
        double x = json_real_value(v);
        if (x == floor(x) && fabs(x) < 9e15) {
            *out = (int64_t)x;
            return true;
        }
    }
    return false;
}

static bool get_int(json_t *doc, const char *key, int64_t lo, int64_t hi, int64_t *out,
                    struct fx_oai_error *err) {
    json_t *v = opt(doc, key);
    if (!v)
        return true;
    int64_t x;
    if (!int_value(v, &x))
        return BAD(key, "%s: expected an integer, got %s", key, type_name(v));
    if (x < lo || x > hi)
        return BAD(key, "%s: %lld is out of range [%lld, %lld]", key, (long long)x, (long long)lo,
                   (long long)hi);
    *out = x;
    return true;
}

static bool get_bool(json_t *doc, const char *key, bool *out, struct fx_oai_error *err) {
    json_t *v = opt(doc, key);
    if (!v)
        return true;
    if (!json_is_boolean(v))
        return BAD(key, "%s: expected a boolean, got %s", key, type_name(v));
    *out = json_is_true(v);
    return true;
}

static char *dup_n(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

/* Token ids of a JSON array, each in [0, n_vocab). */
static bool token_array(json_t *arr, const char *param, int32_t n_vocab, fx_token **ids, int32_t *n,
                        struct fx_oai_error *err) {
    size_t len = json_array_size(arr);
    if (len > INT32_MAX / 2)
        return BAD(param, "%s: too many tokens", param);
    *ids = malloc((len + 1) * sizeof **ids);
    if (!*ids)
        return fx_oai_fail(err, 500, param, "out of memory");
    for (size_t i = 0; i < len; i++) {
        int64_t x;
        json_t *v = json_array_get(arr, i);
        if (!int_value(v, &x)) {
            free(*ids);
            *ids = NULL;
            return BAD(param, "%s[%zu]: expected a token id (an integer), got %s", param, i,
                       type_name(v));
        }
        if (x < 0 || x >= n_vocab) {
            free(*ids);
            *ids = NULL;
            return BAD(param, "%s[%zu]: token %lld is not in the vocabulary (0..%d)", param, i,
                       (long long)x, n_vocab - 1);
        }
        (*ids)[i] = (fx_token)x;
    }
    *n = (int32_t)len;
    return true;
}

static bool all_integers(json_t *arr) {
    size_t i;
    json_t *v;
    json_array_foreach(arr, i, v) {
        int64_t x;
        if (!int_value(v, &x))
            return false;
    }
    return true;
}

static bool add_text(struct fx_oai_request *r, json_t *v, const char *param, int32_t n_vocab,
                     struct fx_oai_error *err) {
    struct fx_oai_text *t = &r->input[r->n_input];
    *t = (struct fx_oai_text){0};
    if (json_is_string(v)) {
        t->len = json_string_length(v);
        if (!(t->text = dup_n(json_string_value(v), t->len)))
            return fx_oai_fail(err, 500, param, "out of memory");
    } else if (json_is_array(v)) {
        if (json_array_size(v) == 0)
            return BAD(param, "%s: an empty list of tokens", param);
        t->is_ids = true;
        if (!token_array(v, param, n_vocab, &t->ids, &t->n_ids, err))
            return false;
    } else {
        return BAD(param, "%s: expected a string or an array of token ids, got %s", param,
                   type_name(v));
    }
    r->n_input++;
    return true;
}

/* prompt (completions), input (embeddings), content (tokenize): a string, token ids, or (for
 * several == true) arrays of these. */
static bool parse_inputs(json_t *doc, const char *key, bool several, struct fx_oai_request *r,
                         int32_t n_vocab, struct fx_oai_error *err) {
    json_t *v = opt(doc, key);
    if (!v)
        return BAD(key, "%s: required", key);
    size_t n = 1;
    bool list = json_is_array(v) && json_array_size(v) > 0 && !all_integers(v);
    if (list)
        n = json_array_size(v);
    if (json_is_array(v) && json_array_size(v) == 0)
        return BAD(key, "%s: an empty array", key);
    if (several && n > FX_OAI_MAX_INPUTS)
        return BAD(key, "%s: %zu inputs, at most %d in one request", key, n, FX_OAI_MAX_INPUTS);
    if (!several && n > 1)
        return BAD(key, "%s: %zu prompts; send one prompt per request", key, n);
    if (!(r->input = calloc(n, sizeof *r->input)))
        return fx_oai_fail(err, 500, key, "out of memory");
    if (!list)
        return add_text(r, v, key, n_vocab, err);
    for (size_t i = 0; i < n; i++) {
        char param[48];
        snprintf(param, sizeof param, "%s[%zu]", key, i);
        json_t *item = json_array_get(v, i);
        if (!json_is_string(item) && !json_is_array(item))
            return BAD(param, "%s: expected a string or an array of token ids, got %s", param,
                       type_name(item));
        if (!add_text(r, item, param, n_vocab, err))
            return false;
    }
    return true;
}

static bool parse_messages(json_t *doc, struct fx_oai_request *r, struct fx_oai_error *err) {
    json_t *v = opt(doc, "messages");
    if (!v)
        return BAD("messages", "messages: required");
    if (!json_is_array(v))
        return BAD("messages", "messages: expected an array, got %s", type_name(v));
    if (json_array_size(v) == 0)
        return BAD("messages", "messages: an empty array");
    size_t i;
    json_t *m;
    json_array_foreach(v, i, m) {
        char param[48];
        snprintf(param, sizeof param, "messages[%zu]", i);
        if (!json_is_object(m))
            return BAD(param, "%s: expected an object, got %s", param, type_name(m));
        json_t *role = json_object_get(m, "role");
        if (!role || !json_is_string(role)) {
            snprintf(param, sizeof param, "messages[%zu].role", i);
            return BAD(param, "%s: expected a string, got %s", param,
                       role ? type_name(role) : "nothing");
        }
        json_t *content = json_object_get(m, "content");
        if (content && !json_is_null(content) && !json_is_string(content) &&
            !json_is_array(content)) {
            snprintf(param, sizeof param, "messages[%zu].content", i);
            return BAD(param, "%s: expected a string, an array of parts or null, got %s", param,
                       type_name(content));
        }
    }
    if (!(r->messages_json = json_dumps(v, JSON_COMPACT)))
        return fx_oai_fail(err, 500, "messages", "out of memory");
    json_t *kw = opt(doc, "chat_template_kwargs");
    if (kw) {
        if (!json_is_object(kw))
            return BAD("chat_template_kwargs", "chat_template_kwargs: expected an object, got %s",
                       type_name(kw));
        if (!(r->template_vars = json_dumps(kw, JSON_COMPACT)))
            return fx_oai_fail(err, 500, "chat_template_kwargs", "out of memory");
    }
    return true;
}

static bool parse_stop(json_t *doc, struct fx_oai_request *r, struct fx_oai_error *err) {
    json_t *v = opt(doc, "stop");
    if (!v)
        return true;
    size_t n = json_is_array(v) ? json_array_size(v) : 1;
    if (!json_is_array(v) && !json_is_string(v))
        return BAD("stop", "stop: expected a string or an array of strings, got %s", type_name(v));
    if (n > FX_OAI_MAX_STOPS)
        return BAD("stop", "stop: %zu strings, at most %d", n, FX_OAI_MAX_STOPS);
    if (!(r->stops = calloc(n + 1, sizeof *r->stops)))
        return fx_oai_fail(err, 500, "stop", "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *s = json_is_array(v) ? json_array_get(v, i) : v;
        if (!json_is_string(s))
            return BAD("stop", "stop[%zu]: expected a string, got %s", i, type_name(s));
        if (json_string_length(s) == 0)
            continue; /* an empty stop string stops nothing */
        if (!(r->stops[r->n_stops] = dup_n(json_string_value(s), json_string_length(s))))
            return fx_oai_fail(err, 500, "stop", "out of memory");
        r->n_stops++;
    }
    return true;
}

/* logit_bias: {"token id": bias, ...} as OpenAI writes it, or [[id, bias], ...] as llama.cpp
 * does (a bias of false bans the token). */
static bool parse_bias(json_t *doc, struct fx_oai_request *r, int32_t n_vocab,
                       struct fx_oai_error *err) {
    json_t *v = opt(doc, "logit_bias");
    if (!v)
        return true;
    if (!json_is_object(v) && !json_is_array(v))
        return BAD("logit_bias", "logit_bias: expected an object, got %s", type_name(v));
    size_t n = json_is_object(v) ? json_object_size(v) : json_array_size(v);
    if (n > 4096)
        return BAD("logit_bias", "logit_bias: %zu entries, at most 4096", n);
    if (!(r->bias = calloc(n + 1, sizeof *r->bias)))
        return fx_oai_fail(err, 500, "logit_bias", "out of memory");
    const char *key;
    json_t *val;
    size_t i = 0;
    void *iter = json_is_object(v) ? json_object_iter(v) : NULL;
    for (; i < n; i++) {
        int64_t id;
        if (json_is_object(v)) {
            key = json_object_iter_key(iter);
            val = json_object_iter_value(iter);
            iter = json_object_iter_next(v, iter);
            char *end;
            errno = 0;
            long long x = strtoll(key, &end, 10);
            if (errno || end == key || *end)
                return BAD("logit_bias", "logit_bias: key '%.40s' is not a token id", key);
            id = x;
        } else {
            json_t *pair = json_array_get(v, i);
            if (!json_is_array(pair) || json_array_size(pair) != 2 ||
                !int_value(json_array_get(pair, 0), &id))
                return BAD("logit_bias", "logit_bias[%zu]: expected [token id, bias]", i);
            val = json_array_get(pair, 1);
        }
        if (id < 0 || id >= n_vocab)
            return BAD("logit_bias", "logit_bias: token %lld is not in the vocabulary (0..%d)",
                       (long long)id, n_vocab - 1);
        float b;
        if (json_is_false(val)) {
            b = -INFINITY;
        } else if (json_is_number(val)) {
            double x = json_number_value(val);
            if (!(x >= -100 && x <= 100))
                return BAD("logit_bias",
                           "logit_bias: bias %g of token %lld is out of range "
                           "[-100, 100]",
                           x, (long long)id);
            b = (float)x;
        } else {
            return BAD("logit_bias", "logit_bias: the bias of token %lld must be a number, got %s",
                       (long long)id, type_name(val));
        }
        r->bias[r->n_bias++] = (struct fx_logit_bias){.token = (fx_token)id, .bias = b};
    }
    r->sampler.logit_bias = r->bias;
    r->sampler.n_logit_bias = r->n_bias;
    return true;
}

/* The generation fields shared by completions and chat. */
static bool parse_generation(json_t *doc, struct fx_oai_request *r, const struct fx_oai_limits *lim,
                             struct fx_oai_error *err) {
    struct fx_sampler_params *sp = &r->sampler;
    int64_t x;
    const char *max_key = "max_tokens";
    if (opt(doc, "max_completion_tokens"))
        max_key = "max_completion_tokens";
    else if (!opt(doc, "max_tokens") && opt(doc, "n_predict"))
        max_key = "n_predict"; /* llama.cpp's name */
    x = -1;
    if (!get_int(doc, max_key, 1, INT32_MAX, &x, err))
        return false;
    r->max_tokens = (int32_t)x;
    x = 1;
    if (!get_int(doc, "n", 1, lim->n_max, &x, err))
        return false;
    r->n = (int32_t)x;
    if (!get_number(doc, "temperature", 0, 2, &sp->temperature, err) ||
        !get_number(doc, "top_p", 0, 1, &sp->top_p, err) ||
        !get_number(doc, "min_p", 0, 1, &sp->min_p, err) ||
        !get_number(doc, "presence_penalty", -2, 2, &sp->presence_penalty, err) ||
        !get_number(doc, "frequency_penalty", -2, 2, &sp->frequency_penalty, err) ||
        !get_number(doc, "repeat_penalty", 1e-6, 100, &sp->repeat_penalty, err))
        return false;
    x = sp->top_k;
    if (!get_int(doc, "top_k", -1, INT32_MAX, &x, err))
        return false;
    sp->top_k = (int32_t)x;
    x = sp->penalty_last_n;
    if (!get_int(doc, "repeat_last_n", -1, INT32_MAX, &x, err))
        return false;
    sp->penalty_last_n = (int32_t)x;
    json_t *seed = opt(doc, "seed");
    if (seed) {
        if (!int_value(seed, &x))
            return BAD("seed", "seed: expected an integer, got %s", type_name(seed));
        if (x != -1) { /* -1: a random seed, as llama.cpp has it */
            sp->seed = (uint64_t)x;
            r->seed_given = true;
        }
    }
    if (!get_bool(doc, "stream", &r->stream, err) ||
        !get_bool(doc, "ignore_eos", &r->ignore_eos, err))
        return false;
    json_t *so = opt(doc, "stream_options");
    if (so) {
        if (!json_is_object(so))
            return BAD("stream_options", "stream_options: expected an object, got %s",
                       type_name(so));
        json_t *iu = opt(so, "include_usage");
        if (iu && !json_is_boolean(iu))
            return BAD("stream_options.include_usage",
                       "stream_options.include_usage: expected a boolean, got %s", type_name(iu));
        r->include_usage = iu && json_is_true(iu);
    }
    json_t *rf = opt(doc, "response_format");
    if (rf) {
        json_t *t = json_is_object(rf) ? json_object_get(rf, "type") : NULL;
        if (!t || !json_is_string(t))
            return BAD("response_format", "response_format: expected {\"type\": \"text\"}");
        if (strcmp(json_string_value(t), "text") != 0)
            return BAD("response_format",
                       "response_format: type '%.40s' is not supported (only "
                       "\"text\")",
                       json_string_value(t));
    }
    /* Log-probabilities: an integer on completions, a boolean with top_logprobs on chat. */
    r->logprobs = -1;
    json_t *lp = opt(doc, "logprobs");
    if (r->endpoint == FX_OAI_CHAT) {
        bool want = false;
        if (!get_bool(doc, "logprobs", &want, err))
            return false;
        x = 0;
        if (!get_int(doc, "top_logprobs", 0, 20, &x, err))
            return false;
        r->logprobs = want ? (int32_t)x : -1;
    } else if (lp) {
        if (json_is_boolean(lp)) {
            r->logprobs = json_is_true(lp) ? 0 : -1;
        } else {
            if (!get_int(doc, "logprobs", 0, 20, &x, err))
                return false;
            r->logprobs = (int32_t)x;
        }
    }
    return parse_stop(doc, r, err) && parse_bias(doc, r, lim->n_vocab, err);
}

bool fx_oai_parse(enum fx_oai_endpoint endpoint, const char *body, size_t len,
                  const struct fx_oai_limits *lim, const struct fx_sampler_params *defaults,
                  struct fx_oai_request *out, struct fx_oai_error *err) {
    *out = (struct fx_oai_request){.endpoint = endpoint, .n = 1, .max_tokens = -1, .logprobs = -1};
    out->sampler = defaults ? *defaults : fx_sampler_default_params();
    out->sampler.logit_bias = NULL;
    out->sampler.n_logit_bias = 0;
    json_error_t jerr;
    json_t *doc = json_loadb(body ? body : "", len, JSON_DECODE_ANY, &jerr);
    if (!doc) /* jansson's position counts the bytes read, the offending one included */
        return fx_oai_fail(err, 400, "", "invalid JSON at byte %d (line %d, column %d): %s",
                           jerr.position > 0 ? jerr.position - 1 : 0, jerr.line, jerr.column,
                           jerr.text);
    bool ok = false;
    if (!json_is_object(doc)) {
        BAD("", "the request body must be a JSON object, got %s", type_name(doc));
        goto done;
    }
    json_t *model = opt(doc, "model");
    if (model && !json_is_string(model)) {
        BAD("model", "model: expected a string, got %s", type_name(model));
        goto done;
    }
    if (model && !(out->model = dup_n(json_string_value(model), json_string_length(model)))) {
        fx_oai_fail(err, 500, "model", "out of memory");
        goto done;
    }
    int64_t trunc = 0;
    if (endpoint != FX_OAI_TOKENIZE && endpoint != FX_OAI_DETOKENIZE &&
        !get_int(doc, "truncate_prompt_tokens", 1, INT32_MAX, &trunc, err))
        goto done;
    out->truncate = (int32_t)trunc;
    switch (endpoint) {
    case FX_OAI_COMPLETIONS:
        ok = parse_inputs(doc, "prompt", false, out, lim->n_vocab, err) &&
             parse_generation(doc, out, lim, err);
        break;
    case FX_OAI_CHAT:
        ok = parse_messages(doc, out, err) && parse_generation(doc, out, lim, err);
        break;
    case FX_OAI_EMBEDDINGS: {
        ok = parse_inputs(doc, "input", true, out, lim->n_vocab, err);
        json_t *f = opt(doc, "encoding_format");
        if (ok && f) {
            if (!json_is_string(f) || (strcmp(json_string_value(f), "float") != 0 &&
                                       strcmp(json_string_value(f), "base64") != 0))
                ok = BAD("encoding_format", "encoding_format: expected \"float\" or \"base64\"");
            else
                out->base64 = strcmp(json_string_value(f), "base64") == 0;
        }
        int64_t d = 0;
        ok = ok && get_int(doc, "dimensions", 1, INT32_MAX, &d, err);
        out->dimensions = (int32_t)d;
        break;
    }
    case FX_OAI_TOKENIZE: {
        json_t *c = opt(doc, "content");
        if (!c || !json_is_string(c)) {
            ok = BAD("content", "content: expected a string, got %s", c ? type_name(c) : "nothing");
            break;
        }
        out->parse_special = true;
        ok = parse_inputs(doc, "content", false, out, lim->n_vocab, err) &&
             get_bool(doc, "add_special", &out->add_special, err) &&
             get_bool(doc, "parse_special", &out->parse_special, err) &&
             get_bool(doc, "with_pieces", &out->with_pieces, err);
        break;
    }
    case FX_OAI_DETOKENIZE: {
        json_t *t = opt(doc, "tokens");
        if (!t || !json_is_array(t)) {
            ok = BAD("tokens", "tokens: expected an array of token ids, got %s",
                     t ? type_name(t) : "nothing");
            break;
        }
        if (!(out->input = calloc(1, sizeof *out->input))) {
            ok = fx_oai_fail(err, 500, "tokens", "out of memory");
            break;
        }
        out->n_input = 1;
        out->input[0].is_ids = true;
        ok = token_array(t, "tokens", lim->n_vocab, &out->input[0].ids, &out->input[0].n_ids, err);
        break;
    }
    }
done:
    json_decref(doc);
    if (!ok)
        fx_oai_request_free(out);
    return ok;
}

void fx_oai_request_free(struct fx_oai_request *r) {
    if (!r)
        return;
    for (size_t i = 0; r->input && i < r->n_input; i++) {
        free(r->input[i].text);
        free(r->input[i].ids);
    }
    free(r->input);
    for (size_t i = 0; r->stops && i < r->n_stops; i++)
        free(r->stops[i]);
    free(r->stops);
    free(r->bias);
    free(r->model);
    free(r->messages_json);
    free(r->template_vars);
    *r = (struct fx_oai_request){0};
}
