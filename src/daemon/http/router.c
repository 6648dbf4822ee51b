/* router.c: method + `{param}` pattern routing with hooks, 404 and 405; see router.h. */
#include "router.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "http_parse.h"

/* A route's pattern segments are at most this many, so a specificity score fits 64 bits. */
#define ROUTER_MAX_SEGS 63

struct route {
    char *method;           /* owned */
    char **segs;            /* owned; literal text, or a parameter name (see is_param) */
    bool *is_param;         /* owned; per segment */
    unsigned nsegs;
    bool rest;              /* last segment is "{name...}": captures the remainder */
    uint64_t score;         /* literal segment i sets bit (63 - i): more specific = higher */
    router_handler_fn fn;
    void *arg;
};

struct hook {
    router_hook_fn fn;
    void *arg;
};

struct shutdown_fn {
    router_free_fn fn;
    void *arg;
};

struct router {
    struct route *routes;   /* owned array */
    unsigned nroutes;
    struct hook *hooks;     /* owned array */
    unsigned nhooks;
    struct shutdown_fn *downs; /* owned array, run newest first by router_free */
    unsigned ndowns;
};

struct router *router_new(void)
{
    return calloc(1, sizeof(struct router));
}

static void route_free(struct route *rt)
{
    for (unsigned i = 0; i < rt->nsegs; i++)
        free(rt->segs[i]);
    free(rt->segs);
    free(rt->is_param);
    free(rt->method);
}

int router_on_shutdown(struct router *r, router_free_fn fn, void *arg)
{
    struct shutdown_fn *grown = realloc(r->downs, (r->ndowns + 1) * sizeof *grown);
    if (!grown)
        return -1;
    r->downs = grown;
    r->downs[r->ndowns].fn = fn;
    r->downs[r->ndowns].arg = arg;
    r->ndowns++;
    return 0;
}

void router_free(struct router *r)
{
    if (!r)
        return;
    /* Popped one at a time: a shutdown function never runs twice. */
    while (r->ndowns > 0) {
        struct shutdown_fn d = r->downs[--r->ndowns];
        d.fn(d.arg);
    }
    free(r->downs);
    for (unsigned i = 0; i < r->nroutes; i++)
        route_free(&r->routes[i]);
    free(r->routes);
    free(r->hooks);
    free(r);
}

/* Parses one pattern segment into rt (appending). Returns 0 or -1. */
static int add_segment(struct route *rt, const char *s, size_t len, bool last)
{
    if (len == 0 || rt->nsegs >= ROUTER_MAX_SEGS || rt->rest)
        return -1;
    bool param = s[0] == '{';
    if (param) {
        if (len < 3 || s[len - 1] != '}')
            return -1;
        s++;
        len -= 2;
        if (len > 3 && memcmp(s + len - 3, "...", 3) == 0) {
            if (!last)
                return -1;
            rt->rest = true;
            len -= 3;
        }
        if (len == 0 || memchr(s, '{', len) || memchr(s, '}', len))
            return -1;
        for (unsigned i = 0; i < rt->nsegs; i++)
            if (rt->is_param[i] && strlen(rt->segs[i]) == len && memcmp(rt->segs[i], s, len) == 0)
                return -1;
    } else if (memchr(s, '{', len) || memchr(s, '}', len)) {
        return -1;
    }
    char *copy = strndup(s, len);
    if (!copy)
        return -1;
    rt->segs[rt->nsegs] = copy;
    rt->is_param[rt->nsegs] = param;
    if (!param)
        rt->score |= 1ULL << (63 - rt->nsegs);
    rt->nsegs++;
    return 0;
}

int router_add(struct router *r, const char *method, const char *pattern,
               router_handler_fn fn, void *arg)
{
    if (!method || !*method || !pattern || pattern[0] != '/' || !fn)
        return -1;
    struct route rt = {.fn = fn, .arg = arg};
    size_t plen = strlen(pattern);
    rt.method = strdup(method);
    rt.segs = calloc(ROUTER_MAX_SEGS, sizeof *rt.segs);
    rt.is_param = calloc(ROUTER_MAX_SEGS, sizeof *rt.is_param);
    int rc = rt.method && rt.segs && rt.is_param ? 0 : -1;
    const char *p = pattern + 1;
    while (rc == 0 && p < pattern + plen) {
        const char *slash = strchr(p, '/');
        size_t len = slash ? (size_t)(slash - p) : strlen(p);
        rc = add_segment(&rt, p, len, !slash);
        p += len + (slash ? 1 : 0);
        if (rc == 0 && slash && p == pattern + plen)
            rc = -1; /* trailing slash: "/a/" would never match */
    }
    struct route *grown = rc == 0 ? realloc(r->routes, (r->nroutes + 1) * sizeof *grown) : NULL;
    if (!grown) {
        route_free(&rt);
        return -1;
    }
    r->routes = grown;
    r->routes[r->nroutes++] = rt;
    return 0;
}

int router_add_hook(struct router *r, router_hook_fn fn, void *arg)
{
    struct hook *grown = realloc(r->hooks, (r->nhooks + 1) * sizeof *grown);
    if (!grown)
        return -1;
    r->hooks = grown;
    r->hooks[r->nhooks].fn = fn;
    r->hooks[r->nhooks].arg = arg;
    r->nhooks++;
    return 0;
}

/* The raw path split into segments: starts[i]/lens[i] index into the target. */
struct path_segs {
    const char *raw;
    size_t rawlen;
    unsigned n;
    size_t *starts;
    size_t *lens;
};

static int split_path(const char *target, struct path_segs *ps)
{
    const char *q = strchr(target, '?');
    ps->raw = target;
    ps->rawlen = q ? (size_t)(q - target) : strlen(target);
    unsigned max = 0;
    for (size_t i = 0; i < ps->rawlen; i++)
        max += target[i] == '/';
    ps->starts = calloc(max + 1, sizeof *ps->starts);
    ps->lens = calloc(max + 1, sizeof *ps->lens);
    if (!ps->starts || !ps->lens)
        return -1;
    ps->n = 0;
    /* "/" alone has no segments; otherwise every '/' opens one (possibly empty). */
    if (ps->rawlen <= 1)
        return 0;
    size_t i = 1;
    for (;;) {
        size_t s = i;
        while (i < ps->rawlen && target[i] != '/')
            i++;
        ps->starts[ps->n] = s;
        ps->lens[ps->n] = i - s;
        ps->n++;
        if (i >= ps->rawlen)
            return 0;
        i++;
    }
}

/* Whether a decoded segment equals a literal. */
static bool seg_equals(const struct path_segs *ps, unsigned i, const char *lit)
{
    char *d = http_pct_decode(ps->raw + ps->starts[i], ps->lens[i], false);
    bool eq = d && strcmp(d, lit) == 0;
    free(d);
    return eq;
}

static bool route_matches(const struct route *rt, const struct path_segs *ps)
{
    if (rt->rest ? ps->n < rt->nsegs : ps->n != rt->nsegs)
        return false;
    for (unsigned i = 0; i < rt->nsegs; i++) {
        if (rt->is_param[i]) {
            if (ps->lens[i] == 0)
                return false;
        } else if (!seg_equals(ps, i, rt->segs[i])) {
            return false;
        }
    }
    return true;
}

/* Stores the route's parameters on the request. Returns 0 or -1 (bad encoding/OOM). */
static int capture_params(struct http_req *req, const struct route *rt, const struct path_segs *ps)
{
    for (unsigned i = 0; i < rt->nsegs; i++) {
        if (!rt->is_param[i])
            continue;
        bool rest = rt->rest && i == rt->nsegs - 1;
        size_t len = rest ? ps->rawlen - ps->starts[i] : ps->lens[i];
        char *v = http_pct_decode(ps->raw + ps->starts[i], len, false);
        int rc = v ? http_req_set_param(req, rt->segs[i], v) : -1;
        free(v);
        if (rc < 0)
            return -1;
    }
    return 0;
}

static bool method_fits(const struct route *rt, const char *method, bool exact)
{
    if (strcmp(rt->method, method) == 0)
        return true;
    return !exact && strcmp(method, "HEAD") == 0 && strcmp(rt->method, "GET") == 0;
}

/* Best matching route for the method (exact first, then HEAD->GET), or NULL. Sets
 * *path_known when any route matches the path. */
static const struct route *find_route(const struct router *r, const char *method,
                                      const struct path_segs *ps, bool *path_known)
{
    const struct route *best = NULL;
    for (int pass = 0; pass < 2 && !best; pass++) {
        for (unsigned i = 0; i < r->nroutes; i++) {
            const struct route *rt = &r->routes[i];
            if (!route_matches(rt, ps))
                continue;
            *path_known = true;
            if (method_fits(rt, method, pass == 0) && (!best || rt->score > best->score))
                best = rt;
        }
    }
    return best;
}

/* 405 with an Allow header listing the methods the path supports. */
static void reply_not_allowed(const struct router *r, struct http_req *req,
                              const struct path_segs *ps)
{
    char allow[256] = "";
    size_t used = 0;
    for (unsigned i = 0; i < r->nroutes; i++) {
        const struct route *rt = &r->routes[i];
        bool listed = false;
        for (unsigned k = 0; k < i && !listed; k++)
            listed = strcmp(r->routes[k].method, rt->method) == 0 && route_matches(&r->routes[k], ps);
        if (listed || !route_matches(rt, ps))
            continue;
        size_t ml = strlen(rt->method);
        if (used + ml + 3 >= sizeof allow)
            break;
        used += (size_t)snprintf(allow + used, sizeof allow - used, "%s%s", used ? ", " : "",
                                 rt->method);
    }
    http_reply_add_header(req, "Allow", allow);
    http_reply_error(req, 405, "method_not_allowed", "method %s not allowed here; allowed: %s",
                     http_req_method(req), allow);
}

void router_dispatch(struct http_req *req, void *arg)
{
    struct router *r = arg;
    for (unsigned i = 0; i < r->nhooks; i++)
        if (r->hooks[i].fn(req, r->hooks[i].arg))
            return;
    struct path_segs ps = {0};
    if (split_path(http_req_target(req), &ps) < 0) {
        free(ps.starts);
        free(ps.lens);
        http_reply_error(req, 503, "unavailable", "out of memory");
        return;
    }
    bool path_known = false;
    const struct route *rt = find_route(r, http_req_method(req), &ps, &path_known);
    if (rt && capture_params(req, rt, &ps) < 0)
        http_reply_error(req, 400, "bad_request", "invalid path parameter");
    else if (rt) {
        http_req_set_route(req, rt->fn, rt->arg);
        rt->fn(req, rt->arg);
    }
    else if (path_known)
        reply_not_allowed(r, req, &ps);
    else
        http_reply_error(req, 404, "not_found", "no route for %s", http_req_path(req));
    free(ps.starts);
    free(ps.lens);
}

void router_replay(struct http_req *req)
{
    void *arg;
    http_handler_fn fn = http_req_route(req, &arg);
    if (fn)
        fn(req, arg);
    else
        http_reply_error(req, 500, "internal", "request parked outside a route");
}

const char *router_param(const struct http_req *req, const char *name)
{
    return http_req_param(req, name);
}
