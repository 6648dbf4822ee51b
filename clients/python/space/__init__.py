"""space: a small Python client for the space sandbox API, standard library only.

    import space
    client = space.Client()                     # SPACE_URL / SPACE_API_KEY / admin.key
    sbx = client.create(template="python")      # waits until the sandbox runs
    result = sbx.run("echo hello", on_stdout=print)
    sbx.write_file("/tmp/a.txt", b"data")
    print(sbx.read_file("/tmp/a.txt"))
    sbx.delete()

Configuration, in order: the arguments of Client(); the environment variables
SPACE_URL (default http://127.0.0.1:7070) and SPACE_API_KEY; the admin key spaced
writes on first start, <SPACE_DATA_DIR or /var/lib/space>/admin.key.

Every API error raises SpaceError with the HTTP status, the error code and message from
the server. Command output arrives over Server-Sent Events; a dropped connection is
resumed with Last-Event-ID, so no output is lost or repeated.
"""

import base64
import codecs
import http.client
import json
import os
import socket
import threading
import time
import urllib.parse

__all__ = ["Client", "Sandbox", "Session", "CommandResult", "SpaceError"]
__version__ = "0.1.0"

DEFAULT_URL = "http://127.0.0.1:7070"
DEFAULT_DATA_DIR = "/var/lib/space"
_CHUNK = 256 * 1024


class SpaceError(Exception):
    """An error reply from spaced (status, code, message) or a client-side failure."""

    def __init__(self, status, code, message):
        super().__init__("%s %s: %s" % (status, code, message))
        self.status = status
        self.code = code
        self.message = message


class CommandResult:
    """What a finished command produced."""

    def __init__(self, exit_code, signal, stdout, stderr, error=None):
        self.exit_code = exit_code  # 0..255, or None if killed by a signal
        self.signal = signal        # signal number, or None
        self.stdout_bytes = stdout
        self.stderr_bytes = stderr
        self.error = error          # {"code","message"} if it could not start / was lost

    @property
    def stdout(self):
        return self.stdout_bytes.decode("utf-8", "replace")

    @property
    def stderr(self):
        return self.stderr_bytes.decode("utf-8", "replace")

    @property
    def ok(self):
        return self.exit_code == 0

    def __repr__(self):
        return "CommandResult(exit_code=%r, signal=%r, stdout=%r, stderr=%r)" % (
            self.exit_code, self.signal, self.stdout, self.stderr)


def _find_key():
    key = os.environ.get("SPACE_API_KEY")
    if key:
        return key.strip()
    path = os.path.join(os.environ.get("SPACE_DATA_DIR", DEFAULT_DATA_DIR), "admin.key")
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError as e:
        raise SpaceError(0, "no_api_key",
                         "no API key: set SPACE_API_KEY, or run where %s is readable (%s)"
                         % (path, e.strerror)) from None


class Client:
    """Connection settings plus the sandbox-level calls."""

    def __init__(self, url=None, api_key=None, timeout=120):
        self.url = (url or os.environ.get("SPACE_URL") or DEFAULT_URL).rstrip("/")
        parts = urllib.parse.urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise SpaceError(0, "bad_url", "SPACE_URL must be http(s)://host[:port], not %r"
                             % self.url)
        self._scheme = parts.scheme
        self._host = parts.hostname
        self._port = parts.port
        self._base = parts.path.rstrip("/")
        self.api_key = api_key or _find_key()
        self.timeout = timeout

    # ---- HTTP plumbing ------------------------------------------------------------------

    def _conn(self, timeout=None):
        cls = http.client.HTTPSConnection if self._scheme == "https" else http.client.HTTPConnection
        return cls(self._host, self._port, timeout=timeout if timeout is not None else self.timeout)

    def _headers(self, extra=None, token=None):
        h = {"Authorization": "Bearer " + (token or self.api_key), "Accept": "application/json"}
        h.update(extra or {})
        return h

    @staticmethod
    def _path(path, query=None):
        if query:
            q = {k: ("true" if v is True else "false" if v is False else v)
                 for k, v in query.items() if v is not None}
            if q:
                path += "?" + urllib.parse.urlencode(q)
        return path

    @staticmethod
    def _raise_for(resp, body):
        try:
            err = json.loads(body)["error"]
            code, msg = err.get("code", "error"), err.get("message", "")
        except (ValueError, KeyError, TypeError, AttributeError):
            code, msg = "http_%d" % resp.status, body[:300].decode("utf-8", "replace")
        raise SpaceError(resp.status, code, msg)

    # 429 (rate limited) and 503 (connection cap, agent reconnecting) mean spaced did
    # nothing with the request, so resending it is safe; Retry-After says when.
    _RETRY_STATUSES = (429, 503)
    _RETRIES = 8
    _RETRY_WAIT_MAX_S = 10.0

    def _open(self, method, path, body=None, headers=None, token=None, timeout=None):
        """Sends a request and returns (connection, response) with the body unread.
        Retries 429/503 answers (when the body can be sent again) after their
        Retry-After. Raises SpaceError for error statuses."""
        attempt = 0
        while True:
            conn = self._conn(timeout)
            try:
                conn.request(method, self._base + path, body=body,
                             headers=self._headers(headers, token))
                resp = conn.getresponse()
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                raise SpaceError(0, "unreachable", "cannot reach spaced at %s: %s" % (self.url, e)) from None
            if resp.status < 400:
                return conn, resp
            data = resp.read()
            conn.close()
            resendable = body is None or isinstance(body, (bytes, bytearray))
            if resp.status in self._RETRY_STATUSES and resendable and attempt < self._RETRIES:
                attempt += 1
                try:
                    wait = float(resp.getheader("Retry-After", "1"))
                except ValueError:
                    wait = 1.0
                time.sleep(min(max(wait, 0.1), self._RETRY_WAIT_MAX_S))
                continue
            self._raise_for(resp, data)

    def request(self, method, path, body=None, query=None, token=None, headers=None):
        """One JSON API call: returns the decoded reply ({} for an empty one)."""
        data = None
        hdrs = dict(headers or {})
        if body is not None:
            data = json.dumps(body).encode()
            hdrs["Content-Type"] = "application/json"
        conn, resp = self._open(method, self._path(path, query), data, hdrs, token)
        try:
            raw = resp.read()
        finally:
            conn.close()
        return json.loads(raw) if raw else {}

    # ---- operations and sandboxes ---------------------------------------------------------

    def wait_operation(self, op, timeout=600):
        """Waits until the operation (object or id) is terminal; raises if it failed."""
        op_id = op["id"] if isinstance(op, dict) else op
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise SpaceError(0, "timeout", "operation %s did not finish in %ss" % (op_id, timeout))
            cur = self.request("GET", "/v1/operations/" + op_id,
                               query={"wait": int(min(60, max(1, left)))})["operation"]
            if cur["state"] in ("succeeded", "failed", "canceled"):
                if cur["state"] != "succeeded":
                    err = cur.get("error") or {}
                    raise SpaceError(0, err.get("code", cur["state"]),
                                     "%s operation %s %s: %s" % (cur.get("kind"), op_id,
                                                                 cur["state"], err.get("message", "")))
                return cur

    def create(self, template="python", vcpus=None, memory_mib=None, env=None, metadata=None,
               timeout=None, on_timeout=None, network=None, idempotency_key=None, wait=True,
               auto_resume=None, volumes=None):
        """Creates a sandbox and (by default) waits until it is running. auto_resume=True:
        once paused or suspended, the next call needing its VM (command, file, port)
        resumes it and then proceeds. volumes: {name: guest path} (or a list of
        {"name", "path"}) of the tenant's volumes to mount read-write."""
        body = {"template": template}
        for k, v in (("vcpus", vcpus), ("memory_mib", memory_mib), ("env", env),
                     ("metadata", metadata), ("timeout", timeout), ("on_timeout", on_timeout),
                     ("network", network), ("auto_resume", auto_resume)):
            if v is not None:
                body[k] = v
        if volumes is not None:
            body["volumes"] = ([{"name": n, "path": p} for n, p in volumes.items()]
                               if isinstance(volumes, dict) else list(volumes))
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        r = self.request("POST", "/v1/sandboxes", body, headers=headers)
        sbx = Sandbox(self, r["sandbox"])
        if wait:
            self.wait_operation(r["operation"])
            sbx.refresh()
        return sbx

    def get(self, sandbox_id):
        return Sandbox(self, self.request("GET", "/v1/sandboxes/" + sandbox_id)["sandbox"])

    def quota(self):
        """This tenant's quota: {"tenant", "limits", "usage"} per resource (sandboxes,
        vcpus, memory_mib, disk_mib, templates, snapshots; a limit 0 is unlimited). A
        create over a limit raises SpaceError(403, "quota_exceeded", ...)."""
        return self.request("GET", "/v1/quota")

    def list(self, **filters):
        """Sandboxes of this tenant; filters: state, template, limit, metadata={k: v}."""
        query = {k: v for k, v in filters.items() if k != "metadata"}
        for k, v in (filters.get("metadata") or {}).items():
            query["metadata." + k] = v
        out, cursor = [], None
        while True:
            if cursor:
                query["cursor"] = cursor
            r = self.request("GET", "/v1/sandboxes", query=query)
            out += [Sandbox(self, s) for s in r["sandboxes"]]
            cursor = r.get("next_cursor")
            if not cursor or "limit" in filters:
                return out


    # ---- snapshots ----------------------------------------------------------------------

    def snapshots(self):
        """This tenant's snapshots (dicts: id, name, state, source_sandbox, template,
        vcpus, memory_mib, size_bytes, created_at). Create a sandbox from one by passing
        its id or name as the template."""
        return self.request("GET", "/v1/snapshots")["snapshots"]

    def snapshot(self, id_or_name):
        return self.request("GET", "/v1/snapshots/" + id_or_name)["snapshot"]

    def delete_snapshot(self, id_or_name):
        """Deletes a snapshot; sandboxes made from it keep running on its files."""
        self.request("DELETE", "/v1/snapshots/" + id_or_name)


class Sandbox:
    """One sandbox: lifecycle verbs, commands and files."""

    def __init__(self, client, info):
        self.client = client
        self.info = info
        self.id = info["id"]

    def __repr__(self):
        return "Sandbox(%s, %s)" % (self.id, self.info.get("state"))

    @property
    def state(self):
        return self.info.get("state")

    def refresh(self):
        self.info = self.client.request("GET", "/v1/sandboxes/" + self.id)["sandbox"]
        return self

    # ---- lifecycle ------------------------------------------------------------------------

    def _verb(self, verb, wait):
        if verb == "delete":
            r = self.client.request("DELETE", "/v1/sandboxes/" + self.id)
        else:
            r = self.client.request("POST", "/v1/sandboxes/%s/%s" % (self.id, verb))
        op = r["operation"]
        if wait:
            op = self.client.wait_operation(op)
            if verb != "delete":
                self.refresh()
        return op

    def pause(self, wait=True): return self._verb("pause", wait)
    def resume(self, wait=True): return self._verb("resume", wait)
    def suspend(self, wait=True): return self._verb("suspend", wait)
    def restore(self, wait=True): return self._verb("restore", wait)
    def stop(self, wait=True): return self._verb("stop", wait)
    def start(self, wait=True): return self._verb("start", wait)
    def wake(self, wait=True): return self._verb("wake", wait)
    def delete(self, wait=True): return self._verb("delete", wait)

    def fork(self, count=1, wait=True):
        """Forks this running sandbox into `count` new ones holding its memory, processes
        and disk at one instant (it is paused only for the capture). Returns the forks
        (running once the operation succeeded, when wait)."""
        r = self.client.request("POST", "/v1/sandboxes/%s/fork" % self.id, {"count": count})
        if wait:
            self.client.wait_operation(r["operation"])
        return [self.client.get(i) if wait else Sandbox(self.client, {"id": i, "state": "creating"})
                for i in r["sandboxes"]]

    def create_snapshot(self, name=None, wait=True):
        """Snapshots this running sandbox (memory + disk); returns the snapshot's dict.
        It outlives the sandbox: Client.create(template=<its id or name>) restores it."""
        r = self.client.request("POST", "/v1/sandboxes/%s/snapshots" % self.id,
                                {"name": name} if name else {})
        if not wait:
            return r["snapshot"]
        self.client.wait_operation(r["operation"])
        return self.client.snapshot(r["snapshot"]["id"])

    def set_timeout(self, seconds, on_timeout=None):
        body = {"timeout": seconds}
        if on_timeout:
            body["on_timeout"] = on_timeout
        self.info = self.client.request("POST", "/v1/sandboxes/%s/timeout" % self.id, body)["sandbox"]

    # ---- commands ---------------------------------------------------------------------------

    def session(self, cmd, env=None, cwd=None, user=None, pty=None, stdin=False, timeout=None,
                token_ttl=None):
        """Creates a command session (nothing runs until it is attached). cmd is a shell
        string or an argv list."""
        body = {"cmd": cmd} if isinstance(cmd, str) else {"argv": list(cmd)}
        for k, v in (("env", env), ("cwd", cwd), ("user", user), ("pty", pty),
                     ("timeout", timeout), ("token_ttl", token_ttl)):
            if v is not None:
                body[k] = v
        if stdin:
            body["stdin"] = True
        r = self.client.request("POST", "/v1/sandboxes/%s/sessions" % self.id, body)
        return Session(self, r)

    def sessions(self):
        return self.client.request("GET", "/v1/sandboxes/%s/sessions" % self.id)["sessions"]

    def run(self, cmd, on_stdout=None, on_stderr=None, stdin=None, env=None, cwd=None,
            user=None, pty=None, timeout=None):
        """Runs a command to completion, streaming its output to the callbacks (text,
        decoded as UTF-8 across chunk boundaries). stdin: bytes/str sent then closed.
        Returns a CommandResult with all of stdout and stderr."""
        s = self.session(cmd, env=env, cwd=cwd, user=user, pty=pty,
                         stdin=stdin is not None, timeout=timeout)
        return s.wait(on_stdout=on_stdout, on_stderr=on_stderr, stdin=stdin)

    # ---- files ------------------------------------------------------------------------------

    def _files(self, suffix=""):
        return "/v1/sandboxes/%s/files%s" % (self.id, suffix)

    def write_file(self, path, data, mode=None, user=None):
        """Uploads bytes, str (UTF-8) or a binary file object (streamed). mode is an int
        (0o644) or octal text. Returns the new file's stat."""
        if isinstance(data, str):
            data = data.encode()
        headers = {"Content-Type": "application/octet-stream"}
        if isinstance(data, (bytes, bytearray, memoryview)):
            headers["Content-Length"] = str(len(data))
        elif hasattr(data, "fileno"):
            try:
                st = os.fstat(data.fileno())
                headers["Content-Length"] = str(st.st_size - data.tell())
            except (OSError, ValueError):
                pass  # not a regular file: http.client sends it chunked
        q = {"path": path, "user": user,
             "mode": ("%o" % mode) if isinstance(mode, int) else mode}
        conn, resp = self.client._open("PUT", Client._path(self._files(), q), data, headers)
        try:
            return json.loads(resp.read())["file"]
        finally:
            conn.close()

    def read_file(self, path, user=None):
        """Downloads a whole file as bytes."""
        chunks = []
        self.read_file_to(path, chunks.append, user=user)
        return b"".join(chunks)

    def read_file_to(self, path, sink, user=None):
        """Streams a file into sink: a binary file object or a callable taking bytes.
        Returns the number of bytes."""
        write = sink if callable(sink) else sink.write
        conn, resp = self.client._open("GET", Client._path(self._files(), {"path": path, "user": user}))
        n = 0
        try:
            while True:
                b = resp.read(_CHUNK)
                if not b:
                    break
                write(b)
                n += len(b)
        finally:
            conn.close()
        length = resp.getheader("Content-Length")
        if length is not None and int(length) != n:
            raise SpaceError(0, "truncated", "download of %s ended after %d of %s bytes" % (path, n, length))
        return n

    def stat(self, path, user=None):
        return self.client.request("GET", self._files("/stat"), query={"path": path, "user": user})["file"]

    def list(self, path, depth=1, user=None):
        return self.client.request("GET", self._files("/list"),
                                   query={"path": path, "depth": depth, "user": user})["entries"]

    def exists(self, path):
        try:
            self.stat(path)
            return True
        except SpaceError as e:
            if e.status == 404:
                return False
            raise

    def mkdir(self, path, parents=True, mode=None, user=None):
        body = {"path": path, "parents": parents}
        if mode is not None:
            body["mode"] = mode
        if user:
            body["user"] = user
        return self.client.request("POST", self._files("/mkdir"), body)["file"]

    def remove(self, path, recursive=False):
        self.client.request("DELETE", self._files(), query={"path": path, "recursive": recursive})

    def rename(self, src, dst, user=None):
        body = {"from": src, "to": dst}
        if user:
            body["user"] = user
        return self.client.request("POST", self._files("/rename"), body)["file"]


class Session:
    """A command session: its event stream (with resume) and process control. Calls on
    it use the session's attach token, so a Session can be handed to code that must not
    hold the API key."""

    def __init__(self, sandbox, created):
        self.sandbox = sandbox
        self.client = sandbox.client
        self.id = created["id"]
        self.attach_url = created["attach_url"]
        self.token = created["attach_token"]
        self.last_event_id = None  # id of the last event received
        self._base = "/v1/sandboxes/%s/sessions/%s" % (sandbox.id, self.id)

    def status(self):
        return self.client.request("GET", self._base, token=self.token)["session"]

    def _post(self, what, body=None):
        return self.client.request("POST", self._base + "/" + what, body, token=self.token)

    def write_stdin(self, data):
        """Sends bytes (or str) to the process's stdin (streamed for file objects)."""
        if isinstance(data, str):
            data = data.encode()
        hdrs = {"Content-Type": "application/octet-stream"}
        if isinstance(data, (bytes, bytearray, memoryview)):
            hdrs["Content-Length"] = str(len(data))
        conn, resp = self.client._open("POST", self._base + "/stdin", data, hdrs, self.token)
        try:
            return json.loads(resp.read())
        finally:
            conn.close()

    def close_stdin(self):
        return self._post("close-stdin")

    def signal(self, sig="TERM"):
        return self._post("signal", {"signal": sig})

    def kill(self):
        return self.signal("KILL")

    def resize(self, rows, cols):
        return self._post("resize", {"rows": rows, "cols": cols})

    def events(self, reconnect=10, idle_timeout=None):
        """Yields (id, event, data) for every event, starting after self.last_event_id.
        A dropped connection is re-opened with Last-Event-ID up to `reconnect` times in a
        row. stdout/stderr data is decoded to bytes; other data to a dict. Ends after the
        `exit` or `error` event."""
        failures = 0
        while True:
            headers = {"Accept": "text/event-stream"}
            if self.last_event_id is not None:
                headers["Last-Event-ID"] = str(self.last_event_id)
            try:
                conn, resp = self.client._open("GET", self.attach_url, headers=headers,
                                               token=self.token, timeout=idle_timeout)
            except SpaceError as e:
                if e.status != 0 or failures >= reconnect:
                    raise
                failures += 1
                time.sleep(min(2.0, 0.1 * 2 ** failures))
                continue
            try:
                for ev in self._parse(resp):
                    failures = 0
                    yield ev
                    if ev[1] in ("exit", "error"):
                        return
                # The stream ended without exit: the session finished (replay) or the
                # server closed it; reconnecting tells which.
            except (OSError, http.client.HTTPException, socket.timeout):
                pass
            finally:
                conn.close()
            failures += 1
            if failures > reconnect:
                raise SpaceError(0, "stream_lost", "the event stream of session %s kept failing" % self.id)
            time.sleep(min(2.0, 0.05 * 2 ** failures))

    def _parse(self, resp):
        ev_id, ev_name, data = None, None, []
        while True:
            line = resp.readline()
            if not line:
                return
            line = line.rstrip(b"\r\n")
            if not line:
                if data or ev_name:
                    payload = json.loads(b"\n".join(data)) if data else {}
                    name = ev_name or "message"
                    if ev_id is not None:
                        self.last_event_id = ev_id
                    if name in ("stdout", "stderr"):
                        payload = base64.b64decode(payload.get("data", ""))
                    yield ev_id, name, payload
                ev_id, ev_name, data = None, None, []
                continue
            if line.startswith(b":"):
                continue
            field, _, value = line.partition(b":")
            if value.startswith(b" "):
                value = value[1:]
            if field == b"id":
                ev_id = int(value)
            elif field == b"event":
                ev_name = value.decode()
            elif field == b"data":
                data.append(value)

    def wait(self, on_stdout=None, on_stderr=None, stdin=None):
        """Attaches (starting the process), optionally sends stdin, and collects output
        until the process ends. Returns a CommandResult."""
        out, err = [], []
        dec = {"stdout": codecs.getincrementaldecoder("utf-8")("replace"),
               "stderr": codecs.getincrementaldecoder("utf-8")("replace")}
        cbs = {"stdout": on_stdout, "stderr": on_stderr}
        bufs = {"stdout": out, "stderr": err}
        code = sig = error = None
        feeder, feed_error = None, []

        def feed():
            try:
                if len(stdin):
                    self.write_stdin(stdin)
                self.close_stdin()
            except SpaceError as e:  # the process may exit before reading it all
                feed_error.append(e)

        for _id, name, data in self.events():
            if name == "start" and stdin is not None and feeder is None:
                # Another thread sends stdin, so output keeps being read meanwhile and a
                # process that echoes its input cannot deadlock against us.
                feeder = threading.Thread(target=feed, daemon=True)
                feeder.start()
            elif name in bufs:
                bufs[name].append(data)
                if cbs[name]:
                    text = dec[name].decode(data)
                    if text:
                        cbs[name](text)
            elif name == "exit":
                code, sig = data.get("code"), data.get("signal")
            elif name == "error":
                error = data
        if feeder:
            feeder.join()
        for name in ("stdout", "stderr"):
            tail = dec[name].decode(b"", final=True)
            if tail and cbs[name]:
                cbs[name](tail)
        return CommandResult(code, sig, b"".join(out), b"".join(err), error)
