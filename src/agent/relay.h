/* agent_relay: a command's pipe moved by a thread of its own, so that the agent's loop
 * never reads or writes a command's pipe itself (relay.c says why). The loop gets a
 * socket instead, nonblocking, which it reads or writes like the pipe it stands for;
 * the thread does the blocking work on the pipe. The two share no memory, only the
 * socket pair. Prefix agent_relay_. */
#ifndef SPACE_AGENT_RELAY_H
#define SPACE_AGENT_RELAY_H

enum agent_relay_dir {
    AGENT_RELAY_FROM_CMD, /* stdout/stderr: the thread reads the pipe, the loop the socket */
    AGENT_RELAY_TO_CMD,   /* stdin: the loop writes the socket, the thread the pipe */
};

#define AGENT_RELAY_SOCKBUF (64 * 1024) /* SO_SNDBUF of each end: bytes in flight */

/* Starts the relay of pipe_fd (taken in every case; O_NONBLOCK is set on it as the
 * direction needs). Returns the loop's end (nonblocking, close-on-exec), or -1 (errno)
 * with pipe_fd closed.
 *   FROM_CMD: the socket yields the pipe's bytes and EOF once the pipe has ended (all
 *   writers closed) or after agent_relay_finish. Closing the socket stops the thread
 *   at its next step (the rest of the pipe is dropped, as closing the pipe would).
 *   TO_CMD: bytes written to the socket go to the pipe; closing the socket closes the
 *   pipe once they are written (EOF for the command). When the command closes its end,
 *   the thread ends and writes to the socket fail (EPIPE). */
int agent_relay_start(int pipe_fd, enum agent_relay_dir dir);

/* FROM_CMD: the process has exited: forward what its pipe holds now, then end (the
 * socket reads EOF) even if another process (a background child) still holds the
 * pipe open. */
void agent_relay_finish(int sock_fd);

#endif
