"""Classes "policy changes" and "floods": a live policy change ends the connections it
forbids and refuses new ones; floods from one sandbox are rate-limited and logged,
the gateway stays up and the other sandbox keeps working."""
import json
import subprocess
import time

import netlab

NARROW = {"mode": "allowlist", "allow": ["api.test"]}


def test_policy_change_ends_live_connections(lab, sb):
    hold = subprocess.Popen(["ip", "netns", "exec", sb.guest, netlab.PY, netlab.HERE + "/guestpy.py",
                             "hold", "203.0.113.10", "80", "allowed.test", "20"],
                            stdout=subprocess.PIPE, text=True)
    try:
        first = json.loads(hold.stdout.readline())
        assert first["ready"] and first["first"].startswith("HTTP/1.1 200")
        assert sb.set_policy(NARROW)["ok"]
        res = json.loads(hold.stdout.readline())
        assert res["closed"], res
    finally:
        hold.kill()
        hold.wait()
    mark = lab.mark()
    r = sb.run("curl", "-sS", "-m", "5", "http://allowed.test/after")
    assert r.returncode != 0 or "space-gateway" in r.stdout
    assert sb.py("dns", netlab.GW_IP, "allowed.test", "1")["rcode"] == 3
    assert not [e for e in lab.since(mark) if e["kind"] == "http"]
    assert any(e["reason"] == "policy_changed" for e in sb.log()["entries"])


def test_policy_change_to_none_ends_tls_passthrough(lab, sb):
    hold = subprocess.Popen(["ip", "netns", "exec", sb.guest, netlab.PY, "-c", """
import socket, ssl, sys, json
ctx = ssl.create_default_context(cafile=sys.argv[1])
s = ctx.wrap_socket(socket.create_connection(('203.0.113.10', 443)), server_hostname='allowed.test')
s.sendall(b'GET / HTTP/1.1\\r\\nHost: allowed.test\\r\\n\\r\\n')
print(json.dumps({"ready": s.recv(12).decode()}), flush=True)
s.settimeout(20)
try:
    while s.recv(65536):
        pass
    print(json.dumps({"closed": True}), flush=True)
except socket.timeout:
    print(json.dumps({"closed": False}), flush=True)
except (ConnectionResetError, ssl.SSLError, OSError):
    print(json.dumps({"closed": True}), flush=True)
""", lab.dir + "/guest-ca.pem"], stdout=subprocess.PIPE, text=True)
    try:
        first = json.loads(hold.stdout.readline())
        assert first["ready"].startswith("HTTP/1.1")
        assert sb.set_policy({"mode": "none"})["ok"]
        assert json.loads(hold.stdout.readline())["closed"]
    finally:
        hold.kill()
        hold.wait()


def test_dns_flood_rate_limited_other_sandbox_unaffected(lab, sb, sb_open):
    r = sb.py("dnsflood", netlab.GW_IP, "3000", "www.allowed.test", timeout=120)
    assert r["answered"] < r["sent"]
    log = sb.log()
    assert log["dns_rate_limited"] > 0
    assert any("rate_limited" in e["reason"] for e in log["entries"])
    assert sb_open.py("dns", netlab.GW_IP, "allowed.test", "1")["answers"] == ["203.0.113.10"]
    assert lab.gateway_alive()


def test_connection_flood_limited_other_sandbox_unaffected(lab, sb, sb_open):
    r = sb.py("connflood", "203.0.113.10", "443", "600", timeout=300)
    assert r["connected"] + r["refused"] + r["failed"] == 600
    log = sb.log()
    assert log["conn_rate_limited"] > 0 or r["still_open"] <= 256
    r = sb_open.run("curl", "-sS", "-m", "10", "http://allowed.test/other")
    assert json.loads(r.stdout)["host"] == "allowed.test"
    assert lab.gateway_alive()


def test_garbage_floods_keep_gateway_up(lab, sb, sb_open):
    mark = lab.mark()
    sb.py("garbage", "203.0.113.10", netlab.GW_IP, "100", timeout=300)
    assert lab.gateway_alive()
    assert sb_open.py("dns", netlab.GW_IP, "allowed.test", "1")["rcode"] == 0
    assert not [e for e in lab.since(mark) if e["kind"] in ("http", "tls")]
