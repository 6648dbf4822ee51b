/* hostload: how busy the host spaced runs on is, measured (not the allocation the node
 * records count): load averages, CPU use since the previous sample, memory available.
 * A node daemon samples at each heartbeat and stores the result in its node row
 * (GET /v1/nodes: `load`); every daemon answers its own host's as `host` there too.
 *
 * JSON: {"load1","load5","load15","cpu_pct","cpus","mem_total","mem_available",
 * "sampled_at"} (bytes; cpu_pct is the busy share of all CPUs, 0..100, between two
 * samples: the first one since the sampler was made). Prefix hostload_. */
#ifndef SPACE_HOSTLOAD_H
#define SPACE_HOSTLOAD_H

#include <jansson.h>
#include <stdint.h>

#include "procstat.h"

struct hostload {
    const char *proc;          /* "/proc" (tests: a directory of fake files) */
    struct procstat_meter cpu; /* CPU use since the previous sample */
    int64_t prev_ms;           /* when it was taken (0: none) */
    json_t *last;              /* the last sample (owned), NULL before the first */
};

/* A sampler on proc_dir ("/proc" when NULL; kept, not copied), or NULL (no memory). */
struct hostload *hostload_new(const char *proc_dir);
void hostload_free(struct hostload *h);

/* Takes a sample now (now_ms: wall clock) unless the last is younger than min_ms, and
 * returns the latest (borrowed; valid until the next call), or NULL when the files
 * cannot be read. Spacing samples keeps cpu_pct an average over min_ms or more. */
const json_t *hostload_get(struct hostload *h, int64_t now_ms, int64_t min_ms);

#endif
