/* jail.c: jail settings for every spaced VM (jail.h). */
#include "jail.h"

#include <errno.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/spaced.h"
#include "daemon/vm/vm.h"
#include "log.h"

#define JAIL_CGROUP "space"
#define JAIL_PIDS 128 /* QEMU's threads (vCPUs, I/O, RCU) with room to spare */
#define JAIL_UIDS "2000000000:65536"
#define JAIL_SHIM "space-qemu-shim.so"

/* Why the jail cannot work here, or NULL. */
static const char *jail_missing(void)
{
    if (geteuid() != 0)
        return "spaced is not running as root";
    if (access("/sys/fs/cgroup", W_OK) != 0)
        return "/sys/fs/cgroup is not writable";
    return NULL;
}

/* "BASE:COUNT" into base/count. 0, or -1 when malformed. */
static int parse_uids(const char *s, uid_t *base, unsigned *count)
{
    char *end = NULL;
    errno = 0;
    unsigned long long b = strtoull(s, &end, 10);
    if (errno || end == s || *end != ':' || b == 0 || b >= (uid_t)-1)
        return -1;
    const char *c = end + 1;
    unsigned long long n = strtoull(c, &end, 10);
    if (errno || end == c || *end || n == 0 || n > VM_JAIL_UIDS_MAX || b + n > (uid_t)-1)
        return -1;
    *base = (uid_t)b;
    *count = (unsigned)n;
    return 0;
}

/* The name of a host user or group whose id lies in [base, base+count), or NULL: such an
 * id would let a jailed QEMU own that user's files. */
static const char *range_taken(uid_t base, unsigned count, char *buf, size_t cap)
{
    const char *hit = NULL;
    struct passwd *pw;
    setpwent();
    while (!hit && (pw = getpwent()) != NULL)
        if ((pw->pw_uid >= base && pw->pw_uid - base < count) ||
            (pw->pw_gid >= base && pw->pw_gid - base < count)) {
            snprintf(buf, cap, "user %s", pw->pw_name);
            hit = buf;
        }
    endpwent();
    struct group *gr;
    setgrent();
    while (!hit && (gr = getgrent()) != NULL)
        if (gr->gr_gid >= base && gr->gr_gid - base < count) {
            snprintf(buf, cap, "group %s", gr->gr_name);
            hit = buf;
        }
    endgrent();
    return hit;
}

/* SPACE_QEMU_SHIM (sp->opt.qemu_shim), else space-qemu-shim.so beside the spaced binary
 * (written to p[cap]). */
static const char *shim_path(const struct spaced *sp, char *p, size_t cap)
{
    if (sp->opt.qemu_shim)
        return sp->opt.qemu_shim;
    ssize_t n = readlink("/proc/self/exe", p, cap - sizeof JAIL_SHIM - 1);
    if (n <= 0)
        return NULL;
    p[n] = 0;
    char *slash = strrchr(p, '/');
    if (!slash)
        return NULL;
    memcpy(slash + 1, JAIL_SHIM, sizeof JAIL_SHIM);
    return p;
}

int jail_resolve(struct spaced *sp, bool starts_vms)
{
    char err[300], who[300], shim[PATH_MAX]; /* the policy copies the shim's path */
    struct vm_jail_policy pol = {.required = 1, .shim = shim_path(sp, shim, sizeof shim)};
    if (!starts_vms) {
        sp->opt.jail = 0;
        log_info("jail", "state=off why=\"this role starts no VMs\"");
        return 0;
    }
    if (sp->opt.jail == 0) {
        pol.required = 0;
        if (pol.shim && access(pol.shim, R_OK) != 0)
            pol.shim = NULL;
        if (!(sp->jailer = vm_jailer_new(&pol, err, sizeof err))) {
            fprintf(stderr, "spaced: %s\n", err);
            return -1;
        }
        log_warn("jail", "state=off why=--no-jail msg=\"DEVELOPMENT ONLY: every QEMU runs "
                 "unjailed as spaced's user (root), in the host's namespaces, with no cgroup "
                 "limit; a guest that escapes QEMU owns the host\"");
        return 0;
    }
    const char *why = jail_missing();
    if (why) {
        fprintf(stderr, "spaced: the QEMU jail cannot work here: %s (run spaced as root; "
                "--no-jail runs QEMU unjailed, for development only)\n", why);
        return -1;
    }
    const char *uids = sp->opt.jail_uids ? sp->opt.jail_uids : JAIL_UIDS;
    if (parse_uids(uids, &pol.uid_base, &pol.uid_count) < 0) {
        fprintf(stderr, "spaced: --jail-uids %s: want BASE:COUNT, BASE >= 1, COUNT 1..%u, "
                "below uid %u\n", uids, VM_JAIL_UIDS_MAX, (unsigned)(uid_t)-1);
        return -1;
    }
    if (range_taken(pol.uid_base, pol.uid_count, who, sizeof who)) {
        fprintf(stderr, "spaced: --jail-uids %s: the range holds the id of %s; choose a range "
                "no host user or group uses\n", uids, who);
        return -1;
    }
    if (!pol.shim || access(pol.shim, R_OK) != 0) {
        fprintf(stderr, "spaced: the QEMU shim %s is missing (`make programs` builds it next "
                "to spaced; SPACE_QEMU_SHIM names another place)\n", pol.shim ? pol.shim : "");
        return -1;
    }
    if (!(sp->jailer = vm_jailer_new(&pol, err, sizeof err))) {
        fprintf(stderr, "spaced: %s\n", err);
        return -1;
    }
    sp->opt.jail = 1;
    char q[PATH_MAX + 8];
    log_info("jail", "state=on uids=%u:%u cgroup=%s shim=%s", (unsigned)pol.uid_base,
             pol.uid_count, JAIL_CGROUP, log_quote(pol.shim, q, sizeof q));
    return 0;
}

void jail_fill(const struct spaced *sp, struct vm_config *cfg)
{
    memset(&cfg->jail, 0, sizeof cfg->jail);
    cfg->jail.jailer = sp->jailer; /* with --no-jail too: its policy allows unjailed VMs */
    if (!sp->opt.jail)
        return;
    cfg->jail.enabled = 1;
    cfg->jail.uid = VM_JAIL_UID_AUTO;
    cfg->jail.cgroup_parent = JAIL_CGROUP;
    cfg->jail.cpu_percent = cfg->vcpus * 100;
    cfg->jail.pids_max = JAIL_PIDS;
}
