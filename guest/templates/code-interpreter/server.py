"""The code interpreter server of the code-interpreter-v1 template: the HTTP protocol the
E2B code interpreter SDKs (npm @e2b/code-interpreter, PyPI e2b-code-interpreter) speak
to port 49999 of a sandbox, on Debian's Python alone (stdlib http.server, jupyter_client,
ipykernel). Started by the template's start command; `server.py --ready` is its ready
check (exit 0 once the default Python context answers).

Routes (docs/e2b.md, "Code interpreter"):
  GET    /health                  200 "OK" once the default Python context is up, else 503
  POST   /execute                 {code, context_id?, language?, env_vars?} -> 200 NDJSON
                                  stream (ci_output.py); context_id and language together
                                  are a 400, an unknown context_id a 404
  POST   /contexts                {language?, cwd?} -> {id, language, cwd}
  GET    /contexts                [{id, language, cwd}, ...]
  POST   /contexts/{id}/restart   new kernel / shell, state lost
  DELETE /contexts/{id}
Languages: python (an IPython kernel per context, ci_python.py) and bash (a long-lived
bash per context, ci_bash.py). Without context_id, a language's default context runs
the code (python's is made at start-up, before the template's snapshot; bash's on first
use). Errors are text/plain with a message saying what is wrong.
"""
import http.server
import json
import os
import re
import signal
import sys
import threading
import urllib.request
import uuid

from ci_bash import BashContext
from ci_output import Disconnected, Stream, error_item
from ci_python import PythonContext

PORT = 49999
MAX_BODY = 16 << 20
MAX_CONTEXTS = 32
LANGUAGES = {"python": PythonContext, "bash": BashContext}
ALIASES = {"": "python", "py": "python", "python3": "python", "sh": "bash", "shell": "bash"}
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
CONTEXT_PATH = re.compile(r"^/contexts/([A-Za-z0-9_-]{1,64})(/restart)?$")


class BadRequest(Exception):
    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


def log(msg):
    print("code-interpreter: %s" % msg, file=sys.stderr, flush=True)


class Registry:
    """The contexts by id, and which one is each language's default."""

    def __init__(self, home):
        self.home = home
        self.lock = threading.Lock()
        self.contexts = {}
        self.defaults = {}
        self.default_locks = {lang: threading.Lock() for lang in LANGUAGES}
        self.ready = threading.Event()

    def create(self, language, cwd):
        with self.lock:
            if len(self.contexts) >= MAX_CONTEXTS:
                raise BadRequest(429, "too many contexts (%d): remove some first" % MAX_CONTEXTS)
        cid = str(uuid.uuid4())
        ctx = LANGUAGES[language](cid, cwd)
        with self.lock:
            self.contexts[cid] = ctx
        log("context %s (%s) in %s" % (cid, language, cwd))
        return ctx

    def default(self, language):
        with self.default_locks[language]:
            ctx = self.get(self.defaults.get(language))
            if ctx is None:
                ctx = self.create(language, self.home)
                self.defaults[language] = ctx.id
            return ctx

    def get(self, cid):
        with self.lock:
            return self.contexts.get(cid)

    def remove(self, cid):
        with self.lock:
            return self.contexts.pop(cid, None)

    def list(self):
        with self.lock:
            return [c.describe() for c in self.contexts.values()]


def language_of(value):
    if value is None:
        return "python"
    if not isinstance(value, str):
        raise BadRequest(400, "language must be a string")
    lang = value.strip().lower()
    lang = ALIASES.get(lang, lang)
    if lang not in LANGUAGES:
        raise BadRequest(400, "language %r is not available here (available: %s)"
                         % (value[:64], ", ".join(sorted(LANGUAGES))))
    return lang


def optional_str(body, key):
    v = body.get(key)
    if v is not None and not isinstance(v, str):
        raise BadRequest(400, "%s must be a string" % key)
    return v


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "space-code-interpreter"
    registry = None  # set by main

    def log_message(self, fmt, *args):
        pass

    # ---- plumbing
    def reply(self, status, body, ctype="application/json"):
        data = body if isinstance(body, bytes) else (
            json.dumps(body) if ctype == "application/json" else body).encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def fail(self, status, message):
        self.reply(status, message + "\n", "text/plain; charset=utf-8")

    def read_body(self):
        """The request's JSON object (Content-Length or chunked, at most MAX_BODY)."""
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            data = b""
            while True:
                line = self.rfile.readline(100)
                try:
                    n = int(line.split(b";")[0], 16)
                except ValueError:
                    raise BadRequest(400, "bad chunk size line")
                if n == 0:
                    while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                        pass
                    break
                if len(data) + n > MAX_BODY:
                    raise BadRequest(413, "body over %d bytes" % MAX_BODY)
                data += self.rfile.read(n)
                self.rfile.readline(3)
        else:
            try:
                n = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                raise BadRequest(400, "bad Content-Length")
            if n < 0 or n > MAX_BODY:
                raise BadRequest(413, "body over %d bytes" % MAX_BODY)
            data = self.rfile.read(n)
        if not data.strip():
            return {}
        try:
            body = json.loads(data)
        except ValueError as e:
            raise BadRequest(400, "body is not JSON: %s" % e)
        if not isinstance(body, dict):
            raise BadRequest(400, "body must be a JSON object")
        return body

    def route(self, method):
        try:
            if not self.registry.ready.is_set() and self.path != "/health":
                raise BadRequest(503, "starting: the default Python context is not up yet")
            path = self.path.split("?", 1)[0]
            m = CONTEXT_PATH.match(path)
            if method == "GET" and path == "/health":
                if self.registry.ready.is_set():
                    return self.reply(200, "OK", "text/plain")
                return self.fail(503, "starting")
            if method == "POST" and path == "/execute":
                return self.execute(self.read_body())
            if method == "POST" and path == "/contexts":
                return self.create_context(self.read_body())
            if method == "GET" and path == "/contexts":
                return self.reply(200, self.registry.list())
            if m and (method, bool(m.group(2))) in (("POST", True), ("DELETE", False)):
                return self.context_op(m.group(1), restart=(method == "POST"))
            if path in ("/health", "/execute", "/contexts") or m:
                return self.fail(405, "method %s not allowed on %s" % (method, path))
            return self.fail(404, "no route %s" % path)
        except BadRequest as e:
            self.close_connection = True
            return self.fail(e.status, str(e))
        except Exception as e:  # a kernel that would not start, a shell that would not spawn
            log("%s %s failed: %r" % (method, self.path[:128], e))
            self.close_connection = True
            return self.fail(500, "%s failed: %s" % (self.path[:128], e))

    do_GET = lambda self: self.route("GET")  # noqa: E731
    do_POST = lambda self: self.route("POST")  # noqa: E731
    do_DELETE = lambda self: self.route("DELETE")  # noqa: E731

    # ---- routes
    def execute(self, body):
        code = body.get("code")
        if not isinstance(code, str):
            raise BadRequest(400, "code must be a string")
        cid = optional_str(body, "context_id")
        if cid and body.get("language"):
            raise BadRequest(400, "give context_id or language, not both")
        env = body.get("env_vars") or {}
        if not isinstance(env, dict) or not all(
                isinstance(k, str) and ENV_NAME.match(k) and isinstance(v, str) and "\0" not in v
                for k, v in env.items()):
            raise BadRequest(400, "env_vars must map names [A-Za-z_][A-Za-z0-9_]* to strings without NUL")
        if cid:
            ctx = self.registry.get(cid)
            if ctx is None:
                raise BadRequest(404, "context %s not found" % cid)
        else:
            ctx = self.registry.default(language_of(body.get("language")))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        out = Stream(self.wfile)
        self.close_connection = True
        try:
            try:
                ctx.execute(code, env, out)
            except (Disconnected, BadRequest):
                raise
            except Exception as e:  # the headers are out: the failure goes in the stream
                log("execution in %s failed: %r" % (ctx.id, e))
                out.emit(error_item("InternalError", "the execution failed: %s" % e))
            out.finish()
        except Disconnected:
            log("client left during an execution in %s: interrupted" % ctx.id)

    def create_context(self, body):
        lang = language_of(body.get("language"))
        cwd = optional_str(body, "cwd") or self.registry.home
        if not os.path.isabs(cwd) or not os.path.isdir(cwd):
            raise BadRequest(400, "cwd %r is not an existing absolute directory" % cwd[:256])
        ctx = self.registry.create(lang, os.path.normpath(cwd))
        self.reply(200, ctx.describe())

    def context_op(self, cid, restart):
        ctx = self.registry.get(cid) if restart else self.registry.remove(cid)
        if ctx is None:
            raise BadRequest(404, "context %s not found" % cid)
        if restart:
            ctx.restart()
        else:
            ctx.close()
        self.reply(200, None)


def ready_check():
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/health" % PORT, timeout=5) as r:
            return 0 if r.status == 200 else 1
    except OSError:
        return 1


def main():
    if sys.argv[1:] == ["--ready"]:
        sys.exit(ready_check())
    # Interrupts are SIGINT: a server started with SIGINT ignored (a shell's background
    # job) would pass that on to every shell and process it starts, and bash can neither
    # trap nor reset a signal ignored at its start.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    # pydevd (ipykernel's debugger) would warn about frozen modules at every kernel start.
    os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
    Handler.registry = Registry(os.getcwd())
    # Loopback only: spaced reaches it through the agent, which connects to 127.0.0.1.
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", PORT), Handler)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    log("listening on port %d; starting the default Python context" % PORT)
    Handler.registry.default("python")
    Handler.registry.ready.set()
    log("ready")
    threading.Event().wait()


if __name__ == "__main__":
    main()
