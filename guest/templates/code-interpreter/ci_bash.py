"""ci_bash: a bash context, one long-lived `bash --noprofile --norc` (Debian has no bash
Jupyter kernel), so variables, functions and the working directory persist from cell
to cell as they would in a kernel.

A cell is written to a private file and sourced by one command line sent on bash's
stdin (the cell's own stdin is /dev/null, so it cannot eat the next command line); its
stdout and stderr are relayed as they come; when the cell ends, bash writes
"<token> <status>" on a control pipe of its own. A non-zero status is an error item
(name "ExitCode", value the status). Per-execution env vars are exported before the
cell and put back after it (`declare -p` saves what was there).
Interrupt (the client went away): SIGINT to bash's process group; a trap set for the
cell returns from the sourced file, so the cell stops and bash lives on. A bash that
does not come back within INTERRUPT_S, or that exited (`exit` in a cell), is replaced by
a new one in the context's directory: its state is lost, the context stays.
"""
import codecs
import os
import secrets
import select
import shlex
import signal
import subprocess
import tempfile
import threading

from ci_output import Disconnected, Discard, count_item, error_item, log_item

INTERRUPT_S = 10
POLL_S = 0.5


class BashContext:
    language = "bash"

    def __init__(self, cid, cwd):
        self.id = cid
        self.cwd = cwd
        self.lock = threading.Lock()
        self.count = 0
        self.dir = tempfile.mkdtemp(prefix="space-ci-bash-")
        self.proc = None
        self._spawn()

    def describe(self):
        return {"id": self.id, "language": self.language, "cwd": self.cwd}

    def _spawn(self):
        r, w = os.pipe()
        try:
            self.proc = subprocess.Popen(
                ["bash", "--noprofile", "--norc"], cwd=self.cwd, stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=(w,),
                start_new_session=True)
        finally:
            os.close(w)
        self.ctl_fd_child = w  # the number the child has it under (pass_fds keeps it)
        self.ctl = r
        self.ctl_buf = b""
        for f in (self.proc.stdout, self.proc.stderr):
            os.set_blocking(f.fileno(), False)
        os.set_blocking(r, False)

    def _kill(self):
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            f.close()
        os.close(self.ctl)
        self.proc = None

    # ---- one cell
    def execute(self, code, env_vars, out):
        with self.lock:
            if self.proc is None:
                self._spawn()
            self.count += 1
            out.emit(count_item(self.count))
            token = "__space_end_" + secrets.token_hex(8)
            cell = os.path.join(self.dir, "cell")
            with open(cell, "w") as f:
                f.write(code)
                f.write("\n")
            self._send(self._command(cell, token, env_vars or {}))
            try:
                status = self._stream(token, out)
            except Disconnected:
                self._interrupt(token)
                raise
            if status is None:
                out.emit(error_item("BashExited", "bash exited during the cell; the context's "
                                    "shell was started again (its variables are lost)"))
                self._kill()
                self._spawn()
            elif status != 0:
                out.emit(error_item("ExitCode", str(status)))

    def _command(self, cell, token, env_vars):
        names = " ".join(env_vars)
        pre = post = ""
        if env_vars:
            pre = "__space_saved=$(declare -p %s 2>/dev/null); export %s; " % (
                names, " ".join("%s=%s" % (k, shlex.quote(v)) for k, v in env_vars.items()))
            post = "unset %s; eval \"$__space_saved\"; " % names
        return ("%strap 'return 130 2>/dev/null' INT; . %s </dev/null; __space_rc=$?; trap - INT; "
                "%sprintf '%%s %%d\\n' %s \"$__space_rc\" >&%d\n"
                % (pre, shlex.quote(cell), post, token, self.ctl_fd_child))

    def _send(self, line):
        try:
            self.proc.stdin.write(line.encode())
            self.proc.stdin.flush()
        except OSError:
            pass  # bash is gone: _stream sees the control pipe's end

    def _stream(self, token, out):
        """Relays output until the cell's end line; its status, or None if bash died."""
        decoders = {self.proc.stdout.fileno(): ("stdout", codecs.getincrementaldecoder("utf-8")("replace")),
                    self.proc.stderr.fileno(): ("stderr", codecs.getincrementaldecoder("utf-8")("replace"))}
        while True:
            ready, _, _ = select.select(list(decoders) + [self.ctl], [], [], POLL_S)
            for fd in ready:
                if fd != self.ctl:
                    self._relay(fd, decoders[fd], out)
            if self.ctl in ready:
                data = self._read(self.ctl)
                if data == b"":
                    return None
                self.ctl_buf += data
                for line in self.ctl_buf.split(b"\n")[:-1]:
                    word = line.split(b" ")
                    if len(word) == 2 and word[0] == token.encode():
                        for fd, d in decoders.items():  # what was written before the end line
                            self._relay(fd, d, out)
                        self.ctl_buf = b""
                        return int(word[1])
                self.ctl_buf = self.ctl_buf[self.ctl_buf.rfind(b"\n") + 1:]
            if not ready:
                if self.proc.poll() is not None:
                    return None
                out.keepalive()

    @staticmethod
    def _read(fd):
        try:
            return os.read(fd, 65536)
        except BlockingIOError:
            return None

    def _relay(self, fd, named_decoder, out):
        name, decoder = named_decoder
        while True:
            data = self._read(fd)
            if not data:
                return
            text = decoder.decode(data)
            if text:
                out.emit(log_item(name, text))

    def _interrupt(self, token):
        try:
            os.killpg(self.proc.pid, signal.SIGINT)
        except ProcessLookupError:
            pass
        timer = threading.Timer(INTERRUPT_S, lambda: self._signal(signal.SIGKILL))
        timer.start()
        try:
            status = self._stream(token, Discard())
        finally:
            timer.cancel()
        if status is None:
            self._kill()
            self._spawn()

    def _signal(self, sig):
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, AttributeError):
            pass

    # ---- lifecycle (from other requests)
    def restart(self):
        """A new shell in the context's directory; a cell in flight ends with BashExited."""
        self._signal(signal.SIGKILL)
        with self.lock:
            self._kill()
            self._spawn()

    def close(self):
        self._signal(signal.SIGKILL)
        with self.lock:
            self._kill()
            try:
                os.unlink(os.path.join(self.dir, "cell"))
            except FileNotFoundError:
                pass
            os.rmdir(self.dir)
