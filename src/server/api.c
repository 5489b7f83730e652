/* The endpoints: a parsed request becomes token ids (a prompt tokenized, or a conversation
 * rendered with the chat template and tokenized) and an engine job; its output becomes an OpenAI
 * response, whole or as Server-Sent Events. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/server_impl.h"

/* ---- JSON helpers ---------------------------------------------------------------------------- */

/* Length of the valid UTF-8 character at s[0..n), or 0 when it is not one. */
static size_t utf8_char(const unsigned char *s, size_t n) {
    unsigned char c = s[0];
    size_t len;
    uint32_t min;
    if (c < 0x80)
        return 1;
    if ((c & 0xE0) == 0xC0)
        len = 2, min = 0x80;
    else if ((c & 0xF0) == 0xE0)
        len = 3, min = 0x800;
    else if ((c & 0xF8) == 0xF0)
        len = 4, min = 0x10000;
    else
        return 0;
    if (len > n)
        return 0;
    uint32_t cp = c & (0x7F >> len);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return len;
}

json_t *fx_json_string_lossy(const char *s, size_t len) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < len) {
        size_t k = u[i] ? utf8_char(u + i, len - i) : 0;
        if (!k)
            break;
        i += k;
    }
    if (i == len)
        return json_stringn(s, len);
    /* Rebuild with U+FFFD (3 bytes) for each bad byte; NUL bytes too (jansson refuses them). */
    char *buf = malloc(len * 3 + 1);
    if (!buf)
        return NULL;
    size_t o = 0;
    for (i = 0; i < len;) {
        size_t k = u[i] ? utf8_char(u + i, len - i) : 0;
        if (k) {
            memcpy(buf + o, s + i, k);
            o += k;
            i += k;
        } else {
            memcpy(buf + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i++;
        }
    }
    json_t *j = json_stringn(buf, o);
    free(buf);
    return j;
}

static json_t *piece_json(const struct fx_vocab *v, fx_token id, json_t **bytes) {
    size_t len = 0;
    const char *p = fx_token_to_piece(v, id, true, &len);
    if (!p)
        p = "", len = 0;
    if (bytes) {
        *bytes = json_array();
        for (size_t i = 0; i < len; i++)
            json_array_append_new(*bytes, json_integer((unsigned char)p[i]));
    }
    return fx_json_string_lossy(p, len);
}

static char *base64(const void *data, size_t n) {
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const unsigned char *d = data;
    char *out = malloc((n + 2) / 3 * 4 + 1), *o = out;
    if (!out)
        return NULL;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)d[i] << 16 | (i + 1 < n ? (uint32_t)d[i + 1] << 8 : 0) |
                     (i + 2 < n ? d[i + 2] : 0);
        *o++ = tab[v >> 18 & 63];
        *o++ = tab[v >> 12 & 63];
        *o++ = i + 1 < n ? tab[v >> 6 & 63] : '=';
        *o++ = i + 2 < n ? tab[v & 63] : '=';
    }
    *o = '\0';
    return out;
}

/* ---- tokens ---------------------------------------------------------------------------------- */

/* The token ids of input t (tokenized when it is text). */
static fx_status input_ids(struct fx_server *s, struct fx_oai_text *t, bool add_special,
                           bool parse_special, fx_token **ids, size_t *n, struct fx_error *err) {
    if (t->is_ids) {
        *ids = malloc(((size_t)t->n_ids + 1) * sizeof **ids);
        if (!*ids)
            return FX_ERR_NOMEM;
        memcpy(*ids, t->ids, (size_t)t->n_ids * sizeof **ids);
        *n = (size_t)t->n_ids;
        return FX_OK;
    }
    return fx_tokenize_alloc(s->vocab, t->text, t->len, add_special, parse_special, ids, n, err);
}

/* "field: message" -> the field, when the engine's message starts with one. */
static void param_of(const char *msg, char *param, size_t cap) {
    const char *colon = strstr(msg, ": ");
    size_t n = colon ? (size_t)(colon - msg) : 0;
    if (n == 0 || n >= cap || memchr(msg, ' ', n))
        n = 0;
    memcpy(param, msg, n);
    param[n] = '\0';
}

static void new_id(struct fx_conn *c, const char *prefix) {
    uint64_t n = atomic_fetch_add(&c->srv->next_id, 1);
    snprintf(c->id, sizeof c->id, "%s-%08llx%08" PRIx64, prefix,
             (unsigned long long)c->srv->created, n);
    c->created = (long long)time(NULL);
}

/* ---- tokenize, detokenize, embeddings -------------------------------------------------------- */

static enum MHD_Result do_tokenize(struct fx_conn *c) {
    struct fx_error err = {0};
    fx_token *ids;
    size_t n;
    struct fx_oai_text *t = &c->req.input[0];
    if (fx_tokenize_alloc(c->srv->vocab, t->text, t->len, c->req.add_special, c->req.parse_special,
                          &ids, &n, &err) != FX_OK)
        return fx_http_error(c, 400, "invalid_request_error", "content", "content: %s", err.msg);
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++) {
        if (c->req.with_pieces) {
            size_t len = 0;
            const char *p = fx_token_to_piece(c->srv->vocab, ids[i], true, &len);
            json_array_append_new(arr, json_pack("{s:i,s:o}", "id", ids[i], "piece",
                                                 fx_json_string_lossy(p ? p : "", p ? len : 0)));
        } else {
            json_array_append_new(arr, json_integer(ids[i]));
        }
    }
    free(ids);
    return fx_http_json(c, 200, json_pack("{s:o}", "tokens", arr));
}

static enum MHD_Result do_detokenize(struct fx_conn *c) {
    struct fx_oai_text *t = &c->req.input[0];
    size_t cap = (size_t)t->n_ids * 16 + 64, len = 0;
    struct fx_error err = {0};
    for (int attempt = 0; attempt < 2; attempt++) {
        char *buf = malloc(cap);
        if (!buf)
            return fx_http_error(c, 500, "server_error", NULL, "out of memory");
        fx_status st =
            fx_detokenize(c->srv->vocab, t->ids, (size_t)t->n_ids, 0, buf, cap, &len, &err);
        if (st == FX_OK) {
            json_t *doc = json_pack("{s:o}", "content", fx_json_string_lossy(buf, len));
            free(buf);
            return fx_http_json(c, 200, doc);
        }
        free(buf);
        if (st != FX_ERR_CAPACITY)
            return fx_http_error(c, 400, "invalid_request_error", "tokens", "tokens: %s", err.msg);
        cap = len + 1;
    }
    return fx_http_error(c, 500, "server_error", NULL, "detokenized text kept growing");
}

static enum MHD_Result start_embeddings(struct fx_conn *c) {
    struct fx_server *s = c->srv;
    size_t n = c->req.n_input;
    fx_token **ids = calloc(n, sizeof *ids);
    int32_t *lens = calloc(n, sizeof *lens);
    enum MHD_Result res = MHD_YES;
    struct fx_error err = {0};
    if (!ids || !lens) {
        res = fx_http_error(c, 500, "server_error", NULL, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        size_t k;
        if (input_ids(s, &c->req.input[i], true, true, &ids[i], &k, &err) != FX_OK) {
            res = fx_http_error(c, 400, "invalid_request_error", "input", "input[%zu]: %s", i,
                                err.msg);
            goto done;
        }
        if (c->req.truncate > 0 && k > (size_t)c->req.truncate) { /* keep the end, as vLLM */
            memmove(ids[i], ids[i] + (k - (size_t)c->req.truncate),
                    (size_t)c->req.truncate * sizeof *ids[i]);
            k = (size_t)c->req.truncate;
        }
        if (k == 0 || k > (size_t)fx_engine_n_ctx_embd(s->engine)) {
            res = fx_http_error(c, 400, "invalid_request_error", "input",
                                "input[%zu]: %zu tokens; 1 to %d are accepted", i, k,
                                fx_engine_n_ctx_embd(s->engine));
            goto done;
        }
        lens[i] = (int32_t)k;
    }
    if (c->req.dimensions > fx_model_n_embd(s->model)) {
        res = fx_http_error(c, 400, "invalid_request_error", "dimensions",
                            "dimensions: %d, the model's embeddings have %d", c->req.dimensions,
                            fx_model_n_embd(s->model));
        goto done;
    }
    new_id(c, "embd");
    fx_status st = fx_engine_embed(s->engine, (const fx_token *const *)ids, lens, (int32_t)n,
                                   fx_http_notify, c, &c->emb, &err);
    if (st == FX_ERR_CANCELLED || st == FX_ERR_CAPACITY)
        res = fx_http_error(c, 503, "server_error", NULL, "%s", err.msg);
    else if (st != FX_OK)
        res = fx_http_error(c, 400, "invalid_request_error", "input", "%s", err.msg);
    else if (!fx_http_wait(c))
        res = fx_api_resume(c);
done:
    for (size_t i = 0; ids && i < n; i++)
        free(ids[i]);
    free(ids);
    free(lens);
    return res;
}

static enum MHD_Result respond_embeddings(struct fx_conn *c) {
    struct fx_embed_req *r = c->emb;
    pthread_mutex_lock(&r->mu);
    fx_status st = r->status;
    char msg[256];
    snprintf(msg, sizeof msg, "%s", r->error);
    pthread_mutex_unlock(&r->mu);
    if (st == FX_ERR_CANCELLED)
        return fx_http_error(c, 503, "server_error", NULL, "%s", msg);
    if (st != FX_OK)
        return fx_http_error(c, 500, "server_error", NULL, "%s", msg);
    int32_t d = c->req.dimensions > 0 ? c->req.dimensions : r->n_embd;
    json_t *data = json_array();
    float *cut = malloc((size_t)d * sizeof *cut);
    if (!cut)
        return fx_http_error(c, 500, "server_error", NULL, "out of memory");
    for (int32_t i = 0; i < r->n_inputs; i++) {
        const float *v = r->out + (size_t)i * (size_t)r->n_embd;
        double norm = 0;
        for (int32_t j = 0; j < d; j++)
            norm += (double)v[j] * v[j];
        norm = d < r->n_embd && norm > 0 ? sqrt(norm) : 1;
        for (int32_t j = 0; j < d; j++)
            cut[j] = (float)(v[j] / norm);
        json_t *emb;
        if (c->req.base64) {
            char *b = base64(cut, (size_t)d * sizeof *cut); /* little-endian floats */
            emb = b ? json_string(b) : NULL;
            free(b);
        } else {
            emb = json_array();
            for (int32_t j = 0; j < d; j++)
                json_array_append_new(emb, json_real(cut[j]));
        }
        json_array_append_new(
            data, json_pack("{s:s,s:i,s:o}", "object", "embedding", "index", i, "embedding", emb));
    }
    free(cut);
    return fx_http_json(
        c, 200,
        json_pack("{s:s,s:o,s:o,s:{s:I,s:I}}", "object", "list", "data", data, "model",
                  fx_json_string_lossy(c->srv->model_name, strlen(c->srv->model_name)), "usage",
                  "prompt_tokens", (json_int_t)r->n_tokens, "total_tokens",
                  (json_int_t)r->n_tokens));
}

/* ---- completions and chat -------------------------------------------------------------------- */

/* The prompt's ids: the completion's prompt, or the conversation through the chat template. */
static enum MHD_Result prompt_ids(struct fx_conn *c, fx_token **ids, size_t *n) {
    struct fx_server *s = c->srv;
    struct fx_error err = {0};
    if (c->route == FX_ROUTE_COMPLETIONS) {
        if (input_ids(s, &c->req.input[0], true, true, ids, n, &err) != FX_OK)
            return fx_http_error(c, 400, "invalid_request_error", "prompt", "prompt: %s", err.msg);
        return MHD_YES;
    }
    if (!s->p.tmpl)
        return fx_http_error(c, 400, "invalid_request_error", "messages",
                             "this server has no chat template (start it with --chat-template)");
    struct fx_chat_params cp;
    fx_chat_default_params(&cp);
    cp.bos_token = s->bos_text;
    cp.eos_token = s->eos_text;
    cp.vars_json = c->req.template_vars;
    struct fx_chat_text text = {0};
    fx_status st = fx_chat_render_json(s->p.tmpl, c->req.messages_json,
                                       strlen(c->req.messages_json), &cp, &text, &err);
    if (st != FX_OK) {
        fx_chat_text_free(&text);
        return fx_http_error(c, 400, "invalid_request_error", "messages", "messages: %s", err.msg);
    }
    st = fx_tokenize_alloc(s->vocab, text.data, text.len, true, true, ids, n, &err);
    fx_chat_text_free(&text);
    if (st != FX_OK)
        return fx_http_error(c, 400, "invalid_request_error", "messages", "messages: %s", err.msg);
    return MHD_YES;
}

static enum MHD_Result start_generation(struct fx_conn *c) {
    struct fx_server *s = c->srv;
    fx_token *ids = NULL;
    size_t n = 0;
    enum MHD_Result res = prompt_ids(c, &ids, &n);
    if (c->responded)
        return res;
    const char *what = c->route == FX_ROUTE_CHAT ? "messages" : "prompt";
    if (c->req.truncate > 0 && n > (size_t)c->req.truncate) { /* keep the end, as vLLM */
        memmove(ids, ids + (n - (size_t)c->req.truncate), (size_t)c->req.truncate * sizeof *ids);
        n = (size_t)c->req.truncate;
    }
    if (n == 0) {
        free(ids);
        return fx_http_error(c, 400, "invalid_request_error", what, "%s: no tokens", what);
    }
    if (n > (size_t)fx_engine_n_ctx_seq(s->engine)) {
        free(ids);
        return fx_http_error(c, 400, "invalid_request_error", what,
                             "%s: the prompt is too long: %zu tokens, the context holds %d "
                             "(truncate_prompt_tokens keeps its end)",
                             what, n, fx_engine_n_ctx_seq(s->engine));
    }
    struct fx_oai_request *q = &c->req;
    if (!q->seed_given) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        q->sampler.seed = ((uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ull) ^
                          atomic_fetch_add(&s->next_id, 1) ^ (uint64_t)ts.tv_sec;
    }
    struct fx_gen_params gp = {
        .prompt = ids,
        .n_prompt = (int32_t)n,
        .max_tokens = q->max_tokens > 0 ? q->max_tokens : s->p.max_tokens,
        .n = q->n,
        .sampler = q->sampler,
        .stops = (const char *const *)q->stops,
        .n_stops = q->n_stops,
        .ignore_eos = q->ignore_eos,
        .logprobs = q->logprobs,
    };
    new_id(c, c->route == FX_ROUTE_CHAT ? "chatcmpl" : "cmpl");
    if (q->stream) {
        c->sent_text = calloc((size_t)q->n, sizeof *c->sent_text);
        c->sent_toks = calloc((size_t)q->n, sizeof *c->sent_toks);
        c->sent_finish = calloc((size_t)q->n, sizeof *c->sent_finish);
        if (!c->sent_text || !c->sent_toks || !c->sent_finish) {
            free(ids);
            return fx_http_error(c, 500, "server_error", NULL, "out of memory");
        }
    }
    struct fx_error err = {0};
    fx_status st = fx_engine_submit(s->engine, &gp, fx_http_notify, c, &c->gen, &err);
    free(ids);
    if (st == FX_ERR_CAPACITY || st == FX_ERR_CANCELLED)
        return fx_http_error(c, 503, "server_error", NULL, "%s", err.msg);
    if (st != FX_OK) {
        char param[64];
        param_of(err.msg, param, sizeof param);
        if (strcmp(param, "prompt") == 0)
            snprintf(param, sizeof param, "%s", what);
        return fx_http_error(c, st == FX_ERR_NOMEM ? 500 : 400,
                             st == FX_ERR_NOMEM ? "server_error" : "invalid_request_error", param,
                             "%s", err.msg);
    }
    if (q->stream)
        return fx_http_stream(c);
    if (!fx_http_wait(c))
        return fx_api_resume(c);
    return MHD_YES;
}

static const char *finish_text(enum fx_finish f) {
    return f == FX_FINISH_NONE ? NULL : fx_finish_name(f);
}

static json_t *usage_json(const struct fx_gen_req *r) {
    json_int_t gen = 0;
    for (int32_t i = 0; i < r->n; i++)
        gen += r->choices[i].n_gen;
    return json_pack("{s:I,s:I,s:I,s:{s:I}}", "prompt_tokens", (json_int_t)r->n_prompt,
                     "completion_tokens", gen, "total_tokens", (json_int_t)r->n_prompt + gen,
                     "prompt_tokens_details", "cached_tokens", (json_int_t)r->n_cached);
}

/* The log-probabilities of tokens [from, to) of a choice, in the endpoint's shape. Under r->mu. */
static json_t *logprobs_json(struct fx_conn *c, const struct fx_gen_choice *ch, int32_t from,
                             int32_t to, size_t text_offset) {
    const struct fx_vocab *v = c->srv->vocab;
    if (c->route == FX_ROUTE_CHAT) {
        json_t *content = json_array();
        for (int32_t i = from; i < to; i++) {
            const struct fx_gen_token *t = &ch->toks[i];
            json_t *bytes, *top = json_array();
            json_t *tok = piece_json(v, t->id, &bytes);
            for (int32_t k = 0; k < t->n_top; k++) {
                json_t *tb, *tt = piece_json(v, t->top_id[k], &tb);
                json_array_append_new(top, json_pack("{s:o,s:f,s:o}", "token", tt, "logprob",
                                                     (double)t->top_logprob[k], "bytes", tb));
            }
            json_array_append_new(content, json_pack("{s:o,s:f,s:o,s:o}", "token", tok, "logprob",
                                                     (double)t->logprob, "bytes", bytes,
                                                     "top_logprobs", top));
        }
        return json_pack("{s:o}", "content", content);
    }
    json_t *tokens = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
    for (int32_t i = from; i < to; i++) {
        const struct fx_gen_token *t = &ch->toks[i];
        size_t len = 0;
        fx_token_to_piece(v, t->id, true, &len);
        json_array_append_new(tokens, piece_json(v, t->id, NULL));
        json_array_append_new(lps, json_real(t->logprob));
        json_t *top = json_object();
        for (int32_t k = 0; k < t->n_top; k++) {
            size_t pl = 0;
            const char *p = fx_token_to_piece(v, t->top_id[k], true, &pl);
            json_t *key = fx_json_string_lossy(p ? p : "", p ? pl : 0);
            if (key)
                json_object_set_new(top, json_string_value(key), json_real(t->top_logprob[k]));
            json_decref(key);
        }
        json_array_append_new(tops, top);
        json_array_append_new(offs, json_integer((json_int_t)text_offset));
        text_offset += len;
    }
    return json_pack("{s:o,s:o,s:o,s:o}", "tokens", tokens, "token_logprobs", lps, "top_logprobs",
                     tops, "text_offset", offs);
}

static enum MHD_Result respond_generation(struct fx_conn *c) {
    struct fx_gen_req *r = c->gen;
    bool chat = c->route == FX_ROUTE_CHAT;
    fx_gen_req_lock(r);
    enum fx_finish f0 = r->choices[0].finish;
    bool error = false;
    for (int32_t i = 0; i < r->n; i++)
        error = error || r->choices[i].finish == FX_FINISH_ERROR;
    if (error || f0 == FX_FINISH_ABORT) {
        char msg[256];
        snprintf(msg, sizeof msg, "%s", error ? r->error : "the request was cancelled");
        fx_gen_req_unlock(r);
        if (!error)
            return fx_http_error(c, 503, "server_error", NULL, "%s (the server is shutting down)",
                                 msg);
        return fx_http_error(c, 500, "server_error", NULL, "%s", msg);
    }
    json_t *choices = json_array();
    for (int32_t i = 0; i < r->n; i++) {
        const struct fx_gen_choice *ch = &r->choices[i];
        json_t *text = fx_json_string_lossy(ch->text, ch->len);
        json_t *lp = r->logprobs >= 0 ? logprobs_json(c, ch, 0, ch->n_toks, 0) : json_null();
        json_t *choice = chat ? json_pack("{s:i,s:{s:s,s:o},s:o,s:s}", "index", i, "message",
                                          "role", "assistant", "content", text, "logprobs", lp,
                                          "finish_reason", fx_finish_name(ch->finish))
                              : json_pack("{s:i,s:o,s:o,s:s}", "index", i, "text", text, "logprobs",
                                          lp, "finish_reason", fx_finish_name(ch->finish));
        json_array_append_new(choices, choice);
    }
    json_t *usage = usage_json(r);
    fx_gen_req_unlock(r);
    return fx_http_json(
        c, 200,
        json_pack("{s:s,s:s,s:I,s:o,s:o,s:o}", "id", c->id, "object",
                  chat ? "chat.completion" : "text_completion", "created", (json_int_t)c->created,
                  "model", fx_json_string_lossy(c->srv->model_name, strlen(c->srv->model_name)),
                  "choices", choices, "usage", usage));
}

/* ---- streaming ------------------------------------------------------------------------------- */

static bool out_append(struct fx_conn *c, const char *s, size_t n) {
    if (c->out_len + n > c->out_cap) {
        size_t cap = c->out_cap ? c->out_cap : 4096;
        while (cap < c->out_len + n)
            cap *= 2;
        char *grown = realloc(c->out, cap);
        if (!grown)
            return false;
        c->out = grown;
        c->out_cap = cap;
    }
    memcpy(c->out + c->out_len, s, n);
    c->out_len += n;
    return true;
}

/* Appends "data: JSON\n\n" (taking doc). */
static void event(struct fx_conn *c, json_t *doc) {
    char *text = doc ? json_dumps(doc, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
    json_decref(doc);
    if (!text)
        return;
    out_append(c, "data: ", 6);
    out_append(c, text, strlen(text));
    out_append(c, "\n\n", 2);
    free(text);
}

static json_t *chunk(struct fx_conn *c, json_t *choices) {
    return json_pack("{s:s,s:s,s:I,s:o,s:o}", "id", c->id, "object",
                     c->route == FX_ROUTE_CHAT ? "chat.completion.chunk" : "text_completion",
                     "created", (json_int_t)c->created, "model",
                     fx_json_string_lossy(c->srv->model_name, strlen(c->srv->model_name)),
                     "choices", choices);
}

static json_t *chunk_choice(struct fx_conn *c, int32_t i, json_t *delta_text, bool role,
                            json_t *logprobs, const char *finish) {
    json_t *fin = finish ? json_string(finish) : json_null();
    if (!logprobs)
        logprobs = json_null();
    if (c->route != FX_ROUTE_CHAT)
        return json_pack("{s:i,s:o,s:o,s:o}", "index", i, "text",
                         delta_text ? delta_text : json_string(""), "logprobs", logprobs,
                         "finish_reason", fin);
    json_t *delta = json_object();
    if (role)
        json_object_set_new(delta, "role", json_string("assistant"));
    if (delta_text)
        json_object_set_new(delta, "content", delta_text);
    return json_pack("{s:i,s:o,s:o,s:o}", "index", i, "delta", delta, "logprobs", logprobs,
                     "finish_reason", fin);
}

int fx_api_stream_fill(struct fx_conn *c) {
    if (c->sent_done)
        return -1;
    struct fx_gen_req *r = c->gen;
    size_t before = c->out_len;
    fx_gen_req_lock(r);
    if (c->route == FX_ROUTE_CHAT && !c->sent_role) {
        for (int32_t i = 0; i < r->n; i++)
            event(c, chunk(c, json_pack("[o]",
                                        chunk_choice(c, i, json_string(""), true, NULL, NULL))));
        c->sent_role = true;
    }
    bool all_sent = true;
    for (int32_t i = 0; i < r->n; i++) {
        const struct fx_gen_choice *ch = &r->choices[i];
        int32_t to = r->logprobs >= 0 ? ch->n_toks : 0;
        if (ch->len > c->sent_text[i] || to > c->sent_toks[i]) {
            json_t *lp = r->logprobs >= 0 && to > c->sent_toks[i]
                             ? logprobs_json(c, ch, c->sent_toks[i], to, c->sent_text[i])
                             : NULL;
            json_t *text =
                fx_json_string_lossy(ch->text + c->sent_text[i], ch->len - c->sent_text[i]);
            event(c, chunk(c, json_pack("[o]", chunk_choice(c, i, text, false, lp, NULL))));
            c->sent_text[i] = ch->len;
            c->sent_toks[i] = to;
        }
        if (ch->finish != FX_FINISH_NONE && !c->sent_finish[i]) {
            if (ch->finish == FX_FINISH_ERROR)
                event(c, json_pack("{s:{s:o,s:s}}", "error", "message",
                                   fx_json_string_lossy(r->error, strlen(r->error)), "type",
                                   "server_error"));
            json_t *empty = c->route == FX_ROUTE_CHAT ? NULL : json_string("");
            event(c, chunk(c, json_pack("[o]", chunk_choice(c, i, empty, false, NULL,
                                                            finish_text(ch->finish)))));
            c->sent_finish[i] = true;
        }
        all_sent = all_sent && c->sent_finish[i];
    }
    if (r->done && all_sent) {
        if (c->req.include_usage) {
            json_t *u = chunk(c, json_array());
            json_object_set_new(u, "usage", usage_json(r));
            event(c, u);
        }
        out_append(c, "data: [DONE]\n\n", 14);
        c->sent_done = true;
    }
    fx_gen_req_unlock(r);
    return c->out_len > before ? 1 : c->sent_done ? -1 : 0;
}

/* ---- dispatch -------------------------------------------------------------------------------- */

enum MHD_Result fx_api_dispatch(struct fx_conn *c) {
    static const enum fx_oai_endpoint endpoints[] = {
        [FX_ROUTE_COMPLETIONS] = FX_OAI_COMPLETIONS, [FX_ROUTE_CHAT] = FX_OAI_CHAT,
        [FX_ROUTE_EMBEDDINGS] = FX_OAI_EMBEDDINGS,   [FX_ROUTE_TOKENIZE] = FX_OAI_TOKENIZE,
        [FX_ROUTE_DETOKENIZE] = FX_OAI_DETOKENIZE,
    };
    struct fx_server *s = c->srv;
    struct fx_oai_limits lim = {.n_vocab = fx_model_n_vocab(s->model),
                                .n_max = fx_engine_n_parallel(s->engine)};
    struct fx_oai_error oe = {0};
    if (!fx_oai_parse(endpoints[c->route], c->body, c->len, &lim, &s->p.sampler, &c->req, &oe))
        return fx_http_error(c, (unsigned)oe.status,
                             oe.status >= 500 ? "server_error" : "invalid_request_error", oe.param,
                             "%s", oe.message);
    switch (c->route) {
    case FX_ROUTE_TOKENIZE:
        return do_tokenize(c);
    case FX_ROUTE_DETOKENIZE:
        return do_detokenize(c);
    case FX_ROUTE_EMBEDDINGS:
        return start_embeddings(c);
    default:
        return start_generation(c);
    }
}

bool fx_api_job_done(struct fx_conn *c) {
    bool done = true;
    if (c->gen) {
        fx_gen_req_lock(c->gen);
        done = c->gen->done;
        fx_gen_req_unlock(c->gen);
    } else if (c->emb) {
        pthread_mutex_lock(&c->emb->mu);
        done = c->emb->done;
        pthread_mutex_unlock(&c->emb->mu);
    }
    return done;
}

enum MHD_Result fx_api_resume(struct fx_conn *c) {
    if (c->responded)
        return MHD_YES;
    if (!fx_api_job_done(c)) { /* a spurious wake-up: wait again */
        if (fx_http_wait(c))
            return MHD_YES;
    }
    if (c->emb)
        return respond_embeddings(c);
    if (c->gen)
        return respond_generation(c);
    return fx_http_error(c, 500, "server_error", NULL, "no response");
}

void fx_api_conn_free(struct fx_conn *c) {
    fx_oai_request_free(&c->req);
    free(c->out);
    free(c->sent_text);
    free(c->sent_toks);
    free(c->sent_finish);
}
