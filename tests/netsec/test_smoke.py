"""Allowed traffic works through the gateway from inside the VM (so that every refusal
elsewhere means something)."""
import json

import netlab


def test_dns_allowed_name_resolves(sb):
    r = sb.py("dns", netlab.GW_IP, "allowed.test", "1")
    assert r["rcode"] == 0 and r["answers"] == ["203.0.113.10"]
    assert sb.py("resolve", "allowed.test")["addrs"] == ["203.0.113.10"]


def test_https_allowed_passthrough(sb):
    r = sb.py("fetch", "https://allowed.test/hello", json.dumps({"cafile": sb.ca}))
    assert r["ok"] and r["status"] == 200, r
    seen = json.loads(r["body"])
    assert seen["addr"] == "203.0.113.10" and seen["sni"] == "allowed.test"


def test_http_allowed(sb):
    r = sb.py("fetch", "http://allowed.test/x")
    assert r["ok"] and json.loads(r["body"])["host"] == "allowed.test", r


def test_decision_log(sb):
    entries = sb.log()["entries"]
    assert any(e["kind"] == "dns" and e["name"] == "allowed.test" and e["allowed"] for e in entries)
