/* sbx_act.c: carrying out lifecycle operations on a sandbox's VM (vm.h) and agent
 * (agentc.h), and recovering sandboxes after a restart.
 *
 * Each action runs asynchronously from the loop and ends in exactly one op_finish()
 * (act_ok / act_fail). The sandbox holds at most one action (s->op_id); the ops engine
 * never starts a second one while sbx_busy() is true. Every callback from vm.c or
 * agentc.c gets the sandbox as arg; the sandbox outlives them because it is only freed
 * after its VM's on_exit (delete) or at shutdown after vm_detach/agentc_free. */
#include <errno.h>
#include <fcntl.h>
#include <event2/event.h>
#include <jansson.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "daemon/agentc/agentc.h"
#include "daemon/jail/jail.h"
#include "daemon/net/net.h"
#include "daemon/template/tpl.h"
#include "daemon/vm/vm.h"
#include "daemon/vm/vm_greet.h"
#include "log.h"
#include "sbx_internal.h"
#include "sbx_pool.h"

#define SBX_AGENT_TIMEOUT_S 120   /* boot/restore until the agent's HELLO */
#define SBX_SHUTDOWN_TIMEOUT_MS 10000

static void act_continue_after_agent(struct sbx *s);

/* ---- small helpers ---------------------------------------------------------------- */

static bool file_exists(const char *path) { return access(path, F_OK) == 0; }

/* ---- a create's stages -------------------------------------------------------------
 *
 * A create runs as named stages (section "create" below), each a function that takes
 * what the earlier ones produced from this record (one per create, s->create) and adds
 * its own output:
 *   template  the template, its memory snapshot for this shape (none: cold boot), the
 *             disk chain
 *   disk      the sandbox's directory, backing.json and its qcow2 overlay
 *   vm        a warm VM claimed from the pool, or QEMU restoring the snapshot (or cold
 *             booting), until the agent's HELLO
 *   net       the NIC: namespace, tap and gateway policy (before the spawn, which hands
 *             QEMU the tap; after a pool claim, the pooled VM's namespace is handed over)
 *   refresh   the agent's refresh (clock, entropy, hostname, env, user), start command
 *   persist   the state `running` written and the operation finished (watchers answered)
 * When the create ends, one log line (event sandbox.create.stages) gives each stage's
 * time, so what the platform adds to a restore is read in spaced's log. */
enum create_stage { CS_TEMPLATE, CS_DISK, CS_VM, CS_NET, CS_REFRESH, CS_PERSIST, CS_COUNT };

struct sbx_create {
    /* template stage */
    struct tpl_info t;
    char snap[SBX_PATH_MAX];    /* template snapshot dir, "" for a cold boot */
    char overlay[SBX_PATH_MAX]; /* the snapshot's frozen overlay (when snap[0]) */
    struct sbx_chain chain;     /* what backing.json holds */
    bool nic;                   /* the policy is not `none` */
    /* disk stage */
    char disk[SBX_PATH_MAX];    /* the sandbox's overlay */
    bool disk_copied;           /* written from a remembered overlay, not by qemu-img */
    /* vm stage: how the VM came (pool, restore, boot) */
    const char *how;
    int64_t spawn_us;           /* of the vm stage: vm_restore/vm_boot itself (the jailed
                                   spawn, synchronous), or the pool claim */
    /* timing (the monotonic clock, clock.h) */
    int64_t queued_ms;          /* submission until the engine started the create */
    int64_t start_us;
    int64_t spent_us[CS_COUNT];
    int64_t began_us[CS_COUNT]; /* 0: the stage is not running */
};

/* Stage timing; a no-op outside a create (start_vm and send_refresh serve every verb). */
static void stage_begin(struct sbx *s, enum create_stage st)
{
    if (s->create && !s->create->began_us[st])
        s->create->began_us[st] = clock_mono_us();
}

static void stage_end(struct sbx *s, enum create_stage st)
{
    struct sbx_create *c = s->create;
    if (c && c->began_us[st]) {
        c->spent_us[st] += clock_mono_us() - c->began_us[st];
        c->began_us[st] = 0;
    }
}

/* The end of a create (act_end): closes the running stages and logs them all. */
static void create_end(struct sbx *s, bool ok)
{
    struct sbx_create *c = s->create;
    if (!c)
        return;
    for (int st = 0; st < CS_COUNT; st++)
        stage_end(s, (enum create_stage)st);
    int64_t ms[CS_COUNT];
    for (int st = 0; st < CS_COUNT; st++)
        ms[st] = (c->spent_us[st] + 500) / 1000;
    log_info("sandbox.create.stages", "sandbox=%s result=%s how=%s queued_ms=%lld "
             "template_ms=%lld disk_ms=%lld vm_ms=%lld spawn_ms=%lld net_ms=%lld "
             "refresh_ms=%lld persist_ms=%lld total_ms=%lld", s->rec.id, ok ? "ok" : "failed",
             c->how ? c->how : "none", (long long)c->queued_ms, (long long)ms[CS_TEMPLATE],
             (long long)ms[CS_DISK], (long long)ms[CS_VM], (long long)((c->spawn_us + 500) / 1000),
             (long long)ms[CS_NET], (long long)ms[CS_REFRESH], (long long)ms[CS_PERSIST],
             (long long)((clock_mono_us() - c->start_us + 500) / 1000));
    /* A pooled create, or a restore (which asked the shape's pool first and found it
     * empty): the answer is out, the pool's refill (a jailed spawn) may start. */
    bool asked_pool = c->how && (strcmp(c->how, "pool") == 0 || strcmp(c->how, "restore") == 0);
    free(s->create);
    s->create = NULL;
    if (asked_pool)
        sbx_pools_refill(s->sp);
}

/* ---- finishing ---------------------------------------------------------------------- */

static void create_end(struct sbx *s, bool ok);

/* Ends the current action; finish: its op is not finished yet (act_ok's was). */
static void act_close(struct sbx *s, bool finish, bool ok, const char *code, const char *msg)
{
    char op[STORE_ID_MAX];
    snprintf(op, sizeof op, "%s", s->op_id);
    s->op_id[0] = '\0';
    s->expect_exit = false;
    s->cold_fallback = false;
    if (s->timer)
        event_del(s->timer);
    sbx_gw_reset(s);
    if (s->greet)
        vmg_stop(s->greet);
    sbx_resv_op_ended(s, op); /* whatever the outcome: the row says what it holds now */
    if (op[0] && finish)
        op_finish(s->sp, op, ok, code, msg);
    create_end(s, ok);
}

static void act_end(struct sbx *s, bool ok, const char *code, const char *msg)
{
    act_close(s, true, ok, code, msg);
}

/* Success: the state and the op's outcome in one durable commit (sbx_set_state_succeed). */
static void act_ok(struct sbx *s, enum sbx_state state)
{
    sbx_set_state_succeed(s, state, s->op_id);
    act_close(s, false, true, NULL, NULL);
}

/* Fails the current action. back: the state the sandbox is in afterwards (the state it
 * was in when nothing changed, or SBX_FAILED with msg as the failure). The desired state
 * follows what it really is, so later verbs are judged against reality. */
static void act_fail(struct sbx *s, enum sbx_state back, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void act_fail(struct sbx *s, enum sbx_state back, const char *code, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (back != SBX_DELETED)
        sbx_set_desired(s, back == SBX_FAILED ? SBX_RUNNING : back);
    if (back == SBX_FAILED && s->vm && vm_state(s->vm) < VM_STATE_STOPPING) {
        s->expect_exit = true; /* a failed sandbox holds no VM */
        vm_kill(s->vm);
    }
    sbx_set_state(s, back, back == SBX_FAILED ? msg : NULL);
    act_end(s, false, code, msg);
}

/* ---- agent -------------------------------------------------------------------------- */

static void refresh_after_resume(struct sbx *s);

static void on_agent_hello(void *arg, json_t *hello)
{
    struct sbx *s = arg;
    (void)hello;
    s->agent_ready = true;
    if (s->greet)
        vmg_answered(s->greet);
    stage_end(s, CS_VM);
    log_info("sandbox.agent", "sandbox=%s event=ready", s->rec.id);
    sbx_vol_attach(s); /* before the refresh: the agent handles OPENs in order */
    refresh_after_resume(s);
    act_continue_after_agent(s);
}

#define SBX_AGENT_DROPS_MAX 8 /* agent connections lost per minute before the sandbox fails */

static void on_agent_closed(void *arg, const char *code, const char *message)
{
    struct sbx *s = arg;
    char q[200];
    log_warn("sandbox.agent", "sandbox=%s event=closed code=%s msg=%s", s->rec.id, code,
             log_quote(message, q, sizeof q));
    s->agent_ready = false;
    s->pending = NULL;
    sbx_agent_free(s);
    s->agent = NULL;
    /* An agent cut off for flooding spaced or for not reading what spaced queued toward
     * it (agentc.h) is hostile, not unlucky: no reconnect, the sandbox fails with the
     * reason and its VM is killed (docs/security.md). */
    char why[512];
    snprintf(why, sizeof why, "%s", message);
    bool hostile = strcmp(code, AGENTC_E_STALLED) == 0 || strcmp(code, AGENTC_E_FLOOD) == 0;
    bool reconnect = s->vm && vm_state(s->vm) == VM_STATE_RUNNING && !s->expect_exit;
    /* So is one that breaks its connection over and over (each break costs spaced a
     * reconnect and a HELLO): more than SBX_AGENT_DROPS_MAX reconnects a minute. */
    int64_t now = spaced_now_ms();
    if (now - s->agent_drops_since > 60000 || now < s->agent_drops_since) {
        s->agent_drops_since = now;
        s->agent_drops = 0;
    }
    if (!hostile && reconnect && ++s->agent_drops > SBX_AGENT_DROPS_MAX) {
        hostile = true;
        code = AGENTC_E_FLOOD;
        snprintf(why, sizeof why, "the agent connection broke more than %d times in a minute "
                 "(last: %s)", SBX_AGENT_DROPS_MAX, message);
    }
    if (hostile) {
        if (s->vm && vm_state(s->vm) < VM_STATE_STOPPING && s->state != SBX_DELETING)
            act_fail(s, SBX_FAILED, code, "the guest agent was cut off (%s): %s", code, why);
        return;
    }
    /* A running VM whose agent dropped the stream gets one fresh connection. */
    if (reconnect)
        vm_agent_reconnect(s->vm);
}

static const struct agentc_callbacks sbx_agent_cbs = {on_agent_hello, on_agent_closed};

/* ---- the refresh after the answer (creates) -------------------------------------------
 * A create is answered once its refresh is queued on the agent connection, not once the
 * agent has answered it. Every request a client can send next travels the same
 * connection behind it (sbx_agent() hands out a connection only after its HELLO) and the
 * agent handles frames in order, so no request sees the guest before its clock, entropy,
 * hostname, env and default user are set; the guest's refresh (23-38 ms of a restore
 * create under TCG) runs while the state is written instead of before it.
 * Durable across a spaced restart: `refresh.pending` in the sandbox's directory is made
 * before the state `running` is committed and removed once the agent has answered. A
 * spaced that died in between finds it when it adopts the VM, and the HELLO handler sends
 * the refresh again before any request can reach the agent; so does an agent connection
 * that dropped and came back. Twice is harmless: a later clock, more entropy, the same
 * names. A plain file without fsync: it matters only while the VM lives, and a host crash
 * ends the VM. An agent that refuses the refresh after the answer fails the sandbox
 * (code agent_refresh_failed), as the create would have. */
#define SBX_REFRESH_PENDING "refresh.pending"

static void refresh_done(struct sbx *s);
static json_t *refresh_request(struct sbx *s);

static bool refresh_pending(const struct sbx *s)
{
    char p[SBX_PATH_MAX];
    sbx_path(s, SBX_REFRESH_PENDING, p, sizeof p);
    return file_exists(p);
}

static void refresh_pending_set(const struct sbx *s, bool on)
{
    char p[SBX_PATH_MAX];
    sbx_path(s, SBX_REFRESH_PENDING, p, sizeof p);
    if (!on) {
        unlink(p);
        return;
    }
    int fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (fd >= 0)
        close(fd);
}

static void refresh_after_event(void *arg, json_t *ev)
{
    struct sbx *s = arg;
    if (strcmp(json_string_value(json_object_get(ev, "type")), "result") == 0)
        s->refresh_after_ok = true;
}

static void refresh_after_error(void *arg, const char *code, const char *message)
{
    struct sbx *s = arg;
    if (strcmp(code, FRAME_E_DISCONNECTED) == 0)
        return; /* not refused: sent again on the next connection (refresh.pending stays) */
    s->refresh_after_failed = true;
    snprintf(s->refresh_err, sizeof s->refresh_err, "%s: %s", code, message);
}

static void refresh_after_close(void *arg)
{
    struct sbx *s = arg;
    s->refresh_after = NULL;
    if (s->refresh_after_ok) {
        refresh_pending_set(s, false);
        log_info("sandbox.refresh", "sandbox=%s result=ok after_answer=true", s->rec.id);
    } else if (s->refresh_after_failed && s->state != SBX_DELETING && s->state != SBX_DELETED &&
               s->state != SBX_FAILED) {
        refresh_pending_set(s, false);
        act_fail(s, SBX_FAILED, "agent_refresh_failed", "agent refresh failed: %s",
                 s->refresh_err);
    }
}

static const struct agentc_chan_ops refresh_after_ops = {
    .on_event = refresh_after_event, .on_error = refresh_after_error, .on_close = refresh_after_close};

/* Queues the refresh with no action waiting on it. false: not sent (agent gone or the
 * request could not be made): refresh.pending stays for the next connection. */
static bool refresh_after_send(struct sbx *s)
{
    json_t *req = refresh_request(s);
    if (!req)
        return false;
    s->refresh_after_ok = false;
    s->refresh_after_failed = false;
    char err[128] = "";
    s->refresh_after = agentc_open(s->agent, req, &refresh_after_ops, s, 0, err, sizeof err);
    json_decref(req);
    if (!s->refresh_after)
        log_warn("sandbox.refresh", "sandbox=%s result=not_sent msg=\"%s\"", s->rec.id, err);
    return s->refresh_after != NULL;
}

/* The agent said HELLO: a refresh a create was answered before is sent (again) first. */
static void refresh_after_resume(struct sbx *s)
{
    if (s->refresh_after || s->pending || !refresh_pending(s))
        return;
    if (s->op_id[0] && (s->state == SBX_CREATING || s->state == SBX_STARTING ||
                        s->state == SBX_RESTORING))
        return; /* the action sends its own refresh, which clears the mark */
    log_info("sandbox.refresh", "sandbox=%s event=resend msg=\"the last refresh was not "
             "answered\"", s->rec.id);
    refresh_after_send(s);
}

/* The refresh request after boot/restore: one channel, result then close. */
static void refresh_event(void *arg, json_t *ev)
{
    struct sbx *s = arg;
    if (strcmp(json_string_value(json_object_get(ev, "type")), "result") == 0)
        s->refresh_ok = true;
}

static void refresh_error(void *arg, const char *code, const char *message)
{
    struct sbx *s = arg;
    snprintf(s->refresh_err, sizeof s->refresh_err, "%s: %s", code, message);
}

static void refresh_close(void *arg)
{
    struct sbx *s = arg;
    s->pending = NULL;
    if (!s->op_id[0])
        return;
    if (!s->refresh_ok) {
        act_fail(s, SBX_FAILED, "agent_refresh_failed", "agent refresh failed: %s",
                 s->refresh_err[0] ? s->refresh_err : "no result");
        return;
    }
    refresh_pending_set(s, false); /* a create answered early may have left it */
    refresh_done(s);
}

/* The refresh's outcome is settled (answered ok, or queued for a create): the action
 * succeeds. */
static void refresh_done(struct sbx *s)
{
    if (s->rec.timeout_s && (s->op_kind == OP_CREATE || s->op_kind == OP_RESTORE ||
                             s->op_kind == OP_WAKE || s->op_kind == OP_START))
        s->rec.deadline_ms = spaced_now_ms() + s->rec.timeout_s * 1000;
    if (s->state == SBX_RESTORING) { /* the memory image is live again: free its disk */
        char dir[SBX_PATH_MAX];
        sbx_path(s, "suspend", dir, sizeof dir);
        spaced_rm_rf(dir);
    }
    /* The template's start command (a no-op where it already runs: restored VMs). */
    tpl_start_in_sandbox(s->sp, s->rec.template_name, s->rec.id, s->agent);
    stage_end(s, CS_REFRESH);
    stage_begin(s, CS_PERSIST); /* ends with the op (create_end) */
    act_ok(s, SBX_RUNNING);
}

static const struct agentc_chan_ops refresh_ops = {
    .on_event = refresh_event, .on_error = refresh_error, .on_close = refresh_close};

/* The refresh request: wall clock, >= 32 bytes of host entropy, hostname = id, the
 * template's env, user and workdir. NULL when it cannot be made. */
static json_t *refresh_request(struct sbx *s)
{
    unsigned char raw[64];
    char b64[100];
    if (RAND_bytes(raw, sizeof raw) != 1)
        return NULL;
    EVP_EncodeBlock((unsigned char *)b64, raw, sizeof raw);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    json_t *req = json_pack("{s:s, s:I, s:s, s:s}", "op", "refresh", "time_ns",
                            (json_int_t)ts.tv_sec * 1000000000 + ts.tv_nsec, "entropy", b64,
                            "hostname", s->rec.id);
    OPENSSL_cleanse(raw, sizeof raw);
    OPENSSL_cleanse(b64, sizeof b64);
    /* The template's env (overridden by the sandbox's own), default user and workdir. */
    if (req && tpl_sandbox_refresh(s->sp, s->rec.template_name, s->rec.env_json, req) < 0) {
        json_decref(req);
        req = NULL;
    }
    return req;
}

/* Sends the refresh of the current action (create, start, restore, wake). A create is
 * answered once it is queued ("the refresh after the answer" above); the others wait
 * for the agent's result (refresh_close). */
static void send_refresh(struct sbx *s)
{
    stage_begin(s, CS_REFRESH);
    sbx_vol_attach(s); /* a pooled VM's agent was ready before it became this sandbox */
    if (s->op_kind == OP_CREATE && s->state == SBX_CREATING) {
        refresh_pending_set(s, true);
        if (!refresh_after_send(s)) {
            act_fail(s, SBX_FAILED, "agent_unavailable", "cannot send refresh to the agent");
            return;
        }
        if (s->agent_ready) /* else a claimed clone's HELLO is still on its way: */
            refresh_done(s); /* act_continue_after_agent answers */
        return;
    }
    json_t *req = refresh_request(s);
    if (!req) {
        act_fail(s, SBX_FAILED, "internal", "cannot make the refresh request");
        return;
    }
    s->refresh_ok = false;
    s->refresh_err[0] = '\0';
    char err[128] = "";
    s->pending = agentc_open(s->agent, req, &refresh_ops, s, 0, err, sizeof err);
    json_decref(req);
    if (!s->pending)
        act_fail(s, SBX_FAILED, "agent_unavailable", "cannot send refresh to the agent: %s", err);
}

/* ---- VM callbacks ------------------------------------------------------------------- */

/* Whether the sandbox's suspend image is complete on disk (a restore can start from it). */
static bool suspend_image_kept(const struct sbx *s)
{
    char dir[SBX_PATH_MAX], meta[SBX_PATH_MAX + 32];
    sbx_path(s, "suspend", dir, sizeof dir);
    snprintf(meta, sizeof meta, "%s/snapshot.json", dir);
    return file_exists(meta);
}

static void on_vm_ready(struct vm *vm, int err, const char *msg, void *arg)
{
    struct sbx *s = arg;
    (void)vm;
    if (s->recovering) {
        if (err == VM_OK && s->state == SBX_RESTORING && vm_state(vm) == VM_STATE_PAUSED &&
            suspend_image_kept(s)) {
            /* spaced died between starting the restore's QEMU and continuing it: the guest
             * never ran again (its state may not even be loaded), and the saved image is
             * intact. The VM is ended and the sandbox is suspended again, so its restore
             * or wake starts over from the image; taken for paused, it waited for an
             * agent that never came (chaos test: restore failed with agent_timeout). */
            log_warn("sandbox.recover", "sandbox=%s adopt=half_restored action=restore_again", s->rec.id);
            sbx_set_state(s, SBX_SUSPENDED, NULL);
            vm_kill(vm); /* on_exit ends the recovery */
            return;
        }
        if (err == VM_OK) {
            s->recovering = false;
            sbx_set_state(s, vm_state(vm) == VM_STATE_PAUSED ? SBX_PAUSED : SBX_RUNNING, NULL);
            log_info("sandbox.adopted", "sandbox=%s pid=%d", s->rec.id, (int)vm_pid(vm));
            op_reconcile_soon(s->sp);
        }
        return; /* on error on_exit follows and settles the state */
    }
    if (err != VM_OK)
        log_warn("sandbox.vm", "sandbox=%s event=ready_failed code=%s", s->rec.id,
                 vm_error_code(err));
    (void)msg; /* the failure is reported by on_exit, which always follows */
}

/* A HELLO sent to a just-restored guest can be lost (vm_greet.h): while an action waits
 * for a restored agent, a connection not answered within VMG_RETRY_MS is replaced by a
 * fresh one with a new HELLO, until the action's own deadline (SBX_AGENT_TIMEOUT_S,
 * s->timer: so no attempt limit and no deadline here, and a refused reconnect is left to
 * that deadline). A cold boot is not retried: its agent is simply not up yet. */
static void on_hello_retry(void *arg, struct vm *vm)
{
    struct sbx *s = arg;
    (void)vm;
    log_warn("sandbox.agent", "sandbox=%s event=hello_retry msg=\"no HELLO from the restored "
             "agent within %d s: reconnecting\"", s->rec.id, VMG_RETRY_MS / 1000);
    s->pending = NULL;
    sbx_agent_free(s);
    s->agent = NULL; /* then on_vm_agent: new connection, HELLO, vmg_sent */
}

static const struct vmg_ops sbx_greet_ops = {on_hello_retry, NULL};
static const struct vmg_params sbx_greet = {VMG_RETRY_MS, 0, 0};

static void on_vm_agent(struct vm *vm, int fd, void *arg)
{
    struct sbx *s = arg;
    (void)vm;
    sbx_agent_free(s);
    s->agent_ready = false;
    s->pending = NULL;
    s->agent = agentc_new(s->sp->base, fd, &sbx_agent_cbs, s);
    if (s->restored && s->op_id[0]) {
        if (!s->greet)
            s->greet = vmg_new(s->sp->base, &sbx_greet_ops, s);
        if (s->greet && !vmg_active(s->greet))
            vmg_begin(s->greet, vm, &sbx_greet);
        if (s->greet)
            vmg_sent(s->greet);
    }
    /* A claimed pool clone's agent is warm and alive (it answered the pool's HELLO): the
     * refresh follows spaced's HELLO on the wire without waiting for the answer (the
     * agent handles frames in order), one guest round trip fewer on the claim path.
     * Not on a restored clone: its HELLO can be lost (vm_greet.h), or answered after the
     * retry, and the agent's output for a refresh sent on the dropped connection then
     * reaches the fresh one (one virtio-serial stream), which spaced takes for a
     * protocol breach (tried: "EVENT for unknown channel 1" at load 28, and a command
     * started in between hung). */
    if (s->create && s->create->how && strcmp(s->create->how, "pool") == 0 &&
        s->op_id[0] && s->op_kind == OP_CREATE && s->state == SBX_CREATING && s->agent)
        send_refresh(s);
}

static void start_vm(struct sbx *s, const char *snapshot_dir);
static void act_create(struct sbx *s);
static bool wants_network(const struct sbx *s);

static void finish_delete(struct sbx *s)
{
    char p[SBX_PATH_MAX];
    /* Only a sandbox that ever got a NIC has network state to release (this also keeps
     * deletes from bringing the network module up for nothing). */
    sbx_path(s, "net.claimed", p, sizeof p);
    if (file_exists(p) && net_get(s->sp))
        net_release(net_get(s->sp), s->rec.id);
    sbx_path(s, NULL, p, sizeof p);
    spaced_rm_rf(p);
    spaced_rm_rf(s->rec.run_dir);
    sbx_set_desired(s, SBX_DELETED);
    sbx_set_state(s, SBX_DELETED, NULL);
    act_end(s, true, NULL, NULL);
    sbx_table_remove(s->sp, s);
}

static void on_vm_exit(struct vm *vm, enum vm_exit_reason reason, const char *msg,
                       const char *tail, void *arg)
{
    struct sbx *s = arg;
    (void)vm;
    s->vm = NULL;
    if (s->greet)
        vmg_stop(s->greet); /* it holds the VM, which is freed after this */
    sbx_agent_free(s);
    s->agent = NULL;
    s->agent_ready = false;
    s->pending = NULL;
    log_info("sandbox.vm", "sandbox=%s event=exit reason=%s", s->rec.id,
             vm_exit_reason_name(reason));
    if (s->recovering) {
        s->recovering = false;
        if (!s->op_id[0] && s->state != SBX_CREATING && s->state != SBX_DELETING && s->state != SBX_SUSPENDED)
            sbx_set_state(s, SBX_FAILED, "the VM stopped while spaced was restarting");
        op_reconcile_soon(s->sp);
        return;
    }
    if (s->op_id[0] && s->expect_exit) {
        switch (s->op_kind) {
        case OP_DELETE: finish_delete(s); return;
        case OP_STOP: act_ok(s, SBX_STOPPED); return;
        case OP_SUSPEND:
            if (reason == VM_EXIT_SAVED)
                act_ok(s, SBX_SUSPENDED);
            else
                act_fail(s, SBX_FAILED, "vm_failed", "the VM exited while suspending: %s",
                         msg ? msg : vm_exit_reason_name(reason));
            return;
        case OP_CREATE: /* the adopted half-created VM is gone: start over */
            s->expect_exit = false;
            act_create(s);
            return;
        default:
            if (s->state == SBX_FAILED) {
                s->expect_exit = false;
                return;
            }
            break;
        }
    }
    char why[1536];
    snprintf(why, sizeof why, "VM %s: %s%s%.1000s", vm_exit_reason_name(reason),
             msg ? msg : "no message", tail && tail[0] ? "; console: " : "", tail ? tail : "");
    if (s->op_id[0] && s->op_kind == OP_CREATE && s->restored && !s->cold_fallback) {
        /* The template snapshot did not restore here: boot the clone's disk cold. */
        log_warn("sandbox.vm", "sandbox=%s event=restore_failed fallback=cold_boot", s->rec.id);
        s->cold_fallback = true;
        start_vm(s, NULL);
        return;
    }
    if (s->op_id[0]) {
        act_fail(s, SBX_FAILED, "vm_failed", "%s", why);
        return;
    }
    if (s->state != SBX_FAILED && s->state != SBX_STOPPED && s->state != SBX_SUSPENDED)
        sbx_set_state(s, SBX_FAILED, why);
}

static const struct vm_callbacks sbx_vm_cbs = {on_vm_ready, on_vm_agent, on_vm_exit};

static void on_agent_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct sbx *s = arg;
    (void)fd;
    (void)what;
    char tail[600] = "";
    if (s->vm) /* what the guest printed says why (no agent in its image, a panic...) */
        vm_console_tail(s->vm, tail, sizeof tail);
    if (s->op_id[0])
        act_fail(s, SBX_FAILED, "agent_timeout", "the guest agent did not answer within %d s%s%s",
                 SBX_AGENT_TIMEOUT_S, tail[0] ? "; console: " : "", tail);
}

static void arm_agent_timeout(struct sbx *s)
{
    if (!s->timer)
        s->timer = evtimer_new(s->sp->base, on_agent_timeout, s);
    struct timeval tv = {SBX_AGENT_TIMEOUT_S, 0};
    if (s->timer)
        event_add(s->timer, &tv);
}

/* ---- starting a VM ---------------------------------------------------------------- */

/* Notes in the sandbox's directory that it has network state for delete to release. */
static void mark_net_claimed(struct sbx *s)
{
    char marker[SBX_PATH_MAX];
    sbx_path(s, "net.claimed", marker, sizeof marker);
    int fd = open(marker, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (fd >= 0)
        close(fd);
}

/* True unless the sandbox's network policy is "none" (no NIC, no namespace). */
static bool wants_network(const struct sbx *s) { return sbx_policy_nic(s->rec.network_json); }

/* Where an action whose VM could not get its network leaves the sandbox: nothing of the
 * VM started, so a start or a restore leaves it as it was (a suspended sandbox keeps its
 * image for a later restore); a create fails. */
static enum sbx_state net_fail_state(const struct sbx *s)
{
    if (s->op_kind == OP_CREATE)
        return SBX_FAILED;
    if (s->state == SBX_RESTORING)
        return SBX_SUSPENDED;
    if (s->state == SBX_STARTING)
        return SBX_STOPPED;
    return SBX_FAILED;
}

/* The gateway did not come back within SBX_GW_WAIT_MS (sbx_gwwait.c). A create leaves no
 * network state behind (a claim may have made its record and namespace before the
 * gateway died; the gateway is down, so the detach costs nothing). */
static void fail_no_gateway(struct sbx *s)
{
    struct net *n = net_get(s->sp);
    if (s->op_kind == OP_CREATE && n)
        net_release(n, s->rec.id);
    act_fail(s, net_fail_state(s), "gateway_unavailable",
             "the network gateway is down and did not come back within %d s (spaced restarts "
             "it; see spaced's log): the sandbox's VM was not started; try again",
             SBX_GW_WAIT_MS / 1000);
}

/* Before a VM with a NIC starts: true to go on; false when the action waits for the
 * gateway (start_vm runs again, sbx_gwwait.c) or failed because it stayed down. */
static bool gateway_ready(struct sbx *s, const char *snapshot_dir)
{
    switch (sbx_gw_check(s, snapshot_dir, start_vm)) {
    case SBX_GW_GO: return true;
    case SBX_GW_WAIT: return false;
    default: fail_no_gateway(s); return false;
    }
}

/* The net stage before a spawn: the NIC for the VM, a tap inside the sandbox's own
 * namespace with the gateway attached (net.h); none (tap_fd -1) for policy none. A
 * gateway that died after gateway_ready said it was up is waited for as there.
 * Returns 0, or -1 after failing the action or while it waits. */
static int stage_net(struct sbx *s, struct net_lease *lease, const char *snapshot_dir)
{
    lease->tap_fd = -1;
    if (!wants_network(s))
        return 0;
    stage_begin(s, CS_NET);
    struct net *n = net_get(s->sp);
    struct spaced_err e;
    if (!n) {
        act_fail(s, net_fail_state(s), "network_unavailable",
                 "sandbox networking is not available on this host (see spaced's log)");
        return -1;
    }
    if (net_claim(n, s->rec.id, s->rec.tenant, s->rec.network_json, lease, &e) < 0) {
        if (strcmp(e.code, "gateway_unavailable") != 0 || gateway_ready(s, snapshot_dir))
            act_fail(s, net_fail_state(s), e.code, "%s", e.message); /* up, yet refused */
        return -1;
    }
    mark_net_claimed(s);
    stage_end(s, CS_NET);
    return 0;
}

/* Boots (snapshot_dir NULL) or restores the sandbox's VM on its disk, then waits for the
 * agent (act_continue_after_agent sends refresh). In a create this is the net stage,
 * then the vm stage (until the agent's HELLO). */
static void start_vm(struct sbx *s, const char *snapshot_dir)
{
    if (wants_network(s) && !gateway_ready(s, snapshot_dir))
        return;
    struct vm_config cfg;
    memset(&cfg, 0, sizeof cfg);
    struct spaced_err e;
    if (tpl_vm_base(s->sp, &cfg, &e) < 0) {
        act_fail(s, SBX_FAILED, e.code, "%s", e.message);
        return;
    }
    char disk[SBX_PATH_MAX];
    sbx_path(s, "disk.qcow2", disk, sizeof disk);
    struct sbx_chain chain;
    if (s->create && s->create->chain.n) /* a create has it in memory */
        chain = s->create->chain;
    else if (sbx_chain_load(s, &chain) < 0) {
        act_fail(s, SBX_FAILED, "disk_missing", "the sandbox's disk chain (backing.json) is unreadable");
        return;
    }
    for (unsigned i = 0; i < chain.n; i++) {
        cfg.backing[i].path = chain.path[i];
        cfg.backing[i].format = chain.format[i];
    }
    cfg.n_backing = chain.n;
    if (spaced_mkdir_p(s->rec.run_dir) < 0) {
        act_fail(s, SBX_FAILED, "host_io", "cannot create %s: %s", s->rec.run_dir, strerror(errno));
        return;
    }
    cfg.id = s->rec.id;
    cfg.vcpus = s->rec.vcpus;
    cfg.mem_mib = s->rec.memory_mib;
    jail_fill(s->sp, &cfg);
    cfg.disk = disk;
    cfg.run_dir = s->rec.run_dir;
    struct net_lease lease;
    if (stage_net(s, &lease, snapshot_dir) < 0)
        return;
    if (lease.tap_fd >= 0) {
        cfg.net.tap_fd = lease.tap_fd;
        cfg.net.mac = lease.mac;
    }
    int verr = 0;
    char msg[256] = "";
    s->restored = snapshot_dir != NULL;
    if (s->create)
        s->create->how = snapshot_dir ? "restore" : "boot";
    stage_begin(s, CS_VM);
    int64_t t0 = clock_mono_us();
    s->vm = snapshot_dir
                ? vm_restore(s->sp->base, &cfg, snapshot_dir, 0, &sbx_vm_cbs, s, &verr, msg, sizeof msg)
                : vm_boot(s->sp->base, &cfg, &sbx_vm_cbs, s, &verr, msg, sizeof msg);
    if (s->create)
        s->create->spawn_us += clock_mono_us() - t0;
    if (lease.tap_fd >= 0)
        close(lease.tap_fd); /* QEMU holds its own copy from the spawn */
    if (!s->vm) {
        if (snapshot_dir && s->op_kind == OP_CREATE && !s->cold_fallback) {
            s->cold_fallback = true;
            start_vm(s, NULL);
            return;
        }
        /* A suspend image of another runtime is intact: the sandbox stays suspended. */
        enum sbx_state to = verr == VM_E_INCOMPATIBLE && s->state == SBX_RESTORING ? SBX_SUSPENDED : SBX_FAILED;
        act_fail(s, to, vm_error_code(verr), "cannot start the VM: %s", msg[0] ? msg : vm_error_code(verr));
        return;
    }
    arm_agent_timeout(s);
}

/* The agent said hello: if an action waits for it, refresh the guest. */
static void act_continue_after_agent(struct sbx *s)
{
    if (!s->op_id[0] || s->pending)
        return;
    if (s->refresh_after && s->op_kind == OP_CREATE && s->state == SBX_CREATING) {
        refresh_done(s); /* a claimed clone's refresh went out right behind the HELLO */
        return;
    }
    switch (s->op_kind) {
    case OP_CREATE:
    case OP_START:
    case OP_RESTORE:
    case OP_WAKE:
        if (s->state == SBX_CREATING || s->state == SBX_STARTING || s->state == SBX_RESTORING)
            send_refresh(s);
        break;
    default: break;
    }
}

/* ---- create ------------------------------------------------------------------------- */

/* A fresh stage record for a create (sbx_act); the engine's queueing time is the record's
 * age, since a new sandbox row carries its op's creation time. */
static void create_begin(struct sbx *s)
{
    free(s->create);
    s->create = calloc(1, sizeof *s->create);
    if (!s->create)
        return; /* act_create fails it */
    s->create->start_us = clock_mono_us();
    int64_t q = spaced_now_ms() - s->rec.created_ms;
    s->create->queued_ms = q > 0 && !s->recovering ? q : 0;
}

/* The create's progress (10 %): its store write counts as persist time, not as time of
 * the stages it interrupts. */
static void progress_write(struct sbx *s, const char *detail)
{
    bool was[CS_COUNT] = {false};
    for (int st = 0; s->create && st < CS_COUNT; st++)
        if ((was[st] = s->create->began_us[st] != 0))
            stage_end(s, (enum create_stage)st);
    stage_begin(s, CS_PERSIST);
    op_progress(s->sp, s->op_id, 10, detail);
    stage_end(s, CS_PERSIST);
    for (int st = 0; st < CS_COUNT; st++)
        if (was[st])
            stage_begin(s, (enum create_stage)st);
}

/* The template's image fetched from another node (tpl_fetch): the create starts over
 * with it here, or fails with the fetch's error (nothing was booted). */
static void on_template_fetched(void *arg, const struct spaced_err *err)
{
    struct sbx *s = arg;
    if (err) {
        act_fail(s, SBX_FAILED, err->code, "%s", err->message);
        return;
    }
    act_create(s);
}

/* The parts of a snapshot taken on another node are here now (sbx_travel.c), or not:
 * the same. */
static void on_snapshot_fetched(struct sbx *s, const struct spaced_err *err)
{
    on_template_fetched(s, err);
}

/* Template stage: the template, the memory snapshot of this shape (none while it is not
 * built yet: cold boot) and the disk chain. Makes no file. 0; 1 while the template's
 * image is being fetched from another node (on_template_fetched goes on); -1 after
 * failing. */
static int stage_template(struct sbx *s, struct sbx_create *c)
{
    stage_begin(s, CS_TEMPLATE);
    struct spaced_err e;
    struct vm_config probe;
    memset(&probe, 0, sizeof probe);
    if (tpl_lookup_fetchable(s->sp, s->rec.tenant, s->rec.template_name, &c->t, &e) < 0 ||
        tpl_vm_base(s->sp, &probe, &e) < 0) { /* fail before making any file */
        act_fail(s, SBX_FAILED, e.code, "%s", e.message);
        return -1;
    }
    if (c->t.remote) {
        int r = tpl_fetch(s->sp, c->t.name, on_template_fetched, s, &e);
        if (r < 0) {
            act_fail(s, SBX_FAILED, e.code, "%s", e.message);
            return -1;
        }
        if (r == 0) {
            if (s->op_id[0] && s->op_kind == OP_CREATE)
                progress_write(s, "fetching the template's image from another node");
            return 1;
        }
        if (tpl_lookup(s->sp, s->rec.tenant, s->rec.template_name, &c->t, &e) < 0) {
            act_fail(s, SBX_FAILED, e.code, "%s", e.message);
            return -1;
        }
    }
    c->nic = wants_network(s);
    if (s->rec.source[0]) { /* a fork: its parent's capture, not the template's snapshot */
        int r = sbx_travel_need(s, on_snapshot_fetched, &e); /* a snapshot taken on another node */
        if (r != 0) {
            if (r < 0)
                act_fail(s, SBX_FAILED, e.code, "%s", e.message);
            else if (s->op_id[0] && s->op_kind == OP_CREATE)
                progress_write(s, "fetching the snapshot's parts from the node that took it");
            return r;
        }
        if (sbx_fork_source(s, c->snap, sizeof c->snap, &c->chain, &e) < 0) {
            act_fail(s, SBX_FAILED, e.code, "%s", e.message);
            return -1;
        }
        s->cold_fallback = true; /* a fork booted cold would not be a fork: no fallback */
        stage_end(s, CS_TEMPLATE);
        return 0;
    }
    if (!tpl_snapshot(s->sp, &c->t, s->rec.vcpus, s->rec.memory_mib, c->nic, c->snap,
                      sizeof c->snap, c->overlay, sizeof c->overlay))
        c->snap[0] = '\0';
    struct sbx_chain *ch = &c->chain;
    ch->n = 0;
    if (c->snap[0]) {
        snprintf(ch->path[ch->n], sizeof ch->path[0], "%s", c->overlay);
        snprintf(ch->format[ch->n++], sizeof ch->format[0], "qcow2");
    }
    snprintf(ch->path[ch->n], sizeof ch->path[0], "%s", c->t.rootfs);
    snprintf(ch->format[ch->n++], sizeof ch->format[0], "raw");
    stage_end(s, CS_TEMPLATE);
    return 0;
}

/* Disk stage, first half: a fresh sandbox directory (a create resumed after a crash
 * starts over: nothing of it was acknowledged) holding backing.json, and the network
 * marker before any network state can exist. 0, or -1 after failing. */
static int stage_disk_dir(struct sbx *s, struct sbx_create *c)
{
    stage_begin(s, CS_DISK);
    char dir[SBX_PATH_MAX];
    sbx_path(s, NULL, dir, sizeof dir);
    sbx_path(s, "disk.qcow2", c->disk, sizeof c->disk);
    spaced_rm_rf(dir);
    spaced_rm_rf(s->rec.run_dir);
    if (spaced_mkdir_p(dir) < 0) {
        act_fail(s, SBX_FAILED, "host_io", "cannot create %s: %s", dir, strerror(errno));
        return -1;
    }
    if (sbx_chain_save(s, &c->chain) < 0) {
        act_fail(s, SBX_FAILED, "host_io", "cannot write %s/backing.json", dir);
        return -1;
    }
    if (c->nic)
        mark_net_claimed(s); /* before a pooled claim can make network state */
    stage_end(s, CS_DISK);
    return 0;
}

/* Net stage after a pool claim: the pooled VM's namespace becomes the sandbox's and the
 * gateway gets the policy now, synchronously, before the create can report the sandbox
 * running. A failure kills the VM: on_vm_exit then boots the disk cold. */
static void stage_net_pooled(struct sbx *s, struct sbx_create *c)
{
    if (!c->nic || vm_state(s->vm) >= VM_STATE_STOPPING) /* the claim itself failed */
        return;
    stage_end(s, CS_VM);
    stage_begin(s, CS_NET);
    struct spaced_err e = {0};
    struct net *n = net_get(s->sp);
    if (!n || net_claim_from(n, s->rec.id, s->rec.tenant, s->rec.network_json, vm_id(s->vm), &e) < 0) {
        char q[400];
        log_warn("pool.claim", "sandbox=%s id=%s msg=%s", s->rec.id, vm_id(s->vm),
                 log_quote(n ? e.message : "networking unavailable", q, sizeof q));
        if (n)
            net_release(n, vm_id(s->vm)); /* the pooled VM's namespace */
        vm_kill(s->vm);
    }
    stage_end(s, CS_NET);
    stage_begin(s, CS_VM);
}

/* VM stage from the warm pool: a restored, warmed clone of this shape, whose overlay
 * becomes the sandbox's disk (no qemu-img), then the net stage. Waits for the agent like
 * a restore. False when the pool is off or empty: the caller restores. */
static bool stage_vm_pooled(struct sbx *s, struct sbx_create *c)
{
    if (!c->snap[0] || s->rec.source[0]) /* no pool of a fork's capture */
        return false;
    struct net *n = c->nic ? net_get(s->sp) : NULL;
    if (n && !net_gateway_up(n)) /* restore instead: start_vm waits for the gateway */
        return false;
    stage_begin(s, CS_VM);
    int64_t t0 = clock_mono_us();
    s->vm = sbx_pool_claim(s->sp, &s->rec, c->snap, c->nic, c->overlay, c->t.rootfs, c->disk,
                           &sbx_vm_cbs, s);
    c->spawn_us += clock_mono_us() - t0;
    if (!s->vm) {
        stage_end(s, CS_VM);
        return false;
    }
    c->how = "pool";
    s->restored = true;
    stage_net_pooled(s, c);
    stage_end(s, CS_VM);
    stage_begin(s, CS_PERSIST);
    /* The run dir is the pooled VM's: adoption after a restart of spaced must find it.
     * Written without an fsync (a SIGKILL keeps it, a host crash ends the VM it names);
     * the outcome's commit makes it durable. */
    sbx_persist_lazy(s);
    stage_end(s, CS_PERSIST);
    stage_begin(s, CS_VM); /* until the agent's HELLO */
    progress_write(s, "claimed a warm VM from the pool");
    arm_agent_timeout(s);
    return true;
}

static unsigned chain_layers(const struct sbx_chain *c, struct vm_disk_layer *layers)
{
    for (unsigned i = 0; i < c->n; i++)
        layers[i] = (struct vm_disk_layer){c->path[i], c->format[i]};
    return c->n;
}

static void on_disk_made(struct vm *unused, int err, const char *msg, void *arg)
{
    struct sbx *s = arg;
    (void)unused;
    stage_end(s, CS_DISK);
    struct sbx_create *c = s->create;
    if (!c)
        return;
    struct vm_disk_layer layers[VM_DISK_BACKING_MAX];
    if (err == VM_OK && !c->disk_copied) /* the next create of this chain copies it */
        vm_disk_overlay_remember(s->sp->sbx->disks, layers, chain_layers(&c->chain, layers),
                                 c->disk);
    if (err != VM_OK)
        act_fail(s, SBX_FAILED, vm_error_code(err), "cannot create the disk overlay: %s",
                 msg ? msg : vm_error_code(err));
    else
        start_vm(s, s->create->snap[0] ? s->create->snap : NULL); /* net stage, vm stage */
}

/* Disk stage, second half (no pool): the sandbox's qcow2 overlay over the chain, a copy
 * of the one qemu-img made for the previous create of this chain (vm.h: it depends only
 * on the chain), else made by qemu-img (asynchronous) and remembered; then on_disk_made
 * starts the VM. */
static void stage_disk_overlay(struct sbx *s, struct sbx_create *c)
{
    stage_begin(s, CS_DISK);
    struct vm_disk_layer layers[VM_DISK_BACKING_MAX];
    unsigned n = chain_layers(&c->chain, layers);
    struct sbx_table *t = s->sp->sbx;
    if (!t->disks)
        t->disks = vm_disk_protos_new();
    if (vm_disk_overlay_copy(t->disks, layers, n, c->disk) == VM_OK) {
        c->disk_copied = true;
        on_disk_made(NULL, VM_OK, NULL, s);
        return;
    }
    if (vm_disk_overlay_create(s->sp->base, layers, n, c->disk, on_disk_made, s, NULL) != 0)
        act_fail(s, SBX_FAILED, "host_io", "cannot start qemu-img for %s", c->disk);
}

/* template -> disk -> vm (pool, or restore / cold boot after net) -> agent HELLO ->
 * refresh (act_continue_after_agent) -> persist (refresh_close, act_ok). */
static void act_create(struct sbx *s)
{
    struct sbx_create *c = s->create;
    if (!c) {
        act_fail(s, SBX_FAILED, "internal", "out of memory");
        return;
    }
    if (stage_template(s, c) != 0 || stage_disk_dir(s, c) < 0 || stage_vm_pooled(s, c))
        return;
    bool snap = c->snap[0];
    stage_disk_overlay(s, c);
    /* After the VM (or qemu-img) started: the commit's fsync overlaps its work. */
    if (s->op_id[0] && s->op_kind == OP_CREATE)
        progress_write(s, snap ? "restoring from the template snapshot"
                               : "cold booting (template snapshot not built yet)");
}

/* ---- other verbs -------------------------------------------------------------------- */

static void on_paused(struct vm *vm, int err, const char *msg, void *arg)
{
    struct sbx *s = arg;
    (void)vm;
    if (err != VM_OK)
        act_fail(s, SBX_RUNNING, vm_error_code(err), "pause failed: %s", msg ? msg : "");
    else
        act_ok(s, SBX_PAUSED);
}

static void on_resumed(struct vm *vm, int err, const char *msg, void *arg)
{
    struct sbx *s = arg;
    (void)vm;
    if (err != VM_OK) {
        act_fail(s, SBX_PAUSED, vm_error_code(err), "resume failed: %s", msg ? msg : "");
        return;
    }
    if (s->rec.timeout_s && s->op_kind == OP_WAKE)
        s->rec.deadline_ms = spaced_now_ms() + s->rec.timeout_s * 1000;
    act_ok(s, SBX_RUNNING);
}

/* The state a sandbox whose suspend failed is in: its VM runs on as it was. */
static enum sbx_state suspend_back(const struct sbx *s)
{
    return s->vm && vm_state(s->vm) == VM_STATE_PAUSED ? SBX_PAUSED : SBX_RUNNING;
}

static void on_suspend_saved(struct vm *vm, int err, const char *msg, void *arg)
{
    struct sbx *s = arg;
    (void)vm;
    if (err != VM_OK)
        act_fail(s, suspend_back(s), vm_error_code(err), "suspend failed: %s", msg ? msg : "");
    /* success: on_exit(VM_EXIT_SAVED) follows and completes the op */
}

static void on_stopped(struct vm *vm, int err, const char *msg, void *arg)
{
    (void)vm;
    (void)arg;
    (void)err;
    (void)msg; /* on_exit follows either way (shutdown or kill) and completes the op */
}

static void act_stop(struct sbx *s)
{
    char dir[SBX_PATH_MAX];
    if (!s->vm) {
        sbx_path(s, "suspend", dir, sizeof dir);
        spaced_rm_rf(dir);
        act_ok(s, SBX_STOPPED);
        return;
    }
    sbx_set_state(s, SBX_STOPPING, NULL);
    s->expect_exit = true;
    if (vm_state(s->vm) == VM_STATE_PAUSED) {
        vm_kill(s->vm); /* a paused guest cannot shut itself down */
        return;
    }
    if (s->agent && s->agent_ready) {
        static const struct agentc_chan_ops ignore = {0};
        json_t *req = json_pack("{s:s}", "op", "shutdown");
        char err[64];
        /* Fire and forget: the VM's exit is what counts. */
        agentc_open(s->agent, req, &ignore, NULL, 0, err, sizeof err);
        json_decref(req);
    }
    if (vm_shutdown(s->vm, SBX_SHUTDOWN_TIMEOUT_MS, on_stopped, s) != 0)
        vm_kill(s->vm);
}

static void act_suspend(struct sbx *s)
{
    char dir[SBX_PATH_MAX];
    sbx_path(s, "suspend", dir, sizeof dir);
    if (!s->vm) {
        if (suspend_image_kept(s))
            act_ok(s, SBX_SUSPENDED); /* finished before a restart */
        else
            act_fail(s, SBX_FAILED, "vm_gone", "cannot suspend: the VM is not running");
        return;
    }
    spaced_rm_rf(dir);
    char room[400];
    int rc = vm_save_room(s->vm, dir, 0, room, sizeof room);
    if (rc != VM_OK) {
        act_fail(s, suspend_back(s), vm_error_code(rc), "suspend failed: %s", room);
        return;
    }
    sbx_set_state(s, SBX_SUSPENDING, NULL);
    s->expect_exit = true;
    if (vm_suspend(s->vm, dir, on_suspend_saved, s) != 0)
        act_fail(s, suspend_back(s), "vm_busy", "the VM refused to suspend now");
}

static void act_restore(struct sbx *s)
{
    char dir[SBX_PATH_MAX];
    sbx_path(s, "suspend", dir, sizeof dir);
    if (s->vm) { /* restored before a restart and adopted */
        sbx_set_state(s, SBX_RESTORING, NULL);
        if (s->agent_ready)
            send_refresh(s);
        else
            arm_agent_timeout(s);
        return;
    }
    /* Checked at submit too (sbx_submit); again here for an op queued before a restart
     * of spaced under another runtime. */
    char what[STORE_ID_MAX + 40];
    struct spaced_err e;
    snprintf(what, sizeof what, "the saved state of sandbox %s", s->rec.id);
    if (sbx_runtime_check_dir(s->sp, dir, what, &e) < 0) {
        act_fail(s, SBX_SUSPENDED, e.code, "%s", e.message);
        return;
    }
    sbx_set_state(s, SBX_RESTORING, NULL);
    start_vm(s, dir);
}

static void act_start(struct sbx *s)
{
    if (s->vm) {
        sbx_set_state(s, SBX_STARTING, NULL);
        if (s->agent_ready)
            send_refresh(s);
        else
            arm_agent_timeout(s);
        return;
    }
    char disk[SBX_PATH_MAX];
    sbx_path(s, "disk.qcow2", disk, sizeof disk);
    if (!file_exists(disk)) {
        act_fail(s, SBX_FAILED, "disk_missing", "the sandbox disk %s is gone", disk);
        return;
    }
    sbx_set_state(s, SBX_STARTING, NULL);
    start_vm(s, NULL);
}

static void act_delete(struct sbx *s)
{
    sbx_set_state(s, SBX_DELETING, NULL);
    if (s->vm) {
        s->expect_exit = true;
        if (vm_state(s->vm) < VM_STATE_STOPPING)
            vm_kill(s->vm);
        return; /* on_exit -> finish_delete */
    }
    finish_delete(s);
}

/* The files of a sandbox moved here arrived (sbx_move.c): the verb goes on; or they did
 * not, and it fails with the sandbox as it was. Bytes other than the old node recorded,
 * or a state another VM runtime saved (vm/vm_sig.h), give the sandbox back to that node,
 * which can still restore it. */
static void on_moved_in(struct sbx *s, const struct spaced_err *err)
{
    if (!err) {
        char op[STORE_ID_MAX];
        snprintf(op, sizeof op, "%s", s->op_id);
        sbx_act(s->sp, s, s->op_kind, op);
        return;
    }
    bool back = strstr(err->code, "digest_mismatch") != NULL || strcmp(err->code, "snapshot_incompatible") == 0;
    act_fail(s, s->state, err->code, "%s%s", err->message,
             back ? "; the sandbox stays on the node it came from: run the verb again" : "");
    if (back)
        sbx_move_hand_back(s); /* s may be freed */
}

void sbx_act(struct spaced *sp, struct sbx *s, enum op_kind kind, const char *op_id)
{
    (void)sp;
    snprintf(s->op_id, sizeof s->op_id, "%s", op_id);
    s->op_kind = kind;
    s->expect_exit = false;
    s->cold_fallback = false;
    sbx_gw_reset(s);
    bool has_vm = s->vm != NULL;
    enum vm_state vs = has_vm ? vm_state(s->vm) : VM_STATE_EXITED;
    sbx_move_op_begins(s);
    if (!has_vm && (kind == OP_RESTORE || kind == OP_START || kind == OP_WAKE)) {
        struct spaced_err e;
        int m = sbx_move_need(s, on_moved_in, &e);
        if (m < 0)
            on_moved_in(s, &e); /* fails the verb (and may hand the sandbox back) */
        if (m != 0)
            return; /* failed, or on_moved_in goes on */
    }
    switch (kind) {
    case OP_CREATE:
        create_begin(s);
        if (s->state != SBX_CREATING) /* the new row says creating already */
            sbx_set_state(s, SBX_CREATING, NULL);
        if (has_vm) { /* adopted half-created VM: end it, on_exit starts over */
            s->expect_exit = true;
            if (vs < VM_STATE_STOPPING)
                vm_kill(s->vm);
            return;
        }
        act_create(s);
        return;
    case OP_DELETE: act_delete(s); return;
    case OP_STOP: act_stop(s); return;
    case OP_START: act_start(s); return;
    case OP_PAUSE:
        if (has_vm && vs == VM_STATE_PAUSED) {
            act_ok(s, SBX_PAUSED);
        } else if (has_vm && vs == VM_STATE_RUNNING) {
            sbx_set_state(s, SBX_PAUSING, NULL);
            if (vm_pause(s->vm, on_paused, s) != 0)
                act_fail(s, SBX_RUNNING, "vm_busy", "the VM refused to pause now");
        } else {
            act_fail(s, s->state, "invalid_state", "cannot pause: the sandbox is %s",
                     sbx_state_name(s->state));
        }
        return;
    case OP_RESUME:
        if (has_vm && vs == VM_STATE_RUNNING) {
            act_ok(s, SBX_RUNNING);
        } else if (has_vm && vs == VM_STATE_PAUSED) {
            sbx_set_state(s, SBX_RESUMING, NULL);
            if (vm_resume(s->vm, on_resumed, s) != 0)
                act_fail(s, SBX_PAUSED, "vm_busy", "the VM refused to resume now");
        } else {
            act_fail(s, s->state, "invalid_state", "cannot resume: the sandbox is %s",
                     sbx_state_name(s->state));
        }
        return;
    case OP_SUSPEND: act_suspend(s); return;
    case OP_RESTORE:
        if (s->state == SBX_SUSPENDED || s->state == SBX_RESTORING || has_vm)
            act_restore(s);
        else
            act_fail(s, s->state, "invalid_state", "cannot restore: the sandbox is %s",
                     sbx_state_name(s->state));
        return;
    case OP_WAKE:
        if (has_vm && vs == VM_STATE_RUNNING && s->state == SBX_RUNNING)
            act_ok(s, SBX_RUNNING);
        else if (has_vm && vs == VM_STATE_PAUSED) {
            sbx_set_state(s, SBX_RESUMING, NULL);
            if (vm_resume(s->vm, on_resumed, s) != 0)
                act_fail(s, SBX_PAUSED, "vm_busy", "the VM refused to resume now");
        } else if (s->state == SBX_SUSPENDED)
            act_restore(s);
        else
            act_start(s);
        return;
    default:
        act_fail(s, s->state, "internal", "%s is not a sandbox action", op_kind_name(kind));
        return;
    }
}

/* ---- recovery ----------------------------------------------------------------------- */

void sbx_recover(struct spaced *sp, struct sbx *s)
{
    char vmjson[SBX_PATH_MAX + 16];
    snprintf(vmjson, sizeof vmjson, "%s/vm.json", s->rec.run_dir);
    switch (s->state) {
    case SBX_STOPPED:
    case SBX_SUSPENDED:
        sbx_move_record(s); /* a restart may have ended its hashing */
        return;
    case SBX_FAILED:
    case SBX_DELETED:
        return;
    default: break;
    }
    if (file_exists(vmjson)) {
        int verr = 0;
        char msg[256] = "";
        s->recovering = true;
        s->vm = vm_adopt(sp->base, sp->jailer, s->rec.run_dir, &sbx_vm_cbs, s, &verr, msg, sizeof msg);
        if (s->vm)
            return; /* on_ready / on_exit settle the state */
        s->recovering = false;
        log_info("sandbox.recover", "sandbox=%s adopt=failed code=%s", s->rec.id,
                 vm_error_code(verr));
    }
    /* Not adopted: a QEMU started just before a crash (vm.json not yet written, or a
     * stale one) may still run. It would hold its memory forever; nothing can use it. */
    vm_kill_strays(s->rec.id);
    /* No VM: decide from what is on disk. Creates and deletes are redone by their op. */
    switch (s->state) {
    case SBX_CREATING:
    case SBX_DELETING:
        return;
    case SBX_SUSPENDING:
    case SBX_RESTORING:
        if (suspend_image_kept(s)) {
            sbx_set_state(s, SBX_SUSPENDED, NULL);
            return;
        }
        break;
    case SBX_STOPPING:
    case SBX_STARTING:
        sbx_set_state(s, SBX_STOPPED, NULL);
        return;
    default: break;
    }
    sbx_set_state(s, SBX_FAILED, "the VM was no longer running when spaced restarted");
}

/* ---- reconciler backstop -------------------------------------------------------------- */

void sbx_reconcile(struct spaced *sp, struct sbx *s)
{
    (void)sp;
    if (sbx_busy(s))
        return;
    bool vm_up = s->vm && vm_state(s->vm) <= VM_STATE_PAUSED;
    enum sbx_state vm_is = vm_up && vm_state(s->vm) == VM_STATE_PAUSED ? SBX_PAUSED : SBX_RUNNING;
    switch (s->state) {
    case SBX_STOPPED:
    case SBX_SUSPENDED:
    case SBX_FAILED:
    case SBX_DELETED:
        break;
    case SBX_RUNNING:
        if (vm_up && vm_is == SBX_RUNNING && !s->agent && vm_state(s->vm) == VM_STATE_RUNNING)
            vm_agent_reconnect(s->vm);
        /* fall through */
    default:
        if (!vm_up && !s->vm) {
            char why[96];
            snprintf(why, sizeof why, "the VM is gone (sandbox was %s with no operation)",
                     sbx_state_name(s->state));
            sbx_set_state(s, SBX_FAILED, why);
        } else if (vm_up && s->state != vm_is) {
            sbx_set_state(s, vm_is, NULL);
        }
        break;
    }
    if (s->desired != s->state && s->state != SBX_FAILED) {
        sbx_set_desired(s, s->state);
        sbx_persist(s);
    }
}
