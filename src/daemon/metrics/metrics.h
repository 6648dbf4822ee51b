/* metrics: Prometheus counters and histograms of the control plane, rendered as text
 * exposition format by GET /metrics.
 *
 * A leaf module: it knows operations only as small integers (kind, state) and learns
 * their names, and the gauges that live elsewhere (sandboxes by state, warm pool), from
 * the caller at render time (struct metrics_view, filled by the API's /metrics route),
 * so the modules that count into it (ops, sessions, the API) do not depend on each other
 * through it. */
#ifndef SPACE_METRICS_H
#define SPACE_METRICS_H

#include <stddef.h>
#include <stdint.h>

struct metrics;

/* Bounds of the (kind, state) counters; larger values are ignored by metrics_op_done.
 * ops/op_engine.c checks at compile time that its enums fit. */
#define METRICS_OP_KINDS 16
#define METRICS_OP_STATES 8

struct metrics *metrics_new(void);
void metrics_free(struct metrics *m);

/* A finished operation: kind/state names (op.h), duration from creation to the end. */
void metrics_op_done(struct metrics *m, int kind, int state, int64_t duration_ms);
/* An error reply sent by a control-plane route (status >= 400). */
void metrics_http_error(struct metrics *m, int status);
/* Sessions module: current number of open sessions (gauge). */
void metrics_sessions_set(struct metrics *m, int64_t open);

/* What the renderer reads from the rest of the daemon, at render time. */
struct metrics_view {
    int op_kinds;                        /* kinds 0..op_kinds-1 are rendered */
    const char *(*op_kind_name)(int kind);
    int op_state_first_final, op_states; /* states first_final..op_states-1 are rendered */
    const char *(*op_state_name)(int state);
    /* Calls emit(state, count, emit_arg) for each sandbox state; may be NULL. */
    void (*sandboxes_by_state)(void *arg, void (*emit)(const char *state, int64_t n, void *emit_arg),
                               void *emit_arg);
    void *arg;                           /* for sandboxes_by_state */
    unsigned pool_ready;                 /* warm pooled VMs ready to claim */
    int64_t uptime_s;
};

/* Renders everything into a malloc'd NUL-terminated buffer (*out, caller frees).
 * Returns its length or -1. */
long metrics_render(const struct metrics *m, const struct metrics_view *v, char **out);

#endif
