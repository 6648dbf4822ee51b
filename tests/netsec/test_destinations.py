"""Class "forbidden destinations", from inside the VMs: names that resolve to private,
loopback, link-local/metadata, CGNAT, unspecified, multicast or the gateway host's own
addresses are never answered and never dialled, in the allowlist and in the open
policy; rebinding between two answers changes nothing. Canary listeners on the gateway
host's own addresses (127.0.0.1, 192.0.2.2; ports 80, 443) record any dial."""
import json
import time

import netlab

FORBIDDEN = ["private", "private172", "private192", "loop", "meta", "cgnat", "zero", "mcast", "self"]


def canary_hits(lab, mark):
    return [e for e in lab.since(mark) if e["kind"] == "canary"]


def check_box(lab, box):
    mark = lab.mark()
    calls = []
    for label in FORBIDDEN:
        name = "%s.allowed.test" % label
        calls += [("dns", netlab.GW_IP, name, "1"),
                  ("fetch", "https://%s/" % name, json.dumps({"cafile": box.ca, "timeout": 5})),
                  ("fetch", "http://%s/" % name, json.dumps({"timeout": 5}))]
    res = box.batch(calls)
    for i, label in enumerate(FORBIDDEN):
        dns, https, http = res[3 * i:3 * i + 3]
        assert dns["rcode"] == 0 and dns["answers"] == [], (label, dns)
        assert not https["ok"], (label, https)
        assert not http["ok"] or "space-gateway" in http["body"], (label, http)
    time.sleep(0.3)
    assert not canary_hits(lab, mark)
    denied = [e for e in box.log()["entries"] if not e["allowed"]]
    assert any(e["reason"] == "forbidden_addresses" for e in denied)


def test_control_canaries_record_dials(lab):
    """Positive control: the canaries do record a connection to the host's addresses."""
    mark = lab.mark()
    for ip in ("127.0.0.1", netlab.GW_UPLINK):
        netlab.sh(netlab.PY, netlab.HERE + "/guestpy.py", "tcp", ip, "80", "", "1", ns=lab.gwns)
    time.sleep(0.3)
    assert {e["addr"] for e in canary_hits(lab, mark)} == {"127.0.0.1", netlab.GW_UPLINK}


def test_forbidden_destinations_allowlist(lab, sb):
    check_box(lab, sb)


def test_forbidden_destinations_open_policy(lab, sb_open):
    check_box(lab, sb_open)


def test_mixed_answer_keeps_only_public(lab, sb):
    r, f = sb.batch([("dns", netlab.GW_IP, "mixed.allowed.test", "1"), ("fetch", "http://mixed.allowed.test/m")])
    assert r["answers"] == ["203.0.113.10"]
    assert json.loads(f["body"])["addr"] == "203.0.113.10"


def test_rebinding_between_answers(lab, sb):
    mark = lab.mark()
    seen = []
    for _ in range(3):
        t0 = time.monotonic()
        r, _f = sb.batch([("dns", netlab.GW_IP, "rebind.allowed.test", "1"),
                          ("fetch", "http://rebind.allowed.test/r", json.dumps({"timeout": 5}))])
        seen += r["answers"]
        # The gateway caches at least 5 s; wait that long so it asks again.
        time.sleep(max(0.0, 5.5 - (time.monotonic() - t0)))
    assert set(seen) <= {"203.0.113.10"}
    assert not canary_hits(lab, mark)
    rebind = [e for e in lab.since(mark, "dns") if e["name"] == "rebind.allowed.test"]
    assert len(rebind) >= 2, "control: the gateway asked again and saw the loopback answer"


def test_open_policy_reaches_public_names(lab, sb_open):
    r = sb_open.py("fetch", "http://evil.test/o")
    assert json.loads(r["body"])["addr"] == "203.0.113.20"


def test_open_policy_still_refuses_ip_literals_and_bad_names(lab, sb_open):
    mark = lab.mark()
    r1, r2 = sb_open.batch([
        ("http", "127.0.0.1", "80", "GET / HTTP/1.1\\r\\nHost: 127.0.0.1\\r\\n\\r\\n"),
        ("http", "192.0.2.2", "80", "GET / HTTP/1.1\\r\\nHost: localhost\\r\\n\\r\\n")])
    # 127.0.0.1 in the VM is the VM's own loopback: nothing listens there.
    assert r1["reply"].startswith("HTTP/1.1 400") or not r1["connected"], r1
    assert "space-gateway" in r2["reply"] or not r2["connected"], r2
    assert not canary_hits(lab, mark)
