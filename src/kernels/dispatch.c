/* Choosing the kernel table. The per-ISA files define partial tables (only what they speed up);
 * here each is completed from the table below it (avx512 from avx2, avx2 from generic), once,
 * and the best one the CPU runs is chosen, unless FERROX_CPU names another. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/cpu.h"
#include "core/log.h"
#include "kernels/generic.h"

#if defined(__x86_64__)
/* Defined in x86_avx2.c and x86_avx512.c, the only files built with -m flags. */
extern const struct fx_kernels fx_kernels_avx2_part;
extern const struct fx_kernels fx_kernels_avx512_part;
#endif

enum { TABLE_GENERIC, TABLE_AVX2, TABLE_AVX512, N_TABLES };

struct table {
    const char *name;
    const char *needs; /* for the message when the CPU lacks it */
    struct fx_kernels k;
    bool supported;
};

static struct table tables[N_TABLES] = {
    [TABLE_GENERIC] = {"generic", "", {0}, false},
    [TABLE_AVX2] = {"avx2", "AVX2, FMA, F16C and BMI2", {0}, false},
    [TABLE_AVX512] = {"avx512", "AVX-512 F, BW, VL, DQ and VNNI", {0}, false},
};
static const struct fx_kernels *chosen;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

/* t = base, with every entry `over` fills taken from `over`. vec_dot_type always stays the
 * base's: it is a property of the format, not of the table. */
static void merge(struct fx_kernels *t, const struct fx_kernels *over,
                  const struct fx_kernels *base) {
    *t = *base;
    t->name = over->name;
    for (int i = 0; i < FX_TYPE_COUNT; i++) {
        const struct fx_type_ops *o = &over->types[i];
        struct fx_type_ops *d = &t->types[i];
        if (o->to_float)
            d->to_float = o->to_float;
        if (o->from_float)
            d->from_float = o->from_float;
        if (o->quantize_act)
            d->quantize_act = o->quantize_act;
        /* vec_dot, matmul, the packing matmul reads and the activation metadata it takes go
         * together: matmul must equal vec_dot bit for bit, so a table that brings its own
         * vec_dot brings its matmul too (or none, and fx_matmul loops over the new vec_dot). */
        if (o->vec_dot) {
            d->vec_dot = o->vec_dot;
            d->matmul = o->matmul;
            d->act_meta = o->act_meta;
            d->pack_kind = o->pack_kind;
        }
    }
#define TAKE(field)                                                                                \
    if (over->field)                                                                               \
    t->field = over->field
    TAKE(rms_norm);
    TAKE(softcap);
    TAKE(softmax);
    TAKE(rope);
    TAKE(swiglu_oai);
    TAKE(add);
    TAKE(scale);
    TAKE(axpy);
    TAKE(attn_begin);
    TAKE(attn_run);
    TAKE(attn_finish);
    TAKE(kv_store);
    TAKE(kv_load);
    TAKE(kv_load_tile);
    TAKE(argmax);
    TAKE(l2_norm);
    TAKE(conv_rows);
    TAKE(delta_rows);
#undef TAKE
    for (int a = 0; a < FX_ACT_COUNT; a++) {
        if (over->act[a])
            t->act[a] = over->act[a];
        if (over->glu[a])
            t->glu[a] = over->glu[a];
    }
}

static const struct fx_kernels *best(void) {
    for (int i = N_TABLES - 1; i > 0; i--)
        if (tables[i].supported)
            return &tables[i].k;
    return &tables[TABLE_GENERIC].k;
}

static void init(void) {
    tables[TABLE_GENERIC].k = fx_kernels_generic;
    tables[TABLE_GENERIC].supported = true;
#if defined(__x86_64__)
    const struct fx_cpu_features *f = fx_cpu_features();
    merge(&tables[TABLE_AVX2].k, &fx_kernels_avx2_part, &tables[TABLE_GENERIC].k);
    merge(&tables[TABLE_AVX512].k, &fx_kernels_avx512_part, &tables[TABLE_AVX2].k);
    tables[TABLE_AVX2].supported = f->avx2 && f->fma && f->f16c && f->bmi2;
    tables[TABLE_AVX512].supported = tables[TABLE_AVX2].supported && f->avx512f && f->avx512bw &&
                                     f->avx512vl && f->avx512dq && f->avx512vnni;
#endif
    chosen = best();
    const char *want = getenv("FERROX_CPU");
    if (!want || !*want)
        return;
    for (int i = 0; i < N_TABLES; i++) {
        if (strcmp(want, tables[i].name) != 0)
            continue;
        if (tables[i].supported)
            chosen = &tables[i].k;
        else
            fx_log(FX_LOG_ERROR, "FERROX_CPU=%s: this CPU lacks %s; using the %s kernels", want,
                   tables[i].needs, chosen->name);
        return;
    }
    fx_log(FX_LOG_ERROR,
           "FERROX_CPU=%s is not a kernel table (generic, avx2 or avx512); using the %s kernels",
           want, chosen->name);
}

const struct fx_kernels *fx_kernels(void) {
    pthread_once(&init_once, init);
    return chosen;
}

const struct fx_kernels *fx_kernels_named(const char *name) {
    pthread_once(&init_once, init);
    for (int i = 0; i < N_TABLES; i++)
        if (name && strcmp(name, tables[i].name) == 0)
            return tables[i].supported ? &tables[i].k : NULL;
    return NULL;
}

const char *fx_kernels_name(void) {
    return fx_kernels()->name;
}
