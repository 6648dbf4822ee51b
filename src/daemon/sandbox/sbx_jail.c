/* sbx_jail.c: jail settings for sandbox VMs (sbx_jail.h). */
#include "sbx_jail.h"

#include <pwd.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "daemon/spaced.h"
#include "daemon/vm/vm.h"
#include "log.h"

#define SBX_JAIL_USER "nobody"
#define SBX_JAIL_CGROUP "space"
#define SBX_JAIL_PIDS 128 /* QEMU's threads (vCPUs, I/O, RCU) with room to spare */

/* Why the jail cannot work here, or NULL. */
static const char *jail_missing(uid_t *uid, gid_t *gid)
{
    if (geteuid() != 0)
        return "spaced is not running as root";
    struct passwd *pw = getpwnam(SBX_JAIL_USER);
    if (!pw || pw->pw_uid == 0)
        return "there is no unprivileged `" SBX_JAIL_USER "` user";
    if (access("/sys/fs/cgroup", W_OK) != 0)
        return "/sys/fs/cgroup is not writable";
    *uid = pw->pw_uid;
    *gid = pw->pw_gid;
    return NULL;
}

int sbx_jail_resolve(struct spaced *sp)
{
    uid_t uid = 0;
    gid_t gid = 0;
    const char *why = jail_missing(&uid, &gid);
    if (sp->opt.jail > 0 && why) {
        fprintf(stderr, "spaced: --jail: %s\n", why);
        return -1;
    }
    if (sp->opt.jail < 0)
        sp->opt.jail = why == NULL;
    if (sp->opt.jail) {
        sp->opt.jail_uid = (unsigned)uid;
        sp->opt.jail_gid = (unsigned)gid;
        log_info("jail", "state=on uid=%u gid=%u cgroup=%s", sp->opt.jail_uid, sp->opt.jail_gid,
                 SBX_JAIL_CGROUP);
    } else {
        char q[128];
        log_info("jail", "state=off why=%s", log_quote(why ? why : "--no-jail", q, sizeof q));
    }
    return 0;
}

void sbx_jail_fill(const struct spaced *sp, struct vm_config *cfg)
{
    if (!sp->opt.jail)
        return;
    memset(&cfg->jail, 0, sizeof cfg->jail);
    cfg->jail.enabled = 1;
    cfg->jail.uid = (uid_t)sp->opt.jail_uid;
    cfg->jail.gid = (gid_t)sp->opt.jail_gid;
    cfg->jail.cgroup_parent = SBX_JAIL_CGROUP;
    cfg->jail.cpu_percent = cfg->vcpus * 100;
    cfg->jail.pids_max = SBX_JAIL_PIDS;
}
