/* ferrox bench --parallel: llama-batched-bench's measurement for ferrox.
 *
 * For each configuration (pp, tg, pl), pl sequences share one paged pool:
 *
 *   prefill: every row of the pl prompts of pp random tokens (sequence after sequence) goes
 *            through fx_forward_multi_seq, n_batch rows a step, logits asked for each
 *            sequence's last row only                                                  -> t_pp
 *   decode:  tg steps of fx_forward_multi_seq with one row per sequence, each row's token the
 *            greedy choice (argmax) of that sequence's previous logits                  -> t_tg
 *
 * and the figures are llama-batched-bench's: speed_pp = pl*pp / t_pp, speed_tg = pl*tg / t_tg,
 * n_kv = pl*(pp + tg), speed = n_kv / (t_pp + t_tg). One context and one pool, sized for the
 * largest configuration, serve every configuration; between two the sequences are freed and the
 * prefix cache emptied, so that no configuration reuses another's blocks. The first configuration
 * runs once untimed first (warm-up); with -r R each figure is the mean of R runs.
 *
 * With a depth D (-d), one root sequence is prefilled with D random tokens, untimed, once per
 * depth, and each configuration's pl sequences are forks of it: they start at position D sharing
 * the root's blocks (a common prefix, as a system prompt is shared; the partly filled last block
 * is copied by each sequence's first append). n_kv stays llama-batched-bench's pl*(pp + tg), the
 * positions the configuration evaluates. */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/bench.h"
#include "cli/util.h"
#include "core/clock.h"

#define BLOCK_SIZE 16

/* Everything a run needs, allocated before the first configuration. */
struct par_run {
    const struct fx_bench_parallel *p;
    struct fx_context *ctx;
    struct fx_kv_pool *pool;
    fx_seq_id root; /* the depth's tokens, forked by every sequence of a configuration */
    int depth;      /* the root's length; 0: no root */
    int n_vocab;
    int n_kv_max;       /* positions the pool holds */
    fx_seq_id *seq;     /* [max pl] live sequences */
    fx_token *next;     /* [max pl] each sequence's next token */
    fx_token *token;    /* [max pl * max pp] rows of a step */
    int32_t *pos;       /* [max pl * max pp] */
    fx_seq_id *row_seq; /* [max pl * max pp] */
    int8_t *want;       /* [max pl * max pp] logits wanted for the row */
    float *logits;      /* [max pl][n_vocab] */
};

/* Seconds on the clock the run times: the wall clock, or the process's CPU time. */
static double run_clock(const struct par_run *r) {
    return fx_clock_seconds(r->p->cpu_time ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC);
}

struct par_times {
    double t_pp, t_tg;
};

static int max_of(const int *x, int n) {
    int m = 0;
    for (int i = 0; i < n; i++)
        m = x[i] > m ? x[i] : m;
    return m;
}

/* Blocks pl sequences of n_pos positions each need after a shared root of depth positions:
 * the root's blocks, and each sequence's own from the root's last (partly filled) block on. */
static int64_t blocks_for(int depth, int pl, int n_pos) {
    int64_t own = depth % BLOCK_SIZE + n_pos;
    return (depth + BLOCK_SIZE - 1) / BLOCK_SIZE + pl * ((own + BLOCK_SIZE - 1) / BLOCK_SIZE);
}

/* The index of the largest logit, ties to the lowest: fx_cli_argmax's answer for finite logits,
 * but with eight independent maxima instead of one compare-and-select chain through memory,
 * which costs ~0.4 ms per row of 49152 logits, a fifth of a 16-row decode step. */
static fx_token argmax_row(const float *x, int n) {
    float m[8];
    for (int l = 0; l < 8; l++)
        m[l] = -INFINITY;
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++)
            m[l] = x[i + l] > m[l] ? x[i + l] : m[l];
    for (; i < n; i++)
        m[0] = x[i] > m[0] ? x[i] : m[0];
    float best = m[0];
    for (int l = 1; l < 8; l++)
        best = m[l] > best ? m[l] : best;
    for (int j = 0; j < n; j++)
        if (x[j] == best)
            return j;
    return 0;
}

static void release(struct par_run *r, int n_seq) {
    for (int j = 0; j < n_seq; j++)
        fx_kv_seq_free(r->pool, r->seq[j]);
    fx_kv_pool_clear_cache(r->pool);
}

static void free_root(struct par_run *r) {
    if (r->depth > 0)
        fx_kv_seq_free(r->pool, r->root);
    r->depth = 0;
    fx_kv_pool_clear_cache(r->pool);
}

/* The root sequence of depth random tokens, prefilled n_batch rows a step (untimed). */
static int make_root(struct par_run *r, int depth) {
    struct fx_error err;
    fx_status st = fx_kv_seq_create(r->pool, &r->root, &err);
    fx_token *token = malloc(sizeof(fx_token) * (size_t)depth);
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)depth);
    fx_seq_id *seq = malloc(sizeof(fx_seq_id) * (size_t)depth);
    int8_t *want = calloc((size_t)depth, 1);
    if (st == FX_OK && (!token || !pos || !seq || !want)) {
        st = FX_ERR_NOMEM;
        snprintf(err.msg, sizeof err.msg, "out of memory for %d rows", depth);
    }
    if (st == FX_OK) {
        r->depth = depth; /* the root is alive: free_root frees it */
        fx_cli_bench_random_tokens(token, depth, r->n_vocab);
        for (int i = 0; i < depth; i++)
            pos[i] = i, seq[i] = r->root;
        want[depth - 1] = 1;
    }
    for (int i = 0; st == FX_OK && i < depth; i += r->p->n_batch) {
        int n = depth - i < r->p->n_batch ? depth - i : r->p->n_batch;
        struct fx_batch b = {
            .n = n, .token = token + i, .pos = pos + i, .seq = seq + i, .logits = want + i};
        st = fx_forward_multi_seq(r->ctx, r->pool, &b, r->logits, &err);
    }
    free(token);
    free(pos);
    free(seq);
    free(want);
    if (st) {
        fprintf(stderr, "ferrox bench: --parallel depth %d: %s\n", depth, err.msg);
        free_root(r);
        return 1;
    }
    return 0;
}

/* One configuration, once, after the root's depth. */
static int run_config(struct par_run *r, int pp, int tg, int pl, struct par_times *t) {
    struct fx_error err;
    fx_status st = FX_OK;
    int n_seq = 0, d = r->depth;
    for (; n_seq < pl; n_seq++)
        if ((st = d > 0 ? fx_kv_seq_fork(r->pool, r->root, &r->seq[n_seq], &err)
                        : fx_kv_seq_create(r->pool, &r->seq[n_seq], &err)) != FX_OK)
            goto fail;
    if (r->p->progress) {
        int lo = INT32_MAX, hi = -1;
        for (int j = 0; j < pl; j++) {
            int32_t len = fx_kv_seq_len(r->pool, r->seq[j]);
            lo = len < lo ? len : lo;
            hi = len > hi ? len : hi;
        }
        fprintf(stderr,
                "ferrox bench: --parallel pp %d tg %d pl %d @ d%d: the sequences hold %d..%d "
                "positions\n",
                pp, tg, pl, d, lo, hi);
    }

    /* Prefill: the rows of sequence 0, then of sequence 1, ..., as llama-batched-bench adds
     * them to its batch. */
    int n_rows = pl * pp;
    fx_cli_bench_random_tokens(r->token, n_rows, r->n_vocab);
    for (int j = 0; j < pl; j++)
        for (int i = 0; i < pp; i++) {
            int k = j * pp + i;
            r->pos[k] = d + i;
            r->row_seq[k] = r->seq[j];
            r->want[k] = i == pp - 1;
        }
    int n_batch = r->p->n_batch;
    double t0 = run_clock(r);
    for (int i = 0, asked = 0; i < n_rows; i += n_batch) {
        int n = n_rows - i < n_batch ? n_rows - i : n_batch;
        struct fx_batch b = {.n = n,
                             .token = r->token + i,
                             .pos = r->pos + i,
                             .seq = r->row_seq + i,
                             .logits = r->want + i};
        if ((st = fx_forward_multi_seq(r->ctx, r->pool, &b,
                                       r->logits + (size_t)asked * (size_t)r->n_vocab, &err)))
            goto fail;
        for (int k = i; k < i + n; k++)
            asked += r->want[k];
    }
    double t1 = run_clock(r);
    for (int j = 0; j < pl; j++)
        r->next[j] = argmax_row(r->logits + (size_t)j * (size_t)r->n_vocab, r->n_vocab);

    /* Decode: one row per sequence a step, every row's logits. */
    for (int j = 0; j < pl; j++)
        r->row_seq[j] = r->seq[j];
    struct fx_batch b = {.n = pl, .token = r->next, .pos = r->pos, .seq = r->row_seq};
    double t2 = run_clock(r);
    for (int i = 0; i < tg; i++) {
        for (int j = 0; j < pl; j++)
            r->pos[j] = d + pp + i;
        if ((st = fx_forward_multi_seq(r->ctx, r->pool, &b, r->logits, &err)))
            goto fail;
        for (int j = 0; j < pl; j++)
            r->next[j] = argmax_row(r->logits + (size_t)j * (size_t)r->n_vocab, r->n_vocab);
    }
    double t3 = run_clock(r);
    release(r, n_seq);
    t->t_pp = t1 - t0;
    t->t_tg = t3 - t2;
    return 0;
fail:
    fprintf(stderr, "ferrox bench: --parallel pp %d tg %d pl %d @ d%d: %s\n", pp, tg, pl, d,
            err.msg);
    release(r, n_seq);
    return 1;
}

static void print_config(const struct par_run *r, int pp, int tg, int pl,
                         const struct par_times *t) {
    const struct fx_bench_parallel *p = r->p;
    int n_kv = pl * (pp + tg);
    double total = t->t_pp + t->t_tg;
    double speed_pp = t->t_pp > 0 ? pl * (double)pp / t->t_pp : 0.0;
    double speed_tg = t->t_tg > 0 ? pl * (double)tg / t->t_tg : 0.0;
    double speed = total > 0 ? n_kv / total : 0.0;
    const char *tk = fx_cli_kv_type_name(p->type_k), *tv = fx_cli_kv_type_name(p->type_v);
    if (p->out == FX_BENCH_MD) {
        if (p->show_depth)
            printf("|%6d ", r->depth);
        printf("|%6d | %6d | %4d | %6d | %8.3f | %8.2f | %8.3f | %8.2f | %8.3f | %8.2f |\n", pp, tg,
               pl, n_kv, t->t_pp, speed_pp, t->t_tg, speed_tg, total, speed);
    } else if (p->out == FX_BENCH_CSV) {
        printf("\"%s\",\"%s\",%d,%d,%d,%s,%s,%d,%d,%d,%d,%d,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f\n",
               p->model_path, p->model_desc, r->n_kv_max, p->n_batch, p->n_threads, tk, tv,
               r->depth, pp, tg, pl, n_kv, t->t_pp, speed_pp, t->t_tg, speed_tg, total, speed);
    } else {
        json_t *o = json_object();
        json_object_set_new(o, "model_filename", json_string(p->model_path));
        json_object_set_new(o, "model_type", json_string(p->model_desc));
        json_object_set_new(o, "n_kv_max", json_integer(r->n_kv_max));
        json_object_set_new(o, "n_batch", json_integer(p->n_batch));
        json_object_set_new(o, "n_ubatch", json_integer(p->n_batch));
        json_object_set_new(o, "is_pp_shared", json_integer(0));
        json_object_set_new(o, "n_threads", json_integer(p->n_threads));
        json_object_set_new(o, "n_threads_batch", json_integer(p->n_threads));
        json_object_set_new(o, "type_k", json_string(tk));
        json_object_set_new(o, "type_v", json_string(tv));
        json_object_set_new(o, "repetitions", json_integer(p->reps));
        json_object_set_new(o, "n_depth", json_integer(r->depth));
        json_object_set_new(o, "pp", json_integer(pp));
        json_object_set_new(o, "tg", json_integer(tg));
        json_object_set_new(o, "pl", json_integer(pl));
        json_object_set_new(o, "n_kv", json_integer(n_kv));
        json_object_set_new(o, "t_pp", json_real(t->t_pp));
        json_object_set_new(o, "speed_pp", json_real(speed_pp));
        json_object_set_new(o, "t_tg", json_real(t->t_tg));
        json_object_set_new(o, "speed_tg", json_real(speed_tg));
        json_object_set_new(o, "t", json_real(total));
        json_object_set_new(o, "speed", json_real(speed));
        char *text = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
        if (text)
            printf("%s\n", text);
        free(text);
        json_decref(o);
    }
    fflush(stdout);
}

void fx_cli_bench_parallel_csv_header(void) {
    printf("model_filename,model_type,n_kv_max,n_batch,n_threads,type_k,type_v,n_depth,pp,tg,pl,"
           "n_kv,t_pp,speed_pp,t_tg,speed_tg,t,speed\n");
}

static int run_all(struct par_run *r) {
    const struct fx_bench_parallel *p = r->p;
    struct par_times t;
    if (run_config(r, p->pp[0], p->tg[0], p->pl[0], &t)) /* warm-up */
        return 1;
    if (p->out == FX_BENCH_MD) {
        printf("\n%s: n_kv_max = %d, n_batch = %d, n_threads = %d, type_k = %s, type_v = %s, "
               "repetitions = %d\n\n",
               p->model_desc, r->n_kv_max, p->n_batch, p->n_threads, fx_cli_kv_type_name(p->type_k),
               fx_cli_kv_type_name(p->type_v), p->reps);
        if (p->show_depth)
            printf("|%6s ", "D");
        printf("|%6s | %6s | %4s | %6s | %8s | %8s | %8s | %8s | %8s | %8s |\n", "PP", "TG", "B",
               "N_KV", "T_PP s", "S_PP t/s", "T_TG s", "S_TG t/s", "T s", "S t/s");
        if (p->show_depth)
            printf("|%6s-", "------");
        printf("|%6s-|-%6s-|-%4s-|-%6s-|-%8s-|-%8s-|-%8s-|-%8s-|-%8s-|-%8s-|\n", "------", "------",
               "----", "------", "--------", "--------", "--------", "--------", "--------",
               "--------");
    }
    for (int di = 0; di < p->n_depth; di++) {
        if (p->depth[di] > 0 && make_root(r, p->depth[di]))
            return 1;
        for (int a = 0; a < p->n_pp; a++)
            for (int b = 0; b < p->n_tg; b++)
                for (int c = 0; c < p->n_pl; c++) {
                    struct par_times sum = {0.0, 0.0};
                    for (int rep = 0; rep < p->reps; rep++) {
                        if (run_config(r, p->pp[a], p->tg[b], p->pl[c], &t)) {
                            free_root(r);
                            return 1;
                        }
                        sum.t_pp += t.t_pp;
                        sum.t_tg += t.t_tg;
                    }
                    sum.t_pp /= p->reps;
                    sum.t_tg /= p->reps;
                    print_config(r, p->pp[a], p->tg[b], p->pl[c], &sum);
                }
        free_root(r);
    }
    return 0;
}

int fx_cli_bench_parallel(const struct fx_model *m, const struct fx_bench_parallel *p) {
    int max_pp = max_of(p->pp, p->n_pp), max_tg = max_of(p->tg, p->n_tg);
    int max_pl = max_of(p->pl, p->n_pl), max_d = max_of(p->depth, p->n_depth);
    int64_t max_blocks = blocks_for(0, p->pl[0], p->pp[0] + p->tg[0]); /* the warm-up's */
    for (int di = 0; di < p->n_depth; di++)
        for (int a = 0; a < p->n_pp; a++)
            for (int b = 0; b < p->n_tg; b++)
                for (int c = 0; c < p->n_pl; c++) {
                    int64_t n = blocks_for(p->depth[di], p->pl[c], p->pp[a] + p->tg[b]);
                    max_blocks = n > max_blocks ? n : max_blocks;
                }
    struct par_run r = {.p = p, .n_vocab = fx_model_n_vocab(m)};
    struct fx_error err;
    int rc = 1;
    if ((int64_t)max_pl * max_pp > 1 << 24 || (int64_t)max_blocks * BLOCK_SIZE > INT32_MAX) {
        fprintf(stderr, "ferrox bench: --parallel %d x %d prompt rows are too many\n", max_pl,
                max_pp);
        return 1;
    }

    struct fx_context_params cp = fx_context_default_params();
    cp.n_ctx = max_d + max_pp + max_tg;
    cp.n_batch = p->n_batch;
    cp.n_threads = p->n_threads;
    cp.type_k = p->type_k;
    cp.type_v = p->type_v;
    cp.paged_only = true;
    struct fx_kv_pool_params kp = fx_kv_pool_default_params();
    kp.n_blocks = (int32_t)max_blocks;
    kp.block_size = BLOCK_SIZE;
    kp.n_seq_max = max_pl + 1; /* and the depth's root */
    kp.type_k = p->type_k;
    kp.type_v = p->type_v;
    if (fx_context_create(m, &cp, &r.ctx, &err) != FX_OK ||
        fx_kv_pool_create(m, &kp, &r.pool, &err) != FX_OK) {
        fprintf(stderr, "ferrox bench: %s\n", err.msg);
        goto done;
    }
    r.n_kv_max = (int)max_blocks * BLOCK_SIZE;

    size_t rows = (size_t)max_pl * (size_t)max_pp;
    rows = rows > (size_t)max_pl ? rows : (size_t)max_pl;
    r.seq = malloc(sizeof(fx_seq_id) * (size_t)max_pl);
    r.next = malloc(sizeof(fx_token) * (size_t)max_pl);
    r.token = malloc(sizeof(fx_token) * rows);
    r.pos = malloc(sizeof(int32_t) * rows);
    r.row_seq = malloc(sizeof(fx_seq_id) * rows);
    r.want = malloc(rows);
    r.logits = malloc(sizeof(float) * (size_t)max_pl * (size_t)r.n_vocab);
    if (!r.seq || !r.next || !r.token || !r.pos || !r.row_seq || !r.want || !r.logits) {
        fprintf(stderr, "ferrox bench: out of memory for %zu rows\n", rows);
        goto done;
    }
    rc = run_all(&r);
done:
    free(r.seq);
    free(r.next);
    free(r.token);
    free(r.pos);
    free(r.row_seq);
    free(r.want);
    free(r.logits);
    fx_kv_pool_free(r.pool);
    fx_context_free(r.ctx);
    return rc;
}
