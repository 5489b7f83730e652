/* A one-line progress bar on stderr, drawn only when stderr is a terminal (so logs and pipes get
 * no carriage returns), redrawn when the percentage changes. */
#ifndef FX_CLI_PROGRESS_H
#define FX_CLI_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>

struct fx_cli_progress {
    const char *label;
    bool on;   /* stderr is a terminal */
    int shown; /* last percentage drawn, -1 before the first */
};

void fx_cli_progress_init(struct fx_cli_progress *p, const char *label);
/* A progress callback (user: the struct fx_cli_progress). */
void fx_cli_progress_update(void *user, uint64_t done, uint64_t total);
/* Ends the line if a bar was drawn. */
void fx_cli_progress_end(struct fx_cli_progress *p);

#endif
