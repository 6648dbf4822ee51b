"""Allowed traffic works through the gateway (so that every refusal elsewhere means
something)."""
import netlab


def test_dns_allowed_name_resolves(sb):
    r = sb.py("dns", netlab.GW_IP, "allowed.test", "1")
    assert r["rcode"] == 0 and r["answers"] == ["203.0.113.10"]


def test_https_allowed_passthrough(lab, sb):
    r = sb.run("curl", "-sS", "-m", "10", "--cacert", lab.dir + "/guest-ca.pem",
               "https://allowed.test/hello")
    assert r.returncode == 0, r.stderr
    assert '"addr": "203.0.113.10"' in r.stdout and '"sni": "allowed.test"' in r.stdout


def test_http_allowed(lab, sb):
    r = sb.run("curl", "-sS", "-m", "10", "http://allowed.test/x")
    assert r.returncode == 0, r.stderr
    assert '"host": "allowed.test"' in r.stdout


def test_decision_log(sb):
    entries = sb.log()["entries"]
    assert any(e["kind"] == "dns" and e["name"] == "allowed.test" and e["allowed"] for e in entries)
