/* The subcommands of the ferrox program. Each takes the arguments after its name (argv[0] is the
 * subcommand name) and returns the process exit status: 0 on success, 1 on a failure it has
 * reported on stderr, 2 on a usage error. */
#ifndef FX_CLI_H
#define FX_CLI_H

int fx_cli_inspect(int argc, char **argv);
int fx_cli_synth(int argc, char **argv);
int fx_cli_eval(int argc, char **argv);
int fx_cli_bench(int argc, char **argv);
int fx_cli_quantize(int argc, char **argv);
int fx_cli_tokenize(int argc, char **argv);
int fx_cli_run(int argc, char **argv);
int fx_cli_chat(int argc, char **argv);
int fx_cli_serve(int argc, char **argv);
int fx_cli_perplexity(int argc, char **argv);
int fx_cli_bench_kernels(int argc, char **argv);
int fx_cli_bench_attn(int argc, char **argv);

#endif
