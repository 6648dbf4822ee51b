/* agent_serve: runs the agent protocol over a transport until shutdown.
 *
 *   agent_serve_fd      one connected stream fd (tests: a socketpair; `--serve-fd N`);
 *                       returns when the peer closes it or on shutdown.
 *   agent_serve_socket  listens on a unix socket path (`--socket PATH`) and serves one
 *                       client at a time, the next after the previous disconnects.
 *   agent_serve_port    the virtio-serial port device (PID 1 in the guest): while the
 *                       host is not connected the port reports POLLHUP, so it is closed
 *                       and reopened every 50 ms until the host is back.
 *
 * Processes survive disconnects in every mode. Each returns 0 (shutdown requested or
 * the fd ended) or -1 on a setup error (errno). SIGCHLD is blocked and read through a
 * signalfd; SIGPIPE is ignored. */
#ifndef SPACE_AGENT_SERVE_H
#define SPACE_AGENT_SERVE_H

int agent_serve_fd(int fd);
int agent_serve_socket(const char *path);
int agent_serve_port(const char *dev);

#endif
