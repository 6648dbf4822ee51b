/* metrics.c: counters and histograms, rendered in Prometheus text format. */
#include "metrics.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* Upper bounds (seconds) of the operation latency histogram buckets. */
static const double op_buckets[] = {0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300};
#define NBUCKETS (sizeof op_buckets / sizeof *op_buckets)
#define NSTATUS 600

struct metrics {
    uint64_t ops[METRICS_OP_KINDS][METRICS_OP_STATES];      /* finished ops by kind and state */
    uint64_t op_hist[METRICS_OP_KINDS][NBUCKETS];        /* cumulative bucket counts */
    uint64_t op_count[METRICS_OP_KINDS];
    double op_sum[METRICS_OP_KINDS];                      /* seconds */
    uint64_t http_errors[NSTATUS];
    int64_t sessions;
};

struct metrics *metrics_new(void) { return calloc(1, sizeof(struct metrics)); }
void metrics_free(struct metrics *m) { free(m); }

void metrics_op_done(struct metrics *m, int kind, int state, int64_t duration_ms)
{
    if (!m || kind < 0 || kind >= METRICS_OP_KINDS || state < 0 || state >= METRICS_OP_STATES)
        return;
    m->ops[kind][state]++;
    double secs = duration_ms < 0 ? 0 : (double)duration_ms / 1000.0;
    for (size_t b = 0; b < NBUCKETS; b++)
        if (secs <= op_buckets[b])
            m->op_hist[kind][b]++;
    m->op_count[kind]++;
    m->op_sum[kind] += secs;
}

void metrics_http_error(struct metrics *m, int status)
{
    if (m && status >= 400 && status < NSTATUS)
        m->http_errors[status]++;
}

void metrics_sessions_set(struct metrics *m, int64_t open)
{
    if (m)
        m->sessions = open;
}

static void count_state(const char *state, int64_t n, void *arg)
{
    FILE *f = arg;
    fprintf(f, "space_sandboxes{state=\"%s\"} %lld\n", state, (long long)n);
}

long metrics_render(const struct metrics *m, const struct metrics_view *v, char **out)
{
    char *buf = NULL;
    size_t len = 0;
    int kinds = v->op_kinds < METRICS_OP_KINDS ? v->op_kinds : METRICS_OP_KINDS;
    int states = v->op_states < METRICS_OP_STATES ? v->op_states : METRICS_OP_STATES;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return -1;
    fprintf(f, "# HELP space_sandboxes Sandboxes by state (deleted included).\n"
               "# TYPE space_sandboxes gauge\n");
    if (v->sandboxes_by_state)
        v->sandboxes_by_state(v->arg, count_state, f);
    fprintf(f, "# HELP space_operations_total Finished operations by kind and final state.\n"
               "# TYPE space_operations_total counter\n");
    for (int k = 0; k < kinds; k++)
        for (int s = v->op_state_first_final; s < states; s++)
            fprintf(f, "space_operations_total{kind=\"%s\",state=\"%s\"} %llu\n",
                    v->op_kind_name(k), v->op_state_name(s), (unsigned long long)m->ops[k][s]);
    fprintf(f, "# HELP space_operation_duration_seconds Time from submission to the end.\n"
               "# TYPE space_operation_duration_seconds histogram\n");
    for (int k = 0; k < kinds; k++) {
        const char *kn = v->op_kind_name(k);
        for (size_t b = 0; b < NBUCKETS; b++)
            fprintf(f, "space_operation_duration_seconds_bucket{kind=\"%s\",le=\"%g\"} %llu\n", kn,
                    op_buckets[b], (unsigned long long)m->op_hist[k][b]);
        fprintf(f, "space_operation_duration_seconds_bucket{kind=\"%s\",le=\"+Inf\"} %llu\n", kn,
                (unsigned long long)m->op_count[k]);
        fprintf(f, "space_operation_duration_seconds_sum{kind=\"%s\"} %.3f\n", kn, m->op_sum[k]);
        fprintf(f, "space_operation_duration_seconds_count{kind=\"%s\"} %llu\n", kn,
                (unsigned long long)m->op_count[k]);
    }
    fprintf(f, "# HELP space_http_errors_total Error replies of control-plane routes by status.\n"
               "# TYPE space_http_errors_total counter\n");
    for (int s = 400; s < NSTATUS; s++)
        if (m->http_errors[s])
            fprintf(f, "space_http_errors_total{status=\"%d\"} %llu\n", s,
                    (unsigned long long)m->http_errors[s]);
    fprintf(f, "# HELP space_sessions Open command sessions.\n# TYPE space_sessions gauge\n"
               "space_sessions %lld\n", (long long)m->sessions);
    fprintf(f, "# HELP space_pool_ready Warm pooled VMs ready to claim (all shapes).\n"
               "# TYPE space_pool_ready gauge\nspace_pool_ready %u\n", v->pool_ready);
    fprintf(f, "# HELP space_uptime_seconds Seconds since spaced started.\n"
               "# TYPE space_uptime_seconds gauge\nspace_uptime_seconds %lld\n",
            (long long)v->uptime_s);
    if (fclose(f) != 0) {
        free(buf);
        return -1;
    }
    *out = buf;
    return (long)len;
}
