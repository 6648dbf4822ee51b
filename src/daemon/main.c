/* main.c: spaced, the space daemon — options, start-up (store, auth, sandboxes,
 * recovery, routes, HTTP), the event loop, and an orderly shutdown that leaves
 * sandboxes running for the next spaced to adopt. */
#include <errno.h>
#include <event2/event.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/http/http.h"
#include "daemon/http/router.h"
#include "daemon/api/routes.h"
#include "daemon/auth/auth.h"
#include "daemon/cluster/cluster.h"
#include "daemon/console/console.h"
#include "daemon/e2b/e2b.h"
#include "daemon/jail/jail.h"
#include "daemon/metrics/hostload.h"
#include "daemon/metrics/metrics.h"
#include "daemon/net/net.h"
#include "daemon/ops/op.h"
#include "daemon/sandbox/sbx.h"
#include "daemon/sandbox/sbx_pool.h"
#include "daemon/spaced.h"
#include "daemon/store/store.h"
#include "daemon/template/tpl.h"
#include "daemon/vm/vm.h"
#include "daemon/vm/vm_sig.h"
#include "daemon/volume/vol_trash.h"
#include "http_hdr.h"
#include "log.h"


static void usage(FILE *f)
{
    fprintf(f,
            "usage: spaced [options]\n"
            "  --listen ADDR:PORT   API address (default 127.0.0.1:7070; port 0 = any free port)\n"
            "  --data-dir DIR       store, keys, sandbox disks (default /var/lib/space)\n"
            "  --store URL          PostgreSQL connection string (postgresql://... or\n"
            "                       host=... dbname=...) or SQLite file (default: env\n"
            "                       SPACE_STORE_URL, else DIR/space.db); with PostgreSQL,\n"
            "                       keys and sandbox disks stay in --data-dir\n"
            "  --role all|control|node  all (default): single host; control: API and\n"
            "                       placement, no VMs; node: runs the sandboxes placed on it.\n"
            "                       control and node share a PostgreSQL --store and the\n"
            "                       secret SPACE_NODE_TOKEN (docs/multinode.md)\n"
            "  --node-id ID         node: its id in the store (required)\n"
            "  --advertise URL      node: http://HOST:PORT the control daemon reaches it at\n"
            "  --capacity-vcpus N   node: vCPUs offered to sandboxes (default: host CPUs)\n"
            "  --capacity-mem MIB   node: memory offered to sandboxes (default: host memory)\n"
            "  --guest-dir DIR      vmlinux, initramfs.cpio, templates/ (default: found from\n"
            "                       where spaced is, whatever the working directory:\n"
            "                       PREFIX/share/space/guest for PREFIX/bin/spaced (make\n"
            "                       install), build/guest for build/spaced or build/san/spaced;\n"
            "                       else /usr/local/share/space/guest)\n"
            "  --console-dir DIR    the web console's files, served at /console (default:\n"
            "                       found like the guest dir: PREFIX/share/space/console,\n"
            "                       build/console from `make console`)\n"
            "  --accel auto|kvm|tcg VM accelerator (default auto: KVM if usable, else TCG)\n"
            "  --pool N             warm VMs per template shape, with or without network (default 0)\n"
            "  --pool-budget-mib M  pools follow demand: each holds the last minute's creates of\n"
            "                       its shape (at least --pool N), all within M MiB of guest memory\n"
            "  --qemu PATH          QEMU binary (default qemu-system-x86_64 from PATH)\n"
            "  --no-jail            DEVELOPMENT ONLY: run QEMU unjailed as spaced's user (by\n"
            "                       default every QEMU is jailed: own uid, namespaces and\n"
            "                       cgroup; spaced refuses to start when the jail cannot work)\n"
            "  --jail-uids BASE:COUNT  uids (= gids) jailed QEMUs run as, one per VM\n"
            "                       (default 2000000000:65536)\n"
            "  --rate RPS           API requests per second per API key, or per address for\n"
            "                       requests without a valid key (default 200; 0 = no limit)\n"
            "  --burst N            requests allowed at once above the rate (default 1000)\n"
            "  --max-conns-per-client N  open connections one address may hold on the API\n"
            "                       port and on the sandbox-port listener; beyond: 429\n"
            "                       (default 128, --role node: 0 = no cap)\n"
            "  --proxy-idle-timeout SECS  close a proxied (upgraded or sandbox-port) connection\n"
            "                       on which no byte moved for this long (default 600; 0 = never)\n"
            "  --quota-sandboxes N, --quota-vcpus N, --quota-mem-mib N, --quota-disk-mib N,\n"
            "  --quota-templates N, --quota-snapshots N, --quota-volume-mib N\n"
            "                       per-tenant limits for tenants whose own quota (PUT\n"
            "                       /v1/tenants/{tenant}/quota) does not set them\n"
            "                       (default 0 = unlimited)\n"
            "  --help\n"
            "environment (each read once at start; empty = unset):\n"
            "  SPACE_STORE_URL      default of --store\n"
            "  SPACE_NODE_TOKEN     secret shared by control and nodes (docs/multinode.md)\n"
            "  SPACE_QEMU           default of --qemu\n"
            "  SPACE_QEMU_SHIM      space-qemu-shim.so (default: beside spaced)\n"
            "  SPACE_GATEWAY        space-gateway binary (default: beside spaced)\n"
            "  SPACE_GATEWAY_ARGS   extra space-gateway arguments, separated by spaces\n"
            "                       (e.g. \"--upstream-dns ADDR --trust FILE\")\n"
            "  SPACE_E2B_DOMAIN     the sandbox domain E2B getHost() names (docs/e2b.md)\n"
            "  SPACE_E2B_PORT_LISTEN ADDR:PORT  E2B sandbox-port listener (default: none)\n"
            "  SPACE_PUBLIC_URL     http[s]://host[:port] clients reach spaced at (behind a TLS\n"
            "                       proxy): links spaced hands out use it (default: http://Host)\n"
            "  SPACE_TEST_VM_SIG    tests only: this node's VM runtime signature instead of the\n"
            "                       computed one (a test double for another QEMU release on the\n"
            "                       same machine, which cannot be installed side by side;\n"
            "                       src/daemon/vm/vm_sig.h). Never set it in production: states\n"
            "                       saved under it restore only under it\n");
}

_Static_assert(STORE_RUNTIME_MAX == VM_SIG_MAX, "a node row holds a whole runtime signature");

/* This node's VM runtime signature (vm_sig.h), once, by the roles that run VMs: the test
 * double SPACE_TEST_VM_SIG if given (refused when malformed), else probed from the QEMU
 * binary spaced runs. A failed probe leaves it unknown (""): states are saved without
 * one and loaded as before, and a cluster moves none here. 0, or -1 (exit). */
static int runtime_init(struct spaced *sp)
{
    char why[320], q[400];
    if (!cluster_runs_sandboxes(sp))
        return 0;
    if (sp->opt.test_vm_sig) {
        if (!vm_sig_valid(sp->opt.test_vm_sig)) {
            fprintf(stderr, "spaced: SPACE_TEST_VM_SIG must be 1..%d printable ASCII bytes\n", VM_SIG_MAX - 1);
            return -1;
        }
        snprintf(sp->runtime, sizeof sp->runtime, "%s", sp->opt.test_vm_sig);
        log_warn("vm.runtime", "runtime=%s source=SPACE_TEST_VM_SIG note=\"a test double: never set it in "
                 "production\"", log_quote(sp->runtime, q, sizeof q));
        return 0;
    }
    if (vm_sig_probe(sp->opt.qemu, vm_accel_resolve((enum vm_accel)sp->opt.accel), sp->runtime,
                     sizeof sp->runtime, why, sizeof why) < 0) {
        log_warn("vm.runtime", "runtime=unknown reason=%s note=\"saved VM states are recorded without a "
                 "runtime and not checked before they are loaded\"", log_quote(why, q, sizeof q));
        return 0;
    }
    log_info("vm.runtime", "runtime=%s", log_quote(sp->runtime, q, sizeof q));
    return 0;
}

/* An environment variable, NULL when unset or empty. */
static const char *env_opt(const char *name)
{
    const char *v = getenv(name);
    return v && v[0] ? v : NULL;
}

/* getopt values of the --quota-* options: QUOTA_OPT + the field's index in
 * struct store_quota_vals (same order as the longopts below). */
#define QUOTA_OPT 1000

static int parse_quota(int i, const char *arg, struct spaced_opts *o)
{
    int64_t *f[] = {&o->quota.sandboxes, &o->quota.vcpus,     &o->quota.memory_mib,
                    &o->quota.disk_mib,  &o->quota.templates, &o->quota.snapshots,
                    &o->quota.volume_mib};
    char *end = NULL;
    long long n = strtoll(arg, &end, 10);
    if (*end || end == arg || n < 0 || n > (1LL << 40)) {
        fprintf(stderr, "spaced: quota limits must be integers 0..%lld (0 = unlimited)\n", 1LL << 40);
        return -1;
    }
    *f[i] = n;
    return 0;
}


/* The first of rel[] (relative to the directory of this spaced's binary) that holds
 * probe, so that a default does not depend on the working directory; NULL if none.
 * found (PATH_MAX bytes) receives the path. */
static const char *beside_exe(const char *const *rel, size_t nrel, const char *probe_name, char *found)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return NULL;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash)
        *slash = '\0';
    for (size_t i = 0; i < nrel; i++) {
        char probe[PATH_MAX + 64];
        snprintf(probe, sizeof probe, "%s/%s/%s", exe, rel[i], probe_name);
        if (access(probe, F_OK) == 0 && (size_t)snprintf(found, PATH_MAX, "%s/%s", exe, rel[i]) < PATH_MAX)
            return found;
    }
    return NULL;
}

/* The guest files next to this spaced: an installed PREFIX/bin/spaced uses
 * PREFIX/share/space/guest (make install), a built build/spaced or build/san/spaced uses
 * the checkout's build/guest. The first of these holding vmlinux wins; else the
 * documented install path. */
static const char *default_guest_dir(void)
{
    static char found[PATH_MAX];
    static const char *const rel[] = {"../share/space/guest", "guest", "../guest"};
    const char *d = beside_exe(rel, sizeof rel / sizeof *rel, "vmlinux", found);
    return d ? d : "/usr/local/share/space/guest";
}

/* The web console's files, found the same way: PREFIX/share/space/console (make
 * install) or the checkout's build/console (make console). */
static const char *default_console_dir(void)
{
    static char found[PATH_MAX];
    static const char *const rel[] = {"../share/space/console", "console", "../console"};
    const char *d = beside_exe(rel, sizeof rel / sizeof *rel, "index.html", found);
    return d ? d : "/usr/local/share/space/console";
}

static int parse_opts(int argc, char **argv, struct spaced_opts *o)
{
    static const struct option longopts[] = {
        {"listen", required_argument, NULL, 'l'}, {"data-dir", required_argument, NULL, 'd'},
        {"guest-dir", required_argument, NULL, 'g'}, {"accel", required_argument, NULL, 'a'},
        {"console-dir", required_argument, NULL, 'W'},
        {"pool", required_argument, NULL, 'p'},   {"qemu", required_argument, NULL, 'q'},
        {"pool-budget-mib", required_argument, NULL, 'P'},
        {"jail", no_argument, NULL, 'j'},          {"no-jail", no_argument, NULL, 'J'},
        {"jail-uids", required_argument, NULL, 'U'},
        {"rate", required_argument, NULL, 'r'},   {"burst", required_argument, NULL, 'b'},
        {"store", required_argument, NULL, 's'},  {"role", required_argument, NULL, 'R'},
        {"node-id", required_argument, NULL, 'N'}, {"advertise", required_argument, NULL, 'A'},
        {"capacity-vcpus", required_argument, NULL, 'C'},
        {"capacity-mem", required_argument, NULL, 'M'},
        {"max-conns-per-client", required_argument, NULL, 'K'},
        {"proxy-idle-timeout", required_argument, NULL, 'I'},
        {"quota-sandboxes", required_argument, NULL, QUOTA_OPT + 0},
        {"quota-vcpus", required_argument, NULL, QUOTA_OPT + 1},
        {"quota-mem-mib", required_argument, NULL, QUOTA_OPT + 2},
        {"quota-disk-mib", required_argument, NULL, QUOTA_OPT + 3},
        {"quota-templates", required_argument, NULL, QUOTA_OPT + 4},
        {"quota-snapshots", required_argument, NULL, QUOTA_OPT + 5},
        {"quota-volume-mib", required_argument, NULL, QUOTA_OPT + 6},
        {"help", no_argument, NULL, 'h'},          {NULL, 0, NULL, 0},
    };
    o->listen = "127.0.0.1:7070";
    o->data_dir = "/var/lib/space";
    o->store_url = env_opt("SPACE_STORE_URL");
    o->gateway = env_opt("SPACE_GATEWAY");
    o->gateway_args = env_opt("SPACE_GATEWAY_ARGS");
    o->qemu_shim = env_opt("SPACE_QEMU_SHIM");
    o->e2b_domain = env_opt("SPACE_E2B_DOMAIN");
    o->e2b_port_listen = env_opt("SPACE_E2B_PORT_LISTEN");
    o->public_url = env_opt("SPACE_PUBLIC_URL");
    o->test_vm_sig = env_opt("SPACE_TEST_VM_SIG");
    o->node_token = getenv("SPACE_NODE_TOKEN");
    o->guest_dir = default_guest_dir();
    o->console_dir = default_console_dir();
    o->accel = VM_ACCEL_AUTO;
    o->qemu = getenv("SPACE_QEMU");
    o->jail = 1; /* required unless --no-jail (jail/jail.c) */
    o->rate = 200;
    o->burst = 1000;
    o->conns_per_client = UINT_MAX; /* unset: decided by the role below */
    o->proxy_idle_s = 600;
    int c;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case 'l': o->listen = optarg; break;
        case 'd': o->data_dir = optarg; break;
        case 's': o->store_url = optarg; break;
        case 'N': o->node_id = optarg; break;
        case 'A': o->advertise = optarg; break;
        case 'R':
            if ((o->role = cluster_role_parse(optarg)) < 0) {
                fprintf(stderr, "spaced: --role must be all, control or node\n");
                return -1;
            }
            break;
        case 'C':
        case 'M': {
            char *end = NULL;
            unsigned long n = strtoul(optarg, &end, 10);
            if (*end || end == optarg || n < 1 || n > 1u << 24) {
                fprintf(stderr, "spaced: --%s must be a positive number\n",
                        c == 'C' ? "capacity-vcpus" : "capacity-mem");
                return -1;
            }
            *(c == 'C' ? &o->node_vcpus : &o->node_memory_mib) = (unsigned)n;
            break;
        }
        case 'g': o->guest_dir = optarg; break;
        case 'W': o->console_dir = optarg; break;
        case 'q': o->qemu = optarg; break;
        case 'j': o->jail = 1; break;
        case 'J': o->jail = 0; break;
        case 'U': o->jail_uids = optarg; break;
        case 'a':
            if (strcmp(optarg, "auto") == 0)
                o->accel = VM_ACCEL_AUTO;
            else if (strcmp(optarg, "kvm") == 0)
                o->accel = VM_ACCEL_KVM;
            else if (strcmp(optarg, "tcg") == 0)
                o->accel = VM_ACCEL_TCG;
            else {
                fprintf(stderr, "spaced: --accel must be auto, kvm or tcg\n");
                return -1;
            }
            break;
        case 'p': {
            char *end = NULL;
            long n = strtol(optarg, &end, 10);
            if (*end || n < 0 || n > 64) {
                fprintf(stderr, "spaced: --pool must be 0..64\n");
                return -1;
            }
            o->pool = (unsigned)n;
            break;
        }
        case 'P': {
            char *end = NULL;
            long n = strtol(optarg, &end, 10);
            if (*end || end == optarg || n < 0 || n > 16777216) {
                fprintf(stderr, "spaced: --pool-budget-mib must be 0..16777216\n");
                return -1;
            }
            o->pool_budget_mib = (unsigned)n;
            break;
        }
        case 'r':
        case 'b': {
            char *end = NULL;
            double v = strtod(optarg, &end);
            if (*end || end == optarg || !(v >= (c == 'r' ? 0 : 1)) || v > 1e6) {
                fprintf(stderr, "spaced: --%s must be a number in %s..1000000\n",
                        c == 'r' ? "rate" : "burst", c == 'r' ? "0" : "1");
                return -1;
            }
            *(c == 'r' ? &o->rate : &o->burst) = v;
            break;
        }
        case 'K':
        case 'I': {
            char *end = NULL;
            unsigned long n = strtoul(optarg, &end, 10);
            if (*end || end == optarg || optarg[0] == '-' || n > 1000000) {
                fprintf(stderr, "spaced: --%s must be an integer 0..1000000\n",
                        c == 'K' ? "max-conns-per-client" : "proxy-idle-timeout");
                return -1;
            }
            *(c == 'K' ? &o->conns_per_client : &o->proxy_idle_s) = (unsigned)n;
            break;
        }
        case QUOTA_OPT + 0: case QUOTA_OPT + 1: case QUOTA_OPT + 2:
        case QUOTA_OPT + 3: case QUOTA_OPT + 4: case QUOTA_OPT + 5: case QUOTA_OPT + 6:
            if (parse_quota(c - QUOTA_OPT, optarg, o) < 0)
                return -1;
            break;
        case 'h': usage(stdout); exit(0);
        default: usage(stderr); return -1;
        }
    }
    /* A node daemon sees every client through its control daemons' addresses. */
    if (o->conns_per_client == UINT_MAX)
        o->conns_per_client = o->role == CLUSTER_NODE ? 0 : 128;
    if (optind != argc) {
        usage(stderr);
        return -1;
    }
    if (o->public_url && !hh_public_url_ok(o->public_url)) {
        fprintf(stderr, "spaced: SPACE_PUBLIC_URL must be http://HOST[:PORT] or https://HOST[:PORT] "
                        "(no path, query or trailing slash)\n");
        return -1;
    }
    return 0;
}

/* Creates the data directory layout (0700: it holds keys and guest disks). */
static int make_dirs(const char *data_dir)
{
    static const char *const sub[] = {"", "/sandboxes", "/run", "/templates"};
    for (size_t i = 0; i < sizeof sub / sizeof *sub; i++) {
        char p[PATH_MAX];
        snprintf(p, sizeof p, "%s%s", data_dir, sub[i]);
        if (mkdir(p, 0700) != 0 && errno != EEXIST) {
            fprintf(stderr, "spaced: cannot create %s: %s\n", p, strerror(errno));
            return -1;
        }
    }
    return 0;
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    (void)what;
    log_info("shutdown", "signal=%d", (int)sig);
    event_base_loopexit(arg, NULL);
}

/* Every sandbox holds a few descriptors here (QMP, agent and console sockets, pidfd) and
 * each client connection one more: a soft limit of 1024, a common default, would stop
 * spaced near 250 sandboxes (docs/benchmarks.md "Density and idle cost"), so it is
 * raised to the hard limit the administrator set. */
static void raise_nofile(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rlim_t was = rl.rlim_cur;
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
            log_warn("rlimit.nofile", "soft=%llu msg=\"cannot raise it: %s\"",
                     (unsigned long long)was, strerror(errno));
    }
}

int main(int argc, char **argv)
{
    log_init("spaced", LOG_INFO);
    struct spaced sp;
    memset(&sp, 0, sizeof sp);
    if (parse_opts(argc, argv, &sp.opt) < 0)
        return 2;
    if (make_dirs(sp.opt.data_dir) < 0)
        return 1;
    /* Absolute paths: they end up in QEMU command lines and vm.json for adoption. */
    char data_abs[PATH_MAX], guest_abs[PATH_MAX], console_abs[PATH_MAX]; /* main's: live until it returns */
    if (!realpath(sp.opt.data_dir, data_abs)) {
        fprintf(stderr, "spaced: %s: %s\n", sp.opt.data_dir, strerror(errno));
        return 1;
    }
    sp.opt.data_dir = data_abs;
    if (realpath(sp.opt.guest_dir, guest_abs))
        sp.opt.guest_dir = guest_abs;
    else
        log_warn("guest.missing", "guest_dir=%s msg=\"sandboxes cannot start until `make guest` built it\"",
                 sp.opt.guest_dir);
    if (realpath(sp.opt.console_dir, console_abs)) /* else /console says it is missing */
        sp.opt.console_dir = console_abs;
    if (jail_resolve(&sp, cluster_runs_sandboxes(&sp)) < 0)
        return 2;
    char cerr[320];
    if (cluster_check_opts(&sp, cerr, sizeof cerr) < 0) {
        fprintf(stderr, "spaced: %s\n", cerr);
        return 2;
    }
    if (runtime_init(&sp) < 0)
        return 2;
    signal(SIGPIPE, SIG_IGN);
    raise_nofile();
    sp.started_ms = spaced_now_ms();
    sp.base = event_base_new();
    char err[512], path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/space.db", sp.opt.data_dir);
    const char *store_at = sp.opt.store_url ? sp.opt.store_url : path;
    if (!sp.base || !(sp.store = store_open(store_at, err, sizeof err))) {
        fprintf(stderr, "spaced: %s\n", sp.base ? err : "cannot create the event loop");
        return 1;
    }
    log_info("store", "backend=%s", store_backend_name(sp.store));
    if (!(sp.auth = auth_new(sp.store, sp.opt.data_dir, err, sizeof err))) {
        fprintf(stderr, "spaced: %s\n", err);
        return 1;
    }
    sp.metrics = metrics_new();
    sp.hostload = hostload_new(NULL);
    sp.sbx = sbx_table_new(&sp);
    sp.tpl = tpl_registry_new(&sp);
    sp.ops = op_engine_new(&sp);
    sp.router = router_new();
    if (!sp.metrics || !sp.hostload || !sp.sbx || !sp.tpl || !sp.ops || !sp.router) {
        fprintf(stderr, "spaced: out of memory\n");
        return 1;
    }
    /* The engine (op.h) knows no module: each registers what carries out its ops. */
    if (sbx_ops_register(&sp) < 0) {
        fprintf(stderr, "spaced: cannot register the sandbox operations\n");
        return 1;
    }
    tpl_ops_register(&sp);
    op_set_owner(sp.ops, cluster_owns_op);
    /* Nor do the lower modules know the ones above them (docs/architecture.md, section
     * 8): the sandbox table learns from cluster/ which rows are this node's, net/ asks the
     * table which sandboxes are alive, template/ asks it what their disks stand on. */
    sbx_set_owner(&sp, cluster_owns_sbx, cluster_node_id(&sp));
    if (!(sp.net = net_spaced_new(sbx_known, &sp))) {
        fprintf(stderr, "spaced: out of memory\n");
        return 1;
    }
    tpl_set_users(&sp, sbx_template_users);
    sp.vol_user = sbx_vol_user; /* vol_delete: 409 while a sandbox mounts the volume */
    vol_trash_sweep(&sp); /* removals a killed spaced left half done */
    if (cluster_runs_sandboxes(&sp) && sbx_table_load(&sp) != 0) {
        fprintf(stderr, "spaced: loading sandboxes: %s\n", store_errmsg(sp.store));
        return 1;
    }
    if (!(sp.pools = sbx_pools_new(&sp))) {
        fprintf(stderr, "spaced: out of memory\n");
        return 1;
    }
    if (cluster_runs_sandboxes(&sp)) {
        sbx_pools_sweep(&sp);
        op_engine_recover(&sp);
    }

    if (routes_ratelimit_register(sp.router, &sp, err, sizeof err) < 0) {
        fprintf(stderr, "spaced: %s\n", err);
        return 1;
    }
    if (cluster_start(&sp, err, sizeof err) < 0) { /* before other hooks: control forwards */
        fprintf(stderr, "spaced: %s\n", err);
        return 1;
    }
    routes_health_register(sp.router, &sp);
    routes_keys_register(sp.router, &sp);
    routes_sandboxes_register(sp.router, &sp);
    routes_ops_register(sp.router, &sp);
    routes_templates_register(sp.router, &sp);
    routes_sessions_register(sp.router, &sp);
    routes_files_register(sp.router, &sp);
    routes_network_register(sp.router, &sp);
    routes_ports_register(sp.router, &sp);
    routes_quota_register(sp.router, &sp);
    routes_logs_register(sp.router, &sp);
    routes_volumes_register(sp.router, &sp);
    routes_events_register(sp.router, &sp);
    console_register(sp.router, &sp);
    if (cluster_runs_sandboxes(&sp)) /* a control forwards E2B instead (cluster_e2b.c) */
        e2b_register(sp.router, &sp);

    struct http_limits lim;
    http_limits_default(&lim);
    lim.max_conns_per_client = sp.opt.conns_per_client ? sp.opt.conns_per_client : UINT_MAX;
    struct http_server *srv = http_server_new(sp.base, &lim, cluster_dispatch, &sp);
    if (!srv || http_server_listen(srv, sp.opt.listen, err, sizeof err) != 0) {
        fprintf(stderr, "spaced: cannot listen on %s: %s\n", sp.opt.listen, srv ? err : "out of memory");
        return 1;
    }
    if (cluster_announce(&sp, err, sizeof err) < 0) { /* a node is placed on once live */
        fprintf(stderr, "spaced: %s\n", err);
        return 1;
    }
    char q1[PATH_MAX + 8], q2[PATH_MAX + 8], q3[PATH_MAX + 8];
    log_info("listening", "addr=%s port=%d data_dir=%s guest_dir=%s accel=%s console_dir=%s", sp.opt.listen,
             http_server_port(srv), log_quote(sp.opt.data_dir, q1, sizeof q1),
             log_quote(sp.opt.guest_dir, q2, sizeof q2),
             vm_accel_name(vm_accel_resolve((enum vm_accel)sp.opt.accel)),
             log_quote(sp.opt.console_dir, q3, sizeof q3));

    struct event *sigint = evsignal_new(sp.base, SIGINT, on_signal, sp.base);
    struct event *sigterm = evsignal_new(sp.base, SIGTERM, on_signal, sp.base);
    event_add(sigint, NULL);
    event_add(sigterm, NULL);
    event_base_dispatch(sp.base);

    /* Sandboxes keep running: the next spaced adopts them (vm_detach in the table). */
    http_server_free(srv);
    event_free(sigint);
    event_free(sigterm);
    /* Before the template registry goes: the heartbeat reads it, and the last loop turn
     * below would run a heartbeat that came due meanwhile (a table free can wait for a
     * hashing worker: sbx_move.c). */
    cluster_free(&sp);
    sbx_pools_free(sp.pools); /* unclaimed pooled VMs die with this spaced */
    sp.pools = NULL;          /* a create ending from here on kicks no pool */
    tpl_registry_free(sp.tpl);
    sbx_table_free(sp.sbx);
    op_engine_free(sp.ops);
    /* vm.c frees detached VMs from the loop: give it that one last turn. */
    event_base_loop(sp.base, EVLOOP_NONBLOCK);
    router_free(sp.router); /* route modules free their contexts (router.h) */
    net_spaced_free(sp.net);   /* after every module that claims or releases namespaces */
    vm_jailer_free(sp.jailer); /* after every VM: a freed VM gives its uid back */
    auth_free(sp.auth);
    metrics_free(sp.metrics);
    hostload_free(sp.hostload);
    store_close(sp.store);
    event_base_free(sp.base);
    log_info("stopped", NULL);
    return 0;
}
