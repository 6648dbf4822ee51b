/* dns_server: internal to dns_server.c (query handling, UDP) and dns_tcp.c (RFC 7766
 * DNS over TCP); the rest of the gateway uses dns_server_start / dns_server_stop in
 * gw.h. Both transports hand each query to dns_handle, so the policy and the answers
 * are the same; only the size limit differs (UDP answers that do not fit are
 * truncated with TC, dns_msg.h). */
#ifndef SPACE_GW_DNS_SERVER_H
#define SPACE_GW_DNS_SERVER_H

#include <netinet/in.h>

#include "gw.h"

#define DNS_TCP_CONNS_MAX 16      /* open DNS TCP connections per sandbox */
#define DNS_TCP_INFLIGHT_MAX 16   /* queries of one connection waiting upstream; more
                                     are left unread until one is answered */
#define DNS_TCP_IDLE_S 10         /* a connection with nothing to read this long closes */
#define DNS_TCP_OUT_MAX (64 * 1024) /* answers queued for a client that does not read */

struct dns_tcp;

/* Where an answer goes. */
struct dns_asker {
    struct sockaddr_in from;      /* UDP: the query's source */
    struct dns_tcp *tcp;          /* TCP: the connection; NULL for UDP */
};

/* A query waiting for the gateway's own lookup (owned by the lookup's callback, which
 * frees it; a TCP connection that closes first drops it with dns_pending_drop). */
struct dns_pending {
    struct gw_sandbox *sb;
    struct dns_query q;
    struct dns_asker to;
    struct gw_lookup *lookup;
    struct dns_pending *prev, *next; /* in to.tcp's list (TCP only) */
};

/* ---- dns_server.c */
/* Answers (now or once resolved) the query in buf[n] from `to`. */
void dns_handle(struct gw_sandbox *sb, const uint8_t *buf, size_t n, const struct dns_asker *to);
/* Drops a query still waiting for upstream (its connection is going away): the lookup
 * is cancelled, p freed, nothing is sent. */
void dns_pending_drop(struct dns_pending *p);

/* ---- dns_tcp.c */
/* Opens the TCP listener on gw:53 in the sandbox's namespace. */
int dns_tcp_start(struct gw_sandbox *sb, char *err, size_t errlen);
/* Closes the listener and every connection (their pending queries are dropped). */
void dns_tcp_stop(struct gw_sandbox *sb);
/* Queues one answer (length-prefixed) on t. */
void dns_tcp_send(struct dns_tcp *t, const uint8_t *msg, size_t len);
/* Bookkeeping of t's queries waiting for upstream (for pipelining bounds and close). */
void dns_tcp_pending_add(struct dns_tcp *t, struct dns_pending *p);
void dns_tcp_pending_done(struct dns_tcp *t, struct dns_pending *p);

#endif
