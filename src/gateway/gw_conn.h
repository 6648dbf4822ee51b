/* gw_conn: one proxied TCP connection from a sandbox (internal to gw_conn.c and
 * gw_mitm.c; the rest of the gateway uses gw_conn_accept / gw_conns_recheck in gw.h).
 *
 * Life: HELLO (reading the ClientHello on 443 or the first request head on 80) ->
 * RESOLVE (the gateway's own lookup of the name) -> CONNECT (dialling an address it
 * resolved, from its own namespace) -> OPEN (splicing bytes; on port 80 and on the
 * credential path every further request head is checked) -> freed. Any refusal frees
 * the connection: a TCP reset before anything was answered on 443, a 4xx and close
 * where HTTP can be spoken. */
#ifndef SPACE_GW_CONN_H
#define SPACE_GW_CONN_H

#include "gw.h"

enum gw_conn_state { CS_HELLO, CS_RESOLVE, CS_CONNECT, CS_OPEN, CS_CLOSING };

struct gw_conn {
    struct gw_sandbox *sb;
    struct gw_conn *prev, *next;      /* in sb->conns */
    bool tls;                         /* arrived on 443 */
    bool mitm;                        /* TLS terminated here for credential injection */
    enum gw_conn_state state;
    int down_fd;                      /* the accepted socket (owned by down) */
    struct bufferevent *down;         /* owned: guest side (socket, or TLS filter on it) */
    struct bufferevent *up;           /* owned: upstream side, NULL until dialled */
    struct gw_lookup *lookup;         /* pending resolution, NULL if none */
    struct event *timer;              /* owned: deadline for HELLO..CONNECT */
    char name[POLICY_NAME_MAX + 1];   /* the checked name; "" until known */
    uint16_t port;                    /* 80 or 443 */
    uint32_t orig_dst;                /* guest's intended address (log only) */
    uint32_t up_addr;                 /* address dialled (resolved by the gateway) */
    bool in_body;                     /* HTTP: forwarding a request body */
    bool opaque;                      /* HTTP: after a websocket upgrade, plain splice */
    bool await_upgrade;               /* HTTP: upgrade request sent, its answer not yet read */
    unsigned nreqs;                   /* HTTP: requests forwarded so far */
    struct evbuffer *held_head;       /* HTTP: head of a chunked request being re-framed */
    struct evbuffer *held_body;       /* HTTP: its decoded body so far */
    struct gw_scrub *scrub;           /* mitm: secret scrubber on the upstream's bytes */
    bool down_eof;
    bool down_tls_done;               /* mitm: the guest-side handshake finished */
    unsigned close_polls;             /* closing_check rounds so far (bounded) */
    struct gwhttp_body body;
    char cred_header[GW_HEADER_MAX + 1]; /* mitm: header to replace */
    char *cred_value;                 /* mitm: owned copy of the secret, wiped on free */
};

/* Frees c; `reset` sends a TCP RST to the guest instead of a FIN. */
void gw_conn_free(struct gw_conn *c, bool reset);
/* Refuses: logs, then HTTP status (if > 0 and HTTP can be spoken) or reset. */
void gw_conn_deny(struct gw_conn *c, const char *reason, int status);
/* Callbacks shared by both paths. */
void gw_conn_up_event(struct bufferevent *bev, short what, void *arg);
void gw_conn_up_read(struct bufferevent *bev, void *arg);
void gw_conn_down_read(struct bufferevent *bev, void *arg);
void gw_conn_down_event(struct bufferevent *bev, short what, void *arg);
void gw_conn_write_done(struct bufferevent *bev, void *arg);
/* gw_resolve callback for a connection waiting on its name. */
void gw_conn_resolved(void *arg, int rcode, const struct gw_cache_entry *e);

/* gw_mitm.c: switches c to the credential path: TLS towards the guest with a minted
 * leaf, verified TLS towards `addr`. Returns 0, or -1 after which the caller must deny
 * (free) c: it may already hold the new bufferevents. */
int gw_mitm_start(struct gw_conn *c, uint32_t addr, const struct gw_cred *cred);
/* A decision-log reason for a failed TLS handshake on bev (an OpenSSL bufferevent):
 * "client_tls_failed: <OpenSSL reason>" for the guest side, "upstream_cert: <X.509
 * verification error>" or "upstream_tls_failed: <reason>" for the upstream side. */
void gw_mitm_tls_reason(struct bufferevent *bev, bool upstream, char *out, size_t cap);

/* gw_scrub.c: a streaming search-and-overwrite of a secret in the upstream's bytes on
 * the credential path, so an upstream that echoes the request (TRACE, header or body
 * echo endpoints) cannot hand the injected value back to the guest. Each occurrence of
 * the value (or of its part after an auth scheme: "Bearer <token>" -> "<token>") is
 * overwritten with '*' of the same length (the response's framing stays valid), also
 * across reads: a tail that could be the start of a secret is held back until the
 * next read or the end of the stream. */
struct gw_scrub *gw_scrub_new(const char *secret);
void gw_scrub_free(struct gw_scrub *s);
/* Moves everything from `from` to `to`, scrubbed, except a held-back tail (none if
 * flush: the stream ended). */
void gw_scrub_pipe(struct gw_scrub *s, struct evbuffer *from, struct evbuffer *to, bool flush);

#endif
