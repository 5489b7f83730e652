/* Reading the clocks: one place that turns a struct timespec into seconds or nanoseconds.
 * Elapsed time is measured on CLOCK_MONOTONIC (fx_now, fx_now_ns); benchmarks on a shared
 * machine may read a CPU-time clock instead (fx_clock_seconds with CLOCK_THREAD_CPUTIME_ID or
 * CLOCK_PROCESS_CPUTIME_ID), which other processes disturb far less. */
#ifndef FX_CORE_CLOCK_H
#define FX_CORE_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline double fx_clock_seconds(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Seconds on the monotonic clock, for durations. */
static inline double fx_now(void) {
    return fx_clock_seconds(CLOCK_MONOTONIC);
}

/* Nanoseconds on the monotonic clock, for durations kept in integers. */
static inline int64_t fx_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

#endif
