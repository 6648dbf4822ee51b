"""Classes "forged resolution", "SNI games", "shared IP" and "non-TLS on 443, other
ports". The gateway dials only addresses it resolved itself for the checked name, and
resets whatever it cannot parse; the blocked side's counters and logs stay silent."""
import json
import time

import vmlab

ALLOWED_IP, EVIL_IP = "203.0.113.10", "203.0.113.20"


def web_events(lab, mark, addr=None):
    return [e for e in lab.since(mark) if e["kind"] in ("tcp", "tls", "http", "tls_fail")
            and (addr is None or e.get("addr") == addr)]


def fetch(sb, url, **opts):
    opts.setdefault("cafile", sb.ca)
    return sb.py("fetch", url, json.dumps(opts))


def hello(sb, spec, ip=ALLOWED_IP):
    return sb.py("hello", ip, "443", json.dumps(spec))


def hellos(sb, specs, ip=ALLOWED_IP):
    return sb.batch([("hello", ip, "443", json.dumps(spec)) for spec in specs])


def assert_reset(r):
    assert r["connected"] and r["reply"] == "" and (r["reset"] or r["closed"]), r


# ---- forged resolution
def test_curl_resolve_to_blocked_ip_goes_to_resolved_address(lab, sb):
    before, mark = lab.counters(), lab.mark()
    r = fetch(sb, "https://allowed.test/f1", resolve=EVIL_IP)
    assert r["ok"] and r["ip"] == EVIL_IP, r
    assert json.loads(r["body"])["addr"] == ALLOWED_IP
    assert lab.counters()["c_203_0_113_20"] == before["c_203_0_113_20"]
    assert not web_events(lab, mark, EVIL_IP)


def test_etc_hosts_override_goes_to_resolved_address(lab, sb):
    before = lab.counters()
    sb.put("/etc/hosts", ("%s%s allowed.test\n" % (vmlab.HOSTS, EVIL_IP)).encode())
    try:
        r1, r2 = sb.batch([("fetch", "http://allowed.test/f2"),
                           ("fetch", "https://allowed.test/f2s", json.dumps({"cafile": sb.ca}))])
    finally:
        sb.put("/etc/hosts", vmlab.HOSTS.encode())
    for r in (r1, r2):
        assert r["ok"] and r["ip"] == EVIL_IP, r  # the VM did use the forged entry
        assert json.loads(r["body"])["addr"] == ALLOWED_IP
    assert lab.counters()["c_203_0_113_20"] == before["c_203_0_113_20"]


def test_blocked_ip_with_allowed_sni(lab, sb):
    before, mark = lab.counters(), lab.mark()
    r = sb.py("tlsget", EVIL_IP, "443", "allowed.test", "allowed.test", "/f3", sb.ca)
    assert r["ok"] and json.loads(r["body"])["addr"] == ALLOWED_IP, r
    assert lab.counters()["c_203_0_113_20"] == before["c_203_0_113_20"]
    assert not web_events(lab, mark, EVIL_IP)


def test_blocked_ip_with_allowed_host_on_80(lab, sb):
    before = lab.counters()
    r = sb.py("http", EVIL_IP, "80", "GET /f4 HTTP/1.1\\r\\nHost: allowed.test\\r\\nConnection: close\\r\\n\\r\\n")
    assert '"addr": "203.0.113.10"' in r["reply"], r
    assert lab.counters()["c_203_0_113_20"] == before["c_203_0_113_20"]


def test_unresolvable_destination_ip_only(lab, sb):
    """Raw IP connection without a name: nothing to check, so nothing is dialled."""
    before = lab.counters()
    r1, r2 = sb.batch([("tlsinfo", EVIL_IP, "443", "-", "-"), ("fetch", "http://203.0.113.20/")])
    assert not r1["ok"], r1
    assert not r2["ok"] or r2["status"] >= 400, r2
    assert lab.counters()["c_203_0_113_20"] == before["c_203_0_113_20"]


# ---- SNI games
def test_no_sni_reset(lab, sb):
    mark = lab.mark()
    assert_reset(hello(sb, {"snis": None}))
    r = sb.py("tlsinfo", ALLOWED_IP, "443", "-", "-")  # a real TLS stack without SNI
    assert not r["ok"], r
    assert not web_events(lab, mark)


def test_ip_literal_sni_reset(lab, sb):
    mark = lab.mark()
    for r in hellos(sb, [{"snis": [sni]} for sni in ("203.0.113.10", "127.0.0.1", "0x7f.1",
                                                           "2130706433", "[::1]", "203.0.113.10.")]):
        assert_reset(r)
    assert not web_events(lab, mark)


def test_two_snis_reset(lab, sb):
    mark = lab.mark()
    for r in hellos(sb, [{"snis": ["allowed.test", "evil.test"]}, {"snis": ["evil.test", "allowed.test"]},
                         {"snis": ["allowed.test"], "dup_ext": True}]):
        assert_reset(r)
    assert not web_events(lab, mark)


def test_case_and_trailing_dot_normalised(lab, sb):
    for sni in ("ALLOWED.TEST", "Allowed.Test.", "allowed.test."):
        mark = lab.mark()
        r = hello(sb, {"snis": [sni]})
        assert r["connected"]
        time.sleep(0.3)
        evs = web_events(lab, mark)
        assert evs and all(e["addr"] == ALLOWED_IP for e in evs), (sni, evs)
    mark = lab.mark()
    assert_reset(hello(sb, {"snis": ["EVIL.TEST."]}))
    assert not web_events(lab, mark)


def test_lookalike_names_reset(lab, sb):
    before, mark = lab.counters(), lab.mark()
    snis = ("allowed.test.evil.test", "evilallowed.test", "allowed.tes", "allowed-test",
            "allowed.test\x00.evil.test", "xn--allowed.test", "allowed.test..", ".allowed.test")
    for r in hellos(sb, [{"snis": [sni]} for sni in snis]):
        assert_reset(r)
    assert lab.counters()["c_203_0_113_20"] == before["c_203_0_113_20"]
    assert not web_events(lab, mark)


def test_split_clienthello_allowed_works(lab, sb):
    splits = ("7", "40", "100")
    res = sb.batch([("tlsget", ALLOWED_IP, "443", "allowed.test", "allowed.test", "/split" + split,
                     sb.ca, split) for split in splits])
    for split, r in zip(splits, res):
        assert r["ok"] and r["status"] == 200, (split, r)


def test_split_clienthello_blocked_reset(lab, sb):
    mark = lab.mark()
    for r in hellos(sb, [{"snis": ["blocked.test"], "record": 5, "segments": True},
                         {"snis": ["evil.test"], "record": 16}]):
        assert_reset(r)
    r = sb.py("tlsget", ALLOWED_IP, "443", "blocked.test", "blocked.test", "/", sb.ca, "9")
    assert not r["ok"]
    assert not web_events(lab, mark)


def test_ech_reset(lab, sb):
    mark = lab.mark()
    assert_reset(hello(sb, {"snis": ["allowed.test"], "ech": True}))
    assert not web_events(lab, mark)


def test_garbage_and_truncated_hellos_reset(lab, sb):
    mark = lab.mark()
    raws = ("16030100050100000100", "1603010000", "160301ffff" + "00" * 10, "1503010002022800",
            "16030100040100ffff" + "00" * 4, "ff" * 300,
            "160301" + "4000" + "01" * 0x4000 + "160301" + "4000" + "01" * 0x4000)
    res = sb.batch([("tcp", ALLOWED_IP, "443", raw, "2") for raw in raws])
    for raw, r in zip(raws, res):
        assert r["connected"] and r["reply"] == "", (raw[:40], r)
    assert lab.gateway_alive()
    assert not web_events(lab, mark)


# ---- shared IP
def test_blocked_vhost_on_shared_ip_https(lab, sb):
    mark = lab.mark()
    r1, r2 = sb.batch([("fetch", "https://blocked.test/", json.dumps({"cafile": sb.ca})),
                       ("fetch", "https://blocked.test/", json.dumps({"cafile": sb.ca, "resolve": ALLOWED_IP}))])
    assert not r1["ok"] and not r2["ok"], (r1, r2)
    assert not [e for e in lab.since(mark) if e.get("sni") == "blocked.test" or e.get("host") == "blocked.test"]
    assert not web_events(lab, mark)
    ok = fetch(sb, "https://allowed.test/vhost", resolve=ALLOWED_IP)
    assert ok["ok"] and ok["status"] == 200, "control: the allowed vhost on that IP answers"


def test_blocked_vhost_on_shared_ip_http(lab, sb):
    mark = lab.mark()
    r = sb.py("http", ALLOWED_IP, "80", "GET / HTTP/1.1\\r\\nHost: blocked.test\\r\\n\\r\\n")
    assert r["reply"].startswith("HTTP/1.1 403")
    assert not web_events(lab, mark)


# ---- non-TLS on 443, other ports
def test_non_tls_bytes_on_443_reset(lab, sb):
    mark = lab.mark()
    payloads = (b"SSH-2.0-OpenSSH_9.2\r\n", b"GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n",
                b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", b"\x00" * 64)
    res = sb.batch([("tcp", ALLOWED_IP, "443", p.hex(), "2") for p in payloads])
    for payload, r in zip(payloads, res):
        assert r["connected"] and r["reply"] == "" and (r["reset"] or r["closed"]), payload
    assert not web_events(lab, mark)


def test_allowed_name_on_other_ports_dropped(lab, sb):
    before, mark = lab.counters(), lab.mark()
    for port, r in zip(("22", "25", "8443"), sb.batch([("tcp", ALLOWED_IP, p, "", "1") for p in ("22", "25", "8443")])):
        assert not r["connected"], port
    after = lab.counters()
    for port in (22, 25, 8443):
        assert after["tcp_%d" % port] == before["tcp_%d" % port]
    assert not web_events(lab, mark)
