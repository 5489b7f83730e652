/* libFuzzer target for chat templates: the input is a template source, optionally followed by a
 * NUL byte and text used as the last user message. Every template that parses is rendered twice
 * (plain messages, and JSON messages with a tool call and tools) under small limits, so that
 * runaway loops end quickly. Parsing and rendering must never crash, hang or leak, whatever the
 * bytes (invalid UTF-8 included). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ferrox.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char tool_conv[] =
    "[{\"role\": \"system\", \"content\": \"sys\"},"
    " {\"role\": \"user\", \"content\": \"hi\"},"
    " {\"role\": \"assistant\", \"tool_calls\": [{\"id\": \"call12345\", \"type\": \"function\","
    "  \"function\": {\"name\": \"f\", \"arguments\": {\"a\": [1, 2.5, null, true]}}}]},"
    " {\"role\": \"tool\", \"tool_call_id\": \"call12345\", \"content\": \"ok\"},"
    " {\"role\": \"assistant\", \"content\": \"<think>r</think>done\"}]";

static const char tools[] =
    "{\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"description\": \"d\","
    " \"parameters\": {\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"array\","
    " \"items\": {\"type\": \"number\"}}}, \"required\": [\"a\"]}}}], \"enable_thinking\": false}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > (64 << 10))
        return 0;
    const uint8_t *sep = memchr(data, 0, size);
    size_t tlen = sep ? (size_t)(sep - data) : size;
    struct fx_chat_template *t;
    struct fx_error err;
    if (fx_chat_template_create((const char *)data, tlen, &t, &err) != FX_OK)
        return 0;
    char *content = NULL;
    if (sep) {
        size_t clen = size - tlen - 1;
        content = malloc(clen + 1);
        if (!content) {
            fx_chat_template_free(t);
            return 0;
        }
        memcpy(content, sep + 1, clen);
        content[clen] = '\0';
    }
    const struct fx_chat_msg msgs[] = {
        {"system", "You are helpful."},
        {"user", "Hello"},
        {"assistant", "Hi"},
        {"user", content ? content : "Bye"},
    };
    struct fx_chat_params p;
    fx_chat_default_params(&p);
    p.bos_token = "<s>";
    p.eos_token = "</s>";
    p.now = 1735689600;
    p.max_steps = 100000;
    p.max_output = 1 << 20;
    p.max_memory = 16 << 20;
    struct fx_chat_text out = {0};
    fx_chat_render(t, msgs, sizeof msgs / sizeof msgs[0], &p, &out, &err);
    p.add_generation_prompt = false;
    p.vars_json = tools;
    fx_chat_render_json(t, tool_conv, strlen(tool_conv), &p, &out, &err);
    fx_chat_text_free(&out);
    fx_chat_template_free(t);
    free(content);
    return 0;
}
