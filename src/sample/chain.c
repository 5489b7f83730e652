/* The public sampler: validation, allocation, and the chain in llama.cpp's default order. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sample/sample.h"

#include "core/error.h"
#include "kernels/kernels.h"

/* The largest penalty window: far beyond any context length, small enough that the ring stays a
 * modest allocation when the value comes from a request. */
#define MAX_PENALTY_WINDOW (1 << 24)

struct fx_sampler {
    int32_t n_vocab;
    struct fx_sampler_params params; /* params.logit_bias points at `bias` */
    struct fx_logit_bias *bias;      /* [params.n_logit_bias], by token (sort_bias) */
    struct fx_penalties pen;
    struct fx_cands cands; /* [n_vocab] */
    struct fx_rng rng;
};

struct fx_sampler_params fx_sampler_default_params(void) {
    return (struct fx_sampler_params){
        .temperature = 0.8f,
        .top_k = 40,
        .top_p = 0.95f,
        .min_p = 0.05f,
        .penalty_last_n = 64,
        .repeat_penalty = 1.0f,
        .frequency_penalty = 0.0f,
        .presence_penalty = 0.0f,
        .seed = 0,
    };
}

static fx_status check_params(int32_t n_vocab, const struct fx_sampler_params *p,
                              struct fx_error *err) {
#define BAD(...) fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET, __VA_ARGS__)
    if (n_vocab <= 0)
        return BAD("sampler: vocabulary size %d must be positive", (int)n_vocab);
    /* Written so that NaN fails every range check. */
    if (!(isfinite(p->temperature) && p->temperature >= 0.0f))
        return BAD("sampler: temperature %g must be a finite number >= 0", p->temperature);
    if (!(p->top_p >= 0.0f && p->top_p <= 1.0f))
        return BAD("sampler: top_p %g must be in [0, 1]", p->top_p);
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return BAD("sampler: min_p %g must be in [0, 1]", p->min_p);
    if (p->penalty_last_n < 0 || p->penalty_last_n > MAX_PENALTY_WINDOW)
        return BAD("sampler: penalty_last_n %d must be in [0, %d]", (int)p->penalty_last_n,
                   MAX_PENALTY_WINDOW);
    if (!(isfinite(p->repeat_penalty) && p->repeat_penalty > 0.0f))
        return BAD("sampler: repeat_penalty %g must be a finite number > 0", p->repeat_penalty);
    if (!isfinite(p->frequency_penalty))
        return BAD("sampler: frequency_penalty %g must be finite", p->frequency_penalty);
    if (!isfinite(p->presence_penalty))
        return BAD("sampler: presence_penalty %g must be finite", p->presence_penalty);
    if (p->n_logit_bias > 0 && !p->logit_bias)
        return BAD("sampler: %zu logit bias entries but no array", p->n_logit_bias);
    for (size_t i = 0; i < p->n_logit_bias; i++) {
        const struct fx_logit_bias *b = &p->logit_bias[i];
        if (b->token < 0 || b->token >= n_vocab)
            return BAD("sampler: logit bias %zu: token %d is outside the vocabulary [0, %d)", i,
                       (int)b->token, (int)n_vocab);
        if (!(isfinite(b->bias) || b->bias == -INFINITY))
            return BAD("sampler: logit bias %zu: bias %g for token %d must be finite or -inf", i,
                       b->bias, (int)b->token);
    }
    return FX_OK;
#undef BAD
}

struct bias_entry {
    struct fx_logit_bias b;
    size_t at; /* its place in the request */
};

static int bias_order(const void *x, const void *y) {
    const struct bias_entry *a = x, *b = y;
    if (a->b.token != b->b.token)
        return a->b.token < b->b.token ? -1 : 1;
    return a->at < b->at ? -1 : a->at > b->at;
}

/* Sorts bias [n] by token, each token's entries kept in the order given. The chain adds a
 * token's biases in that order, so its result does not change; the greedy pass needs the biased
 * tokens in id order. False when out of memory. */
static bool sort_bias(struct fx_logit_bias *bias, size_t n) {
    struct bias_entry *e = malloc(n * sizeof *e);
    if (!e)
        return false;
    for (size_t i = 0; i < n; i++)
        e[i] = (struct bias_entry){bias[i], i};
    qsort(e, n, sizeof *e, bias_order);
    for (size_t i = 0; i < n; i++)
        bias[i] = e[i].b;
    free(e);
    return true;
}

fx_status fx_sampler_create(int32_t n_vocab, const struct fx_sampler_params *params,
                            struct fx_sampler **out, struct fx_error *err) {
    *out = NULL;
    fx_status st = check_params(n_vocab, params, err);
    if (st != FX_OK)
        return st;
    struct fx_sampler *s = calloc(1, sizeof *s);
    if (!s)
        goto nomem;
    s->n_vocab = n_vocab;
    s->params = *params;
    if (params->n_logit_bias > 0) {
        s->bias = calloc(params->n_logit_bias, sizeof *s->bias);
        if (!s->bias)
            goto nomem;
        memcpy(s->bias, params->logit_bias, params->n_logit_bias * sizeof *s->bias);
        if (!sort_bias(s->bias, params->n_logit_bias))
            goto nomem;
    }
    s->params.logit_bias = s->bias;
    s->cands.data = malloc((size_t)n_vocab * sizeof *s->cands.data);
    s->cands.w = malloc((size_t)n_vocab * sizeof *s->cands.w);
    if (!s->cands.data || !s->cands.w)
        goto nomem;
    if (!fx_penalties_init(&s->pen, n_vocab, params->penalty_last_n, params->repeat_penalty,
                           params->frequency_penalty, params->presence_penalty))
        goto nomem;
    fx_rng_seed(&s->rng, params->seed);
    *out = s;
    return FX_OK;
nomem:
    fx_sampler_free(s);
    return fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET,
                        "sampler for a vocabulary of %d: out of memory", (int)n_vocab);
}

void fx_sampler_free(struct fx_sampler *s) {
    if (!s)
        return;
    fx_penalties_free(&s->pen);
    free(s->cands.data);
    free(s->cands.w);
    free(s->bias);
    free(s);
}

fx_status fx_sampler_candidates(struct fx_sampler *s, const float *logits,
                                const struct fx_cands **out, struct fx_error *err) {
    const struct fx_sampler_params *p = &s->params;
    struct fx_cands *c = &s->cands;
    fx_cands_from_logits(c, logits, s->n_vocab);
    fx_sample_logit_bias(c, s->bias, p->n_logit_bias);
    fx_sample_penalties(&s->pen, c);
    /* Greedy needs no truncation: each of them keeps the best candidate. */
    if (p->temperature > 0.0f) {
        fx_sample_top_k(c, p->top_k);
        fx_sample_top_p(c, p->top_p);
        fx_sample_min_p(c, p->min_p);
    }
    fx_sample_temperature(c, p->temperature);
    if (c->data[fx_cands_best(c)].logit == -INFINITY)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "sampler: no token is possible (every logit is -inf or NaN after "
                            "logit bias and penalties)");
    *out = c;
    return FX_OK;
}

/* Greedy decoding without an active penalty: the chain's choice is the first largest logit
 * after the logit bias (NaN never wins, as in fx_cands_from_logits), found with the kernels'
 * argmax instead of building the candidates (which cost about 0.1 ms a row for 49,152 tokens:
 * the server's ignore_eos is a bias). The argmax runs over the stretches between the biased
 * tokens, in id order, so the first largest of the first stretch that has it wins; the biased
 * tokens are then compared with their biases added as the chain adds them. False where no token
 * is above -inf: the chain then reports it. */
static bool plain_greedy(const struct fx_sampler *s, const float *logits, fx_token *out) {
    if (s->params.temperature > 0.0f || s->pen.ring)
        return false;
    int64_t (*argmax)(const float *x, int64_t n) = fx_kernels()->argmax;
    const struct fx_logit_bias *bias = s->bias;
    size_t n_bias = s->params.n_logit_bias;
    float best = -INFINITY;
    int32_t best_id = -1;
    int32_t from = 0;
    for (size_t i = 0; i <= n_bias; i++) {
        int32_t to = i < n_bias ? bias[i].token : s->n_vocab;
        if (to > from) {
            int32_t j = from + (int32_t)argmax(logits + from, to - from);
            if (logits[j] > best) {
                best = logits[j];
                best_id = j;
            }
        }
        if (i < n_bias)
            from = bias[i].token + 1;
    }
    for (size_t i = 0; i < n_bias;) {
        fx_token t = bias[i].token;
        float v = isnan(logits[t]) ? -INFINITY : logits[t];
        for (; i < n_bias && bias[i].token == t; i++)
            v += bias[i].bias;
        if (v > best || (v == best && v > -INFINITY && t < best_id)) {
            best = v;
            best_id = t;
        }
    }
    *out = best_id;
    return best_id >= 0;
}

fx_status fx_sampler_sample(struct fx_sampler *s, const float *logits, fx_token *out,
                            struct fx_error *err) {
    if (plain_greedy(s, logits, out))
        return FX_OK;
    const struct fx_cands *c;
    fx_status st = fx_sampler_candidates(s, logits, &c, err);
    if (st != FX_OK)
        return st;
    /* Greedy draws no random number; every other sample draws exactly one, so the generator's
     * position depends only on how many tokens were sampled. */
    int32_t i = s->params.temperature > 0.0f ? fx_sample_draw(c, &s->rng) : 0;
    *out = c->data[i].id;
    return FX_OK;
}

fx_status fx_sampler_accept(struct fx_sampler *s, fx_token token, struct fx_error *err) {
    if (token < 0 || token >= s->n_vocab)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "sampler: token %d is outside the vocabulary [0, %d)", (int)token,
                            (int)s->n_vocab);
    fx_penalties_accept(&s->pen, token);
    return FX_OK;
}

void fx_sampler_reset(struct fx_sampler *s) {
    fx_penalties_clear(&s->pen);
    fx_rng_seed(&s->rng, s->params.seed);
}

/* ---- speculative decoding ------------------------------------------------------------------- */

/* The chain's candidates and their probabilities w[i] / *total (the draw's own weights). */
static fx_status chain_weights(struct fx_sampler *s, const float *logits,
                               const struct fx_cands **out, double *total, struct fx_error *err) {
    const struct fx_cands *c;
    fx_status st = fx_sampler_candidates(s, logits, &c, err);
    if (st != FX_OK)
        return st;
    float max = c->data[fx_cands_best(c)].logit;
    double sum = 0;
    for (int32_t i = 0; i < c->n; i++) {
        c->w[i] = fx_cand_weight(c->data[i].logit, max);
        sum += c->w[i];
    }
    *out = c;
    *total = sum;
    return FX_OK;
}

fx_status fx_sampler_dist(struct fx_sampler *s, const float *logits, fx_token *ids, float *probs,
                          int32_t *n, struct fx_error *err) {
    const struct fx_cands *c;
    double total;
    fx_status st = chain_weights(s, logits, &c, &total, err);
    if (st != FX_OK)
        return st;
    for (int32_t i = 0; i < c->n; i++) {
        ids[i] = c->data[i].id;
        probs[i] = (float)(c->w[i] / total);
    }
    *n = c->n;
    return FX_OK;
}

/* The general rule, for a drafter that drew `draft` from q: accept with probability
 * min(1, p(x) / q(x)), else draw from the normalised max(0, p - q). Exact in distribution: the
 * kept token is distributed as p. */
static fx_status sample_draft_q(struct fx_sampler *s, const float *logits, fx_token draft,
                                const float *q, fx_token *out, bool *accepted,
                                struct fx_error *err) {
    const struct fx_cands *c;
    double total;
    fx_status st = chain_weights(s, logits, &c, &total, err);
    if (st != FX_OK)
        return st;
    double px = 0;
    for (int32_t i = 0; i < c->n; i++)
        if (c->data[i].id == draft)
            px = c->w[i] / total;
    double qx = q[draft];
    if (fx_rng_uniform(&s->rng) * qx < px) {
        *out = draft;
        *accepted = true;
        return FX_OK;
    }
    /* The residual lives on the candidates: a token outside them has p = 0. */
    double rtotal = 0;
    for (int32_t i = 0; i < c->n; i++) {
        double r = c->w[i] / total - (double)q[c->data[i].id];
        rtotal += r > 0 ? r : 0;
    }
    double u = fx_rng_uniform(&s->rng) * rtotal, cum = 0;
    int32_t pick = fx_cands_best(c);
    for (int32_t i = 0; i < c->n && rtotal > 0; i++) {
        double r = c->w[i] / total - (double)q[c->data[i].id];
        if (r <= 0)
            continue;
        cum += r;
        pick = i;
        if (u < cum)
            break;
    }
    *out = c->data[pick].id;
    *accepted = *out == draft;
    return FX_OK;
}

fx_status fx_sampler_sample_draft(struct fx_sampler *s, const float *logits, fx_token draft,
                                  const float *q, fx_token *out, bool *accepted,
                                  struct fx_error *err) {
    if (draft < 0 || draft >= s->n_vocab)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "sampler: draft token %d is outside the vocabulary [0, %d)", (int)draft,
                            (int)s->n_vocab);
    if (q && s->params.temperature > 0.0f)
        return sample_draft_q(s, logits, draft, q, out, accepted, err);
    /* A point mass on the draft (or greedy decoding, where p is one): accepting the draft with
     * probability p(x), and otherwise drawing from p without x, is drawing from p and comparing. */
    fx_status st = fx_sampler_sample(s, logits, out, err);
    if (st == FX_OK)
        *accepted = *out == draft;
    return st;
}
