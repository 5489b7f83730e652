#include "core/cpu.h"

#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

/* XCR0 read with xgetbv; written as inline assembly so this file needs no -mxsave flag. */
static uint64_t read_xcr0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static void detect(struct fx_cpu_features *f) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return;
    bool osxsave = (c >> 27) & 1;
    bool fma = (c >> 12) & 1, f16c = (c >> 29) & 1;
    uint64_t xcr0 = osxsave ? read_xcr0() : 0;
    bool ymm_state = (xcr0 & 0x6) == 0x6;                /* SSE and AVX state */
    bool zmm_state = ymm_state && (xcr0 & 0xe0) == 0xe0; /* opmask, ZMM_Hi256, Hi16_ZMM */
    bool amx_state = (xcr0 & 0x60000) == 0x60000; /* XTILECFG, XTILEDATA (if already granted) */
    (void)amx_state;
    if (__get_cpuid_max(0, NULL) < 7)
        return;
    __cpuid_count(7, 0, a, b, c, d);
    f->avx2 = ymm_state && ((b >> 5) & 1);
    f->fma = ymm_state && fma;
    f->f16c = ymm_state && f16c;
    f->bmi2 = (b >> 8) & 1;
    f->avx512f = zmm_state && ((b >> 16) & 1);
    f->avx512dq = zmm_state && ((b >> 17) & 1);
    f->avx512bw = zmm_state && ((b >> 30) & 1);
    f->avx512vl = zmm_state && ((b >> 31) & 1);
    f->avx512vnni = zmm_state && ((c >> 11) & 1);
    f->amx_tile = (d >> 24) & 1;
    f->amx_int8 = (d >> 25) & 1;
    unsigned a1, b1, c1, d1;
    __cpuid_count(7, 1, a1, b1, c1, d1);
    f->avx_vnni = ymm_state && ((a1 >> 4) & 1);
    f->avx512bf16 = zmm_state && ((a1 >> 5) & 1);
}
#else
static void detect(struct fx_cpu_features *f) {
    (void)f;
}
#endif

static struct fx_cpu_features features;
static pthread_once_t features_once = PTHREAD_ONCE_INIT;

static void detect_once(void) {
    detect(&features);
}

const struct fx_cpu_features *fx_cpu_features(void) {
    pthread_once(&features_once, detect_once);
    return &features;
}

int fx_cpu_count(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n > 0)
            return n;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}
