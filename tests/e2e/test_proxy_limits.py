"""Fairness at the connection level (docs/security.md "Quotas and tenancy"):

Without VMs (fake guest): the sandbox-port listener (SPACE_E2B_PORT_LISTEN) charges each
new connection to its source address's token bucket (--rate/--burst) and answers 429
with Retry-After in E2B's REST error shape beyond it; one address holds at most
--max-conns-per-client connections on the listener and on the API port (429 +
Retry-After beyond, the held ones still served); bad option values are refused.

With a VM (base template): a piped connection (upgraded on spaced's own port, or through
the sandbox-port listener) on which no byte moves for --proxy-idle-timeout seconds is
closed, while one that keeps moving bytes stays open."""
import json
import shutil
import socket
import subprocess
import time

import pytest

from spacedlib import GUEST, SPACED, Spaced, free_port, make_fake_guest, session_output


def read_reply(sock):
    buf = b""
    while True:
        d = sock.recv(65536)
        if not d:
            return buf
        buf += d


def head_of(reply):
    head, _, body = reply.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    return int(lines[0].split()[1]), {l.split(":", 1)[0].lower(): l.split(":", 1)[1].strip()
                                      for l in lines[1:]}, body


@pytest.fixture
def fake_guest():
    g = make_fake_guest()
    yield g
    shutil.rmtree(g, ignore_errors=True)


def test_port_listener_rate_limit(fake_guest):
    lport = free_port()
    s = Spaced(fake_guest).start(extra=["--rate", "0.01", "--burst", "3"],
                                 env={"SPACE_E2B_PORT_LISTEN": "127.0.0.1:%d" % lport})
    try:
        held = [socket.create_connection(("127.0.0.1", lport), timeout=10) for _ in range(3)]
        c = socket.create_connection(("127.0.0.1", lport), timeout=10)
        status, headers, body = head_of(read_reply(c))
        assert status == 429, (status, body)
        assert 1 <= int(headers["retry-after"]) <= 101, headers  # one token per 100 s
        err = json.loads(body)
        assert err["code"] == 429 and "too many new connections" in err["message"], err
        # The held connections are still served (a head naming no sandbox: 400).
        held[0].sendall(b"GET / HTTP/1.1\r\nHost: nowhere\r\n\r\n")
        assert head_of(read_reply(held[0]))[0] == 400
        for h in held:
            h.close()
        # The API keeps its own buckets: keys are not charged for listener connections.
        assert s.request("GET", "/v1/sandboxes").status == 200
    finally:
        s.stop()


def test_per_client_connection_cap(fake_guest):
    lport = free_port()
    s = Spaced(fake_guest).start(extra=["--max-conns-per-client", "2"],
                                 env={"SPACE_E2B_PORT_LISTEN": "127.0.0.1:%d" % lport})
    try:
        for port, shape in ((lport, "e2b"), (s.port, "api")):
            held = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(2)]
            time.sleep(0.2)  # accepted before the next one
            c = socket.create_connection(("127.0.0.1", port), timeout=10)
            status, headers, body = head_of(read_reply(c))
            assert status == 429 and headers["retry-after"] == "1", (shape, status, body)
            msg = json.loads(body)["message"] if shape == "e2b" else json.loads(body)["error"]["message"]
            assert "too many open connections" in msg, body
            for h in held:
                h.close()
            time.sleep(0.3)  # the server saw the closes
        # Slots free again once the held connections are gone.
        assert s.request("GET", "/v1/sandboxes").status == 200
    finally:
        s.stop()


@pytest.mark.parametrize("opt,val", [("--max-conns-per-client", "-1"), ("--proxy-idle-timeout", "x"),
                                     ("--proxy-idle-timeout", "")])
def test_bad_options_refused(opt, val, tmp_path):
    r = subprocess.run([SPACED, "--data-dir", str(tmp_path), opt, val], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 2 and opt[2:] in r.stderr, r


# ---- idle timeout on piped connections (real VM) -------------------------------------------

UPGRADE = 8081
IDLE_S = 3
SETUP = r"""
set -e
cat > /tmp/up.sh <<'X'
#!/bin/sh
while read -r l; do [ "$l" = "$(printf '\r')" ] && break; [ -z "$l" ] && break; done
printf 'HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n'
exec cat
X
chmod 755 /tmp/up.sh
(setsid busybox nc -ll -p %d -e /tmp/up.sh </dev/null >/dev/null 2>&1 &)
""" % UPGRADE


@pytest.fixture(scope="module")
def idle_box():
    from spacedlib import vm_missing
    why = vm_missing()
    if why:
        pytest.skip(why)
    lport = free_port()
    s = Spaced(GUEST).start(extra=["--proxy-idle-timeout", str(IDLE_S)],
                            env={"SPACE_E2B_PORT_LISTEN": "127.0.0.1:%d" % lport})
    try:
        r = s.create({"template": "base", "timeout": 0})
        op = s.wait_op(r["operation"]["id"])
        assert op["state"] == "succeeded", op
        sid = r["sandbox"]["id"]
        out, code = session_output(s, sid, SETUP)
        assert code == 0, out
        yield s, sid, lport
    finally:
        s.stop()


def upgraded(s, sid, lport, via_listener):
    """An echo connection through spaced's own port or the sandbox-port listener."""
    deadline = time.time() + 60
    while True:
        if via_listener:
            c = socket.create_connection(("127.0.0.1", lport), timeout=30)
            c.sendall(("GET / HTTP/1.1\r\nHost: t\r\nE2b-Sandbox-Id: %s\r\nE2b-Sandbox-Port: %d\r\n"
                       "Connection: Upgrade\r\nUpgrade: echo\r\n\r\n" % (sid, UPGRADE)).encode())
        else:
            c = socket.create_connection(("127.0.0.1", s.port), timeout=30)
            c.sendall(("GET /v1/sandboxes/%s/ports/%d HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer %s\r\n"
                       "Connection: Upgrade\r\nUpgrade: echo\r\n\r\n" % (sid, UPGRADE, s.admin_key)).encode())
        buf = b""
        while b"\r\n\r\n" not in buf:
            d = c.recv(4096)
            if not d:
                break
            buf += d
        if buf.startswith(b"HTTP/1.1 101 "):
            return c
        c.close()
        assert time.time() < deadline, buf  # the guest's nc may need a moment to listen
        time.sleep(1)


def echo(c, data):
    c.sendall(data)
    got = b""
    while len(got) < len(data):
        d = c.recv(4096)
        assert d, "closed after %d bytes" % len(got)
        got += d
    assert got == data


@pytest.mark.parametrize("via_listener", [False, True], ids=["upgrade", "listener"])
def test_idle_piped_connection_closed(idle_box, via_listener):
    s, sid, lport = idle_box
    busy = upgraded(s, sid, lport, via_listener)
    idle = upgraded(s, sid, lport, via_listener)
    echo(idle, b"hello\n")
    start = time.monotonic()
    # The busy one moves a byte every second for twice the timeout: it stays open.
    while time.monotonic() - start < 2 * IDLE_S:
        echo(busy, b"x\n")
        time.sleep(1)
    # The idle one was closed after IDLE_S seconds of silence.
    idle.settimeout(2 * IDLE_S)
    assert idle.recv(4096) == b"", "an idle piped connection stayed open"
    echo(busy, b"still here\n")
    busy.close()
    idle.close()
