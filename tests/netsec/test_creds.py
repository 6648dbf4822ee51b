"""Classes "credential leaks" and "fronting inside TLS", from inside the VM. For
api.test the gateway terminates TLS with the per-deployment CA, verifies the real
server, checks Host on every request and replaces the Authorization header; the token
exists only in spaced and the gateway: it is searched for in the VM's files and
processes (from inside) and in the whole memory of its QEMU process, guest RAM
included (from the host)."""
import binascii
import json
import os

import netlab
import vmlab

TOKEN = netlab.TOKEN
WRITABLE = "/etc,/root,/home,/tmp,/run,/var,/opt,/srv,/mnt,/media,/usr/local,/dev/shm"


def api_events(lab, mark):
    return [e for e in lab.since(mark) if e["kind"] == "api"]


def fetch(sb, url, **opts):
    opts.setdefault("cafile", sb.ca)
    return sb.py("fetch", url, json.dumps(opts))


def test_injected_credential_works_and_never_reaches_guest(lab, sb):
    mark = lab.mark()
    r = fetch(sb, "https://api.test/v1/thing")
    assert r["ok"] and r["status"] == 200, r
    assert json.loads(r["body"])["authorized"]
    assert TOKEN not in json.dumps(r)
    ev = api_events(lab, mark)
    assert ev and ev[0]["authorized"] and ev[0]["n_auth"] == 1 and ev[0]["sni"] == "api.test"


def test_guest_sees_space_ca_leaf_not_upstream_cert(lab, sb):
    r = sb.py("tlsinfo", "203.0.113.30", "443", "api.test", sb.space_ca)
    assert r["ok"], r  # verified against the deployment CA alone
    assert r["issuer"]["commonName"] == "space per-deployment egress CA", r


def test_sandbox_supplied_header_replaced(lab, sb):
    mark = lab.mark()
    r = fetch(sb, "https://api.test/x", headers=["Authorization: Bearer forged-by-guest",
                                                  "authorization: Basic second-copy"])
    assert r["ok"] and json.loads(r["body"])["authorized"], r
    ev = api_events(lab, mark)
    assert ev[0]["n_auth"] == 1 and ev[0]["authorized"]


def test_credential_not_sent_to_other_hosts(lab, sb):
    mark = lab.mark()
    res = sb.batch([("fetch", url, json.dumps({"cafile": sb.ca})) for url in
                    ("https://echo.allowed.test/e", "http://echo.allowed.test/e", "http://api.test/plain")])
    assert [r.get("status") for r in res] == [200, 200, 401], res  # all three were served
    assert TOKEN not in json.dumps(res)
    for e in lab.since(mark):
        assert TOKEN not in json.dumps(e), e


def test_redirect_to_other_host_carries_no_credential(lab, sb):
    mark = lab.mark()
    r = fetch(sb, "https://api.test/redirect?to=https://echo.allowed.test/landed", follow=1)
    assert [c["status"] for c in r["chain"]] == [302, 200], r
    assert TOKEN not in json.dumps(r)
    landed = [e for e in lab.since(mark) if e["kind"] == "http" and e["path"] == "/landed"]
    assert landed and TOKEN not in json.dumps(landed)


def test_fronting_inside_terminated_tls_421(lab, sb):
    mark = lab.mark()
    hosts = ("blocked.test", "evil.test", "allowed.test", "api.test:8443")
    res = sb.batch([("tlsget", "203.0.113.30", "443", "api.test", h, "/front", sb.ca) for h in hosts])
    for host, r in zip(hosts, res):
        assert r["ok"] and r["status"] == 421, (host, r)
    assert not [e for e in lab.since(mark) if e["kind"] == "http"]


def test_second_request_with_other_host_inside_terminated_tls(lab, sb):
    mark = lab.mark()
    r = sb.py("tlsget", "203.0.113.30", "443", "api.test", "api.test", "/one", sb.ca, "0", "X-A: 1\\r\\n")
    assert r["ok"] and r["status"] == 200, "control: the right Host is served"
    r = sb.run("python3", "-c", """
import socket, ssl, sys
ctx = ssl.create_default_context(cafile=sys.argv[1])
s = ctx.wrap_socket(socket.create_connection(('203.0.113.30', 443)), server_hostname='api.test')
s.sendall(b'GET /k1 HTTP/1.1\\r\\nHost: api.test\\r\\n\\r\\nGET /k2 HTTP/1.1\\r\\nHost: blocked.test\\r\\n\\r\\n')
s.settimeout(5)
buf = b''
while True:
    try:
        d = s.recv(65536)
    except (ssl.SSLError, ConnectionResetError):
        break
    if not d: break
    buf += d
print(buf.decode('latin-1'))
""", sb.ca)
    # The refusal drops whatever the upstream was still sending on that connection.
    assert "HTTP/1.1 421" in r.stdout, r.stdout + r.stderr
    paths = [e["path"] for e in lab.since(mark) if e["kind"] == "http"]
    assert "/one" in paths and "/k2" not in paths


def test_untrusted_upstream_certificate_refused(lab, sb):
    """badcert.allowed.test has a credential rule, but its server presents a certificate
    for another name: the gateway must not send the credential there."""
    mark = lab.mark()
    r = fetch(sb, "https://badcert.allowed.test/")
    assert not r["ok"] or r["status"] >= 500 or "space-gateway" in r["body"], r
    assert not [e for e in lab.since(mark) if e["kind"] == "http"]
    assert [e for e in lab.since(mark) if e["kind"] == "tls" and e["sni"] == "badcert.allowed.test"], \
        "control: the gateway did dial the upstream (and refused its certificate)"
    why = [e["reason"] for e in sb.log()["entries"] if e["name"] == "badcert.allowed.test" and not e["allowed"]]
    assert any(w.startswith("upstream_cert") for w in why), why


def test_fronting_in_passthrough_stays_on_allowed_address(lab, sb):
    """Residual risk (docs/security.md): without termination, the Host inside TLS is
    not visible. The request can only reach the address resolved for the SNI name."""
    mark = lab.mark()
    r = sb.py("tlsget", "203.0.113.20", "443", "allowed.test", "blocked.test", "/fp", sb.ca)
    seen = [e for e in lab.since(mark) if e["kind"] == "http"]
    assert r["ok"] and seen and all(e["addr"] == "203.0.113.10" for e in seen), (r, seen)


def test_secret_absent_from_vm_memory_and_files(lab, sb):
    """After the credential has been used (the tests above, and once more here), no
    trace of it in the VM: the whole memory of its QEMU process (guest RAM, page cache,
    QEMU's network buffers) is scanned from the host first (before anything puts the
    needle itself into the VM), then from inside every process's environment and
    command line and every file where anything is written at run time (WRITABLE; the
    distribution's /usr, /bin, /lib come from the image, built before any secret
    existed, and scanning them under TCG costs minutes). Positive control: a marker
    written into the VM is found by both searches."""
    assert fetch(sb, "https://api.test/v1/again")["status"] == 200
    marker = "netsec-marker-" + binascii.hexlify(os.urandom(8)).decode()
    sb.put("/home/user/marker.txt", ("x" + marker + "\n").encode())
    assert sb.run("cat", "/home/user/marker.txt").stdout.strip() == "x" + marker
    pid = sb.qemu_pid()
    assert vmlab.qemu_memory_contains(pid, marker), "control: the memory scan finds the marker"
    assert not vmlab.qemu_memory_contains(pid, TOKEN), "the token is in the VM's memory"
    res = sb.batch([("search", marker.encode().hex(), WRITABLE), ("search", TOKEN.encode().hex(), WRITABLE)])
    assert "/home/user/marker.txt" in res[0]["found"], res[0]
    assert res[1]["files"] > 100 and res[1]["found"] == [], res[1]
    assert TOKEN not in sb.run("env").stdout


def test_handshake_failing_at_setup_does_not_crash_gateway(lab, sb):
    """A guest TLS handshake that fails at once (the ClientHello is already buffered
    when the credential path starts) used to free the connection under gw_mitm_start;
    a guest that does not trust the deployment CA makes it fail that way: the gateway
    logs why, and nothing reaches the API. A client offering only RSA key exchange over
    TLS 1.2 (as busybox wget's does) used to fail too; it gets an RSA leaf now."""
    mark = lab.mark()
    res = sb.batch([("fetch", "https://api.test/v1/untrusting",
                     json.dumps({"cafile": "/etc/ssl/certs/ca-certificates.crt"}))] * 2)
    assert all(not r["ok"] and "CERTIFICATE_VERIFY_FAILED" in r.get("error", "") for r in res), res
    assert not [e for e in lab.since(mark) if e["kind"] == "http" and e["path"] == "/v1/untrusting"]
    why = [e["reason"] for e in sb.log()["entries"] if e["name"] == "api.test" and not e["allowed"]]
    assert any(w.startswith("client_tls_failed") for w in why), why
    res = sb.batch([("fetch", "https://api.test/v1/rsa", json.dumps({"cafile": sb.ca, "rsa_only": True}))] * 2)
    assert lab.gateway_alive(), "space-gateway died on a failed credential-path handshake"
    for r in res:
        assert r["ok"] and json.loads(r["body"])["authorized"], r


def test_tenant_rule_reaches_existing_sandbox_and_nothing_else(lab, sb_open):
    """A tenant-wide rule (PUT /v1/credentials) applies to the tenant's running VM that
    has no rule of its own: injected for the exact host only, never visible in that VM
    (its QEMU memory scanned), gone at once after DELETE."""
    sp = lab.spaced
    r = sp.request("PUT", "/v1/credentials", [{"host": "api.test", "header": "Authorization",
                                                "secret": "Bearer " + TOKEN}])
    assert r.status == 200 and TOKEN.encode() not in r.body, r
    try:
        mark = lab.mark()
        res = sb_open.batch([("fetch", url, json.dumps({"cafile": sb_open.ca})) for url in
                             ("https://api.test/tenant", "https://echo.allowed.test/tenant-echo",
                              "http://api.test/tenant-plain")])
        assert res[0]["ok"] and json.loads(res[0]["body"])["authorized"], res[0]
        assert [x["status"] for x in res[1:]] == [200, 401], res
        assert TOKEN not in json.dumps(res)
        for e in lab.since(mark):
            if not (e["kind"] in ("http", "api") and e.get("sni") == "api.test"):  # the injected request
                assert TOKEN not in json.dumps(e), e
        assert not vmlab.qemu_memory_contains(sb_open.qemu_pid(), TOKEN), "the token is in the VM's memory"
    finally:
        assert sp.request("DELETE", "/v1/credentials").status == 204
    r = sb_open.py("fetch", "https://api.test/tenant-after", json.dumps({"cafile": sb_open.ca}))
    assert r.get("status") == 401 or not r["ok"], r
