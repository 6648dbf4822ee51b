"""A headless Chromium driven over the Chrome DevTools Protocol, stdlib only.

    with Browser() as b:             # starts `chromium --headless` on a free port
        page = b.page()               # a new tab (one websocket to it)
        page.goto(url)
        page.eval("document.title")
        page.screenshot(path)
        page.errors()                 # console errors, uncaught exceptions, CSP reports

Only what tests/e2e/test_console.py needs: a minimal RFC 6455 client (text frames,
masking, fragmentation, ping) and request/response matching by id; events are kept
in a list for errors() and wait_event().
"""
import base64
import http.client
import json
import os
import shutil
import socket
import struct
import subprocess
import tempfile
import time

from spacedlib import RUN_DIR, free_port

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


class WebSocket:
    def __init__(self, url, timeout=60):
        assert url.startswith("ws://")
        hostport, _, path = url[5:].partition("/")
        host, _, port = hostport.partition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(("GET /%s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                           "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n" % (path, hostport, key)).encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(1)
            if not chunk:
                raise OSError("websocket handshake: connection closed")
            head += chunk
        if not head.startswith(b"HTTP/1.1 101"):
            raise OSError("websocket handshake refused: %r" % head[:200])

    def _recv_exact(self, n):
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise OSError("websocket closed")
            buf += chunk
        return bytes(buf)

    def send(self, text):
        data = text.encode()
        head = bytearray([0x81])
        n = len(data)
        if n < 126:
            head.append(0x80 | n)
        elif n < 65536:
            head.append(0x80 | 126)
            head += struct.pack(">H", n)
        else:
            head.append(0x80 | 127)
            head += struct.pack(">Q", n)
        mask = os.urandom(4)
        head += mask
        self.sock.sendall(bytes(head) + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def _send_ctl(self, opcode, payload):
        mask = os.urandom(4)
        self.sock.sendall(bytes([0x80 | opcode, 0x80 | len(payload)]) + mask +
                          bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))

    def recv(self):
        """The next text message (fragments joined); answers pings."""
        msg = bytearray()
        while True:
            b0, b1 = self._recv_exact(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._recv_exact(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._recv_exact(8))[0]
            payload = self._recv_exact(n)
            op = b0 & 0x0F
            if op == 0x9:
                self._send_ctl(0xA, payload)
                continue
            if op == 0x8:
                raise OSError("websocket closed by the browser")
            if op in (0x0, 0x1, 0x2):
                msg += payload
                if b0 & 0x80:
                    return msg.decode()

    def close(self):
        self.sock.close()


class Page:
    def __init__(self, ws_url):
        self.ws = WebSocket(ws_url)
        self.next_id = 0
        self.events = []
        for domain in ("Page", "Runtime", "Log"):
            self.call(domain + ".enable")

    def _keep(self, m):
        # Only what errors() reads: other domains (DOM, once used) talk constantly.
        if m.get("method", "").startswith(("Runtime.", "Log.")):
            self.events.append(m)

    def call(self, method, timeout=120, **params):
        """Sends a command and returns its result; events that arrive meanwhile are kept.
        Fails after timeout seconds whatever the browser sends meanwhile."""
        self.next_id += 1
        my = self.next_id
        self.ws.send(json.dumps({"id": my, "method": method, "params": params}))
        deadline = time.monotonic() + timeout
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError("%s: no answer from the browser within %d s" % (method, timeout))
                self.ws.sock.settimeout(left)
                m = json.loads(self.ws.recv())
                if m.get("id") == my:
                    if "error" in m:
                        raise RuntimeError("%s: %s" % (method, m["error"]))
                    return m.get("result", {})
                self._keep(m)
        finally:
            self.ws.sock.settimeout(60)

    def pump(self, seconds):
        """Reads events for `seconds` (the browser only talks when asked or when events come)."""
        deadline = time.monotonic() + seconds
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self.ws.sock.settimeout(left)
                self._keep(json.loads(self.ws.recv()))
        except (socket.timeout, TimeoutError):
            pass
        finally:
            self.ws.sock.settimeout(60)

    def eval(self, expr, await_promise=True):
        r = self.call("Runtime.evaluate", expression=expr, awaitPromise=await_promise, returnByValue=True)
        if "exceptionDetails" in r:
            raise RuntimeError("eval %r: %s" % (expr, r["exceptionDetails"]))
        return r["result"].get("value")

    def goto(self, url):
        self.call("Page.navigate", url=url)
        self.wait(lambda: self.eval("document.readyState") == "complete", "page load of " + url)

    def wait(self, cond, what, timeout=120):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            v = cond()
            if v:
                return v
            self.pump(0.25)
        raise AssertionError("timed out waiting for %s; errors: %s" % (what, self.errors()))

    def screenshot(self, path):
        data = self.call("Page.captureScreenshot", format="png")["data"]
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    def errors(self):
        """Console errors, uncaught exceptions and browser log errors (failed loads, CSP
        violations) seen so far, as strings."""
        out = []
        for e in self.events:
            p = e.get("params", {})
            if e["method"] == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append("console.%s: %s" % (p["type"], " ".join(str(a.get("value", a.get("description"))) for a in p.get("args", []))))
            elif e["method"] == "Runtime.exceptionThrown":
                d = p.get("exceptionDetails", {})
                out.append("exception: %s %s" % (d.get("text"), d.get("exception", {}).get("description", "")))
            elif e["method"] == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                en = p["entry"]
                out.append("log(%s): %s %s" % (en.get("source"), en.get("text"), en.get("url", "")))
        return out

    def close(self):
        try:
            self.call("Page.close", timeout=10)
        except (OSError, AssertionError, RuntimeError):
            pass  # the tab is gone with the browser anyway
        self.ws.close()


class Browser:
    def __init__(self, width=1280, height=800):
        self.size = (width, height)
        self.proc = None

    def __enter__(self):
        self.profile = tempfile.mkdtemp(prefix="chr", dir=RUN_DIR)
        self.port = free_port()
        self.log = open(os.path.join(self.profile, "chromium.log"), "wb")
        # --no-sandbox: the tests run as root, where Chromium's sandbox refuses to start.
        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--no-default-browser-check", "--disable-extensions", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--hide-scrollbars",
             "--user-data-dir=" + self.profile, "--remote-debugging-address=127.0.0.1",
             "--remote-debugging-port=%d" % self.port, "--window-size=%d,%d" % self.size, "about:blank"],
            stdout=self.log, stderr=self.log, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError("chromium exited with %s" % self.proc.returncode)
            try:
                self._json("GET", "/json/version")
                return self
            except OSError:
                time.sleep(0.2)
        raise AssertionError("chromium did not open its debugging port within 60 s")

    def _json(self, method, path):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            c.request(method, path)
            r = c.getresponse()
            body = r.read()
            if r.status != 200:
                raise OSError("%s %s: %d %r" % (method, path, r.status, body[:200]))
            return json.loads(body)
        finally:
            c.close()

    def page(self):
        t = self._json("PUT", "/json/new?about:blank")
        return Page(t["webSocketDebuggerUrl"])

    def __exit__(self, *exc):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.profile, ignore_errors=True)
