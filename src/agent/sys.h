/* agent_sys: agent-wide state and the system ops (refresh, health, shutdown) and our
 * HELLO. The agent runs either as the guest's PID 1 (system changes allowed) or as an
 * ordinary host process for tests, where refresh leaves the clock, hostname and RNG of
 * the machine alone and shutdown only ends the serve loop. */
#ifndef SPACE_AGENT_SYS_H
#define SPACE_AGENT_SYS_H

#include <jansson.h>
#include <stdbool.h>

#define AGENT_SOFTWARE "space-agent 0.1"

/* Records the start time and mode; called once before serving. */
void agent_sys_init(bool pid1);
bool agent_sys_is_pid1(void);

/* The agent_conn_hooks.hello: our HELLO object (new reference). */
json_t *agent_sys_hello(void);

/* true once a `shutdown` was accepted: the serve loop stops after flushing. */
bool agent_sys_shutdown_requested(void);

#endif
