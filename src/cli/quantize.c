/* ferrox quantize [--pure] [-t N] IN.gguf OUT.gguf TYPE: llama-quantize's conversion (see
 * fx_model_quantize), with a progress bar when stderr is a terminal. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/progress.h"
#include "cli/util.h"
#include "core/clock.h"
#include "ferrox.h"
#include "model/ftype.h"

static void usage(FILE *out) {
    char types[512];
    fx_file_type_list(types, sizeof types);
    fprintf(out,
            "usage: ferrox quantize [--pure] [-t THREADS] IN.gguf OUT.gguf TYPE\n\n"
            "Converts the F32, F16 or BF16 weights of IN into TYPE, as llama-quantize does\n"
            "(the same per-tensor mix, byte-identical tensors), and writes OUT.\n"
            "  --pure        every weight gets TYPE's base type, token_embd and output included\n"
            "  -t THREADS    worker threads (default: one per CPU)\n\n"
            "types: %s\n",
            types);
}

static double file_mib(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (double)st.st_size / (1024.0 * 1024.0) : 0.0;
}

int fx_cli_quantize(int argc, char **argv) {
    struct fx_quantize_params p = fx_quantize_default_params();
    static const struct option opts[] = {{"pure", no_argument, NULL, 'p'},
                                         {"threads", required_argument, NULL, 't'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    optind = 1;
    for (int c; (c = getopt_long(argc, argv, "t:h", opts, NULL)) != -1;) {
        switch (c) {
        case 'p':
            p.pure = true;
            break;
        case 't':
            if (!fx_cli_parse_int(optarg, 0, 1024, &p.n_threads)) {
                fprintf(stderr, "ferrox quantize: bad thread count '%s' (0 to 1024)\n", optarg);
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
    if (argc - optind != 3) {
        fprintf(stderr, "ferrox quantize: expected IN.gguf OUT.gguf TYPE\n");
        usage(stderr);
        return 2;
    }
    const char *in = argv[optind], *out = argv[optind + 1];
    p.type = argv[optind + 2];
    uint32_t ftype;
    if (!fx_file_type_from_name(p.type, &ftype) || fx_file_type_base(ftype) == FX_TYPE_COUNT) {
        char types[512];
        fx_file_type_list(types, sizeof types);
        fprintf(stderr, "ferrox quantize: unknown type '%s' (one of: %s)\n", p.type, types);
        return 2;
    }
    struct fx_cli_progress bar;
    fx_cli_progress_init(&bar, "quantizing");
    p.progress = fx_cli_progress_update;
    p.progress_user = &bar;
    double t0 = fx_now();
    struct fx_error err;
    fx_status st = fx_model_quantize(in, out, &p, &err);
    fx_cli_progress_end(&bar);
    if (st != FX_OK) {
        fprintf(stderr, "ferrox quantize: %s\n", err.msg);
        return st == FX_ERR_INVALID_ARG ? 2 : 1;
    }
    printf("wrote %s: %s%s, %.2f MiB -> %.2f MiB in %.1f s\n", out, fx_file_type_name(ftype),
           p.pure ? " (pure)" : "", file_mib(in), file_mib(out), fx_now() - t0);
    return 0;
}
