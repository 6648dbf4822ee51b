"""End-to-end tests of /v1/sandboxes/{id}/ports/{port}/{path...} against a real spaced
and a real VM (base template): busybox httpd in the sandbox serves a static file, a 4 MiB
file and CGI scripts (method, query, headers, request body echoed; a reply cut short
mid-body); a busybox nc server speaks an upgraded echo protocol after a 101. Checks: the
target (path + query) reaches the guest server, our Authorization header does not, the
cut reply is an error for the client, Upgrade carries bytes both ways, and auth, tenancy
and bad ports are refused like every sandbox route."""
import http.client
import socket
import time

import pytest

from spacedlib import session_output

HTTPD, UPGRADE, NOBODY = 8080, 8081, 8089
P = "/v1/sandboxes/%s/ports/%d%s"

SETUP = r"""
set -e
mkdir -p /tmp/www/cgi-bin
printf 'hi\n' > /tmp/www/hello.txt
head -c 4194304 /dev/urandom > /tmp/www/big.bin
sha256sum /tmp/www/big.bin | cut -d' ' -f1
cat > /tmp/www/cgi-bin/echo <<'X'
#!/bin/sh
printf 'Content-Type: text/plain\r\n\r\n'
echo "method=$REQUEST_METHOD query=$QUERY_STRING auth=${HTTP_AUTHORIZATION:-none} x=${HTTP_X_TEST:-none}"
cat
X
cat > /tmp/www/cgi-bin/cut <<'X'
#!/bin/sh
printf 'Content-Type: text/plain\r\nContent-Length: 100000\r\n\r\nhello'
X
cat > /tmp/up.sh <<'X'
#!/bin/sh
while read -r l; do [ "$l" = "$(printf '\r')" ] && break; [ -z "$l" ] && break; done
printf 'HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\nX-From: guest\r\n\r\n'
exec cat
X
chmod 755 /tmp/www/cgi-bin/echo /tmp/www/cgi-bin/cut /tmp/up.sh
busybox httpd -p 127.0.0.1:%d -h /tmp/www
(setsid busybox nc -ll -p %d -e /tmp/up.sh </dev/null >/dev/null 2>&1 &)
""" % (HTTPD, UPGRADE)


@pytest.fixture(scope="module")
def box(spaced):
    r = spaced.create({"template": "base", "timeout": 0})
    op = spaced.wait_op(r["operation"]["id"])
    assert op["state"] == "succeeded", op
    sid = r["sandbox"]["id"]
    out, code = session_output(spaced, sid, SETUP)
    assert code == 0, out
    big_sha = out.decode().split()[0]
    deadline = time.time() + 120
    while True:
        r = spaced.request("GET", P % (sid, HTTPD, "/hello.txt"))
        if r.status == 200 or time.time() > deadline:
            break
        time.sleep(0.5)
    assert r.status == 200, r
    yield sid, big_sha
    spaced.request("DELETE", "/v1/sandboxes/" + sid)


def test_static_files_and_target(spaced, box):
    sid, big_sha = box
    r = spaced.request("GET", P % (sid, HTTPD, "/hello.txt"))
    assert r.status == 200 and r.body == b"hi\n"
    r = spaced.request("HEAD", P % (sid, HTTPD, "/hello.txt"))
    assert r.status == 200 and r.body == b"" and r.headers["content-length"] == "3"
    r = spaced.request("GET", P % (sid, HTTPD, "/big.bin"), timeout=300)
    assert r.status == 200 and len(r.body) == 4 << 20
    import hashlib
    assert hashlib.sha256(r.body).hexdigest() == big_sha
    # The guest server's own 404 comes back as it is (not our JSON error).
    r = spaced.request("GET", P % (sid, HTTPD, "/missing"))
    assert r.status == 404 and b'"error"' not in r.body


def test_method_query_headers_body(spaced, box):
    sid, _ = box
    r = spaced.request("POST", P % (sid, HTTPD, "/cgi-bin/echo?a=1&b=x%20y"), raw=b"body!",
                       headers={"X-Test": "yes", "Content-Type": "text/plain"})
    assert r.status == 200, r
    # Our API key (Authorization) never reaches the sandbox.
    assert r.body == b"method=POST query=a=1&b=x%20y auth=none x=yes\nbody!", r.body
    # A larger body streams through to the CGI and back.
    r = spaced.request("POST", P % (sid, HTTPD, "/cgi-bin/echo"), raw=b"x" * 300000)
    assert r.status == 200 and r.body.endswith(b"x" * 300000), r


def test_cut_reply_is_an_error(spaced, box):
    sid, _ = box
    conn = http.client.HTTPConnection("127.0.0.1", spaced.port, timeout=120)
    conn.request("GET", P % (sid, HTTPD, "/cgi-bin/cut"),
                 headers={"Authorization": "Bearer " + spaced.admin_key})
    r = conn.getresponse()
    assert r.status == 200 and r.getheader("Content-Length") == "100000"
    with pytest.raises(http.client.IncompleteRead) as e:
        r.read()
    assert e.value.partial == b"hello"
    conn.close()


def test_upgrade_echo(spaced, box):
    sid, _ = box
    s = socket.create_connection(("127.0.0.1", spaced.port), timeout=120)
    s.sendall(("GET %s HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer %s\r\n"
               "Connection: Upgrade\r\nUpgrade: echo\r\n\r\n"
               % (P % (sid, UPGRADE, ""), spaced.admin_key)).encode())
    buf = b""
    while b"\r\n\r\n" not in buf:
        d = s.recv(65536)
        assert d, "closed before the 101: %r" % buf
        buf += d
    head, rest = buf.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 101 "), head
    assert b"\r\nUpgrade: echo" in head and b"\r\nX-From: guest" in head
    payload = bytes(range(256)) * 2048  # 512 KiB both ways
    s.sendall(payload)
    got = rest
    while len(got) < len(payload):
        d = s.recv(65536)
        assert d, "closed after %d bytes" % len(got)
        got += d
    assert got == payload
    s.shutdown(socket.SHUT_WR)
    while s.recv(65536):  # the guest's cat ends: the close reaches us
        pass
    s.close()


def test_refusals(spaced, box):
    sid, _ = box
    assert spaced.request("GET", P % (sid, HTTPD, "/hello.txt"), key=None).status == 401
    other = spaced.request("POST", "/v1/keys", {"tenant": "ports-other"}).json["secret"]
    r = spaced.request("GET", P % (sid, HTTPD, "/hello.txt"), key=other)
    assert r.status == 404 and r.error_code() == "not_found"
    for bad in ("0", "65536", "08080", "x"):
        r = spaced.request("GET", "/v1/sandboxes/%s/ports/%s" % (sid, bad))
        assert r.status == 400 and r.error_code() == "invalid_port", (bad, r)
    r = spaced.request("GET", P % (sid, NOBODY, ""))
    assert r.status == 502 and r.error_code() == "port_unreachable", r
    assert "connection_refused" in r.json["error"]["message"]
