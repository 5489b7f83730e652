/* Chat templates per model family: each built-in template (the family's published text) renders
 * a multi-turn conversation to the exact string that template produces, written out by hand from
 * the template's rules, with and without the generation prompt. */
#include "fx_test.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ferrox.h"

/* 2025-01-01 00:00:00 UTC, for templates that print today's date. */
#define NEW_YEAR_2025 1735689600

static const struct fx_chat_msg conv_open[] = {
    {"system", "You are a helpful assistant."},
    {"user", "Hello!"},
    {"assistant", "Hi! How can I help?"},
    {"user", "What is 2+2?"},
};

/* The same conversation after the model answered. */
static const struct fx_chat_msg conv_done[] = {
    {"system", "You are a helpful assistant."},
    {"user", "Hello!"},
    {"assistant", "Hi! How can I help?"},
    {"user", "What is 2+2?"},
    {"assistant", "2+2 is 4."},
};

#define N(a) (sizeof(a) / sizeof((a)[0]))

struct family_case {
    const char *name;
    const char *bos, *eos;
    const char *open_prompt; /* conv_open with add_generation_prompt */
    const char *done;        /* conv_done without it */
};

static void render_builtin(const char *name, const struct fx_chat_msg *msgs, size_t n, bool agp,
                           const char *bos, const char *eos, const char *vars,
                           struct fx_chat_text *out, fx_status expect_status) {
    struct fx_chat_template *t;
    struct fx_error err = {0};
    fx_status st = fx_chat_template_builtin(name, &t, &err);
    if (st != FX_OK)
        fail_msg("%s: %s", name, err.msg);
    assert_string_equal(fx_chat_template_builtin_name(t), name);
    struct fx_chat_params p;
    fx_chat_default_params(&p);
    p.add_generation_prompt = agp;
    p.bos_token = bos;
    p.eos_token = eos;
    p.vars_json = vars;
    p.now = NEW_YEAR_2025;
    st = fx_chat_render(t, msgs, n, &p, out, &err);
    if (st != expect_status)
        fail_msg("%s: status %s, expected %s: %s", name, fx_status_name(st),
                 fx_status_name(expect_status), err.msg);
    fx_chat_template_free(t);
}

static void check_family(const struct family_case *fc) {
    struct fx_chat_text out = {0};
    render_builtin(fc->name, conv_open, N(conv_open), true, fc->bos, fc->eos, NULL, &out, FX_OK);
    assert_string_equal(out.data, fc->open_prompt);
    render_builtin(fc->name, conv_done, N(conv_done), false, fc->bos, fc->eos, NULL, &out, FX_OK);
    assert_string_equal(out.data, fc->done);
    fx_chat_text_free(&out);
}

#define CHATML_OPEN                                                                                \
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"                                 \
    "<|im_start|>user\nHello!<|im_end|>\n"                                                         \
    "<|im_start|>assistant\nHi! How can I help?<|im_end|>\n"                                       \
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n"

FX_TEST(chat_family_chatml_qwen2_smollm2) {
    /* With a system message the Qwen 2 and SmolLM2 templates are plain ChatML. */
    static const char *const names[] = {"chatml", "qwen2", "qwen2.5", "smollm2"};
    for (size_t i = 0; i < N(names); i++) {
        struct family_case fc = {names[i], NULL, NULL, CHATML_OPEN "<|im_start|>assistant\n",
                                 CHATML_OPEN "<|im_start|>assistant\n2+2 is 4.<|im_end|>\n"};
        check_family(&fc);
    }
}

FX_TEST(chat_family_default_system_prompts) {
    /* Without a system message Qwen 2, Qwen 2.5 and SmolLM2 insert their own. */
    static const struct {
        const char *name, *system;
    } cases[] = {
        {"qwen2", "You are a helpful assistant."},
        {"qwen2.5", "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."},
        {"smollm2", "You are a helpful AI assistant named SmolLM, trained by Hugging Face"},
    };
    struct fx_chat_text out = {0};
    char expect[512];
    for (size_t i = 0; i < N(cases); i++) {
        render_builtin(cases[i].name, conv_open + 1, 1, true, NULL, NULL, NULL, &out, FX_OK);
        snprintf(expect, sizeof expect,
                 "<|im_start|>system\n%s<|im_end|>\n<|im_start|>user\nHello!<|im_end|>\n"
                 "<|im_start|>assistant\n",
                 cases[i].system);
        assert_string_equal(out.data, expect);
    }
    fx_chat_text_free(&out);
}

FX_TEST(chat_family_qwen3_thinking) {
    /* Qwen 3 writes an empty think block into the final assistant turn after the last user
     * message, drops the reasoning of earlier turns, and closes the block itself when
     * enable_thinking is false. */
    struct family_case fc = {"qwen3", NULL, NULL, CHATML_OPEN "<|im_start|>assistant\n",
                             CHATML_OPEN
                             "<|im_start|>assistant\n<think>\n\n</think>\n\n2+2 is 4.<|im_end|>\n"};
    check_family(&fc);

    struct fx_chat_text out = {0};
    render_builtin("qwen3", conv_open, N(conv_open), true, NULL, NULL,
                   "{\"enable_thinking\": false}", &out, FX_OK);
    assert_string_equal(out.data, CHATML_OPEN "<|im_start|>assistant\n<think>\n\n</think>\n\n");

    static const struct fx_chat_msg reasoned[] = {
        {"user", "2+2?"},
        {"assistant", "<think>\nAdd two and two.\n</think>\n\n4"},
        {"user", "3+3?"},
        {"assistant", "<think>\nAdd three and three.\n</think>\n\n6"},
    };
    render_builtin("qwen3", reasoned, N(reasoned), false, NULL, NULL, NULL, &out, FX_OK);
    assert_string_equal(out.data,
                        "<|im_start|>user\n2+2?<|im_end|>\n"
                        "<|im_start|>assistant\n4<|im_end|>\n"
                        "<|im_start|>user\n3+3?<|im_end|>\n"
                        "<|im_start|>assistant\n<think>\nAdd three and three.\n</think>\n\n6"
                        "<|im_end|>\n");
    fx_chat_text_free(&out);
}

#define LLAMA3_TURNS                                                                               \
    "<|start_header_id|>user<|end_header_id|>\n\nHello!<|eot_id|>"                                 \
    "<|start_header_id|>assistant<|end_header_id|>\n\nHi! How can I help?<|eot_id|>"               \
    "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>"
#define LLAMA3_GEN  "<|start_header_id|>assistant<|end_header_id|>\n\n"
#define LLAMA3_DONE LLAMA3_TURNS LLAMA3_GEN "2+2 is 4.<|eot_id|>"

FX_TEST(chat_family_llama3) {
    const char *sys3 = "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
                       "You are a helpful assistant.<|eot_id|>";
    struct family_case fc = {"llama3", "<|begin_of_text|>", "<|eot_id|>", NULL, NULL};
    char open[1024], done[1024];
    snprintf(open, sizeof open, "%s%s", sys3, LLAMA3_TURNS LLAMA3_GEN);
    snprintf(done, sizeof done, "%s%s", sys3, LLAMA3_DONE);
    fc.open_prompt = open;
    fc.done = done;
    check_family(&fc);
}

FX_TEST(chat_family_llama3_dated) {
    /* 3.1 (and 3.3) print a fixed date unless date_string is given; 3.2 asks strftime_now. */
    static const struct {
        const char *name, *date;
    } cases[] = {{"llama3.1", "26 Jul 2024"}, {"llama3.2", "01 Jan 2025"}};
    for (size_t i = 0; i < N(cases); i++) {
        char sys[512], open[1024], done[1024];
        snprintf(sys, sizeof sys,
                 "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
                 "Cutting Knowledge Date: December 2023\nToday Date: %s\n\n"
                 "You are a helpful assistant.<|eot_id|>",
                 cases[i].date);
        snprintf(open, sizeof open, "%s%s", sys, LLAMA3_TURNS LLAMA3_GEN);
        snprintf(done, sizeof done, "%s%s", sys, LLAMA3_DONE);
        struct family_case fc = {cases[i].name, "<|begin_of_text|>", "<|eot_id|>", open, done};
        check_family(&fc);
    }
    struct fx_chat_text out = {0};
    render_builtin("llama3.1", conv_open, 2, false, "<|begin_of_text|>", "<|eot_id|>",
                   "{\"date_string\": \"14 Feb 2025\"}", &out, FX_OK);
    assert_non_null(strstr(out.data, "Today Date: 14 Feb 2025\n\n"));
    fx_chat_text_free(&out);
}

FX_TEST(chat_family_llama2) {
    struct family_case fc = {
        "llama2", "<s>", "</s>",
        "<s>[INST] <<SYS>>\nYou are a helpful assistant.\n<</SYS>>\n\nHello! [/INST] Hi! How can "
        "I help? </s><s>[INST] What is 2+2? [/INST]",
        "<s>[INST] <<SYS>>\nYou are a helpful assistant.\n<</SYS>>\n\nHello! [/INST] Hi! How can "
        "I help? </s><s>[INST] What is 2+2? [/INST] 2+2 is 4. </s>"};
    check_family(&fc);
}

FX_TEST(chat_family_mistral) {
    static const struct family_case cases[] = {
        /* v1 (Mistral 7B v0.1/v0.2, Mixtral): the system prompt joins the first user turn. */
        {"mistral-v1", "<s>", "</s>",
         "<s> [INST] You are a helpful assistant.\n\nHello! [/INST] Hi! How can I help?</s> [INST] "
         "What is 2+2? [/INST]",
         "<s> [INST] You are a helpful assistant.\n\nHello! [/INST] Hi! How can I help?</s> [INST] "
         "What is 2+2? [/INST] 2+2 is 4.</s>"},
        /* v3 (v0.3): the system prompt joins the last user turn only if it is the last message,
         * so a finished conversation shows none. */
        {"mistral-v3", "<s>", "</s>",
         "<s>[INST] Hello![/INST] Hi! How can I help?</s>[INST] You are a helpful assistant.\n\n"
         "What is 2+2?[/INST]",
         "<s>[INST] Hello![/INST] Hi! How can I help?</s>[INST] What is 2+2?[/INST] 2+2 is 4.</s>"},
        /* v3-tekken (Nemo): the same without the spaces. */
        {"mistral-v3-tekken", "<s>", "</s>",
         "<s>[INST]Hello![/INST]Hi! How can I help?</s>[INST]You are a helpful assistant.\n\n"
         "What is 2+2?[/INST]",
         "<s>[INST]Hello![/INST]Hi! How can I help?</s>[INST]What is 2+2?[/INST]2+2 is 4.</s>"},
        {"mistral-v7", "<s>", "</s>",
         "<s>[SYSTEM_PROMPT] You are a helpful assistant.[/SYSTEM_PROMPT][INST] Hello![/INST] Hi! "
         "How can I help?</s>[INST] What is 2+2?[/INST]",
         "<s>[SYSTEM_PROMPT] You are a helpful assistant.[/SYSTEM_PROMPT][INST] Hello![/INST] Hi! "
         "How can I help?</s>[INST] What is 2+2?[/INST] 2+2 is 4.</s>"},
    };
    for (size_t i = 0; i < N(cases); i++)
        check_family(&cases[i]);
}

FX_TEST(chat_family_mistral_rejects_bad_order) {
    static const struct fx_chat_msg twice[] = {{"user", "a"}, {"user", "b"}};
    struct fx_chat_text out = {0};
    struct fx_chat_template *t;
    struct fx_error err = {0};
    assert_int_equal(fx_chat_template_builtin("mistral-v1", &t, &err), FX_OK);
    assert_int_equal(fx_chat_render(t, twice, 2, NULL, &out, &err), FX_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "conversation roles must alternate"));
    assert_non_null(strstr(err.msg, "line 11, column 13:"));
    assert_int_equal(out.len, 0);
    fx_chat_template_free(t);
    fx_chat_text_free(&out);
}

FX_TEST(chat_family_gemma) {
    /* Gemma 2 has no system role: its template refuses one, as transformers reports. */
    struct fx_chat_text out = {0};
    render_builtin("gemma", conv_open, N(conv_open), true, "<bos>", "<eos>", NULL, &out,
                   FX_ERR_INVALID_ARG);
    render_builtin("gemma", conv_done + 1, N(conv_done) - 1, false, "<bos>", "<eos>", NULL, &out,
                   FX_OK);
    assert_string_equal(out.data, "<bos><start_of_turn>user\nHello!<end_of_turn>\n"
                                  "<start_of_turn>model\nHi! How can I help?<end_of_turn>\n"
                                  "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n"
                                  "<start_of_turn>model\n2+2 is 4.<end_of_turn>\n");
    render_builtin("gemma", conv_open + 1, N(conv_open) - 1, true, "<bos>", "<eos>", NULL, &out,
                   FX_OK);
    assert_string_equal(out.data, "<bos><start_of_turn>user\nHello!<end_of_turn>\n"
                                  "<start_of_turn>model\nHi! How can I help?<end_of_turn>\n"
                                  "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n"
                                  "<start_of_turn>model\n");
    fx_chat_text_free(&out);

    /* Gemma 3 puts the system prompt in front of the first user turn. */
    struct family_case fc = {
        "gemma3", "<bos>", "<eos>",
        "<bos><start_of_turn>user\nYou are a helpful assistant.\n\nHello!<end_of_turn>\n"
        "<start_of_turn>model\nHi! How can I help?<end_of_turn>\n"
        "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n",
        "<bos><start_of_turn>user\nYou are a helpful assistant.\n\nHello!<end_of_turn>\n"
        "<start_of_turn>model\nHi! How can I help?<end_of_turn>\n"
        "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n"
        "<start_of_turn>model\n2+2 is 4.<end_of_turn>\n"};
    check_family(&fc);
}

FX_TEST(chat_family_phi3) {
    /* Without the generation prompt Phi-3 ends with the end-of-text token. */
    struct family_case fc = {
        "phi3", "<s>", "<|endoftext|>",
        "<|system|>\nYou are a helpful assistant.<|end|>\n<|user|>\nHello!<|end|>\n"
        "<|assistant|>\nHi! How can I help?<|end|>\n<|user|>\nWhat is 2+2?<|end|>\n"
        "<|assistant|>\n",
        "<|system|>\nYou are a helpful assistant.<|end|>\n<|user|>\nHello!<|end|>\n"
        "<|assistant|>\nHi! How can I help?<|end|>\n<|user|>\nWhat is 2+2?<|end|>\n"
        "<|assistant|>\n2+2 is 4.<|end|>\n<|endoftext|>"};
    check_family(&fc);
}

#define DS_BOS "<｜begin▁of▁sentence｜>"
#define DS_EOS "<｜end▁of▁sentence｜>"

FX_TEST(chat_family_deepseek) {
    static const struct family_case cases[] = {
        {"deepseek", DS_BOS, DS_EOS,
         DS_BOS
         "You are a helpful assistant.\n\nUser: Hello!\n\nAssistant: Hi! How can I help?" DS_EOS
         "User: What is 2+2?\n\nAssistant:",
         DS_BOS
         "You are a helpful assistant.\n\nUser: Hello!\n\nAssistant: Hi! How can I help?" DS_EOS
         "User: What is 2+2?\n\nAssistant: 2+2 is 4." DS_EOS},
        /* V2.5's template indents a {% set %} without "-": transformers keeps those 8 spaces in
         * front of everything when there is a system message, and so do we. */
        {"deepseek-v2.5", DS_BOS, DS_EOS,
         "        " DS_BOS
         "You are a helpful assistant.<｜User｜>Hello!<｜Assistant｜>Hi! How can I "
         "help?" DS_EOS "<｜User｜>What is 2+2?<｜Assistant｜>",
         "        " DS_BOS
         "You are a helpful assistant.<｜User｜>Hello!<｜Assistant｜>Hi! How can I "
         "help?" DS_EOS "<｜User｜>What is 2+2?<｜Assistant｜>2+2 is 4." DS_EOS},
        {"deepseek-r1", DS_BOS, DS_EOS,
         DS_BOS
         "You are a helpful assistant.<｜User｜>Hello!<｜Assistant｜>Hi! How can I help?" DS_EOS
         "<｜User｜>What is 2+2?<｜Assistant｜><think>\n",
         DS_BOS
         "You are a helpful assistant.<｜User｜>Hello!<｜Assistant｜>Hi! How can I help?" DS_EOS
         "<｜User｜>What is 2+2?<｜Assistant｜>2+2 is 4." DS_EOS},
    };
    for (size_t i = 0; i < N(cases); i++)
        check_family(&cases[i]);

    /* R1 drops the reasoning of earlier answers. */
    static const struct fx_chat_msg reasoned[] = {
        {"user", "2+2?"}, {"assistant", "<think>\nAdd them.\n</think>\n\n4"}, {"user", "3+3?"}};
    struct fx_chat_text out = {0};
    render_builtin("deepseek-r1", reasoned, N(reasoned), true, DS_BOS, DS_EOS, NULL, &out, FX_OK);
    assert_string_equal(out.data, DS_BOS "<｜User｜>2+2?<｜Assistant｜>\n\n4" DS_EOS
                                         "<｜User｜>3+3?<｜Assistant｜><think>\n");
    fx_chat_text_free(&out);
}

#define HARMONY_SYSTEM(effort)                                                                     \
    "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"       \
    "Knowledge cutoff: 2024-06\nCurrent date: 2025-01-01\n\nReasoning: " effort "\n\n"             \
    "# Valid channels: analysis, commentary, final. Channel must be included for every "           \
    "message.<|end|>"
#define HARMONY_TURNS                                                                              \
    "<|start|>developer<|message|># Instructions\n\nYou are a helpful assistant.\n\n<|end|>"       \
    "<|start|>user<|message|>Hello!<|end|>"                                                        \
    "<|start|>assistant<|channel|>final<|message|>Hi! How can I help?<|end|>"                      \
    "<|start|>user<|message|>What is 2+2?<|end|>"

FX_TEST(chat_family_gpt_oss) {
    /* Harmony: the system message carries the (injected) date and reasoning effort; the
     * conversation's system message becomes the developer message; a finished assistant turn
     * ends with <|return|> when no generation prompt follows. */
    struct family_case fc = {"gpt-oss", NULL, NULL,
                             HARMONY_SYSTEM("medium") HARMONY_TURNS "<|start|>assistant",
                             HARMONY_SYSTEM("medium") HARMONY_TURNS
                             "<|start|>assistant<|channel|>final<|message|>2+2 is 4.<|return|>"};
    check_family(&fc);
    struct fx_chat_text out = {0};
    render_builtin("gpt-oss", conv_open, N(conv_open), true, NULL, NULL,
                   "{\"reasoning_effort\": \"high\"}", &out, FX_OK);
    assert_string_equal(out.data, HARMONY_SYSTEM("high") HARMONY_TURNS "<|start|>assistant");
    fx_chat_text_free(&out);
}

/* ---- tools and JSON messages --------------------------------------------------------------- */

static const char tools_json[] =
    "{\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
    "\"description\": \"Get the weather\", \"parameters\": {\"type\": \"object\", "
    "\"properties\": {\"city\": {\"type\": \"string\", \"description\": \"City name\"}, "
    "\"days\": {\"type\": \"integer\"}}, \"required\": [\"city\"]}}}]}";

static const char tool_conv_json[] =
    "[{\"role\": \"system\", \"content\": \"Use tools.\"},"
    " {\"role\": \"user\", \"content\": \"Weather in Paris?\"},"
    " {\"role\": \"assistant\", \"tool_calls\": [{\"id\": \"call12345\","
    "  \"type\": \"function\", \"function\": {\"name\": \"get_weather\","
    "  \"arguments\": {\"city\": \"Paris\"}}}]},"
    " {\"role\": \"tool\", \"tool_call_id\": \"call12345\", \"content\": \"{\\\"temp\\\": 21}\"}]";

static void render_json(const char *name, const char *msgs, const char *vars,
                        struct fx_chat_text *out) {
    struct fx_chat_template *t;
    struct fx_error err = {0};
    assert_int_equal(fx_chat_template_builtin(name, &t, &err), FX_OK);
    struct fx_chat_params p;
    fx_chat_default_params(&p);
    p.vars_json = vars;
    p.now = NEW_YEAR_2025;
    p.bos_token = "<|begin_of_text|>";
    fx_status st = fx_chat_render_json(t, msgs, strlen(msgs), &p, out, &err);
    if (st != FX_OK)
        fail_msg("%s: %s", name, err.msg);
    fx_chat_template_free(t);
}

FX_TEST(chat_tools_qwen25) {
    /* Tools are listed with transformers' tojson (", " and ": " separators, keys in order);
     * a tool call and its result are rendered in Qwen's XML tags. */
    struct fx_chat_text out = {0};
    render_json("qwen2.5", tool_conv_json, tools_json, &out);
    assert_string_equal(
        out.data,
        "<|im_start|>system\nUse tools.\n\n# Tools\n\nYou may call one or more functions to assist "
        "with the user query.\n\nYou are provided with function signatures within <tools></tools> "
        "XML tags:\n<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
        "\"description\": \"Get the weather\", \"parameters\": {\"type\": \"object\", "
        "\"properties\": {\"city\": {\"type\": \"string\", \"description\": \"City name\"}, "
        "\"days\": {\"type\": \"integer\"}}, \"required\": [\"city\"]}}}\n</tools>\n\n"
        "For each function call, return a json object with function name and arguments within "
        "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
        "\"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n"
        "<|im_start|>user\nWeather in Paris?<|im_end|>\n"
        "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
        "{\"city\": \"Paris\"}}\n</tool_call><|im_end|>\n"
        "<|im_start|>user\n<tool_response>\n{\"temp\": 21}\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n");
    fx_chat_text_free(&out);
}

FX_TEST(chat_tools_llama31) {
    /* Llama 3.1 puts the tools, as tojson(indent=4), into the first user message. */
    struct fx_chat_text out = {0};
    render_json("llama3.1", "[{\"role\": \"user\", \"content\": \" Weather in Paris? \"}]",
                tools_json, &out);
    assert_string_equal(
        out.data,
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\n"
        "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nGiven the following functions, please "
        "respond with a JSON for a function call with its proper arguments that best answers the "
        "given prompt.\n\nRespond in the format {\"name\": function name, \"parameters\": "
        "dictionary of argument name and its value}.Do not use variables.\n\n{\n"
        "    \"type\": \"function\",\n    \"function\": {\n        \"name\": \"get_weather\",\n"
        "        \"description\": \"Get the weather\",\n        \"parameters\": {\n"
        "            \"type\": \"object\",\n            \"properties\": {\n"
        "                \"city\": {\n                    \"type\": \"string\",\n"
        "                    \"description\": \"City name\"\n                },\n"
        "                \"days\": {\n                    \"type\": \"integer\"\n"
        "                }\n            },\n            \"required\": [\n"
        "                \"city\"\n            ]\n        }\n    }\n}\n\n"
        "Weather in Paris?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
    fx_chat_text_free(&out);
}

FX_TEST(chat_tools_gpt_oss) {
    /* Harmony describes tools as a TypeScript namespace (macros, recursion, .items()) and
     * routes the call and its result through the commentary channel. */
    struct fx_chat_text out = {0};
    render_json("gpt-oss", tool_conv_json, tools_json, &out);
    assert_string_equal(
        out.data,
        "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
        "Knowledge cutoff: 2024-06\nCurrent date: 2025-01-01\n\nReasoning: medium\n\n"
        "# Valid channels: analysis, commentary, final. Channel must be included for every "
        "message.\nCalls to these tools must go to the commentary channel: 'functions'.<|end|>"
        "<|start|>developer<|message|># Instructions\n\nUse tools.\n\n# Tools\n\n## functions\n\n"
        "namespace functions {\n\n// Get the weather\ntype get_weather = (_: {\n// City name\n"
        "city: string,\ndays?: number,\n}) => any;\n\n} // namespace functions<|end|>"
        "<|start|>user<|message|>Weather in Paris?<|end|>"
        "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>"
        "{\"city\": \"Paris\"}<|call|>"
        "<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>"
        "\"{\\\"temp\\\": 21}\"<|end|><|start|>assistant");
    fx_chat_text_free(&out);
}

/* ---- the API around rendering -------------------------------------------------------------- */

FX_TEST(chat_builtins_all_parse) {
    size_t n = 0;
    for (; fx_chat_builtin_name(n); n++) {
        const char *name = fx_chat_builtin_name(n);
        for (size_t k = 0; k < n; k++)
            assert_string_not_equal(fx_chat_builtin_name(k), name);
        const char *src = fx_chat_builtin_source(name);
        assert_non_null(src);
        struct fx_chat_template *t;
        struct fx_error err = {0};
        if (fx_chat_template_create(src, strlen(src), &t, &err) != FX_OK)
            fail_msg("built-in %s does not parse: %s", name, err.msg);
        assert_string_equal(fx_chat_template_builtin_name(t), name);
        fx_chat_template_free(t);
    }
    assert_int_equal(n, 20);
    assert_null(fx_chat_builtin_source("no-such-family"));

    struct fx_chat_template *t = (struct fx_chat_template *)1;
    struct fx_error err = {0};
    assert_int_equal(fx_chat_template_builtin("llama9", &t, &err), FX_ERR_NOT_FOUND);
    assert_null(t);
    assert_non_null(strstr(err.msg, "'llama9'"));
    assert_non_null(strstr(err.msg, "gpt-oss"));

    /* A template that is not a built-in's text has no name. */
    assert_int_equal(fx_chat_template_create("{{ 1 }}", 7, &t, &err), FX_OK);
    assert_null(fx_chat_template_builtin_name(t));
    fx_chat_template_free(t);
    fx_chat_template_free(NULL);
}

FX_TEST(chat_render_json_and_vars_errors) {
    struct fx_chat_template *t;
    struct fx_error err = {0};
    struct fx_chat_text out = {0};
    assert_int_equal(fx_chat_template_builtin("chatml", &t, &err), FX_OK);
    const char *bad = "[{\"role\": \"user\", \"content\": \"x\"";
    assert_int_equal(fx_chat_render_json(t, bad, strlen(bad), NULL, &out, &err),
                     FX_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "invalid JSON"));
    assert_int_equal(fx_chat_render_json(t, "{}", 2, NULL, &out, &err), FX_ERR_INVALID_ARG);
    struct fx_chat_params p;
    fx_chat_default_params(&p);
    p.vars_json = "{\"messages\": []}";
    assert_int_equal(fx_chat_render_json(t, "[]", 2, &p, &out, &err), FX_ERR_INVALID_ARG);
    p.vars_json = "[1]";
    assert_int_equal(fx_chat_render_json(t, "[]", 2, &p, &out, &err), FX_ERR_INVALID_ARG);
    /* A message without a role is an error, not a crash. */
    struct fx_chat_msg m = {NULL, "x"};
    assert_int_equal(fx_chat_render(t, &m, 1, NULL, &out, &err), FX_ERR_INVALID_ARG);
    /* Content may be absent (None); ChatML then fails like Python's str + None. */
    m.role = "assistant";
    m.content = NULL;
    assert_int_equal(fx_chat_render(t, &m, 1, NULL, &out, &err), FX_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "'str' and 'NoneType'"));
    /* The empty conversation renders (only the generation prompt). */
    assert_int_equal(fx_chat_render(t, NULL, 0, NULL, &out, &err), FX_OK);
    assert_string_equal(out.data, "<|im_start|>assistant\n");
    fx_chat_template_free(t);
    fx_chat_text_free(&out);
}

/* Many threads render one template at once; every result equals the single-threaded one. */
struct render_job {
    const struct fx_chat_template *t;
    const char *expect;
    int failures;
};

static void *render_many(void *arg) {
    struct render_job *job = arg;
    struct fx_chat_text out = {0};
    struct fx_error err;
    struct fx_chat_params p;
    fx_chat_default_params(&p);
    p.now = NEW_YEAR_2025;
    for (int i = 0; i < 200; i++) {
        if (fx_chat_render(job->t, conv_open, N(conv_open), &p, &out, &err) != FX_OK ||
            strcmp(out.data, job->expect) != 0)
            job->failures++;
    }
    fx_chat_text_free(&out);
    return NULL;
}

FX_TEST(chat_render_is_thread_safe) {
    struct fx_chat_template *t;
    struct fx_error err = {0};
    assert_int_equal(fx_chat_template_builtin("gpt-oss", &t, &err), FX_OK);
    struct render_job jobs[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] =
            (struct render_job){t, HARMONY_SYSTEM("medium") HARMONY_TURNS "<|start|>assistant", 0};
        assert_int_equal(pthread_create(&th[i], NULL, render_many, &jobs[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(jobs[i].failures, 0);
    }
    fx_chat_template_free(t);
}
