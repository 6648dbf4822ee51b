/* cli_spacefile.c: a Dockerfile-like file -> a template spec (cli_spacefile.h). */
#include "cli_spacefile.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "b64.h"
#include "readall.h"

#define SF_TOKENS_MAX 64 /* words of one COPY */
#define SF_DEPTH_MAX 32  /* directory levels COPY descends */

struct sf {
    char dir[4096]; /* the file's directory: COPY sources are relative to it */
    json_t *spec, *steps;
    unsigned line;  /* first line of the instruction being read */
    char *err;
    size_t errlen;
};

static bool fail(struct sf *s, const char *fmt, ...)
{
    int n = snprintf(s->err, s->errlen, "line %u: ", s->line);
    va_list ap;
    va_start(ap, fmt);
    if (n >= 0 && (size_t)n < s->errlen)
        vsnprintf(s->err + n, s->errlen - (size_t)n, fmt, ap);
    va_end(ap);
    return false;
}

/* The whole file, NUL-terminated (malloc'd), or NULL with err set. */
static char *slurp(const char *path, size_t max, size_t *len, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    char *buf = fd < 0 ? NULL : readall_fd(fd, max, len);
    if (!buf)
        snprintf(err, errlen, "%s: %s", path,
                 errno == EINVAL ? "not a regular file" : errno == EFBIG ? "too large" : strerror(errno));
    if (fd >= 0)
        close(fd);
    return buf;
}

/* ---- ENV ----------------------------------------------------------------------------- */

static bool env_key_ok(const char *k, size_t n)
{
    if (n == 0 || !(k[0] == '_' || (k[0] >= 'A' && k[0] <= 'Z') || (k[0] >= 'a' && k[0] <= 'z')))
        return false;
    for (size_t i = 1; i < n; i++)
        if (!(k[i] == '_' || (k[i] >= 'A' && k[i] <= 'Z') || (k[i] >= 'a' && k[i] <= 'z') ||
              (k[i] >= '0' && k[i] <= '9')))
            return false;
    return true;
}

/* One word at *p: plain, "double quoted" (\" and \\ escapes) or 'single quoted'; ends at
 * whitespace outside quotes. Written to out (cap bytes). false on an open quote or too
 * long a word. */
static bool word(const char **p, char *out, size_t cap)
{
    const char *s = *p;
    size_t n = 0;
    while (*s && *s != ' ' && *s != '\t') {
        char q = *s == '"' || *s == '\'' ? *s++ : 0;
        while (*s && (q ? *s != q : (*s != ' ' && *s != '\t' && *s != '"' && *s != '\''))) {
            if (q == '"' && *s == '\\' && (s[1] == '"' || s[1] == '\\'))
                s++;
            if (n + 1 >= cap)
                return false;
            out[n++] = *s++;
        }
        if (q && *s++ != q)
            return false;
    }
    out[n] = '\0';
    while (*s == ' ' || *s == '\t')
        s++;
    *p = s;
    return true;
}

static json_t *env_step(struct sf *s, const char *args)
{
    json_t *env = json_object();
    const char *eq = strchr(args, '='), *sp = strpbrk(args, " \t");
    if (!eq || (sp && sp < eq)) { /* ENV KEY VALUE: the rest of the line is the value */
        size_t kn = sp ? (size_t)(sp - args) : strlen(args);
        char key[256];
        if (!sp || kn >= sizeof key || !env_key_ok(args, kn)) {
            json_decref(env);
            fail(s, "ENV wants KEY=VALUE ... or KEY VALUE, keys [A-Za-z_][A-Za-z0-9_]*");
            return NULL;
        }
        memcpy(key, args, kn);
        key[kn] = '\0';
        json_object_set_new(env, key, json_string(sp + strspn(sp, " \t")));
        return env;
    }
    const char *p = args;
    size_t cap = strlen(args) + 1; /* a word is never longer than the line */
    char *w = malloc(cap);
    bool ok = w || fail(s, "out of memory");
    while (ok && *p) {
        ok = word(&p, w, cap) || fail(s, "ENV: a quote is not closed");
        char *e = ok ? strchr(w, '=') : NULL;
        if (ok && (!e || !env_key_ok(w, (size_t)(e - w))))
            ok = fail(s, "ENV: \"%.40s\" is not KEY=VALUE (keys [A-Za-z_][A-Za-z0-9_]*)", w);
        if (ok) {
            *e = '\0';
            json_object_set_new(env, w, json_string(e + 1));
        }
    }
    free(w);
    if (!ok) {
        json_decref(env);
        return NULL;
    }
    return env;
}

/* ---- COPY ---------------------------------------------------------------------------- */

static bool copy_file(struct sf *s, const char *src, const char *dst, long mode, const char *owner)
{
    size_t len = 0;
    char msg[512];
    char *data = slurp(src, SPACEFILE_COPY_MAX, &len, msg, sizeof msg);
    if (!data) {
        fail(s, "COPY %s", msg);
        return false;
    }
    struct stat st;
    if (mode < 0)
        mode = stat(src, &st) == 0 ? (long)(st.st_mode & 0777) : 0644;
    char *enc = malloc(B64_ENCODED_SIZE(len));
    if (!enc) {
        free(data);
        fail(s, "COPY %s: out of memory", src);
        return false;
    }
    b64_encode((const uint8_t *)data, len, enc);
    free(data);
    json_t *c = json_pack("{s:s, s:s, s:I}", "dst", dst, "content", enc, "mode", (json_int_t)mode);
    free(enc);
    if (owner)
        json_object_set_new(c, "owner", json_string(owner));
    json_array_append_new(s->steps, json_pack("{s:o}", "copy", c));
    return true;
}

static int name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* src (a directory) into dst (ending in '/'), entries in name order so the spec (and
 * the template's build key) does not depend on readdir's order. */
static bool copy_dir(struct sf *s, const char *src, const char *dst, long mode, const char *owner,
                     int depth)
{
    if (depth > SF_DEPTH_MAX) {
        fail(s, "COPY %s: more than %d directory levels", src, SF_DEPTH_MAX);
        return false;
    }
    DIR *d = opendir(src);
    if (!d) {
        fail(s, "COPY %s: %s", src, strerror(errno));
        return false;
    }
    char **names = NULL;
    size_t n = 0;
    struct dirent *e;
    bool ok = true;
    while (ok && (e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        char **grown = realloc(names, (n + 1) * sizeof *names);
        ok = grown && (grown[n] = strdup(e->d_name));
        if (grown)
            names = grown;
        n += ok;
    }
    closedir(d);
    qsort(names, n, sizeof *names, name_cmp);
    for (size_t i = 0; ok && i < n; i++) {
        char sp[4096], dp[4096];
        struct stat st;
        if ((size_t)snprintf(sp, sizeof sp, "%s/%s", src, names[i]) >= sizeof sp ||
            (size_t)snprintf(dp, sizeof dp, "%s%s", dst, names[i]) >= sizeof dp - 1) {
            ok = fail(s, "COPY %s: path too long", src);
            break;
        }
        if (lstat(sp, &st) != 0 || !(S_ISREG(st.st_mode) || S_ISDIR(st.st_mode))) {
            fail(s, "COPY %s: only regular files and directories are copied", sp);
            ok = false;
        } else if (S_ISDIR(st.st_mode)) {
            strcat(dp, "/");
            ok = copy_dir(s, sp, dp, mode, owner, depth + 1);
        } else {
            ok = copy_file(s, sp, dp, mode, owner);
        }
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return ok;
}

static bool copy_words(struct sf *s, char (*words)[4096], size_t n);

static bool copy_step(struct sf *s, const char *args)
{
    char(*words)[4096] = malloc(SF_TOKENS_MAX * sizeof *words);
    size_t n = 0;
    const char *p = args;
    bool ok = words != NULL;
    while (ok && *p) {
        ok = n < SF_TOKENS_MAX && word(&p, words[n], sizeof words[n]);
        n += ok;
    }
    if (!ok)
        fail(s, "COPY: more than %d words, a word over 4095 bytes, or a quote not closed",
             SF_TOKENS_MAX);
    ok = ok && copy_words(s, words, n);
    free(words);
    return ok;
}

/* COPY's words: [--chmod=M] [--chown=O] SRC... DST. */
static bool copy_words(struct sf *s, char (*words)[4096], size_t n)
{
    long mode = -1;
    const char *owner = NULL;
    size_t i = 0;
    for (; i < n && strncmp(words[i], "--", 2) == 0; i++) {
        char *end;
        if (strncmp(words[i], "--chmod=", 8) == 0) {
            mode = strtol(words[i] + 8, &end, 8);
            if (*end || end == words[i] + 8 || mode < 0 || mode > 07777)
                return fail(s, "COPY --chmod wants an octal mode (e.g. 0755)");
        } else if (strncmp(words[i], "--chown=", 8) == 0 && words[i][8]) {
            owner = words[i] + 8;
        } else {
            return fail(s, "COPY: unknown option %.40s (--chmod=MODE, --chown=USER[:GROUP])", words[i]);
        }
    }
    if (n - i < 2)
        return fail(s, "COPY wants SRC... DST");
    const char *dst = words[n - 1];
    size_t dl = strlen(dst);
    bool dst_dir = dst[dl - 1] == '/';
    for (size_t k = i; k < n - 1; k++) {
        const char *src = words[k];
        if (src[0] == '/' || strcmp(src, "..") == 0 || strncmp(src, "../", 3) == 0 ||
            strstr(src, "/../") || (strlen(src) >= 3 && strcmp(src + strlen(src) - 3, "/..") == 0))
            return fail(s, "COPY %s: sources are relative to the file's directory, without ..", src);
        char path[8200], target[8200];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", s->dir, src);
        if (lstat(path, &st) != 0)
            return fail(s, "COPY %s: %s", src, strerror(errno));
        if ((S_ISDIR(st.st_mode) || n - i > 2) && !dst_dir)
            return fail(s, "COPY: with a directory or several sources DST must end in /");
        if (S_ISDIR(st.st_mode)) {
            if (!copy_dir(s, path, dst, mode, owner, 0))
                return false;
            continue;
        }
        if (!S_ISREG(st.st_mode))
            return fail(s, "COPY %s: only regular files and directories are copied", src);
        const char *base = strrchr(src, '/') ? strrchr(src, '/') + 1 : src;
        snprintf(target, sizeof target, "%s%s", dst, dst_dir ? base : "");
        if (!copy_file(s, path, target, mode, owner))
            return false;
    }
    return true;
}

/* ---- instructions -------------------------------------------------------------------- */

static bool instruction(struct sf *s, const char *op, const char *args)
{
    bool first = !json_object_get(s->spec, "base");
    if (strcasecmp(op, "FROM") == 0) {
        if (!first)
            return fail(s, "FROM comes once, first");
        if (!*args || strpbrk(args, " \t"))
            return fail(s, "FROM wants one template name");
        json_object_set_new(s->spec, "base", json_string(args));
        return true;
    }
    if (first)
        return fail(s, "the first instruction must be FROM TEMPLATE");
    if (!*args)
        return fail(s, "%s wants an argument", op);
    if (strcasecmp(op, "RUN") == 0) {
        if (args[0] == '[')
            return fail(s, "RUN [\"...\"] (exec form) is not supported: write the shell form");
        json_array_append_new(s->steps, json_pack("{s:s}", "run", args));
    } else if (strcasecmp(op, "ENV") == 0) {
        json_t *env = env_step(s, args);
        if (!env)
            return false;
        json_array_append_new(s->steps, json_pack("{s:o}", "env", env));
    } else if (strcasecmp(op, "WORKDIR") == 0 || strcasecmp(op, "USER") == 0) {
        json_array_append_new(s->steps, json_pack("{s:s}", strcasecmp(op, "USER") == 0 ? "user" : "workdir",
                                                  args));
    } else if (strcasecmp(op, "COPY") == 0 || strcasecmp(op, "ADD") == 0) {
        if (strcasecmp(op, "ADD") == 0)
            return fail(s, "ADD is not supported (no URLs, no archive unpacking): use COPY");
        return copy_step(s, args);
    } else if (strcasecmp(op, "START") == 0 || strcasecmp(op, "READY") == 0) {
        const char *key = strcasecmp(op, "START") == 0 ? "start" : "ready";
        if (json_object_get(s->spec, key))
            return fail(s, "%s comes once", op);
        json_object_set_new(s->spec, key, json_string(args));
    } else if (strcasecmp(op, "CMD") == 0 || strcasecmp(op, "ENTRYPOINT") == 0) {
        return fail(s, "%s is not supported: a template has no entry point; START CMD runs a "
                      "command in every sandbox of it", op);
    } else {
        return fail(s, "unknown instruction %.32s (FROM, RUN, ENV, WORKDIR, USER, COPY, START, READY)",
                      op);
    }
    return true;
}

json_t *cli_spacefile_parse(const char *path, const char *name, char *err, size_t errlen)
{
    size_t len = 0;
    char *text = slurp(path, SPACEFILE_MAX, &len, err, errlen);
    if (!text)
        return NULL;
    if (memchr(text, '\0', len)) {
        snprintf(err, errlen, "%s: holds a NUL byte (not a text file)", path);
        free(text);
        return NULL;
    }
    struct sf s = {.err = err, .errlen = errlen};
    const char *slash = strrchr(path, '/');
    snprintf(s.dir, sizeof s.dir, "%.*s", slash ? (int)(slash - path) : 1, slash ? path : ".");
    if (slash == path)
        snprintf(s.dir, sizeof s.dir, "/");
    s.steps = json_array();
    s.spec = json_pack("{s:s, s:o}", "name", name, "steps", s.steps);
    char *logical = malloc(len + 1);
    bool ok = logical != NULL;
    unsigned lineno = 0;
    char *p = text;
    while (ok && *p) {
        /* One logical line: physical lines joined while they end in a backslash. */
        size_t n = 0;
        s.line = lineno + 1;
        for (;;) {
            char *nl = strchr(p, '\n');
            size_t l = nl ? (size_t)(nl - p) : strlen(p);
            lineno++;
            bool cont = l > 0 && p[l - 1] == '\\';
            memcpy(logical + n, p, cont ? l - 1 : l);
            n += cont ? l - 1 : l;
            p += l + (nl != NULL);
            if (!cont || !*p)
                break;
        }
        logical[n] = '\0';
        char *t = logical + strspn(logical, " \t\r");
        char *end = t + strlen(t);
        while (end > t && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\r'))
            *--end = '\0';
        if (!*t || *t == '#')
            continue;
        char *args = t + strcspn(t, " \t");
        if (*args)
            *args++ = '\0';
        args += strspn(args, " \t");
        ok = instruction(&s, t, args);
    }
    if (ok && !json_object_get(s.spec, "base")) {
        snprintf(err, errlen, "%s: no FROM TEMPLATE", path);
        ok = false;
    }
    free(logical);
    free(text);
    if (!ok) {
        json_decref(s.spec);
        return NULL;
    }
    return s.spec;
}
