/* sbx_park.c: an HTTP request parked on an auto-resume (sbx_wake.c), for every route
 * that needs a sandbox's agent: the native API through routes_require_agent (api/), and
 * E2B's envd and port traffic (e2b/e2b_envd.c); here, below both, so neither includes
 * the other. The request waits for the sandbox's one shared wake, then `ready`
 * continues it (a route runs again from the top with router_replay, a hook re-runs
 * itself) or `fail` answers why it could not. A client that goes away meanwhile only
 * drops its place in the wait. */
#include <stdlib.h>

#include "daemon/http/http.h"
#include "sbx.h"

struct park {
    struct spaced *sp;
    struct http_req *req;
    struct sbx_waiter *w;
    sbx_ready_fn ready;
    sbx_fail_fn fail;
    void *arg;
};

static void park_close(struct http_req *req, void *arg)
{
    (void)req;
    struct park *p = arg;
    sbx_wake_cancel(p->sp, p->w);
    free(p);
}

static void park_done(struct spaced *sp, bool ok, const struct spaced_err *err, void *arg)
{
    (void)sp;
    struct park *p = arg;
    struct http_req *req = p->req;
    sbx_ready_fn ready = p->ready;
    sbx_fail_fn fail = p->fail;
    void *rarg = p->arg;
    http_req_on_close(req, NULL, NULL); /* ours no longer: the continuation may set one */
    free(p);
    if (ok)
        ready(req, rarg);
    else
        fail(req, err, rarg);
}

bool sbx_park_request(struct spaced *sp, struct http_req *req, struct sbx *s, sbx_ready_fn ready,
                      sbx_fail_fn fail, void *arg)
{
    struct park *p = calloc(1, sizeof *p);
    struct spaced_err err;
    if (!p) {
        spaced_err_set(&err, 503, "unavailable", "out of memory");
        fail(req, &err, arg);
        return true;
    }
    *p = (struct park){.sp = sp, .req = req, .ready = ready, .fail = fail, .arg = arg};
    p->w = sbx_wake_wait(sp, s, park_done, p, &err);
    if (!p->w) {
        free(p);
        if (err.status == 0)
            return false;
        fail(req, &err, arg);
        return true;
    }
    http_req_on_close(req, park_close, p);
    return true;
}
