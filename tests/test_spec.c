/* spec/: prompt lookup's search, the speculative-sampling rule (chi-square tests against the
 * target's distribution), the verify step against plain decoding (tokens and KV rows after
 * rollback, byte for byte), the draft model's vocabulary check, and the adaptive controller. */
#include "fx_test.h"
#include "gguf_copy.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "decoder/decoder.h"
#include "ferrox.h"
#include "kernels/kv_tile.h"
#include "spec/drafter.h"
#include "spec/spec.h"

/* ---- helpers -------------------------------------------------------------------------------- */

/* Regularised upper incomplete gamma Q(a, x) (Numerical Recipes' gammq: series below a + 1,
 * Lentz's continued fraction above). */
static double gamma_q(double a, double x) {
    if (x <= 0)
        return 1.0;
    double gln = lgamma(a);
    if (x < a + 1) {
        double ap = a, sum = 1.0 / a, del = sum;
        for (int n = 0; n < 10000 && fabs(del) > fabs(sum) * 1e-15; n++) {
            ap += 1;
            del *= x / ap;
            sum += del;
        }
        return 1.0 - sum * exp(-x + a * log(x) - gln);
    }
    double b = x + 1 - a, c = 1e300, d = 1 / b, h = d;
    for (int i = 1; i < 10000; i++) {
        double an = -i * (i - a);
        b += 2;
        d = an * d + b;
        if (fabs(d) < 1e-300)
            d = 1e-300;
        c = b + an / c;
        if (fabs(c) < 1e-300)
            c = 1e-300;
        d = 1 / d;
        double del = d * c;
        h *= del;
        if (fabs(del - 1) < 1e-15)
            break;
    }
    return exp(-x + a * log(x) - gln) * h;
}

/* The documented bound: a correct sampler fails a chi-square check with probability below this
 * over the choice of seeds. Each check uses fixed seeds, so it passes or fails deterministically;
 * with seeds drawn at random a correct implementation would fail one run in a million, while a
 * rule that is off by a few percent on a likely token gives p-values far below it. */
#define FALSE_FAILURE 1e-6

/* Pearson's chi-square of counts[0..n) against probabilities want[0..n) (summing to 1). Tokens
 * expected fewer than 5 times are pooled into one bin (and that bin into the smallest other bin
 * when it is itself under 5), so the chi-square approximation holds. Fails the test when the
 * p-value is below FALSE_FAILURE, or when a token of probability 0 was drawn. */
static void chi_square(const char *what, const int *counts, const double *want, int n, int draws) {
    double chi2 = 0, pool_e = 0;
    int pool_c = 0, bins = 0;
    double small_e = INFINITY;
    int small_c = 0;
    for (int i = 0; i < n; i++) {
        double e = want[i] * draws;
        if (want[i] == 0) {
            if (counts[i] != 0)
                fail_msg("%s: token %d has probability 0 and was drawn %d times", what, i,
                         counts[i]);
            continue;
        }
        if (e < 5) {
            pool_e += e;
            pool_c += counts[i];
            continue;
        }
        if (e < small_e) {
            small_e = e;
            small_c = counts[i];
        }
        chi2 += (counts[i] - e) * (counts[i] - e) / e;
        bins++;
    }
    if (pool_e > 0) {
        if (pool_e >= 5 || bins == 0) {
            chi2 += (pool_c - pool_e) * (pool_c - pool_e) / pool_e;
            bins++;
        } else { /* merge the pool into the smallest bin */
            chi2 -= (small_c - small_e) * (small_c - small_e) / small_e;
            double e = small_e + pool_e;
            int c = small_c + pool_c;
            chi2 += (c - e) * (c - e) / e;
        }
    }
    assert_true(bins >= 2);
    double p = gamma_q((bins - 1) / 2.0, chi2 / 2.0);
    print_message("%s: chi-square %.1f with %d degrees of freedom, p-value %.3g\n", what, chi2,
                  bins - 1, p);
    if (p < FALSE_FAILURE)
        fail_msg("%s: chi-square %.1f with %d degrees of freedom: p-value %.3g < %g", what, chi2,
                 bins - 1, p, FALSE_FAILURE);
}

struct lm {
    struct fx_model *m;
    struct fx_context *ctx;
    int32_t n_vocab;
};

static void lm_open(struct lm *lm, const char *path, int32_t n_ctx, enum fx_type kv_type) {
    struct fx_error e;
    if (fx_model_load(path, NULL, &lm->m, &e) != FX_OK)
        fail_msg("%s: %s", path, e.msg);
    struct fx_context_params cp = fx_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_threads = 1;
    cp.type_k = cp.type_v = kv_type;
    if (fx_context_create(lm->m, &cp, &lm->ctx, &e) != FX_OK)
        fail_msg("%s: %s", path, e.msg);
    lm->n_vocab = fx_model_n_vocab(lm->m);
}

static void lm_close(struct lm *lm) {
    fx_context_free(lm->ctx);
    fx_model_free(lm->m);
}

static struct fx_sampler *sampler(int32_t n_vocab, float temp, uint64_t seed) {
    struct fx_sampler_params sp = fx_sampler_default_params();
    sp.temperature = temp;
    sp.seed = seed;
    struct fx_sampler *s;
    assert_int_equal(fx_sampler_create(n_vocab, &sp, &s, NULL), FX_OK);
    return s;
}

/* Token ids of a prompt in the model's own vocabulary. */
static int32_t tokenize(const struct fx_model *m, const char *text, fx_token *ids, size_t cap) {
    struct fx_vocab *v;
    struct fx_error e;
    assert_int_equal(fx_vocab_load(fx_model_gguf(m), &v, &e), FX_OK);
    size_t n;
    assert_int_equal(fx_tokenize(v, text, strlen(text), true, true, ids, cap, &n, &e), FX_OK);
    fx_vocab_free(v);
    return (int32_t)n;
}

/* A drafter for the tests: proposes the tokens it is given (fixed), or the tokens of a known
 * continuation that follow the sequence (an oracle: every draft right). */
struct test_drafter {
    struct fx_drafter base;
    const fx_token *fixed; /* [n_fixed] */
    int32_t n_fixed;
    const fx_token *truth; /* the whole sequence plain decoding makes, or NULL */
    int32_t n_truth;
};

static fx_status test_propose(struct fx_drafter *d, const fx_token *seq, int32_t n_seq, int32_t k,
                              fx_token *draft, int32_t *n_draft, struct fx_error *err) {
    (void)err, (void)seq;
    struct test_drafter *t = (struct test_drafter *)d;
    int32_t n = 0;
    if (t->truth)
        for (; n < k && n_seq + n < t->n_truth; n++)
            draft[n] = t->truth[n_seq + n];
    else
        for (; n < k && n < t->n_fixed; n++)
            draft[n] = t->fixed[n];
    *n_draft = n;
    return FX_OK;
}

static void test_drafter_free(struct fx_drafter *d) {
    (void)d;
}

static const struct fx_drafter_ops test_ops = {
    .name = "test", .propose = test_propose, .free = test_drafter_free};

/* Collects the tokens a step yields. */
struct sink {
    fx_token tok[512];
    int32_t n, stop_at; /* stop after this many (0: never) */
};

static fx_status sink_take(void *user, fx_token t, bool *stop, struct fx_error *err) {
    (void)err;
    struct sink *s = user;
    assert_true(s->n < 512);
    s->tok[s->n++] = t;
    if (s->stop_at && s->n == s->stop_at)
        *stop = true;
    return FX_OK;
}

/* ---- prompt lookup -------------------------------------------------------------------------- */

FX_TEST(spec_ngram_lookup_prefers_the_longest_most_recent_match) {
    fx_token d[16];
    /* "1 2 3" occurred at the start (followed by 4); "2 3" more recently (followed by 5): the
     * longer match wins. */
    const fx_token a[] = {1, 2, 3, 4, 6, 2, 3, 5, 6, 1, 2, 3};
    assert_int_equal(fx_ngram_lookup(a, 12, 3, 1, 2, d), 2);
    assert_int_equal(d[0], 4);
    assert_int_equal(d[1], 6);
    /* With n at most 2, the most recent "2 3" wins. */
    assert_int_equal(fx_ngram_lookup(a, 12, 2, 1, 1, d), 1);
    assert_int_equal(d[0], 5);
    /* No 3- or 2-gram match: the last token alone, most recent occurrence. */
    const fx_token b[] = {9, 1, 7, 9, 2, 8, 3, 9};
    assert_int_equal(fx_ngram_lookup(b, 8, 3, 1, 3, d), 3);
    assert_int_equal(d[0], 2);
    assert_int_equal(d[1], 8);
    assert_int_equal(d[2], 3);
    /* No match at all. */
    const fx_token c[] = {1, 2, 3, 4, 5};
    assert_int_equal(fx_ngram_lookup(c, 5, 3, 1, 4, d), 0);
    /* n_min 2 refuses a one-token match. */
    assert_int_equal(fx_ngram_lookup(b, 8, 3, 2, 3, d), 0);
}

FX_TEST(spec_ngram_lookup_copies_through_a_repeating_pattern_and_stops_at_unknown_tokens) {
    fx_token d[16];
    /* The occurrence 8 9 7 at 1 is followed by 8 9 7 ..., which runs past the end: the proposal
     * goes on copying itself (period 3). */
    const fx_token a[] = {7, 8, 9, 7, 8, 9, 7};
    assert_int_equal(fx_ngram_lookup(a, 7, 3, 1, 8, d), 8);
    const fx_token want[] = {8, 9, 7, 8, 9, 7, 8, 9};
    assert_memory_equal(d, want, sizeof want);
    /* A run of one token proposes more of it. */
    const fx_token r[] = {5, 5};
    assert_int_equal(fx_ngram_lookup(r, 2, 3, 1, 4, d), 4);
    for (int i = 0; i < 4; i++)
        assert_int_equal(d[i], 5);
    /* Unknown positions (loaded from a saved state) are never proposed, nor matched. */
    const fx_token u[] = {1, 2, FX_TOKEN_NULL, 4, 1, 2};
    assert_int_equal(fx_ngram_lookup(u, 6, 3, 1, 4, d), 0);
    const fx_token w[] = {FX_TOKEN_NULL, FX_TOKEN_NULL, 3};
    assert_int_equal(fx_ngram_lookup(w, 3, 3, 1, 4, d), 0);
    /* Through the public interface, with bad arguments refused. */
    struct fx_drafter *dr;
    assert_int_equal(fx_drafter_ngram_create(NULL, &dr, NULL), FX_OK);
    assert_string_equal(fx_drafter_name(dr), "ngram");
    int32_t n;
    assert_int_equal(fx_drafter_propose(dr, a, 7, 2, d, &n, NULL), FX_OK);
    assert_int_equal(n, 2);
    assert_int_equal(fx_drafter_propose(dr, a, 7, -1, d, &n, NULL), FX_ERR_INVALID_ARG);
    fx_drafter_free(dr);
    struct fx_drafter_ngram_params bad = {.n_max = 1, .n_min = 2};
    assert_int_equal(fx_drafter_ngram_create(&bad, &dr, NULL), FX_ERR_INVALID_ARG);
}

/* ---- the speculative-sampling rule ---------------------------------------------------------- */

/* A prompt after which stories260K's default chain keeps 13 tokens (the likeliest at 0.55). */
static const char *const PROMPT = "He saw a";

/* The logits after PROMPT from stories260K (real weights: a peaked but not degenerate row). */
static float *prompt_logits(struct lm *lm) {
    lm_open(lm, fx_test_model("stories260K.gguf"), 256, FX_TYPE_F32);
    fx_token ids[64];
    int32_t n = tokenize(lm->m, PROMPT, ids, 64);
    float *l = malloc((size_t)lm->n_vocab * sizeof *l);
    assert_non_null(l);
    assert_int_equal(fx_forward_batch_last(lm->ctx, ids, n, 0, l, NULL), FX_OK);
    return l;
}

/* p: the chain's distribution as a dense [n_vocab] array. */
static void dense_dist(struct fx_sampler *s, const float *logits, int32_t n_vocab, double *p) {
    fx_token *ids = malloc((size_t)n_vocab * sizeof *ids);
    float *pr = malloc((size_t)n_vocab * sizeof *pr);
    assert_non_null(ids);
    assert_non_null(pr);
    int32_t n;
    assert_int_equal(fx_sampler_dist(s, logits, ids, pr, &n, NULL), FX_OK);
    memset(p, 0, (size_t)n_vocab * sizeof *p);
    double sum = 0;
    for (int32_t i = 0; i < n; i++) {
        p[ids[i]] = pr[i];
        sum += pr[i];
    }
    assert_true(fabs(sum - 1.0) < 1e-5);
    free(ids);
    free(pr);
}

FX_TEST(spec_sampler_dist_is_the_chain_and_greedy_is_one_token) {
    struct lm lm;
    float *l = prompt_logits(&lm);
    struct fx_sampler *g = sampler(lm.n_vocab, 0.0f, 1);
    double *p = calloc((size_t)lm.n_vocab, sizeof *p);
    dense_dist(g, l, lm.n_vocab, p);
    fx_token t;
    assert_int_equal(fx_sampler_sample(g, l, &t, NULL), FX_OK);
    assert_true(p[t] == 1.0);
    /* With the default chain (top-k 40, top-p, min-p, temperature 0.8) the draws follow it. */
    struct fx_sampler *s = sampler(lm.n_vocab, 0.8f, 2);
    dense_dist(s, l, lm.n_vocab, p);
    int support = 0;
    for (int32_t i = 0; i < lm.n_vocab; i++)
        support += p[i] > 0;
    assert_true(support > 2 && support <= 40);
    int *counts = calloc((size_t)lm.n_vocab, sizeof *counts);
    const int draws = 20000;
    for (int i = 0; i < draws; i++) {
        assert_int_equal(fx_sampler_sample(s, l, &t, NULL), FX_OK);
        counts[t]++;
    }
    chi_square("plain draws", counts, p, lm.n_vocab, draws);
    free(counts);
    free(p);
    fx_sampler_free(s);
    fx_sampler_free(g);
    free(l);
    lm_close(&lm);
}

FX_TEST(spec_sample_draft_without_q_is_plain_sampling) {
    /* A deterministic drafter: drawing from p and comparing is the rule, and consumes the random
     * numbers plain sampling consumes, so the same seed gives the same tokens. */
    struct lm lm;
    float *l = prompt_logits(&lm);
    for (int ti = 0; ti < 2; ti++) {
        float temp = ti ? 0.8f : 0.0f;
        for (uint64_t seed = 0; seed < 50; seed++) {
            struct fx_sampler *a = sampler(lm.n_vocab, temp, seed);
            struct fx_sampler *b = sampler(lm.n_vocab, temp, seed);
            for (int i = 0; i < 8; i++) {
                fx_token ta, tb;
                bool acc;
                assert_int_equal(fx_sampler_sample(a, l, &ta, NULL), FX_OK);
                /* Every other guess right; the others arbitrary. */
                fx_token draft = i % 2 == 0 ? ta : (fx_token)((seed * 7 + (uint64_t)i) % 512);
                assert_int_equal(fx_sampler_sample_draft(b, l, draft, NULL, &tb, &acc, NULL),
                                 FX_OK);
                assert_int_equal(ta, tb);
                assert_true(acc == (tb == draft));
            }
            fx_sampler_free(a);
            fx_sampler_free(b);
        }
    }
    struct fx_sampler *s = sampler(lm.n_vocab, 0.8f, 1);
    fx_token t;
    bool acc;
    assert_int_equal(fx_sampler_sample_draft(s, l, lm.n_vocab, NULL, &t, &acc, NULL),
                     FX_ERR_INVALID_ARG);
    fx_sampler_free(s);
    free(l);
    lm_close(&lm);
}

FX_TEST(spec_sample_draft_rule_with_a_draft_distribution_keeps_the_target_distribution) {
    /* The general rule: x drawn from a draft distribution q that differs from p (it puts mass on
     * tokens the chain removed, and spreads it differently over the rest), accepted with
     * probability min(1, p(x)/q(x)), else replaced from max(0, p - q). Over many seeds the
     * tokens kept are distributed as p, and the replacements as the normalised residual. */
    struct lm lm;
    float *l = prompt_logits(&lm);
    int32_t nv = lm.n_vocab;
    struct fx_sampler *ref = sampler(nv, 0.8f, 0);
    double *p = calloc((size_t)nv, sizeof *p), *res = calloc((size_t)nv, sizeof *res);
    float *q = calloc((size_t)nv, sizeof *q);
    double *qcum = calloc((size_t)nv, sizeof *qcum);
    int *counts = calloc((size_t)nv, sizeof *counts),
        *rcounts = calloc((size_t)nv, sizeof *rcounts);
    assert_non_null(p);
    assert_non_null(res);
    assert_non_null(q);
    assert_non_null(qcum);
    assert_non_null(counts);
    assert_non_null(rcounts);
    dense_dist(ref, l, nv, p);
    struct fx_test_rng r = {42};
    double qsum = 0;
    for (int32_t i = 0; i < nv; i++) {
        double u = fx_test_rng_f64(&r);
        q[i] = (float)(0.5 * p[i] * (0.2 + 1.6 * u) + 0.5 * u * u * u / nv * 4);
        qsum += q[i];
    }
    double cum = 0, rsum = 0;
    for (int32_t i = 0; i < nv; i++) {
        q[i] = (float)(q[i] / qsum);
        cum += q[i];
        qcum[i] = cum;
        res[i] = p[i] - q[i] > 0 ? p[i] - q[i] : 0;
        rsum += res[i];
    }
    for (int32_t i = 0; i < nv; i++)
        res[i] /= rsum;
    const int draws = 40000;
    int rejected = 0;
    for (int i = 0; i < draws; i++) {
        struct fx_sampler *s = sampler(nv, 0.8f, 1000 + (uint64_t)i);
        double u = fx_test_rng_f64(&r) * cum;
        fx_token x = 0;
        while (x < nv - 1 && qcum[x] <= u)
            x++;
        fx_token t;
        bool acc;
        assert_int_equal(fx_sampler_sample_draft(s, l, x, q, &t, &acc, NULL), FX_OK);
        assert_true(acc == (t == x));
        counts[t]++;
        if (!acc) {
            rcounts[t]++;
            rejected++;
        }
        fx_sampler_free(s);
    }
    /* The rule rejects with probability sum(max(0, q - p)) = rsum: both outcomes are frequent. */
    print_message("rejected %d of %d (expected %.0f)\n", rejected, draws, rsum * draws);
    assert_true(rejected > draws / 10 && rejected < draws * 9 / 10);
    chi_square("kept tokens vs p", counts, p, nv, draws);
    chi_square("replacements vs residual", rcounts, res, nv, rejected);
    free(p);
    free(res);
    free(q);
    free(qcum);
    free(counts);
    free(rcounts);
    fx_sampler_free(ref);
    free(l);
    lm_close(&lm);
}

FX_TEST(spec_step_keeps_the_target_distribution_after_a_rejected_draft) {
    /* Through the whole verify step: the prompt's last token is the token just sampled, and a
     * drafter guesses the likeliest next token twice (kept about as often as p says, rejected
     * otherwise). Over many seeds, the token at the drafted position is distributed as the
     * target's p, and after a rejection as p without the draft. */
    struct lm lm;
    float *l = prompt_logits(&lm); /* p at the drafted position, from plain decoding */
    int32_t nv = lm.n_vocab;
    fx_token seq[64];
    int32_t n = tokenize(lm.m, PROMPT, seq, 64) - 1; /* the cache holds seq[0..n) */
    struct fx_sampler *ref = sampler(nv, 0.8f, 0);
    double *p = calloc((size_t)nv, sizeof *p), *rest = calloc((size_t)nv, sizeof *rest);
    assert_non_null(p);
    assert_non_null(rest);
    dense_dist(ref, l, nv, p);
    fx_token draft = 0;
    for (int32_t i = 0; i < nv; i++)
        if (p[i] > p[draft])
            draft = i;
    print_message("draft: token %d of probability %.3f\n", draft, p[draft]);
    assert_true(p[draft] > 0.2 && p[draft] < 0.8);
    for (int32_t i = 0; i < nv; i++)
        rest[i] = i == draft ? 0 : p[i] / (1.0 - p[draft]);
    const fx_token drafts[2] = {draft, draft};
    struct test_drafter td = {.base.ops = &test_ops, .fixed = drafts, .n_fixed = 2};
    struct fx_spec_params sp = fx_spec_default_params();
    sp.draft_max = 2;
    sp.adaptive = false;
    struct fx_spec *spec;
    assert_int_equal(fx_spec_create(lm.ctx, &td.base, &sp, &spec, NULL), FX_OK);
    int *counts = calloc((size_t)nv, sizeof *counts),
        *rcounts = calloc((size_t)nv, sizeof *rcounts);
    assert_non_null(counts);
    assert_non_null(rcounts);
    const int draws = 4000;
    int rejected = 0;
    for (int i = 0; i < draws; i++) {
        assert_int_equal(fx_context_kv_truncate(lm.ctx, n, NULL), FX_OK);
        struct fx_sampler *s = sampler(nv, 0.8f, 5000 + (uint64_t)i);
        struct sink out = {0};
        int32_t n_out;
        assert_int_equal(fx_spec_step(spec, s, seq, n + 1, 0, sink_take, &out, &n_out, NULL),
                         FX_OK);
        assert_int_equal(n_out, out.n);
        /* The cache holds the sequence and every yielded token but the last. */
        assert_int_equal(fx_context_kv_len(lm.ctx), n + out.n);
        counts[out.tok[0]]++;
        if (out.tok[0] != draft) {
            rcounts[out.tok[0]]++;
            rejected++;
            assert_int_equal(out.n, 1);
        } else {
            assert_true(out.n >= 2);
        }
        fx_sampler_free(s);
    }
    struct fx_spec_stats st;
    fx_spec_stats(spec, &st);
    assert_int_equal(st.verify_steps, (uint64_t)draws);
    assert_int_equal(st.drafted, 2 * (uint64_t)draws);
    chi_square("drafted position vs p", counts, p, nv, draws);
    chi_square("after a rejection vs p without the draft", rcounts, rest, nv, rejected);
    fx_spec_free(spec);
    free(counts);
    free(rcounts);
    free(p);
    free(rest);
    fx_sampler_free(ref);
    free(l);
    lm_close(&lm);
}

/* ---- the verify step against plain decoding ------------------------------------------------- */

/* Plain decoding of n_gen tokens after prompt (temperature temp, seed 11): the sequence into
 * truth (prompt then tokens) and the context left holding it but the last token. */
static int32_t plain_run(struct lm *lm, const fx_token *prompt, int32_t n_prompt, int32_t n_gen,
                         float temp, fx_token *truth) {
    float *l = malloc((size_t)lm->n_vocab * sizeof *l);
    assert_non_null(l);
    struct fx_sampler *s = sampler(lm->n_vocab, temp, 11);
    assert_int_equal(fx_forward_batch_last(lm->ctx, prompt, n_prompt, 0, l, NULL), FX_OK);
    memcpy(truth, prompt, (size_t)n_prompt * sizeof *prompt);
    int32_t n = n_prompt;
    for (int32_t i = 0; i < n_gen; i++) {
        assert_int_equal(fx_sampler_sample(s, l, &truth[n], NULL), FX_OK);
        assert_int_equal(fx_sampler_accept(s, truth[n], NULL), FX_OK);
        n++;
        if (i + 1 < n_gen)
            assert_int_equal(fx_forward_token(lm->ctx, truth[n - 1], n - 1, l, NULL), FX_OK);
    }
    fx_sampler_free(s);
    free(l);
    return n;
}

/* Every row the spec context keeps equals the plain context's row, keys and values, bytes. */
static void assert_kv_rows_equal(const struct fx_context *a, const struct fx_context *b,
                                 int32_t n) {
    const struct fx_kv_contig *ka = &a->kv, *kb = &b->kv;
    assert_int_equal(ka->k_row, kb->k_row);
    for (int il = 0; il < ka->n_layer; il++)
        for (int g = 0; g < ka->n_head_kv; g++)
            for (int32_t pos = 0; pos < n; pos++) {
                uint8_t row_a[1 << 12], row_b[1 << 12]; /* keys: out of their tiles */
                assert_true(ka->k_row <= sizeof row_a);
                struct fx_kv_key_at at = fx_kv_contig_key(ka, il, g, pos);
                struct fx_kv_key_at bt = fx_kv_contig_key(kb, il, g, pos);
                fx_kv_tile_get(ka->type_k, ka->head_dim, at.tile, at.slot, 0, ka->head_dim, row_a);
                fx_kv_tile_get(kb->type_k, kb->head_dim, bt.tile, bt.slot, 0, kb->head_dim, row_b);
                if (memcmp(row_a, row_b, ka->k_row) != 0 ||
                    memcmp(fx_kv_contig_v(ka, il, g, pos), fx_kv_contig_v(kb, il, g, pos),
                           ka->v_row) != 0)
                    fail_msg("KV row differs: layer %d, KV head %d, position %d of %d", il, g, pos,
                             n);
            }
}

/* Speculation over the same prompt: tokens equal to plain decoding's, and after every step the
 * kept rows equal plain decoding's rows (memcmp), the rejected ones rolled back. */
static void spec_against_plain(const char *path, enum fx_type kv, struct fx_drafter *d,
                               int32_t draft_max, float temp, bool want_rejections) {
    struct lm plain, sp;
    lm_open(&plain, path, 256, kv);
    lm_open(&sp, path, 256, kv);
    fx_token prompt[128], truth[256], seq[256];
    int32_t n_prompt = tokenize(plain.m,
                                "one two three four one two three four one two three four one "
                                "two three four",
                                prompt, 128);
    const int32_t n_gen = 96;
    int32_t n_truth = plain_run(&plain, prompt, n_prompt, n_gen, temp, truth);
    struct fx_spec_params p = fx_spec_default_params();
    p.draft_max = draft_max;
    p.adaptive = false;
    struct fx_spec *spec;
    assert_int_equal(fx_spec_create(sp.ctx, d, &p, &spec, NULL), FX_OK);
    float *l = malloc((size_t)sp.n_vocab * sizeof *l);
    assert_non_null(l);
    struct fx_sampler *s = sampler(sp.n_vocab, temp, 11);
    assert_int_equal(fx_forward_batch_last(sp.ctx, prompt, n_prompt, 0, l, NULL), FX_OK);
    memcpy(seq, prompt, (size_t)n_prompt * sizeof *seq);
    int32_t n = n_prompt;
    assert_int_equal(fx_sampler_sample(s, l, &seq[n], NULL), FX_OK);
    assert_int_equal(fx_sampler_accept(s, seq[n], NULL), FX_OK);
    n++;
    while (n < n_truth) {
        struct sink out = {0};
        out.stop_at = n_truth - n; /* the end of the reference, possibly inside the drafts */
        assert_int_equal(fx_spec_step(spec, s, seq, n, 0, sink_take, &out, NULL, NULL), FX_OK);
        memcpy(seq + n, out.tok, (size_t)out.n * sizeof *seq);
        n += out.n;
        assert_int_equal(fx_context_kv_len(sp.ctx), n - 1);
        assert_memory_equal(seq, truth, (size_t)n * sizeof *seq);
        assert_kv_rows_equal(sp.ctx, plain.ctx, n - 1);
    }
    assert_int_equal(n, n_truth);
    struct fx_spec_stats st;
    fx_spec_stats(spec, &st);
    print_message("%s: %llu verify steps, %llu of %llu drafts kept\n", path,
                  (unsigned long long)st.verify_steps, (unsigned long long)st.accepted,
                  (unsigned long long)st.drafted);
    assert_true(st.verify_steps > 0 && st.accepted > 0);
    if (want_rejections)
        assert_true(st.accepted < st.drafted);
    fx_sampler_free(s);
    free(l);
    fx_spec_free(spec);
    lm_close(&sp);
    lm_close(&plain);
}

FX_TEST(spec_kv_rows_after_rollback_equal_plain_decoding) {
    struct fx_drafter *ng;
    assert_int_equal(fx_drafter_ngram_create(NULL, &ng, NULL), FX_OK);
    spec_against_plain(fx_test_model("stories260K.gguf"), FX_TYPE_F32, ng, 6, 0.0f, true);
    spec_against_plain(fx_test_model("stories260K.gguf"), FX_TYPE_F16, ng, 5, 0.8f, true);
    spec_against_plain(fx_test_fixture("models/llama-tiny.F32.gguf"), FX_TYPE_Q8_0, ng, 7, 0.0f,
                       true);
    spec_against_plain(fx_test_fixture("models/qwen3moe-tiny.Q8_0.gguf"), FX_TYPE_F32, ng, 4, 0.0f,
                       true);
    fx_drafter_free(ng);
}

FX_TEST(spec_draft_model_matches_plain_decoding_and_rolls_back) {
    /* A draft model: another quantization of the target (right often, wrong sometimes). */
    struct fx_model *target, *draft;
    assert_int_equal(
        fx_model_load(fx_test_fixture("models/qwen3-tiny.F32.gguf"), NULL, &target, NULL), FX_OK);
    assert_int_equal(
        fx_model_load(fx_test_fixture("models/qwen3-tiny.Q4_K_M.gguf"), NULL, &draft, NULL), FX_OK);
    struct fx_context_params cp = fx_context_default_params();
    cp.n_ctx = 256;
    cp.n_threads = 1;
    struct fx_drafter *d;
    assert_int_equal(fx_drafter_model_create(target, draft, &cp, &d, NULL), FX_OK);
    assert_string_equal(fx_drafter_name(d), "draft");
    spec_against_plain(fx_test_fixture("models/qwen3-tiny.F32.gguf"), FX_TYPE_F32, d, 5, 0.0f,
                       false);
    spec_against_plain(fx_test_fixture("models/qwen3-tiny.F32.gguf"), FX_TYPE_F32, d, 3, 0.8f,
                       false);
    fx_drafter_free(d);
    fx_model_free(draft);
    fx_model_free(target);
}

/* A copy of the fixture's vocabulary with one token's text or the tokenizer model changed. */
struct vocab_edit {
    const struct fx_gguf *src;
    int64_t token;     /* the token renamed, or -1 */
    const char *model; /* tokenizer.ggml.model, or NULL to keep it */
};

static void edit_vocab(void *user, struct fx_gguf_writer *w) {
    const struct vocab_edit *e = user;
    if (e->model)
        assert_int_equal(fx_gguf_writer_set_str(w, "tokenizer.ggml.model", e->model, NULL), FX_OK);
    if (e->token < 0)
        return;
    const void *arr;
    uint64_t n;
    assert_int_equal(
        fx_gguf_get_arr(e->src, "tokenizer.ggml.tokens", FX_GGUF_STRING, &arr, &n, NULL), FX_OK);
    const char **texts = calloc(n, sizeof *texts);
    assert_non_null(texts);
    for (uint64_t i = 0; i < n; i++)
        texts[i] = ((const struct fx_gguf_str *)arr)[i].data;
    texts[e->token] = "renamed";
    assert_int_equal(fx_gguf_writer_set_str_arr(w, "tokenizer.ggml.tokens", texts, n, NULL), FX_OK);
    free(texts);
}

static void expect_refused(const struct fx_model *target, const char *draft_path,
                           const char *needle) {
    struct fx_model *draft;
    assert_int_equal(fx_model_load(draft_path, NULL, &draft, NULL), FX_OK);
    struct fx_context_params cp = fx_context_default_params();
    cp.n_ctx = 64;
    struct fx_drafter *d = (struct fx_drafter *)1;
    struct fx_error e;
    assert_int_equal(fx_drafter_model_create(target, draft, &cp, &d, &e), FX_ERR_INVALID_ARG);
    assert_null(d);
    print_message("%s\n", e.msg);
    assert_non_null(strstr(e.msg, "the draft model's vocabulary differs from the target's"));
    if (!strstr(e.msg, needle))
        fail_msg("'%s' does not mention '%s'", e.msg, needle);
    fx_model_free(draft);
}

FX_TEST(spec_draft_model_refuses_another_vocabulary) {
    const char *base = fx_test_fixture("models/llama-tiny-tied.F32.gguf");
    struct fx_model *target;
    assert_int_equal(fx_model_load(base, NULL, &target, NULL), FX_OK);
    /* Another vocabulary altogether (32,000 tokens against 512). */
    expect_refused(target, fx_test_model("llama-2-tiny-random.gguf"),
                   "32000 tokens in the draft, 512 in the target");
    /* The same size, one token renamed; the same tokens, another tokenizer model. */
    struct vocab_edit e = {.src = fx_model_gguf(target), .token = 300};
    struct fx_test_gguf_edit edit = {.metadata = edit_vocab, .user = &e};
    const char *renamed = fx_test_tmpfile("renamed-token.gguf");
    fx_test_gguf_copy(base, renamed, &edit);
    expect_refused(target, renamed, "token 300 is 'renamed' in the draft");
    e = (struct vocab_edit){.src = fx_model_gguf(target), .token = -1, .model = "gpt2"};
    const char *other_model = fx_test_tmpfile("other-tokenizer.gguf");
    fx_test_gguf_copy(base, other_model, &edit);
    expect_refused(target, other_model, "tokenizer.ggml.model is 'gpt2' in the draft");
    /* The same vocabulary in another model (stories260K shares the fixtures' 512 tokens). */
    struct fx_model *same;
    assert_int_equal(fx_model_load(fx_test_model("stories260K.gguf"), NULL, &same, NULL), FX_OK);
    struct fx_context_params cp = fx_context_default_params();
    cp.n_ctx = 64;
    struct fx_drafter *d;
    assert_int_equal(fx_drafter_model_create(target, same, &cp, &d, NULL), FX_OK);
    fx_drafter_free(d);
    fx_model_free(same);
    fx_model_free(target);
}

/* ---- the controller ------------------------------------------------------------------------- */

/* Runs n_gen tokens of greedy speculation with drafter d (adaptive); returns the stats. */
static void adaptive_run(const char *path, struct fx_drafter *d, int32_t n_gen,
                         const fx_token *truth, struct fx_spec_stats *st) {
    struct lm lm;
    lm_open(&lm, path, 512, FX_TYPE_F32);
    fx_token seq[512];
    int32_t n_prompt = tokenize(lm.m, PROMPT, seq, 64);
    if (truth)
        assert_memory_equal(seq, truth, (size_t)n_prompt * sizeof *seq);
    float *l = malloc((size_t)lm.n_vocab * sizeof *l);
    assert_non_null(l);
    struct fx_sampler *s = sampler(lm.n_vocab, 0.0f, 0);
    assert_int_equal(fx_forward_batch_last(lm.ctx, seq, n_prompt, 0, l, NULL), FX_OK);
    int32_t n = n_prompt;
    assert_int_equal(fx_sampler_sample(s, l, &seq[n++], NULL), FX_OK);
    struct fx_spec *spec;
    struct fx_spec_params p = fx_spec_default_params();
    p.draft_max = 8;
    assert_int_equal(fx_spec_create(lm.ctx, d, &p, &spec, NULL), FX_OK);
    while (n < n_prompt + n_gen) {
        struct sink out = {0};
        assert_int_equal(
            fx_spec_step(spec, s, seq, n, n_prompt + n_gen - n, sink_take, &out, NULL, NULL),
            FX_OK);
        memcpy(seq + n, out.tok, (size_t)out.n * sizeof *seq);
        n += out.n;
        if (truth)
            assert_memory_equal(seq, truth, (size_t)n * sizeof *seq);
    }
    assert_int_equal(n, n_prompt + n_gen);
    fx_spec_stats(spec, st);
    fx_spec_free(spec);
    fx_sampler_free(s);
    free(l);
    lm_close(&lm);
}

/* The controller decides from measured step costs, so what it decides is checked here with
 * given costs (a plain step costs 1, each more row of a verify step `row`), not the machine's:
 * a test must not depend on how fast the kernels run. */
static struct fx_spec_stats drive_controller(bool drafts_right, double row, int32_t n_tokens) {
    struct fx_spec_params p = fx_spec_default_params();
    p.draft_max = 8;
    struct fx_spec_ctl c;
    fx_spec_ctl_init(&c, &p, 0);
    for (int32_t pos = 0; pos < n_tokens;) {
        int32_t k = fx_spec_ctl_choose_k(&c, pos);
        if (k == 0) {
            fx_spec_ctl_plain(&c, 1.0, pos);
            pos++;
            continue;
        }
        int32_t kept = drafts_right ? k : 0;
        fx_spec_ctl_verify(&c, k, kept, !drafts_right, kept + 1, 1.0 + row * k);
        pos += kept + 1;
    }
    return c.stats;
}

FX_TEST(spec_adaptive_switches_off_while_drafts_are_wrong) {
    /* Every draft rejected: each verify step costs more than a plain step and yields one token,
     * so speculation switches itself off and most tokens come from plain steps, k one draft. */
    struct fx_spec_stats st = drive_controller(false, 0.1, 400);
    print_message("wrong drafts: %llu verify steps, %llu plain tokens, off %llu times\n",
                  (unsigned long long)st.verify_steps, (unsigned long long)st.plain_out,
                  (unsigned long long)st.switched_off);
    assert_int_equal(st.accepted, 0);
    assert_true(st.switched_off >= 1);
    assert_true(st.plain_out > 300);
    assert_true(st.drafted < 2 * st.verify_steps + 8);

    /* Through fx_spec_step on a real model (its own timing): the text is the plain text and no
     * draft is kept, whatever the controller decided. */
    const fx_token wrong[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    struct test_drafter td = {.base.ops = &test_ops, .fixed = wrong, .n_fixed = 8};
    adaptive_run(fx_test_fixture("models/llama-tiny.F32.gguf"), &td.base, 200, NULL, &st);
    assert_int_equal(st.accepted, 0);
}

FX_TEST(spec_adaptive_grows_k_while_drafts_are_right) {
    /* Every draft kept and a row cheap next to a step (a batch reads each weight once): k grows
     * to draft_max and most tokens come from verify steps. With rows as dear as a whole step,
     * speculation cannot pay and stays small or off. */
    struct fx_spec_stats st = drive_controller(true, 0.05, 400);
    print_message("oracle drafts, cheap rows: %llu verify steps, %.2f tokens per step, %llu "
                  "plain tokens\n",
                  (unsigned long long)st.verify_steps,
                  (double)st.verify_out / (double)st.verify_steps,
                  (unsigned long long)st.plain_out);
    assert_int_equal(st.accepted, st.drafted);
    assert_true((double)st.verify_out / (double)st.verify_steps > 5.0);
    assert_true(st.plain_out < 100);
    struct fx_spec_stats dear = drive_controller(true, 1.5, 400);
    assert_true(dear.verify_out < st.verify_out);

    /* Through fx_spec_step with an oracle drafter (the plain greedy continuation): every draft
     * is kept and the text is unchanged (adaptive_run compares it). */
    const char *path = fx_test_fixture("models/llama-tiny.F32.gguf");
    struct lm lm;
    lm_open(&lm, path, 512, FX_TYPE_F32);
    fx_token prompt[64], truth[512];
    int32_t n_prompt = tokenize(lm.m, PROMPT, prompt, 64);
    int32_t n_truth = plain_run(&lm, prompt, n_prompt, 300, 0.0f, truth);
    lm_close(&lm);
    struct test_drafter td = {.base.ops = &test_ops, .truth = truth, .n_truth = n_truth};
    adaptive_run(path, &td.base, 300, truth, &st);
    assert_int_equal(st.accepted, st.drafted);
}
