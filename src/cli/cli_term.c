/* cli_term.c: the local terminal for `space shell`, `exec -t` and `attach`: raw mode
 * that is restored on every way out (normal return, exit(), and the signals that would
 * otherwise end the process: those are turned into bytes on a self-pipe for the event
 * loop, which restores the terminal before it leaves), the window size, and SIGTSTP/
 * SIGCONT (the terminal is restored while the CLI is stopped and made raw again after).
 *
 * Raw mode is cfmakeraw: no echo, no line editing, no signal keys (Ctrl-C, Ctrl-Z,
 * Ctrl-\ are bytes for the guest's terminal), no output processing (the guest's pty
 * already writes CRLF). */
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

static struct termios saved;
static bool raw_on, hooked;
static int sig_pipe[2] = {-1, -1};

void cli_term_restore(void)
{
    if (raw_on) {
        tcsetattr(STDIN_FILENO, TCSADRAIN, &saved);
        raw_on = false;
    }
}

int cli_term_raw(void)
{
    if (raw_on)
        return 0;
    if (tcgetattr(STDIN_FILENO, &saved) < 0)
        return -1;
    struct termios t = saved;
    cfmakeraw(&t);
    if (!hooked) {
        atexit(cli_term_restore);
        hooked = true;
    }
    if (tcsetattr(STDIN_FILENO, TCSADRAIN, &t) < 0)
        return -1;
    raw_on = true;
    return 0;
}

bool cli_term_size(unsigned *rows, unsigned *cols)
{
    struct winsize ws;
    if (ioctl(STDIN_FILENO, TIOCGWINSZ, &ws) < 0 || ws.ws_row == 0 || ws.ws_col == 0)
        return false;
    *rows = ws.ws_row;
    *cols = ws.ws_col;
    return true;
}

static void on_signal(int sig)
{
    int saved_errno = errno;
    unsigned char b = (unsigned char)sig;
    if (write(sig_pipe[1], &b, 1) < 0) {
        /* full pipe: the loop has plenty of wake-ups pending already */
    }
    errno = saved_errno;
}

int cli_term_signals(void)
{
    static const int sigs[] = {SIGWINCH, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGTSTP, SIGCONT};
    if (sig_pipe[0] < 0) {
        if (pipe(sig_pipe) < 0)
            return -1;
        for (int i = 0; i < 2; i++) {
            fcntl(sig_pipe[i], F_SETFL, O_NONBLOCK);
            fcntl(sig_pipe[i], F_SETFD, FD_CLOEXEC);
        }
    }
    struct sigaction sa = {.sa_handler = on_signal}; /* no SA_RESTART: the loop sees EINTR */
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        sigaction(sigs[i], &sa, NULL);
    return sig_pipe[0];
}

int cli_term_next_signal(void)
{
    unsigned char b;
    return read(sig_pipe[0], &b, 1) == 1 ? b : 0;
}

void cli_term_stop(void)
{
    bool was_raw = raw_on;
    cli_term_restore();
    /* Stop for real with the default action, then take the terminal back. */
    signal(SIGTSTP, SIG_DFL);
    raise(SIGTSTP);
    cli_term_signals();
    if (was_raw)
        cli_term_raw();
}
