/* ferrox: the command-line program. Dispatches to one subcommand per file in src/cli/. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/util.h"
#include "ferrox.h"

struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
};

/* One line per subcommand; the list ends with an empty entry. */
static const struct command commands[] = {
    {"inspect", fx_cli_inspect, "print a GGUF file's header, metadata and tensors"},
    {"synth", fx_cli_synth, "write a random-weight GGUF model of a real model's shape"},
    {"eval", fx_cli_eval, "evaluate token ids: all-position logits, greedy continuation"},
    {"bench", fx_cli_bench, "llama-bench-style prefill (pp) and decode (tg) speed table"},
    {"quantize", fx_cli_quantize, "convert weights to Q8_0, Q4_K_M, ... like llama-quantize"},
    {"tokenize", fx_cli_tokenize, "text to token ids with a model's tokenizer"},
    {"run", fx_cli_run, "generate text from a prompt, streamed as it comes"},
    {"chat", fx_cli_chat, "interactive chat with a model's chat template"},
    {"serve", fx_cli_serve, "OpenAI-compatible HTTP server with continuous batching"},
    {"perplexity", fx_cli_perplexity, "perplexity of a text, as llama.cpp's perplexity tool"},
    {"bench-kernels", fx_cli_bench_kernels, "matvec and matmul speed per weight format and table"},
    {"bench-attn", fx_cli_bench_attn, "decode attention speed per KV cache type and depth"},
    {NULL, NULL, NULL},
};

static void usage(FILE *out) {
    fprintf(out, "usage: ferrox COMMAND [ARGS...]\n       ferrox --version\n\ncommands:\n");
    for (const struct command *c = commands; c->name; c++)
        fprintf(out, "  %-12s %s\n", c->name, c->summary);
    fprintf(out, "\nRun 'ferrox COMMAND --help' for the options of one command.\n");
}

static void print_version(void) {
    printf("ferrox %s\nkernels: %s\n", fx_version(), fx_kernels_name());
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *name = argv[1];
    if (strcmp(name, "--version") == 0 || strcmp(name, "version") == 0) {
        print_version();
        return 0;
    }
    if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0 || strcmp(name, "help") == 0) {
        usage(stdout);
        return 0;
    }
    fx_cli_expand_aliases(argc, argv);
    for (const struct command *c = commands; c->name; c++)
        if (strcmp(name, c->name) == 0)
            return c->run(argc - 1, argv + 1);
    fprintf(stderr, "ferrox: unknown command '%s'\n", name);
    usage(stderr);
    return 2;
}
