"""Positive controls of the far side: every instrument the attack tests read to show
that nothing arrived (nftables counters, the recording nameserver and canary resolver,
the web servers' logs) does record the same traffic when it is sent from the gateway's
own namespace, which has a route to the fake internet. A broken counter or log would
make every "nothing arrived" above pass silently; these tests fail instead."""
import json
import time

import netlab

EVIL_IP, ALLOWED_IP, CANARY = "203.0.113.20", "203.0.113.10", "198.51.100.53"


def from_gw(lab, *args):
    r = netlab.sh(netlab.PY, netlab.HERE + "/guestpy.py", *args, ns=lab.gwns, timeout=60)
    return json.loads(r.stdout)


def test_counters_count(lab):
    before = lab.counters()
    from_gw(lab, "udp", ALLOWED_IP, "123", "78" * 100)
    from_gw(lab, "icmp", ALLOWED_IP, "1")
    for port in ("22", "25", "8443"):
        assert from_gw(lab, "tcp", EVIL_IP, port, "", "1")["connected"]
    assert from_gw(lab, "tcp", CANARY, "853", "", "1")["connected"]
    time.sleep(0.3)
    after = lab.counters()
    for name in ("udp_other", "icmp_in", "tcp_22", "tcp_25", "tcp_8443", "tcp_853", "c_203_0_113_20",
                 "c_198_51_100_53"):
        assert after[name] > before[name], name


def test_resolvers_record_queries(lab):
    mark = lab.mark()
    from_gw(lab, "dns", CANARY, "canary-udp.evil.test", "1")
    from_gw(lab, "dns", CANARY, "canary-tcp.evil.test", "1", "tcp")
    from_gw(lab, "dns", "192.0.2.53", "auth-probe.evil.test", "16")
    time.sleep(0.3)
    seen = {(e["server"], e["name"], e["qtype"]) for e in lab.since(mark, "dns")}
    assert {("canary", "canary-udp.evil.test", 1), ("canary", "canary-tcp.evil.test", 1),
            ("auth", "auth-probe.evil.test", 16)} <= seen, seen


def test_nameserver_serves_aaaa(lab):
    """test_dns.py::test_aaaa_empty means something: asked directly, the zone's
    nameserver does answer the AAAA records the gateway must not pass on."""
    r = from_gw(lab, "dns", "192.0.2.53", "mapped.allowed.test", "28")
    assert r["answers6"] == ["::ffff:127.0.0.1"], r
    r = from_gw(lab, "dns", "192.0.2.53", "nat64.allowed.test", "28", "tcp")
    assert r["answers6"] == ["64:ff9b::7f00:1", "64:ff9b::a00:1"], r


def test_web_servers_log_blocked_vhost_and_hosts(lab):
    """Direct requests for the blocked virtual host (SNI and Host) are logged."""
    mark = lab.mark()
    r = from_gw(lab, "tlsget", ALLOWED_IP, "443", "blocked.test", "blocked.test", "/ctl",
                lab.dir + "/testca.crt")
    assert r["ok"] and r["status"] == 200, r
    r = from_gw(lab, "http", ALLOWED_IP, "80", "GET /ctl80 HTTP/1.1\\r\\nHost: evil.test\\r\\nConnection: close\\r\\n\\r\\n")
    assert r["reply"].startswith("HTTP/1.1 200"), r
    ev = lab.since(mark)
    assert any(e["kind"] == "tls" and e["sni"] == "blocked.test" for e in ev)
    assert any(e["kind"] == "http" and e["host"] == "blocked.test" and e["path"] == "/ctl" for e in ev)
    assert any(e["kind"] == "http" and e["host"] == "evil.test" and e["path"] == "/ctl80" for e in ev)


def test_vm_traffic_reaches_counters_when_allowed(lab, sb_open):
    """From inside the open-policy VM, an allowed connection to the address the tests
    watch moves its counter: the path VM -> gateway -> counter is observable."""
    before = lab.counters()["c_203_0_113_20"]
    r = sb_open.py("fetch", "http://evil.test/ctl-vm")
    assert r["ok"] and json.loads(r["body"])["addr"] == EVIL_IP, r
    assert lab.counters()["c_203_0_113_20"] > before
