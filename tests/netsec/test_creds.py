"""Classes "credential leaks" and "fronting inside TLS". For api.test the gateway
terminates TLS with the per-deployment CA, verifies the real server, checks Host on
every request and replaces the Authorization header; the token exists only in the
gateway. (Searching a real VM's memory and disk is done by the VM run of this suite.)"""
import json
import os

import netlab

TOKEN = netlab.TOKEN


def api_events(lab, mark):
    return [e for e in lab.since(mark) if e["kind"] == "api"]


def curl(lab, sb, *args):
    return sb.run("curl", "-sS", "-m", "10", "--cacert", lab.dir + "/guest-ca.pem", *args)


def test_injected_credential_works_and_never_reaches_guest(lab, sb):
    mark = lab.mark()
    r = curl(lab, sb, "-i", "https://api.test/v1/thing")
    assert r.returncode == 0, r.stderr
    assert "HTTP/1.1 200" in r.stdout and json.loads(r.stdout.split("\n\n", 1)[1])["authorized"]
    assert TOKEN not in r.stdout and TOKEN not in r.stderr
    ev = api_events(lab, mark)
    assert ev and ev[0]["authorized"] and ev[0]["n_auth"] == 1 and ev[0]["sni"] == "api.test"


def test_guest_sees_space_ca_leaf_not_upstream_cert(lab, sb):
    r = sb.run("openssl", "s_client", "-connect", "203.0.113.30:443", "-servername", "api.test",
               "-CAfile", lab.dir + "/ca/space-ca.crt", input="", timeout=15)
    assert "space per-deployment egress CA" in r.stdout
    assert "Verify return code: 0" in r.stdout


def test_sandbox_supplied_header_replaced(lab, sb):
    mark = lab.mark()
    r = curl(lab, sb, "-H", "Authorization: Bearer forged-by-guest", "-H",
             "authorization: Basic second-copy", "https://api.test/x")
    assert r.returncode == 0 and json.loads(r.stdout)["authorized"]
    ev = api_events(lab, mark)
    assert ev[0]["n_auth"] == 1 and ev[0]["authorized"]


def test_credential_not_sent_to_other_hosts(lab, sb):
    mark = lab.mark()
    for url in ("https://echo.allowed.test/e", "http://echo.allowed.test/e", "http://api.test/plain"):
        r = curl(lab, sb, url)
        assert TOKEN not in r.stdout
    for e in lab.since(mark):
        assert TOKEN not in json.dumps(e), e


def test_redirect_to_other_host_carries_no_credential(lab, sb):
    mark = lab.mark()
    r = curl(lab, sb, "-L", "https://api.test/redirect?to=https://echo.allowed.test/landed")
    assert TOKEN not in r.stdout
    landed = [e for e in lab.since(mark) if e["kind"] == "http" and e["path"] == "/landed"]
    assert landed and TOKEN not in json.dumps(landed)


def test_fronting_inside_terminated_tls_421(lab, sb):
    mark = lab.mark()
    for host in ("blocked.test", "evil.test", "allowed.test", "api.test:8443"):
        r = sb.py("tlsget", "203.0.113.30", "443", "api.test", host, "/front", lab.dir + "/guest-ca.pem")
        assert r["ok"] and r["status"] == 421, (host, r)
    assert not [e for e in lab.since(mark) if e["kind"] == "http"]


def test_second_request_with_other_host_inside_terminated_tls(lab, sb):
    mark = lab.mark()
    extra = "\\r\\n".join(["X-A: 1"]) + "\\r\\n"
    r = sb.py("tlsget", "203.0.113.30", "443", "api.test", "api.test", "/one", lab.dir + "/guest-ca.pem",
              "0", extra)
    assert r["ok"] and r["status"] == 200
    r = sb.run(netlab.PY, "-c", """
import socket, ssl, sys
ctx = ssl.create_default_context(cafile=sys.argv[1])
s = ctx.wrap_socket(socket.create_connection(('203.0.113.30', 443)), server_hostname='api.test')
s.sendall(b'GET /k1 HTTP/1.1\\r\\nHost: api.test\\r\\n\\r\\nGET /k2 HTTP/1.1\\r\\nHost: blocked.test\\r\\n\\r\\n')
s.settimeout(5)
buf = b''
while True:
    d = s.recv(65536)
    if not d: break
    buf += d
print(buf.decode('latin-1'))
""", lab.dir + "/guest-ca.pem")
    # The refusal drops whatever the upstream was still sending on that connection.
    assert "HTTP/1.1 421" in r.stdout, r
    paths = [e["path"] for e in lab.since(mark) if e["kind"] == "http"]
    assert "/one" in paths and "/k2" not in paths


def test_untrusted_upstream_certificate_refused(lab, sb):
    """badcert.allowed.test has a credential rule, but its server presents a certificate
    for another name: the gateway must not send the credential there."""
    mark = lab.mark()
    r = curl(lab, sb, "https://badcert.allowed.test/")
    assert r.returncode != 0 or "space-gateway" in r.stdout
    assert not [e for e in lab.since(mark) if e["kind"] == "http"]


def test_fronting_in_passthrough_stays_on_allowed_address(lab, sb):
    """Residual risk (docs/security.md): without termination, the Host inside TLS is
    not visible. The request can only reach the address resolved for the SNI name."""
    mark = lab.mark()
    r = sb.py("tlsget", "203.0.113.20", "443", "allowed.test", "blocked.test", "/fp", lab.dir + "/guest-ca.pem")
    seen = [e for e in lab.since(mark) if e["kind"] == "http"]
    assert all(e["addr"] == "203.0.113.10" for e in seen)
    assert r["ok"]


def test_secret_absent_from_guest_visible_files(lab, sb):
    gdir = "/etc/netns/" + sb.guest
    for name in os.listdir(gdir):
        assert TOKEN not in open(os.path.join(gdir, name)).read()
    r = sb.run("env")
    assert TOKEN not in r.stdout
    assert TOKEN not in open(lab.dir + "/ca/space-ca.crt").read()


def test_handshake_failing_at_setup_does_not_crash_gateway(lab, sb):
    """A guest TLS handshake that fails at once (the ClientHello is already buffered
    when the credential path starts) used to free the connection under gw_mitm_start.
    busybox wget's own TLS client (used when no openssl is on PATH, as in the guest)
    offers only RSA suites; a P-256 only leaf made it fail like that."""
    for _ in range(3):
        sb.run("env", "PATH=/var/empty", "/bin/busybox", "wget", "-q", "-T", "5", "-O", "-",
               "https://api.test/v1/thing", timeout=20)
    assert lab.gateway_alive(), "space-gateway died on a failed credential-path handshake"
    r = curl(lab, sb, "https://api.test/v1/thing")
    assert r.returncode == 0 and json.loads(r.stdout)["authorized"], r.stderr
