/* Logit bias, as the OpenAI API's logit_bias and llama.cpp's --logit-bias define it. */
#include "sample/sample.h"

void fx_sample_logit_bias(struct fx_cands *c, const struct fx_logit_bias *bias, size_t n) {
    for (size_t i = 0; i < n; i++)
        c->data[bias[i].token].logit += bias[i].bias;
}
