/* The worker pool (see par.h for the contract).
 *
 * Every wait in the pool is on an event: a 32-bit word that the waiter watches until it differs
 * from the value it last saw. A waiter first spins on the word with a pause instruction for a
 * bounded time (yielding its CPU after the first microseconds, see YIELD_AFTER_NS), then
 * registers as a sleeper and sleeps on the word with a futex; whoever changes
 * the word issues a futex wake only when someone is registered, so a pool whose workers are all
 * spinning makes no system call at all. Memory ordering comes from the atomics alone (release on
 * every change, acquire on every observation); the futex only parks threads.
 *
 * Three events drive a run:
 *   start  advanced by worker 0 to launch a run (or to stop the pool); the job (fn, arg, stop)
 *          is written before it, so a worker that sees the new value sees the job.
 *   done   counts the workers 1..n-1 that have returned from fn; worker 0 waits for n - 1.
 *   gen    the barrier generation, advanced by the last worker to arrive at a barrier.
 *
 * fx_par_claim hands out tickets from one counter that only grows during a run: a loop over n
 * items draws n successful tickets and then exactly one failing ticket per worker, so every
 * worker knows where the next loop's tickets start (its own base, advanced by n + nth) without
 * resetting the counter, which would need a barrier of its own.
 */
#include "core/par.h"

#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/cpu.h"
#include "core/error.h"

/* How long a waiter spins before it sleeps. Long enough to cover the imbalance between workers
 * at a barrier and the gap between two decode steps (sampling, streaming a token), short enough
 * that an idle pool stops using CPU almost at once. Pools with more workers than CPUs never spin:
 * a spinning waiter would then hold the CPU that the worker it waits for needs. */
#define SPIN_NS 300000

/* After this long a spinning waiter yields its CPU (sched_yield) each time it reads the clock.
 * When the machine has more runnable threads than CPUs (other processes), the worker it waits for
 * may be queued behind it, and a pure spin holds the CPU that worker needs for the rest of its
 * time slice, at every barrier: a 2-thread decode of smollm2-135m at load average 9 on 2 vCPUs
 * ran at 4-13 tokens/s spinning, 46-50 yielding after 2 us, 33-36 after 10 us
 * (docs/PERFORMANCE.md). On a CPU with nothing else to run sched_yield returns at once, so
 * the wait stays a spin and still sees the other worker's arrival within a microsecond. */
#define YIELD_AFTER_NS 2000

#define CACHE_LINE 64

struct event {
    _Alignas(CACHE_LINE) _Atomic uint32_t seq;
    _Atomic uint32_t sleepers;
};

struct fx_pool {
    int n;
    int n_started; /* threads created so far: [1, n_started] are running */
    int64_t spin_ns;
    pthread_t *threads;         /* [n]; [0] is unused (worker 0 is the caller) */
    struct fx_worker *workers;  /* [n] */
    pthread_mutex_t entry_lock; /* serialises callers of fx_par_run */

    /* The job of the current run; written by worker 0 before it advances `start`. */
    fx_par_fn fn;
    void *arg;
    bool stop;

    struct event start, done, gen;
    _Alignas(CACHE_LINE) _Atomic uint32_t arrived; /* workers at the current barrier */
    int64_t bcast[2]; /* fx_par_broadcast's slot, alternating by barrier generation */

    _Alignas(CACHE_LINE) _Atomic int64_t claim_next; /* fx_par_claim's next ticket */
    struct claim_base *claim_base;                   /* [n]: each worker's first ticket */
};

/* Where a worker's next claim loop starts; written by that worker only. */
struct claim_base {
    _Alignas(CACHE_LINE) int64_t ticket;
};

static _Atomic uint64_t cold_entries;

/* Nonzero while this thread runs inside a pool: always on the pool's own threads, during
 * fx_par_run on its caller. */
static _Thread_local int inside_pool;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield");
#endif
}

static void futex_wait(_Atomic uint32_t *word, uint32_t expected) {
    /* Returns at once when *word != expected; EINTR and spurious wake-ups are handled by the
     * caller's loop. */
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
}

static void futex_wake_all(_Atomic uint32_t *word) {
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/* Waits until e->seq != seen and returns the new value (acquire). */
static uint32_t event_wait(struct event *e, uint32_t seen, int64_t spin_ns) {
    uint32_t v;
    if (spin_ns > 0) {
        int64_t deadline = 0;
        for (unsigned i = 1;; i++) {
            v = atomic_load_explicit(&e->seq, memory_order_acquire);
            if (v != seen)
                return v;
            cpu_relax();
            if ((i & 63) == 0) { /* the clock costs more than a pause; read it now and then */
                int64_t t = fx_now_ns();
                if (deadline == 0)
                    deadline = t + spin_ns;
                else if (t >= deadline)
                    break;
                else if (t >= deadline - spin_ns + YIELD_AFTER_NS)
                    sched_yield();
            }
        }
    }
    for (;;) {
        v = atomic_load_explicit(&e->seq, memory_order_acquire);
        if (v != seen)
            return v;
        /* Registering before the futex's own check of the word pairs with event_wake's check
         * of `sleepers` after its change of the word (both sequentially consistent): either
         * the waker sees a sleeper and wakes it, or the futex sees the new value and returns. */
        atomic_fetch_add(&e->sleepers, 1);
        futex_wait(&e->seq, seen);
        atomic_fetch_sub(&e->sleepers, 1);
    }
}

/* Wakes the sleepers of e after its word was changed with a sequentially consistent RMW. */
static void event_wake(struct event *e) {
    if (atomic_load(&e->sleepers) != 0)
        futex_wake_all(&e->seq);
}

static uint32_t barrier_pass(struct fx_pool *pool) {
    /* The generation cannot advance before this worker arrives, and this worker saw every
     * earlier advance, so a relaxed load reads the current one. */
    uint32_t g = atomic_load_explicit(&pool->gen.seq, memory_order_relaxed);
    if (atomic_fetch_add_explicit(&pool->arrived, 1, memory_order_acq_rel) ==
        (uint32_t)pool->n - 1) {
        /* Last to arrive: everyone else's writes are visible here (acquire above); reset the
         * count for the next barrier, then release the others. Nobody touches `arrived` again
         * before seeing the new generation. */
        atomic_store_explicit(&pool->arrived, 0, memory_order_relaxed);
        atomic_fetch_add(&pool->gen.seq, 1);
        event_wake(&pool->gen);
    } else {
        event_wait(&pool->gen, g, pool->spin_ns);
    }
    return g;
}

void fx_par_barrier(const struct fx_worker *w) {
    if (w->nth > 1)
        barrier_pass(w->pool);
}

int64_t fx_par_broadcast(const struct fx_worker *w, int64_t value) {
    struct fx_pool *pool = w->pool;
    if (w->nth == 1)
        return value;
    /* Worker 0 writes slot g & 1 before barrier g; the others read it after. The slot is written
     * again at barrier g + 2 at the earliest, which worker 0 reaches only after every reader has
     * arrived at barrier g + 1, i.e. finished reading. */
    uint32_t g = atomic_load_explicit(&pool->gen.seq, memory_order_relaxed);
    if (w->ith == 0)
        pool->bcast[g & 1] = value;
    barrier_pass(pool);
    return pool->bcast[g & 1];
}

bool fx_par_claim(const struct fx_worker *w, int64_t n, int64_t *item) {
    int64_t *base = &w->pool->claim_base[w->ith].ticket;
    int64_t t = atomic_fetch_add_explicit(&w->pool->claim_next, 1, memory_order_relaxed) - *base;
    if (t < n) {
        *item = t;
        return true;
    }
    *base += n + w->nth;
    return false;
}

/* Before a run: tickets start again from 0. */
static void reset_claims(struct fx_pool *pool) {
    atomic_store_explicit(&pool->claim_next, 0, memory_order_relaxed);
    for (int i = 0; i < pool->n; i++)
        pool->claim_base[i].ticket = 0;
}

void fx_par_range(int64_t n, int ith, int nth, int64_t granule, int64_t *begin, int64_t *end) {
    FX_ASSERT(n >= 0 && nth > 0 && ith >= 0 && ith < nth);
    if (granule < 1)
        granule = 1;
    FX_ASSERT(n <= INT64_MAX - granule);
    int64_t units = n / granule + (n % granule != 0);
    int64_t base = units / nth, extra = units % nth;
    int64_t ub = (int64_t)ith * base + (ith < extra ? ith : extra);
    int64_t ue = ub + base + (ith < extra);
    *begin = ub * granule < n ? ub * granule : n;
    *end = ue * granule < n ? ue * granule : n;
}

uint64_t fx_par_cold_entries(void) {
    return atomic_load_explicit(&cold_entries, memory_order_relaxed);
}

int fx_pool_size(const struct fx_pool *pool) {
    return pool->n;
}

static void *worker_main(void *p) {
    struct fx_worker *w = p;
    struct fx_pool *pool = w->pool;
    inside_pool = 1;
    uint32_t seen = 0; /* start.seq when the pool was created */
    for (;;) {
        seen = event_wait(&pool->start, seen, pool->spin_ns);
        if (pool->stop)
            return NULL;
        pool->fn(w, pool->arg);
        if (atomic_fetch_add(&pool->done.seq, 1) + 1 == (uint32_t)pool->n - 1)
            event_wake(&pool->done);
    }
}

/* Worker 0's side of a run: publish the job, launch, work, wait for the others. */
static void run_on_pool(struct fx_pool *pool, fx_par_fn fn, void *arg, bool stop) {
    pool->fn = fn;
    pool->arg = arg;
    pool->stop = stop;
    reset_claims(pool);
    atomic_store_explicit(&pool->done.seq, 0, memory_order_relaxed);
    atomic_fetch_add(&pool->start.seq, 1); /* publishes the job (and done = 0) */
    event_wake(&pool->start);
    if (stop)
        return;
    fn(&pool->workers[0], arg);
    uint32_t d;
    while ((d = atomic_load_explicit(&pool->done.seq, memory_order_acquire)) !=
           (uint32_t)pool->n - 1)
        event_wait(&pool->done, d, pool->spin_ns);
}

fx_status fx_par_run(struct fx_pool *pool, fx_par_fn fn, void *arg) {
    FX_ASSERT(pool && fn);
    if (inside_pool)
        return FX_ERR_INVALID_ARG;
    atomic_fetch_add_explicit(&cold_entries, 1, memory_order_relaxed);
    if (pool->n == 1) {
        reset_claims(pool);
        inside_pool = 1;
        fn(&pool->workers[0], arg);
        inside_pool = 0;
        return FX_OK;
    }
    pthread_mutex_lock(&pool->entry_lock);
    inside_pool = 1;
    run_on_pool(pool, fn, arg, false);
    inside_pool = 0;
    pthread_mutex_unlock(&pool->entry_lock);
    return FX_OK;
}

static void stop_threads(struct fx_pool *pool) {
    if (pool->n_started == 0)
        return;
    run_on_pool(pool, NULL, NULL, true);
    for (int i = 1; i <= pool->n_started; i++)
        pthread_join(pool->threads[i], NULL);
    pool->n_started = 0;
}

void fx_pool_free(struct fx_pool *pool) {
    if (!pool)
        return;
    stop_threads(pool);
    pthread_mutex_destroy(&pool->entry_lock);
    free(pool->threads);
    free(pool->workers);
    free(pool->claim_base);
    free(pool);
}

/* The pool's threads take no asynchronous signals (Ctrl-C, SIGPIPE, SIGCHLD...), so those reach
 * the program's own threads, whose system calls they are meant to interrupt. Signals raised by a
 * fault stay deliverable so that crashes are reported where they happen. */
static void block_async_signals(sigset_t *old) {
    sigset_t set;
    sigfillset(&set);
    static const int synchronous[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGABRT, SIGSYS};
    for (size_t i = 0; i < sizeof synchronous / sizeof synchronous[0]; i++)
        sigdelset(&set, synchronous[i]);
    pthread_sigmask(SIG_BLOCK, &set, old);
}

fx_status fx_pool_create(int n_threads, struct fx_pool **out, struct fx_error *err) {
    *out = NULL;
    if (n_threads < 0 || n_threads > FX_POOL_MAX_THREADS)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "thread count %d is out of range [0, %d] (0: one per CPU)", n_threads,
                            FX_POOL_MAX_THREADS);
    int n_cpu = fx_cpu_count();
    int n = n_threads == 0 ? n_cpu : n_threads;
    if (n > FX_POOL_MAX_THREADS)
        n = FX_POOL_MAX_THREADS;

    /* The events sit on their own cache lines, so the pool needs the alignment they declare. */
    size_t size = (sizeof(struct fx_pool) + CACHE_LINE - 1) / CACHE_LINE * CACHE_LINE;
    struct fx_pool *pool = aligned_alloc(CACHE_LINE, size);
    if (!pool)
        return fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "worker pool: out of memory");
    memset(pool, 0, size);
    pool->n = n;
    pool->spin_ns = n <= n_cpu ? SPIN_NS : 0;
    pool->threads = calloc((size_t)n, sizeof *pool->threads);
    pool->workers = calloc((size_t)n, sizeof *pool->workers);
    pool->claim_base = aligned_alloc(CACHE_LINE, (size_t)n * sizeof *pool->claim_base);
    if (!pool->threads || !pool->workers || !pool->claim_base ||
        pthread_mutex_init(&pool->entry_lock, NULL) != 0) {
        free(pool->threads);
        free(pool->workers);
        free(pool->claim_base);
        free(pool);
        return fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "worker pool of %d: out of memory", n);
    }
    for (int i = 0; i < n; i++)
        pool->workers[i] = (struct fx_worker){.ith = i, .nth = n, .pool = pool};

    sigset_t old;
    block_async_signals(&old);
    int rc = 0;
    for (int i = 1; i < n && rc == 0; i++) {
        rc = pthread_create(&pool->threads[i], NULL, worker_main, &pool->workers[i]);
        if (rc == 0)
            pool->n_started = i;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        int started = pool->n_started;
        fx_pool_free(pool);
        return fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET,
                            "worker pool: cannot start thread %d of %d: %s", started + 1, n,
                            strerror(rc));
    }
    *out = pool;
    return FX_OK;
}
