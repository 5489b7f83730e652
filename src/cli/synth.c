/* ferrox synth --shape NAME --type f32|f16 -o FILE.gguf [--seed S]: writes a random-weight model
 * with a real model's tensor names, shapes and metadata (see model/synth.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "ferrox.h"
#include "model/synth.h"

static void usage(FILE *out) {
    fprintf(out, "usage: ferrox synth --shape NAME --type f32|f16 -o FILE.gguf [--seed S]\n\n"
                 "Writes a GGUF model with random weights (seeded, reproducible) and a synthetic\n"
                 "vocabulary, in the tensor layout and metadata of a real model.\n\nshapes:");
    for (const char *const *n = fx_synth_shape_names(); *n; n++)
        fprintf(out, " %s", *n);
    fprintf(out, "\n");
}

int fx_cli_synth(int argc, char **argv) {
    const char *shape = NULL, *type_name = NULL, *out = NULL;
    uint64_t seed = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "ferrox synth: '%s' needs a value\n", a);
            usage(stderr);
            return 2;
        }
        const char *v = argv[++i];
        if (strcmp(a, "--shape") == 0) {
            shape = v;
        } else if (strcmp(a, "--type") == 0) {
            type_name = v;
        } else if (strcmp(a, "-o") == 0 || strcmp(a, "--output") == 0) {
            out = v;
        } else if (strcmp(a, "--seed") == 0) {
            char *end;
            errno = 0;
            seed = strtoull(v, &end, 0);
            if (errno || *end || !*v || v[0] == '-') {
                fprintf(stderr, "ferrox synth: bad seed '%s'\n", v);
                return 2;
            }
        } else {
            fprintf(stderr, "ferrox synth: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!shape || !type_name || !out) {
        usage(stderr);
        return 2;
    }
    enum fx_type type;
    if (!fx_type_from_name(type_name, &type)) {
        fprintf(stderr, "ferrox synth: unknown type '%s'\n", type_name);
        return 2;
    }
    struct fx_synth_model *m;
    struct fx_error err;
    if (fx_synth_plan(shape, type, seed, &m, &err) != FX_OK) {
        fprintf(stderr, "ferrox synth: %s\n", err.msg);
        return 2;
    }
    int rc = 0;
    if (fx_synth_write(m, out, &err) != FX_OK) {
        fprintf(stderr, "ferrox synth: %s: %s\n", out, err.msg);
        rc = 1;
    } else {
        printf("wrote %s: shape %s, %s weights, seed %" PRIu64 ", %" PRId64 " tensors, %" PRId64
               " parameters\n",
               out, shape, fx_type_name(type), seed, m->n_tensors, fx_synth_n_params(m));
    }
    fx_synth_model_free(m);
    return rc;
}
