/* tpl_build.c: building a template from a spec, as a template_build operation.
 *
 * Spec (validated by tpl_spec_check, format docs/templates.md): {"name", "base",
 * "description"?, "vcpus"?, "memory_mib"?, "steps": [run | copy | env | workdir | user],
 * "start"?, "ready"?}. The build boots a VM on a fresh overlay of the base's rootfs and
 * carries the state the steps change (env, workdir, user), starting from the base's
 * env and workdir, as root (the base's default user stays the default of sandboxes
 * unless a user step changes it):
 *   run      exec `/bin/sh -c CMD` as the current user, in the current workdir, with the
 *            current env; a non-zero exit fails the build with the tail of its output
 *   copy     the agent's `write` (as root, mode, parents created), then `chown` to owner
 *   env      merged into the current env
 *   workdir  created (owned by the current user) if missing, then current
 *   user     checked to exist in the image, then current
 * Then, if the spec has a start command or ready check, both run once (tpl_probe.c) so a
 * service that never becomes ready fails the build here rather than every snapshot. The
 * VM powers off, the overlay is flattened into a raw image with `qemu-img convert`, and
 * <data-dir>/templates/<name>/rootfs.ext4 + template.json (defaults = the final state)
 * are published by rename, so a half-built template is never visible. The store's
 * templates row records the spec and the outcome ("building" | "ready" | "failed"). */
#include <errno.h>
#include <event2/event.h>
#include <jansson.h>
#include <openssl/sha.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "b64.h"
#include "daemon/agentc/agentc.h"
#include "daemon/jail/jail.h"
#include "daemon/ops/op.h"
#include "daemon/vm/vm.h"
#include "daemon/vm/vm_greet.h"
#include "log.h"
#include "tpl_digest.h"
#include "tpl_internal.h"
#include "tpl_log.h"

#define BUILD_BOOT_TIMEOUT_S 300
#define BUILD_STEP_TIMEOUT_S 1800
#define BUILD_OUTPUT_TAIL 2048


/* One build in flight; freed by build_free once the op is finished and the VM is gone. */
struct tpl_build {
    struct spaced *sp;
    char op_id[STORE_ID_MAX];
    char name[64];
    char base_name[64];
    char dir[TPL_PATH_MAX];          /* <data>/templates/<name> */
    char run_dir[TPL_PATH_MAX];
    char overlay[TPL_PATH_MAX + 16]; /* dir/build.qcow2 */
    char base_rootfs[TPL_PATH_MAX + 16];
    json_t *spec;                    /* owned */
    json_t *base_meta;               /* base's template.json (owned; {} if none) */
    json_t *steps;                   /* borrowed from spec */
    size_t step;                     /* index of the step running or next */
    int sub;                         /* part of a multi-request step (copy: write, chown) */
    struct tpl_defaults cur;         /* carried state and the template's defaults: env,
                                        workdir, user; start/ready of the spec (owned) */
    char run_user[64];               /* who run steps run as: root until a user step */
    struct tpl_probe *probe;         /* start + ready check in flight */
    struct tpl_log *log;             /* stages and run output as they happen; NULL once
                                        ended (the registry keeps it) or without memory */
    bool steps_done;                 /* every step and the probe passed */
    struct vm *vm;
    struct agentc *agent;
    struct event *timer;             /* step deadlines, and polling of qemu-img convert */
    struct vmg *greet;               /* boot until the agent's HELLO, BUILD_BOOT_TIMEOUT_S */
    pid_t convert_pid;
    struct tpl_digest_job *digest_job; /* hashing the flattened image (owned) */
    char digest[TPL_DIGEST_HEX];     /* its SHA-256, once hashed */
    int64_t image_bytes;             /* its size */
    int64_t started_ms;
    char out[BUILD_OUTPUT_TAIL + 1]; /* tail of the current request's output */
    size_t outlen;
    int exit_code;
    bool got_result;                 /* write: the agent's result event arrived */
    bool finished;                   /* op finished; free once the VM is gone */
    struct tpl_build *next;          /* registry list */
};

static void build_free(struct tpl_build *b)
{
    for (struct tpl_build **pp = &b->sp->tpl->builds; *pp; pp = &(*pp)->next)
        if (*pp == b) {
            *pp = b->next;
            break;
        }
    tpl_probe_free(b->probe); /* before its agent connection */
    tpl_digest_job_free(b->digest_job);
    agentc_free(b->agent);
    if (b->timer)
        event_free(b->timer);
    vmg_free(b->greet);
    json_decref(b->spec);
    json_decref(b->base_meta);
    tpl_defaults_clear(&b->cur);
    free(b);
}

bool tpl_builds_use(struct spaced *sp, const char *name)
{
    for (struct tpl_build *b = sp->tpl->builds; b; b = b->next)
        if (!b->finished && strcmp(b->base_name, name) == 0)
            return true;
    return false;
}

/* The row's new state; a ready one records what lets the image travel (tpl_fetch.c):
 * the node holding it, its digest and size, and its template.json. */
static void store_state(struct tpl_build *b, const char *state, const char *failure)
{
    struct store_tpl t;
    if (store_tpl_get(b->sp->store, b->name, &t) != 0)
        return;
    snprintf(t.state, sizeof t.state, "%s", state);
    free(t.failure);
    t.failure = failure ? strdup(failure) : NULL;
    if (!failure) {
        char meta[TPL_PATH_MAX + 32];
        snprintf(meta, sizeof meta, "%s/template.json", b->dir);
        json_t *j = json_load_file(meta, 0, NULL);
        free(t.meta);
        t.meta = j ? json_dumps(j, JSON_COMPACT) : NULL;
        json_decref(j);
        snprintf(t.digest, sizeof t.digest, "%s", b->digest);
        t.size_bytes = b->image_bytes;
        snprintf(t.nodes, sizeof t.nodes, "%s", tpl_self_node(b->sp));
    }
    t.updated_ms = spaced_now_ms();
    store_tpl_put(b->sp->store, &t);
    store_tpl_clear(&t);
}

/* A new stage: the operation's progress and detail, and a `stage` event in the log. */
static void stage(struct tpl_build *b, int progress, const char *detail)
{
    op_progress(b->sp, b->op_id, progress, detail);
    tpl_log_stage(b->log, detail, progress, b->started_ms);
}

static void build_end(struct tpl_build *b, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void build_end(struct tpl_build *b, const char *code, const char *fmt, ...)
{
    if (b->finished)
        return;
    b->finished = true;
    if (b->timer)
        event_del(b->timer);
    if (b->greet)
        vmg_stop(b->greet);
    tpl_probe_free(b->probe);
    b->probe = NULL;
    char msg[BUILD_OUTPUT_TAIL + 512] = "";
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
    }
    store_state(b, code ? "failed" : "ready", code ? msg : NULL);
    unlink(b->overlay);
    if (code) {
        char q[300];
        log_warn("template.build", "template=%s result=failed code=%s msg=%s", b->name, code,
                 log_quote(msg, q, sizeof q));
    }
    tpl_log_end(b->log, code, code ? msg : NULL);
    b->log = NULL; /* the registry owns it and may drop it from now on */
    op_finish(b->sp, b->op_id, code == NULL, code, code ? msg : NULL);
    if (b->vm && vm_state(b->vm) < VM_STATE_STOPPING)
        vm_kill(b->vm);
    if (!b->vm)
        build_free(b);
}

/* ---- publishing ------------------------------------------------------------------- */

static void hex(const unsigned char *md, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", md[i]);
}

/* The spec as recorded in template.json: copy contents replaced by their size and hash
 * (the bytes are in the image; megabytes of base64 in the metadata help nobody). */
static json_t *spec_for_meta(const json_t *spec)
{
    json_t *s = json_deep_copy(spec);
    size_t i;
    json_t *st;
    json_array_foreach(json_object_get(s, "steps"), i, st) {
        json_t *c = json_object_get(st, "copy");
        const char *b64 = json_string_value(json_object_get(c, "content"));
        if (!b64)
            continue;
        unsigned char md[SHA256_DIGEST_LENGTH];
        char h[2 * SHA256_DIGEST_LENGTH + 1];
        SHA256((const unsigned char *)b64, strlen(b64), md);
        hex(md, sizeof md, h);
        json_object_set_new(c, "content_sha256_of_base64", json_string(h));
        json_object_del(c, "content");
    }
    return s;
}

static int write_meta(struct tpl_build *b, const char *path, const char *image)
{
    struct stat st;
    if (stat(image, &st) != 0)
        return -1;
    char built_at[32];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(built_at, sizeof built_at, "%Y-%m-%dT%H:%M:%SZ", &tm);
    /* What decides the image: the spec and the base image it started from. */
    char *canon = json_dumps(b->spec, JSON_COMPACT | JSON_SORT_KEYS);
    const char *base_key = json_string_value(json_object_get(b->base_meta, "build_key"));
    unsigned char md[SHA256_DIGEST_LENGTH];
    char key[2 * SHA256_DIGEST_LENGTH + 1];
    size_t cl = canon ? strlen(canon) : 0, bl = base_key ? strlen(base_key) : 0;
    char *both = malloc(cl + bl + 1);
    if (!both) {
        free(canon);
        return -1;
    }
    memcpy(both, canon ? canon : "", cl);
    memcpy(both + cl, base_key ? base_key : "", bl);
    SHA256((const unsigned char *)both, cl + bl, md);
    hex(md, sizeof md, key);
    free(both);
    free(canon);
    json_t *base_v = json_object_get(b->base_meta, "vcpus"), *base_m = json_object_get(b->base_meta, "memory_mib");
    json_t *v = json_object_get(b->spec, "vcpus"), *m = json_object_get(b->spec, "memory_mib");
    const char *desc = json_string_value(json_object_get(b->spec, "description"));
    json_t *kernel = json_object_get(b->base_meta, "kernel"), *ca = json_object_get(b->base_meta, "ca_sha256");
    json_t *j = json_pack(
        "{s:s, s:s, s:I, s:I, s:O, s:{s:s, s:s, s:s, s:I, s:I}, s:s, s:I, s:{s:O, s:s, s:s}, "
        "s:o, s:o, s:O, s:s, s:s, s:o}",
        "name", b->name, "description", desc ? desc : "",
        "vcpus", json_is_integer(v) ? json_integer_value(v) : json_is_integer(base_v) ? json_integer_value(base_v) : 1,
        "memory_mib", json_is_integer(m) ? json_integer_value(m) : json_is_integer(base_m) ? json_integer_value(base_m) : 256,
        "kernel", kernel ? kernel : json_null(),
        "image", "file", "rootfs.ext4", "format", "raw", "fs", "ext4", "size_bytes", (json_int_t)st.st_size,
        "allocated_bytes", (json_int_t)st.st_blocks * 512,
        "built_at", built_at, "build_seconds", (json_int_t)((spaced_now_ms() - b->started_ms) / 1000),
        "defaults", "env", b->cur.env, "workdir", b->cur.workdir, "user", b->cur.user,
        "start", b->cur.start ? json_string(b->cur.start) : json_null(),
        "ready", b->cur.ready ? json_string(b->cur.ready) : json_null(),
        "ca_sha256", ca ? ca : json_null(), "build_key", key, "base", b->base_name,
        "spec", spec_for_meta(b->spec));
    if (j) /* the image's content digest (tpl_digest.h): what a node fetching it checks */
        json_object_set_new(j, "sha256", json_string(b->digest));
    int rc = j ? json_dump_file(j, path, JSON_INDENT(2)) : -1;
    json_decref(j);
    return rc;
}

static void on_digest(void *arg, int rc, int err, const char *hex, int64_t size);

static void on_convert_poll(evutil_socket_t fd, short what, void *arg)
{
    struct tpl_build *b = arg;
    (void)fd;
    (void)what;
    int status;
    pid_t r = waitpid(b->convert_pid, &status, WNOHANG);
    if (r == 0) {
        struct timeval tv = {0, 200000};
        event_add(b->timer, &tv);
        return;
    }
    char tmp[TPL_PATH_MAX + 32];
    snprintf(tmp, sizeof tmp, "%s/rootfs.ext4.tmp", b->dir);
    if (r < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        unlink(tmp);
        build_end(b, "build_failed", "qemu-img convert failed (status %d)", status);
        return;
    }
    b->convert_pid = 0;
    /* The image is final: its digest, once, on a worker thread (it may be gigabytes). */
    stage(b, 96, "hashing the disk image (SHA-256)");
    b->digest_job = tpl_digest_start(b->sp->base, tmp, on_digest, b);
    if (!b->digest_job) { /* no thread: hash here */
        int64_t size = 0;
        char hex[TPL_DIGEST_HEX];
        int rc = tpl_digest_file(tmp, 0, hex, &size);
        on_digest(b, rc, rc < 0 ? errno : 0, hex, size);
    }
}

/* The image is hashed: template.json (with the digest), then the image, published. */
static void on_digest(void *arg, int rc, int err, const char *hex, int64_t size)
{
    struct tpl_build *b = arg;
    b->digest_job = NULL;
    char tmp[TPL_PATH_MAX + 32], final[TPL_PATH_MAX + 32], meta[TPL_PATH_MAX + 32],
        meta_tmp[TPL_PATH_MAX + 32];
    snprintf(tmp, sizeof tmp, "%s/rootfs.ext4.tmp", b->dir);
    snprintf(final, sizeof final, "%s/rootfs.ext4", b->dir);
    snprintf(meta, sizeof meta, "%s/template.json", b->dir);
    snprintf(meta_tmp, sizeof meta_tmp, "%s/template.json.tmp", b->dir);
    if (rc < 0) {
        unlink(tmp);
        build_end(b, "host_io", "cannot hash %s: %s", tmp, strerror(err));
        return;
    }
    snprintf(b->digest, sizeof b->digest, "%s", hex);
    b->image_bytes = size;
    log_info("template.digest", "template=%s sha256=%s size_bytes=%lld", b->name, b->digest,
             (long long)size);
    /* Metadata first, image last: a template exists once rootfs.ext4 does. */
    if (write_meta(b, meta_tmp, tmp) != 0 || rename(meta_tmp, meta) != 0 || rename(tmp, final) != 0) {
        build_end(b, "host_io", "cannot publish %s: %s", final, strerror(errno));
        return;
    }
    log_info("template.built", "template=%s base=%s steps=%zu", b->name, b->base_name,
             json_array_size(b->steps));
    build_end(b, NULL, NULL);
}

static void publish(struct tpl_build *b)
{
    stage(b, 92, "flattening the disk image");
    char tmp[TPL_PATH_MAX + 32];
    snprintf(tmp, sizeof tmp, "%s/rootfs.ext4.tmp", b->dir);
    /* The overlay was written by the build VM: read through a pinned chain, never
     * probed (vm_disk.c). */
    struct vm_disk_layer base = {b->base_rootfs, "raw"};
    int rc = vm_disk_flatten_spawn(b->overlay, &base, 1, tmp, &b->convert_pid);
    if (rc != VM_OK) {
        build_end(b, "host_io", "cannot run qemu-img convert: %s",
                  rc == VM_E_INVAL ? "the overlay's header is not a plain qcow2" : strerror(errno));
        return;
    }
    struct timeval tv = {0, 200000};
    event_del(b->timer);
    event_assign(b->timer, b->sp->base, -1, 0, on_convert_poll, b);
    event_add(b->timer, &tv);
}

/* ---- steps -------------------------------------------------------------------------- */

static void run_step(struct tpl_build *b);

/* "run: echo hi" for messages: the step's kind and its argument, cut short. */
static void step_label(const struct tpl_build *b, char *out, size_t cap)
{
    json_t *s = json_array_get(b->steps, b->step);
    const char *kind = json_object_iter_key(json_object_iter(s));
    json_t *v = json_object_iter_value(json_object_iter(s));
    const char *arg = json_string_value(v);
    if (json_is_object(v))
        arg = json_string_value(json_object_get(v, "dst"));
    if (json_is_object(v) && !arg) {
        char *d = json_dumps(v, JSON_COMPACT);
        snprintf(out, cap, "%s: %.100s", kind, d ? d : "");
        free(d);
        return;
    }
    snprintf(out, cap, "%s: %.100s", kind, arg ? arg : "");
}

static void req_event(void *arg, json_t *ev)
{
    struct tpl_build *b = arg;
    const char *type = json_string_value(json_object_get(ev, "type"));
    if (strcmp(type, "result") == 0)
        b->got_result = true;
    if (strcmp(type, "exit") != 0)
        return;
    json_t *code = json_object_get(ev, "code");
    b->exit_code = json_is_integer(code) ? (int)json_integer_value(code) : -1;
}

static void req_data(void *arg, enum frame_stream st, const uint8_t *buf, size_t len)
{
    struct tpl_build *b = arg;
    tpl_tail_append(b->out, &b->outlen, BUILD_OUTPUT_TAIL, buf, len);
    /* Only run steps' output is the tenant's to see; the build's own helper commands
     * (chown, workdir, user checks) speak through failures. */
    if (json_object_get(json_array_get(b->steps, b->step), "run"))
        tpl_log_output(b->log, st == FRAME_STREAM_ERR ? EVLOG_STDERR : EVLOG_STDOUT, buf, len);
}

static void req_error(void *arg, const char *code, const char *message)
{
    struct tpl_build *b = arg;
    b->exit_code = -1;
    tpl_tail_set_error(b->out, &b->outlen, BUILD_OUTPUT_TAIL, code, message);
}

/* A request of the current step is done: next part, next step, or failure. */
static void req_close(void *arg)
{
    struct tpl_build *b = arg;
    if (b->finished)
        return;
    json_t *s = json_array_get(b->steps, b->step);
    bool is_write = json_object_get(s, "copy") && b->sub == 0;
    bool ok = is_write ? b->got_result : b->exit_code == 0;
    if (!ok) {
        char label[160];
        step_label(b, label, sizeof label);
        if (json_object_get(s, "user"))
            build_end(b, "build_step_failed",
                      "step %zu (%s) failed: user %s does not exist in the image (add a run step "
                      "creating it first): %s", b->step + 1, label,
                      json_string_value(json_object_get(s, "user")), b->out);
        else if (is_write)
            build_end(b, "build_step_failed", "step %zu (%s) failed: %s", b->step + 1, label,
                      b->out[0] ? b->out : "the agent did not confirm the write");
        else
            build_end(b, "build_step_failed", "step %zu (%s) exited with %d: %s", b->step + 1,
                      label, b->exit_code, b->out);
        return;
    }
    if (is_write && json_object_get(json_object_get(s, "copy"), "owner")) {
        b->sub = 1;
        run_step(b);
        return;
    }
    json_t *wd = json_object_get(s, "workdir"), *user = json_object_get(s, "user");
    if (wd)
        snprintf(b->cur.workdir, sizeof b->cur.workdir, "%s", json_string_value(wd));
    if (user) {
        snprintf(b->cur.user, sizeof b->cur.user, "%s", json_string_value(user));
        snprintf(b->run_user, sizeof b->run_user, "%s", json_string_value(user));
    }
    b->step++;
    b->sub = 0;
    run_step(b);
}

static const struct agentc_chan_ops req_ops = {
    .on_event = req_event, .on_data = req_data, .on_error = req_error, .on_close = req_close};

static void on_stopped(struct vm *vm, int err, const char *msg, void *arg)
{
    (void)vm;
    (void)err;
    (void)msg;
    (void)arg; /* on_exit follows and publishes */
}

static void shut_down(struct tpl_build *b)
{
    b->steps_done = true;
    stage(b, 85, "shutting the build VM down");
    static const struct agentc_chan_ops ignore = {0};
    json_t *req = json_pack("{s:s}", "op", "shutdown");
    char err[64];
    agentc_open(b->agent, req, &ignore, NULL, 0, err, sizeof err);
    json_decref(req);
    if (vm_shutdown(b->vm, 30000, on_stopped, b) != 0)
        build_end(b, "vm_failed", "the build VM refused to shut down");
}

static void on_probe(void *arg, const char *failure)
{
    struct tpl_build *b = arg;
    tpl_probe_free(b->probe);
    b->probe = NULL;
    if (failure) {
        build_end(b, "build_ready_failed", "start/ready (after step %zu): %s",
                  json_array_size(b->steps), failure);
        return;
    }
    shut_down(b);
}

/* The absolute guest path of a copy destination (relative: under the current workdir). */
static void copy_dst(const struct tpl_build *b, const char *dst, char *out, size_t cap)
{
    if (dst[0] == '/')
        snprintf(out, cap, "%s", dst);
    else
        snprintf(out, cap, "%s%s%s", b->cur.workdir, strcmp(b->cur.workdir, "/") ? "/" : "", dst);
}

/* The request for the current step (NULL: nothing to send, e.g. env). */
static json_t *step_request(struct tpl_build *b, json_t *s, const uint8_t **data, size_t *len,
                            uint8_t **owned)
{
    json_t *v;
    if ((v = json_object_get(s, "run")))
        return json_pack("{s:s, s:s, s:O, s:s, s:s, s:s}", "op", "exec", "cmd", json_string_value(v),
                         "env", b->cur.env, "user", b->run_user, "cwd", b->cur.workdir, "tag",
                         "template-build");
    if ((v = json_object_get(s, "copy"))) {
        char dst[TPL_PATH_MAX + 4200];
        copy_dst(b, json_string_value(json_object_get(v, "dst")), dst, sizeof dst);
        if (b->sub == 1)
            return json_pack("{s:s, s:[s, s, s], s:s, s:s}", "op", "exec", "argv", "chown",
                             json_string_value(json_object_get(v, "owner")), dst, "cwd", "/",
                             "tag", "template-build");
        const char *b64 = json_string_value(json_object_get(v, "content"));
        size_t cap = strlen(b64) / 4 * 3 + 3;
        *owned = malloc(cap);
        long n = *owned ? b64_decode(b64, *owned, cap) : -1;
        if (n < 0)
            return NULL; /* validated at submission: only out of memory gets here */
        *data = *owned;
        *len = (size_t)n;
        json_t *mode = json_object_get(v, "mode");
        return json_pack("{s:s, s:s, s:I}", "op", "write", "path", dst, "mode",
                         mode ? json_integer_value(mode) : (json_int_t)0644);
    }
    if ((v = json_object_get(s, "workdir")))
        /* Created for the current user (so later steps as that user can write there);
         * an existing directory is left as it is. */
        return json_pack("{s:s, s:[s, s, s, s, s, s], s:s, s:s}", "op", "exec", "argv", "/bin/sh", "-c",
                         "[ -d \"$1\" ] || { mkdir -p -- \"$1\" && chown -- \"$2\" \"$1\"; }", "sh",
                         json_string_value(v), b->run_user, "cwd", "/", "tag", "template-build");
    if ((v = json_object_get(s, "user")))
        return json_pack("{s:s, s:[s], s:s, s:s, s:s}", "op", "exec", "argv", "true", "user",
                         json_string_value(v), "cwd", "/", "tag", "template-build");
    return NULL;
}

static void run_step(struct tpl_build *b)
{
    size_t n = json_array_size(b->steps);
    while (b->step < n && json_object_get(json_array_get(b->steps, b->step), "env")) {
        json_object_update(b->cur.env, json_object_get(json_array_get(b->steps, b->step), "env"));
        b->step++; /* env only changes the carried state */
    }
    if (b->step >= n) {
        if (!b->cur.start && !b->cur.ready) {
            shut_down(b);
            return;
        }
        stage(b, 80, "starting the start command and waiting for the ready check");
        event_del(b->timer); /* the probe has its own deadline */
        b->probe = tpl_probe_start(b->sp, b->agent, &b->cur, on_probe, b);
        if (!b->probe)
            build_end(b, "build_ready_failed", "cannot send the start command to the build VM");
        return;
    }
    json_t *s = json_array_get(b->steps, b->step);
    char label[160], detail[200];
    step_label(b, label, sizeof label);
    snprintf(detail, sizeof detail, "step %zu/%zu: %s", b->step + 1, n, label);
    stage(b, 10 + (int)(70 * b->step / n), detail);
    b->outlen = 0;
    b->out[0] = '\0';
    b->exit_code = -1;
    b->got_result = false;
    const uint8_t *data = NULL;
    size_t len = 0;
    uint8_t *owned = NULL;
    json_t *req = step_request(b, s, &data, &len, &owned);
    char err[128] = "out of memory";
    struct agentc_chan *ch = req ? agentc_open(b->agent, req, &req_ops, b, 0, err, sizeof err) : NULL;
    json_decref(req);
    if (ch && json_object_get(s, "copy") && b->sub == 0) {
        /* A connection lost mid-upload closes the channel: req_close reports it. */
        if (len)
            agentc_write(ch, data, len);
        agentc_eof(ch);
    }
    free(owned);
    if (!ch) {
        build_end(b, "agent_unavailable", "cannot run step %zu (%s): %s", b->step + 1, label, err);
        return;
    }
    struct timeval tv = {BUILD_STEP_TIMEOUT_S, 0};
    event_add(b->timer, &tv);
}

/* ---- the build VM ------------------------------------------------------------------- */

static void on_agent_ready(void *arg, json_t *hello)
{
    struct tpl_build *b = arg;
    (void)hello;
    vmg_answered(b->greet);
    run_step(b);
}

static void on_agent_closed(void *arg, const char *code, const char *message)
{
    struct tpl_build *b = arg;
    if (!b->steps_done)
        build_end(b, "agent_unavailable", "the build VM's agent went away (%s: %s)", code, message);
}

static const struct agentc_callbacks build_agent_cbs = {on_agent_ready, on_agent_closed};

static void on_vm_ready(struct vm *vm, int err, const char *msg, void *arg)
{
    (void)vm;
    if (err != VM_OK)
        build_end(arg, "vm_failed", "the build VM did not start: %s", msg ? msg : vm_error_code(err));
}

static void on_vm_agent(struct vm *vm, int fd, void *arg)
{
    struct tpl_build *b = arg;
    (void)vm;
    tpl_probe_free(b->probe);
    b->probe = NULL;
    agentc_free(b->agent);
    b->agent = agentc_new(b->sp->base, fd, &build_agent_cbs, b); /* sends the HELLO */
    vmg_sent(b->greet);
}

static void on_vm_exit(struct vm *vm, enum vm_exit_reason reason, const char *msg,
                       const char *tail, void *arg)
{
    struct tpl_build *b = arg;
    (void)vm;
    (void)tail;
    b->vm = NULL;
    vmg_stop(b->greet);
    tpl_probe_free(b->probe);
    b->probe = NULL;
    agentc_free(b->agent);
    b->agent = NULL;
    if (b->finished) {
        build_free(b);
        return;
    }
    if (b->steps_done && reason == VM_EXIT_SHUTDOWN) {
        publish(b);
        return;
    }
    build_end(b, "vm_failed", "the build VM exited (%s): %s", vm_exit_reason_name(reason),
              msg ? msg : "");
}

static const struct vm_callbacks build_vm_cbs = {on_vm_ready, on_vm_agent, on_vm_exit};

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    build_end(arg, "timeout", "the template build did not make progress in time");
}

static void on_boot_deadline(void *arg, struct vm *vm, int err, const char *msg)
{
    (void)vm;
    (void)err;
    (void)msg;
    on_deadline(-1, EV_TIMEOUT, arg);
}

/* A cold boot: no HELLO retry (its agent is simply not up yet), one deadline. */
static const struct vmg_ops build_greet_ops = {NULL, on_boot_deadline};
static const struct vmg_params build_greet = {0, 0, BUILD_BOOT_TIMEOUT_S * 1000};

static void on_overlay(struct vm *unused, int err, const char *msg, void *arg)
{
    struct tpl_build *b = arg;
    (void)unused;
    if (err != VM_OK) {
        build_end(b, "host_io", "cannot create the build disk: %s", msg ? msg : vm_error_code(err));
        return;
    }
    struct vm_config cfg;
    memset(&cfg, 0, sizeof cfg);
    struct spaced_err e;
    if (tpl_vm_base(b->sp, &cfg, &e) < 0) {
        build_end(b, e.code, "%s", e.message);
        return;
    }
    char id[64];
    snprintf(id, sizeof id, "b-%.40s", b->name);
    cfg.id = id;
    cfg.vcpus = 1;
    cfg.mem_mib = TPL_BUILD_MEM_MIB;
    cfg.disk = b->overlay;
    cfg.backing[0].path = b->base_rootfs;
    cfg.backing[0].format = "raw";
    cfg.n_backing = 1;
    cfg.run_dir = b->run_dir;
    /* The steps are the tenant's code: the build VM is jailed like a sandbox's. */
    jail_fill(b->sp, &cfg);
    int verr = 0;
    char m[256] = "";
    b->vm = vmg_start(b->greet, &cfg, NULL, 0, &build_greet, &build_vm_cbs, b, &verr, m, sizeof m);
    if (!b->vm) {
        build_end(b, "vm_failed", "cannot start the build VM: %s", m[0] ? m : vm_error_code(verr));
        return;
    }
    stage(b, 5, "booting the build VM");
}

/* A build whose base is a template built on another node waits here for the base's
 * image (tpl_fetch), then starts as any build. */
struct tpl_base_wait {
    struct tpl_base_wait *next;
    struct spaced *sp;
    char op_id[STORE_ID_MAX];
    char name[64];
    char base[64];
};

static void base_wait_unlink(struct tpl_base_wait *w)
{
    for (struct tpl_base_wait **pp = &w->sp->tpl->base_waits; *pp; pp = &(*pp)->next)
        if (*pp == w) {
            *pp = w->next;
            break;
        }
}

static void on_base_fetched(void *arg, const struct spaced_err *err)
{
    struct tpl_base_wait *w = arg;
    base_wait_unlink(w);
    if (err) {
        char msg[sizeof err->message + 128];
        snprintf(msg, sizeof msg, "the base template %s could not be fetched: %s", w->base, err->message);
        op_finish(w->sp, w->op_id, false, err->code, msg);
    } else
        tpl_build_start(w->sp, w->op_id, w->name); /* finds the base here now */
    free(w);
}

/* Fetches `base` for the build of `name`: 0 (the build starts when it is here), 1 (it is
 * here already), -1 with err. */
static int base_fetch(struct spaced *sp, const char *op_id, const char *name, const char *base,
                      struct spaced_err *err)
{
    struct tpl_base_wait *w = calloc(1, sizeof *w);
    if (!w)
        return spaced_err_set(err, 500, "internal", "out of memory");
    w->sp = sp;
    snprintf(w->op_id, sizeof w->op_id, "%s", op_id);
    snprintf(w->name, sizeof w->name, "%s", name);
    snprintf(w->base, sizeof w->base, "%s", base);
    int rc = tpl_fetch(sp, base, on_base_fetched, w, err);
    if (rc != 0) {
        free(w);
        return rc;
    }
    w->next = sp->tpl->base_waits;
    sp->tpl->base_waits = w;
    log_info("template.build", "template=%s base=%s msg=\"the base is on another node: fetching it first\"",
             name, base);
    return 0;
}

int tpl_build_start(struct spaced *sp, const char *op_id, const char *name)
{
    struct store_tpl row;
    if (store_tpl_get(sp->store, name, &row) != 0) {
        op_finish(sp, op_id, false, "not_found", "the template build spec is gone");
        return -1;
    }
    json_t *spec = row.spec_json ? json_loads(row.spec_json, 0, NULL) : NULL;
    struct tpl_info from;
    const char *base = json_string_value(json_object_get(spec, "base"));
    struct tpl_build *b = calloc(1, sizeof *b);
    if (!b || !base || tpl_lookup(sp, row.tenant, base, &from, NULL) < 0) {
        /* A base built on another node is fetched first (verified), then the build runs. */
        struct spaced_err e = {0};
        char base_name[64] = "";
        bool remote = b && base && tpl_lookup_fetchable(sp, row.tenant, base, &from, NULL) == 0 && from.remote;
        if (remote)
            snprintf(base_name, sizeof base_name, "%s", base);
        store_tpl_clear(&row);
        json_decref(spec);
        free(b);
        int rc = remote ? base_fetch(sp, op_id, name, base_name, &e) : -1;
        if (rc == 0)
            return 0;
        if (rc == 1)
            return tpl_build_start(sp, op_id, name);
        char msg[sizeof e.message + 128];
        snprintf(msg, sizeof msg, "the base template %s cannot be fetched: %s", base_name, e.message);
        if (remote)
            op_finish(sp, op_id, false, e.code, msg);
        else
            op_finish(sp, op_id, false, "unknown_template", "the base template is missing");
        return -1;
    }
    store_tpl_clear(&row);
    b->sp = sp;
    b->next = sp->tpl->builds;
    sp->tpl->builds = b;
    b->started_ms = spaced_now_ms();
    snprintf(b->op_id, sizeof b->op_id, "%s", op_id);
    b->log = tpl_log_new(sp, op_id, name);
    snprintf(b->name, sizeof b->name, "%s", name);
    snprintf(b->base_name, sizeof b->base_name, "%s", base);
    snprintf(b->dir, sizeof b->dir, "%s/templates/%s", sp->opt.data_dir, name);
    snprintf(b->run_dir, sizeof b->run_dir, "%s/run/b-%s", sp->opt.data_dir, name);
    snprintf(b->overlay, sizeof b->overlay, "%s/build.qcow2", b->dir);
    snprintf(b->base_rootfs, sizeof b->base_rootfs, "%s", from.rootfs);
    b->spec = spec;
    b->steps = json_object_get(spec, "steps");
    char meta[TPL_PATH_MAX + 32];
    snprintf(meta, sizeof meta, "%s/template.json", from.dir);
    b->base_meta = json_load_file(meta, 0, NULL);
    if (!b->base_meta)
        b->base_meta = json_object();
    /* The carried state starts as the base's defaults (env, workdir; its user becomes
     * this template's default unless a user step changes it), but steps run as root
     * until a user step: most build steps install things. start/ready are this spec's. */
    tpl_defaults_load(from.dir, &b->cur);
    snprintf(b->run_user, sizeof b->run_user, "root");
    free(b->cur.start);
    free(b->cur.ready);
    const char *start = json_string_value(json_object_get(spec, "start"));
    const char *ready = json_string_value(json_object_get(spec, "ready"));
    b->cur.start = start ? strdup(start) : NULL;
    b->cur.ready = ready ? strdup(ready) : NULL;
    b->timer = evtimer_new(sp->base, on_deadline, b);
    b->greet = vmg_new(sp->base, &build_greet_ops, b);
    /* A failed earlier build of this name (same tenant) left files: start clean. */
    spaced_rm_rf(b->dir);
    if (!b->timer || !b->greet || spaced_mkdir_p(b->dir) != 0 || spaced_mkdir_p(b->run_dir) != 0) {
        build_end(b, "host_io", "cannot create %s: %s", b->dir, strerror(errno));
        return -1;
    }
    struct vm_disk_layer layer = {b->base_rootfs, "raw"};
    if (vm_disk_overlay_create(sp->base, &layer, 1, b->overlay, on_overlay, b, NULL) != 0) {
        build_end(b, "host_io", "cannot start qemu-img");
        return -1;
    }
    return 0;
}

void tpl_build_interrupted(struct spaced *sp, const char *name)
{
    struct store_tpl t;
    if (store_tpl_get(sp->store, name, &t) != 0)
        return;
    if (strcmp(t.state, "building") == 0) {
        snprintf(t.state, sizeof t.state, "failed");
        free(t.failure);
        t.failure = strdup("spaced restarted during the build");
        t.updated_ms = spaced_now_ms();
        store_tpl_put(sp->store, &t);
    }
    store_tpl_clear(&t);
}

void tpl_builds_free(struct tpl_registry *r)
{
    while (r->base_waits) { /* their fetches go next, telling no one */
        struct tpl_base_wait *w = r->base_waits;
        r->base_waits = w->next;
        free(w);
    }
    while (r->builds) {
        struct tpl_build *b = r->builds;
        if (b->vm) {
            kill(vm_pid(b->vm), SIGKILL);
            vm_detach(b->vm);
            b->vm = NULL;
        }
        if (b->convert_pid > 0 && !b->finished)
            kill(b->convert_pid, SIGKILL);
        build_free(b); /* unlinks b from r->builds */
    }
}
