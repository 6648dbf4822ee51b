/* net.c: the per-sandbox records, the namespace pool, and the claim / policy / release
 * paths (see net.h). */
#include <dirent.h>
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/net/net_internal.h"
#include "log.h"

static bool id_ok(const char *id)
{
    return net_id_ok(id, NET_ID_MAX);
}

void net_rec_ns_path(const struct net *n, const char *id, char *out, size_t cap)
{
    snprintf(out, cap, "%s/%s%s", n->netns_dir, n->prefix, id);
}

struct net_rec *net_rec_find(struct net *n, const char *id)
{
    for (struct net_rec *r = n->recs; r; r = r->next)
        if (strcmp(r->id, id) == 0)
            return r;
    return NULL;
}

uint64_t net_rec_touch(struct net *n, struct net_rec *r)
{
    return r->gen = ++n->gen;
}

static void rec_free(struct net_rec *r)
{
    json_decref(r->policy);
    json_decref(r->creds);
    free(r);
}

static bool policy_is_none(const json_t *policy)
{
    return strcmp(json_string_value(json_object_get(policy, "mode")), "none") == 0;
}

/* Writes the record atomically (temp file + rename), 0600: it holds secrets. Synced:
 * after a power cut a tightened policy must not come back as the older, wider one. */
static int rec_save(struct net *n, const struct net_rec *r)
{
    char path[PATH_MAX + 64], tmp[PATH_MAX + 80];
    snprintf(path, sizeof path, "%s/%s.json", n->rec_dir, r->id);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    json_t *o = json_pack("{s:s, s:s, s:O, s:O, s:b}", "sandbox", r->id, "tenant", r->tenant,
                          "policy", r->policy, "creds", r->creds, "nic", r->nic);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    int rc = -1;
    if (o && fd >= 0 && json_dumpfd(o, fd, JSON_COMPACT) == 0 && fsync(fd) == 0)
        rc = 0;
    if (fd >= 0)
        close(fd);
    json_decref(o);
    if (rc == 0 && rename(tmp, path) != 0)
        rc = -1;
    if (rc != 0) {
        log_error("net.record_write", "sandbox=%s errno=%d", r->id, errno);
        unlink(tmp);
    }
    return rc;
}

/* A new record with `policy` (canonical; owned by the record from here, freed on
 * failure), saved and listed. Intent first: a crash after the save finds the record and
 * the next claim finishes. NULL with err. */
static struct net_rec *rec_add(struct net *n, const char *id, const char *tenant, json_t *policy,
                               struct spaced_err *err)
{
    struct net_rec *r = calloc(1, sizeof *r);
    if (!r) {
        json_decref(policy);
        spaced_err_set(err, 500, "internal", "out of memory");
        return NULL;
    }
    snprintf(r->id, sizeof r->id, "%s", id);
    snprintf(r->tenant, sizeof r->tenant, "%s", tenant ? tenant : "");
    r->policy = policy;
    r->creds = json_array();
    r->nic = !policy_is_none(policy);
    if (!r->creds || rec_save(n, r) != 0) {
        rec_free(r);
        spaced_err_set(err, 500, "internal", "cannot write the network record");
        return NULL;
    }
    net_rec_touch(n, r);
    r->next = n->recs;
    n->recs = r;
    return r;
}

static void rec_remove(struct net *n, const char *id)
{
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s.json", n->rec_dir, id);
    if (unlink(path) != 0 && errno != ENOENT)
        log_warn("net.record_remove", "sandbox=%s errno=%d", id, errno);
}

/* Loads one record file; malformed ones are logged and skipped (never trusted). */
static void rec_load(struct net *n, const char *file)
{
    char path[PATH_MAX + 300];
    snprintf(path, sizeof path, "%s/%s", n->rec_dir, file);
    json_error_t je;
    json_t *o = json_load_file(path, 0, &je);
    const char *id = json_string_value(json_object_get(o, "sandbox"));
    const char *tenant = json_string_value(json_object_get(o, "tenant"));
    struct spaced_err err;
    json_t *policy = id_ok(id) ? net_policy_check(json_object_get(o, "policy"), &err) : NULL;
    json_t *creds = policy ? net_creds_check(json_object_get(o, "creds"), &err) : NULL;
    struct net_rec *r = creds && tenant ? calloc(1, sizeof *r) : NULL;
    if (!r) {
        log_warn("net.record_bad", "file=%s", file);
        json_decref(policy);
        json_decref(creds);
        json_decref(o);
        return;
    }
    snprintf(r->id, sizeof r->id, "%s", id);
    snprintf(r->tenant, sizeof r->tenant, "%s", tenant);
    r->policy = policy;
    r->creds = creds;
    r->nic = json_is_true(json_object_get(o, "nic"));
    net_rec_touch(n, r);
    r->next = n->recs;
    n->recs = r;
    json_decref(o);
}

static int recs_load(struct net *n, char *err, size_t errlen)
{
    DIR *d = opendir(n->rec_dir);
    if (!d) {
        snprintf(err, errlen, "%s: %s", n->rec_dir, strerror(errno));
        return -1;
    }
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len > 5 && strcmp(e->d_name + len - 5, ".json") == 0)
            rec_load(n, e->d_name);
    }
    closedir(d);
    return 0;
}

/* ---- the pool ---------------------------------------------------------------------- */

static void refill_cb(evutil_socket_t fd, short what, void *arg)
{
    struct net *n = arg;
    if (n->pool_n >= n->pool_want)
        return;
    char err[256];
    int ns = net_ns_create(n->home_fd, err, sizeof err);
    if (ns < 0) {
        /* Claims still work (they create one themselves); do not spin on the error. */
        log_warn("net.pool", "error=\"%s\"", err);
        return;
    }
    n->pool[n->pool_n++] = ns;
    if (n->pool_n < n->pool_want)
        event_active(n->refill, 0, 0);
}

/* A ready namespace: from the pool (scheduling a refill) or made now. */
static int pool_take(struct net *n, char *err, size_t errlen)
{
    if (n->pool_n) {
        int fd = n->pool[--n->pool_n];
        if (n->refill)
            event_active(n->refill, 0, 0);
        return fd;
    }
    return net_ns_create(n->home_fd, err, errlen);
}

/* ---- the gateway ------------------------------------------------------------------- */

bool net_reply_ok(const json_t *req, const json_t *rep, const char *err, char *code,
                  size_t codelen)
{
    const char *op = json_string_value(json_object_get(req, "op"));
    const char *id = json_string_value(json_object_get(req, "sandbox"));
    if (code)
        *code = 0;
    if (!rep) {
        log_warn("net.gateway", "op=%s sandbox=%s error=\"%s\"", op, id ? id : "-", err);
        return false;
    }
    if (json_is_true(json_object_get(rep, "ok")))
        return true;
    json_t *e = json_object_get(rep, "error");
    const char *c = json_string_value(json_object_get(e, "code"));
    const char *m = json_string_value(json_object_get(e, "message"));
    if (code)
        snprintf(code, codelen, "%s", c ? c : "");
    if (!c || strcmp(c, "exists") != 0)
        log_warn("net.gateway", "op=%s sandbox=%s code=%s msg=\"%s\"", op, id ? id : "-",
                 c ? c : "?", m ? m : "");
    return false;
}

/* One request (req stolen), after the resync's request in flight (net_resync_settle):
 * the gateway must see ours last. NULL (error logged) when unreachable or refused; code
 * gets the error code of a refusal ("" otherwise). Returns the reply (new reference). */
static json_t *gw_call(struct net *n, json_t *req, char *code, size_t codelen)
{
    char err[256];
    net_resync_settle(n->resync);
    json_t *rep = net_ctl_call(n->ctl, req, err, sizeof err);
    if (!net_reply_ok(req, rep, err, code, codelen)) {
        json_decref(rep);
        rep = NULL;
    }
    json_decref(req);
    return rep;
}

json_t *net_req_creds(const struct net_rec *r)
{
    json_t *rules = json_array();
    size_t i;
    json_t *c;
    json_array_foreach(r->creds, i, c)
        json_array_append_new(rules, json_pack("{s:O, s:O, s:O}", "host", json_object_get(c, "host"),
                                               "header", json_object_get(c, "header"),
                                               "value", json_object_get(c, "secret")));
    return json_pack("{s:s, s:s, s:o}", "op", "creds", "sandbox", r->id, "rules", rules);
}

json_t *net_req_attach(const struct net_rec *r, const char *nspath)
{
    return json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:O}", "op", "attach", "sandbox",
                     r->id, "tenant", r->tenant, "netns", nspath, "dev", NET_TAP, "guest_mac",
                     NET_GUEST_MAC, "guest_ip", NET_GUEST_IP, "gateway_ip", NET_GATEWAY_IP,
                     "policy", r->policy);
}

json_t *net_req_policy(const struct net_rec *r)
{
    return json_pack("{s:s, s:s, s:O}", "op", "policy", "sandbox", r->id, "policy", r->policy);
}

/* The creds request. True once the gateway has them. */
static bool gw_send_creds(struct net *n, const struct net_rec *r)
{
    json_t *rep = gw_call(n, net_req_creds(r), NULL, 0);
    json_decref(rep);
    return rep != NULL;
}

/* A claim's attach on the namespace at nspath, then credentials. True once the gateway
 * serves the sandbox: its DNS, HTTP and TLS sockets are open in the namespace when
 * attach answers.
 *
 * The VM is new and its namespace may be too (a pooled VM's), so an attachment the
 * gateway still holds under the id (an earlier attempt of the create, a request that
 * timed out but was served late) may be on another namespace: it is dropped and made
 * again. (The resync, net_resync.c, keeps an attachment the gateway has: it is live and
 * only gets the policy.) */
static bool gw_attach(struct net *n, struct net_rec *r, const char *nspath)
{
    char code[48];
    json_t *req = net_req_attach(r, nspath);
    json_t *rep = gw_call(n, json_incref(req), code, sizeof code);
    if (!rep && strcmp(code, "exists") == 0) {
        json_decref(gw_call(n, json_pack("{s:s, s:s}", "op", "detach", "sandbox", r->id), NULL, 0));
        rep = gw_call(n, json_incref(req), NULL, 0);
    }
    json_decref(req);
    bool ok = rep && (!json_array_size(r->creds) || gw_send_creds(n, r));
    json_decref(rep);
    if (ok) /* everything is in this gateway: a resync under way need not send it */
        r->claimed_gen = net_rec_touch(n, r);
    return ok;
}

/* A claim's error when the gateway did not take the attach, whatever the reason: down
 * (restarting), stuck (its control socket times out) or refusing. A VM started anyway
 * would have its DNS refused and every connection reset until the next resync, and the
 * create would report a sandbox that cannot resolve. Callers that can wait for a
 * restarting gateway check net_gateway_up first (sbx_gwwait.c). */
static int gw_unavailable(struct net *n, struct spaced_err *err, const char *sandbox)
{
    if (!net_gateway_up(n))
        return spaced_err_set(err, 503, "gateway_unavailable",
                              "the network gateway is not running (spaced restarts it); "
                              "sandbox %s was not attached: try again", sandbox);
    return spaced_err_set(err, 503, "gateway_unavailable",
                          "the network gateway did not attach sandbox %s (see spaced's log); "
                          "try again", sandbox);
}

void net_on_gateway_up(struct net *n, void (*fn)(void *arg), void *arg)
{
    n->gateway_up = fn;
    n->gateway_up_arg = arg;
}

void net_gateway_resync(struct net *n)
{
    net_resync_start(n->resync);
}

bool net_gateway_up(struct net *n)
{
    if (n->gw)
        return net_gw_up(n->gw);
    char err[128];
    json_t *req = json_pack("{s:s}", "op", "ping");
    json_t *rep = net_ctl_call(n->ctl, req, err, sizeof err);
    bool ok = json_is_true(json_object_get(rep, "ok"));
    json_decref(req);
    json_decref(rep);
    return ok;
}

/* ---- life cycle -------------------------------------------------------------------- */

struct net *net_new(struct event_base *base, const struct net_opts *o, char *err, size_t errlen)
{
    struct net *n = calloc(1, sizeof *n);
    if (!n || !o->data_dir) {
        snprintf(err, errlen, n ? "net: data_dir is required" : "out of memory");
        free(n);
        return NULL;
    }
    n->base = base;
    n->home_fd = -1;
    snprintf(n->rec_dir, sizeof n->rec_dir, "%s/net", o->data_dir);
    const char *dir = o->netns_dir ? o->netns_dir : NET_NETNS_DIR;
    const char *prefix = o->ns_prefix ? o->ns_prefix : NET_NS_PREFIX;
    if (strlen(dir) >= sizeof n->netns_dir || strlen(prefix) >= sizeof n->prefix) {
        snprintf(err, errlen, "net: namespace directory or prefix too long");
        free(n);
        return NULL;
    }
    snprintf(n->netns_dir, sizeof n->netns_dir, "%s", dir);
    snprintf(n->prefix, sizeof n->prefix, "%s", prefix);
    char gwdir[PATH_MAX];
    snprintf(gwdir, sizeof gwdir, "%s/gateway", o->data_dir);
    if (o->gateway_ctl)
        snprintf(n->ctl, sizeof n->ctl, "%s", o->gateway_ctl);
    else
        snprintf(n->ctl, sizeof n->ctl, "%s/gateway.sock", gwdir);
    if (mkdir(n->rec_dir, 0700) != 0 && errno != EEXIST) {
        snprintf(err, errlen, "mkdir %s: %s", n->rec_dir, strerror(errno));
        goto fail;
    }
    n->home_fd = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    if (n->home_fd < 0) {
        snprintf(err, errlen, "opening our network namespace: %s", strerror(errno));
        goto fail;
    }
    if (net_ns_prepare_dir(n->netns_dir, err, errlen) != 0 || recs_load(n, err, errlen) != 0)
        goto fail;
    n->pool_want = o->pool;
    if (o->pool) {
        n->pool = calloc(o->pool, sizeof *n->pool);
        n->refill = event_new(base, -1, 0, refill_cb, n);
        if (!n->pool || !n->refill) {
            snprintf(err, errlen, "out of memory");
            goto fail;
        }
        event_active(n->refill, 0, 0);
    }
    if (!(n->resync = net_resync_new(n))) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    if (o->gateway_bin) {
        n->gw = net_gw_new(n, base, o->gateway_bin, gwdir, n->ctl, o->gateway_args, err, errlen);
        if (!n->gw)
            goto fail;
    } else if (net_gateway_up(n)) {
        net_gateway_resync(n);
    }
    return n;
fail:
    net_free(n);
    return NULL;
}

void net_free(struct net *n)
{
    if (!n)
        return;
    net_resync_free(n->resync);
    net_gw_free(n->gw);
    for (unsigned i = 0; i < n->pool_n; i++)
        close(n->pool[i]);
    free(n->pool);
    if (n->refill)
        event_free(n->refill);
    while (n->recs) {
        struct net_rec *r = n->recs;
        n->recs = r->next;
        rec_free(r);
    }
    if (n->home_fd >= 0)
        close(n->home_fd);
    free(n);
}

void net_exit(struct net *n)
{
    if (!n || !n->gw)
        return;
    for (struct net_rec *r = n->recs; r; r = r->next)
        if (r->nic)
            return;
    net_gw_stop(n->gw);
}

/* ---- claim / release --------------------------------------------------------------- */

/* The sandbox's namespace fd, mounting a fresh one if none is there yet. */
static int ns_for(struct net *n, const char *id, struct spaced_err *err)
{
    char path[NET_NS_PATH_MAX], msg[256];
    net_rec_ns_path(n, id, path, sizeof path);
    int fd = net_ns_open(path);
    if (fd >= 0)
        return fd;
    if (errno == EINVAL) /* a leftover file from a crash between create and mount */
        net_ns_unmount(path);
    else if (errno != ENOENT) {
        spaced_err_set(err, 500, "net_failed", "opening %s: %s", path, strerror(errno));
        return -1;
    }
    fd = pool_take(n, msg, sizeof msg);
    if (fd >= 0 && net_ns_mount(fd, path, msg, sizeof msg) != 0) {
        close(fd);
        fd = -1;
    }
    if (fd < 0)
        spaced_err_set(err, 500, "net_failed", "sandbox network: %s", msg);
    return fd;
}

/* A fresh fd on the tap of the namespace mounted for id (made if needed). */
static int lease_tap(struct net *n, const char *id, struct net_lease *out, struct spaced_err *err)
{
    int nsfd = ns_for(n, id, err);
    if (nsfd < 0)
        return -1;
    char msg[256];
    out->tap_fd = net_ns_tap_open(n->home_fd, nsfd, msg, sizeof msg);
    close(nsfd);
    if (out->tap_fd < 0)
        return spaced_err_set(err, 500, "net_failed", "sandbox network: %s", msg);
    snprintf(out->mac, sizeof out->mac, "%s", NET_GUEST_MAC);
    net_rec_ns_path(n, id, out->netns, sizeof out->netns);
    return 0;
}

/* The sandbox's record; the first claim makes it from policy_json (NULL = none). */
static struct net_rec *rec_for_claim(struct net *n, const char *sandbox, const char *tenant,
                                     const char *policy_json, struct spaced_err *err)
{
    struct net_rec *r = net_rec_find(n, sandbox);
    if (r)
        return r;
    json_t *given = json_loads(policy_json ? policy_json : "{\"mode\":\"none\"}", 0, NULL);
    json_t *policy = net_policy_check(given, err);
    json_decref(given);
    return policy ? rec_add(n, sandbox, tenant, policy, err) : NULL;
}

int net_claim(struct net *n, const char *sandbox, const char *tenant, const char *policy_json,
              struct net_lease *out, struct spaced_err *err)
{
    memset(out, 0, sizeof *out);
    out->tap_fd = -1;
    if (!id_ok(sandbox))
        return spaced_err_set(err, 400, "invalid_id", "not a sandbox id");
    struct net_rec *r = rec_for_claim(n, sandbox, tenant, policy_json, err);
    if (!r)
        return -1;
    if (!r->nic)
        return 0;
    if (lease_tap(n, sandbox, out, err) != 0)
        return -1;
    if (!gw_attach(n, r, out->netns)) {
        close(out->tap_fd);
        out->tap_fd = -1;
        return gw_unavailable(n, err, sandbox);
    }
    return 0;
}

int net_claim_template(struct net *n, const char *owner, struct net_lease *out,
                       struct spaced_err *err)
{
    memset(out, 0, sizeof *out);
    out->tap_fd = -1;
    if (!id_ok(owner))
        return spaced_err_set(err, 400, "invalid_id", "not a template VM id");
    return lease_tap(n, owner, out, err);
}

int net_claim_from(struct net *n, const char *sandbox, const char *tenant,
                   const char *policy_json, const char *owner, struct spaced_err *err)
{
    if (!id_ok(sandbox) || !id_ok(owner))
        return spaced_err_set(err, 400, "invalid_id", "not a sandbox id");
    char from[NET_NS_PATH_MAX], to[NET_NS_PATH_MAX], msg[256];
    net_rec_ns_path(n, owner, from, sizeof from);
    net_rec_ns_path(n, sandbox, to, sizeof to);
    int fd = net_ns_open(from);
    if (fd < 0)
        return spaced_err_set(err, 500, "net_failed", "the pooled VM's namespace %s: %s", from,
                              strerror(errno));
    struct net_rec *r = rec_for_claim(n, sandbox, tenant, policy_json, err);
    if (r && !r->nic)
        spaced_err_set(err, 409, "nic_change_needed",
                       "sandbox %s has network mode \"none\": it cannot take a VM with a NIC", sandbox);
    /* A namespace already under the sandbox's name is left from an earlier attempt of
     * this create (whose VM is gone); the pooled one replaces it. */
    net_ns_unmount(to);
    int rc = r && r->nic && net_ns_mount(fd, to, msg, sizeof msg) == 0 ? 0 : -1;
    close(fd);
    if (rc != 0) {
        if (r && r->nic)
            spaced_err_set(err, 500, "net_failed", "sandbox network: %s", msg);
        return -1;
    }
    if (!gw_attach(n, r, to)) {
        net_ns_unmount(to); /* owner's is still mounted, for net_release(owner) */
        return gw_unavailable(n, err, sandbox);
    }
    net_ns_unmount(from);
    return 0;
}

void net_release(struct net *n, const char *sandbox)
{
    if (!id_ok(sandbox))
        return;
    struct net_rec **pp = &n->recs;
    while (*pp && strcmp((*pp)->id, sandbox) != 0)
        pp = &(*pp)->next;
    if (*pp && (*pp)->nic)
        json_decref(gw_call(n, json_pack("{s:s, s:s}", "op", "detach", "sandbox", sandbox), NULL, 0));
    char path[NET_NS_PATH_MAX];
    net_rec_ns_path(n, sandbox, path, sizeof path);
    net_ns_unmount(path);
    rec_remove(n, sandbox);
    if (*pp) {
        struct net_rec *r = *pp;
        *pp = r->next;
        rec_free(r);
    }
}

void net_sweep(struct net *n, bool (*known)(const char *sandbox, void *arg), void *arg)
{
    struct net_rec *r = n->recs;
    while (r) {
        struct net_rec *next = r->next;
        if (!known(r->id, arg)) {
            log_info("net.sweep", "sandbox=%s", r->id);
            net_release(n, r->id);
        }
        r = next;
    }
}

/* ---- policy, credentials, log ------------------------------------------------------ */

static struct net_rec *rec_or_404(struct net *n, const char *id, struct spaced_err *err)
{
    struct net_rec *r = id_ok(id) ? net_rec_find(n, id) : NULL;
    if (!r)
        spaced_err_set(err, 404, "not_found",
                       "sandbox %.48s has no network yet (it gets one when its VM first starts)",
                       id_ok(id) ? id : "?");
    return r;
}

int net_set_policy(struct net *n, const char *sandbox, const char *tenant, const json_t *policy,
                   struct spaced_err *err)
{
    if (!id_ok(sandbox))
        return spaced_err_set(err, 400, "invalid_id", "not a sandbox id");
    json_t *p = net_policy_check(policy, err);
    if (!p)
        return -1;
    struct net_rec *r = net_rec_find(n, sandbox);
    if (!r) /* never claimed: the policy (and whether there is a NIC) is still open */
        return rec_add(n, sandbox, tenant, p, err) ? 0 : -1;
    if (!r->nic && !policy_is_none(p)) {
        json_decref(p);
        return spaced_err_set(err, 409, "nic_change_needed",
                              "sandbox %s was created with network mode \"none\" and has no network "
                              "device; create a new sandbox with a network policy instead", sandbox);
    }
    json_t *old = r->policy;
    r->policy = p;
    if (rec_save(n, r) != 0) {
        r->policy = old;
        json_decref(p);
        return spaced_err_set(err, 500, "internal", "cannot write the network record");
    }
    json_decref(old);
    net_rec_touch(n, r);
    if (r->nic)
        json_decref(gw_call(n, net_req_policy(r), NULL, 0));
    return 0;
}

json_t *net_policy_get(struct net *n, const char *sandbox, struct spaced_err *err)
{
    struct net_rec *r = rec_or_404(n, sandbox, err);
    if (!r)
        return NULL;
    json_t *o = json_deep_copy(r->policy);
    json_object_set_new(o, "nic", json_boolean(r->nic));
    return o;
}

int net_set_creds(struct net *n, const char *sandbox, const json_t *rules,
                  struct spaced_err *err)
{
    struct net_rec *r = rec_or_404(n, sandbox, err);
    if (!r)
        return -1;
    json_t *c = net_creds_check(rules, err);
    if (!c)
        return -1;
    json_t *old = r->creds;
    r->creds = c;
    if (rec_save(n, r) != 0) {
        r->creds = old;
        json_decref(c);
        return spaced_err_set(err, 500, "internal", "cannot write the network record");
    }
    json_decref(old);
    net_rec_touch(n, r);
    if (r->nic)
        gw_send_creds(n, r);
    return 0;
}

json_t *net_creds_get(struct net *n, const char *sandbox, struct spaced_err *err)
{
    struct net_rec *r = rec_or_404(n, sandbox, err);
    if (!r)
        return NULL;
    json_t *out = json_array();
    size_t i;
    json_t *c;
    json_array_foreach(r->creds, i, c)
        json_array_append_new(out, json_pack("{s:O, s:O}", "host", json_object_get(c, "host"),
                                             "header", json_object_get(c, "header")));
    return out;
}

int net_creds_save(struct net *n, const char *sandbox, const char *path)
{
    struct net_rec *r = id_ok(sandbox) ? net_rec_find(n, sandbox) : NULL;
    if (!r || !json_array_size(r->creds))
        return 0;
    return net_json_save(path, r->creds) == 0 ? 1 : -1;
}

json_t *net_log(struct net *n, const char *sandbox, int64_t since, struct spaced_err *err)
{
    struct net_rec *r = rec_or_404(n, sandbox, err);
    if (!r)
        return NULL;
    if (!r->nic)
        return json_pack("{s:[]}", "entries");
    char msg[256];
    json_t *req = json_pack("{s:s, s:s, s:I}", "op", "log", "sandbox", r->id, "since",
                            (json_int_t)since);
    json_t *rep = net_ctl_call(n->ctl, req, msg, sizeof msg);
    json_decref(req);
    json_t *entries = json_object_get(rep, "entries");
    if (!json_is_true(json_object_get(rep, "ok")) || !json_is_array(entries)) {
        const char *m = json_string_value(json_object_get(json_object_get(rep, "error"), "message"));
        spaced_err_set(err, 503, "gateway_unavailable", "decision log unavailable: %s",
                       rep ? (m ? m : "bad reply") : msg);
        json_decref(rep);
        return NULL;
    }
    json_t *out = json_pack("{s:O}", "entries", entries);
    json_decref(rep);
    return out;
}
