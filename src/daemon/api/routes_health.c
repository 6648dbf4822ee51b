/* routes_health.c: GET /healthz and GET /metrics (no authentication: they reveal no
 * tenant data, and probes and scrapers must not need keys). */
#include <stdlib.h>

#include "daemon/metrics/metrics.h"
#include "daemon/ops/op.h"
#include "daemon/sandbox/sbx_pool.h"
#include "daemon/store/store.h"
#include "daemon/vm/vm.h"
#include "routes.h"

#define SPACE_VERSION "0.1.0"

/* 200 only when this daemon can serve: its store answers (a daemon whose database is
 * gone would refuse every authenticated call, so a load balancer must stop sending). */
static void h_healthz(struct http_req *req, void *arg)
{
    struct spaced *sp = arg;
    bool store_ok = store_ping(sp->store) == 0;
    json_t *body = json_pack("{s:s, s:s, s:I, s:s, s:s?, s:s}", "status", store_ok ? "ok" : "degraded",
                             "version", SPACE_VERSION, "uptime_s",
                             (json_int_t)((spaced_now_ms() - sp->started_ms) / 1000), "accel",
                             vm_accel_name(vm_accel_resolve((enum vm_accel)sp->opt.accel)), "runtime",
                             sp->runtime[0] ? sp->runtime : NULL, "store",
                             store_ok ? "ok" : store_errmsg(sp->store));
    /* A full data dir: the store still records (on its reserve), but little else can
     * be written there; said, still 200 (this daemon serves). */
    char disk[300];
    const char *disk_bad = store_ok ? store_disk(sp->store, disk, sizeof disk) : NULL;
    if (disk_bad) {
        json_object_set_new(body, "status", json_string("degraded"));
        json_object_set_new(body, "disk", json_string(disk_bad));
    }
    if (!store_ok)
        http_reply_add_header(req, "Retry-After", "1");
    http_reply_json(req, store_ok ? 200 : 503, body);
    json_decref(body);
}

static const char *kind_name(int k) { return op_kind_name((enum op_kind)k); }
static const char *state_name(int s) { return op_state_name((enum op_state)s); }

static void sandboxes_by_state(void *arg, void (*emit)(const char *, int64_t, void *), void *emit_arg)
{
    struct spaced *sp = arg;
    store_sbx_count_by_state(sp->store, emit, emit_arg);
}

static void h_metrics(struct http_req *req, void *arg)
{
    struct spaced *sp = arg;
    char *text = NULL;
    struct metrics_view v = {
        .op_kinds = OP_KIND_COUNT, .op_kind_name = kind_name,
        .op_state_first_final = OP_SUCCEEDED, .op_states = OP_STATE_COUNT,
        .op_state_name = state_name,
        .sandboxes_by_state = sandboxes_by_state, .arg = sp,
        .pool_ready = sbx_pools_ready(sp),
        .uptime_s = (spaced_now_ms() - sp->started_ms) / 1000,
    };
    long n = metrics_render(sp->metrics, &v, &text);
    if (n < 0) {
        routes_reply_error(sp, req, 500, "internal", "cannot render metrics");
        return;
    }
    http_reply(req, 200, "text/plain; version=0.0.4", text, (size_t)n);
    free(text);
}

void routes_health_register(struct router *r, struct spaced *sp)
{
    router_add(r, "GET", "/healthz", h_healthz, sp);
    router_add(r, "GET", "/metrics", h_metrics, sp);
}
