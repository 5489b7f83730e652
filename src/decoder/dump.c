/* FERROX_DUMP=DIR: named intermediates of the latest forward call, as raw little-endian f32
 * files [rows][dim] (DIR/attn_norm-0.bin, DIR/q-0.bin, ...), for diffing against another
 * engine's tensors when the logits disagree. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "core/log.h"
#include "decoder/decoder.h"

static void write_rows(const char *dir, const struct fx_chunk *c, const char *name, int il,
                       const float *buf, int64_t n, int64_t dim);

void fx_dec_dump(const struct fx_worker *w, const struct fx_chunk *c, const char *name, int il,
                 const float *buf, int64_t n, int64_t dim) {
    const char *dir = c->f->ctx->dump_dir;
    if (!dir)
        return;
    fx_par_barrier(w); /* buf is complete */
    if (w->ith == 0)
        write_rows(dir, c, name, il, buf, n, dim);
    fx_par_barrier(w); /* nobody changes buf while it is written */
}

static void write_rows(const char *dir, const struct fx_chunk *c, const char *name, int il,
                       const float *buf, int64_t n, int64_t dim) {
    char path[4096];
    if (il >= 0)
        snprintf(path, sizeof path, "%s/%s-%d.bin", dir, name, il);
    else
        snprintf(path, sizeof path, "%s/%s.bin", dir, name);
    /* A call split in chunks appends its later chunks to the first one's file. */
    FILE *f = fopen(path, c->row0 == 0 ? "wb" : "ab");
    if (!f) {
        FX_WARN("FERROX_DUMP: cannot write %s: %s", path, strerror(errno));
        return;
    }
    if (fwrite(buf, sizeof(float), (size_t)(n * dim), f) != (size_t)(n * dim))
        FX_WARN("FERROX_DUMP: short write to %s", path);
    fclose(f);
}
