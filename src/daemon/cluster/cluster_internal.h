/* cluster_internal: state shared by the files of src/daemon/cluster (not an interface
 * for other modules; cluster.h is). */
#ifndef SPACE_CLUSTER_INTERNAL_H
#define SPACE_CLUSTER_INTERNAL_H

#include "cluster.h"
#include "daemon/ops/op.h"

/* Until a forwarded request's reply head arrives (connecting included: evhttp has one
 * timeout for both): long enough for the longest operation long-poll to answer. */
#define CLUSTER_PROXY_HEAD_TIMEOUT_S (OP_WAIT_MAX_S + 60)
/* A reservation lives until the node's reply head arrives, so at most the head timeout;
 * a node's heartbeat removes older ones on it (their control daemon died). */
#define CLUSTER_RESV_TTL_MS ((int64_t)(CLUSTER_PROXY_HEAD_TIMEOUT_S + 60) * 1000)

struct event;

/* A create being forwarded to a node: its reservation row (store_resv_take) counts as
 * used there until the node's reply head arrives (then the sandbox's row exists and
 * counts instead, or the create failed). Listed so a stopping control removes its own. */
struct cluster_resv {
    struct cluster_resv *next;
    char id[STORE_ID_MAX];
    char node[STORE_ID_MAX];
};

struct cluster {
    struct event *heartbeat;   /* node: periodic capacity report (owned) */
    int64_t started_ms;
    bool reported;             /* node: last heartbeat reached the store (log changes only) */
    struct cluster_resv *resv; /* control: reservations of creates in flight (owned list) */
};

#endif
