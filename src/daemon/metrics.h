/* metrics: Prometheus counters and histograms of the control plane, rendered as text
 * exposition format by GET /metrics. Gauges that live elsewhere (sandboxes by state,
 * open sessions) are read at render time. */
#ifndef SPACE_METRICS_H
#define SPACE_METRICS_H

#include <stddef.h>
#include <stdint.h>

struct spaced;
struct metrics;

struct metrics *metrics_new(void);
void metrics_free(struct metrics *m);

/* A finished operation: kind/state names (op.h), duration from creation to the end. */
void metrics_op_done(struct metrics *m, int kind, int state, int64_t duration_ms);
/* An error reply sent by a control-plane route (status >= 400). */
void metrics_http_error(struct metrics *m, int status);
/* Sessions module: current number of open sessions (gauge). */
void metrics_sessions_set(struct metrics *m, int64_t open);

/* Renders everything into a malloc'd NUL-terminated buffer (*out, caller frees).
 * Returns its length or -1. */
long metrics_render(struct spaced *sp, char **out);

#endif
