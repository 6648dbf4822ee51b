"""Fake internet for the gateway attack suite (runs inside the test's "internet"
namespace; python standard library only).

Serves, on TEST-NET addresses the test put on this namespace's interfaces:
  * an authoritative DNS server for the zone `test.` (UDP+TCP 53 on 192.0.2.53), with
    fixed records (ZONE) and one rebinding name; it records every query it gets;
  * canary "public resolvers" (198.51.100.53 UDP/TCP 53 and TCP 853) that record every
    query or connection and answer nothing useful;
  * HTTP (80) and HTTPS (443, certificates from the test CA chosen by SNI) on the web
    addresses; every request is answered with a JSON echo of what the server saw
    (address, SNI, Host, path, headers); `api.test` answers 401 without the expected
    bearer token; `/redirect?to=URL` answers 302;
  * plain TCP listeners on other ports (22, 25, 8443) that record connections;
  * on the web servers: `/ws` answers a websocket upgrade with 101 and then echoes bytes
    (the control that a real upgrade still works), TRACE echoes the request as
    message/http, `/hdr` echoes the Authorization header in a response header (the
    "echo endpoints" an injected secret must not come back through);
  * a lenient legacy server on 203.0.113.40:80 (virtual hosts `legacy.allowed.test` and
    `legacyblocked.test`) that frames bodies by Content-Length only (it ignores
    Transfer-Encoding) and skips lines that are not a request line, as old servers do:
    the upstream a chunked body can smuggle a request to;
  * a fake Debian mirror, `deb.mirror.test` on 203.0.113.50:80: /debian/dists/bookworm/
    Release (unsigned: the guest's source says [trusted=yes]) and main/binary-*/Packages
    listing one probe package, so a real `apt-get update` in the VM works through the
    gateway when the mirror is allowlisted.
Every event is appended as one JSON line to EVENTS (argv[1]); the test reads it.
"""
import json
import os
import socket
import socketserver
import ssl
import struct
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

EVENTS = sys.argv[1]
CERTDIR = sys.argv[2]
TOKEN = sys.argv[3]
_lock = threading.Lock()

ZONE = {
    "allowed.test": ["203.0.113.10"],
    "www.allowed.test": ["203.0.113.10"],
    "blocked.test": ["203.0.113.10"],
    "api.test": ["203.0.113.30"],
    "evil.test": ["203.0.113.20"],
    "evilallowed.test": ["203.0.113.20"],
    "allowed.test.evil.test": ["203.0.113.20"],
    "private.allowed.test": ["10.1.2.3"],
    "private172.allowed.test": ["172.20.1.1"],
    "private192.allowed.test": ["192.168.1.1"],
    "loop.allowed.test": ["127.0.0.1"],
    "meta.allowed.test": ["169.254.169.254"],
    "cgnat.allowed.test": ["100.64.0.1"],
    "zero.allowed.test": ["0.0.0.0"],
    "mcast.allowed.test": ["224.0.0.251"],
    "self.allowed.test": ["192.0.2.2"],
    "mixed.allowed.test": ["10.0.0.1", "203.0.113.10"],
    "echo.allowed.test": ["203.0.113.20"],
    "badcert.allowed.test": ["203.0.113.10"],
    "reflect.allowed.test": ["203.0.113.20"],
    "legacy.allowed.test": ["203.0.113.40"],
    "legacyblocked.test": ["203.0.113.40"],
    # Azure's WireServer (a public address that is a host service on every Azure VM).
    "wire.allowed.test": ["168.63.129.16"],
    # An address the lab adds to the gateway's namespace only after the gateway started.
    "late.allowed.test": ["192.0.2.99"],
    "deb.mirror.test": ["203.0.113.50"],
    # More A records than a 512-byte UDP answer holds (DNS over TCP carries them all).
    "many.allowed.test": ["203.0.113.%d" % i for i in range(100, 132)],
}
# AAAA records: a public one for an allowed name, and names whose only addresses are the
# IPv6 forms of forbidden IPv4 ones (IPv4-mapped loopback, NAT64 of loopback and of
# 10/8). The gateway answers AAAA empty without asking (IPv6 never leaves a sandbox).
ZONE6 = {
    "allowed.test": ["2001:db8::10"],
    "mapped.allowed.test": ["::ffff:127.0.0.1"],
    "nat64.allowed.test": ["64:ff9b::7f00:1", "64:ff9b::a00:1"],
}
_rebind = [0]


def mirror_files():
    """The fake mirror's index files: path -> bytes."""
    import hashlib
    deb = b"!<arch>\n"
    packages = ("Package: space-netsec-probe\nVersion: 1.0\nArchitecture: all\n"
                "Maintainer: space netsec <netsec@example.invalid>\n"
                "Filename: pool/main/s/space-netsec-probe_1.0_all.deb\nSize: %d\nSHA256: %s\n"
                "Description: probe package of the netsec fake mirror\n\n"
                % (len(deb), hashlib.sha256(deb).hexdigest())).encode()
    dist = "/debian/dists/bookworm/"
    files = {"/debian/pool/main/s/space-netsec-probe_1.0_all.deb": deb}
    sums = ""
    for arch in ("amd64", "arm64"):
        files[dist + "main/binary-%s/Packages" % arch] = packages
        sums += " %s %d main/binary-%s/Packages\n" % (hashlib.sha256(packages).hexdigest(),
                                                       len(packages), arch)
    # A date in the past and no Valid-Until: the guest's clock cannot make it invalid.
    files[dist + "Release"] = ("Origin: space-netsec\nLabel: space-netsec\nSuite: stable\n"
                               "Codename: bookworm\nDate: Sat, 01 Jan 2000 00:00:00 UTC\n"
                               "Architectures: amd64 arm64\nComponents: main\nSHA256:\n"
                               + sums).encode()
    return files


MIRROR = mirror_files()


def event(kind, **kw):
    kw["kind"] = kind
    with _lock, open(EVENTS, "a") as f:
        f.write(json.dumps(kw) + "\n")


def parse_qname(msg):
    off, labels = 12, []
    while off < len(msg) and msg[off]:
        n = msg[off]
        if n & 0xC0:
            return None, off
        labels.append(msg[off + 1:off + 1 + n].decode("latin-1"))
        off += 1 + n
    return ".".join(labels).lower(), off + 1


def dns_answer(msg, server):
    if len(msg) < 12:
        return None
    name, off = parse_qname(msg)
    qtype = struct.unpack("!H", msg[off:off + 2])[0] if name is not None and off + 2 <= len(msg) else 0
    event("dns", server=server, name=name, qtype=qtype)
    if server != "auth" or name is None:
        return msg[:2] + b"\x81\x05" + msg[4:6] + b"\0\0\0\0\0\0" + msg[12:off + 4]
    addrs, ttl = ZONE.get(name), 60
    if name == "rebind.allowed.test":
        addrs, ttl = [["203.0.113.10"], ["127.0.0.1"]][_rebind[0] % 2], 0
        _rebind[0] += 1
    elif name and name.endswith(".evil.test"):
        addrs = ["203.0.113.20"]
    rcode = 0 if addrs is not None or name in ZONE6 else 3
    answers, n = b"", 0
    if addrs and qtype == 1:
        for a in addrs:
            answers += b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, ttl, 4) + socket.inet_aton(a)
            n += 1
    if qtype == 28:
        for a in ZONE6.get(name, []):
            answers += b"\xc0\x0c" + struct.pack("!HHIH", 28, 1, ttl, 16) + socket.inet_pton(socket.AF_INET6, a)
            n += 1
    hdr = msg[:2] + struct.pack("!HHHHH", 0x8400 | rcode, 1, n, 0, 0)
    return hdr + msg[12:off + 4] + answers


class DNSUDP(socketserver.BaseRequestHandler):
    def handle(self):
        data, sock = self.request
        out = dns_answer(data, self.server.kind)
        if out:
            sock.sendto(out, self.client_address)


class DNSTCP(socketserver.BaseRequestHandler):
    def handle(self):
        event("tcp", addr=self.server.server_address[0], port=self.server.server_address[1])
        try:
            ln = struct.unpack("!H", self.request.recv(2))[0]
            out = dns_answer(self.request.recv(ln), self.server.kind)
            if out:
                self.request.sendall(struct.pack("!H", len(out)) + out)
        except Exception:
            pass


class Plain(socketserver.BaseRequestHandler):
    def handle(self):
        event("tcp", addr=self.server.server_address[0], port=self.server.server_address[1])


class Web(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def _answer(self):
        host = self.headers.get("Host", "")
        sni = getattr(self.connection, "sni", None)
        body_len = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(body_len) if body_len else b""
        seen = {"addr": self.server.server_address[0], "port": self.server.server_address[1],
                "sni": sni, "host": host, "method": self.command, "path": self.path,
                "headers": {k: v for k, v in self.headers.items()}, "body": body.decode("latin-1")}
        event("http", **seen)
        status = 200
        if host.split(":")[0] == "deb.mirror.test":
            return self._mirror()
        if host.split(":")[0] == "api.test":
            # The protected API never reflects the token back (a real one would not).
            ok = self.headers.get("Authorization") == "Bearer " + TOKEN
            n_auth = len(self.headers.get_all("Authorization") or [])
            event("api", authorized=ok, n_auth=n_auth, sni=sni, host=host)
            status = 200 if ok else 401
            seen = {"authorized": ok, "n_auth": n_auth, "path": self.path}
        extra = []
        if self.path == "/ws" and self.headers.get("Upgrade", "").lower() == "websocket":
            return self._websocket()
        if self.path.startswith("/hdr"):
            extra.append(("X-Echo-Authorization", self.headers.get("Authorization", "")))
        if self.path.startswith("/redirect?to="):
            status = 302
            extra.append(("Location", self.path.split("=", 1)[1]))
        out = json.dumps(seen).encode()
        if self.path.startswith("/big"):
            out = b"x" * int(self.path.split("/")[2])
        self.send_response(status)
        for k, v in extra:
            self.send_header(k, v)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def _mirror(self):
        out = MIRROR.get(self.path.split("?")[0])
        self.send_response(200 if out is not None else 404)
        out = out if out is not None else b"not found\n"
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(out)

    def _websocket(self):
        """101, then echo every byte back until the client closes."""
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.end_headers()
        self.wfile.flush()
        event("ws", host=self.headers.get("Host", ""))
        while True:
            data = self.connection.recv(65536)
            if not data:
                break
            event("ws_data", data=data.decode("latin-1"))
            self.connection.sendall(data)
        self.close_connection = True

    def do_TRACE(self):
        raw = (self.requestline + "\r\n" + "".join("%s: %s\r\n" % kv for kv in self.headers.items())
               + "\r\n").encode("latin-1")
        event("http", addr=self.server.server_address[0], host=self.headers.get("Host", ""),
              method="TRACE", path=self.path, headers=dict(self.headers.items()))
        self.send_response(200)
        self.send_header("Content-Type", "message/http")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    do_GET = do_POST = do_PUT = do_HEAD = _answer


class Legacy(socketserver.StreamRequestHandler):
    """HTTP/1.1 framed by Content-Length only; lines that are not a request line are
    skipped. Logs each request it finds as kind "http" (addr 203.0.113.40)."""

    def handle(self):
        event("tcp", addr=self.server.server_address[0], port=self.server.server_address[1])
        while True:
            line = self.rfile.readline(65536)
            if not line:
                return
            words = line.decode("latin-1").split()
            if len(words) != 3 or not words[2].startswith("HTTP/"):
                continue  # lenient: junk between requests is ignored
            headers = {}
            while True:
                h = self.rfile.readline(65536).decode("latin-1").rstrip("\r\n")
                if not h:
                    break
                k, _, v = h.partition(":")
                headers[k.strip().lower()] = v.strip()
            body = self.rfile.read(int(headers.get("content-length", "0") or 0))
            event("http", addr=self.server.server_address[0], port=80, host=headers.get("host", ""),
                  method=words[0], path=words[1], headers=headers, body=body.decode("latin-1"),
                  legacy=True)
            out = json.dumps({"legacy": True, "path": words[1], "body": body.decode("latin-1")}).encode()
            self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(out) + out)


class WebServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class TLSWebServer(WebServer):
    def __init__(self, addr, contexts):
        super().__init__(addr, Web)
        self.contexts = contexts
        base = contexts["allowed.test"]

        def pick(sock, name, _ctx):
            sock.sni = name
            event("tls", addr=addr[0], sni=name)
            if name == "badcert.allowed.test":
                sock.context = contexts["blocked.test"]  # wrong name: verification must fail
            elif name in contexts:
                sock.context = contexts[name]
            elif name and name.endswith(".allowed.test"):
                sock.context = contexts["allowed.test"]
        base.sni_callback = pick
        self.base_ctx = base

    def get_request(self):
        sock, addr = self.socket.accept()
        event("tcp", addr=self.server_address[0], port=self.server_address[1])
        sock.settimeout(10)
        try:
            tls = self.base_ctx.wrap_socket(sock, server_side=True)
        except (ssl.SSLError, OSError) as e:
            event("tls_fail", addr=self.server_address[0], error=str(e)[:80])
            sock.close()
            raise OSError("handshake failed")
        tls.sni = getattr(tls, "sni", None) or getattr(sock, "sni", None)
        return tls, addr

    def handle_error(self, request, client_address):
        pass


class TCP(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


class UDP(socketserver.ThreadingUDPServer):
    daemon_threads = True
    allow_reuse_address = True


def serve(srv):
    threading.Thread(target=srv.serve_forever, daemon=True).start()


def tls_contexts():
    # One set per server: the SNI callback on the base context knows its server.
    contexts = {}
    for name in ("allowed.test", "blocked.test", "api.test", "evil.test"):
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(os.path.join(CERTDIR, name + ".crt"), os.path.join(CERTDIR, name + ".key"))
        contexts[name] = ctx
    return contexts


def main():
    for kind, ip in (("auth", "192.0.2.53"), ("canary", "198.51.100.53")):
        for cls, handler in ((UDP, DNSUDP), (TCP, DNSTCP)):
            s = cls((ip, 53), handler)
            s.kind = kind
            serve(s)
    serve(TCP(("198.51.100.53", 853), Plain))
    for ip in ("203.0.113.10", "203.0.113.20", "203.0.113.30"):
        serve(WebServer((ip, 80), Web))
        serve(TLSWebServer((ip, 443), tls_contexts()))
        for port in (22, 25, 8443):
            serve(TCP((ip, port), Plain))
    serve(TCP(("203.0.113.40", 80), Legacy))
    serve(WebServer(("203.0.113.50", 80), Web))
    event("ready")
    threading.Event().wait()


if __name__ == "__main__":
    main()
