/* The server's request schema (src/server/openai.c) without a server: fields read with their
 * defaults, every wrong type or range a 400 naming the field, malformed JSON with its offset. */
#include "fx_test.h"

#include <math.h>
#include <string.h>

#include "server/openai.h"

static const struct fx_oai_limits lim = {.n_vocab = 512, .n_max = 4};

static bool parse(enum fx_oai_endpoint ep, const char *body, struct fx_oai_request *r,
                  struct fx_oai_error *err) {
    struct fx_sampler_params d = fx_sampler_default_params();
    return fx_oai_parse(ep, body, strlen(body), &lim, &d, r, err);
}

/* body must fail with a 400 whose param is `param` and whose message contains `needle`. */
static void refused(enum fx_oai_endpoint ep, const char *body, const char *param,
                    const char *needle) {
    struct fx_oai_request r;
    struct fx_oai_error err;
    if (parse(ep, body, &r, &err)) {
        fx_oai_request_free(&r);
        fail_msg("accepted: %s", body);
    }
    assert_int_equal(err.status, 400);
    if (strcmp(err.param, param) != 0 || !strstr(err.message, needle))
        fail_msg("%s: param '%s', message '%s' (want '%s', '%s')", body, err.param, err.message,
                 param, needle);
}

FX_TEST(serve_parse_completion_fields) {
    struct fx_oai_request r;
    struct fx_oai_error err;
    assert_true(parse(FX_OAI_COMPLETIONS,
                      "{\"model\": \"m\", \"prompt\": \"Once\", \"max_tokens\": 16, "
                      "\"temperature\": 0.5, \"top_p\": 0.9, \"top_k\": 5, \"min_p\": 0.1, "
                      "\"presence_penalty\": 0.5, \"frequency_penalty\": -0.5, "
                      "\"repeat_penalty\": 1.1, \"seed\": 42, \"stop\": [\"a\", \"\", \"bc\"], "
                      "\"n\": 2, \"logprobs\": 3, \"logit_bias\": {\"5\": -100, \"7\": 2.5}, "
                      "\"stream\": true, \"stream_options\": {\"include_usage\": true}, "
                      "\"ignore_eos\": true, \"whatever\": [1, {\"x\": null}], \"echo\": null}",
                      &r, &err));
    assert_string_equal(r.model, "m");
    assert_int_equal(r.n_input, 1);
    assert_string_equal(r.input[0].text, "Once");
    assert_int_equal(r.max_tokens, 16);
    assert_true(r.sampler.temperature == 0.5f && r.sampler.top_p == 0.9f && r.sampler.top_k == 5);
    assert_true(r.sampler.min_p == 0.1f && r.sampler.repeat_penalty == 1.1f);
    assert_true(r.sampler.presence_penalty == 0.5f && r.sampler.frequency_penalty == -0.5f);
    assert_true(r.seed_given && r.sampler.seed == 42);
    assert_int_equal(r.n_stops, 2); /* the empty stop string is dropped */
    assert_string_equal(r.stops[1], "bc");
    assert_int_equal(r.n, 2);
    assert_int_equal(r.logprobs, 3);
    assert_int_equal(r.n_bias, 2);
    assert_true(r.sampler.logit_bias == r.bias && r.sampler.n_logit_bias == 2);
    assert_true(r.bias[0].token == 5 && r.bias[0].bias == -100);
    assert_true(r.stream && r.include_usage && r.ignore_eos);
    fx_oai_request_free(&r);

    /* Defaults, token prompts, null as "not given", llama.cpp's bias pairs. */
    assert_true(parse(FX_OAI_COMPLETIONS,
                      "{\"prompt\": [1, 2, 3], \"max_tokens\": null, \"seed\": -1, "
                      "\"logit_bias\": [[9, false]]}",
                      &r, &err));
    assert_true(r.input[0].is_ids && r.input[0].n_ids == 3 && r.input[0].ids[2] == 3);
    assert_int_equal(r.max_tokens, -1);
    assert_int_equal(r.n, 1);
    assert_int_equal(r.logprobs, -1);
    assert_false(r.seed_given);
    assert_true(r.bias[0].token == 9 && isinf(r.bias[0].bias));
    assert_true(r.sampler.temperature == fx_sampler_default_params().temperature);
    fx_oai_request_free(&r);
}

FX_TEST(serve_parse_chat_embeddings_tokenize) {
    struct fx_oai_request r;
    struct fx_oai_error err;
    assert_true(parse(FX_OAI_CHAT,
                      "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], "
                      "\"max_completion_tokens\": 4, \"logprobs\": true, \"top_logprobs\": 2, "
                      "\"chat_template_kwargs\": {\"enable_thinking\": false}}",
                      &r, &err));
    assert_string_equal(r.messages_json, "[{\"role\":\"user\",\"content\":\"hi\"}]");
    assert_string_equal(r.template_vars, "{\"enable_thinking\":false}");
    assert_int_equal(r.max_tokens, 4);
    assert_int_equal(r.logprobs, 2);
    fx_oai_request_free(&r);
    assert_true(parse(FX_OAI_EMBEDDINGS,
                      "{\"input\": [\"a\", [1, 2]], \"encoding_format\": \"base64\", "
                      "\"dimensions\": 8}",
                      &r, &err));
    assert_int_equal(r.n_input, 2);
    assert_true(!r.input[0].is_ids && r.input[1].is_ids && r.input[1].n_ids == 2);
    assert_true(r.base64 && r.dimensions == 8);
    fx_oai_request_free(&r);
    assert_true(parse(FX_OAI_EMBEDDINGS, "{\"input\": [5, 6, 7]}", &r, &err));
    assert_true(r.n_input == 1 && r.input[0].is_ids && r.input[0].n_ids == 3);
    fx_oai_request_free(&r);
    assert_true(parse(FX_OAI_TOKENIZE, "{\"content\": \"x\", \"add_special\": true}", &r, &err));
    assert_true(r.add_special && r.parse_special && !r.with_pieces);
    fx_oai_request_free(&r);
    assert_true(parse(FX_OAI_DETOKENIZE, "{\"tokens\": [1, 2]}", &r, &err));
    assert_int_equal(r.input[0].n_ids, 2);
    fx_oai_request_free(&r);
}

FX_TEST(serve_parse_refuses_bad_fields) {
    refused(FX_OAI_COMPLETIONS, "{\"prompt\": \"x\",, }", "", "invalid JSON at byte 15");
    refused(FX_OAI_COMPLETIONS, "{\"prompt\": \"x\"", "", "invalid JSON at byte");
    refused(FX_OAI_COMPLETIONS, "\"just a string\"", "", "JSON object");
    refused(FX_OAI_COMPLETIONS, "{}", "prompt", "required");
    refused(FX_OAI_COMPLETIONS, "{\"prompt\": [\"a\", \"b\"]}", "prompt", "one prompt");
    refused(FX_OAI_COMPLETIONS, "{\"prompt\": [1, 512]}", "prompt", "not in the vocabulary");
    refused(FX_OAI_COMPLETIONS, "{\"prompt\": \"x\", \"max_tokens\": 0}", "max_tokens",
            "out of range");
    refused(FX_OAI_COMPLETIONS, "{\"prompt\": \"x\", \"max_tokens\": 1.5}", "max_tokens",
            "an integer");
    refused(FX_OAI_COMPLETIONS, "{\"prompt\": \"x\", \"temperature\": \"0\"}", "temperature",
            "a number");
    refused(FX_OAI_COMPLETIONS, "{\"prompt\": \"x\", \"temperature\": 2.5}", "temperature",
            "out of range");
    refused(FX_OAI_COMPLETIONS, "{\"prompt\": \"x\", \"n\": 5}", "n", "out of range");
    refused(FX_OAI_COMPLETIONS, "{\"prompt\": \"x\", \"seed\": \"1\"}", "seed", "an integer");
    refused(FX_OAI_COMPLETIONS, "{\"prompt\": \"x\", \"stop\": {}}", "stop", "a string");
    refused(FX_OAI_COMPLETIONS, "{\"prompt\": \"x\", \"logit_bias\": {\"1x\": 1}}", "logit_bias",
            "not a token id");
    refused(FX_OAI_COMPLETIONS, "{\"prompt\": \"x\", \"logit_bias\": {\"600\": 1}}", "logit_bias",
            "not in the vocabulary");
    refused(FX_OAI_COMPLETIONS, "{\"prompt\": \"x\", \"logprobs\": 21}", "logprobs",
            "out of range");
    refused(FX_OAI_COMPLETIONS, "{\"prompt\": \"x\", \"stream_options\": {\"include_usage\": 1}}",
            "stream_options.include_usage", "a boolean");
    refused(FX_OAI_COMPLETIONS, "{\"prompt\": \"x\", \"model\": 3}", "model", "a string");
    refused(FX_OAI_CHAT, "{\"messages\": []}", "messages", "empty");
    refused(FX_OAI_CHAT, "{\"messages\": [{\"role\": 1}]}", "messages[0].role", "a string");
    refused(FX_OAI_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": 5}]}",
            "messages[0].content", "null");
    refused(FX_OAI_CHAT, "{\"messages\": [{\"role\": \"user\"}], \"top_logprobs\": 30}",
            "top_logprobs", "out of range");
    refused(FX_OAI_EMBEDDINGS, "{\"input\": [{}]}", "input[0]", "a string");
    refused(FX_OAI_EMBEDDINGS, "{\"input\": \"x\", \"encoding_format\": \"hex\"}",
            "encoding_format", "base64");
    refused(FX_OAI_TOKENIZE, "{\"content\": 1}", "content", "a string");
    refused(FX_OAI_DETOKENIZE, "{\"tokens\": [\"a\"]}", "tokens", "token id");
}
