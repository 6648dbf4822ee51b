/* agent_users: users and groups from the guest's /etc/passwd and /etc/group, parsed by
 * hand because a static glibc cannot use NSS. Files are re-read when they change. */
#ifndef SPACE_AGENT_USERS_H
#define SPACE_AGENT_USERS_H

#include <sys/types.h>

#define AGENT_USER_MAX_GROUPS 64

struct agent_user {
    char name[64];                         /* login name */
    uid_t uid;
    gid_t gid;                             /* primary group */
    char home[256];                        /* home directory ("/" if empty) */
    char shell[256];                       /* login shell ("/bin/sh" if empty) */
    gid_t groups[AGENT_USER_MAX_GROUPS];   /* supplementary groups incl. the primary */
    int ngroups;
};

/* Looks up a user by name. 0, or -1 with errno ENOENT (unknown) or the read error. */
int agent_user_lookup(const char *name, struct agent_user *out);

/* Name for a uid/gid into buf; the number as text if there is none. Returns buf. */
const char *agent_user_name(uid_t uid, char *buf, size_t cap);
const char *agent_group_name(gid_t gid, char *buf, size_t cap);

/* The sandbox's default user and working directory (from `refresh`): requests that name
 * no user run as agent_user_default() ("root" until set); an exec that names no cwd
 * starts in agent_user_workdir() when it runs as the default user (NULL: none set, use
 * the user's home). set: copies both (workdir NULL or "" clears it); 0, or -1 with
 * errno ENAMETOOLONG. */
int agent_user_set_default(const char *name, const char *workdir);
const char *agent_user_default(void);
const char *agent_user_workdir(void);

/* Directory holding passwd and group ("/etc"); tests may point it elsewhere. */
void agent_users_set_dir(const char *dir);

#endif
