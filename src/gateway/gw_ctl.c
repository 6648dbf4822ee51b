/* gw_ctl.c: JSON-lines control socket; see gw_ctl.h. */
#include "gw_ctl.h"

#include <errno.h>
#include <event2/buffer.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

static json_t *fail(const char *code, const char *msg)
{
    return json_pack("{s:b, s:{s:s, s:s}}", "ok", 0, "error", "code", code, "message", msg);
}

json_t *gw_ctl_handle(struct gw *gw, const json_t *req)
{
    const char *op = json_string_value(json_object_get(req, "op"));
    const char *id = json_string_value(json_object_get(req, "sandbox"));
    char err[256] = "";
    if (!op)
        return fail("bad_request", "missing op");
    if (strcmp(op, "ping") == 0)
        return json_pack("{s:b, s:s}", "ok", 1, "ca", tls_ca_cert_path(gw->ca));
    if (strcmp(op, "attach") == 0) {
        if (gw_sandbox_attach(gw, req, err, sizeof err) != 0)
            return fail(strstr(err, "already") ? "exists" : strstr(err, "netns") || strstr(err, "nft") ||
                        strstr(err, "setns") ? "netns" : "bad_request", err);
        return json_pack("{s:b}", "ok", 1);
    }
    if (strcmp(op, "creds") == 0) {
        if (gw_creds_set(gw, req, err, sizeof err) != 0)
            return fail("bad_request", err);
        return json_pack("{s:b}", "ok", 1);
    }
    if (!id)
        return fail("bad_request", "missing sandbox");
    if (strcmp(op, "policy") == 0) {
        if (gw_sandbox_policy(gw, id, json_object_get(req, "policy"), err, sizeof err) != 0)
            return fail(gw_sandbox_find(gw, id) ? "bad_request" : "not_found", err);
        return json_pack("{s:b}", "ok", 1);
    }
    if (strcmp(op, "detach") == 0) {
        if (gw_sandbox_detach(gw, id, err, sizeof err) != 0)
            return fail("not_found", err);
        return json_pack("{s:b}", "ok", 1);
    }
    if (strcmp(op, "log") == 0) {
        struct gw_sandbox *sb = gw_sandbox_find(gw, id);
        json_int_t since = json_integer_value(json_object_get(req, "since"));
        if (!sb)
            return fail("not_found", "no such sandbox");
        return json_pack("{s:b, s:o, s:o, s:I, s:I}", "ok", 1, "policy", policy_to_json(&sb->policy),
                         "entries", gw_declog_json(sb, since < 0 ? 0 : (uint64_t)since),
                         "dns_rate_limited", (json_int_t)sb->dns_rate.refused_total,
                         "conn_rate_limited", (json_int_t)sb->conn_rate.refused_total);
    }
    return fail("bad_request", "unknown op");
}

static void ctl_read(struct bufferevent *bev, void *arg)
{
    struct gw *gw = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    char *line;
    size_t len;
    while ((line = evbuffer_readln(in, &len, EVBUFFER_EOL_LF))) {
        json_error_t je;
        json_t *req = json_loadb(line, len, 0, &je);
        free(line);
        json_t *rep = json_is_object(req) ? gw_ctl_handle(gw, req) : fail("bad_request", "not a JSON object");
        json_decref(req);
        char *out = json_dumps(rep, JSON_COMPACT);
        json_decref(rep);
        if (out) {
            evbuffer_add(bufferevent_get_output(bev), out, strlen(out));
            evbuffer_add(bufferevent_get_output(bev), "\n", 1);
            free(out);
        }
    }
    if (evbuffer_get_length(in) > GW_CTL_LINE_MAX)
        bufferevent_free(bev);
}

static void ctl_event(struct bufferevent *bev, short what, void *arg)
{
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR))
        bufferevent_free(bev);
}

static void ctl_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa,
                       int salen, void *arg)
{
    struct gw *gw = arg;
    struct bufferevent *bev = bufferevent_socket_new(gw->base, fd, BEV_OPT_CLOSE_ON_FREE);
    if (!bev) {
        close(fd);
        return;
    }
    bufferevent_setcb(bev, ctl_read, NULL, ctl_event, gw);
    bufferevent_enable(bev, EV_READ | EV_WRITE);
}

struct evconnlistener *gw_ctl_listen(struct gw *gw, const char *path, char *err, size_t errlen)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof sa.sun_path) {
        snprintf(err, errlen, "control socket path too long");
        return NULL;
    }
    strcpy(sa.sun_path, path);
    unlink(path);
    mode_t old = umask(077);
    struct evconnlistener *l = evconnlistener_new_bind(gw->base, ctl_accept, gw,
        LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, 16, (struct sockaddr *)&sa, sizeof sa);
    umask(old);
    if (!l)
        snprintf(err, errlen, "cannot listen on %s: %s", path, strerror(errno));
    return l;
}
