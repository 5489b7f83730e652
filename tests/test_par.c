/* core/par: the worker pool. These tests also run under ThreadSanitizer (.ci/run), which turns a
 * barrier that fails to order memory into a reported data race, not just a wrong number. */
#include "fx_test.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/cpu.h"
#include "core/par.h"

static struct fx_pool *make_pool(int n) {
    struct fx_pool *pool = NULL;
    struct fx_error err = {0};
    fx_status st = fx_pool_create(n, &pool, &err);
    if (st != FX_OK)
        fail_msg("fx_pool_create(%d): %s", n, err.msg);
    return pool;
}

static void sleep_us(long us) {
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

/* ---- every worker runs once per run, with the right (ith, nth) ------------------------------ */

#define MAX_W 64

struct census {
    struct fx_pool *pool;
    pthread_t caller;
    _Atomic int hits[MAX_W];
    _Atomic int bad; /* wrong nth or pool, out-of-range ith, worker 0 not the caller */
    pthread_t self[MAX_W];
};

static void census_fn(const struct fx_worker *w, void *arg) {
    struct census *c = arg;
    if (w->nth != fx_pool_size(c->pool) || w->pool != c->pool || w->ith < 0 || w->ith >= w->nth ||
        (w->ith == 0) != pthread_equal(pthread_self(), c->caller)) {
        atomic_fetch_add(&c->bad, 1);
        return;
    }
    atomic_fetch_add(&c->hits[w->ith], 1);
    c->self[w->ith] = pthread_self();
}

FX_TEST(par_every_worker_runs_once_per_run) {
    static const int sizes[] = {1, 2, 3, 4, 7};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        int n = sizes[s];
        struct fx_pool *pool = make_pool(n);
        assert_int_equal(fx_pool_size(pool), n);
        struct census *c = calloc(1, sizeof *c);
        assert_non_null(c);
        c->pool = pool;
        c->caller = pthread_self();
        const int runs = 200;
        for (int r = 0; r < runs; r++) {
            assert_int_equal(fx_par_run(pool, census_fn, c), FX_OK);
            /* After the run returns every worker has finished: the counts are final. */
            for (int i = 0; i < n; i++)
                assert_int_equal(atomic_load(&c->hits[i]), r + 1);
        }
        assert_int_equal(atomic_load(&c->bad), 0);
        /* Each worker is its own thread, and the same thread from run to run. */
        for (int i = 0; i < n; i++)
            for (int j = i + 1; j < n; j++)
                assert_false(pthread_equal(c->self[i], c->self[j]));
        free(c);
        fx_pool_free(pool);
    }
}

/* ---- barriers order memory ------------------------------------------------------------------ */

/* Each phase computes next[i] from several cells of prev that other workers wrote in the previous
 * phase, in plain (non-atomic) memory: without a working barrier the result is wrong and TSan
 * reports a race. Some workers are delayed now and then so that the others give up spinning and
 * sleep in the futex. */
#define CELLS  1000
#define PHASES 40

struct phases {
    uint32_t buf[2][CELLS];
    int64_t granule;
    int delay_every; /* a worker sleeps before the barrier in one phase out of delay_every */
};

static uint32_t mix(const uint32_t *prev, int64_t i, int phase) {
    return prev[(i + 1) % CELLS] * 2654435761u + prev[(i * 7 + phase) % CELLS] + (uint32_t)i;
}

static void phases_fn(const struct fx_worker *w, void *arg) {
    struct phases *p = arg;
    for (int ph = 0; ph < PHASES; ph++) {
        const uint32_t *prev = p->buf[ph & 1];
        uint32_t *next = p->buf[(ph + 1) & 1];
        int64_t b, e;
        fx_par_range(CELLS, w->ith, w->nth, p->granule, &b, &e);
        for (int64_t i = b; i < e; i++)
            next[i] = mix(prev, i, ph);
        if (p->delay_every && (ph + w->ith) % p->delay_every == 0 && w->ith == ph % w->nth)
            sleep_us(2000); /* longer than the spin: everyone else sleeps */
        fx_par_barrier(w);
    }
}

static void phases_reference(uint32_t *cells) {
    uint32_t tmp[CELLS];
    for (int ph = 0; ph < PHASES; ph++) {
        for (int64_t i = 0; i < CELLS; i++)
            tmp[i] = mix(cells, i, ph);
        memcpy(cells, tmp, sizeof tmp);
    }
}

static void check_phases(struct fx_pool *pool, int runs, int delay_every) {
    struct phases *p = calloc(1, sizeof *p);
    assert_non_null(p);
    uint32_t *want = calloc(CELLS, sizeof *want);
    assert_non_null(want);
    for (int r = 0; r < runs; r++) {
        for (int i = 0; i < CELLS; i++)
            p->buf[0][i] = want[i] = (uint32_t)(i * 31 + r);
        p->granule = (int64_t[]){1, 8, 33, 64}[r % 4];
        p->delay_every = delay_every;
        assert_int_equal(fx_par_run(pool, phases_fn, p), FX_OK);
        phases_reference(want);
        /* PHASES is even: the last phase wrote buf[0]. */
        assert_memory_equal(p->buf[PHASES & 1], want, CELLS * sizeof *want);
    }
    free(want);
    free(p);
}

FX_TEST(par_barrier_orders_memory_across_phases_and_runs) {
    static const int sizes[] = {2, 3, 4};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        struct fx_pool *pool = make_pool(sizes[s]);
        check_phases(pool, 30, 0);
        check_phases(pool, 3, 7);
        fx_pool_free(pool);
    }
}

/* ---- broadcast ------------------------------------------------------------------------------ */

struct bcast {
    int64_t got[MAX_W][64];
};

static void bcast_fn(const struct fx_worker *w, void *arg) {
    struct bcast *b = arg;
    /* Back-to-back broadcasts with no other barrier between them reuse the two slots in turn. */
    for (int k = 0; k < 64; k++)
        b->got[w->ith][k] = fx_par_broadcast(w, w->ith == 0 ? 1000 + k * k : -1);
}

FX_TEST(par_broadcast_hands_worker0_value_to_all) {
    static const int sizes[] = {1, 2, 5};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        struct fx_pool *pool = make_pool(sizes[s]);
        struct bcast *b = calloc(1, sizeof *b);
        assert_non_null(b);
        for (int r = 0; r < 10; r++) {
            assert_int_equal(fx_par_run(pool, bcast_fn, b), FX_OK);
            for (int i = 0; i < sizes[s]; i++)
                for (int k = 0; k < 64; k++)
                    assert_int_equal(b->got[i][k], 1000 + k * k);
        }
        free(b);
        fx_pool_free(pool);
    }
}

/* ---- cold entries and nesting --------------------------------------------------------------- */

struct nest {
    struct fx_pool *self, *other;
    _Atomic int rejected, inner_calls;
};

static void inner_fn(const struct fx_worker *w, void *arg) {
    (void)w;
    struct nest *n = arg;
    atomic_fetch_add(&n->inner_calls, 1);
}

static void many_regions_fn(const struct fx_worker *w, void *arg) {
    struct nest *n = arg;
    for (int i = 0; i < 25; i++)
        fx_par_barrier(w);
    if (fx_par_run(n->self, inner_fn, n) == FX_ERR_INVALID_ARG)
        atomic_fetch_add(&n->rejected, 1);
    if (fx_par_run(n->other, inner_fn, n) == FX_ERR_INVALID_ARG)
        atomic_fetch_add(&n->rejected, 1);
    fx_par_barrier(w);
}

FX_TEST(par_cold_entries_count_outside_entries_only) {
    static const int sizes[] = {1, 3};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        struct nest n = {.self = make_pool(sizes[s]), .other = make_pool(2)};
        uint64_t before = fx_par_cold_entries();
        for (int r = 0; r < 10; r++)
            assert_int_equal(fx_par_run(n.self, many_regions_fn, &n), FX_OK);
        /* Ten entries whatever the number of barriers inside; nested entries are rejected on
         * the same pool and on another one, are not counted and never call fn. */
        assert_int_equal(fx_par_cold_entries() - before, 10);
        assert_int_equal(atomic_load(&n.rejected), 2 * 10 * sizes[s]);
        assert_int_equal(atomic_load(&n.inner_calls), 0);
        /* The caller is outside again: a new entry works and counts. */
        assert_int_equal(fx_par_run(n.other, inner_fn, &n), FX_OK);
        assert_int_equal(atomic_load(&n.inner_calls), 2);
        assert_int_equal(fx_par_cold_entries() - before, 11);
        fx_pool_free(n.self);
        fx_pool_free(n.other);
    }
}

/* ---- pool sizes ----------------------------------------------------------------------------- */

static void one_fn(const struct fx_worker *w, void *arg) {
    int *seen = arg;
    fx_par_barrier(w); /* a no-op with one worker */
    int64_t b, e;
    fx_par_range(10, w->ith, w->nth, 1, &b, &e);
    seen[0] = w->ith;
    seen[1] = w->nth;
    seen[2] = (int)(e - b);
    seen[3] = (int)fx_par_broadcast(w, 42);
    seen[4] = pthread_equal(pthread_self(), *(pthread_t *)(seen + 8));
}

FX_TEST(par_pool_of_one_runs_on_the_caller) {
    struct fx_pool *pool = make_pool(1);
    assert_int_equal(fx_pool_size(pool), 1);
    int seen[8 + sizeof(pthread_t) / sizeof(int) + 1] = {0};
    pthread_t self = pthread_self();
    memcpy(seen + 8, &self, sizeof self);
    seen[0] = seen[1] = -1;
    assert_int_equal(fx_par_run(pool, one_fn, seen), FX_OK);
    assert_int_equal(seen[0], 0);
    assert_int_equal(seen[1], 1);
    assert_int_equal(seen[2], 10);
    assert_int_equal(seen[3], 42);
    assert_true(seen[4]);
    fx_pool_free(pool);
}

FX_TEST(par_create_free_repeatedly) {
    fx_pool_free(NULL);
    struct census *c = calloc(1, sizeof *c);
    assert_non_null(c);
    c->caller = pthread_self();
    for (int k = 0; k < 60; k++) {
        struct fx_pool *pool = make_pool(1 + k % 5);
        if (k % 3) { /* some pools are freed without ever running */
            memset(c->hits, 0, sizeof c->hits);
            c->pool = pool;
            assert_int_equal(fx_par_run(pool, census_fn, c), FX_OK);
            for (int i = 0; i < fx_pool_size(pool); i++)
                assert_int_equal(atomic_load(&c->hits[i]), 1);
        }
        fx_pool_free(pool);
    }
    assert_int_equal(atomic_load(&c->bad), 0);
    free(c);
}

FX_TEST(par_sizes_default_and_above_cpu_count) {
    struct fx_pool *pool = make_pool(0);
    assert_int_equal(fx_pool_size(pool), fx_cpu_count());
    fx_pool_free(pool);

    /* More workers than CPUs: they must still meet at every barrier (by sleeping, not spinning). */
    int n = 4 * fx_cpu_count() + 1;
    if (n > MAX_W)
        n = MAX_W;
    pool = make_pool(n);
    assert_int_equal(fx_pool_size(pool), n);
    check_phases(pool, 4, 0);
    fx_pool_free(pool);

    struct fx_error err = {0};
    assert_int_equal(fx_pool_create(-1, &pool, &err), FX_ERR_INVALID_ARG);
    assert_null(pool);
    assert_non_null(strstr(err.msg, "-1"));
    assert_int_equal(fx_pool_create(FX_POOL_MAX_THREADS + 1, &pool, &err), FX_ERR_INVALID_ARG);
    assert_null(pool);
}

/* ---- concurrent callers --------------------------------------------------------------------- */

struct caller_arg {
    struct fx_pool *pool;
    int failures;
};

static void *caller_main(void *p) {
    struct caller_arg *a = p;
    for (int r = 0; r < 8; r++) {
        struct phases *ph = calloc(1, sizeof *ph);
        uint32_t want[CELLS];
        for (int i = 0; i < CELLS; i++)
            ph->buf[0][i] = want[i] = (uint32_t)(i ^ r);
        ph->granule = 1;
        if (fx_par_run(a->pool, phases_fn, ph) != FX_OK)
            a->failures++;
        phases_reference(want);
        if (memcmp(ph->buf[PHASES & 1], want, sizeof want) != 0)
            a->failures++;
        free(ph);
    }
    return NULL;
}

FX_TEST(par_concurrent_callers_are_serialised) {
    struct fx_pool *pool = make_pool(3);
    struct caller_arg args[3];
    pthread_t t[3];
    for (int i = 0; i < 3; i++) {
        args[i] = (struct caller_arg){.pool = pool};
        assert_int_equal(pthread_create(&t[i], NULL, caller_main, &args[i]), 0);
    }
    for (int i = 0; i < 3; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(args[i].failures, 0);
    }
    fx_pool_free(pool);
}

/* ---- idle workers sleep --------------------------------------------------------------------- */

struct clocks {
    clockid_t id[MAX_W];
};

static void clock_fn(const struct fx_worker *w, void *arg) {
    struct clocks *c = arg;
    pthread_getcpuclockid(pthread_self(), &c->id[w->ith]);
}

static int64_t cpu_ns(clockid_t id) {
    struct timespec ts;
    if (clock_gettime(id, &ts) != 0)
        fail_msg("clock_gettime on a worker's CPU clock failed");
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

FX_TEST(par_idle_workers_stop_using_cpu) {
    struct fx_pool *pool = make_pool(3);
    struct clocks c;
    assert_int_equal(fx_par_run(pool, clock_fn, &c), FX_OK);
    sleep_us(20000); /* well past the spin */
    int64_t t0[MAX_W];
    for (int i = 1; i < 3; i++)
        t0[i] = cpu_ns(c.id[i]);
    sleep_us(200000);
    /* A spinning worker would use ~200 ms of CPU here; a sleeping one uses none. */
    for (int i = 1; i < 3; i++)
        assert_true(cpu_ns(c.id[i]) - t0[i] < 10000000);
    fx_pool_free(pool);
}

/* ---- range splitting ------------------------------------------------------------------------ */

FX_TEST(par_range_splits_evenly_on_granules) {
    static const int64_t ns[] = {0, 1, 5, 31, 32, 33, 100, 1000, 4097};
    static const int64_t granules[] = {0, 1, 4, 32, 256};
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
        for (size_t g = 0; g < sizeof granules / sizeof granules[0]; g++)
            for (int nth = 1; nth <= 9; nth++) {
                int64_t n = ns[a], gr = granules[g] < 1 ? 1 : granules[g];
                int64_t units = (n + gr - 1) / gr, prev_end = 0, prev_units = -1;
                for (int ith = 0; ith < nth; ith++) {
                    int64_t b, e;
                    fx_par_range(n, ith, nth, granules[g], &b, &e);
                    /* Contiguous, in order, covering [0, n). */
                    assert_int_equal(b, prev_end);
                    assert_true(e >= b && e <= n);
                    prev_end = e;
                    /* Boundaries on granules. */
                    assert_true(b == n || b % gr == 0);
                    assert_true(e == n || e % gr == 0);
                    /* Shares of units/nth or one more, larger ones first. */
                    int64_t u = (e - b + gr - 1) / gr;
                    assert_true(u == units / nth || u == units / nth + 1);
                    if (prev_units >= 0)
                        assert_true(u <= prev_units);
                    prev_units = u;
                }
                assert_int_equal(prev_end, n);
            }
}

/* ---- dynamic sharing ------------------------------------------------------------------------ */

static const int64_t claim_loops[] = {7, 0, 1, 100, 3, 0, 1000, 2};
#define CLAIM_LOOPS (sizeof claim_loops / sizeof claim_loops[0])
#define CLAIM_TOTAL (7 + 0 + 1 + 100 + 3 + 0 + 1000 + 2)

struct claims {
    _Atomic int count[CLAIM_TOTAL]; /* per loop's item, loops one after another */
    _Atomic int out_of_order;       /* a worker got an item below one it had before */
};

/* Each loop of claim_loops, separated by barriers; worker 1 dawdles now and then so that the
 * others take more items. */
static void claims_fn(const struct fx_worker *w, void *arg) {
    struct claims *c = arg;
    int64_t first = 0;
    for (size_t l = 0; l < CLAIM_LOOPS; l++) {
        int64_t item, prev = -1;
        while (fx_par_claim(w, claim_loops[l], &item)) {
            if (item <= prev || item < 0 || item >= claim_loops[l])
                atomic_fetch_add(&c->out_of_order, 1);
            else
                atomic_fetch_add(&c->count[first + item], 1);
            prev = item;
            if (w->ith == 1 && item % 5 == 0)
                sleep_us(20);
        }
        first += claim_loops[l];
        fx_par_barrier(w);
    }
}

FX_TEST(par_claim_hands_out_every_item_once_per_loop) {
    static const int sizes[] = {1, 2, 3, 5};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        struct fx_pool *pool = make_pool(sizes[s]);
        for (int run = 0; run < 3; run++) { /* tickets start afresh with each run */
            struct claims *c = calloc(1, sizeof *c);
            assert_non_null(c);
            assert_int_equal(fx_par_run(pool, claims_fn, c), FX_OK);
            assert_int_equal(atomic_load(&c->out_of_order), 0);
            for (int64_t i = 0; i < CLAIM_TOTAL; i++)
                if (atomic_load(&c->count[i]) != 1)
                    fail_msg("%d workers, run %d: item %lld claimed %d times", sizes[s], run,
                             (long long)i, atomic_load(&c->count[i]));
            free(c);
        }
        fx_pool_free(pool);
    }
}
