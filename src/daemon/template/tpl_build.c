/* tpl_build.c: building a template from a spec, as a template_build operation.
 *
 * Spec (validated by the route): {"name", "from", "steps": [{"run": "<shell command>"}]}.
 * The build boots a VM on a fresh overlay of `from`'s rootfs, runs each step with the
 * agent's exec (`/bin/sh -c`), fails on the first non-zero exit (with the tail of its
 * output), powers the VM off, flattens the overlay into a raw image with
 * `qemu-img convert` and publishes <data-dir>/templates/<name>/rootfs.ext4 +
 * template.json by rename, so a half-built template is never visible. The store's
 * templates row records the spec and the outcome ("building" | "ready" | "failed"). */
#include <errno.h>
#include <event2/event.h>
#include <jansson.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemon/agentc/agentc.h"
#include "daemon/ops/op.h"
#include "daemon/vm/vm.h"
#include "log.h"
#include "tpl_internal.h"

#define BUILD_MEM_MIB 512
#define BUILD_BOOT_TIMEOUT_S 300
#define BUILD_STEP_TIMEOUT_S 1800
#define BUILD_OUTPUT_TAIL 2048

extern char **environ;

/* One build in flight; freed by build_free once the op is finished and the VM is gone. */
struct tpl_build {
    struct spaced *sp;
    char op_id[STORE_ID_MAX];
    char name[64];
    char dir[TPL_PATH_MAX];          /* <data>/templates/<name> */
    char run_dir[TPL_PATH_MAX];
    char overlay[TPL_PATH_MAX + 16]; /* dir/build.qcow2 */
    char base_rootfs[TPL_PATH_MAX + 16];
    json_t *steps;                   /* owned */
    size_t step;                     /* index of the step running or next */
    struct vm *vm;
    struct agentc *agent;
    struct event *timer;             /* deadlines, and polling of qemu-img convert */
    pid_t convert_pid;
    char out[BUILD_OUTPUT_TAIL + 1]; /* tail of the current step's output */
    size_t outlen;
    int exit_code;
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
    agentc_free(b->agent);
    if (b->timer)
        event_free(b->timer);
    json_decref(b->steps);
    free(b);
}

static void store_state(struct tpl_build *b, const char *state, const char *failure)
{
    struct store_tpl t;
    if (store_tpl_get(b->sp->store, b->name, &t) != 0)
        return;
    snprintf(t.state, sizeof t.state, "%s", state);
    free(t.failure);
    t.failure = failure ? strdup(failure) : NULL;
    t.updated_ms = spaced_now_ms();
    store_tpl_put(b->sp->store, &t);
    store_tpl_clear(&t);
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
    char msg[BUILD_OUTPUT_TAIL + 256] = "";
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
    }
    store_state(b, code ? "failed" : "ready", code ? msg : NULL);
    char p[TPL_PATH_MAX + 32];
    snprintf(p, sizeof p, "%s", b->overlay);
    unlink(p);
    op_finish(b->sp, b->op_id, code == NULL, code, code ? msg : NULL);
    if (b->vm && vm_state(b->vm) < VM_STATE_STOPPING)
        vm_kill(b->vm);
    if (!b->vm)
        build_free(b);
}

/* ---- publishing ------------------------------------------------------------------- */

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
    char tmp[TPL_PATH_MAX + 32], final[TPL_PATH_MAX + 32], meta[TPL_PATH_MAX + 32];
    snprintf(tmp, sizeof tmp, "%s/rootfs.ext4.tmp", b->dir);
    snprintf(final, sizeof final, "%s/rootfs.ext4", b->dir);
    snprintf(meta, sizeof meta, "%s/template.json", b->dir);
    if (r < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        unlink(tmp);
        build_end(b, "build_failed", "qemu-img convert failed (status %d)", status);
        return;
    }
    json_t *j = json_pack("{s:s, s:s}", "name", b->name, "description", "built by POST /v1/templates");
    int rc = json_dump_file(j, meta, JSON_INDENT(2));
    json_decref(j);
    if (rc != 0 || rename(tmp, final) != 0) {
        build_end(b, "host_io", "cannot publish %s: %s", final, strerror(errno));
        return;
    }
    log_info("template.built", "template=%s", b->name);
    build_end(b, NULL, NULL);
}

static void publish(struct tpl_build *b)
{
    op_progress(b->sp, b->op_id, 92, "flattening the disk image");
    char tmp[TPL_PATH_MAX + 32];
    snprintf(tmp, sizeof tmp, "%s/rootfs.ext4.tmp", b->dir);
    char *argv[] = {"qemu-img", "convert", "-q", "-O", "raw", b->overlay, tmp, NULL};
    if (posix_spawnp(&b->convert_pid, "qemu-img", NULL, NULL, argv, environ) != 0) {
        build_end(b, "host_io", "cannot run qemu-img: %s", strerror(errno));
        return;
    }
    struct timeval tv = {0, 200000};
    event_del(b->timer);
    event_assign(b->timer, b->sp->base, -1, 0, on_convert_poll, b);
    event_add(b->timer, &tv);
}

/* ---- steps -------------------------------------------------------------------------- */

static void run_step(struct tpl_build *b);

static void step_event(void *arg, json_t *ev)
{
    struct tpl_build *b = arg;
    if (strcmp(json_string_value(json_object_get(ev, "type")), "exit") != 0)
        return;
    json_t *code = json_object_get(ev, "code");
    b->exit_code = json_is_integer(code) ? (int)json_integer_value(code) : -1;
}

static void step_data(void *arg, enum frame_stream st, const uint8_t *buf, size_t len)
{
    struct tpl_build *b = arg;
    (void)st;
    if (len >= BUILD_OUTPUT_TAIL) {
        buf += len - BUILD_OUTPUT_TAIL;
        len = BUILD_OUTPUT_TAIL;
    }
    if (b->outlen + len > BUILD_OUTPUT_TAIL) {
        size_t drop = b->outlen + len - BUILD_OUTPUT_TAIL;
        memmove(b->out, b->out + drop, b->outlen - drop);
        b->outlen -= drop;
    }
    memcpy(b->out + b->outlen, buf, len);
    b->outlen += len;
    b->out[b->outlen] = '\0';
}

static void step_error(void *arg, const char *code, const char *message)
{
    struct tpl_build *b = arg;
    b->exit_code = -1;
    snprintf(b->out, sizeof b->out, "%s: %s", code, message);
    b->outlen = strlen(b->out);
}

static void step_close(void *arg)
{
    struct tpl_build *b = arg;
    if (b->finished)
        return;
    if (b->exit_code != 0) {
        build_end(b, "build_step_failed", "step %zu (%s) exited with %d: %s", b->step + 1,
                  json_string_value(json_object_get(json_array_get(b->steps, b->step), "run")),
                  b->exit_code, b->out);
        return;
    }
    b->step++;
    run_step(b);
}

static const struct agentc_chan_ops step_ops = {
    .on_event = step_event, .on_data = step_data, .on_error = step_error, .on_close = step_close};

static void on_stopped(struct vm *vm, int err, const char *msg, void *arg)
{
    (void)vm;
    (void)err;
    (void)msg;
    (void)arg; /* on_exit follows and publishes */
}

static void run_step(struct tpl_build *b)
{
    size_t n = json_array_size(b->steps);
    if (b->step >= n) {
        op_progress(b->sp, b->op_id, 85, "shutting the build VM down");
        static const struct agentc_chan_ops ignore = {0};
        json_t *req = json_pack("{s:s}", "op", "shutdown");
        char err[64];
        agentc_open(b->agent, req, &ignore, NULL, 0, err, sizeof err);
        json_decref(req);
        if (vm_shutdown(b->vm, 30000, on_stopped, b) != 0)
            build_end(b, "vm_failed", "the build VM refused to shut down");
        return;
    }
    const char *cmd = json_string_value(json_object_get(json_array_get(b->steps, b->step), "run"));
    char detail[160];
    snprintf(detail, sizeof detail, "step %zu/%zu: %.120s", b->step + 1, n, cmd);
    op_progress(b->sp, b->op_id, 10 + (int)(70 * b->step / (n ? n : 1)), detail);
    b->outlen = 0;
    b->out[0] = '\0';
    b->exit_code = -1;
    json_t *req = json_pack("{s:s, s:s, s:s}", "op", "exec", "cmd", cmd, "tag", "template-build");
    char err[128] = "";
    struct agentc_chan *ch = agentc_open(b->agent, req, &step_ops, b, 0, err, sizeof err);
    json_decref(req);
    if (!ch) {
        build_end(b, "agent_unavailable", "cannot run step %zu: %s", b->step + 1, err);
        return;
    }
    struct timeval tv = {BUILD_STEP_TIMEOUT_S, 0};
    event_add(b->timer, &tv);
}

/* ---- the build VM ------------------------------------------------------------------- */

static void on_agent_ready(void *arg, json_t *hello)
{
    (void)hello;
    run_step(arg);
}

static void on_agent_closed(void *arg, const char *code, const char *message)
{
    struct tpl_build *b = arg;
    if (b->step < json_array_size(b->steps))
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
    agentc_free(b->agent);
    b->agent = agentc_new(b->sp->base, fd, &build_agent_cbs, b);
}

static void on_vm_exit(struct vm *vm, enum vm_exit_reason reason, const char *msg,
                       const char *tail, void *arg)
{
    struct tpl_build *b = arg;
    (void)vm;
    (void)tail;
    b->vm = NULL;
    agentc_free(b->agent);
    b->agent = NULL;
    if (b->finished) {
        build_free(b);
        return;
    }
    if (b->step >= json_array_size(b->steps) && reason == VM_EXIT_SHUTDOWN) {
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
    cfg.mem_mib = BUILD_MEM_MIB;
    cfg.disk = b->overlay;
    cfg.backing[0].path = b->base_rootfs;
    cfg.backing[0].format = "raw";
    cfg.n_backing = 1;
    cfg.run_dir = b->run_dir;
    int verr = 0;
    char m[256] = "";
    b->vm = vm_boot(b->sp->base, &cfg, &build_vm_cbs, b, &verr, m, sizeof m);
    if (!b->vm) {
        build_end(b, "vm_failed", "cannot start the build VM: %s", m[0] ? m : vm_error_code(verr));
        return;
    }
    op_progress(b->sp, b->op_id, 5, "booting the build VM");
    struct timeval tv = {BUILD_BOOT_TIMEOUT_S, 0};
    event_add(b->timer, &tv);
}

int tpl_build_start(struct spaced *sp, const char *op_id, const char *name)
{
    struct store_tpl row;
    if (store_tpl_get(sp->store, name, &row) != 0) {
        op_finish(sp, op_id, false, "not_found", "the template build spec is gone");
        return -1;
    }
    json_t *spec = row.spec_json ? json_loads(row.spec_json, 0, NULL) : NULL;
    store_tpl_clear(&row);
    struct tpl_info from;
    struct spaced_err e;
    const char *from_name = json_string_value(json_object_get(spec, "from"));
    struct tpl_build *b = calloc(1, sizeof *b);
    if (!b || !from_name || tpl_lookup(sp, NULL, from_name, &from, &e) < 0) {
        json_decref(spec);
        free(b);
        op_finish(sp, op_id, false, "unknown_template", "the base template is missing");
        return -1;
    }
    b->sp = sp;
    b->next = sp->tpl->builds;
    sp->tpl->builds = b;
    snprintf(b->op_id, sizeof b->op_id, "%s", op_id);
    snprintf(b->name, sizeof b->name, "%s", name);
    snprintf(b->dir, sizeof b->dir, "%s/templates/%s", sp->opt.data_dir, name);
    snprintf(b->run_dir, sizeof b->run_dir, "%s/run/b-%s", sp->opt.data_dir, name);
    snprintf(b->overlay, sizeof b->overlay, "%s/build.qcow2", b->dir);
    snprintf(b->base_rootfs, sizeof b->base_rootfs, "%s", from.rootfs);
    b->steps = json_incref(json_object_get(spec, "steps"));
    if (!b->steps)
        b->steps = json_array();
    json_decref(spec);
    b->timer = evtimer_new(sp->base, on_deadline, b);
    if (!b->timer || (mkdir(b->dir, 0700) != 0 && errno != EEXIST) ||
        (mkdir(b->run_dir, 0700) != 0 && errno != EEXIST)) {
        build_end(b, "host_io", "cannot create %s: %s", b->dir, strerror(errno));
        return -1;
    }
    unlink(b->overlay);
    if (vm_disk_overlay_create(sp->base, b->base_rootfs, "raw", b->overlay, on_overlay, b) != 0) {
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
