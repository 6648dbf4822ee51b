/* agent ops: one handler per request "op" (docs/agent-protocol.md). Each handler gets
 * the channel of the OPEN and the request (borrowed) and either answers and closes the
 * channel, or attaches its state to the channel to keep streaming.
 *
 *   proc.c    exec, attach, ps (and reaping of every child: the agent is PID 1)
 *   files.c   stat, list, mkdir, remove, rename
 *   xfer.c    read, write (streamed under credits)
 *   watch.c   watch (inotify)
 *   tcp.c     tcp (a byte channel to a TCP port in the guest)
 *   fuse_relay.c mount (a volume: FUSE requests relayed to the host's space-volfs)
 *   metrics.c metrics (CPU, memory, disk use)
 *   sys.c     refresh, health, shutdown, and our HELLO */
#ifndef SPACE_AGENT_OPS_H
#define SPACE_AGENT_OPS_H

#include <jansson.h>
#include <stdbool.h>

#include "agent/conn.h"

typedef void (*agent_op_fn)(struct agent_chan *ch, json_t *req);

/* The agent_conn_hooks.open of the real agent: looks up "op" and runs its handler. */
void agent_ops_open(struct agent_chan *ch, json_t *req);

void agent_op_exec(struct agent_chan *ch, json_t *req);
void agent_op_attach(struct agent_chan *ch, json_t *req);
void agent_op_ps(struct agent_chan *ch, json_t *req);
void agent_op_stat(struct agent_chan *ch, json_t *req);
void agent_op_list(struct agent_chan *ch, json_t *req);
void agent_op_mkdir(struct agent_chan *ch, json_t *req);
void agent_op_remove(struct agent_chan *ch, json_t *req);
void agent_op_rename(struct agent_chan *ch, json_t *req);
void agent_op_read(struct agent_chan *ch, json_t *req);
void agent_op_write(struct agent_chan *ch, json_t *req);
void agent_op_watch(struct agent_chan *ch, json_t *req);
void agent_op_tcp(struct agent_chan *ch, json_t *req);
void agent_op_mount(struct agent_chan *ch, json_t *req);
void agent_op_metrics(struct agent_chan *ch, json_t *req);
/* The CPU baseline of `metrics` (metrics.c): once /proc is mounted, before serving,
 * and again when a restored clone is refreshed (its window starts at the restore). */
void agent_metrics_start(void);
void agent_op_refresh(struct agent_chan *ch, json_t *req);
void agent_op_health(struct agent_chan *ch, json_t *req);
void agent_op_shutdown(struct agent_chan *ch, json_t *req);

/* Sends EVENT {"type":"result", ...fields} (takes fields, may be NULL) and closes. */
void agent_op_result(struct agent_chan *ch, json_t *fields);

#endif
