/* What the CPU we run on can do, read once from cpuid and xgetbv. The kernel dispatcher picks its
 * table from this; nothing else should branch on CPU features. */
#ifndef FX_CORE_CPU_H
#define FX_CORE_CPU_H

#include <stdbool.h>

struct fx_cpu_features {
    bool avx2, fma, f16c, bmi2;       /* with OS support for the YMM state */
    bool avx512f, avx512bw, avx512vl; /* with OS support for the ZMM and opmask state */
    bool avx512dq, avx512vnni, avx512bf16;
    bool avx_vnni;
    bool amx_tile, amx_int8; /* the CPU has them; the OS must still grant the state */
};

/* Detected once (thread-safe) and cached. */
const struct fx_cpu_features *fx_cpu_features(void);

/* Number of CPUs this process may run on (at least 1). */
int fx_cpu_count(void);

#endif
