/* sbx_pool.c: warm pools per clone shape (sbx_pool.h), over vm/pool.h. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/jail/jail.h"
#include "daemon/net/net.h"
#include "daemon/template/tpl.h"
#include "daemon/vm/pool.h"
#include "daemon/vm/vm.h"
#include "log.h"
#include "sbx_internal.h"
#include "sbx_pool.h"

#define SBXP_PATH_MAX 600

#define SBXP_NET_MARK "net.claimed" /* in a pooled run dir: a namespace is mounted for it */

/* One shape's pool. */
struct sbx_shape {
    struct sbx_shape *next;
    struct sbx_pools *ps;
    char snap_dir[SBXP_PATH_MAX]; /* the key */
    bool nic;                     /* its clones have a NIC (snapshot taken with one) */
    unsigned vcpus;
    unsigned mem_mib;             /* each clone's guest memory (the budget's unit) */
    char tpl[STORE_ID_MAX];       /* the template's name (for sbx_pools_json) */
    struct pool *pool;            /* owned */
    /* shape_prepare's answer, read by the pool right after the call (it copies them) */
    char id[32], run_dir[SBXP_PATH_MAX], disk[SBXP_PATH_MAX];
    struct net_lease lease;
};

struct sbx_pools {
    struct spaced *sp;
    struct sbx_shape *shapes; /* owned list */
};

struct sbx_pools *sbx_pools_new(struct spaced *sp)
{
    struct sbx_pools *ps = calloc(1, sizeof *ps);
    if (ps)
        ps->sp = sp;
    return ps;
}

void sbx_pools_free(struct sbx_pools *ps)
{
    if (!ps)
        return;
    while (ps->shapes) {
        struct sbx_shape *sh = ps->shapes;
        ps->shapes = sh->next;
        pool_free(sh->pool);
        free(sh);
    }
    free(ps);
}

/* The namespace of a pooled VM that will never be claimed (its id names it). */
static void shape_net_release(struct spaced *sp, const char *id)
{
    struct net *n = net_get(sp);
    if (n)
        net_release(n, id);
}

/* pool_prepare_cb: a fresh id, its run dir, where its overlay goes, and for a shape with
 * a NIC a namespace + tap under the id (net_claim_template; net_claim_from hands it to
 * the sandbox at claim). The strings live in the shape: the pool copies the config right
 * after the call. */
static int shape_prepare(struct vm_config *cfg, void *arg)
{
    struct sbx_shape *sh = arg;
    struct spaced *sp = sh->ps->sp;
    char *id = sh->id, *run_dir = sh->run_dir, *disk = sh->disk;
    struct net_lease *lease = &sh->lease;
    char dir[SBXP_PATH_MAX], mark[SBXP_PATH_MAX + 16];
    if (spaced_random_id(id, "pool-", 16) < 0)
        return -1;
    if (snprintf(run_dir, sizeof sh->run_dir, "%s/run/%s", sp->opt.data_dir, id) >= (int)sizeof sh->run_dir ||
        snprintf(dir, sizeof dir, "%s/pool", sp->opt.data_dir) >= (int)sizeof dir ||
        snprintf(disk, sizeof sh->disk, "%s/%s.qcow2", dir, id) >= (int)sizeof sh->disk)
        return -1;
    if ((mkdir(dir, 0700) != 0 && errno != EEXIST) || mkdir(run_dir, 0700) != 0) {
        log_warn("pool.fill", "id=%s msg=\"cannot create %s or %s: %s\"", id, dir, run_dir,
                 strerror(errno));
        return -1;
    }
    if (sh->nic) {
        struct net *n = net_get(sp);
        struct spaced_err e = {0};
        /* The mark first: a crash between the two still finds the namespace at sweep. */
        snprintf(mark, sizeof mark, "%s/" SBXP_NET_MARK, run_dir);
        int fd = open(mark, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
        if (fd >= 0)
            close(fd);
        if (fd < 0 || !n || net_claim_template(n, id, lease, &e) < 0) {
            log_warn("pool.fill", "id=%s msg=\"no network for a pooled VM: %s\"", id,
                     fd < 0 ? strerror(errno) : n ? e.message : "networking unavailable");
            if (n)
                net_release(n, id);
            spaced_rm_rf(run_dir);
            return -1;
        }
        cfg->net.tap_fd = lease->tap_fd;
        cfg->net.mac = lease->mac;
    }
    cfg->id = id;
    cfg->run_dir = run_dir;
    cfg->disk = disk;
    return 0;
}

/* pool_discard_cb: the overlay and tap fd are gone; the run dir and namespace are ours. */
static void shape_discard(const char *id, const char *run_dir, void *arg)
{
    struct sbx_shape *sh = arg;
    log_info("pool.discard", "id=%s", id);
    if (sh->nic)
        shape_net_release(sh->ps->sp, id);
    spaced_rm_rf(run_dir);
}

/* pool_cap_cb: the clones this shape may hold within --pool-budget-mib, after what the
 * other shapes' pools hold now (counted as guest memory). */
static unsigned shape_cap(void *arg)
{
    struct sbx_shape *sh = arg;
    uint64_t used = 0, budget = sh->ps->sp->opt.pool_budget_mib;
    for (const struct sbx_shape *o = sh->ps->shapes; o; o = o->next)
        if (o != sh)
            used += (uint64_t)pool_count(o->pool) * o->mem_mib;
    return used >= budget || !sh->mem_mib ? 0 : (unsigned)((budget - used) / sh->mem_mib);
}

/* The shape's pool, started now if missing (NULL if it cannot be). */
static struct pool *shape_pool(struct sbx_pools *ps, const struct store_sbx *rec,
                               const char *snap_dir, bool nic, const char *overlay,
                               const char *rootfs)
{
    for (struct sbx_shape *sh = ps->shapes; sh; sh = sh->next)
        if (strcmp(sh->snap_dir, snap_dir) == 0)
            return sh->pool;
    struct pool_config pc;
    memset(&pc, 0, sizeof pc);
    struct spaced_err e;
    if (tpl_vm_base(ps->sp, &pc.base, &e) < 0)
        return NULL;
    pc.base.vcpus = rec->vcpus;
    pc.base.mem_mib = rec->memory_mib;
    /* the same chain a restore gets (sbx_act.c backing.json): frozen overlay, rootfs */
    pc.base.backing[0].path = overlay;
    pc.base.backing[0].format = "qcow2";
    pc.base.backing[1].path = rootfs;
    pc.base.backing[1].format = "raw";
    pc.base.n_backing = 2;
    jail_fill(ps->sp, &pc.base);
    pc.snapshot_dir = snap_dir;
    pc.template_overlay = overlay;
    pc.size = ps->sp->opt.pool;
    pc.prepare = shape_prepare;
    pc.discard = shape_discard;
    if (ps->sp->opt.pool_budget_mib)
        pc.cap = shape_cap;
    struct sbx_shape *sh = calloc(1, sizeof *sh);
    if (!sh)
        return NULL;
    sh->ps = ps;
    sh->nic = nic;
    sh->vcpus = rec->vcpus;
    sh->mem_mib = rec->memory_mib;
    snprintf(sh->tpl, sizeof sh->tpl, "%s", rec->template_name);
    snprintf(sh->snap_dir, sizeof sh->snap_dir, "%s", snap_dir);
    pc.prepare_arg = sh;
    if (!(sh->pool = pool_new(ps->sp->base, &pc))) {
        free(sh);
        return NULL;
    }
    sh->next = ps->shapes;
    ps->shapes = sh;
    char q[SBXP_PATH_MAX + 8];
    log_info("pool.start", "template=%s vcpus=%u memory_mib=%u nic=%d size=%u budget_mib=%u "
             "snapshot=%s", rec->template_name, rec->vcpus, rec->memory_mib, nic, pc.size,
             ps->sp->opt.pool_budget_mib,
             log_quote(snap_dir, q, sizeof q));
    return sh->pool;
}

struct vm *sbx_pool_claim(struct spaced *sp, struct store_sbx *rec, const char *snap_dir,
                          bool nic, const char *overlay, const char *rootfs, const char *disk,
                          const struct vm_callbacks *cbs, void *arg)
{
    struct sbx_pools *ps = sp->pools;
    if (!ps || !sp->opt.pool)
        return NULL;
    struct pool *p = shape_pool(ps, rec, snap_dir, nic, overlay, rootfs);
    if (!p)
        return NULL;
    struct vm *vm = pool_claim(p, cbs, arg);
    if (!vm)
        return NULL;
    char from[SBXP_PATH_MAX], why[SBXP_PATH_MAX + 200] = "";
    snprintf(from, sizeof from, "%s/pool/%s.qcow2", sp->opt.data_dir, vm_id(vm));
    /* QEMU keeps its open file: the move only changes the name the sandbox knows. */
    if (rename(from, disk) != 0 || vm_disk_renamed(vm, disk) != 0)
        snprintf(why, sizeof why, "cannot move %s: %s", from, strerror(errno));
    if (why[0]) {
        char q[SBXP_PATH_MAX + 300];
        log_warn("pool.claim", "sandbox=%s id=%s msg=%s", rec->id, vm_id(vm),
                 log_quote(why, q, sizeof q));
        vm_kill(vm); /* the caller owns it now: its on_exit reports the failure */
    }
    snprintf(rec->run_dir, sizeof rec->run_dir, "%s", vm_run_dir(vm));
    log_info("pool.claim", "sandbox=%s id=%s left=%u target=%u", rec->id, vm_id(vm),
             pool_ready(p), pool_target(p));
    return vm;
}

void sbx_pools_refill(struct spaced *sp)
{
    for (struct sbx_shape *sh = sp->pools ? sp->pools->shapes : NULL; sh; sh = sh->next)
        pool_kick(sh->pool);
}

unsigned sbx_pool_ready_at(const struct spaced *sp, const char *snap_dir)
{
    unsigned n = 0;
    for (const struct sbx_shape *sh = sp->pools ? sp->pools->shapes : NULL; sh; sh = sh->next)
        if (!snap_dir || strcmp(sh->snap_dir, snap_dir) == 0)
            n += pool_ready(sh->pool);
    return n;
}

unsigned sbx_pools_ready(const struct spaced *sp) { return sbx_pool_ready_at(sp, NULL); }

json_t *sbx_pools_json(const struct spaced *sp)
{
    json_t *shapes = json_array();
    uint64_t held_mib = 0;
    for (const struct sbx_shape *sh = sp->pools ? sp->pools->shapes : NULL; sh && shapes; sh = sh->next) {
        unsigned held = pool_count(sh->pool);
        held_mib += (uint64_t)held * sh->mem_mib;
        json_array_append_new(shapes, json_pack("{s:s, s:I, s:I, s:b, s:I, s:I, s:I, s:I, s:I}",
            "template", sh->tpl, "vcpus", (json_int_t)sh->vcpus, "memory_mib",
            (json_int_t)sh->mem_mib, "nic", sh->nic, "ready", (json_int_t)pool_ready(sh->pool),
            "held", (json_int_t)held, "target", (json_int_t)pool_target(sh->pool), "ceiling",
            (json_int_t)pool_ceiling(sh->pool), "demand", (json_int_t)pool_recent(sh->pool)));
    }
    return json_pack("{s:I, s:I, s:I, s:I, s:o}", "size", (json_int_t)sp->opt.pool, "budget_mib",
                     (json_int_t)sp->opt.pool_budget_mib, "held_mib", (json_int_t)held_mib,
                     "demand_window_s", (json_int_t)POOL_DEMAND_WINDOW_S, "shapes",
                     shapes ? shapes : json_array());
}

/* ---- start-up sweep ---------------------------------------------------------------- */

struct sweep_hit {
    const char *run_dir;
    bool used;
};

static void sweep_check(struct sbx *s, void *arg)
{
    struct sweep_hit *h = arg;
    if (strcmp(s->rec.run_dir, h->run_dir) == 0)
        h->used = true;
}

static void leftover_ready(struct vm *vm, int err, const char *msg, void *arg)
{
    (void)err;
    (void)msg;
    (void)arg;
    if (vm_state(vm) < VM_STATE_STOPPING)
        vm_kill(vm);
}

static void leftover_exit(struct vm *vm, enum vm_exit_reason reason, const char *msg,
                          const char *tail, void *arg)
{
    (void)vm;
    (void)reason;
    (void)msg;
    (void)tail;
    spaced_rm_rf(arg);
    free(arg);
}

static void leftover_agent(struct vm *vm, int fd, void *arg)
{
    (void)vm;
    (void)arg;
    close(fd);
}

static const struct vm_callbacks leftover_cbs = {leftover_ready, leftover_agent, leftover_exit};

void sbx_pools_sweep(struct spaced *sp)
{
    char dir[SBXP_PATH_MAX];
    snprintf(dir, sizeof dir, "%s/pool", sp->opt.data_dir);
    spaced_rm_rf(dir); /* unclaimed overlays: a claim moves its overlay out */
    snprintf(dir, sizeof dir, "%s/run", sp->opt.data_dir);
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        if (strncmp(de->d_name, "pool-", 5) != 0)
            continue;
        char *run_dir = malloc(SBXP_PATH_MAX);
        if (!run_dir)
            break;
        if (snprintf(run_dir, SBXP_PATH_MAX, "%s/%s", dir, de->d_name) >= SBXP_PATH_MAX) {
            free(run_dir);
            continue;
        }
        struct sweep_hit h = {run_dir, false};
        sbx_each(sp, sweep_check, &h);
        char mark[SBXP_PATH_MAX + 16];
        snprintf(mark, sizeof mark, "%s/" SBXP_NET_MARK, run_dir);
        /* Unclaimed: its namespace goes. Claimed: only a crash inside net_claim_from can
         * have left the pooled name mounted beside the sandbox's (idempotent otherwise). */
        if (access(mark, F_OK) == 0)
            shape_net_release(sp, de->d_name);
        if (h.used) {
            free(run_dir);
            continue;
        }
        int verr = 0;
        char msg[256];
        log_info("pool.sweep", "id=%s msg=\"unclaimed pooled VM of an earlier spaced\"", de->d_name);
        /* run_dir is owned by the adopted VM's callbacks until its on_exit */
        if (!vm_adopt(sp->base, sp->jailer, run_dir, &leftover_cbs, run_dir, &verr, msg, sizeof msg)) {
            vm_kill_strays(de->d_name); /* started, but spaced died before vm.json */
            spaced_rm_rf(run_dir);
            free(run_dir);
        }
    }
    if (d)
        closedir(d);
}
