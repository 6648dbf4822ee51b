"""DNS over TCP to the gateway (gw:53, RFC 7766 framing), from inside the VM: the same
policy as UDP on every query of a connection, pipelining, oversized and malformed
length prefixes, slow and idle clients, and the per-sandbox connection cap. The zone's
nameserver and the canary resolver record every query they get."""
import json
import struct
import time

import guestpy
import netlab

AUTH, CANARY = "192.0.2.53", "198.51.100.53"
CONNS_MAX = 16  # src/gateway/dns_server.h DNS_TCP_CONNS_MAX


def dnstcp(sb, **spec):
    return sb.py("dnstcp", netlab.GW_IP, json.dumps(spec))


def forwarded(lab, mark, part):
    return [e for e in lab.since(mark, "dns") if part in (e["name"] or "")]


def test_same_policy_as_udp_on_every_pipelined_query(lab, sb):
    mark = lab.mark()
    qs = [["allowed.test", 1], ["tcpq.evil.test", 1], ["allowed.test", 16], ["allowed.test", 255],
          ["6c65616b.tcptun.evil.test", 1], ["www.allowed.test", 1], ["allowed.test", 28]]
    r = dnstcp(sb, queries=qs, wait=10)
    by_id = {a["id"]: a for a in r["answers"]}
    assert sorted(by_id) == list(range(1, len(qs) + 1)), r
    assert by_id[1]["rcode"] == 0 and by_id[1]["answers"] == ["203.0.113.10"]  # control
    assert by_id[6]["answers"] == ["203.0.113.10"]                              # control
    assert by_id[2]["rcode"] == 3 and by_id[5]["rcode"] == 3                    # not allowed
    assert by_id[3]["rcode"] == 5 and by_id[4]["rcode"] == 5                    # TXT, ANY
    assert by_id[7]["rcode"] == 0 and by_id[7]["ancount"] == 0                  # AAAA empty
    time.sleep(0.3)
    assert not forwarded(lab, mark, "evil.test")
    assert not [e for e in lab.since(mark, "dns") if e["qtype"] != 1]
    assert not [e for e in lab.since(mark, "dns") if e["server"] == "canary"]


def test_pipelined_beyond_inflight_bound_all_answered(lab, sb):
    """40 queries in one write, more than a connection may have waiting upstream (16):
    the rest wait unread, none is lost or answered twice; 40 tunnelling names under a
    zone not allowed are refused without a single upstream query."""
    mark = lab.mark()
    n = 40
    r = dnstcp(sb, queries=[["p%d.allowed.test" % i, 1] for i in range(n)], wait=30)
    assert sorted(a["id"] for a in r["answers"]) == list(range(1, n + 1)), r
    r = dnstcp(sb, queries=[["%032x.tcpflood.evil.test" % i, 1] for i in range(n)], wait=30)
    assert len(r["answers"]) == n and all(a["rcode"] == 3 for a in r["answers"]), r
    time.sleep(0.3)
    assert not forwarded(lab, mark, "tcpflood")
    assert len(forwarded(lab, mark, ".allowed.test")) >= 1  # control: allowed names went up


def test_oversized_and_malformed_length_prefixes(lab, sb):
    mark = lab.mark()
    good = guestpy.dns_query("oversize-probe.allowed.test", 1)
    cases = {
        "64k": struct.pack("!H", 0xFFFF) + good + b"\0" * (0xFFFF - len(good)),
        "513": struct.pack("!H", 513) + good + b"\0" * (513 - len(good)),
        "zero": struct.pack("!H", 0),
        "short": struct.pack("!H", 5) + good[:5],
        "garbage": struct.pack("!H", 40) + b"\xff" * 40,
        "response": struct.pack("!H", len(good)) + good[:2] + b"\x81\x00" + good[4:],
    }
    res = sb.batch([("dnstcp", netlab.GW_IP, json.dumps({"raw": raw.hex(), "wait": 12}))
                    for raw in cases.values()])
    for name, r in zip(cases, res):
        assert r["connected"], (name, r)
        # Never an answer carrying records; the stream is dropped or the query refused.
        assert all(a.get("rcode") in (1, 5) for a in r["answers"]), (name, r)
        assert r["closed"] or r["reset"] or not r["answers"], (name, r)
    for name in ("64k", "513", "zero"):
        r = res[list(cases).index(name)]
        assert not r["answers"] and (r["closed"] or r["reset"]), (name, r)
    assert lab.gateway_alive()
    time.sleep(0.3)
    assert not forwarded(lab, mark, "oversize-probe")
    r = dnstcp(sb, queries=[["www.allowed.test", 1]])
    assert r["answers"][0]["answers"] == ["203.0.113.10"], "control: a proper query is answered"


def test_slow_and_idle_clients(lab, sb):
    """A query dribbled one byte every 0.2 s is still answered (bytes keep coming); a
    client that sends half a query and stalls, or nothing at all, is closed by the
    gateway after its idle time (10 s) instead of holding a connection slot."""
    q = guestpy.dns_query("www.allowed.test", 1, 1)
    framed = struct.pack("!H", len(q)) + q
    slow, stalled, idle = sb.batch([
        ("dnstcp", netlab.GW_IP, json.dumps({"raw": framed.hex(), "byte_delay": 0.2, "wait": 10})),
        ("dnstcp", netlab.GW_IP, json.dumps({"raw": framed[:10].hex(), "wait": 60})),
        ("dnstcp", netlab.GW_IP, json.dumps({"raw": "", "wait": 60}))])
    assert slow["answers"] and slow["answers"][0]["answers"] == ["203.0.113.10"], slow
    for r in (stalled, idle):
        assert (r["closed"] or r["reset"]) and not r["answers"], r
        assert r["read_seconds"] < 55, r


def test_connection_cap_per_sandbox(lab, sb, sb_open):
    r = sb.py("dnstcpconns", netlab.GW_IP, "40", "www.allowed.test")
    assert 1 <= r["answered"] <= CONNS_MAX, r
    assert sb_open.py("dnstcp", netlab.GW_IP, json.dumps({"queries": [["allowed.test", 1]]}))["answers"], \
        "the other sandbox is still served"
    r = dnstcp(sb, queries=[["www.allowed.test", 1]])
    assert r["answers"], "once the connections are gone, a new one is served"
    assert lab.gateway_alive()


def test_large_answer_truncated_over_udp_complete_over_tcp(lab, sb):
    """Control of the transport: 32 A records do not fit a 512-byte UDP answer (TC set,
    no records), and come whole over TCP."""
    udp = sb.py("dnsraw", netlab.GW_IP, guestpy.dns_query("many.allowed.test", 1).hex())
    reply = bytes.fromhex(udp["reply"])
    assert reply[2] & 2 and struct.unpack("!H", reply[6:8])[0] == 0, udp
    r = dnstcp(sb, queries=[["many.allowed.test", 1]])
    assert len(r["answers"][0]["answers"]) == 32 and not r["answers"][0]["tc"], r


def test_tcp_query_flood_rate_limited(lab, sb, sb_open):
    """1500 queries pipelined on one connection draw from the same per-sandbox bucket
    as UDP (burst 400, 200/s): the excess is answered REFUSED, every query gets exactly
    one answer, the refusals are counted, the other VM is served."""
    before = sb.log()["dns_rate_limited"]
    n = 1500
    r = dnstcp(sb, queries=[["www.allowed.test", 1]] * n, wait=120)
    ids = sorted(a["id"] for a in r["answers"])
    assert ids == list(range(1, n + 1)), (len(ids), r.get("closed"), r.get("reset"))
    refused = [a for a in r["answers"] if a["rcode"] == 5]
    served = [a for a in r["answers"] if a["rcode"] == 0 and a["answers"] == ["203.0.113.10"]]
    assert refused and served and len(refused) + len(served) == n, (len(refused), len(served))
    assert sb.log()["dns_rate_limited"] > before
    assert sb_open.py("dns", netlab.GW_IP, "allowed.test", "1")["answers"] == ["203.0.113.10"]
    assert lab.gateway_alive()
