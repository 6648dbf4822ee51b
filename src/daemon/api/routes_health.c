/* routes_health.c: GET /healthz and GET /metrics (no authentication: they reveal no
 * tenant data, and probes and scrapers must not need keys). */
#include <stdlib.h>

#include "daemon/metrics.h"
#include "daemon/vm/vm.h"
#include "routes.h"

#define SPACE_VERSION "0.1.0"

static void h_healthz(struct http_req *req, void *arg)
{
    struct spaced *sp = arg;
    json_t *body = json_pack("{s:s, s:s, s:I, s:s}", "status", "ok", "version", SPACE_VERSION,
                             "uptime_s", (json_int_t)((spaced_now_ms() - sp->started_ms) / 1000),
                             "accel", vm_accel_name(vm_accel_resolve((enum vm_accel)sp->opt.accel)));
    http_reply_json(req, 200, body);
    json_decref(body);
}

static void h_metrics(struct http_req *req, void *arg)
{
    struct spaced *sp = arg;
    char *text = NULL;
    long n = metrics_render(sp, &text);
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
