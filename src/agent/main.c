/* space-agent: the guest agent (PID 1 in the VM), or a host process for tests.
 *
 *   space-agent                  as PID 1: boot the guest (init.h), serve the
 *                                virtio-serial port "space.agent", power off on shutdown
 *   space-agent --serve-fd N     serve one connected stream fd, exit when it closes
 *   space-agent --socket PATH    listen on a unix socket, serve clients one at a time
 *   space-agent --port DEV       serve a virtio-serial port device without booting */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/init.h"
#include "agent/ops.h"
#include "agent/serve.h"
#include "agent/sys.h"
#include "log.h"

static int usage(void)
{
    fprintf(stderr, "usage: space-agent [--serve-fd N | --socket PATH | --port DEV]\n"
                    "       (no arguments: run as the guest's PID 1)\n");
    return 2;
}

static int run_pid1(void)
{
    char port[128];
    agent_sys_init(true);
    /* PID 1 must never exit (the kernel panics): retry the boot's last step forever. */
    while (agent_init_boot(port, sizeof port) < 0)
        sleep(1);
    agent_metrics_start();
    while (!agent_sys_shutdown_requested())
        if (agent_serve_port(port) < 0) {
            log_error("agent.serve", "errno=%d", errno);
            sleep(1);
        }
    agent_init_poweroff();
}

int main(int argc, char **argv)
{
    log_init("space-agent", LOG_INFO);
    if (argc == 1 && getpid() == 1)
        return run_pid1();
    if (argc != 3)
        return usage();
    agent_sys_init(false);
    agent_metrics_start();
    int rc;
    if (strcmp(argv[1], "--serve-fd") == 0) {
        char *end;
        long fd = strtol(argv[2], &end, 10);
        if (*end || fd < 0 || fd > 65535)
            return usage();
        rc = agent_serve_fd((int)fd);
    } else if (strcmp(argv[1], "--socket") == 0) {
        rc = agent_serve_socket(argv[2]);
    } else if (strcmp(argv[1], "--port") == 0) {
        rc = agent_serve_port(argv[2]);
    } else {
        return usage();
    }
    if (rc < 0) {
        fprintf(stderr, "space-agent: %s\n", strerror(errno));
        return 1;
    }
    return 0;
}
