"""ci_python: a Python context, one IPython kernel (Debian's ipykernel) driven through
jupyter_client's blocking client.

One execution at a time per context (`lock`); the execution streams what the kernel
publishes on iopub for its request: stream -> stdout/stderr, execute_input ->
number_of_executions, display_data / execute_result -> result, error -> error, and ends
at the kernel's `idle` status for it. When the client goes away (Disconnected) the kernel
is interrupted (SIGINT) and the cell drained to its end before the lock is released, so
the next execution finds the kernel idle; a kernel that does not come back from the
interrupt within INTERRUPT_S is restarted (its state is lost, the context stays).
Per-execution env vars are set in os.environ by a silent request before the cell and
put back by another after it. restart() and close() end an execution in flight with an
error item (a generation counter tells the streaming loop its kernel is gone).
"""
import json
import queue
import threading

from jupyter_client.manager import KernelManager

from ci_output import Disconnected, Discard, count_item, error_item, log_item, result_item

START_S = 300  # kernel start under software emulation is slow; bounded anyway
INTERRUPT_S = 20
POLL_S = 0.5

# Silent requests. Values travel as JSON literals (valid Python for str -> str dicts);
# the saved values live on the os module, out of the user's namespace.
ENV_SET = ("(lambda o, n: (setattr(o, '_space_env_saved', {k: o.environ.get(k) for k in n}),"
           " o.environ.update(n)))(__import__('os'), %s)")
ENV_RESTORE = ("(lambda o: [o.environ.pop(k, None) if v is None else o.environ.__setitem__(k, v)"
               " for k, v in o.__dict__.pop('_space_env_saved', {}).items()])(__import__('os'))")

class KernelGone(Exception):
    pass


class PythonContext:
    language = "python"

    def __init__(self, cid, cwd):
        self.id = cid
        self.cwd = cwd
        self.lock = threading.Lock()
        self.generation = 0
        self.km = KernelManager(kernel_name="python3")
        self.km.start_kernel(cwd=cwd)
        self.kc = self._connect()

    def describe(self):
        return {"id": self.id, "language": self.language, "cwd": self.cwd}

    def _connect(self):
        kc = self.km.client()
        kc.start_channels(shell=True, iopub=True, stdin=False, hb=False, control=False)
        kc.wait_for_ready(timeout=START_S)
        return kc

    # ---- one cell
    def execute(self, code, env_vars, out):
        with self.lock:
            gen = self.generation
            try:
                self._run(code, env_vars, gen, out)
            except KernelGone:
                out.emit(error_item("ContextRestarting",
                                    "the context was restarted or removed during the execution"))

    def _run(self, code, env_vars, gen, out):
        if env_vars:
            self._silent(ENV_SET % json.dumps(env_vars), gen)
        try:
            # stop_on_error=False: one request at a time is in flight, so there is no queue
            # to abort, and ipykernel's abort window after an error (or an interrupt) would
            # otherwise catch the next cell when it comes quickly.
            msg_id = self.kc.execute(code, store_history=True, allow_stdin=False,
                                     stop_on_error=False)
            try:
                self._stream(msg_id, gen, out)
            except Disconnected:
                self._interrupt(msg_id, gen)
                raise
        finally:
            if env_vars and gen == self.generation:
                self._silent(ENV_RESTORE, gen)

    def _stream(self, msg_id, gen, out):
        """Relays the cell's iopub messages until its idle status; then its reply."""
        errored = False
        while True:
            msg = self._next(self.kc.get_iopub_msg, gen, out)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, c = msg["msg_type"], msg["content"]
            if kind == "status" and c.get("execution_state") == "idle":
                break
            if kind == "stream":
                name = "stderr" if c.get("name") == "stderr" else "stdout"
                when = msg["header"].get("date")
                out.emit(log_item(name, c.get("text", ""),
                                  when.isoformat() if hasattr(when, "isoformat") else None))
            elif kind == "execute_input":
                out.emit(count_item(c.get("execution_count")))
            elif kind in ("display_data", "execute_result"):
                out.emit(result_item(c.get("data", {}), kind == "execute_result"))
            elif kind == "error" and not errored:
                errored = True
                out.emit(error_item(c.get("ename", ""), c.get("evalue", ""),
                                    "\n".join(c.get("traceback", []))))
        reply = self._reply(msg_id, gen, out)
        if reply and not errored:
            status = reply["content"].get("status")
            if status == "error":
                c = reply["content"]
                out.emit(error_item(c.get("ename", ""), c.get("evalue", ""),
                                    "\n".join(c.get("traceback", []))))
            elif status == "aborted":
                out.emit(error_item("ExecutionAborted", "Execution was aborted"))

    def _next(self, get, gen, out):
        """The next message from a channel; keepalives while there is none. Raises
        KernelGone when the context was restarted or removed meanwhile."""
        while True:
            if gen != self.generation:
                raise KernelGone()
            try:
                return get(timeout=POLL_S)
            except queue.Empty:
                out.keepalive()

    def _reply(self, msg_id, gen, out):
        """Consumes shell replies up to the one for msg_id (older ones were left by
        interrupted or silent requests)."""
        while True:
            msg = self._next(self.kc.get_shell_msg, gen, out)
            if msg["parent_header"].get("msg_id") == msg_id:
                return msg

    def _silent(self, code, gen):
        msg_id = self.kc.execute(code, silent=True, store_history=False, allow_stdin=False,
                                 stop_on_error=False)
        self._reply(msg_id, gen, Discard())

    def _interrupt(self, msg_id, gen):
        """The client left: interrupt the cell and wait for the kernel to be idle; a
        kernel still busy after INTERRUPT_S is restarted."""
        self.km.interrupt_kernel()
        restarted, drained = threading.Event(), threading.Event()

        def hard_restart():
            if gen == self.generation and not drained.is_set():
                restarted.set()
                self.generation += 1
                self.km.restart_kernel(now=True)

        timer = threading.Timer(INTERRUPT_S, hard_restart)
        timer.start()
        try:
            self._stream(msg_id, gen, Discard())
            drained.set()
        except KernelGone:
            if restarted.is_set():
                self.kc.wait_for_ready(timeout=START_S)
        finally:
            timer.cancel()

    # ---- lifecycle (from other requests)
    def restart(self):
        """Kills and restarts the kernel (its state is lost); an execution in flight ends
        with an error. Returns when the new kernel answers."""
        self.generation += 1
        self.km.restart_kernel(now=True)
        with self.lock:
            self.kc.wait_for_ready(timeout=START_S)

    def close(self):
        self.generation += 1
        self.km.shutdown_kernel(now=True)
        with self.lock:
            self.kc.stop_channels()
