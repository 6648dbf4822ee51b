/* users.c: /etc/passwd and /etc/group parsing with a change-checked cache; see users.h. */
#include "agent/users.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "agent/resolve.h"

/* One cached file: its text with ':' and '\n' left in place, and what it was read at. */
struct users_file {
    const char *name;     /* "passwd" or "group" */
    char *text;           /* malloc'd contents (owned), NUL-terminated */
    struct timespec mtime;
    off_t size;
    ino_t ino;
};

static char users_dir[256] = "/etc";
static char users_default[sizeof ((struct agent_user *)0)->name] = "root";
static char users_workdir[PATH_MAX]; /* "" when none */
static struct users_file users_passwd = {.name = "passwd"};
static struct users_file users_group = {.name = "group"};

#define USERS_FILE_MAX (4 * 1024 * 1024)

void agent_users_set_dir(const char *dir)
{
    snprintf(users_dir, sizeof users_dir, "%s", dir);
    free(users_passwd.text);
    free(users_group.text);
    users_passwd.text = users_group.text = NULL;
}

int agent_user_set_default(const char *name, const char *workdir)
{
    if (!workdir)
        workdir = "";
    if (strlen(name) >= sizeof users_default || strlen(workdir) >= sizeof users_workdir) {
        errno = ENAMETOOLONG;
        return -1;
    }
    snprintf(users_default, sizeof users_default, "%s", name);
    snprintf(users_workdir, sizeof users_workdir, "%s", workdir);
    return 0;
}

const char *agent_user_default(void) { return users_default; }

const char *agent_user_workdir(void) { return users_workdir[0] ? users_workdir : NULL; }

/* Returns the file's text, re-reading it if it changed; NULL with errno on failure. */
static const char *users_load(struct users_file *f)
{
    char name[300], path[PATH_MAX];
    snprintf(name, sizeof name, "%s/%s", users_dir, f->name);
    /* Read on the loop: /etc/passwd must not lead into a volume mount (resolve.h; then
     * EXDEV, "Invalid cross-device link", and requests naming a user fail). */
    if (agent_resolve(name, true, path) < 0)
        return NULL;
    struct stat st;
    if (stat(path, &st) < 0)
        return NULL;
    if (f->text && st.st_ino == f->ino && st.st_size == f->size &&
        st.st_mtim.tv_sec == f->mtime.tv_sec && st.st_mtim.tv_nsec == f->mtime.tv_nsec)
        return f->text;
    if (st.st_size > USERS_FILE_MAX) {
        errno = EFBIG;
        return NULL;
    }
    FILE *fp = fopen(path, "re");
    if (!fp)
        return NULL;
    char *text = malloc((size_t)st.st_size + 1);
    size_t n = text ? fread(text, 1, (size_t)st.st_size, fp) : 0;
    fclose(fp);
    if (!text)
        return NULL;
    text[n] = '\0';
    free(f->text);
    f->text = text;
    f->ino = st.st_ino;
    f->size = st.st_size;
    f->mtime = st.st_mtim;
    return f->text;
}

/* Splits one line [p, end) into up to max ':' fields, copied into a scratch line. */
static int users_fields(const char *p, const char *end, char *line, size_t cap, char **fields,
                        int max)
{
    size_t n = (size_t)(end - p);
    if (n >= cap)
        return 0;
    memcpy(line, p, n);
    line[n] = '\0';
    int k = 0;
    char *s = line;
    while (k < max) {
        fields[k++] = s;
        char *colon = strchr(s, ':');
        if (!colon)
            break;
        *colon = '\0';
        s = colon + 1;
    }
    return k;
}

static int users_parse_id(const char *s, unsigned *out)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno || end == s || *end || v > 0xfffffffeUL)
        return -1;
    *out = (unsigned)v;
    return 0;
}

/* Calls fn for each well-formed line of text with its fields; stops when fn returns 1. */
typedef int (*users_line_fn)(char **fields, int n, void *arg);
static void users_each(const char *text, int max, users_line_fn fn, void *arg)
{
    char line[4096];
    char *fields[8];
    for (const char *p = text; *p;) {
        const char *end = strchr(p, '\n');
        if (!end)
            end = p + strlen(p);
        int n = users_fields(p, end, line, sizeof line, fields, max);
        if (n == max && line[0] != '#' && fn(fields, n, arg))
            return;
        p = *end ? end + 1 : end;
    }
}

static int user_by_name(char **f, int n, void *arg)
{
    struct agent_user *u = arg;
    unsigned uid, gid;
    if (strcmp(f[0], u->name) != 0 || users_parse_id(f[2], &uid) || users_parse_id(f[3], &gid))
        return 0;
    u->uid = uid;
    u->gid = gid;
    snprintf(u->home, sizeof u->home, "%s", f[5][0] ? f[5] : "/");
    snprintf(u->shell, sizeof u->shell, "%s", f[6][0] ? f[6] : "/bin/sh");
    u->ngroups = 1;
    u->groups[0] = u->gid;
    return 1;
}

static int group_member(char **f, int n, void *arg)
{
    struct agent_user *u = arg;
    unsigned gid;
    if (users_parse_id(f[2], &gid) || gid == u->gid || u->ngroups >= AGENT_USER_MAX_GROUPS)
        return 0;
    for (char *m = f[3]; *m;) {
        size_t len = strcspn(m, ",");
        if (len == strlen(u->name) && strncmp(m, u->name, len) == 0) {
            u->groups[u->ngroups++] = gid;
            break;
        }
        m += len + (m[len] == ',');
    }
    return 0;
}

int agent_user_lookup(const char *name, struct agent_user *out)
{
    memset(out, 0, sizeof *out);
    if (!name[0] || strlen(name) >= sizeof out->name || strchr(name, ':')) {
        errno = ENOENT;
        return -1;
    }
    snprintf(out->name, sizeof out->name, "%s", name);
    const char *pw = users_load(&users_passwd);
    if (!pw)
        return -1;
    users_each(pw, 7, user_by_name, out);
    if (out->ngroups == 0) {
        errno = ENOENT;
        return -1;
    }
    const char *gr = users_load(&users_group);
    if (gr)
        users_each(gr, 4, group_member, out);
    return 0;
}

struct users_id_query {
    unsigned id;    /* uid or gid wanted */
    int field;      /* index of the id field */
    char *buf;      /* where the name goes */
    size_t cap;
    int found;
};

static int name_by_id(char **f, int n, void *arg)
{
    struct users_id_query *q = arg;
    unsigned id;
    if (users_parse_id(f[q->field], &id) || id != q->id)
        return 0;
    snprintf(q->buf, q->cap, "%s", f[0]);
    q->found = 1;
    return 1;
}

static const char *users_id_name(struct users_file *file, int nfields, unsigned id, char *buf,
                                 size_t cap)
{
    struct users_id_query q = {.id = id, .field = 2, .buf = buf, .cap = cap};
    const char *text = users_load(file);
    if (text)
        users_each(text, nfields, name_by_id, &q);
    if (!q.found)
        snprintf(buf, cap, "%u", id);
    return buf;
}

const char *agent_user_name(uid_t uid, char *buf, size_t cap)
{
    return users_id_name(&users_passwd, 7, uid, buf, cap);
}

const char *agent_group_name(gid_t gid, char *buf, size_t cap)
{
    return users_id_name(&users_group, 4, gid, buf, cap);
}
