/* e2b_template: E2B's template builder (SDK 2.51: Template().fromTemplate(...).runCmd(...),
 * Template.build, Template.getBuildStatus) over space's own builds (tpl_build.c), where
 * it maps:
 *
 *   POST /v3/templates {"name", "cpuCount"?, "memoryMB"?, "tags"?}
 *        -> 202 {"templateID": name, "buildID", "names", "tags": [], "public": false}.
 *        Nothing is stored yet: the buildID carries the shape ("v<cpus>m<MiB>-<random>").
 *   GET  /templates/{id}/files/{hash}
 *        -> {"present": true} | {"present": false, "url"}: copy()'s upload link
 *        (e2b_tplfiles.c: the SDK PUTs a tar(.gz) of the files there)
 *   POST /v2/templates/{id}/builds/{buildID} {"fromTemplate" | "fromImage",
 *        "steps": [{"type", "args"}], "startCmd"?, "readyCmd"?}
 *        -> the spec of docs/templates.md, built like POST /v1/templates: 202 {}
 *   GET  /templates/{id}/builds/{buildID}/status?logsOffset=N
 *        -> {"templateID", "buildID", "status": building|ready|error, "logEntries",
 *        "logs", "reason"?}: the template's row and the build's log (tpl_log.h), one
 *        entry per stage or piece of output, from the offset-th on.
 *   GET  /templates/aliases/{alias}
 *        -> 200 {"templateID", "public"} for a built-in or one of the caller's, else 404
 *
 * What maps: fromTemplate(T) and fromImage of E2B's default base image (Template()
 * without a from*, or fromBaseImage()) = space's `base`; RUN (a runCmd with a user runs
 * as that user, then the previous one is current again), ENV, WORKDIR, USER, startCmd,
 * readyCmd, cpuCount, memoryMB, COPY (the uploaded archive written into the build VM and
 * unpacked there: map_copy). Refused with E2B's {"code", "message"} naming why: any
 * other image (space builds on its own templates; there is no image registry), registry
 * credentials, COPY of a glob pattern or of files never uploaded, other step types, tags. */
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/b64.h"
#include "daemon/auth/auth.h"
#include "daemon/http/router.h"
#include "daemon/ops/op.h"
#include "daemon/spaced.h"
#include "daemon/store/store.h"
#include "daemon/template/tpl.h"
#include "daemon/template/tpl_log.h"
#include "e2b.h"
#include "e2b_internal.h"

#define TPL_BODY_MAX (1024u * 1024)
#define DEFAULT_IMAGE "e2bdev/base"

/* The template name of {templateID}: a valid name, else NULL after a 404. */
static const char *name_param(struct http_req *req)
{
    const char *name = router_param(req, "id");
    if (!name || !tpl_name_valid(name)) {
        e2b_reply_rest_error(req, 404, "template %.64s not found", name ? name : "");
        return NULL;
    }
    return name;
}

/* An optional integer field in lo..hi: true with *out (0 if absent), else false. */
static bool opt_int(json_t *o, const char *key, long lo, long hi, long *out)
{
    json_t *v = json_object_get(o, key);
    *out = 0;
    if (!v || json_is_null(v))
        return true;
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return false;
    *out = (long)json_integer_value(v);
    return true;
}

static void request_body(struct http_req *req, const char *data, size_t len, void *arg)
{
    struct e2b *e = arg;
    struct auth_principal who;
    json_t *b;
    if (!e2b_api_authenticate(e->sp, req, &who) || !(b = e2b_body_object(req, data, len)))
        return;
    const char *name = json_string_value(json_object_get(b, "name"));
    json_t *tags = json_object_get(b, "tags");
    long cpus, mem;
    if (!name || !tpl_name_valid(name))
        e2b_reply_rest_error(req, 400, "name must be a template name: [a-z0-9_-], 1..48 characters "
                             "(space has no name:tag form)");
    else if (tags && !json_is_null(tags) && (!json_is_array(tags) || json_array_size(tags)))
        e2b_reply_rest_error(req, 400, "tags are not supported by space's template builder");
    else if (!opt_int(b, "cpuCount", 1, 16, &cpus) || !opt_int(b, "memoryMB", 128, 65536, &mem))
        e2b_reply_rest_error(req, 400, "cpuCount must be 1..16 and memoryMB 128..65536");
    else {
        unsigned char rnd[6];
        char id[64];
        RAND_bytes(rnd, sizeof rnd);
        snprintf(id, sizeof id, "v%ldm%ld-%02x%02x%02x%02x%02x%02x", cpus, mem, rnd[0], rnd[1],
                 rnd[2], rnd[3], rnd[4], rnd[5]);
        json_t *r = json_pack("{s:s, s:s, s:[s], s:[s], s:[], s:b}", "templateID", name, "buildID",
                              id, "names", name, "aliases", name, "tags", "public", 0);
        http_reply_json(req, 202, r);
        json_decref(r);
    }
    json_decref(b);
}

static void h_request(struct http_req *req, void *arg)
{
    http_req_read_body(req, 64 * 1024, request_body, arg);
}

static void h_files(struct http_req *req, void *arg)
{
    struct e2b *e = arg;
    struct auth_principal who;
    const char *name;
    if (!e2b_api_authenticate(e->sp, req, &who) || !(name = name_param(req)))
        return;
    e2b_tplfile_link(e, req, who.tenant, name, router_param(req, "hash"));
}

/* s in single quotes for /bin/sh (malloc'd), or NULL. */
static char *shell_quote(const char *s)
{
    char *out = malloc(strlen(s) * 4 + 3), *o = out;
    if (!out)
        return NULL;
    *o++ = '\'';
    for (; *s; s++) {
        if (*s == '\'') {
            memcpy(o, "'\\''", 4);
            o += 4;
        } else {
            *o++ = *s;
        }
    }
    *o++ = '\'';
    *o = '\0';
    return out;
}

/* A user or group name for chown: [A-Za-z0-9._-], 1..32, not starting with '-'. */
static bool user_ok(const char *u)
{
    size_t n = strlen(u);
    return n >= 1 && n <= 32 && u[0] != '-' &&
           strspn(u, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == n;
}

/* The guest script that unpacks a copy()'s archive at arch and puts src at dst like
 * Docker's COPY: a directory's contents into dst; a file into dst when dst ends in '/',
 * else as dst. Owner and mode apply to what is copied. malloc'd, or NULL. */
static char *copy_script(const char *arch, bool gz, const char *src, const char *dst,
                         const char *owner, const char *mode)
{
    char *qs = shell_quote(src), *qd = shell_quote(dst), *out = NULL;
    size_t dl = strlen(dst), n = (qs ? strlen(qs) : 0) + 4 * (qd ? strlen(qd) : 0) + 768;
    if (qs && qd && (out = malloc(n))) {
        char own[96] = "", mod[32] = "";
        bool into = dst[dl - 1] == '/';
        if (owner) /* "user:" = the user and its login group */
            snprintf(own, sizeof own, "chown -R %s: \"$s\"; ", owner);
        if (mode && *mode)
            snprintf(mod, sizeof mod, "chmod -R %s \"$s\"; ", mode);
        snprintf(out, n,
                 "set -e; t=$(mktemp -d); tar -x%sof %s -C \"$t\"; rm -f %s; s=\"$t\"/%s; %s%s"
                 "if [ -d \"$s\" ]; then mkdir -p %s; cp -a \"$s\"/. %s/; "
                 "else mkdir -p %s%s%s; cp -a \"$s\" %s; fi; rm -rf \"$t\"",
                 gz ? "z" : "", arch, arch, qs, own, mod, qd, qd, into ? "" : "\"$(dirname ", qd,
                 into ? "" : ")\"", qd);
    }
    free(qs);
    free(qd);
    return out;
}

/* E2B's COPY step [src, dest, user, mode] with its filesHash: the archive the SDK
 * uploaded (e2b_tplfiles.c) goes into the build VM as a copy step's content, and a run
 * step unpacks it there as root (never on the host: it is hostile input), owned by the
 * user asked for, else by the template's user at that step (root before any setUser).
 * 0 with the steps appended to out, else -1 with why[] set. */
static int map_copy(struct e2b *e, const char *tenant, json_t *st, size_t i, const char *cur_user,
                    json_t *out, char *why, size_t cap)
{
    json_t *args = json_object_get(st, "args");
    const char *src = json_string_value(json_array_get(args, 0));
    const char *dst = json_string_value(json_array_get(args, 1));
    const char *user = json_string_value(json_array_get(args, 2));
    const char *mode = json_string_value(json_array_get(args, 3));
    const char *hash = json_string_value(json_object_get(st, "filesHash"));
    char *data = NULL, *b64 = NULL, *script = NULL;
    size_t len = 0;
    if (!src || !*src || !dst || !*dst || strpbrk(src, "*?[")) {
        snprintf(why, cap, "step %zu: copy() needs a source path (glob patterns are not "
                 "supported) and a destination", i + 1);
        return -1;
    }
    if (user && *user && !user_ok(user)) {
        snprintf(why, cap, "step %zu: copy() user must be a user name ([A-Za-z0-9._-], 1..32)", i + 1);
        return -1;
    }
    if (mode && *mode && (strlen(mode) > 4 || strspn(mode, "01234567") != strlen(mode))) {
        snprintf(why, cap, "step %zu: copy() mode must be octal, at most 4 digits", i + 1);
        return -1;
    }
    if (!e2b_tplfile_hash_valid(hash)) {
        snprintf(why, cap, "step %zu: copy() needs its filesHash (64 lowercase hex digits)", i + 1);
        return -1;
    }
    if (e2b_tplfile_read(e, tenant, hash, &data, &len) < 0) {
        snprintf(why, cap, "step %zu: copy(%.128s): no files were uploaded with hash %s (the SDK "
                 "uploads them through GET /templates/{id}/files/{hash} first)", i + 1, src, hash);
        return -1;
    }
    bool gz = len >= 2 && (unsigned char)data[0] == 0x1f && (unsigned char)data[1] == 0x8b;
    char arch[96];
    snprintf(arch, sizeof arch, "/tmp/.e2b-copy-%.16s-%zu.tar", hash, i + 1);
    const char *owner = user && *user ? user : cur_user ? cur_user : "root";
    if ((b64 = malloc(B64_ENCODED_SIZE(len))))
        b64_encode((const uint8_t *)data, len, b64);
    free(data);
    script = b64 ? copy_script(arch, gz, src, dst, owner, mode) : NULL;
    if (script) {
        json_array_append_new(out, json_pack("{s:{s:s, s:s, s:i}}", "copy", "dst", arch, "content",
                                             b64, "mode", 0600));
        if (cur_user)
            json_array_append_new(out, json_pack("{s:s}", "user", "root"));
        json_array_append_new(out, json_pack("{s:s}", "run", script));
        if (cur_user)
            json_array_append_new(out, json_pack("{s:s}", "user", cur_user));
    } else {
        snprintf(why, cap, "out of memory");
    }
    free(b64);
    free(script);
    return script ? 0 : -1;
}

/* E2B's steps -> space's; NULL with why[] set when one does not map. */
static json_t *map_steps(struct e2b *e, const char *tenant, json_t *steps, char *why, size_t cap)
{
    json_t *out = json_array();
    const char *cur_user = NULL; /* the last USER step's, NULL = the base's */
    size_t i;
    json_t *st;
    json_array_foreach(steps, i, st) {
        const char *type = json_string_value(json_object_get(st, "type"));
        json_t *args = json_object_get(st, "args");
        const char *a0 = json_string_value(json_array_get(args, 0));
        const char *a1 = json_string_value(json_array_get(args, 1));
        if (!type || !json_is_array(args)) {
            snprintf(why, cap, "step %zu: needs a type and args", i + 1);
        } else if ((strcmp(type, "USER") == 0 && a0 && !user_ok(a0)) ||
                   (strcmp(type, "RUN") == 0 && a1 && a1[0] && !user_ok(a1))) {
            /* a user name goes into the guest scripts (su, chown): checked once here */
            snprintf(why, cap, "step %zu: the user must be a user name ([A-Za-z0-9._-], 1..32, "
                     "not starting with '-')", i + 1);
        } else if (strcmp(type, "RUN") == 0 && a0 && (!a1 || !a1[0])) {
            json_array_append_new(out, json_pack("{s:s}", "run", a0));
            continue;
        } else if (strcmp(type, "RUN") == 0 && a0 && cur_user) {
            /* runCmd(cmd, {user}) after a USER step: that command only as user */
            json_array_append_new(out, json_pack("{s:s}", "user", a1));
            json_array_append_new(out, json_pack("{s:s}", "run", a0));
            json_array_append_new(out, json_pack("{s:s}", "user", cur_user));
            continue;
        } else if (strcmp(type, "RUN") == 0 && a0) {
            /* Steps run as root until a USER step: su to the user for this command (a
             * user step would also make it the template's default user). */
            char *q = shell_quote(a0), *u = shell_quote(a1);
            size_t n = (q ? strlen(q) : 0) + (u ? strlen(u) : 0) + 32;
            char *cmd = q && u ? malloc(n) : NULL;
            if (cmd) {
                snprintf(cmd, n, "su -s /bin/sh -c %s %s", q, u);
                json_array_append_new(out, json_pack("{s:s}", "run", cmd));
            }
            free(cmd);
            free(q);
            free(u);
            if (cmd)
                continue;
            snprintf(why, cap, "out of memory");
        } else if (strcmp(type, "ENV") == 0 && json_array_size(args) % 2 == 0) {
            json_t *env = json_object();
            for (size_t k = 0; k + 1 < json_array_size(args); k += 2) {
                const char *key = json_string_value(json_array_get(args, k));
                json_t *v = json_array_get(args, k + 1);
                if (key && json_is_string(v))
                    json_object_set(env, key, v);
            }
            json_array_append_new(out, json_pack("{s:o}", "env", env));
            continue;
        } else if (strcmp(type, "WORKDIR") == 0 && a0) {
            json_array_append_new(out, json_pack("{s:s}", "workdir", a0));
            continue;
        } else if (strcmp(type, "USER") == 0 && a0) {
            cur_user = a0;
            json_array_append_new(out, json_pack("{s:s}", "user", a0));
            continue;
        } else if (strcmp(type, "COPY") == 0) {
            if (map_copy(e, tenant, st, i, cur_user, out, why, cap) == 0)
                continue;
        } else {
            snprintf(why, cap, "step %zu: %.32s is not supported by space's template builder "
                     "(it maps RUN, ENV, WORKDIR and USER)", i + 1, type);
        }
        json_decref(out);
        return NULL;
    }
    return out;
}

/* The base template of an E2B build: fromTemplate, or the default image as `base`. */
static const char *map_base(json_t *b, char *why, size_t cap)
{
    const char *tpl = json_string_value(json_object_get(b, "fromTemplate"));
    const char *img = json_string_value(json_object_get(b, "fromImage"));
    if (json_object_get(b, "fromImageRegistry"))
        snprintf(why, cap, "registry credentials are not supported: space builds on its own "
                 "templates and pulls no images");
    else if (tpl)
        return tpl;
    else if (!img || strcmp(img, DEFAULT_IMAGE) == 0 || strcmp(img, DEFAULT_IMAGE ":latest") == 0)
        return "base";
    else
        snprintf(why, cap, "fromImage(%.128s) is not supported: space builds on its own templates "
                 "(fromTemplate('base'), fromTemplate('python') or one of yours), not Docker "
                 "images, and has no image registry", img);
    return NULL;
}

static void trigger_body(struct http_req *req, const char *data, size_t len, void *arg)
{
    struct e2b *e = arg;
    struct auth_principal who;
    json_t *b;
    const char *name = NULL, *bid = router_param(req, "buildID");
    if (!e2b_api_authenticate(e->sp, req, &who) || !(name = name_param(req)) ||
        !(b = e2b_body_object(req, data, len)))
        return;
    long cpus = -1, mem = -1;
    int used = 0;
    char why[400] = "";
    if (!bid || sscanf(bid, "v%ldm%ld-%*[0-9a-f]%n", &cpus, &mem, &used) < 2 || (size_t)used != strlen(bid) ||
        cpus < 0 || cpus > 16 || mem < 0 || mem > 65536) {
        e2b_reply_rest_error(req, 404, "build %.64s not found", bid ? bid : "");
        json_decref(b);
        return;
    }
    const char *base = map_base(b, why, sizeof why);
    json_t *steps = base ? map_steps(e, who.tenant, json_object_get(b, "steps"), why, sizeof why) : NULL;
    if (!steps) {
        e2b_reply_rest_error(req, 400, "%s", why);
        json_decref(b);
        return;
    }
    json_t *spec = json_pack("{s:s, s:s, s:o, s:s}", "name", name, "base", base, "steps", steps,
                             "description", "built with E2B's template builder");
    if (cpus)
        json_object_set_new(spec, "vcpus", json_integer(cpus));
    if (mem)
        json_object_set_new(spec, "memory_mib", json_integer(mem));
    const char *start = json_string_value(json_object_get(b, "startCmd"));
    const char *ready = json_string_value(json_object_get(b, "readyCmd"));
    if (start)
        json_object_set_new(spec, "start", json_string(start));
    if (ready)
        json_object_set_new(spec, "ready", json_string(ready));
    json_decref(b);
    struct spaced_err err;
    struct store_op op;
    char *text = NULL;
    int rc = tpl_spec_check(e->sp, who.tenant, spec, &err);
    if (rc == 0 && !(text = json_dumps(spec, JSON_COMPACT | JSON_SORT_KEYS)))
        rc = spaced_err_set(&err, 500, "internal", "out of memory");
    if (rc == 0)
        rc = tpl_submit_build(e->sp, who.tenant, name, text, &op, &err);
    free(text);
    json_decref(spec);
    if (rc < 0) {
        e2b_reply_rest_error(req, err.status ? err.status : 500, "%s", err.message);
        return;
    }
    store_op_clear(&op);
    json_t *r = json_object();
    http_reply_json(req, 202, r);
    json_decref(r);
}

static void h_trigger(struct http_req *req, void *arg)
{
    http_req_read_body(req, TPL_BODY_MAX, trigger_body, arg);
}

static void h_status(struct http_req *req, void *arg)
{
    struct e2b *e = arg;
    struct auth_principal who;
    const char *name;
    if (!e2b_api_authenticate(e->sp, req, &who) || !(name = name_param(req)))
        return;
    const char *q = http_req_query(req, "logsOffset");
    char *end = NULL;
    long offset = q ? strtol(q, &end, 10) : 0;
    if (q && (!*q || *end || offset < 0 || offset > 1000000)) {
        e2b_reply_rest_error(req, 400, "logsOffset must be an integer in 0..1000000");
        return;
    }
    struct store_tpl t;
    bool got = store_tpl_get(e->sp->store, name, &t) == 0;
    if (!got || strcmp(t.tenant, who.tenant) != 0 || strcmp(t.state, "deleted") == 0) {
        if (got)
            store_tpl_clear(&t);
        e2b_reply_rest_error(req, 404, "template %s not found", name);
        return;
    }
    const char *status = strcmp(t.state, "ready") == 0    ? "ready"
                         : strcmp(t.state, "failed") == 0 ? "error"
                                                          : "building";
    json_t *entries = json_array(), *logs = json_array();
    json_t *kept = tpl_log_entries(e->sp, name, (size_t)offset);
    char ts[32];
    spaced_fmt_time(spaced_now_ms(), ts);
    size_t i;
    json_t *en;
    json_array_foreach(kept, i, en) {
        const char *kind = json_string_value(json_object_get(en, "kind"));
        const char *text = json_string_value(json_object_get(en, "text"));
        const char *level = strcmp(kind, "stderr") == 0 ? "warn" : "info";
        json_array_append_new(entries, json_pack("{s:s, s:s, s:s}", "timestamp", ts, "level", level,
                                                 "message", text ? text : ""));
        json_array_append_new(logs, json_string(text ? text : ""));
    }
    json_decref(kept);
    json_t *r = json_pack("{s:s, s:s, s:s, s:o, s:o}", "templateID", name, "buildID",
                          router_param(req, "buildID"), "status", status, "logEntries", entries,
                          "logs", logs);
    if (strcmp(status, "error") == 0)
        json_object_set_new(r, "reason", json_pack("{s:s}", "message", t.failure ? t.failure : "the build failed"));
    store_tpl_clear(&t);
    http_reply_json(req, 200, r);
    json_decref(r);
}

/* GET /templates/aliases/{alias} (SDK: Template.exists / aliasExists): 200 for a
 * built-in or one of the caller's templates in any state but deleted, else 404 (the same
 * whether absent or another tenant's, as tpl_lookup: existence never leaks). Read from
 * the store alone, so a control daemon answers it too (e2b_register_listings). */
static void h_alias(struct http_req *req, void *arg)
{
    struct e2b *e = arg;
    struct auth_principal who;
    const char *alias = router_param(req, "alias");
    struct tpl_info t;
    struct store_tpl row;
    if (!e2b_api_authenticate(e->sp, req, &who))
        return;
    bool builtin = alias && tpl_name_valid(alias) && tpl_builtin_peek(e->sp, alias, &t);
    bool mine = false;
    int rc = builtin || !alias || !tpl_name_valid(alias) ? STORE_NOTFOUND : store_tpl_get(e->sp->store, alias, &row);
    if (rc == 0) {
        mine = strcmp(row.tenant, who.tenant) == 0 && strcmp(row.state, "deleted") != 0;
        store_tpl_clear(&row);
    }
    if (rc != 0 && rc != STORE_NOTFOUND) {
        e2b_reply_rest_error(req, 503, "looking up template %s: the store failed", alias);
        return;
    }
    if (!builtin && !mine) {
        e2b_reply_rest_error(req, 404, "template %.64s not found", alias ? alias : "");
        return;
    }
    json_t *r = json_pack("{s:s, s:b}", "templateID", alias, "public", builtin);
    http_reply_json(req, 200, r);
    json_decref(r);
}

void e2b_template_alias_register(struct router *r, struct e2b *e)
{
    router_add(r, "GET", "/templates/aliases/{alias}", h_alias, e);
}

void e2b_template_register(struct router *r, struct e2b *e)
{
    router_add(r, "POST", "/v3/templates", h_request, e);
    router_add(r, "GET", "/templates/{id}/files/{hash}", h_files, e);
    router_add(r, "POST", "/v2/templates/{id}/builds/{buildID}", h_trigger, e);
    router_add(r, "GET", "/templates/{id}/builds/{buildID}/status", h_status, e);
    e2b_tplfiles_register(r, e);
}
