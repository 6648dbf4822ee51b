/* gw: the space-gateway runtime: one process per host, one libevent loop, serving
 * every attached sandbox. This header holds the shared types; each stage is its own
 * file over them:
 *   gw_sandbox.c  attach/detach/policy/credentials of one sandbox (called by gw_ctl.c)
 *   gw_resolve.c  the gateway's own resolver (evdns) and per-sandbox answer cache
 *   dns_server.c  the DNS server a sandbox talks to (UDP gw:53 in its namespace)
 *   dns_tcp.c     the same over TCP (gw:53, RFC 7766 framing); dns_server.h
 *   gw_conn.c     one proxied TCP connection: ClientHello / HTTP head checks, dial, splice
 *   gw_mitm.c     the TLS-terminating path used for credential injection
 *   gw_declog.c   per-sandbox decision log and token-bucket rate limits
 * Trust boundary: everything read from a sandbox socket is hostile and is only looked
 * at through dns_msg, chello and gwhttp, which bound and validate it. */
#ifndef SPACE_GW_H
#define SPACE_GW_H

#include <event2/bufferevent.h>
#include <event2/dns.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "chello.h"
#include "dns_msg.h"
#include "gwhttp.h"
#include "netns.h"
#include "policy.h"
#include "tls_ca.h"

#define GW_ID_MAX 64              /* sandbox / tenant id length */
#define GW_LOG_RING 1024          /* decisions kept per sandbox */
#define GW_CACHE_MAX 256          /* names cached per sandbox */
#define GW_CONNS_MAX 256          /* concurrent proxied connections per sandbox */
#define GW_DNS_PENDING_MAX 64     /* queries waiting for upstream per sandbox */
#define GW_DNS_RATE 200.0         /* DNS queries per second per sandbox ... */
#define GW_DNS_BURST 400.0        /* ... with this burst */
#define GW_CONN_RATE 100.0        /* new connections per second per sandbox ... */
#define GW_CONN_BURST 200.0       /* ... with this burst */
#define GW_CREDS_MAX 64           /* credential rules per sandbox or tenant */
#define GW_HEADER_MAX 64          /* credential header name length */
#define GW_SECRET_MAX 4096        /* credential header value length */
#define GW_REASON_MAX 96          /* decision reason length, with its terminator */

struct gw_rate {
    double tokens, rate, burst;
    int64_t last_ms;              /* clock_mono_ms() of the last refill */
    uint64_t refused;             /* refusals since the last flood log line */
    uint64_t refused_total;
    int64_t last_log_ms;          /* clock_mono_ms() of the last flood log line */
};

struct gw_decision {
    uint64_t seq;                 /* 1, 2, ... per sandbox; `log` can ask for seq > n */
    int64_t ts_ms;                /* wall clock, ms */
    const char *kind;             /* "dns", "tls", "http", "mitm", "policy" (static) */
    bool allowed;
    char name[POLICY_NAME_MAX + 1];
    char reason[GW_REASON_MAX];
    uint32_t dst;                 /* guest's original destination (host order), 0 if none */
    uint16_t port;
};

struct gw_cred {
    char host[POLICY_NAME_MAX + 1]; /* exact normalised name */
    char header[GW_HEADER_MAX + 1]; /* header name to replace */
    char *value;                    /* owned, wiped on free; never logged */
};

struct gw_credset {
    size_t n;
    struct gw_cred *rules;          /* owned */
};

struct gw_cache_entry {
    char name[POLICY_NAME_MAX + 1];
    uint32_t addrs[DNS_ANSWERS_MAX]; /* upstream answer minus forbidden addresses */
    size_t naddrs;
    size_t nforbidden;               /* upstream addresses dropped as forbidden */
    int64_t expires_ms;              /* clock_mono_ms() from which the entry is stale */
};

struct gw_lookup;
struct gw_conn;
struct dns_tcp;

struct gw_sandbox {
    struct gw *gw;
    char id[GW_ID_MAX + 1];
    char tenant[GW_ID_MAX + 1];    /* "" if none */
    int nsfd;                      /* owned: the sandbox's network namespace */
    struct netns_wiring wiring;
    struct policy policy;          /* owned */
    int dns_fd;                    /* owned by dns_ev's lifetime (closed on detach) */
    struct event *dns_ev;          /* owned */
    struct evconnlistener *dns_tcp_l; /* owned: DNS over TCP; owns its fd */
    struct dns_tcp *dns_tcps;      /* open DNS TCP connections (owned, dns_tcp.c) */
    size_t ndns_tcps;
    struct evconnlistener *http_l, *tls_l; /* owned; they own their fds */
    struct gw_rate dns_rate, conn_rate;
    uint32_t dns_kernel_drops;     /* SO_RXQ_OVFL total last seen on dns_fd */
    struct gw_conn *conns;         /* live connections (list owned through gw_conn_free) */
    size_t nconns;
    struct gw_lookup *lookups;     /* pending resolutions started for this sandbox */
    size_t dns_pending;
    struct gw_cache_entry *cache;  /* owned, GW_CACHE_MAX entries */
    struct gw_credset creds;       /* sandbox-scoped credential rules */
    struct gw_decision *log;       /* owned ring of GW_LOG_RING */
    uint64_t log_seq;
    struct gw_sandbox *next;
};

struct gw_tenant {
    char id[GW_ID_MAX + 1];
    struct gw_credset creds;
    struct gw_tenant *next;
};

struct gw {
    struct event_base *base;
    struct evdns_base *dns;        /* upstream resolver, in the gateway's namespace */
    struct tls_ca *ca;
    struct gw_sandbox *sandboxes;
    struct gw_tenant *tenants;
};

/* ---- gw_declog.c */
void gw_rate_init(struct gw_rate *r, double rate, double burst);
/* Takes one token; false (and counts a refusal) if empty. */
bool gw_rate_take(struct gw_rate *r, int64_t now_ms);
/* Records a decision in sb's log and the process log. */
void gw_decide(struct gw_sandbox *sb, const char *kind, bool allowed, const char *name,
               const char *reason, uint32_t dst, uint16_t port);
/* Entries with seq > since, oldest first, as a JSON array (new reference). */
json_t *gw_declog_json(const struct gw_sandbox *sb, uint64_t since);
/* Logs a flood summary at most once a second. */
void gw_rate_log(struct gw_sandbox *sb, struct gw_rate *r, const char *what);

/* ---- gw_resolve.c */
typedef void (*gw_lookup_cb)(void *arg, int rcode, const struct gw_cache_entry *e);
/* Fresh cache entry for name, or NULL. */
const struct gw_cache_entry *gw_cache_get(struct gw_sandbox *sb, const char *name);
/* Starts an upstream A lookup; cb runs later (never from inside this call) with
 * rcode DNS_RCODE_* and the cache entry (NULL unless rcode is OK). Returns a handle the
 * caller cancels with gw_lookup_cancel if it goes away first, or NULL on failure. */
struct gw_lookup *gw_resolve(struct gw_sandbox *sb, const char *name, gw_lookup_cb cb, void *arg);
void gw_lookup_cancel(struct gw_lookup *l);
/* Detach: cancels every pending lookup of sb, calling its cb once with rcode -1 so the
 * owner of arg can free it (it must not touch sb then). */
void gw_lookups_orphan(struct gw_sandbox *sb);
/* First address of e allowed by sb's policy on port, preferring `prefer`; 0 if none. */
uint32_t gw_pick_addr(const struct gw_sandbox *sb, const struct gw_cache_entry *e,
                      uint32_t prefer, uint16_t port);

/* ---- dns_server.c */
/* Opens gw:53 (UDP and TCP) in the sandbox's namespace. */
int dns_server_start(struct gw_sandbox *sb, char *err, size_t errlen);
/* Closes both and drops the TCP connections' pending queries (safe on a partly
 * started sandbox); UDP queries still waiting are freed by gw_lookups_orphan. */
void dns_server_stop(struct gw_sandbox *sb);

/* ---- gw_conn.c */
void gw_conn_accept(struct gw_sandbox *sb, int fd, bool tls);
/* Closes every connection of sb the current policy no longer allows (all if `all`). */
void gw_conns_recheck(struct gw_sandbox *sb, bool all);
/* Credential rule for host among the sandbox's and its tenant's, or NULL. */
const struct gw_cred *gw_cred_find(const struct gw_sandbox *sb, const char *host);

/* ---- gw_sandbox.c (the operations behind the control socket; see gw_ctl.h) */
struct gw_sandbox *gw_sandbox_find(struct gw *gw, const char *id);
int gw_sandbox_attach(struct gw *gw, const json_t *req, char *err, size_t errlen);
int gw_sandbox_detach(struct gw *gw, const char *id, char *err, size_t errlen);
int gw_sandbox_policy(struct gw *gw, const char *id, const json_t *policy, char *err, size_t errlen);
int gw_creds_set(struct gw *gw, const json_t *req, char *err, size_t errlen);
void gw_credset_free(struct gw_credset *c);
void gw_shutdown(struct gw *gw);

#endif
