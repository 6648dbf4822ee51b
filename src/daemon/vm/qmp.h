/* qmp: asynchronous QMP (QEMU Machine Protocol) client on a libevent loop.
 *
 * One client per QEMU monitor socket. It waits for the greeting, negotiates
 * capabilities, then sends commands tagged with numeric ids and matches replies to them;
 * asynchronous events (STOP, RESUME, SHUTDOWN, MIGRATION, ...) go to an event handler.
 *
 * Trust: QEMU runs the guest, so a compromised QEMU is a guest. Every line from the
 * monitor is bounded (QMP_LINE_MAX), parsed with qmp_parse() and its JSON shape checked
 * before use; anything malformed closes the connection with a reason (the VM layer then
 * treats the VM as crashed). The parser is separate from the I/O so it can be fuzzed.
 */
#ifndef SPACE_QMP_H
#define SPACE_QMP_H

#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

struct event_base;
struct qmp;

#define QMP_LINE_MAX (64 * 1024) /* longest monitor line accepted (our replies are small) */

/* ---- parser ------------------------------------------------------------------------- */

enum qmp_kind {
    QMP_MSG_GREETING, /* {"QMP": {"version": {...}, "capabilities": [...]}} */
    QMP_MSG_RETURN,   /* {"return": <any>, "id": <uint>} */
    QMP_MSG_ERROR,    /* {"error": {"class": str, "desc": str}, "id": <uint>} */
    QMP_MSG_EVENT,    /* {"event": str, "timestamp": {...}, "data": {...}?} */
};

/* One parsed line. `root` owns the JSON; the other pointers borrow from it. */
struct qmp_msg {
    enum qmp_kind kind;
    json_t *root;          /* owned: release with qmp_msg_clear() */
    int has_id;            /* replies: 1 if an id we could have sent (uint) is present */
    uint64_t id;           /* replies: the id */
    json_t *ret;           /* RETURN: the value (borrowed) */
    const char *err_class; /* ERROR: class, e.g. "GenericError" (borrowed) */
    const char *err_desc;  /* ERROR: human description (borrowed) */
    const char *event;     /* EVENT: name (borrowed) */
    json_t *data;          /* EVENT: data object or NULL (borrowed) */
};

/* Parses one line (without its newline). Returns 0 and fills *m, or -1 with a reason in
 * err[cap] (too long, not JSON, wrong shape). Never reads beyond line[len]. */
int qmp_parse(const char *line, size_t len, struct qmp_msg *m, char *err, size_t errlen);
void qmp_msg_clear(struct qmp_msg *m);

/* ---- client ------------------------------------------------------------------------- */

/* Reply to a command: err is 0 (ret = the "return" value, borrowed for the call) or a
 * vm_error code (VM_E_QMP with QEMU's error description, VM_E_TIMEOUT, VM_E_EXITED when
 * the connection closed first) with a human message. */
typedef void (*qmp_reply_cb)(struct qmp *q, int err, const char *msg, json_t *ret,
                             void *arg);

struct qmp_handlers {
    /* Greeting received and qmp_capabilities accepted: commands may be sent (commands
     * sent earlier are queued and go out after negotiation). */
    void (*on_ready)(struct qmp *q, void *arg);
    /* An event; data may be NULL. */
    void (*on_event)(struct qmp *q, const char *event, json_t *data, void *arg);
    /* The connection is gone (EOF, error, protocol violation). Pending commands have
     * already received VM_E_EXITED. The client must still be freed with qmp_free(). */
    void (*on_close)(struct qmp *q, const char *why, void *arg);
};

/* Takes ownership of fd (a connected unix socket to the monitor). */
struct qmp *qmp_new(struct event_base *base, int fd, const struct qmp_handlers *h,
                    void *arg);

/* Sends `cmd` with `args` (object or NULL; the reference is stolen). With pass_fd >= 0
 * the descriptor is sent along with the command (SCM_RIGHTS), as `getfd` and `add-fd`
 * expect; the caller keeps its own copy. timeout_ms > 0 fails the command with
 * VM_E_TIMEOUT if no reply comes in time (the connection stays usable; a late reply is
 * dropped). cb may be NULL (reply ignored). Returns 0, or -1 if the connection is closed or the monitor is not reading
 * (cb is then not called). */
int qmp_command(struct qmp *q, const char *cmd, json_t *args, int pass_fd,
                unsigned timeout_ms, qmp_reply_cb cb, void *arg);

int qmp_is_ready(const struct qmp *q);

/* Closes the socket and frees the client. Pending callbacks are dropped silently: the
 * owner is tearing down and expects no more calls. */
void qmp_free(struct qmp *q);

#endif
