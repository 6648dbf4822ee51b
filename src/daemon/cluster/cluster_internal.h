/* cluster_internal: state shared by the files of src/daemon/cluster (not an interface
 * for other modules; cluster.h is). */
#ifndef SPACE_CLUSTER_INTERNAL_H
#define SPACE_CLUSTER_INTERNAL_H

#include "cluster.h"

struct event;

/* A create being forwarded to a node: counted as used there until the node has
 * answered (then its row exists and counts instead). */
struct cluster_resv {
    struct cluster_resv *next;
    char node[STORE_ID_MAX];
    unsigned vcpus;
    unsigned memory_mib;
};

struct cluster {
    struct event *heartbeat;   /* node: periodic capacity report (owned) */
    int64_t started_ms;
    bool reported;             /* node: last heartbeat reached the store (log changes only) */
    struct cluster_resv *resv; /* control: creates in flight (owned list) */
};

#endif
