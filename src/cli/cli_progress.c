/* cli_progress.c: one self-rewriting stderr line for long byte transfers (`space cp`),
 * drawn only when stderr is a terminal so that scripts and logs stay clean. */
#include "cli.h"

#include <stdio.h>

#include "clock.h"

#define REDRAW_MS 250

static void draw(const struct cli_progress *p, int64_t now)
{
    double mib = (double)p->done / (1 << 20);
    double secs = (double)(now - p->start_ms) / 1000.0;
    fprintf(stderr, "\r\033[K%s: %.1f", p->what, mib);
    if (p->total > 0)
        fprintf(stderr, "/%.1f MiB %d%%", (double)p->total / (1 << 20),
                (int)(p->done * 100 / p->total));
    else
        fputs(" MiB", stderr);
    if (secs > 0.05)
        fprintf(stderr, " %.1f MiB/s", mib / secs);
}

void cli_progress_start(const struct cli_ctx *x, struct cli_progress *p, const char *what,
                        int64_t total)
{
    p->what = what;
    p->total = total;
    p->done = 0;
    p->start_ms = p->shown_ms = clock_mono_ms();
    if (x->tty)
        draw(p, p->start_ms);
}

void cli_progress_update(const struct cli_ctx *x, struct cli_progress *p, int64_t n)
{
    p->done += n;
    if (!x->tty)
        return;
    int64_t now = clock_mono_ms();
    if (now - p->shown_ms >= REDRAW_MS) {
        p->shown_ms = now;
        draw(p, now);
    }
}

void cli_progress_end(const struct cli_ctx *x, struct cli_progress *p)
{
    if (!x->tty)
        return;
    draw(p, clock_mono_ms());
    fputc('\n', stderr);
}
