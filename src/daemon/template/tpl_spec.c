/* tpl_spec.c: validation of a template build request (POST /v1/templates).
 *
 * The body is the spec format of the built-in templates (docs/templates.md) with what a
 * build on another template can honour: base (or its alias from), description, vcpus,
 * memory_mib, steps (run, copy, env, workdir, user), start, ready. Everything in it
 * comes from an API client and ends up as commands, paths and file contents inside a
 * build VM, so every field is checked here before anything is stored: types, lengths,
 * no NUL or control bytes where a path or name goes, no `..` components, sizes of
 * copied files, modes, owner names. */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "b64.h"
#include "daemon/store/store.h"
#include "tpl_internal.h"

#define BAD "invalid_request"

const char *const tpl_spec_fields[] = {"name", "description", "base", "from", "packages", "size_mib",
                                       "vcpus", "memory_mib", "steps", "start", "ready", NULL};
#define TPL_CMD_MAX 65536    /* run, start, ready */
#define TPL_PATH_LEN_MAX 4096
#define TPL_ENV_KEYS_MAX 64
#define TPL_ENV_VALUE_MAX 32768

/* A JSON string without NUL bytes (jansson allows them) and, unless `ctl_ok`, without
 * control characters; 1..max bytes. */
static bool clean_string(json_t *v, size_t max, bool ctl_ok)
{
    const char *s = json_string_value(v);
    if (!s)
        return false;
    size_t n = json_string_length(v);
    if (n == 0 || n > max || strlen(s) != n)
        return false;
    for (size_t i = 0; !ctl_ok && i < n; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
            return false;
    return true;
}

/* Guest user (or user:group) names as passwd has them: [A-Za-z0-9._-], not starting
 * with '-', 1..32 each. */
static bool name_ok(const char *s, size_t len)
{
    if (len == 0 || len > 32 || s[0] == '-')
        return false;
    for (size_t i = 0; i < len; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
              (s[i] >= '0' && s[i] <= '9') || s[i] == '.' || s[i] == '_' || s[i] == '-'))
            return false;
    return true;
}

static bool owner_ok(const char *s)
{
    const char *colon = strchr(s, ':');
    if (!colon)
        return name_ok(s, strlen(s));
    return name_ok(s, (size_t)(colon - s)) && name_ok(colon + 1, strlen(colon + 1));
}

/* A guest path: clean, no `..` component; `absolute` requires a leading '/'. */
static bool path_ok(json_t *v, bool absolute)
{
    if (!clean_string(v, TPL_PATH_LEN_MAX, false))
        return false;
    const char *p = json_string_value(v);
    if (absolute && p[0] != '/')
        return false;
    for (const char *c = p; *c;) {
        while (*c == '/')
            c++;
        size_t len = strcspn(c, "/");
        if (len == 2 && c[0] == '.' && c[1] == '.')
            return false;
        c += len;
    }
    return true;
}

static int check_copy(json_t *c, size_t i, size_t *total, struct spaced_err *err)
{
    if (!json_is_object(c))
        return spaced_err_set(err, 400, BAD, "steps[%zu].copy must be an object {\"dst\", \"content\"}", i);
    const char *k;
    json_t *v;
    json_object_foreach(c, k, v) {
        if (strcmp(k, "src") == 0)
            return spaced_err_set(err, 400, BAD,
                                  "steps[%zu].copy.src names a file on the build host, which API "
                                  "builds cannot read: send the bytes as copy.content (base64)", i);
        if (strcmp(k, "dst") && strcmp(k, "content") && strcmp(k, "mode") && strcmp(k, "owner"))
            return spaced_err_set(err, 400, "unknown_field",
                                  "steps[%zu].copy: unknown field \"%.32s\" (dst, content, mode, owner)", i, k);
    }
    json_t *dst = json_object_get(c, "dst");
    const char *d = json_string_value(dst);
    if (!path_ok(dst, false) || d[strlen(d) - 1] == '/')
        return spaced_err_set(err, 400, BAD,
                              "steps[%zu].copy.dst must name a file: a path of 1..%d bytes without "
                              "NUL, control characters, '..' components or a trailing '/'",
                              i, TPL_PATH_LEN_MAX);
    json_t *content = json_object_get(c, "content");
    const char *b = json_string_value(content);
    if (!b)
        return spaced_err_set(err, 400, BAD, "steps[%zu].copy.content (base64 of the file) is required", i);
    size_t enc = json_string_length(content);
    if (enc > B64_ENCODED_SIZE(TPL_COPY_MAX))
        return spaced_err_set(err, 400, "too_large", "steps[%zu].copy.content is over %u bytes decoded",
                              i, TPL_COPY_MAX);
    uint8_t *buf = malloc(enc / 4 * 3 + 3);
    long n = buf && strlen(b) == enc ? b64_decode(b, buf, enc / 4 * 3 + 3) : -1;
    free(buf);
    if (n < 0)
        return spaced_err_set(err, 400, BAD,
                              "steps[%zu].copy.content is not valid base64 (RFC 4648, padded, no "
                              "whitespace)", i);
    if ((size_t)n > TPL_COPY_MAX)
        return spaced_err_set(err, 400, "too_large", "steps[%zu].copy.content is over %u bytes decoded",
                              i, TPL_COPY_MAX);
    *total += (size_t)n;
    if (*total > TPL_COPY_TOTAL_MAX)
        return spaced_err_set(err, 400, "too_large", "copy steps carry over %u bytes in total",
                              TPL_COPY_TOTAL_MAX);
    json_t *mode = json_object_get(c, "mode");
    if (mode && (!json_is_integer(mode) || json_integer_value(mode) < 0 ||
                 json_integer_value(mode) > 07777))
        return spaced_err_set(err, 400, BAD,
                              "steps[%zu].copy.mode must be an integer 0..4095 (e.g. 493 = 0755)", i);
    json_t *owner = json_object_get(c, "owner");
    if (owner && !(clean_string(owner, 65, false) && owner_ok(json_string_value(owner))))
        return spaced_err_set(err, 400, BAD,
                              "steps[%zu].copy.owner must be USER or USER:GROUP ([A-Za-z0-9._-], "
                              "1..32 each, not starting with '-')", i);
    return 0;
}

static int check_env(json_t *env, size_t i, struct spaced_err *err)
{
    if (!json_is_object(env) || json_object_size(env) == 0 || json_object_size(env) > TPL_ENV_KEYS_MAX)
        return spaced_err_set(err, 400, BAD, "steps[%zu].env must be an object of 1..%d variables",
                              i, TPL_ENV_KEYS_MAX);
    const char *k;
    json_t *v;
    json_object_foreach(env, k, v) {
        size_t kl = strlen(k);
        bool ok = kl > 0 && kl <= 128 && !(k[0] >= '0' && k[0] <= '9');
        for (size_t j = 0; ok && j < kl; j++)
            ok = (k[j] >= 'a' && k[j] <= 'z') || (k[j] >= 'A' && k[j] <= 'Z') ||
                 (k[j] >= '0' && k[j] <= '9') || k[j] == '_';
        if (!ok)
            return spaced_err_set(err, 400, BAD,
                                  "steps[%zu].env: name \"%.64s\" must match [A-Za-z_][A-Za-z0-9_]*", i, k);
        const char *s = json_string_value(v);
        if (!s || json_string_length(v) > TPL_ENV_VALUE_MAX || strlen(s) != json_string_length(v) ||
            strchr(s, '\n'))
            return spaced_err_set(err, 400, BAD,
                                  "steps[%zu].env.%.64s must be a string of at most %d bytes without "
                                  "NUL or newline", i, k, TPL_ENV_VALUE_MAX);
    }
    return 0;
}

static int check_step(json_t *s, size_t i, size_t *copied, struct spaced_err *err)
{
    static const char *const kinds = "run, copy, env, workdir, user";
    if (!json_is_object(s) || json_object_size(s) != 1)
        return spaced_err_set(err, 400, BAD, "steps[%zu] must be an object with exactly one of %s",
                              i, kinds);
    const char *kind = json_object_iter_key(json_object_iter(s));
    json_t *v = json_object_iter_value(json_object_iter(s));
    if (strcmp(kind, "run") == 0)
        return clean_string(v, TPL_CMD_MAX, true)
                   ? 0
                   : spaced_err_set(err, 400, BAD,
                                    "steps[%zu].run must be a shell command of 1..%d bytes without NUL",
                                    i, TPL_CMD_MAX);
    if (strcmp(kind, "copy") == 0)
        return check_copy(v, i, copied, err);
    if (strcmp(kind, "env") == 0)
        return check_env(v, i, err);
    if (strcmp(kind, "workdir") == 0)
        return path_ok(v, true) ? 0
                                : spaced_err_set(err, 400, BAD,
                                                 "steps[%zu].workdir must be an absolute path without "
                                                 "NUL, control characters or '..' components", i);
    if (strcmp(kind, "user") == 0)
        return clean_string(v, 32, false) && name_ok(json_string_value(v), json_string_length(v))
                   ? 0
                   : spaced_err_set(err, 400, BAD,
                                    "steps[%zu].user must be a user name ([A-Za-z0-9._-], 1..32, not "
                                    "starting with '-')", i);
    return spaced_err_set(err, 400, BAD, "steps[%zu]: unknown step \"%.32s\" (one of %s)", i, kind, kinds);
}

static int check_uint(json_t *o, const char *key, json_int_t lo, json_int_t hi, struct spaced_err *err)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return spaced_err_set(err, 400, BAD, "%s must be an integer in %lld..%lld", key,
                              (long long)lo, (long long)hi);
    return 0;
}

/* True for names shaped like the ids spaced generates (spaced_random_id: a one- or
 * two-letter prefix and 16 lowercase hex digits, "sb0123456789abcdef"). Operations name
 * their target by sandbox id or template name alike, and routes and logs take either: a
 * template must never read as a sandbox or other object. */
static bool id_shaped(const char *name)
{
    size_t len = strlen(name), pre = len - 16;
    if (len != 17 && len != 18)
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = name[i];
        bool ok = i < pre ? (c >= 'a' && c <= 'z') : ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'));
        if (!ok)
            return false;
    }
    return true;
}

/* Whether `name` may be given to a new build by `tenant`: free, deleted, or the tenant's
 * own failed build (rebuilt in place). Names are one namespace for the host. */
static int name_free(struct spaced *sp, const char *tenant, const char *name, struct spaced_err *err)
{
    struct tpl_info t;
    if (tpl_lookup(sp, NULL, name, &t, NULL) == 0 && t.builtin)
        return spaced_err_set(err, 409, "conflict", "template name %s is taken (built in)", name);
    struct store_tpl row;
    if (store_tpl_get(sp->store, name, &row) != 0)
        return 0;
    bool free_ = strcmp(row.state, "deleted") == 0 ||
                 (strcmp(row.state, "failed") == 0 && strcmp(row.tenant, tenant) == 0);
    bool building = strcmp(row.state, "building") == 0 && strcmp(row.tenant, tenant) == 0;
    store_tpl_clear(&row);
    if (free_)
        return 0;
    if (building)
        return spaced_err_set(err, 409, "conflict", "template %s is already being built", name);
    return spaced_err_set(err, 409, "conflict",
                          "template name %s is taken (names are unique on this host; pick another)",
                          name);
}

int tpl_spec_check(struct spaced *sp, const char *tenant, json_t *o, struct spaced_err *err)
{
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v) {
        size_t i = 0;
        while (tpl_spec_fields[i] && strcmp(tpl_spec_fields[i], k) != 0)
            i++;
        if (!tpl_spec_fields[i])
            return spaced_err_set(err, 400, "unknown_field", "unknown field \"%.64s\"", k);
    }
    const char *name = json_string_value(json_object_get(o, "name"));
    if (!name || !tpl_name_valid(name))
        return spaced_err_set(err, 400, BAD,
                              "name must be 1..48 characters [a-z0-9_-], not starting with '-'");
    if (id_shaped(name))
        return spaced_err_set(err, 400, BAD,
                              "name %s has the shape of a generated id (letters + 16 hex digits, "
                              "like sandbox and operation ids); pick another", name);
    json_t *base = json_object_get(o, "base"), *from = json_object_get(o, "from");
    if (base && from && !json_equal(base, from))
        return spaced_err_set(err, 400, BAD, "give base (from is its older name), not both");
    if (!base)
        base = from;
    if (!json_is_string(base))
        return spaced_err_set(err, 400, BAD, "base (the name of the template to build on) is required");
    const char *b = json_string_value(base);
    if (strcmp(b, "scratch-busybox") == 0 || strncmp(b, "debootstrap:", 12) == 0)
        return spaced_err_set(err, 400, BAD,
                              "base %.64s is built on the host by guest/build-template.sh; API builds "
                              "start from an existing template (e.g. base or python)", b);
    struct tpl_info t; /* on a node, a base built on another node is fetched by the build */
    if (tpl_lookup_fetchable(sp, tenant, b, &t, err) < 0)
        return -1;
    json_t *desc = json_object_get(o, "description");
    if (desc && !json_is_null(desc) && !(json_is_string(desc) && json_string_length(desc) < 256 &&
                                          strlen(json_string_value(desc)) == json_string_length(desc)))
        return spaced_err_set(err, 400, BAD, "description must be a string under 256 bytes");
    json_t *pk = json_object_get(o, "packages");
    if (pk && !json_is_null(pk) && !(json_is_array(pk) && json_array_size(pk) == 0))
        return spaced_err_set(err, 400, BAD,
                              "packages are not installed by API builds (the build VM has no network); "
                              "use a template that has them as base");
    if (json_object_get(o, "size_mib") && !json_is_null(json_object_get(o, "size_mib")))
        return spaced_err_set(err, 400, BAD,
                              "size_mib cannot be set for a build on another template: the image "
                              "keeps its base's size");
    if (check_uint(o, "vcpus", 1, 16, err) < 0 || check_uint(o, "memory_mib", 128, 65536, err) < 0)
        return -1;
    json_t *steps = json_object_get(o, "steps");
    if (steps && !json_is_null(steps) &&
        (!json_is_array(steps) || json_array_size(steps) > TPL_STEPS_MAX))
        return spaced_err_set(err, 400, BAD, "steps must be an array of at most %d steps", TPL_STEPS_MAX);
    size_t i, copied = 0;
    json_array_foreach(steps, i, v) {
        if (check_step(v, i, &copied, err) < 0)
            return -1;
    }
    static const char *const cmds[] = {"start", "ready"};
    for (i = 0; i < 2; i++) {
        v = json_object_get(o, cmds[i]);
        if (v && !json_is_null(v) && !clean_string(v, TPL_CMD_MAX, true))
            return spaced_err_set(err, 400, BAD, "%s must be null or a shell command of 1..%d bytes "
                                                 "without NUL", cmds[i], TPL_CMD_MAX);
    }
    if (name_free(sp, tenant, name, err) < 0)
        return -1;
    json_object_set(o, "base", base);
    json_object_del(o, "from");
    return 0;
}
