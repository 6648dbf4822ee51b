"""No platform secret reaches a sandbox through the port proxies (docs/security.md,
"Secrets and the port proxy").

A recorder in the guest (python template: an HTTP/1.1 server that appends every request
head and body it receives to a file and answers "ok", keep-alive included) is reached
through every route that forwards to a sandbox port: the native
/v1/sandboxes/{id}/ports/{port}/..., E2B Host routing ("<port>-<id>.<domain>") and E2B
headers (E2b-Sandbox-Id / E2b-Sandbox-Port) on spaced's own port, and both forms on the
sandbox-port listener (a byte pipe), with second requests on a keep-alive connection
and a request body in between. Every request carries every credential form spaced
accepts (Authorization Bearer, X-API-Key in our and E2B's key format, the node token,
E2B's access and traffic tokens, Proxy-Authorization) and a field the Connection header
names. The test then searches what the guest recorded for the secret values (not just
the header names) and checks every probe did arrive. The control -> node leg is in
test_cluster.py.

Private ports ("ports": {"public": false}): every route needs the sandbox's traffic token
(e2b-traffic-access-token), which never reaches the guest either, and a missing or wrong
token is answered exactly like a sandbox id that does not exist."""
import secrets
import socket
import time

import pytest

import spacedlib
from spacedlib import Spaced, session_output

PORT = 8000
RECORD = "/tmp/heads.log"

RECORDER = r"""
import http.server, socketserver

class H(http.server.BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    def log_message(self, *a): pass
    def handle_one(self):
        body = b''
        if self.headers.get('Transfer-Encoding', '').lower() == 'chunked':
            while True:
                n = int(self.rfile.readline().split(b';')[0], 16)
                if n == 0:
                    while self.rfile.readline() not in (b'\r\n', b''): pass
                    break
                body += self.rfile.read(n)
                self.rfile.readline()
        else:
            n = int(self.headers.get('Content-Length') or 0)
            body = self.rfile.read(n) if n else b''
        with open('%s', 'ab') as f:
            f.write(self.requestline.encode() + b'\n' + bytes(self.headers) + body + b'\n----\n')
        self.send_response(200)
        self.send_header('Content-Length', '2')
        self.end_headers()
        self.wfile.write(b'ok')
    do_GET = do_POST = handle_one

class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True

S(('127.0.0.1', %d), H).serve_forever()
""" % (RECORD, PORT)


def start_recorder(s, sid, headers=None):
    """Starts the recorder in sandbox sid (python template) and waits until it answers
    through the native route of daemon s (headers: added to that request)."""
    out, code = session_output(s, sid, "cat > /tmp/rec.py <<'X'\n%s\nX\n"
                               "(setsid python3 /tmp/rec.py </dev/null >/tmp/rec.err 2>&1 &)" % RECORDER)
    assert code == 0, out
    deadline = time.time() + 120
    while True:
        r = s.request("GET", "/v1/sandboxes/%s/ports/%d/warmup" % (sid, PORT), headers=headers)
        if r.status == 200 or time.time() > deadline:
            break
        time.sleep(0.5)
    assert r.status == 200 and r.body == b"ok", r


def assert_nothing_leaked(s, sid, probes, values):
    """Every probe reached the recorder in sid, no secret value nor credential field did."""
    out, code = session_output(s, sid, "cat " + RECORD)
    assert code == 0, out
    got = out.decode(errors="replace")
    for p in probes:
        assert p in got, "probe %s never reached the guest:\n%s" % (p, got)
    leaked = [v for v in values if v in got]
    assert not leaked, "secrets reached the guest:\n%s" % got
    # No such field either (the pipe keeps the Connection field itself, naming X-Private-Hop:
    # that connection is end to end with the guest server).
    fields = {line.split(":", 1)[0].strip().lower() for line in got.splitlines() if ":" in line}
    for name in ("authorization", "x-api-key", "x-space-node-token", "x-access-token",
                 "e2b-traffic-access-token", "proxy-authorization", "x-private-hop"):
        assert name not in fields, "%s reached the guest:\n%s" % (name, got)
    return got


@pytest.fixture(scope="module")
def setup():
    why = spacedlib.vm_missing()
    if why:
        pytest.skip(why)
    listen = "127.0.0.1:%d" % spacedlib.free_port()
    node_token = secrets.token_hex(16)
    env = {"SPACE_E2B_PORT_LISTEN": listen, "SPACE_NODE_TOKEN": node_token}
    s = Spaced(spacedlib.GUEST).start(env=env)
    try:
        r = s.create({"template": "python", "timeout": 0})
        op = s.wait_op(r["operation"]["id"])
        assert op["state"] == "succeeded", op
        sid = r["sandbox"]["id"]
        start_recorder(s, sid)
        s.port_listen = listen
        yield s, sid, listen, node_token
    finally:
        s.stop()


def secret_headers(key, node_token):
    """Every credential form, each with its own value; returns (headers, secret values)."""
    vals = {"access": secrets.token_hex(16), "traffic": secrets.token_hex(16),
            "proxy": secrets.token_hex(16), "private": secrets.token_hex(16)}
    headers = [
        ("Authorization", "Bearer " + key),
        ("X-API-Key", key),
        ("X-API-KEY", "e2b_" + key[len("space_"):]),
        ("X-Space-Node-Token", node_token),
        ("X-Access-Token", vals["access"]),
        ("e2b-traffic-access-token", vals["traffic"]),
        ("Proxy-Authorization", "Basic " + vals["proxy"]),
        ("Connection", "keep-alive, X-Private-Hop"),
        ("X-Private-Hop", vals["private"]),
    ]
    # The key's hex part also covers the E2B form; the node token is searched as is.
    return headers, [key[len("space_"):], node_token] + list(vals.values())


def exchange(addr, requests):
    """Sends each (method, target, headers, body) on one connection, in turn, reading
    each response (Content-Length framed) before the next. Returns the statuses."""
    host, port = addr
    statuses = []
    with socket.create_connection((host, port), timeout=60) as c:
        f = c.makefile("rb")
        for method, target, headers, body in requests:
            head = "%s %s HTTP/1.1\r\n" % (method, target)
            head += "".join("%s: %s\r\n" % kv for kv in headers)
            if body and not any(k.lower() == "transfer-encoding" for k, _ in headers):
                head += "Content-Length: %d\r\n" % len(body)
            c.sendall(head.encode() + b"\r\n" + body)
            status = f.readline().split()[1]
            length = 0
            while True:
                line = f.readline()
                assert line, "connection closed mid-response"
                if line in (b"\r\n", b"\n"):
                    break
                k, _, v = line.decode().partition(":")
                if k.strip().lower() == "content-length":
                    length = int(v)
            f.read(length)
            statuses.append(int(status))
    return statuses


def test_no_secret_reaches_the_guest(setup):
    s, sid, listen, node_token = setup
    key = s.admin_key
    sec, values = secret_headers(key, node_token)
    api = ("127.0.0.1", s.port)
    lh, lp = listen.rsplit(":", 1)
    pipe = (lh, int(lp))
    host = [("Host", "%d-%s.example.test" % (PORT, sid))]
    e2bh = [("Host", "x"), ("E2b-Sandbox-Id", sid), ("E2b-Sandbox-Port", str(PORT))]
    native = "/v1/sandboxes/%s/ports/%d" % (sid, PORT)
    probes = []

    def req(route, headers, method="GET", body=b"", drop=()):
        name = "probe-%d-%s" % (len(probes), route)
        probes.append(name)
        return (method, "/" + name if not route.startswith("native") else native + "/" + name,
                headers + [("X-Probe", name)] + [kv for kv in sec if kv[0] not in drop], body)

    chunked = [("Transfer-Encoding", "chunked")]
    chunks = b"4\r\nbody\r\n0\r\n\r\n"

    runs = [
        (api, [req("native", [("Host", "api")]), req("native-ka", [("Host", "api")], "POST", b"body"),
               req("native-ka2", [("Host", "api")])]),
        # Authenticated by X-API-Key alone (the Authorization header is then a second form).
        (api, [req("native-xkey", [("Host", "api")], drop=("Authorization",))]),
        (api, [req("e2b-host", host), req("e2b-host-ka", host, "POST", b"body"), req("e2b-host-ka2", host)]),
        (api, [req("e2b-headers", e2bh), req("e2b-headers-ka", e2bh)]),
        (pipe, [req("pipe-host", host), req("pipe-host-ka", host, "POST", b"body"), req("pipe-host-ka2", host)]),
        (pipe, [req("pipe-headers", e2bh), req("pipe-headers-ka", e2bh + chunked, "POST", chunks),
                req("pipe-headers-ka2", e2bh)]),
    ]
    for addr, reqs in runs:
        assert exchange(addr, reqs) == [200] * len(reqs), reqs[0][1]
    got = assert_nothing_leaked(s, sid, probes, values)
    assert got.count("body") >= 4, got  # request bodies between keep-alive requests arrived


def test_pipe_ends_at_a_refused_upgrade(setup):
    """After an Upgrade request the guest did not switch (answers 200), the pipe sends
    nothing more up: a later head on that connection could not be told from upgraded
    bytes, so it is neither cleaned nor forwarded."""
    s, sid, listen, node_token = setup
    sec, values = secret_headers(s.admin_key, node_token)
    lh, lp = listen.rsplit(":", 1)
    host = "Host: %d-%s.example.test\r\n" % (PORT, sid)
    first = "GET /upgrade-refused HTTP/1.1\r\n" + host + "Connection: Upgrade\r\nUpgrade: x\r\n\r\n"
    second = ("GET /after-refused HTTP/1.1\r\n" + host +
              "".join("%s: %s\r\n" % kv for kv in sec) + "\r\n")
    with socket.create_connection((lh, int(lp)), timeout=60) as c:
        c.sendall(first.encode())
        f = c.makefile("rb")
        assert f.readline().split()[1] == b"200"
        c.sendall(second.encode())
        rest = f.read()  # the connection ends: nothing answers the second request
    assert rest.count(b"HTTP/1.") == 0, rest
    got = assert_nothing_leaked(s, sid, ["upgrade-refused"], values)
    assert "after-refused" not in got, got


TOKEN = "e2b-traffic-access-token"


def test_private_ports_option_is_checked(setup):
    s, sid, _, _ = setup
    r = s.request("GET", "/v1/sandboxes/" + sid)
    assert r.status == 200 and r.json["sandbox"]["ports"] == {"public": True}, r
    for bad in ({"public": "no"}, {"publik": False}, {"public": False, "x": 1}, [], True):
        r = s.request("POST", "/v1/sandboxes", {"template": "python", "ports": bad})
        assert r.status == 400 and "ports must be" in r.json["error"]["message"], (bad, r)


def send_and_read_all(addr, head):
    """Sends one raw request head on a new connection; returns every byte until close."""
    with socket.create_connection(addr, timeout=60) as c:
        c.sendall(head.encode())
        data = b""
        while True:
            d = c.recv(65536)
            if not d:
                return data
            data += d


def _strip(body, sid):
    return body.replace(sid.encode(), b"<id>")


def test_private_ports_need_the_traffic_token(setup):
    s, _, listen, node_token = setup
    r = s.create({"template": "python", "timeout": 0, "ports": {"public": False}})
    sid = r["sandbox"]["id"]
    token = r["sandbox"]["ports"]["traffic_access_token"]
    assert r["sandbox"]["ports"]["public"] is False and len(token) > 32, r
    assert s.wait_op(r["operation"]["id"])["state"] == "succeeded"
    got = s.request("GET", "/v1/sandboxes/" + sid).json["sandbox"]["ports"]
    assert got == {"public": False, "traffic_access_token": token}, got
    start_recorder(s, sid, headers={TOKEN: token})
    ghost = "sb" + "0" * 16
    wrong = token[:-4] + ("0000" if not token.endswith("0000") else "1111")
    lh, lp = listen.rsplit(":", 1)
    pipe = (lh, int(lp))

    def native(box, tok, key="admin"):
        h = {TOKEN: tok} if tok else {}
        return s.request("GET", "/v1/sandboxes/%s/ports/%d/n" % (box, PORT), headers=h, key=key)

    def e2b(box, tok, addr, by_host=True):
        h = [("Host", "%d-%s.example.test" % (PORT, box))] if by_host else \
            [("Host", "x"), ("E2b-Sandbox-Id", box), ("E2b-Sandbox-Port", str(PORT))]
        if tok:
            h.append((TOKEN, tok))
        head = "GET /e HTTP/1.1\r\n" + "".join("%s: %s\r\n" % kv for kv in h) + \
            "Connection: close\r\n\r\n"
        data = send_and_read_all(addr, head)
        status = int(data.split(b" ", 2)[1])
        return status, _strip(data.split(b"\r\n\r\n", 1)[1], box)

    # Native route: the owner's API key is not enough; without the token, or with a wrong
    # one, the answer is the unknown sandbox's, byte for byte (id aside). Without an API
    # key it is the same 401 for every id.
    unknown = native(ghost, None)
    assert unknown.status == 404, unknown
    for tok in (None, wrong, token + "x", ""):
        r = native(sid, tok)
        assert (r.status, _strip(r.body, sid)) == (404, _strip(unknown.body, ghost)), (tok, r)
    assert native(sid, token).status == 200
    assert native(sid, token, key=None).status == native(ghost, token, key=None).status == 401
    # E2B routes on spaced's own port and on the listener: same rule, no API key involved.
    for addr in (("127.0.0.1", s.port), pipe):
        for by_host in (True, False):
            nobody = e2b(ghost, None, addr, by_host)
            assert nobody[0] == 502, nobody
            for tok in (None, wrong):
                assert e2b(sid, tok, addr, by_host) == nobody, (addr, by_host, tok)
            assert e2b(sid, token, addr, by_host) == (200, b"ok"), (addr, by_host)
    # The token itself never reached the guest.
    assert_nothing_leaked(s, sid, [], [token.split(".")[-1], node_token])
    s.request("DELETE", "/v1/sandboxes/" + sid)


def test_pipe_rewrites_tight_fields(setup):
    """Fields sent as "name:value" (no space) come out as "name: value", longer than they
    came in: the re-sent head is sized for that (ASan build), and the credential among
    them is still dropped."""
    s, sid, listen, _ = setup
    lh, lp = listen.rsplit(":", 1)
    head = ("GET /tight HTTP/1.1\r\nHost:%d-%s.example.test\r\n" % (PORT, sid) +
            "".join("X-T%d:v\r\n" % i for i in range(90)) + "X-API-Key:" + s.admin_key +
            "\r\nConnection:close\r\n\r\n")
    data = send_and_read_all((lh, int(lp)), head)
    assert data.startswith(b"HTTP/1.1 200"), data
    got = assert_nothing_leaked(s, sid, ["/tight"], [s.admin_key[len("space_"):]])
    assert "X-T89: v" in got, got


def test_private_ports_survive_a_restart(need_vm, fresh_spaced):
    """The flag is in the store and the token derives from <data-dir>/token.secret: after
    spaced is killed and restarted (adopting the VM), the same token opens the port and
    its absence is still the unknown sandbox's 404."""
    s = fresh_spaced()
    r = s.create({"template": "python", "timeout": 0, "ports": {"public": False}})
    sid, token = r["sandbox"]["id"], r["sandbox"]["ports"]["traffic_access_token"]
    assert s.wait_op(r["operation"]["id"])["state"] == "succeeded"
    start_recorder(s, sid, headers={TOKEN: token})
    s.kill9()
    s.start()
    path = "/v1/sandboxes/%s/ports/%d/again" % (sid, PORT)
    deadline = time.time() + 120
    while True:
        r = s.request("GET", path, headers={TOKEN: token})
        if r.status == 200 or time.time() > deadline:
            break
        time.sleep(0.5)
    assert r.status == 200 and r.body == b"ok", r
    assert s.request("GET", "/v1/sandboxes/" + sid).json["sandbox"]["ports"]["traffic_access_token"] == token
    assert s.request("GET", path).status == 404
    r = s.request("DELETE", "/v1/sandboxes/" + sid)
    assert s.wait_op(r.json["operation"]["id"])["state"] == "succeeded"
