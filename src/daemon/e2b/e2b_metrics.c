/* e2b_metrics: getMetrics() (GET /sandboxes/{id}/metrics). E2B keeps a time series;
 * we answer one sample taken now by the agent's `metrics` op (CPU use since the
 * previous sample, memory and root-disk use as the guest kernel sees them), when "now"
 * lies in the requested [start, end] window (unix seconds, both optional). A sandbox
 * that is not running has no sample: an empty list, as E2B gives for one without data. */
#include <stdio.h>
#include <stdlib.h>

#include "daemon/agentc/agentc.h"
#include "daemon/sandbox/sbx.h"
#include "daemon/spaced.h"
#include "e2b_internal.h"

/* A sample in flight; freed by whichever of the request and the channel ends last. */
struct metrics_req {
    struct http_req *req;     /* NULL once answered or gone */
    struct agentc_chan *ch;   /* NULL once closed */
    json_t *result;           /* the agent's result (owned) */
    char err[160];
};

static void mr_release(struct metrics_req *m)
{
    if (m->req || m->ch)
        return;
    json_decref(m->result);
    free(m);
}

static json_t *mr_sample(json_t *r)
{
    int64_t now = spaced_now_ms();
    char ts[32];
    spaced_fmt_time(now, ts);
    json_t *pct = json_object_get(r, "cpu_used_pct");
    const char *keys[] = {"cpu_count", "mem_used", "mem_total", "mem_cache", "disk_used", "disk_total"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (!json_is_integer(json_object_get(r, keys[i])))
            return NULL;
    if (!json_is_number(pct))
        return NULL;
    return json_pack("{s:s, s:I, s:O, s:f, s:O, s:O, s:O, s:O, s:O}", "timestamp", ts,
                     "timestampUnix", (json_int_t)(now / 1000), "cpuCount",
                     json_object_get(r, "cpu_count"), "cpuUsedPct", json_number_value(pct),
                     "memUsed", json_object_get(r, "mem_used"), "memTotal",
                     json_object_get(r, "mem_total"), "memCache", json_object_get(r, "mem_cache"),
                     "diskUsed", json_object_get(r, "disk_used"), "diskTotal",
                     json_object_get(r, "disk_total"));
}

static void mr_event(void *arg, json_t *ev)
{
    struct metrics_req *m = arg;
    json_decref(m->result);
    m->result = json_incref(ev);
}

static void mr_error(void *arg, const char *code, const char *message)
{
    struct metrics_req *m = arg;
    if (!m->err[0])
        snprintf(m->err, sizeof m->err, "%s (%s)", message, code);
}

static void mr_close(void *arg)
{
    struct metrics_req *m = arg;
    m->ch = NULL;
    if (m->req) {
        struct http_req *req = m->req;
        m->req = NULL;
        http_req_on_close(req, NULL, NULL);
        json_t *sample = m->result ? mr_sample(m->result) : NULL;
        if (sample) {
            json_t *list = json_pack("[o]", sample);
            http_reply_json(req, 200, list);
            json_decref(list);
        } else {
            e2b_reply_rest_error(req, 500, "metrics from the sandbox: %s",
                                 m->err[0] ? m->err : "malformed answer");
        }
    }
    mr_release(m);
}

static const struct agentc_chan_ops mr_ops = {
    .on_event = mr_event,
    .on_error = mr_error,
    .on_close = mr_close,
};

static void mr_http_close(struct http_req *req, void *arg)
{
    struct metrics_req *m = arg;
    m->req = NULL;
    if (m->ch) {
        agentc_close(m->ch);
        m->ch = NULL;
    }
    mr_release(m);
}

/* A unix-seconds query parameter, def when absent or not a number. */
static long long query_secs(struct http_req *req, const char *name, long long def)
{
    const char *v = http_req_query(req, name);
    char *end;
    long long n = v ? strtoll(v, &end, 10) : 0;
    return v && *v && !*end ? n : def;
}

void e2b_metrics(struct http_req *req, struct sbx *s)
{
    long long now = spaced_now_ms() / 1000;
    struct agentc *a = sbx_agent(s);
    /* A little slack: the SDK computes its window on a clock that may lag ours. */
    bool in_window = query_secs(req, "start", now) <= now + 60 && query_secs(req, "end", now) >= now - 60;
    struct metrics_req *m = a && in_window ? calloc(1, sizeof *m) : NULL;
    json_t *op = m ? json_pack("{s:s}", "op", "metrics") : NULL;
    char why[128];
    if (m && op && (m->ch = agentc_open(a, op, &mr_ops, m, 0, why, sizeof why))) {
        json_decref(op);
        m->req = req;
        http_req_on_close(req, mr_http_close, m);
        return;
    }
    json_decref(op);
    free(m);
    json_t *empty = json_array();
    http_reply_json(req, 200, empty);
    json_decref(empty);
}
