/* libFuzzer target for the server's request parsing and validation (src/server/openai.c): the
 * first byte picks the endpoint (completions, chat, embeddings, tokenize, detokenize), the rest is
 * the JSON body. Whatever the bytes, parsing must return a request or a 400-style error naming a
 * field, never crash or leak; a parsed request must satisfy what the server relies on (token ids
 * in the vocabulary, n within limits, non-empty stop strings, inputs present). The error message
 * and the body also go through the lossy JSON string used for responses. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "server/openai.h"
#include "server/server_impl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(bool cond) {
    if (!cond)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > (256 << 10))
        return 0;
    enum fx_oai_endpoint ep = (enum fx_oai_endpoint)(data[0] % 5);
    const struct fx_oai_limits lim = {.n_vocab = 512, .n_max = 4};
    struct fx_sampler_params defaults = fx_sampler_default_params();
    struct fx_oai_request r;
    struct fx_oai_error err;
    if (fx_oai_parse(ep, (const char *)data + 1, size - 1, &lim, &defaults, &r, &err)) {
        check(r.n >= 1 && r.n <= lim.n_max);
        check(r.max_tokens == -1 || r.max_tokens >= 1);
        check(r.logprobs >= -1 && r.logprobs <= 20);
        check(ep == FX_OAI_CHAT ? r.messages_json != NULL : r.n_input >= 1);
        for (size_t i = 0; i < r.n_input; i++)
            for (int32_t k = 0; k < r.input[i].n_ids; k++)
                check(r.input[i].ids[k] >= 0 && r.input[i].ids[k] < lim.n_vocab);
        for (size_t i = 0; i < r.n_stops; i++)
            check(r.stops[i][0] != '\0');
        for (size_t i = 0; i < r.n_bias; i++)
            check(r.bias[i].token >= 0 && r.bias[i].token < lim.n_vocab);
        /* What a valid request's sampler parameters give the sampler must be accepted by it. */
        struct fx_sampler *s = NULL;
        check(fx_sampler_create(lim.n_vocab, &r.sampler, &s, NULL) == FX_OK);
        fx_sampler_free(s);
        fx_oai_request_free(&r);
    } else {
        check(err.status == 400 || err.status == 500);
        json_t *j = fx_json_string_lossy(err.message, strlen(err.message));
        check(j != NULL);
        json_decref(j);
    }
    json_t *j = fx_json_string_lossy((const char *)data, size);
    check(j != NULL);
    json_decref(j);
    return 0;
}
