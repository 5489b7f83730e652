/* ferrox synth --shape NAME --type TYPE -o FILE.gguf [--seed S] [--pure] [-t N]: writes a
 * random-weight model with a real model's tensor names, shapes and metadata (see
 * model/synth.h), in any file type `ferrox quantize` writes. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/progress.h"
#include "cli/util.h"
#include "core/clock.h"
#include "ferrox.h"
#include "model/ftype.h"
#include "model/synth.h"

static void usage(FILE *out) {
    char types[512];
    fx_file_type_list(types, sizeof types);
    fprintf(out,
            "usage: ferrox synth --shape NAME --type TYPE -o FILE.gguf [--seed S] [--pure]\n"
            "                    [-t THREADS]\n\n"
            "Writes a GGUF model with random weights (seeded, reproducible) and a synthetic\n"
            "vocabulary, in the tensor layout and metadata of a real model. TYPE is a file type\n"
            "as for 'ferrox quantize': the weights get the same per-tensor types llama-quantize\n"
            "would give that model (--pure: every weight TYPE's base type).\n\n"
            "shapes:");
    for (const char *const *n = fx_synth_shape_names(); *n; n++)
        fprintf(out, " %s", *n);
    fprintf(out, "\ntypes: %s\n", types);
}

int fx_cli_synth(int argc, char **argv) {
    const char *shape = NULL, *type_name = NULL, *out = NULL;
    uint64_t seed = 1;
    bool pure = false;
    struct fx_synth_write_params wp = {0};
    static const struct option opts[] = {
        {"shape", required_argument, NULL, 's'},  {"type", required_argument, NULL, 'y'},
        {"output", required_argument, NULL, 'o'}, {"seed", required_argument, NULL, 'e'},
        {"pure", no_argument, NULL, 'p'},         {"threads", required_argument, NULL, 't'},
        {"help", no_argument, NULL, 'h'},         {NULL, 0, NULL, 0}};
    optind = 1;
    for (int c; (c = getopt_long(argc, argv, "o:t:h", opts, NULL)) != -1;) {
        switch (c) {
        case 's':
            shape = optarg;
            break;
        case 'y':
            type_name = optarg;
            break;
        case 'o':
            out = optarg;
            break;
        case 'e': {
            char *end;
            errno = 0;
            seed = strtoull(optarg, &end, 0);
            if (errno || *end || !*optarg || optarg[0] == '-') {
                fprintf(stderr, "ferrox synth: bad seed '%s'\n", optarg);
                return 2;
            }
            break;
        }
        case 'p':
            pure = true;
            break;
        case 't':
            if (!fx_cli_parse_int(optarg, 0, 1024, &wp.n_threads)) {
                fprintf(stderr, "ferrox synth: bad thread count '%s' (0 to 1024)\n", optarg);
                return 2;
            }
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (!shape || !type_name || !out || optind != argc) {
        usage(stderr);
        return 2;
    }
    uint32_t ftype;
    if (!fx_file_type_from_name(type_name, &ftype) || fx_file_type_base(ftype) == FX_TYPE_COUNT) {
        char types[512];
        fx_file_type_list(types, sizeof types);
        fprintf(stderr, "ferrox synth: unknown type '%s' (one of: %s)\n", type_name, types);
        return 2;
    }
    struct fx_synth_model *m;
    struct fx_error err;
    if (fx_synth_plan(shape, ftype, pure, seed, &m, &err) != FX_OK) {
        fprintf(stderr, "ferrox synth: %s\n", err.msg);
        return 2;
    }
    struct fx_cli_progress bar;
    fx_cli_progress_init(&bar, "generating");
    wp.progress = fx_cli_progress_update;
    wp.progress_user = &bar;
    double t0 = fx_now();
    fx_status st = fx_synth_write(m, out, &wp, &err);
    fx_cli_progress_end(&bar);
    int rc = 0;
    if (st != FX_OK) {
        fprintf(stderr, "ferrox synth: %s: %s\n", out, err.msg);
        rc = 1;
    } else {
        printf("wrote %s: shape %s, %s%s, seed %" PRIu64 ", %" PRId64 " tensors, %" PRId64
               " parameters, %.2f MiB of weights in %.1f s\n",
               out, shape, fx_file_type_name(ftype), pure ? " (pure)" : "", seed, m->n_tensors,
               fx_synth_n_params(m), (double)fx_synth_n_bytes(m) / (1024.0 * 1024.0),
               fx_now() - t0);
    }
    fx_synth_model_free(m);
    return rc;
}
