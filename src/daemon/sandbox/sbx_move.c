/* sbx_move.c: suspended and stopped sandboxes that move off a drained node (docs/
 * multinode.md, "Suspended sandboxes that move").
 *
 * The old node (A): when a sandbox becomes suspended or stopped on a cluster node, its
 * files are hashed like a snapshot's (sbx_parts.c, on a worker thread): suspend/state,
 * suspend/mem and suspend/snapshot.json when present (named state, mem, snapshot.json),
 * disk.qcow2, the layers of its backing.json (layer<i>) and, when it has credential
 * rules, the file `creds` the net module writes into its directory (net_creds_save: the
 * rules with their secrets, 0600). The record, with "node": A and, for a suspended one,
 * the runtime its snapshot.json names (vm/vm_sig.h: where its memory can come back), goes
 * into the sandbox row's `parts` once every file is hashed and only if nothing was done
 * to the sandbox meanwhile; any verb on it clears the record first (the files change), so
 * a recorded `parts` always describes the files on disk; so does a change of its
 * credential rules (sbx_move_unrecord, then a new record).
 *
 * The control: a restore/start/resume/wake of a sandbox whose node is live but draining
 * and whose row has parts moves the row to a node chosen like a create among those
 * running the record's runtime (none: it stays, and A serves the verb), in one
 * conditional update (store_sbx_move: only while it names A with these parts, suspended
 * or stopped, nothing queued), then forwards the verb there (cluster_control.c).
 *
 * The new node (B): a request for a sandbox it does not have loads the row when it names
 * B (sbx_move_adopt). A verb that brings its VM back first fetches the files named by a
 * record whose node is another one (here: GET /internal/sandboxes/{id}/parts/{part} on
 * A, node token only, each verified: size bound and SHA-256) into sandboxes/.move-<id>/,
 * lays them out (suspend/, backing.json with this node's paths, run_dir under this node's
 * data directory), installs the credential rules of `creds` the way PUT .../credentials
 * does (sbx_network_creds: this node's network record, and its gateway when the VM
 * attaches; the file is then removed), renames the directory into place and only then
 * clears the row's parts: from that write on, A may remove its copy. A digest mismatch
 * hands the sandbox back to A (the row names A again with no parts, so it is not moved
 * again and A restores it itself); so does a record whose saved state another VM runtime
 * than B's wrote (vm/vm_sig.h: refused before anything is fetched; the control does not
 * choose such a B, but a record it read before B's QEMU changed may say otherwise); any
 * other failure leaves it on B, suspended or stopped, and a later verb fetches again.
 *
 * A, every reconcile period: a sandbox of its table whose row names another node leaves
 * the table (its files stay); a sandbox directory that is in no table entry and whose
 * row names another node is removed once that row's parts no longer name A (B has the
 * files) or the sandbox is deleted; its network record (the rules' secrets) goes with
 * them when it had rules (a digest mismatch may hand the sandbox back), else as it
 * leaves the table. A node's write of a row that names another node changes nothing
 * (store_sbx_put), and a node loads only rows that name it, so a node coming back never
 * adopts a sandbox that moved. Prefix sbx_move_. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/http/http.h"
#include "daemon/net/net.h"
#include "daemon/template/tpl_blob.h"
#include "log.h"
#include "sbx_internal.h"

static const char *const suspend_files[] = {"state", "mem", "snapshot.json", NULL};

struct sbx_move {
    struct sbx *s;
    struct sbx_parts parts;
    struct sbx_parts_hash *hash;   /* A: hashing */
    enum sbx_state state;          /* A: the state hashed */
    struct sbx_parts_fetch *fetch; /* B: fetching */
    sbx_move_done done;            /* B */
    char tmp[SBX_PATH_MAX];        /* B: sandboxes/.move-<id> */
    int64_t started_ms;
};

static bool on_cluster(const struct sbx *s) { return s->sp->sbx->node_id[0] != '\0'; }

static bool is_suspend_file(const char *name)
{
    for (const char *const *f = suspend_files; *f; f++)
        if (strcmp(name, *f) == 0)
            return true;
    return false;
}

/* The file of the record's credential rules (secrets: 0600). */
static void creds_file(const struct sbx *s, char *out, size_t cap) { sbx_path(s, "creds", out, cap); }

static void sandboxes_dir(const struct spaced *sp, const char *leaf, char *out, size_t cap)
{
    snprintf(out, cap, "%s/sandboxes%s%s", sp->opt.data_dir, leaf ? "/" : "", leaf ? leaf : "");
}

void sbx_move_cancel(struct sbx *s)
{
    struct sbx_move *m = s->move;
    if (!m)
        return;
    sbx_parts_hash_cancel(m->hash);
    sbx_parts_fetch_cancel(m->fetch);
    if (m->tmp[0])
        spaced_rm_rf(m->tmp);
    s->move = NULL;
    free(m);
}

/* Whether record text names this node as the holder (or cannot be read: treated as
 * ours, never fetched). */
static bool parts_here(const struct sbx *s, const char *text, struct sbx_parts *p)
{
    return sbx_parts_parse(text, p) != 0 || !p->node[0] || strcmp(p->node, s->sp->sbx->node_id) == 0;
}

/* ---- A: recording ----------------------------------------------------------------------- */

static void on_hashed(void *arg, const char *why)
{
    struct sbx_move *m = arg;
    struct sbx *s = m->s;
    m->hash = NULL;
    char *js = why ? NULL : sbx_parts_json(&m->parts);
    bool same = !sbx_busy(s) && s->state == m->state && !s->rec.parts;
    s->move = NULL;
    free(m);
    if (!js || !same) {
        char q[SBX_PATH_MAX + 128];
        log_warn("sandbox.move", "sandbox=%s record=%s%s", s->rec.id, why ? "failed why=" : "dropped reason=changed",
                 why ? log_quote(why, q, sizeof q) : "");
        free(js);
        return;
    }
    s->rec.parts = js;
    if (sbx_persist(s) == 0)
        log_info("sandbox.move", "sandbox=%s record=hashed state=%s", s->rec.id, sbx_state_name(s->state));
}

void sbx_move_record(struct sbx *s)
{
    if (!on_cluster(s) || (s->state != SBX_SUSPENDED && s->state != SBX_STOPPED) || s->move || s->rec.parts)
        return; /* recorded already, or files still on the node it moved from */
    struct sbx_move *m = calloc(1, sizeof *m);
    if (!m)
        return;
    m->s = s;
    m->state = s->state;
    struct sbx_parts *p = &m->parts;
    snprintf(p->node, sizeof p->node, "%s", s->sp->sbx->node_id);
    char path[SBX_PATH_MAX + 32];
    struct stat st;
    int rc = 0;
    for (const char *const *f = suspend_files; *f && s->state == SBX_SUSPENDED; f++) {
        char leaf[32];
        snprintf(leaf, sizeof leaf, "suspend/%s", *f);
        sbx_path(s, leaf, path, sizeof path);
        if (stat(path, &st) == 0 && S_ISREG(st.st_mode))
            rc |= sbx_parts_add(p, *f, path);
    }
    sbx_path(s, "disk.qcow2", path, sizeof path);
    rc |= sbx_parts_add(p, "disk.qcow2", path);
    struct sbx_chain c;
    rc |= sbx_chain_load(s, &c);
    for (unsigned i = 0; rc == 0 && i < c.n; i++) {
        char name[SBX_PART_NAME_MAX];
        snprintf(name, sizeof name, "layer%u", i);
        rc |= sbx_parts_add(p, name, c.path[i]);
        p->chain[p->nchain] = p->n - 1;
        snprintf(p->format[p->nchain++], sizeof p->format[0], "%s", c.format[i]);
    }
    struct net *net = net_get(s->sp);
    creds_file(s, path, sizeof path);
    int creds = net ? net_creds_save(net, s->rec.id, path) : 0;
    if (creds == 1)
        rc |= sbx_parts_add(p, "creds", path);
    else
        unlink(path); /* none now: no older rules left behind */
    rc |= creds < 0;
    if (s->state == SBX_SUSPENDED) { /* where its memory can come back (vm_sig.h) */
        sbx_path(s, "suspend", path, sizeof path);
        rc |= vm_sig_of_snapshot(path, p->runtime, sizeof p->runtime);
    }
    if (rc != 0 || (s->state == SBX_SUSPENDED && sbx_parts_find(p, "state") < 0)) {
        log_warn("sandbox.move", "sandbox=%s record=skipped reason=files_unexpected", s->rec.id);
        creds_file(s, path, sizeof path);
        unlink(path);
        free(m);
        return;
    }
    s->move = m;
    if (!(m->hash = sbx_parts_hash(s->sp, p, on_hashed, m))) {
        s->move = NULL;
        free(m);
    }
}

void sbx_move_op_begins(struct sbx *s)
{
    struct sbx_parts p;
    if (s->move && s->move->hash)
        sbx_move_cancel(s);
    if (s->rec.parts && parts_here(s, s->rec.parts, &p)) {
        free(s->rec.parts); /* the files change now: stored with the next state */
        s->rec.parts = NULL;
    }
    char path[SBX_PATH_MAX];
    creds_file(s, path, sizeof path); /* its secrets are in the network record */
    unlink(path);
}

int sbx_move_unrecord(struct sbx *s, struct spaced_err *err)
{
    struct sbx_parts p;
    if (s->rec.parts && !parts_here(s, s->rec.parts, &p))
        return spaced_err_set(err, 409, "sandbox_moving",
                              "sandbox %s moved to this node and its files are still on node %s: restore "
                              "(or start) it here first, then change its credential rules", s->rec.id, p.node);
    if (s->move && s->move->hash)
        sbx_move_cancel(s);
    if (!s->rec.parts)
        return 0;
    char *old = s->rec.parts;
    s->rec.parts = NULL;
    if (sbx_persist(s) != 0) { /* the store down, or the row moved meanwhile: nothing changes */
        s->rec.parts = old;
        return spaced_err_set(err, 503, "store_unavailable",
                              "sandbox %s: its move record could not be dropped (the store failed, or the "
                              "sandbox moved to another node); try again", s->rec.id);
    }
    free(old);
    char path[SBX_PATH_MAX];
    creds_file(s, path, sizeof path);
    unlink(path);
    log_info("sandbox.move", "sandbox=%s record=dropped reason=credentials_changed", s->rec.id);
    return 0;
}

/* ---- A: serving ------------------------------------------------------------------------- */

void sbx_move_serve(struct spaced *sp, struct http_req *req, const char *id, const char *part)
{
    if (!tpl_blob_token_ok(req, sp->opt.node_token)) { /* learns nothing, not even whether it exists */
        http_reply_error(req, 404, "not_found", "no route for %s %s", http_req_method(req), http_req_path(req));
        return;
    }
    char what[80], dir[SBX_PATH_MAX], path[SBX_PATH_MAX + 32] = "";
    struct store_sbx row = {0};
    struct sbx_parts p;
    bool ok = sbx_id_valid(id) && part && sbx_parts_name_ok(part) && sp->sbx->node_id[0] &&
              store_sbx_get(sp->store, id, &row) == 0 &&
              (strcmp(row.state, "suspended") == 0 || strcmp(row.state, "stopped") == 0) &&
              sbx_parts_parse(row.parts, &p) == 0 && strcmp(p.node, sp->sbx->node_id) == 0 &&
              sbx_parts_find(&p, part) >= 0;
    store_sbx_clear(&row);
    snprintf(what, sizeof what, "part %.16s of sandbox %.20s", part ? part : "", ok ? id : "(unknown)");
    if (ok) {
        sandboxes_dir(sp, id, dir, sizeof dir);
        if (is_suspend_file(part))
            snprintf(path, sizeof path, "%s/suspend/%s", dir, part);
        else if (strcmp(part, "disk.qcow2") == 0 || strcmp(part, "creds") == 0)
            snprintf(path, sizeof path, "%s/%s", dir, part);
        else { /* the chain's layer, by this node's backing.json */
            char cp[SBX_PATH_MAX + 16];
            snprintf(cp, sizeof cp, "%s/backing.json", dir);
            if (sbx_parts_layer_path(cp, part, path, sizeof path) < 0)
                path[0] = '\0';
        }
    }
    if (!path[0] || tpl_blob_serve(req, path, what) != 0)
        http_reply_error(req, 404, "not_found", "%s is not on this node", what);
}

/* ---- B: loading the row, fetching the files ----------------------------------------------- */

void sbx_move_fix_run_dir(struct spaced *sp, struct store_sbx *rec)
{
    if (sp->sbx->node_id[0]) /* a row moved here names the old node's run directory */
        snprintf(rec->run_dir, sizeof rec->run_dir, "%s/run/%s", sp->opt.data_dir, rec->id);
}

struct sbx *sbx_move_adopt(struct spaced *sp, const char *id)
{
    struct sbx *s;
    for (s = sp->sbx->head; s; s = s->next)
        if (strcmp(s->rec.id, id) == 0)
            return NULL; /* in the table (even deleted) */
    struct store_sbx row;
    if (!sp->sbx->node_id[0] || !sbx_id_valid(id) || store_sbx_get(sp->store, id, &row) != 0)
        return NULL;
    s = NULL;
    if (strcmp(row.node, sp->sbx->node_id) == 0 && strcmp(row.state, "deleted") != 0) {
        sbx_move_fix_run_dir(sp, &row);
        s = sbx_table_add(sp, &row);
        struct sbx_parts p;
        if (s)
            log_info("sandbox.move", "sandbox=%s event=loaded state=%s files=%s", id, row.state,
                     !row.parts || parts_here(s, row.parts, &p) ? "here" : p.node);
    }
    store_sbx_clear(&row);
    return s;
}

/* fsync of a file or a directory (its entries: renames into it survive a host crash).
 * 0 or -1. */
static int path_sync(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    int rc = fd >= 0 && fsync(fd) == 0 ? 0 : -1;
    if (fd >= 0)
        close(fd);
    return rc;
}

static void fetch_end(struct sbx_move *m, const struct spaced_err *err, int64_t bytes, const char *from)
{
    struct sbx *s = m->s;
    sbx_move_done done = m->done;
    char q[400];
    if (err) {
        spaced_rm_rf(m->tmp);
        log_warn("sandbox.move", "sandbox=%s source=%s result=failed code=%s bytes=%lld msg=%s", s->rec.id, from,
                 err->code, (long long)bytes, log_quote(err->message, q, sizeof q));
    } else {
        log_info("sandbox.move", "sandbox=%s source=%s result=verified parts=%u bytes=%lld ms=%lld", s->rec.id,
                 from, m->parts.n, (long long)bytes, (long long)(spaced_now_ms() - m->started_ms));
    }
    m->tmp[0] = '\0';
    s->move = NULL;
    free(m);
    done(s, err);
}

/* The credential rules of part `creds` (verified) into this node's network record, as
 * PUT .../credentials puts them (before the VM comes back: its claim attaches them);
 * the file is removed (the record holds them now). Sets err on failure. */
static void install_creds(struct sbx_move *m, struct spaced_err *err)
{
    char path[SBX_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/creds", m->tmp);
    json_t *rules = json_load_file(path, 0, NULL);
    struct net *net = net_get(m->s->sp);
    if (!net)
        spaced_err_set(err, 503, "network_unavailable",
                       "sandbox %s has credential rules and networking is not available on this host "
                       "(see spaced's log)", m->s->rec.id);
    else if (!rules)
        spaced_err_set(err, 500, "host_io", "cannot read the credential rules of sandbox %s", m->s->rec.id);
    struct spaced_err e; /* set by a lookup on the way even when it succeeds */
    if (net && rules && sbx_network_creds(net, m->s, rules, &e) == 0)
        unlink(path);
    else if (net && rules)
        *err = e;
    json_decref(rules);
}

/* Every part verified: the layout of a sandbox directory, then in place. */
static void on_fetched(void *arg, const struct spaced_err *err, int64_t bytes)
{
    struct sbx_move *m = arg;
    struct sbx *s = m->s;
    m->fetch = NULL;
    char from[STORE_ID_MAX];
    snprintf(from, sizeof from, "%s", m->parts.node);
    if (err) {
        fetch_end(m, err, bytes, from);
        return;
    }
    struct spaced_err e = {0};
    char final[SBX_PATH_MAX - SBX_PART_NAME_MAX - 16], a[SBX_PATH_MAX + 32], b[SBX_PATH_MAX + 32];
    sbx_path(s, NULL, final, sizeof final);
    snprintf(a, sizeof a, "%s/suspend", m->tmp);
    if (mkdir(a, 0700) != 0)
        spaced_err_set(&e, 500, "host_io", "cannot create %s: %s", a, strerror(errno));
    for (unsigned i = 0; !e.status && i < m->parts.n; i++) {
        const char *n = m->parts.f[i].name;
        snprintf(a, sizeof a, "%s/%s", m->tmp, n);
        if (is_suspend_file(n)) {
            snprintf(b, sizeof b, "%s/suspend/%s", m->tmp, n);
            if (rename(a, b) != 0)
                spaced_err_set(&e, 500, "host_io", "cannot rename %s: %s", a, strerror(errno));
        } else if (strcmp(n, "disk.qcow2") == 0 && chmod(a, 0600) != 0) { /* the writable overlay */
            spaced_err_set(&e, 500, "host_io", "cannot chmod %s: %s", a, strerror(errno));
        }
    }
    struct sbx_chain c = {.n = m->parts.nchain};
    for (unsigned i = 0; i < m->parts.nchain; i++) {
        snprintf(c.path[i], sizeof c.path[i], "%s/%s", final, m->parts.f[m->parts.chain[i]].name);
        snprintf(c.format[i], sizeof c.format[i], "%s", m->parts.format[i]);
    }
    snprintf(a, sizeof a, "%s/backing.json", m->tmp);
    if (!e.status && sbx_chain_write(a, &c) < 0)
        spaced_err_set(&e, 500, "host_io", "cannot write %s", a);
    if (!e.status && sbx_parts_find(&m->parts, "creds") >= 0)
        install_creds(m, &e);
    if (!e.status) {
        spaced_rm_rf(final); /* a copy an earlier, interrupted fetch put in place */
        if (rename(m->tmp, final) < 0)
            spaced_err_set(&e, 500, "host_io", "cannot rename %s to %s: %s", m->tmp, final, strerror(errno));
    }
    char top[SBX_PATH_MAX];
    sandboxes_dir(s->sp, NULL, top, sizeof top);
    snprintf(a, sizeof a, "%s/suspend", final);
    snprintf(b, sizeof b, "%s/backing.json", final);
    /* Durable before the old node is told it may remove its copy (the parts themselves
     * were fsynced as they were published). */
    if (!e.status && (path_sync(b) != 0 || path_sync(a) != 0 || path_sync(final) != 0 || path_sync(top) != 0))
        spaced_err_set(&e, 500, "host_io", "cannot sync %s: %s", final, strerror(errno));
    if (!e.status) {
        /* The files are here: from this write on the old node may remove its copy. */
        free(s->rec.parts);
        s->rec.parts = NULL;
        sbx_persist(s);
    }
    fetch_end(m, e.status ? &e : NULL, bytes, from);
}

int sbx_move_need(struct sbx *s, sbx_move_done done, struct spaced_err *err)
{
    struct sbx_parts p;
    if (!on_cluster(s) || !s->rec.parts || parts_here(s, s->rec.parts, &p))
        return 0;
    struct spaced *sp = s->sp;
    char what[STORE_ID_MAX + 16];
    snprintf(what, sizeof what, "sandbox %s", s->rec.id);
    if (sbx_runtime_check(sp, p.runtime, what, err) < 0) { /* before a byte moves */
        log_warn("sandbox.move", "sandbox=%s source=%s result=refused code=%s", s->rec.id, p.node, err->code);
        return -1;
    }
    struct sbx_move *m = calloc(1, sizeof *m);
    if (!m)
        return spaced_err_set(err, 500, "internal", "out of memory");
    m->s = s;
    m->parts = p;
    m->done = done;
    m->started_ms = spaced_now_ms();
    char leaf[STORE_ID_MAX + 8];
    snprintf(leaf, sizeof leaf, ".move-%s", s->rec.id);
    sandboxes_dir(sp, leaf, m->tmp, sizeof m->tmp);
    spaced_rm_rf(m->tmp);
    if (spaced_mkdir_p(m->tmp) < 0) {
        spaced_err_set(err, 500, "host_io", "cannot create %s: %s", m->tmp, strerror(errno));
        free(m);
        return -1;
    }
    int64_t total = 0;
    for (unsigned i = 0; i < p.n; i++)
        total += p.f[i].size;
    log_info("sandbox.move", "sandbox=%s source=%s parts=%u bytes=%lld result=started", s->rec.id, p.node, p.n,
             (long long)total);
    char route[128];
    snprintf(route, sizeof route, "/internal/sandboxes/%s/parts/", s->rec.id);
    struct sbx_parts_from from = {.node = p.node, .route = route, .dir = m->tmp, .what = what, .code = "sandbox"};
    if (!(m->fetch = sbx_parts_fetch(sp, &m->parts, &from, on_fetched, m, err))) {
        log_warn("sandbox.move", "sandbox=%s source=%s result=failed code=%s", s->rec.id, p.node, err->code);
        spaced_rm_rf(m->tmp);
        free(m);
        return -1;
    }
    s->move = m;
    return 1;
}

bool sbx_move_hand_back(struct sbx *s)
{
    struct sbx_parts p;
    if (!on_cluster(s) || !s->rec.parts || parts_here(s, s->rec.parts, &p))
        return false;
    struct spaced *sp = s->sp;
    int rc = store_sbx_move(sp->store, s->rec.id, sp->sbx->node_id, p.node, s->rec.parts, NULL, spaced_now_ms());
    log_info("sandbox.move", "sandbox=%s event=hand_back to=%s result=%s", s->rec.id, p.node,
             rc == 0 ? "moved" : rc == STORE_NOTFOUND ? "changed" : "store_failed");
    if (rc != 0)
        return false;
    sbx_table_remove(sp, s);
    return true;
}

/* ---- A: letting go ---------------------------------------------------------------------- */

/* A sandbox of the table whose row names another node leaves the table. */
static void check_moved(struct sbx *s, void *arg)
{
    struct spaced *sp = arg;
    /* Only a sandbox with parts can have been moved (the move compares them); its files
     * are here, or still on the node it came from (moved on again before it fetched). */
    if (!s->rec.parts || sbx_busy(s) || op_target_open(sp, s->rec.id) ||
        (s->state != SBX_SUSPENDED && s->state != SBX_STOPPED))
        return;
    struct store_sbx row;
    if (store_sbx_get(sp->store, s->rec.id, &row) != 0)
        return;
    bool gone = strcmp(row.node, sp->sbx->node_id) != 0;
    if (!gone && !row.parts) { /* handed back to us: not to be moved again */
        free(s->rec.parts);
        s->rec.parts = NULL;
    }
    if (gone) {
        log_info("sandbox.move", "sandbox=%s event=moved_out to=%s files=kept_until_fetched", s->rec.id, row.node);
        char p2[SBX_PATH_MAX], c[SBX_PATH_MAX];
        sbx_path(s, "net.claimed", p2, sizeof p2);
        creds_file(s, c, sizeof c);
        /* With credential rules the network record stays until the new node has them
         * (a digest mismatch hands the sandbox back): it goes with the files. */
        if (access(p2, F_OK) == 0 && access(c, F_OK) != 0 && net_get(sp))
            net_release(net_get(sp), s->rec.id);
        spaced_retry_mark(&sp->store_retry, &s->unsaved, false); /* the row is the other node's now */
        sbx_table_remove(sp, s);
    }
    store_sbx_clear(&row);
}

static bool in_table(struct spaced *sp, const char *id)
{
    for (struct sbx *s = sp->sbx->head; s; s = s->next)
        if (strcmp(s->rec.id, id) == 0)
            return true;
    return false;
}

/* Whether sandbox directory `id` (in no table entry) belongs to a sandbox that moved
 * away and whose new node has its files, or was deleted there. */
static bool files_released(struct spaced *sp, const char *id)
{
    struct store_sbx row;
    if (store_sbx_get(sp->store, id, &row) != 0)
        return false;
    struct sbx_parts p;
    bool other = row.node[0] && strcmp(row.node, sp->sbx->node_id) != 0;
    bool ours = row.parts && sbx_parts_parse(row.parts, &p) == 0 && strcmp(p.node, sp->sbx->node_id) == 0;
    bool released = other && (!ours || strcmp(row.state, "deleted") == 0);
    store_sbx_clear(&row);
    return released;
}

bool sbx_move_holds_net(struct spaced *sp, const char *id)
{
    char leaf[STORE_ID_MAX + 8], c[SBX_PATH_MAX];
    if (!sp->sbx->node_id[0] || !sbx_id_valid(id))
        return false;
    snprintf(leaf, sizeof leaf, "%s/creds", id);
    sandboxes_dir(sp, leaf, c, sizeof c);
    return access(c, F_OK) == 0;
}

void sbx_move_tick(struct spaced *sp)
{
    if (!sp->sbx->node_id[0])
        return;
    sbx_each(sp, check_moved, sp);
    char dir[SBX_PATH_MAX];
    sandboxes_dir(sp, NULL, dir, sizeof dir);
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.' || !sbx_id_valid(e->d_name) || in_table(sp, e->d_name) ||
            !files_released(sp, e->d_name))
            continue;
        char p[SBX_PATH_MAX];
        log_info("sandbox.move", "sandbox=%s event=files_removed reason=on_another_node", e->d_name);
        sandboxes_dir(sp, e->d_name, p, sizeof p);
        if (sbx_move_holds_net(sp, e->d_name) && net_get(sp)) /* the new node has the rules */
            net_release(net_get(sp), e->d_name);
        spaced_rm_rf(p);
        snprintf(p, sizeof p, "%s/run/%s", sp->opt.data_dir, e->d_name);
        spaced_rm_rf(p);
    }
    if (d)
        closedir(d);
}

void sbx_move_users(struct spaced *sp, tpl_use_fn use, void *arg)
{
    char dir[SBX_PATH_MAX];
    sandboxes_dir(sp, NULL, dir, sizeof dir);
    DIR *d = sp->sbx->node_id[0] ? opendir(dir) : NULL;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.' || !sbx_id_valid(e->d_name) || in_table(sp, e->d_name))
            continue;
        char p[SBX_PATH_MAX + 300];
        struct sbx_chain c;
        const char *layers[VM_DISK_BACKING_MAX];
        snprintf(p, sizeof p, "%s/%s/backing.json", dir, e->d_name);
        if (sbx_chain_read(p, &c) != 0)
            continue;
        for (unsigned i = 0; i < c.n; i++)
            layers[i] = c.path[i];
        use("", layers, c.n, arg); /* files a moved sandbox's new node may still fetch */
    }
    if (d)
        closedir(d);
}
