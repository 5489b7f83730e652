/* Chat templates: the public API over the Jinja interpreter (parse once, render per turn) and
 * the built-in templates by name. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "ferrox.h"
#include "chat/chat.h"
#include "chat/jinja.h"

struct fx_chat_template {
    struct fx_jinja_prog *prog;
    const char *builtin; /* the built-in name when the source is exactly one, else NULL */
};

#define DEFAULT_MAX_OUTPUT ((size_t)16 << 20)
#define DEFAULT_MAX_MEMORY ((size_t)64 << 20)
#define DEFAULT_MAX_STEPS  50000000u
#define DEFAULT_MAX_DEPTH  1000u

const char *fx_chat_builtin_name(size_t i) {
    return i < fx_chat_n_builtins ? fx_chat_builtins[i].name : NULL;
}

const char *fx_chat_builtin_source(const char *name) {
    for (size_t i = 0; name && i < fx_chat_n_builtins; i++)
        if (strcmp(fx_chat_builtins[i].name, name) == 0)
            return fx_chat_builtins[i].source;
    return NULL;
}

fx_status fx_chat_template_create(const char *source, size_t len, struct fx_chat_template **out,
                                  struct fx_error *err) {
    *out = NULL;
    if (!source && len)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET, "chat template: NULL source");
    struct fx_chat_template *t = calloc(1, sizeof *t);
    if (!t)
        return fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "chat template: out of memory");
    fx_status st = fx_jinja_parse(source ? source : "", len, &t->prog, err);
    if (st != FX_OK) {
        fx_error_prefix(err, "chat template");
        free(t);
        return st;
    }
    for (size_t i = 0; i < fx_chat_n_builtins; i++) {
        const char *b = fx_chat_builtins[i].source;
        if (strlen(b) == len && memcmp(b, source, len) == 0)
            t->builtin = fx_chat_builtins[i].name;
    }
    *out = t;
    return FX_OK;
}

fx_status fx_chat_template_builtin(const char *name, struct fx_chat_template **out,
                                   struct fx_error *err) {
    *out = NULL;
    const char *src = fx_chat_builtin_source(name);
    if (!src) {
        char names[200] = "";
        size_t at = 0;
        for (size_t i = 0; i < fx_chat_n_builtins && at < sizeof names; i++)
            at += (size_t)snprintf(names + at, sizeof names - at, "%s%s", i ? ", " : "",
                                   fx_chat_builtins[i].name);
        return fx_error_set(err, FX_ERR_NOT_FOUND, FX_NO_OFFSET,
                            "no built-in chat template named '%.40s' (known: %s)",
                            name ? name : "(null)", names);
    }
    return fx_chat_template_create(src, strlen(src), out, err);
}

void fx_chat_template_free(struct fx_chat_template *t) {
    if (!t)
        return;
    fx_jinja_prog_free(t->prog);
    free(t);
}

const char *fx_chat_template_builtin_name(const struct fx_chat_template *t) {
    return t ? t->builtin : NULL;
}

void fx_chat_default_params(struct fx_chat_params *p) {
    *p = (struct fx_chat_params){
        .add_generation_prompt = true,
        .now = FX_CHAT_NOW_LOCAL,
        .max_output = DEFAULT_MAX_OUTPUT,
        .max_memory = DEFAULT_MAX_MEMORY,
        .max_steps = DEFAULT_MAX_STEPS,
        .max_depth = DEFAULT_MAX_DEPTH,
    };
}

void fx_chat_text_free(struct fx_chat_text *text) {
    if (!text)
        return;
    free(text->data);
    *text = (struct fx_chat_text){0};
}

static fx_status set_str(struct fx_jarena *a, struct fx_jdict *d, const char *key, const char *val,
                         size_t len) {
    struct fx_jv v;
    fx_status st = fx_jv_str_copy(a, val, len, &v);
    if (st != FX_OK)
        return st;
    return fx_jdict_set(a, d, fx_jv_strref(key, (uint32_t)strlen(key)), v) ? FX_OK : a->fail;
}

/* Parses JSON text, reporting jansson's position. */
static fx_status parse_json(const char *what, const char *text, size_t len, json_t **out,
                            struct fx_error *err) {
    json_error_t je;
    *out = json_loadb(text, len, 0, &je);
    if (!*out)
        return fx_error_set(err, FX_ERR_INVALID_ARG, (uint64_t)je.position,
                            "chat template: %s: invalid JSON at line %d, column %d: %s", what,
                            je.line, je.column, je.text);
    return FX_OK;
}

/* Renders with `messages` already converted; the shared tail of both render calls. */
static fx_status render(const struct fx_chat_template *t, struct fx_jarena *arena,
                        struct fx_jv messages, const struct fx_chat_params *p,
                        struct fx_chat_text *out, struct fx_error *err) {
    struct fx_jdict *vars = fx_jdict_new(arena, 16);
    if (!vars)
        return fx_error_set(err, arena->fail, FX_NO_OFFSET, "chat template: out of memory");
    fx_status st = FX_OK;
    const char *bos = p->bos_token ? p->bos_token : "", *eos = p->eos_token ? p->eos_token : "";
    if (!fx_jdict_set(arena, vars, fx_jv_strref("messages", 8), messages) ||
        !fx_jdict_set(arena, vars, fx_jv_strref("add_generation_prompt", 21),
                      fx_jv_bool(p->add_generation_prompt)) ||
        set_str(arena, vars, "bos_token", bos, strlen(bos)) != FX_OK ||
        set_str(arena, vars, "eos_token", eos, strlen(eos)) != FX_OK)
        return fx_error_set(err, arena->fail, FX_NO_OFFSET, "chat template: out of memory");
    if (p->vars_json) {
        json_t *j;
        if ((st = parse_json("vars_json", p->vars_json, strlen(p->vars_json), &j, err)) != FX_OK)
            return st;
        if (!json_is_object(j) || json_object_get(j, "messages")) {
            json_decref(j);
            return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                                "chat template: vars_json must be a JSON object without "
                                "\"messages\"");
        }
        struct fx_jv extra;
        st = fx_jv_from_json(arena, j, &extra);
        json_decref(j);
        for (uint32_t i = 0; st == FX_OK && i < extra.u.dict->n; i++)
            if (!fx_jdict_set(arena, vars, extra.u.dict->e[i].key, extra.u.dict->e[i].val))
                st = arena->fail;
        if (st != FX_OK)
            return fx_error_set(err, st, FX_NO_OFFSET, "chat template: vars_json too large");
    }
    struct fx_jinja_limits lim = {
        .max_output = p->max_output ? p->max_output : DEFAULT_MAX_OUTPUT,
        .max_memory = p->max_memory ? p->max_memory : DEFAULT_MAX_MEMORY,
        .max_steps = p->max_steps ? p->max_steps : DEFAULT_MAX_STEPS,
        .max_depth = p->max_depth ? p->max_depth : DEFAULT_MAX_DEPTH,
    };
    struct fx_jbuf buf = {.p = out->data, .cap = out->cap, .limit = lim.max_output};
    st = fx_jinja_render(t->prog, arena, vars, p->now, &lim, &buf, err);
    if (st == FX_OK && !buf.p) {
        /* Empty output still gets a NUL-terminated buffer. */
        if (!(buf.p = malloc(1)))
            st = fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "out of memory");
        buf.cap = 1;
    }
    out->data = buf.p;
    out->cap = buf.cap;
    out->len = st == FX_OK ? buf.len : 0;
    if (out->data)
        out->data[out->len] = '\0';
    if (st != FX_OK)
        fx_error_prefix(err, "chat template");
    return st;
}

static fx_status begin(const struct fx_chat_template *t, const struct fx_chat_params **p,
                       struct fx_chat_params *defaults, struct fx_jarena *arena,
                       struct fx_chat_text *out, struct fx_error *err) {
    if (!t || !out)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "chat template: NULL template or output");
    out->len = 0;
    if (!*p) {
        fx_chat_default_params(defaults);
        *p = defaults;
    }
    fx_jarena_init(arena, (*p)->max_memory ? (*p)->max_memory : DEFAULT_MAX_MEMORY);
    return FX_OK;
}

fx_status fx_chat_render(const struct fx_chat_template *t, const struct fx_chat_msg *msgs,
                         size_t n_msgs, const struct fx_chat_params *p, struct fx_chat_text *out,
                         struct fx_error *err) {
    struct fx_chat_params defaults;
    struct fx_jarena arena;
    fx_status st = begin(t, &p, &defaults, &arena, out, err);
    if (st != FX_OK)
        return st;
    if (!msgs && n_msgs)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET, "chat template: NULL messages");
    struct fx_jlist *list = n_msgs < UINT32_MAX / 4 ? fx_jlist_new(&arena, n_msgs) : NULL;
    st = list ? FX_OK : FX_ERR_CAPACITY;
    for (size_t i = 0; i < n_msgs && st == FX_OK; i++) {
        if (!msgs[i].role) {
            fx_jarena_free(&arena);
            return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                                "chat template: message %zu has no role", i);
        }
        struct fx_jdict *d = fx_jdict_new(&arena, 2);
        if (!d) {
            st = arena.fail;
            break;
        }
        st = set_str(&arena, d, "role", msgs[i].role, strlen(msgs[i].role));
        if (st == FX_OK && msgs[i].content)
            st = set_str(&arena, d, "content", msgs[i].content, strlen(msgs[i].content));
        else if (st == FX_OK && !fx_jdict_set(&arena, d, fx_jv_strref("content", 7), fx_jv_none()))
            st = arena.fail;
        list->v[i] = (struct fx_jv){.kind = FX_JV_DICT, .u.dict = d};
    }
    if (st != FX_OK) {
        fx_jarena_free(&arena);
        return fx_error_set(err, st, FX_NO_OFFSET,
                            "chat template: %zu messages do not fit the memory limit", n_msgs);
    }
    list->n = (uint32_t)n_msgs;
    st = render(t, &arena, fx_jv_list(list, false), p, out, err);
    fx_jarena_free(&arena);
    return st;
}

fx_status fx_chat_render_json(const struct fx_chat_template *t, const char *messages_json,
                              size_t len, const struct fx_chat_params *p, struct fx_chat_text *out,
                              struct fx_error *err) {
    struct fx_chat_params defaults;
    struct fx_jarena arena;
    fx_status st = begin(t, &p, &defaults, &arena, out, err);
    if (st != FX_OK)
        return st;
    json_t *j;
    if (!messages_json)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET, "chat template: NULL messages");
    if ((st = parse_json("messages", messages_json, len, &j, err)) != FX_OK)
        return st;
    if (!json_is_array(j)) {
        json_decref(j);
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "chat template: messages must be a JSON array");
    }
    struct fx_jv messages;
    st = fx_jv_from_json(&arena, j, &messages);
    json_decref(j);
    if (st != FX_OK) {
        fx_jarena_free(&arena);
        return fx_error_set(err, st, FX_NO_OFFSET,
                            "chat template: messages do not fit the memory limit");
    }
    st = render(t, &arena, messages, p, out, err);
    fx_jarena_free(&arena);
    return st;
}
