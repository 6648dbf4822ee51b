"""Class "forbidden destinations": names that resolve to private, loopback,
link-local/metadata, CGNAT, unspecified, multicast or the gateway host's own
addresses are never answered and never dialled, in the allowlist and in the open
policy; rebinding between two answers changes nothing."""
import json
import time

import netlab

FORBIDDEN = ["private", "loop", "meta", "cgnat", "zero", "mcast", "self"]


def canary_hits(lab, mark):
    return [e for e in lab.since(mark) if e["kind"] == "canary"]


def check_box(lab, box):
    mark = lab.mark()
    for label in FORBIDDEN:
        name = "%s.allowed.test" % label
        r = box.py("dns", netlab.GW_IP, name, "1")
        assert r["rcode"] == 0 and r["answers"] == [], (name, r)
        r = box.run("curl", "-sS", "-m", "5", "--cacert", lab.dir + "/guest-ca.pem", "https://%s/" % name)
        assert r.returncode != 0, name
        r = box.run("curl", "-sS", "-m", "5", "http://%s/" % name)
        assert "space-gateway" in r.stdout or r.returncode != 0, name
    time.sleep(0.3)
    assert not canary_hits(lab, mark)
    denied = [e for e in box.log()["entries"] if not e["allowed"]]
    assert any(e["reason"] == "forbidden_addresses" for e in denied)


def test_forbidden_destinations_allowlist(lab, sb):
    check_box(lab, sb)


def test_forbidden_destinations_open_policy(lab, sb_open):
    check_box(lab, sb_open)


def test_mixed_answer_keeps_only_public(lab, sb):
    r = sb.py("dns", netlab.GW_IP, "mixed.allowed.test", "1")
    assert r["answers"] == ["203.0.113.10"]
    r = sb.run("curl", "-sS", "-m", "10", "http://mixed.allowed.test/m")
    assert json.loads(r.stdout)["addr"] == "203.0.113.10"


def test_rebinding_between_answers(lab, sb):
    mark = lab.mark()
    seen = []
    for _ in range(4):
        r = sb.py("dns", netlab.GW_IP, "rebind.allowed.test", "1")
        seen += r["answers"]
        time.sleep(5.5)  # the gateway caches at least 5 s; wait so it asks again
        r = sb.run("curl", "-sS", "-m", "5", "http://rebind.allowed.test/r")
    assert set(seen) <= {"203.0.113.10"}
    assert not canary_hits(lab, mark)


def test_open_policy_reaches_public_names(lab, sb_open):
    r = sb_open.run("curl", "-sS", "-m", "10", "http://evil.test/o")
    assert json.loads(r.stdout)["addr"] == "203.0.113.20"


def test_open_policy_still_refuses_ip_literals_and_bad_names(lab, sb_open):
    mark = lab.mark()
    r = sb_open.py("http", "127.0.0.1", "80", "GET / HTTP/1.1\\r\\nHost: 127.0.0.1\\r\\n\\r\\n")
    assert r["reply"].startswith("HTTP/1.1 400") or not r["connected"]
    r = sb_open.py("http", "192.0.2.2", "80", "GET / HTTP/1.1\\r\\nHost: localhost\\r\\n\\r\\n")
    assert "space-gateway" in r["reply"] or not r["connected"]
    assert not canary_hits(lab, mark)
