/* e2b_internal: state shared by the files of the E2B layer (not for other modules).
 *
 * Ownership in one picture:
 *   struct e2b (one per daemon, lives until exit)
 *     -> struct e2b_box per sandbox that has envd state (processes the SDK started,
 *        polling watchers); freed when the sandbox is deleted.
 *   struct e2b_call per envd request: created by the hook, freed when its reply is
 *     finished (e2b_call_reply / e2b_call_fail / e2b_stream_finish) or when the client
 *     goes away (http on_close -> the method's cancel callback, then free).
 * Method implementations that outlive a call (a process keeps running after its Start
 * stream is cancelled) keep their own objects and only point at calls they subscribe. */
#ifndef SPACE_E2B_INTERNAL_H
#define SPACE_E2B_INTERNAL_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "daemon/http/http.h"
#include "daemon/spaced.h"
#include "daemon/store/store.h"
#include "e2b.h"
#include "e2b_error.h"

#define E2B_ENVD_VERSION "0.6.4"   /* envd feature level we implement (protocol doc §6) */
#define E2B_DEFAULT_USER "user"    /* the SDK's default user; home /home/user */
#define E2B_USER_MAX 64
#define E2B_HIGH_WATER (1024u * 1024) /* bytes queued before we stop reading a producer */
#define E2B_TOKEN_EXPIRES_MS 4102444800000LL /* 2100-01-01: tokens live as long as the box */

struct agentc;
struct evconnlistener;
struct e2b_proc;
struct e2b_watcher;

/* Every pipe of one e2b context (e2b_portlisten.c): the listener's connections and the
 * ones adopted after an upgrade on spaced's own port. */
struct pl_conn;
struct rl_table;
struct e2b_pipes {
    unsigned n;              /* open pipes, at most PL_MAX_CONNS */
    struct pl_conn *all;     /* every one of them (list) */
    struct rl_table *rl;     /* new listener connections per address; NULL: --rate 0 */
    unsigned idle_s;         /* --proxy-idle-timeout; 0 = none */
};

struct auth_principal;

/* A route that takes a JSON body: which state and which function (e2b_api.c). */
struct e2b_body_route {
    struct e2b *e;
    void (*fn)(struct e2b *e, struct http_req *req, struct auth_principal *who, json_t *body,
               const char *raw, size_t len);
};

/* The E2B module's state: one per spaced, reached as sp->e2b (e2b_register), freed at
 * shutdown by the router (e2b_free). */
struct e2b {
    struct spaced *sp;
    char domain[256];        /* returned as `domain` in Sandbox objects; "" -> null */
    char port_listen[128];   /* SPACE_E2B_PORT_LISTEN address, "" when not listening */
    struct evconnlistener *listener; /* its listener (owned; lives as long as spaced) */
    struct e2b_box *boxes;   /* envd state per sandbox (list) */
    struct e2b_pipes pipes;  /* sandbox-port pipes (e2b_portlisten.c) */
    struct e2b_body_route create, timeout, refresh, pause, connect, resume, network;
};

struct e2b_box {
    struct e2b *e;
    char id[STORE_ID_MAX];
    struct e2b_proc *procs;        /* processes we hold a channel for (e2b_proc.c) */
    struct e2b_watcher *watchers;  /* CreateWatcher watchers (e2b_fs.c) */
    struct e2b_box *next;
};

struct e2b_call;
typedef void (*e2b_method_fn)(struct e2b_call *c);

/* One envd RPC method. */
struct e2b_method {
    const char *path;   /* "/process.Process/Start" */
    bool streaming;     /* server-streaming (connect+json envelopes) or unary */
    e2b_method_fn fn;
};

/* One envd request. */
struct e2b_call {
    struct e2b *e;
    struct http_req *req;
    struct e2b_box *box;
    char user[E2B_USER_MAX];   /* requested user or the default */
    char home[E2B_USER_MAX + 16];
    const struct e2b_method *m;
    json_t *msg;               /* the request message (owned) */
    bool head_sent;            /* streaming: 200 + content type sent */
    struct event *keepalive;   /* streaming: periodic keepalive message */
    struct event *deadline;    /* streaming: Connect-Timeout-Ms */
    /* Set by the method: runs once if the call dies before it finished (client gone or
     * deadline), so the method drops its pointers to the call. */
    void (*cancel)(struct e2b_call *c, bool deadline);
    void *impl;
    /* Streaming: builds a keepalive message (process and watch streams differ). */
    json_t *(*keepalive_msg)(void);
};

/* ---- e2b_api.c */
/* envdAccessToken of sandbox id into out[AUTH_TOKEN_MAX + STORE_ID_MAX]. 0 or -1. */
int e2b_token_for(struct e2b *e, const char *id, char *out, size_t cap);
/* E2B's Sandbox object for a running sandbox (create/connect/fork answers; e2b_api.c),
 * or NULL when no token can be minted. New reference. */
json_t *e2b_sandbox_reply(struct e2b *e, const char *id, const char *tpl);
/* The fork and snapshot routes (e2b_fork.c), from e2b_register. */
struct router;
void e2b_fork_register(struct router *r, struct e2b *e);
/* A REST body that must be a JSON object, or empty ({}); NULL after replying 400
 * (e2b_fork.c). */
json_t *e2b_body_object(struct http_req *req, const char *data, size_t len);
/* E2B's template builder routes (e2b_template.c). */
void e2b_template_register(struct router *r, struct e2b *e);
/* GET /templates/aliases/{alias}: read from the store, so registered with the listings
 * (a control daemon serves it too). */
void e2b_template_alias_register(struct router *r, struct e2b *e);
/* copy()'s archives (e2b_tplfiles.c): the upload route; the link answer of
 * GET /templates/{id}/files/{hash} for the tenant; an archive's bytes (malloc'd, at most
 * TPL_COPY_MAX) for a build, 0, or -1 when the tenant has none by that hash. */
void e2b_tplfiles_register(struct router *r, struct e2b *e);
bool e2b_tplfile_hash_valid(const char *hash);
void e2b_tplfile_link(struct e2b *e, struct http_req *req, const char *tenant, const char *name,
                      const char *hash);
int e2b_tplfile_read(struct e2b *e, const char *tenant, const char *hash, char **out, size_t *len);
bool e2b_token_valid(struct e2b *e, const char *id, const char *token);

/* ---- e2b_volume.c: E2B's /volumes over native volumes, and volume tokens */
void e2b_volume_register(struct router *r, struct e2b *e);
/* A token for the content API of the tenant's volume into out[STORE_ID_MAX +
 * AUTH_TOKEN_MAX + 2]: 0, or -1 (no such volume, or no room). */
int e2b_volume_token(struct e2b *e, const char *tenant, const char *name, char *out, size_t cap);
/* Whether token (may be NULL) is a valid, unexpired token for volume `name`; if so its
 * tenant is in tenant[]. */
bool e2b_volume_token_tenant(struct e2b *e, const char *token, const char *name,
                             char tenant[STORE_ID_MAX]);
/* ---- e2b_volcontent.c: /volumecontent/{id}/... (from e2b_volume_register) */
void e2b_volcontent_register(struct router *r, struct e2b *e);
/* ---- e2b_envd.c */
/* The router hook: takes envd and port-proxy requests. */
bool e2b_envd_hook(struct http_req *req, void *arg);
struct e2b_box *e2b_box_get(struct e2b *e, const char *id); /* creates; NULL on OOM */
/* The live agent of the call's sandbox, or NULL when it is not running. */
struct agentc *e2b_call_agent(struct e2b_call *c);

/* ---- e2b_rpc.c: replies (each of the finishing ones frees the call) */
void e2b_rpc_begin(struct e2b_call *c);          /* reads/parses the body, runs m->fn */
void e2b_call_reply(struct e2b_call *c, json_t *msg);  /* unary 200; steals msg */
void e2b_call_fail(struct e2b_call *c, const struct e2b_err *err); /* unary or stream */
int e2b_stream_send(struct e2b_call *c, json_t *msg);  /* steals msg; 0 or -1 */
void e2b_stream_finish(struct e2b_call *c, const struct e2b_err *err);
void e2b_call_free(struct e2b_call *c);

/* ---- e2b_agent.c: one agent request whose result the call waits for */
/* result: the last "result"/"stat" EVENT (borrowed, may be NULL); entries: every
 * "entries" element collected (borrowed array, list only); err NULL on success. */
typedef void (*e2b_agent_done)(struct e2b_call *c, json_t *result, json_t *entries,
                               const struct e2b_err *err);
void e2b_agent_call(struct e2b_call *c, json_t *request, e2b_agent_done done);
/* Maps an agent ERROR to our error. */
void e2b_agent_err(struct e2b_err *err, const char *code, const char *message);
/* Fills an EntryInfo JSON from an agent stat object (NULL if malformed). */
json_t *e2b_stat_entry(json_t *st);
/* File metadata (envd >= 0.6.2) lives in the file's "user.e2b.<key>" xattrs. */
#define E2B_XATTR_PREFIX "user.e2b."
/* The metadata map from an agent stat's "xattrs" (borrowed, may be NULL): new object,
 * or NULL when there is none. */
json_t *e2b_xattrs_metadata(json_t *xattrs);

/* ---- methods */
void e2b_proc_start(struct e2b_call *c);
void e2b_proc_connect(struct e2b_call *c);
void e2b_proc_list(struct e2b_call *c);
void e2b_proc_send_input(struct e2b_call *c);
void e2b_proc_send_signal(struct e2b_call *c);
void e2b_proc_close_stdin(struct e2b_call *c);
void e2b_proc_update(struct e2b_call *c);
/* Ends b's processes (and, below, watchers): their agent channels are closed, unless
 * agent_gone (spaced's shutdown: the agent connections were freed already, and with them
 * every channel, without a callback). */
void e2b_box_procs_free(struct e2b_box *b, bool agent_gone);

void e2b_fs_stat(struct e2b_call *c);
void e2b_fs_make_dir(struct e2b_call *c);
void e2b_fs_move(struct e2b_call *c);
void e2b_fs_list_dir(struct e2b_call *c);
void e2b_fs_remove(struct e2b_call *c);
void e2b_fs_watch_dir(struct e2b_call *c);
void e2b_fs_create_watcher(struct e2b_call *c);
void e2b_fs_get_watcher_events(struct e2b_call *c);
void e2b_fs_remove_watcher(struct e2b_call *c);
void e2b_box_watchers_free(struct e2b_box *b, bool agent_gone);

/* ---- e2b_files.c: GET/POST /files (REST, not RPC) */
void e2b_files_get(struct e2b *e, struct http_req *req, struct e2b_box *box, const char *user,
                   bool token_ok);
void e2b_files_post(struct e2b *e, struct http_req *req, struct e2b_box *box,
                    const char *user, bool token_ok);

/* ---- e2b_portproxy.c: getHost(port) on spaced's port */
void e2b_port_proxy(struct e2b *e, struct http_req *req, const char *id, unsigned port);
/* Whether Connection/Upgrade header values ask for a protocol upgrade. */
bool e2b_is_upgrade(const char *connection, const char *upgrade);
/* A request addressed to a sandbox port other than envd's, by a Host of
 * "<port>-<id>.<domain>" or by E2b-Sandbox-Id + E2b-Sandbox-Port (any may be NULL):
 * true with *port and id[cap] (e2b_envd.c). */
bool e2b_port_target(const char *host, const char *sid, const char *sport, unsigned *port,
                     char *id, size_t cap);

/* ---- e2b_metrics.c: getMetrics(): one sample from the agent, now */
struct sbx;
void e2b_metrics(struct http_req *req, struct sbx *s);

/* ---- e2b_portlisten.c: the raw sandbox-port listener (getHost with WebSocket) */
/* Listens on addr ("127.0.0.1:7071") on the spaced loop; 0, or -1 with err. */
int e2b_port_listen(struct e2b *e, const char *addr, char *err, size_t errlen);
/* Closes the listener and every pipe still open (shutdown: their agent channels are gone
 * with the agents, so they are dropped, not closed). */
void e2b_pipes_free(struct e2b *e);
/* The byte pipe between a client connection and a guest `tcp` channel, for a
 * connection upgraded on spaced's own port (e2b_portproxy.c): takes ownership of `bev`
 * (enabled, its output may hold the 101 head and the guest's first bytes) and of
 * `ch`, whose callbacks the caller keeps forwarding to e2b_pipe_chan_ops with the
 * returned pipe as arg; `owned` (that forwarding context, malloc'd) is freed with the
 * pipe, after which no callback of ch fires. `owed`: guest bytes already taken into
 * the output whose credit the pipe returns as the client drains. Counts toward the
 * listener's connection limit; NULL when over it or out of memory (nothing taken). */
struct pl_conn;
struct bufferevent;
struct agentc_chan;
struct agentc_chan_ops;
struct pl_conn *e2b_pipe_adopt(struct e2b *e, struct bufferevent *bev, struct agentc_chan *ch,
                               void *owned, uint32_t owed);
extern const struct agentc_chan_ops e2b_pipe_chan_ops;

/* For a signed /files URL that names no sandbox: the running sandbox whose token the
 * signature matches, into id[cap]. */
bool e2b_files_signer(struct e2b *e, struct http_req *req, char *id, size_t cap);

/* Home directory of a guest user ("/root" or "/home/<user>") into out[cap]. */
void e2b_user_home(const char *user, char *out, size_t cap);

#endif
