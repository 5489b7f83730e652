/* sample/: each sampler against a reference computed here in double precision, the chain as a
 * whole, the distribution of seeded draws, and the stopper. */
#include "fx_test.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "ferrox.h"
#include "sample/sample.h"

/* ---- helpers -------------------------------------------------------------------------------- */

struct ref_tok {
    double logit;
    int id;
};

static int ref_order(const void *a, const void *b) {
    const struct ref_tok *x = a, *y = b;
    if (x->logit != y->logit)
        return x->logit > y->logit ? -1 : 1;
    return x->id - y->id;
}

/* Random logits; with `coarse`, rounded to quarters so that many are tied. */
static void random_logits(struct fx_test_rng *r, float *l, int n, bool coarse) {
    for (int i = 0; i < n; i++) {
        double v = 3.0 * fx_test_rng_normal(r);
        l[i] = (float)(coarse ? round(v * 4) / 4 : v);
    }
}

static struct fx_cands cands_alloc(int n) {
    struct fx_cands c = {0};
    c.data = calloc((size_t)n, sizeof *c.data);
    c.w = calloc((size_t)n, sizeof *c.w);
    assert_non_null(c.data);
    assert_non_null(c.w);
    return c;
}

static void cands_free(struct fx_cands *c) {
    free(c->data);
    free(c->w);
}

/* Reference candidates from logits, best first. */
static struct ref_tok *ref_sorted(const float *l, int n) {
    struct ref_tok *t = calloc((size_t)n, sizeof *t);
    assert_non_null(t);
    for (int i = 0; i < n; i++)
        t[i] = (struct ref_tok){l[i], i};
    qsort(t, (size_t)n, sizeof *t, ref_order);
    return t;
}

static int cmp_int(const void *a, const void *b) {
    return *(const int *)a - *(const int *)b;
}

/* The candidate ids, sorted, into ids [c->n]. */
static void cand_ids(const struct fx_cands *c, int *ids) {
    for (int i = 0; i < c->n; i++)
        ids[i] = c->data[i].id;
    qsort(ids, (size_t)c->n, sizeof *ids, cmp_int);
}

static struct fx_sampler *make_sampler(int n_vocab, const struct fx_sampler_params *p) {
    struct fx_sampler *s = NULL;
    struct fx_error err = {0};
    if (fx_sampler_create(n_vocab, p, &s, &err) != FX_OK)
        fail_msg("fx_sampler_create: %s", err.msg);
    return s;
}

/* Parameters that switch every step off; tests turn on what they check. */
static struct fx_sampler_params neutral_params(void) {
    struct fx_sampler_params p = fx_sampler_default_params();
    p.temperature = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    return p;
}

/* ---- greedy --------------------------------------------------------------------------------- */

FX_TEST(sample_greedy_is_argmax_with_ties_to_lowest_id) {
    struct fx_test_rng r = {1};
    const int n = 3000;
    float *l = calloc(n, sizeof *l);
    assert_non_null(l);
    struct fx_sampler_params p = fx_sampler_default_params();
    p.temperature = 0.0f;
    struct fx_sampler *s = make_sampler(n, &p);
    for (int trial = 0; trial < 50; trial++) {
        random_logits(&r, l, n, true);
        /* Plant ties for the maximum at a few random places. */
        float top = 100.0f;
        int lowest = n;
        for (int k = 0; k < 1 + trial % 4; k++) {
            int at = (int)(fx_test_rng_u64(&r) % n);
            l[at] = top;
            lowest = at < lowest ? at : lowest;
        }
        fx_token got = -1;
        assert_int_equal(fx_sampler_sample(s, l, &got, NULL), FX_OK);
        assert_int_equal(got, lowest);
    }
    fx_sampler_free(s);
    free(l);
}

FX_TEST(sample_greedy_skips_nan_and_fails_without_a_possible_token) {
    /* 11 tokens, fewer than a vector of the argmax's: its tail alone. */
    const int n = 11;
    struct fx_sampler_params p = fx_sampler_default_params();
    p.temperature = 0.0f;
    struct fx_sampler *s = make_sampler(n, &p);
    fx_token got = -1;
    /* NaN never wins, wherever it is; a tie goes to the lowest id across lanes and the tail. */
    float a[11] = {NAN, -1.0f, 1.0f, NAN, 2.0f, -INFINITY, 1.0f, NAN, 0.0f, 2.0f, 2.0f};
    assert_int_equal(fx_sampler_sample(s, a, &got, NULL), FX_OK);
    assert_int_equal(got, 4);
    float b[11] = {0.0f, 1.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 3.0f, 3.0f};
    assert_int_equal(fx_sampler_sample(s, b, &got, NULL), FX_OK);
    assert_int_equal(got, 9);
    /* +inf wins, the first of them. */
    float c[11] = {-INFINITY, NAN, 5.0f, 3.0f, 1.0f, NAN, 0.0f, 1.0f, INFINITY, 4.0f, INFINITY};
    assert_int_equal(fx_sampler_sample(s, c, &got, NULL), FX_OK);
    assert_int_equal(got, 8);
    /* Only NaN and -inf: no token is possible, an error as with any other sampler. */
    float d[11] = {NAN, -INFINITY, NAN, NAN, -INFINITY, NAN, NAN, -INFINITY, NAN, NAN, -INFINITY};
    struct fx_error err = {0};
    assert_int_equal(fx_sampler_sample(s, d, &got, &err), FX_ERR_INVALID_ARG);
    fx_sampler_free(s);
}

FX_TEST(sample_greedy_with_logit_bias_matches_the_chain) {
    /* The greedy pass skips the biased tokens and compares them afterwards; the chain adds the
     * biases to its candidates. Both must pick the same token: checked against a reference here
     * and against the chain's own candidates, with quarter-valued logits and biases (exact in
     * float, so ties are real), NaN, bans on the best token, boosts, a token listed twice and
     * biased tokens at both ends of the vocabulary. */
    struct fx_test_rng r = {11};
    const int n = 203; /* not a multiple of 16: the argmax's stretches end in tails */
    float l[203];
    for (int trial = 0; trial < 400; trial++) {
        random_logits(&r, l, n, true);
        for (int k = 0; k < 3; k++)
            l[fx_test_rng_u64(&r) % n] = NAN;
        struct fx_logit_bias bias[6];
        size_t nb = 1 + fx_test_rng_u64(&r) % 6;
        for (size_t b = 0; b < nb; b++) {
            uint64_t kind = fx_test_rng_u64(&r) % 4;
            fx_token t = (fx_token)(fx_test_rng_u64(&r) % n);
            if (b == 0)
                t = trial % 3 == 0 ? 0 : trial % 3 == 1 ? n - 1 : t;
            if (b == 1 && trial % 5 == 0)
                t = bias[0].token; /* one token twice */
            float v = kind == 0 ? -INFINITY : (float)((int)(fx_test_rng_u64(&r) % 41) - 20) / 4;
            bias[b] = (struct fx_logit_bias){t, v};
        }
        /* The reference: each token's logit (NaN as -inf) plus its biases, the first largest. */
        double want_v = -INFINITY;
        int want = -1;
        for (int i = 0; i < n; i++) {
            double x = isnan(l[i]) ? -INFINITY : l[i];
            for (size_t b = 0; b < nb; b++)
                if (bias[b].token == i)
                    x += bias[b].bias;
            if (x > want_v) {
                want_v = x;
                want = i;
            }
        }
        if (trial % 7 == 0) { /* a biased token tied with the best unbiased one */
            int other = -1;
            for (int i = 0; i < n && other < 0; i++) {
                bool biased = false;
                for (size_t b = 0; b < nb; b++)
                    biased = biased || bias[b].token == i;
                if (!biased && i != want)
                    other = i;
            }
            if (other >= 0 && want_v > -INFINITY) {
                l[other] = (float)want_v;
                want = other < want ? other : want;
            }
        }
        struct fx_sampler_params p = neutral_params();
        p.temperature = 0.0f;
        p.logit_bias = bias;
        p.n_logit_bias = nb;
        struct fx_sampler *s = make_sampler(n, &p);
        fx_token got = -1;
        if (want < 0) {
            struct fx_error err = {0};
            assert_int_equal(fx_sampler_sample(s, l, &got, &err), FX_ERR_INVALID_ARG);
        } else {
            assert_int_equal(fx_sampler_sample(s, l, &got, NULL), FX_OK);
            assert_int_equal(got, want);
            const struct fx_cands *c;
            assert_int_equal(fx_sampler_candidates(s, l, &c, NULL), FX_OK);
            assert_int_equal(c->data[0].id, want);
        }
        fx_sampler_free(s);
    }
    /* Every token banned but one, whose logit is -inf: no token is possible. */
    float flat[4] = {1, 2, -INFINITY, 3};
    struct fx_logit_bias bans[3] = {{3, -INFINITY}, {0, -INFINITY}, {1, -INFINITY}};
    struct fx_sampler_params p = neutral_params();
    p.temperature = 0.0f;
    p.logit_bias = bans;
    p.n_logit_bias = 3;
    struct fx_sampler *s = make_sampler(4, &p);
    fx_token got = -1;
    struct fx_error err = {0};
    assert_int_equal(fx_sampler_sample(s, flat, &got, &err), FX_ERR_INVALID_ARG);
    fx_sampler_free(s);
}

/* ---- top-k ---------------------------------------------------------------------------------- */

FX_TEST(sample_top_k_keeps_the_k_best_in_order) {
    struct fx_test_rng r = {2};
    const int n = 2000;
    float *l = calloc(n, sizeof *l);
    struct fx_cands c = cands_alloc(n);
    static const int ks[] = {1, 2, 40, 63, 64, 65, 500, 1999, 2000, 5000};
    for (size_t t = 0; t < sizeof ks / sizeof ks[0]; t++) {
        random_logits(&r, l, n, true); /* many ties: the order must break them by id */
        struct ref_tok *ref = ref_sorted(l, n);
        fx_cands_from_logits(&c, l, n);
        fx_sample_top_k(&c, ks[t]);
        int want = ks[t] < n ? ks[t] : n;
        assert_int_equal(c.n, want);
        if (ks[t] < n) {
            assert_true(c.sorted);
            for (int i = 0; i < want; i++) {
                assert_int_equal(c.data[i].id, ref[i].id);
                assert_true(c.data[i].logit == (float)ref[i].logit);
            }
        }
        free(ref);
    }
    /* k <= 0 is off. */
    fx_cands_from_logits(&c, l, n);
    fx_sample_top_k(&c, 0);
    assert_int_equal(c.n, n);
    cands_free(&c);
    free(l);
}

/* ---- top-p ---------------------------------------------------------------------------------- */

/* Reference cumulative probabilities (best first) of the candidates left in c. */
static double *ref_cumulative(const struct fx_cands *c, struct ref_tok **sorted_out) {
    struct ref_tok *t = calloc((size_t)c->n, sizeof *t);
    double *cum = calloc((size_t)c->n, sizeof *cum);
    assert_non_null(t);
    assert_non_null(cum);
    for (int i = 0; i < c->n; i++)
        t[i] = (struct ref_tok){c->data[i].logit, c->data[i].id};
    qsort(t, (size_t)c->n, sizeof *t, ref_order);
    double z = 0, acc = 0;
    for (int i = 0; i < c->n; i++)
        z += exp(t[i].logit - t[0].logit);
    for (int i = 0; i < c->n; i++)
        cum[i] = (acc += exp(t[i].logit - t[0].logit) / z);
    *sorted_out = t;
    return cum;
}

FX_TEST(sample_top_p_keeps_the_smallest_set_reaching_p) {
    struct fx_test_rng r = {3};
    const int n = 5000;
    float *l = calloc(n, sizeof *l);
    int *want = calloc(n, sizeof *want), *got = calloc(n, sizeof *got);
    struct fx_cands c = cands_alloc(n);
    for (int trial = 0; trial < 60; trial++) {
        random_logits(&r, l, n, trial % 2);
        bool presorted = trial % 3 == 0; /* after a top-k, on the already sorted path */
        fx_cands_from_logits(&c, l, n);
        if (presorted)
            fx_sample_top_k(&c, 1000);
        struct ref_tok *ref;
        double *cum = ref_cumulative(&c, &ref);
        /* Aim halfway between two cumulative sums so that the answer is exactly j + 1 tokens,
         * with j spread to cover the 64-, 512- and full-size rounds of the unsorted path. */
        int j = (int)(fx_test_rng_u64(&r) % (uint64_t)(trial % 4 == 0 ? c.n - 1 : 700));
        /* Far in the tail the steps are below float resolution: move to a resolvable one. */
        while (j > 0 && cum[j] - cum[j - 1] < 1e-5)
            j--;
        double p = j == 0 ? cum[0] / 2 : (cum[j - 1] + cum[j]) / 2;
        fx_sample_top_p(&c, (float)p);
        assert_int_equal(c.n, j + 1);
        /* Sorted input stays sorted; unsorted input is cut without being sorted. */
        assert_int_equal(c.sorted, presorted);
        for (int i = 0; i <= j; i++)
            want[i] = ref[i].id;
        qsort(want, (size_t)j + 1, sizeof *want, cmp_int);
        cand_ids(&c, got);
        assert_memory_equal(got, want, ((size_t)j + 1) * sizeof *want);
        free(ref);
        free(cum);
    }
    /* All tied (one bucket), with some banned: the cut follows the ids. 100 tokens of 0.01
     * each reach 0.255 with the 26th. */
    for (int i = 0; i < n; i++)
        l[i] = i < 100 ? 0.5f : -INFINITY;
    fx_cands_from_logits(&c, l, n);
    fx_sample_top_p(&c, 0.255f);
    assert_int_equal(c.n, 26);
    cand_ids(&c, got);
    for (int i = 0; i < 26; i++)
        assert_int_equal(got[i], i);
    /* p = 0 keeps the best token only; p = 1 is off. */
    random_logits(&r, l, n, false);
    fx_cands_from_logits(&c, l, n);
    fx_sample_top_p(&c, 0.0f);
    assert_int_equal(c.n, 1);
    fx_cands_from_logits(&c, l, n);
    fx_sample_top_p(&c, 1.0f);
    assert_int_equal(c.n, n);
    cands_free(&c);
    free(l);
    free(want);
    free(got);
}

/* ---- min-p ---------------------------------------------------------------------------------- */

FX_TEST(sample_min_p_keeps_tokens_above_a_fraction_of_the_best) {
    struct fx_test_rng r = {4};
    const int n = 3000;
    float *l = calloc(n, sizeof *l);
    int *want = calloc(n, sizeof *want), *got = calloc(n, sizeof *got);
    struct fx_cands c = cands_alloc(n);
    for (int trial = 0; trial < 40; trial++) {
        random_logits(&r, l, n, false);
        float min_p = (float)(0.001 + 0.6 * fx_test_rng_f64(&r));
        fx_cands_from_logits(&c, l, n);
        bool presorted = trial % 2;
        if (presorted)
            fx_sample_top_k(&c, 2500);
        double pmax = -INFINITY;
        for (int i = 0; i < c.n; i++)
            pmax = fmax(pmax, c.data[i].logit);
        int n_want = 0;
        for (int i = 0; i < c.n; i++) {
            double ratio = exp(c.data[i].logit - pmax); /* p_i / p_max */
            if (fabs(ratio - min_p) < 1e-6 * min_p)
                fail_msg("seed puts a token on the min-p boundary; change the seed");
            if (ratio >= min_p)
                want[n_want++] = c.data[i].id;
        }
        qsort(want, (size_t)n_want, sizeof *want, cmp_int);
        /* The kept tokens keep their relative order. */
        fx_token first = c.data[0].id;
        fx_sample_min_p(&c, min_p);
        assert_int_equal(c.n, n_want);
        assert_int_equal(c.sorted, presorted);
        if (presorted)
            assert_int_equal(c.data[0].id, first);
        for (int i = 1; i < c.n && !presorted; i++)
            assert_true(c.data[i - 1].id < c.data[i].id);
        cand_ids(&c, got);
        assert_memory_equal(got, want, (size_t)n_want * sizeof *want);
    }
    cands_free(&c);
    free(l);
    free(want);
    free(got);
}

/* ---- penalties and bias --------------------------------------------------------------------- */

FX_TEST(sample_penalties_follow_llama_cpp_definition) {
    struct fx_test_rng r = {5};
    const int n = 50;
    float l[50];
    struct fx_cands c = cands_alloc(n);
    static const int windows[] = {1, 7, 64};
    for (size_t w = 0; w < sizeof windows / sizeof windows[0]; w++) {
        int last_n = windows[w];
        float repeat = 1.3f, freq = 0.25f, presence = 0.7f;
        struct fx_penalties pen;
        assert_true(fx_penalties_init(&pen, n, last_n, repeat, freq, presence));
        int hist[300];
        int n_hist = 0;
        for (int step = 0; step < 300; step++) {
            /* Tokens from a small range so that they repeat inside the window. */
            hist[n_hist++] = (int)(fx_test_rng_u64(&r) % 12);
            fx_penalties_accept(&pen, hist[n_hist - 1]);
            if (step % 17 != 0)
                continue;
            random_logits(&r, l, n, false);
            fx_cands_from_logits(&c, l, n);
            fx_sample_penalties(&pen, &c);
            int count[50] = {0};
            for (int i = n_hist - 1; i >= 0 && i >= n_hist - last_n; i--)
                count[hist[i]]++;
            for (int t = 0; t < n; t++) {
                float want = l[t];
                if (count[t] > 0) {
                    want = want > 0 ? want / repeat : want * repeat;
                    want -= (float)count[t] * freq + presence;
                }
                assert_true(c.data[t].logit == want);
            }
        }
        /* Cleared, the window penalises nothing. */
        fx_penalties_clear(&pen);
        fx_cands_from_logits(&c, l, n);
        fx_sample_penalties(&pen, &c);
        for (int t = 0; t < n; t++)
            assert_true(c.data[t].logit == l[t]);
        fx_penalties_free(&pen);
    }
    cands_free(&c);
}

FX_TEST(sample_logit_bias_adds_and_bans) {
    const int n = 8;
    float l[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    struct fx_logit_bias bias[] = {{2, 10.0f}, {2, 0.5f}, {7, -INFINITY}, {0, -3.0f}};
    struct fx_cands c = cands_alloc(n);
    fx_cands_from_logits(&c, l, n);
    fx_sample_logit_bias(&c, bias, 4);
    assert_true(c.data[2].logit == 13.5f); /* entries for one token add up */
    assert_true(c.data[7].logit == -INFINITY);
    assert_true(c.data[0].logit == -2.0f);
    assert_true(c.data[5].logit == 6.0f);
    cands_free(&c);

    /* Through the chain: greedy picks the boosted token, and a banned token is never drawn even
     * when it is by far the most likely. */
    struct fx_sampler_params p = neutral_params();
    p.temperature = 0.0f;
    p.logit_bias = bias;
    p.n_logit_bias = 4;
    struct fx_sampler *s = make_sampler(n, &p);
    fx_token t;
    assert_int_equal(fx_sampler_sample(s, l, &t, NULL), FX_OK);
    assert_int_equal(t, 2);
    fx_sampler_free(s);
    struct fx_logit_bias ban = {7, -INFINITY};
    p = neutral_params();
    p.logit_bias = &ban;
    p.n_logit_bias = 1;
    s = make_sampler(n, &p);
    float peaked[8] = {0, 0, 0, 0, 0, 0, 0, 30};
    for (int i = 0; i < 2000; i++) {
        assert_int_equal(fx_sampler_sample(s, peaked, &t, NULL), FX_OK);
        assert_true(t >= 0 && t < 7);
    }
    fx_sampler_free(s);
}

/* ---- the chain against a reference ---------------------------------------------------------- */

/* The whole chain in double precision: bias, penalties, top-k, top-p, min-p, temperature. Fills
 * prob[id] (0 for removed tokens); returns false when a parameter lands within rounding of a
 * top-p or min-p boundary, where float and double may legitimately disagree. */
static bool ref_chain(const float *logits, int n, const struct fx_sampler_params *p,
                      const int *count, double *prob) {
    struct ref_tok *t = calloc((size_t)n, sizeof *t);
    assert_non_null(t);
    for (int i = 0; i < n; i++) {
        double x = logits[i];
        for (size_t b = 0; b < p->n_logit_bias; b++)
            if (p->logit_bias[b].token == i)
                x += p->logit_bias[b].bias;
        if (count[i] > 0) {
            x = x > 0 ? x / p->repeat_penalty : x * p->repeat_penalty;
            x -= count[i] * (double)p->frequency_penalty + p->presence_penalty;
        }
        t[i] = (struct ref_tok){x, i};
    }
    qsort(t, (size_t)n, sizeof *t, ref_order);
    int m = p->top_k > 0 && p->top_k < n ? p->top_k : n;
    bool clear = true;
    if (p->top_p < 1.0f) {
        double z = 0, acc = 0;
        for (int i = 0; i < m; i++)
            z += exp(t[i].logit - t[0].logit);
        for (int i = 0; i < m; i++) {
            acc += exp(t[i].logit - t[0].logit) / z;
            if (fabs(acc - p->top_p) < 1e-5)
                clear = false;
            if (acc >= p->top_p) {
                m = i + 1;
                break;
            }
        }
    }
    int k = 0;
    for (int i = 0; i < m; i++) {
        double ratio = exp(t[i].logit - t[0].logit);
        if (fabs(ratio - p->min_p) < 1e-5 * p->min_p)
            clear = false;
        if (ratio >= p->min_p)
            t[k++] = t[i];
    }
    memset(prob, 0, (size_t)n * sizeof *prob);
    double z = 0;
    for (int i = 0; i < k; i++)
        z += exp((t[i].logit - t[0].logit) / p->temperature);
    for (int i = 0; i < k; i++)
        prob[t[i].id] = exp((t[i].logit - t[0].logit) / p->temperature) / z;
    free(t);
    return clear;
}

FX_TEST(sample_chain_matches_reference) {
    struct fx_test_rng r = {6};
    const int n = 1000;
    float *l = calloc(n, sizeof *l);
    double *want = calloc(n, sizeof *want), *got = calloc(n, sizeof *got);
    int trials = 0;
    for (int attempt = 0; trials < 40; attempt++) {
        assert_true(attempt < 200);
        struct fx_sampler_params p = fx_sampler_default_params();
        p.temperature = (float)(0.3 + 1.5 * fx_test_rng_f64(&r));
        p.top_k = (int32_t)(fx_test_rng_u64(&r) % 400) - 50; /* some <= 0: off */
        p.top_p = (float)(0.5 + 0.6 * fx_test_rng_f64(&r));  /* some >= 1: off */
        if (p.top_p > 1.0f)
            p.top_p = 1.0f;
        p.min_p = (float)(0.2 * fx_test_rng_f64(&r));
        p.penalty_last_n = 1 + (int32_t)(fx_test_rng_u64(&r) % 30);
        p.repeat_penalty = (float)(1.0 + fx_test_rng_f64(&r));
        p.frequency_penalty = (float)fx_test_rng_f64(&r);
        p.presence_penalty = (float)(fx_test_rng_f64(&r) - 0.5);
        /* Two biased tokens are among the penalised ones (0..39): the order of the two steps
         * matters for them. */
        struct fx_logit_bias bias[3] = {{(fx_token)(fx_test_rng_u64(&r) % 40), 4.0f},
                                        {(fx_token)(fx_test_rng_u64(&r) % 40), -2.5f},
                                        {(fx_token)(fx_test_rng_u64(&r) % n), -INFINITY}};
        p.logit_bias = bias;
        p.n_logit_bias = 3;
        struct fx_sampler *s = make_sampler(n, &p);
        int count[1000] = {0}, hist[60];
        for (int i = 0; i < 60; i++) {
            hist[i] = (int)(fx_test_rng_u64(&r) % 40);
            assert_int_equal(fx_sampler_accept(s, hist[i], NULL), FX_OK);
        }
        for (int i = 60 - p.penalty_last_n; i < 60; i++)
            count[hist[i]]++;
        random_logits(&r, l, n, attempt % 2);
        bool clear = ref_chain(l, n, &p, count, want);
        const struct fx_cands *c;
        assert_int_equal(fx_sampler_candidates(s, l, &c, NULL), FX_OK);
        if (clear) {
            /* The probabilities the draw uses: softmax of the candidates' final logits. */
            memset(got, 0, n * sizeof *got);
            double mx = -INFINITY, z = 0;
            for (int i = 0; i < c->n; i++)
                mx = fmax(mx, c->data[i].logit);
            for (int i = 0; i < c->n; i++)
                z += exp(c->data[i].logit - mx);
            for (int i = 0; i < c->n; i++)
                got[c->data[i].id] = exp(c->data[i].logit - mx) / z;
            for (int i = 0; i < n; i++) {
                assert_true((got[i] > 0) == (want[i] > 0)); /* the same set */
                assert_true(fabs(got[i] - want[i]) <= 1e-5 * want[i] + 1e-12);
            }
            trials++;
        }
        fx_sampler_free(s);
    }
    free(l);
    free(want);
    free(got);
}

/* ---- the draw follows the distribution ------------------------------------------------------ */

/* Pearson's chi-square of `draws` seeded samples against the reference probabilities; the
 * statistic must stay under the 0.999 quantile of chi-square with (support - 1) degrees of
 * freedom (Wilson-Hilferty approximation). A sampler that favoured any token by a few percent
 * would exceed it at this sample size; a correct one passes for the fixed seed used. */
static void check_distribution(const struct fx_sampler_params *p, const float *l, int n,
                               int draws) {
    double want[64];
    int zero[64] = {0};
    assert_true(n <= 64);
    assert_true(ref_chain(l, n, p, zero, want));
    struct fx_sampler *s = make_sampler(n, p);
    int hits[64] = {0};
    for (int i = 0; i < draws; i++) {
        fx_token t;
        assert_int_equal(fx_sampler_sample(s, l, &t, NULL), FX_OK);
        hits[t]++;
    }
    double chi2 = 0;
    int support = 0;
    for (int i = 0; i < n; i++) {
        if (want[i] == 0) {
            assert_int_equal(hits[i], 0); /* a removed token is never drawn */
            continue;
        }
        double e = want[i] * draws;
        chi2 += (hits[i] - e) * (hits[i] - e) / e;
        support++;
    }
    double df = support - 1, z = 3.090; /* the 0.999 normal quantile */
    double limit = df * pow(1 - 2 / (9 * df) + z * sqrt(2 / (9 * df)), 3);
    if (!(chi2 < limit))
        fail_msg("chi-square %.2f over %d tokens exceeds %.2f", chi2, support, limit);
    fx_sampler_free(s);
}

FX_TEST(sample_draws_follow_the_distribution) {
    float l[12] = {1.0f, 0.2f, 2.5f, -1.0f, 0.7f, 1.9f, 0.0f, -0.4f, 1.4f, 0.9f, -2.0f, 2.2f};
    struct fx_sampler_params p = neutral_params();
    p.seed = 1234;
    check_distribution(&p, l, 12, 60000); /* plain softmax */
    p.temperature = 0.6f;
    p.top_k = 8;
    p.top_p = 0.9f;
    p.min_p = 0.05f;
    check_distribution(&p, l, 12, 60000); /* the truncated, sharpened distribution */
    p = neutral_params();
    p.temperature = 2.5f;
    p.seed = 99;
    check_distribution(&p, l, 12, 60000);
}

/* ---- seeds ---------------------------------------------------------------------------------- */

FX_TEST(sample_rng_matches_published_vectors) {
    /* xoshiro256** from the state {1, 2, 3, 4}: the outputs of the authors' reference code. */
    struct fx_rng r = {{1, 2, 3, 4}};
    static const uint64_t want[] = {11520u,
                                    0u,
                                    1509978240u,
                                    1215971899390074240u,
                                    1216172134540287360u,
                                    607988272756665600u,
                                    16172922978634559625u,
                                    8476171486693032832u,
                                    10595114339597558777u,
                                    2904607092377533576u};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        assert_true(fx_rng_next(&r) == want[i]);
    /* Seeding fills the state with splitmix64's first outputs from the seed. */
    fx_rng_seed(&r, 0);
    assert_true(r.s[0] == 0xe220a8397b1dcdafu && r.s[1] == 0x6e789e6aa1b965f4u &&
                r.s[2] == 0x06c45d188009454fu && r.s[3] == 0xf88bb8a8724c81ecu);
    double lo = 1, hi = 0, sum = 0;
    for (int i = 0; i < 100000; i++) {
        double u = fx_rng_uniform(&r);
        lo = fmin(lo, u);
        hi = fmax(hi, u);
        sum += u;
    }
    assert_true(lo >= 0 && lo < 1e-3 && hi < 1 && hi > 1 - 1e-3);
    assert_true(fabs(sum / 100000 - 0.5) < 0.005); /* 5 standard errors */
}

static void sample_sequence(struct fx_sampler *s, const float *l, int n, fx_token *out, int len) {
    for (int i = 0; i < len; i++) {
        assert_int_equal(fx_sampler_sample(s, l, &out[i], NULL), FX_OK);
        assert_int_equal(fx_sampler_accept(s, out[i], NULL), FX_OK);
        assert_true(out[i] >= 0 && out[i] < n);
    }
}

FX_TEST(sample_seed_gives_reproducible_sequences) {
    struct fx_test_rng r = {7};
    const int n = 500, len = 1000;
    float l[500];
    random_logits(&r, l, n, false);
    struct fx_sampler_params p = fx_sampler_default_params();
    p.temperature = 1.2f;
    p.top_k = 0;
    p.min_p = 0.0f;
    p.repeat_penalty = 1.1f;
    p.frequency_penalty = 0.2f;
    p.seed = 42;
    fx_token a[1000], b[1000], c[1000];
    struct fx_sampler *s1 = make_sampler(n, &p), *s2 = make_sampler(n, &p);
    sample_sequence(s1, l, n, a, len);
    sample_sequence(s2, l, n, b, len);
    assert_memory_equal(a, b, sizeof a);
    /* Reset restarts the same sequence (window emptied, generator reseeded). */
    fx_sampler_reset(s1);
    sample_sequence(s1, l, n, c, len);
    assert_memory_equal(a, c, sizeof a);
    /* Another seed gives another sequence. */
    p.seed = 43;
    struct fx_sampler *s3 = make_sampler(n, &p);
    sample_sequence(s3, l, n, c, len);
    int same = 0;
    for (int i = 0; i < len; i++)
        same += a[i] == c[i];
    assert_true(same < len / 4);
    fx_sampler_free(s1);
    fx_sampler_free(s2);
    fx_sampler_free(s3);
}

/* ---- errors --------------------------------------------------------------------------------- */

FX_TEST(sample_rejects_bad_parameters) {
    struct fx_sampler_params p;
    struct fx_sampler *s = NULL;
    struct fx_error err = {0};
#define EXPECT_BAD(stmt, word)                                                                     \
    do {                                                                                           \
        p = fx_sampler_default_params();                                                           \
        stmt;                                                                                      \
        assert_int_equal(fx_sampler_create(100, &p, &s, &err), FX_ERR_INVALID_ARG);                \
        assert_null(s);                                                                            \
        if (!strstr(err.msg, word))                                                                \
            fail_msg("message '%s' does not name '%s'", err.msg, word);                            \
    } while (0)
    EXPECT_BAD(p.temperature = -0.5f, "temperature");
    EXPECT_BAD(p.temperature = NAN, "temperature");
    EXPECT_BAD(p.top_p = 1.5f, "top_p");
    EXPECT_BAD(p.top_p = NAN, "top_p");
    EXPECT_BAD(p.min_p = -0.1f, "min_p");
    EXPECT_BAD(p.penalty_last_n = -1, "penalty_last_n");
    EXPECT_BAD(p.repeat_penalty = 0.0f, "repeat_penalty");
    EXPECT_BAD(p.frequency_penalty = INFINITY, "frequency_penalty");
    EXPECT_BAD(p.presence_penalty = NAN, "presence_penalty");
    struct fx_logit_bias out_of_range = {100, 1.0f}, nan_bias = {3, NAN}, pos_inf = {3, INFINITY};
    EXPECT_BAD((p.logit_bias = &out_of_range, p.n_logit_bias = 1), "token 100");
    EXPECT_BAD((p.logit_bias = &nan_bias, p.n_logit_bias = 1), "token 3");
    EXPECT_BAD((p.logit_bias = &pos_inf, p.n_logit_bias = 1), "token 3");
#undef EXPECT_BAD
    p = fx_sampler_default_params();
    assert_int_equal(fx_sampler_create(0, &p, &s, &err), FX_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "vocabulary"));

    /* A token outside the vocabulary cannot be accepted; a vocabulary with every token banned
     * cannot be sampled. */
    s = make_sampler(4, &p);
    assert_int_equal(fx_sampler_accept(s, 4, &err), FX_ERR_INVALID_ARG);
    assert_int_equal(fx_sampler_accept(s, -1, &err), FX_ERR_INVALID_ARG);
    float dead[4] = {-INFINITY, NAN, -INFINITY, NAN};
    fx_token t = 77;
    assert_int_equal(fx_sampler_sample(s, dead, &t, &err), FX_ERR_INVALID_ARG);
    assert_int_equal(t, 77);
    /* NaN counts as -inf: the one finite logit wins. */
    float one[4] = {NAN, -INFINITY, -5.0f, NAN};
    assert_int_equal(fx_sampler_sample(s, one, &t, &err), FX_OK);
    assert_int_equal(t, 2);
    fx_sampler_free(s);
    fx_sampler_free(NULL);
}

/* ---- stopping ------------------------------------------------------------------------------- */

static struct fx_stopper *make_stopper(const char *const *strings, size_t n_strings,
                                       const fx_token *tokens, size_t n_tokens, int64_t max) {
    struct fx_stop_params p = {strings, n_strings, tokens, n_tokens, max};
    struct fx_stopper *st = NULL;
    struct fx_error err = {0};
    if (fx_stopper_create(&p, &st, &err) != FX_OK)
        fail_msg("fx_stopper_create: %s", err.msg);
    return st;
}

/* Pushes a piece, appends what is released to out (NUL-terminated, large enough). */
static struct fx_stop_result push(struct fx_stopper *st, fx_token tok, const char *piece,
                                  char *out) {
    struct fx_stop_result res;
    assert_int_equal(fx_stopper_push(st, tok, piece, strlen(piece), &res, NULL), FX_OK);
    strncat(out, res.text, res.len);
    assert_int_equal(res.text_end, strlen(out));
    return res;
}

FX_TEST(sample_stop_string_across_token_boundaries) {
    const char *stops[] = {"o W", "zzz"};
    struct fx_stopper *st = make_stopper(stops, 2, NULL, 0, 0);
    char out[256] = "";
    struct fx_stop_result res = push(st, 1, "Hel", out);
    assert_int_equal(res.reason, FX_STOP_NONE);
    assert_string_equal(out, "Hel");
    res = push(st, 2, "lo", out); /* "o" could start "o W": held back */
    assert_int_equal(res.reason, FX_STOP_NONE);
    assert_string_equal(out, "Hell");
    res = push(st, 3, " ", out);
    assert_string_equal(out, "Hell");
    res = push(st, 4, "World", out);
    assert_int_equal(res.reason, FX_STOP_STRING);
    assert_int_equal(res.which, 0);
    assert_string_equal(out, "Hell");
    assert_int_equal(res.text_end, 4); /* where the concatenated pieces must be cut */
    /* Stopped: further pushes are errors until reset. */
    struct fx_error err = {0};
    assert_int_equal(fx_stopper_push(st, 5, "x", 1, &res, &err), FX_ERR_INVALID_ARG);
    fx_stopper_reset(st);
    out[0] = '\0';
    res = push(st, 1, "o", out);
    res = push(st, 1, "k", out);
    assert_string_equal(out, "ok");
    /* finish releases what is held. */
    res = push(st, 1, " zz", out);
    assert_string_equal(out, "ok ");
    fx_stopper_finish(st, &res);
    strncat(out, res.text, res.len);
    assert_string_equal(out, "ok zz");
    assert_int_equal(res.reason, FX_STOP_NONE);
    fx_stopper_free(st);
}

/* Streams random text over a small alphabet in random pieces and compares with the rule stated
 * on the whole text: generation stops at the first token after which some stop string occurs,
 * and the output is the text before the earliest occurrence. */
FX_TEST(sample_stop_streaming_matches_whole_text_reference) {
    struct fx_test_rng r = {8};
    for (int trial = 0; trial < 400; trial++) {
        char text[200], stopbuf[3][6];
        const char *stops[3];
        int n_text = 20 + (int)(fx_test_rng_u64(&r) % 150);
        for (int i = 0; i < n_text; i++)
            text[i] = "ab c"[fx_test_rng_u64(&r) % 4];
        text[n_text] = '\0';
        int n_stops = 1 + (int)(fx_test_rng_u64(&r) % 3);
        for (int k = 0; k < n_stops; k++) {
            int len = 1 + (int)(fx_test_rng_u64(&r) % 5);
            for (int i = 0; i < len; i++)
                stopbuf[k][i] = "ab c"[fx_test_rng_u64(&r) % 4];
            stopbuf[k][len] = '\0';
            stops[k] = stopbuf[k];
        }
        /* Random cut points make the pieces (some empty). */
        int bounds[201], n_pieces = 0, at = 0;
        bounds[0] = 0;
        while (at < n_text) {
            at += (int)(fx_test_rng_u64(&r) % 5);
            at = at > n_text ? n_text : at;
            bounds[++n_pieces] = at;
        }
        /* The reference. */
        int want_len = n_text, want_tok = -1;
        for (int t = 1; t <= n_pieces && want_tok < 0; t++) {
            char prefix[200];
            memcpy(prefix, text, (size_t)bounds[t]);
            prefix[bounds[t]] = '\0';
            for (int k = 0; k < n_stops; k++) {
                const char *hit = strstr(prefix, stops[k]);
                if (hit && (want_tok < 0 || hit - prefix < want_len)) {
                    want_len = (int)(hit - prefix);
                    want_tok = t - 1;
                }
            }
        }
        struct fx_stopper *st = make_stopper(stops, (size_t)n_stops, NULL, 0, 0);
        char out[256] = "";
        int stopped_at = -1;
        for (int t = 0; t < n_pieces; t++) {
            char piece[8];
            memcpy(piece, text + bounds[t], (size_t)(bounds[t + 1] - bounds[t]));
            piece[bounds[t + 1] - bounds[t]] = '\0';
            struct fx_stop_result res = push(st, 0, piece, out);
            if (res.reason != FX_STOP_NONE) {
                assert_int_equal(res.reason, FX_STOP_STRING);
                assert_non_null(strstr(text + res.text_end, stops[res.which]));
                assert_int_equal(
                    strncmp(text + res.text_end, stops[res.which], strlen(stops[res.which])), 0);
                stopped_at = t;
                break;
            }
        }
        if (stopped_at < 0) {
            struct fx_stop_result res;
            fx_stopper_finish(st, &res);
            strncat(out, res.text, res.len);
        }
        assert_int_equal(stopped_at, want_tok);
        assert_int_equal((int)strlen(out), want_len);
        assert_memory_equal(out, text, (size_t)want_len);
        fx_stopper_free(st);
    }
}

FX_TEST(sample_stop_tokens_max_tokens_and_utf8) {
    const fx_token eos[] = {2, 7};
    const char *stops[] = {"###"};
    struct fx_stopper *st = make_stopper(stops, 1, eos, 2, 5);
    char out[256] = "";
    /* "€" is E2 82 AC: split over tokens, it is released only once complete. */
    struct fx_stop_result res = push(st, 10, "a\xe2", out);
    assert_string_equal(out, "a");
    res = push(st, 11, "\x82", out);
    assert_string_equal(out, "a");
    res = push(st, 12, "\xac#", out); /* "#" may start "###" */
    assert_string_equal(out, "a\xe2\x82\xac");
    /* A stop token ends generation; its text is not output, what was held is. */
    res = push(st, 7, "</s>", out);
    assert_int_equal(res.reason, FX_STOP_TOKEN);
    assert_int_equal(res.which, 1);
    assert_string_equal(out, "a\xe2\x82\xac#");

    /* max_tokens: the fifth token's text is included and everything held is released. */
    fx_stopper_reset(st);
    out[0] = '\0';
    for (int i = 0; i < 4; i++) {
        res = push(st, 20, "x", out);
        assert_int_equal(res.reason, FX_STOP_NONE);
    }
    res = push(st, 20, "y##", out);
    assert_int_equal(res.reason, FX_STOP_MAX_TOKENS);
    assert_int_equal(res.which, -1);
    assert_string_equal(out, "xxxxy##");

    /* A stray continuation byte or an invalid byte is not held: it can never complete. */
    fx_stopper_reset(st);
    out[0] = '\0';
    res = push(st, 20, "q\x80", out);
    assert_string_equal(out, "q\x80");
    res = push(st, 20, "\xff", out);
    assert_string_equal(out, "q\x80\xff");
    fx_stopper_free(st);

    /* An empty stop string is rejected. */
    const char *empty[] = {"ok", ""};
    struct fx_stop_params p = {empty, 2, NULL, 0, 0};
    struct fx_error err = {0};
    assert_int_equal(fx_stopper_create(&p, &st, &err), FX_ERR_INVALID_ARG);
    assert_null(st);
    assert_non_null(strstr(err.msg, "stop string 1"));
}
