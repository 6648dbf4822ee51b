#!/usr/bin/env python3
"""Egress gateway benchmark: the same client and server with and without the gateway,
in one run, on the netsec lab's fake internet and gateway (tests/netsec/netlab.py; needs
root). The client runs in a namespace wired exactly like a sandbox's (a veth standing in
for the tap, attached to the gateway with `attach`), so the numbers are the gateway's,
not a TCG VM's.

  * HTTPS download throughput: curl fetching a large body over TLS (passthrough path)
    from the guest namespace through the gateway, vs from the gateway's namespace
    straight to the server.
  * New HTTPS connections per second: one client process opening N connections in
    sequence (TLS handshake + one small request each), through the gateway vs direct.
  * DNS queries per second: sequential A queries for an allowed, cached name answered by
    the gateway, vs the same queries sent straight to the fake internet's nameserver:
    over UDP; over TCP with one connection per query (what the fake nameserver serves);
    and, through the gateway only, over one TCP connection with 16 queries in flight
    (RFC 7766 pipelining; the fake nameserver answers one query per connection).

The servers are Python (the fake internet), so absolute numbers are bounded by them;
the ratios are the result. Usage: sudo python3 bench/bench_gateway.py [--quick]
Environment: SPACE_BUILD selects the gateway build (default build/, the optimised one).
"""
import json
import os
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "netsec"))
os.environ.setdefault("SPACE_BUILD", os.path.join(ROOT, "build"))
import netlab  # noqa: E402

QUICK = "--quick" in sys.argv
BIG = 20_000_000 if QUICK else 100_000_000
CONNS = 100 if QUICK else 400
QUERIES = 1000 if QUICK else 5000

CONN_CLIENT = r"""
import socket, ssl, sys, time
ip, n, ca = sys.argv[1], int(sys.argv[2]), sys.argv[3]
ctx = ssl.create_default_context(cafile=ca)
t0 = time.time()
for i in range(n):
    s = ctx.wrap_socket(socket.create_connection((ip, 443)), server_hostname="allowed.test")
    s.sendall(b"GET /c HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n")
    while s.recv(65536):
        pass
    s.close()
print(n / (time.time() - t0))
"""

DNS_CLIENT = r"""
import socket, struct, sys, time
server, n = sys.argv[1], int(sys.argv[2])
q = struct.pack("!HHHHHH", 1, 0x0100, 1, 0, 0, 0) + b"\x07allowed\x04test\x00\x00\x01\x00\x01"
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(2)
t0 = time.time()
ok = 0
for i in range(n):
    s.sendto(q, (server, 53))
    try:
        s.recvfrom(512)
        ok += 1
    except socket.timeout:
        pass
print(ok / (time.time() - t0))
"""

DNS_TCP_CLIENT = r"""
import socket, struct, sys, time
server, n, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def q(i):
    m = struct.pack("!HHHHHH", i & 0xffff, 0x0100, 1, 0, 0, 0) + b"\x07allowed\x04test\x00\x00\x01\x00\x01"
    return struct.pack("!H", len(m)) + m
def read_answer(s, buf):
    while len(buf) < 2 or len(buf) < 2 + struct.unpack("!H", buf[:2])[0]:
        d = s.recv(65536)
        if not d:
            raise EOFError
        buf += d
    return buf[2 + struct.unpack("!H", buf[:2])[0]:]
t0 = time.time()
ok = 0
if mode == "conn":
    for i in range(n):
        with socket.create_connection((server, 53), timeout=5) as s:
            s.sendall(q(i))
            read_answer(s, b"")
            ok += 1
else:
    window = 16
    s = socket.create_connection((server, 53), timeout=5)
    buf, sent = b"", 0
    while ok < n:
        while sent < n and sent - ok < window:
            s.sendall(q(sent))
            sent += 1
        buf = read_answer(s, buf)
        ok += 1
print(ok / (time.time() - t0))
"""

GUEST_IP, GUEST_MAC = "10.0.2.15", "02:5b:00:00:00:01"


class Guest:
    """A sandbox stand-in: namespace `ns` holds the gateway side of a veth (what the tap
    is for a VM), namespace `guest` the client side with the guest's address and MAC."""

    def __init__(self, lab, policy, limits):
        self.lab, self.id = lab, "bench1"
        self.ns, self.guest = lab.prefix + "-bsb", lab.prefix + "-bguest"
        netlab.wire(self.ns, "tap0", netlab.GW_IP + "/24", self.guest, "eth0", GUEST_IP + "/24", GUEST_MAC)
        netlab.sh("ip", "route", "add", "default", "via", netlab.GW_IP, ns=self.guest)
        r = lab.ctl({"op": "attach", "sandbox": self.id, "netns": "/run/netns/" + self.ns,
                     "dev": "tap0", "guest_mac": GUEST_MAC, "guest_ip": GUEST_IP,
                     "gateway_ip": netlab.GW_IP, "policy": policy, "limits": limits})
        if not r.get("ok"):
            raise RuntimeError("attach failed: %s" % r)

    def close(self):
        self.lab.ctl({"op": "detach", "sandbox": self.id})
        for ns in (self.ns, self.guest):
            netlab.sh("ip", "netns", "del", ns, check=False)


def run(ns, *cmd, timeout=600):
    return netlab.sh(*cmd, ns=ns, timeout=timeout).stdout.strip()


def main():
    why = netlab.can_run()
    if why:
        print("bench_gateway: skipped: " + why)
        return 0
    lab = netlab.Lab()
    limits = {"dns_per_s": 1e6, "dns_burst": 1e6, "conn_per_s": 1e6, "conn_burst": 1e6}
    sb = None
    try:
        lab.start()
        sb = Guest(lab, {"mode": "allowlist", "allow": ["allowed.test"]}, limits)
        ca = lab.dir + "/testca.crt"
        res = {}
        url = "https://allowed.test/big/%d" % BIG
        # Both clients name the server's address; through the gateway it is ignored (the
        # gateway dials what it resolved itself for the SNI name).
        curl = ("curl", "-s", "-o", "/dev/null", "--cacert", ca, "--resolve", "allowed.test:443:203.0.113.10")
        run(sb.guest, *curl, "https://allowed.test/")  # warm the gateway's cache and the server
        via = float(run(sb.guest, *curl, "-w", "%{speed_download}", url))
        direct = float(run(lab.gwns, *curl, "-w", "%{speed_download}", url))
        res["https_MBps"] = (via / 1e6, direct / 1e6)
        via = float(run(sb.guest, netlab.PY, "-c", CONN_CLIENT, "203.0.113.10", str(CONNS), ca))
        direct = float(run(lab.gwns, netlab.PY, "-c", CONN_CLIENT, "203.0.113.10", str(CONNS), ca))
        res["https_conns_per_s"] = (via, direct)
        via = float(run(sb.guest, netlab.PY, "-c", DNS_CLIENT, netlab.GW_IP, str(QUERIES)))
        direct = float(run(lab.gwns, netlab.PY, "-c", DNS_CLIENT, "192.0.2.53", str(QUERIES)))
        res["dns_udp_queries_per_s"] = (via, direct)
        via = float(run(sb.guest, netlab.PY, "-c", DNS_TCP_CLIENT, netlab.GW_IP, str(QUERIES // 5), "conn"))
        direct = float(run(lab.gwns, netlab.PY, "-c", DNS_TCP_CLIENT, "192.0.2.53", str(QUERIES // 5), "conn"))
        res["dns_tcp_conn_per_query_per_s"] = (via, direct)
        via = float(run(sb.guest, netlab.PY, "-c", DNS_TCP_CLIENT, netlab.GW_IP, str(QUERIES), "pipe"))
        res["dns_tcp_pipelined_per_s"] = (via, 0.0)
    finally:
        if sb:
            sb.close()
        lab.stop()
    print("bench_gateway (%s; gateway %s; Python test servers)" % (
        "quick" if QUICK else "full", os.environ["SPACE_BUILD"]))
    print("%-30s %12s %12s %8s" % ("metric", "via gateway", "direct", "ratio"))
    for k, (v, d) in res.items():
        print("%-30s %12.1f %12s %8s" % (k, v, "%.1f" % d if d else "n/a", "%.2f" % (v / d) if d else "n/a"))
    print(json.dumps({k: {"via_gateway": v, "direct": d or None} for k, (v, d) in res.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
