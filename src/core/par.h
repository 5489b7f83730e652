/* The worker pool: persistent threads that a forward pass enters once (ARCHITECTURE.md section 2,
 * rule 1).
 *
 *   static void body(const struct fx_worker *w, void *arg) {
 *       int64_t b, e;
 *       fx_par_range(n_rows, w->ith, w->nth, 1, &b, &e);   // this worker's rows of region 1
 *       ...
 *       fx_par_barrier(w);                                  // every row of region 1 is written
 *       ...                                                 // region 2 reads them
 *   }
 *   fx_par_run(pool, body, &args);                          // one cold entry
 *
 * A pool of n threads owns n - 1 threads of its own; the thread that calls fx_par_run works as
 * worker 0. fx_par_run wakes the others (cheaply when they are still spinning from the previous
 * run), every worker calls fn once, and fx_par_run returns when all of them have returned from
 * it. Inside fn, fx_par_barrier separates parallel regions without waking or sleeping threads
 * when the workers are busy: it spins for a while with a pause instruction (giving its CPU to
 * any other runnable thread after the first microseconds) before it sleeps on a futex. Idle workers
 * spin for a short while after a run (so that back-to-back runs, such as decode steps, find them
 * awake) and then sleep until the next run; an idle pool uses no CPU.
 *
 * Thread safety: fx_par_run may be called from any thread that is not itself running inside a
 * pool; concurrent calls on one pool are serialised. A call from inside a running fn (any pool)
 * is a nested entry: it is rejected with FX_ERR_INVALID_ARG and fn is not called, so a parallel
 * body never re-enters a pool by accident (rule 1) and can never deadlock on one.
 *
 * fn must not fail halfway: every worker must reach the same sequence of barriers, so a body
 * checks what can fail before it enters the pool (rule 4) and reports results through arg. */
#ifndef FX_CORE_PAR_H
#define FX_CORE_PAR_H

#include <stdbool.h>
#include <stdint.h>

#include "ferrox.h"

/* The most threads one pool may have. */
#define FX_POOL_MAX_THREADS 1024

struct fx_pool;

/* What fn learns about itself: its index ith in [0, nth), the number of workers nth (the pool's
 * size) and its pool. Valid for the duration of the call to fn. */
struct fx_worker {
    int ith;
    int nth;
    struct fx_pool *pool;
};

typedef void (*fx_par_fn)(const struct fx_worker *w, void *arg);

/* Creates a pool of n_threads workers, counting the caller of fx_par_run as one; 0 means one per
 * CPU this process may run on (fx_cpu_count()). n_threads may exceed the number of CPUs (workers
 * then sleep rather than spin while they wait). On failure *out is NULL. */
fx_status fx_pool_create(int n_threads, struct fx_pool **out, struct fx_error *err);
/* Stops and joins the pool's threads. Must not be called while a run is in progress. */
void fx_pool_free(struct fx_pool *pool);
/* The number of workers (nth of every run). */
int fx_pool_size(const struct fx_pool *pool);

/* Runs fn(worker, arg) on every worker of the pool, the calling thread being worker 0, and
 * returns once every worker has returned from fn; everything the workers wrote is then visible
 * to the caller. FX_ERR_INVALID_ARG (fn not called) for a nested entry, see above. */
fx_status fx_par_run(struct fx_pool *pool, fx_par_fn fn, void *arg)
    __attribute__((warn_unused_result));

/* Inside fn: returns once every worker of the run has called it. Whatever a worker wrote before
 * the barrier is visible to every worker after it. A no-op with one worker. */
void fx_par_barrier(const struct fx_worker *w);

/* Inside fn: a barrier that also hands worker 0's value to every worker (the value the other
 * workers pass is ignored). */
int64_t fx_par_broadcast(const struct fx_worker *w, int64_t value);

/* Inside fn: dynamic sharing of n items, for work whose workers may be slowed unevenly (other
 * processes on the machine) where a static share (fx_par_range) would make the rest wait for the
 * slowest. Every worker calls it in a loop until it returns false, with the same n; each true
 * return hands the caller the next unclaimed item in *item (items go out in increasing order,
 * each to exactly one worker). A barrier must separate one such loop from the next. */
bool fx_par_claim(const struct fx_worker *w, int64_t n, int64_t *item);
/* Worker ith's share [*begin, *end) of n items split among nth workers in contiguous chunks
 * whose boundaries are multiples of granule (<= 1: any boundary; the last chunk absorbs a
 * remainder that is not a whole granule). Shares differ by at most one granule, earlier
 * workers take the larger ones, and some shares are empty when there are fewer granules than
 * workers. */
void fx_par_range(int64_t n, int ith, int nth, int64_t granule, int64_t *begin, int64_t *end);

/* Number of successful fx_par_run calls so far, on any pool, process-wide. A forward pass is one
 * cold entry whatever the number of layers or parallel regions it contains. */
uint64_t fx_par_cold_entries(void);

#endif
