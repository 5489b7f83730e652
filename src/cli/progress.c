#include "cli/progress.h"

#include <stdio.h>
#include <unistd.h>

#define BAR_WIDTH 40

void fx_cli_progress_init(struct fx_cli_progress *p, const char *label) {
    *p = (struct fx_cli_progress){.label = label, .on = isatty(STDERR_FILENO) == 1, .shown = -1};
}

void fx_cli_progress_update(void *user, uint64_t done, uint64_t total) {
    struct fx_cli_progress *p = user;
    if (!p->on || total == 0)
        return;
    int pct = (int)(done >= total ? 100 : done * 100 / total);
    if (pct == p->shown)
        return;
    p->shown = pct;
    char bar[BAR_WIDTH + 1];
    int fill = pct * BAR_WIDTH / 100;
    for (int i = 0; i < BAR_WIDTH; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[BAR_WIDTH] = '\0';
    fprintf(stderr, "\r%s [%s] %3d%%", p->label, bar, pct);
    fflush(stderr);
}

void fx_cli_progress_end(struct fx_cli_progress *p) {
    if (p->on && p->shown >= 0)
        fputc('\n', stderr);
}
