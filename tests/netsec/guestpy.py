"""Attack tools run inside the sandbox VM (as root) by the netsec tests, and on the
host side by the controls; python standard library only. Each subcommand prints one
JSON object; `serve` runs lists of them read from stdin (one process per VM).

  dns SERVER NAME QTYPE [tcp]        one query; rcode and A answers, or timeout
  dnsraw SERVER HEX                  sends raw bytes as a UDP query; the reply, if any
  dnsflood SERVER COUNT NAME         COUNT queries back to back; answers counted
  dnstcp SERVER SPEC_JSON            DNS over TCP: pipelined queries, raw bytes, slow
                                     clients (see cmd_dnstcp)
  dnstcpconns SERVER COUNT NAME      COUNT DNS TCP connections held open, each asked NAME
  tcp IP PORT HEX [WAIT]             connect, send, read until close/timeout
  hello IP PORT SPEC_JSON            hand-built TLS ClientHello (see client_hello)
  tlsget IP PORT SNI HOST PATH CAFILE [SPLIT] [EXTRA_HEADER]
                                     full TLS request; SPLIT>0 cuts the ClientHello into
                                     records of SPLIT bytes, each sent in two segments
  tlsinfo IP PORT SNI|- CAFILE|-     handshake only; the leaf's issuer
  fetch URL [OPTS_JSON]              a small curl (forced address, CA file, headers,
                                     redirects, RSA-only client)
  resolve NAME                       the guest's libc resolver (/etc/hosts, resolv.conf)
  http IP PORT TEXT                  raw HTTP bytes (\\r\\n escapes), all replies read
  hold IP PORT HOST SECS             keep-alive request, then waits for the gateway to
                                     close the connection (prints a line when ready)
  frame IFACE HEX                    sends one raw Ethernet frame
  icmp IP [COUNT]                    raw ICMP echo requests; replies counted
  udp IP PORT HEX                    one datagram
  ipv6                               the guest's IPv6 addresses and whether anything answers
  search HEX [ROOTS]                 a byte string in files under ROOTS and in processes
  connflood IP PORT COUNT            COUNT connection attempts; outcomes counted
  garbage IP DNS COUNT               random bytes to IP:443, IP:80 and DNS:53, COUNT rounds
  canary EVENTS IP...                (gateway side) listens on IP:80/443, records connections
  serve                              one JSON list of calls per stdin line -> results
"""
import json
import os
import select
import socket
import ssl
import struct
import sys
import threading
import time


def out(obj):
    print(json.dumps(obj), flush=True)


def dns_query(name, qtype, qid=0x1234):
    q = struct.pack("!HHHHHH", qid, 0x0100, 1, 0, 0, 0)
    for label in name.rstrip(".").split("."):
        q += bytes([len(label)]) + label.encode()
    return q + b"\0" + struct.pack("!HH", qtype, 1)


def parse_answer(r):
    rcode = r[3] & 0xF
    an = struct.unpack("!H", r[6:8])[0]
    off = 12
    while r[off]:
        off += 1 + r[off]
    off += 5
    ips, ips6 = [], []
    for _ in range(an):
        if r[off] & 0xC0:
            off += 2
        else:
            while r[off]:
                off += 1 + r[off]
            off += 1
        typ, _cls, _ttl, ln = struct.unpack("!HHIH", r[off:off + 10])
        off += 10
        if typ == 1:
            ips.append(socket.inet_ntoa(r[off:off + 4]))
        elif typ == 28:
            ips6.append(socket.inet_ntop(socket.AF_INET6, r[off:off + 16]))
        off += ln
    return {"rcode": rcode, "answers": ips, "answers6": ips6, "ancount": an}


def cmd_dns(server, name, qtype, tcp=None):
    q = dns_query(name, int(qtype))
    try:
        if tcp:
            s = socket.create_connection((server, 53), timeout=3)
            s.sendall(struct.pack("!H", len(q)) + q)
            ln = struct.unpack("!H", s.recv(2))[0]
            r = s.recv(ln)
        else:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.settimeout(3)
            s.sendto(q, (server, 53))
            r, _ = s.recvfrom(4096)
        out(parse_answer(r))
    except (socket.timeout, OSError) as e:
        out({"timeout": True, "error": str(e)})


def cmd_dnsraw(server, hexdata):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(2)
    s.sendto(bytes.fromhex(hexdata), (server, 53))
    try:
        r, _ = s.recvfrom(4096)
        out({"reply": r.hex(), "rcode": r[3] & 0xF if len(r) > 3 else None})
    except socket.timeout:
        out({"reply": None})


def cmd_dnsflood(server, count, name):
    """COUNT queries sent back to back on a blocking socket (each really leaves: a full
    send queue waits instead of dropping), replies read only afterwards so a slow guest
    still sends at its top rate; prints sent, answered and the send rate."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, 33, 8 << 20)  # SO_RCVBUFFORCE (root): keep every reply
    except OSError:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    count, answered = int(count), 0
    queries = [dns_query("%d.%s" % (i, name), 1, i & 0xFFFF) for i in range(count)]
    t0 = time.time()
    for q in queries:
        s.sendto(q, (server, 53))
    elapsed = time.time() - t0
    while True:
        r, _, _ = select.select([s], [], [], 3.0)
        if not r:
            break
        s.recvfrom(4096)
        answered += 1
    out({"sent": count, "answered": answered, "rate": count / max(elapsed, 1e-6)})


def dns_tcp_read(s, wait, want=None):
    """Reads length-prefixed DNS messages until the peer closes, `want` messages have
    come, or wait passes."""
    buf, res, msgs = b"", {"closed": False, "reset": False}, []
    end = time.time() + wait
    try:
        while time.time() < end and (want is None or len(msgs) < want):
            s.settimeout(max(end - time.time(), 0.01))
            r = s.recv(65536)
            if not r:
                res["closed"] = True
                break
            buf += r
            while len(buf) >= 2 and len(buf) >= 2 + struct.unpack("!H", buf[:2])[0]:
                n = struct.unpack("!H", buf[:2])[0]
                m, buf = buf[2:2 + n], buf[2 + n:]
                a = parse_answer(m) if len(m) >= 12 else {}
                a["id"] = struct.unpack("!H", m[:2])[0] if len(m) >= 2 else None
                a["tc"] = bool(m[2] & 2) if len(m) > 2 else False
                msgs.append(a)
    except ConnectionResetError:
        res["reset"] = True
    except socket.timeout:
        pass
    res["answers"], res["leftover"] = msgs, len(buf)
    return res


def cmd_dnstcp(server, spec):
    """DNS over TCP to server:53. spec: queries ([name, qtype] each, ids 1..n), raw (hex
    bytes sent as they are, instead), byte_delay (seconds between single bytes: a slow
    client), wait (seconds to read answers; reading stops early once every query is
    answered)."""
    spec = json.loads(spec)
    data = bytes.fromhex(spec["raw"]) if "raw" in spec else b"".join(
        struct.pack("!H", len(q)) + q for q in
        (dns_query(n, t, i + 1) for i, (n, t) in enumerate(spec.get("queries", []))))
    try:
        s = socket.create_connection((server, 53), timeout=3)
    except OSError as e:
        out({"connected": False, "error": str(e)})
        return
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    res = {"connected": True}
    try:
        if spec.get("byte_delay"):
            for i in range(len(data)):
                s.sendall(data[i:i + 1])
                time.sleep(float(spec["byte_delay"]))
        else:
            s.sendall(data)
    except OSError as e:
        res["send_error"] = str(e)
    t0 = time.time()
    want = len(spec["queries"]) if spec.get("queries") else None
    res.update(dns_tcp_read(s, float(spec.get("wait", 3)), want))
    res["read_seconds"] = time.time() - t0
    out(res)


def cmd_dnstcpconns(server, count, name):
    """Opens COUNT DNS TCP connections and keeps them all open, then asks NAME on each;
    prints how many connected and how many got an answer."""
    socks, opened = [], 0
    for _ in range(int(count)):
        try:
            socks.append(socket.create_connection((server, 53), timeout=3))
            opened += 1
        except OSError:
            pass
    q = dns_query(name, 1, 7)
    answered = 0
    for s in socks:
        try:
            s.sendall(struct.pack("!H", len(q)) + q)
        except OSError:
            pass
    for s in socks:
        if dns_tcp_read(s, 2.0, 1)["answers"]:
            answered += 1
    for s in socks:
        s.close()
    out({"opened": opened, "answered": answered})


def talk(ip, port, data, wait=3.0):
    res = {"connected": False, "reply": "", "reset": False, "closed": False}
    try:
        s = socket.create_connection((ip, int(port)), timeout=wait)
    except OSError as e:
        res["error"] = str(e)
        return res
    res["connected"] = True
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        for chunk in data:
            s.sendall(chunk)
            time.sleep(0.005)
        buf = b""
        s.settimeout(wait)
        while True:
            r = s.recv(65536)
            if not r:
                res["closed"] = True
                break
            buf += r
    except ConnectionResetError:
        res["reset"] = True
    except socket.timeout:
        pass
    except OSError as e:
        res["error"] = str(e)
    res["reply"] = buf.decode("latin-1") if "buf" in dir() else ""
    return res


def cmd_tcp(ip, port, hexdata, wait="3"):
    out(talk(ip, port, [bytes.fromhex(hexdata)] if hexdata else [], float(wait)))


def client_hello(spec):
    """A syntactically valid ClientHello: spec has snis (list of names; None = no SNI
    extension), ech (bool), dup_ext (bool), record (record payload size, 0 = one),
    segments (send byte by byte)."""
    exts = b""
    if spec.get("snis") is not None:
        lst = b"".join(b"\x00" + struct.pack("!H", len(n)) + n.encode() for n in spec["snis"])
        body = struct.pack("!H", len(lst)) + lst
        exts += struct.pack("!HH", 0, len(body)) + body
        if spec.get("dup_ext"):
            exts += struct.pack("!HH", 0, len(body)) + body
    groups = b"\x00\x04\x00\x1d\x00\x17"
    exts += struct.pack("!HH", 10, len(groups)) + groups
    exts += struct.pack("!HH", 43, 3) + b"\x02\x03\x04"
    if spec.get("ech"):
        exts += struct.pack("!HH", 0xFE0D, 8) + b"\x00\x00\x01\x00\x01\x00\x00\x00"
    body = (b"\x03\x03" + os.urandom(32) + b"\x20" + os.urandom(32) + b"\x00\x04\x13\x01\x13\x02"
            + b"\x01\x00" + struct.pack("!H", len(exts)) + exts)
    hs = b"\x01" + struct.pack("!I", len(body))[1:] + body
    size = spec.get("record") or len(hs)
    recs = [b"\x16\x03\x01" + struct.pack("!H", len(hs[i:i + size])) + hs[i:i + size]
            for i in range(0, len(hs), size)]
    raw = b"".join(recs)
    if spec.get("segments"):
        return [raw[i:i + 1] for i in range(len(raw))]
    return [raw]


def cmd_hello(ip, port, spec):
    out(talk(ip, port, client_hello(json.loads(spec)), 3.0))


def resplit(data, size):
    """Re-frames TLS handshake records into records of `size` bytes, each record in two
    TCP segments (header, body)."""
    payload, off = b"", 0
    while off + 5 <= len(data):
        ln = struct.unpack("!H", data[off + 3:off + 5])[0]
        payload += data[off + 5:off + 5 + ln]
        off += 5 + ln
    parts = []
    for i in range(0, len(payload), size):
        chunk = payload[i:i + size]
        parts += [b"\x16\x03\x01" + struct.pack("!H", len(chunk)), chunk]
    return parts


def tls_exchange(ip, port, sni, cafile, parts, split=0, gap=0.0, silence_ends=False):
    """TLS to ip:port with SNI (verified against cafile); sends each of parts (bytes)
    after the handshake, waiting gap seconds between them; returns everything read
    until the server closes (with silence_ends, also after 5 s of silence)."""
    ctx = ssl.create_default_context(cafile=cafile)
    ctx.set_alpn_protocols(["http/1.1"])
    inc, outb = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(inc, outb, server_hostname=sni)
    s = socket.create_connection((ip, int(port)), timeout=5)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    first = True
    while True:
        try:
            obj.do_handshake()
            break
        except ssl.SSLWantReadError:
            data = outb.read()
            if data and first and split:
                for part in resplit(data, split):
                    s.sendall(part)
                    time.sleep(0.002)
            elif data:
                s.sendall(data)
            first = False
            r = s.recv(65536)
            if not r:
                raise ConnectionError("closed during handshake")
            inc.write(r)
    s.sendall(outb.read())
    buf = b""
    for i, part in enumerate(parts):
        if i and gap:
            time.sleep(gap)
        obj.write(part)
        s.sendall(outb.read())
    while True:
        try:
            buf += obj.read(65536)
            continue
        except ssl.SSLWantReadError:
            pass
        except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
            break
        try:
            r = s.recv(65536)
        except socket.timeout:
            if not silence_ends:
                raise
            break
        if not r:
            break
        inc.write(r)
    return buf


def cmd_tlsget(ip, port, sni, host, path, cafile, split="0", extra=""):
    res = {"ok": False}
    req = "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n%s\r\n" % (
        path, host, extra.replace("\\r\\n", "\r\n"))
    try:
        text = tls_exchange(ip, port, sni, cafile, [req.encode()], int(split)).decode("latin-1")
        head, _, body = text.partition("\r\n\r\n")
        res = {"ok": True, "status": int(head.split(" ")[1]) if head else 0, "body": body,
               "head": head}
    except (OSError, ssl.SSLError, ConnectionError) as e:
        res["error"] = "%s: %s" % (type(e).__name__, e)
    out(res)


def unescape(text):
    return text.encode().decode("unicode_escape").encode("latin-1")


def cmd_tlsraw(ip, port, sni, cafile, gap, *texts):
    """Raw bytes (escaped like cmd_http's) over TLS, one part per text, gap seconds
    apart; the whole reply."""
    try:
        reply = tls_exchange(ip, port, sni, cafile, [unescape(t) for t in texts], 0, float(gap), True)
        out({"ok": True, "reply": reply.decode("latin-1")})
    except (OSError, ssl.SSLError, ConnectionError) as e:
        out({"ok": False, "error": "%s: %s" % (type(e).__name__, e)})


def cmd_httpseq(ip, port, gap, *texts):
    """Like cmd_http, with several parts sent gap seconds apart (the next request only
    after the previous one was answered)."""
    parts = [unescape(t) for t in texts]
    res = {"connected": False, "reply": "", "reset": False, "closed": False}
    try:
        s = socket.create_connection((ip, int(port)), timeout=3)
    except OSError as e:
        res["error"] = str(e)
        out(res)
        return
    res["connected"] = True
    buf = b""
    s.settimeout(float(gap))
    try:
        for part in parts:
            s.sendall(part)
            try:
                while True:
                    r = s.recv(65536)
                    if not r:
                        res["closed"] = True
                        raise StopIteration
                    buf += r
            except socket.timeout:
                pass
    except StopIteration:
        pass
    except ConnectionResetError:
        res["reset"] = True
    except OSError as e:
        res["error"] = str(e)
    res["reply"] = buf.decode("latin-1")
    out(res)


def cmd_http(ip, port, text):
    out(talk(ip, port, [unescape(text)], 3.0))


def cmd_hold(ip, port, host, secs):
    s = socket.create_connection((ip, int(port)), timeout=5)
    s.sendall(("GET / HTTP/1.1\r\nHost: %s\r\n\r\n" % host).encode())
    s.settimeout(5)
    first = s.recv(65536)
    out({"ready": True, "first": first[:12].decode("latin-1")})
    s.settimeout(float(secs))
    t0 = time.time()
    try:
        while s.recv(65536):  # the rest of the first response, then silence
            pass
        out({"closed": True, "after": time.time() - t0})
    except ConnectionResetError:
        out({"closed": True, "reset": True, "after": time.time() - t0})
    except socket.timeout:
        out({"closed": False})


def cmd_frame(iface, hexdata):
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    s.bind((iface, 0))
    s.send(bytes.fromhex(hexdata))
    out({"sent": True})


def cmd_connflood(ip, port, count):
    ok = refused = failed = 0
    socks = []
    for _ in range(int(count)):
        try:
            s = socket.create_connection((ip, int(port)), timeout=2)
            socks.append(s)
            ok += 1
        except ConnectionRefusedError:
            refused += 1
        except OSError:
            failed += 1
    alive = 0
    for s in socks:
        try:
            s.settimeout(0.05)
            s.send(b"\x16")
            s.recv(1)
        except socket.timeout:
            alive += 1
        except OSError:
            pass
        s.close()
    out({"connected": ok, "refused": refused, "failed": failed, "still_open": alive})


def cmd_garbage(ip, dns_server, count):
    """Random bytes at 443, 80 and 53, COUNT rounds; prints how many TCP sends hit a reset."""
    resets = 0
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for _ in range(int(count)):
        for port in (443, 80):
            try:
                c = socket.create_connection((ip, port), timeout=1)
                c.sendall(os.urandom(300))
                c.settimeout(0.3)
                c.recv(100)
            except ConnectionResetError:
                resets += 1
            except OSError:
                pass
        u.sendto(os.urandom(int.from_bytes(os.urandom(1), "big") + 1), (dns_server, 53))
    out({"resets": resets})


def cmd_canary(events, *ips):
    def serve(ip, port):
        ls = socket.socket()
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind((ip, port))
        ls.listen(16)
        while True:
            c, _ = ls.accept()
            with open(events, "a") as f:
                f.write(json.dumps({"kind": "canary", "addr": ip, "port": port}) + "\n")
            c.close()
    for ip in ips:
        for port in (80, 443):
            threading.Thread(target=serve, args=(ip, port), daemon=True).start()
    threading.Event().wait()


def cmd_fetch(url, opts="{}"):
    """A small curl: GET url; opts: resolve (IP to connect to instead of resolving the
    host), cafile, headers (list of "Name: value"), follow (redirects to follow),
    rsa_only (offer only RSA key exchange, TLS 1.2, like busybox wget), timeout."""
    o = json.loads(opts)
    chain = []
    for _ in range(int(o.get("follow", 0)) + 1):
        res = fetch_once(url, o)
        chain.append(res)
        loc = [l.split(":", 1)[1].strip() for l in res.get("head", "").split("\r\n")[1:]
               if l.lower().startswith("location:")]
        if not (res.get("status", 0) in (301, 302, 303, 307, 308) and loc):
            break
        url = loc[0]
        o = dict(o, resolve=None)
    res = dict(chain[-1])
    res["chain"] = [{"status": c.get("status"), "error": c.get("error")} for c in chain]
    out(res)


def fetch_once(url, o):
    from urllib.parse import urlsplit
    u = urlsplit(url)
    host, tls = u.hostname, u.scheme == "https"
    port = u.port or (443 if tls else 80)
    path = (u.path or "/") + ("?" + u.query if u.query else "")
    res = {"ok": False}
    try:
        ip = o.get("resolve") or socket.getaddrinfo(host, port, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]
        res["ip"] = ip
        s = socket.create_connection((ip, port), timeout=float(o.get("timeout", 10)))
        if tls:
            ctx = ssl.create_default_context(cafile=o.get("cafile"))
            if o.get("rsa_only"):
                ctx.maximum_version = ssl.TLSVersion.TLSv1_2
                ctx.set_ciphers("AES128-SHA:AES256-SHA:AES128-SHA256:AES256-SHA256")
            s = ctx.wrap_socket(s, server_hostname=host)
        hdrs = "".join(h + "\r\n" for h in o.get("headers", []))
        s.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: netsec\r\nConnection: close\r\n%s\r\n"
                   % (path, host, hdrs)).encode())
        buf = b""
        while True:
            try:
                r = s.recv(65536)
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                break
            if not r:
                break
            buf += r
        text = buf.decode("latin-1")
        head, _, body = text.partition("\r\n\r\n")
        res.update(ok=bool(head), status=int(head.split(" ")[1]) if head else 0, head=head, body=body)
    except (OSError, ssl.SSLError, ValueError, IndexError) as e:
        res["error"] = "%s: %s" % (type(e).__name__, e)
    return res


def cmd_resolve(name):
    """The guest's own resolver (libc: /etc/hosts, then /etc/resolv.conf)."""
    try:
        out({"addrs": sorted({a[4][0] for a in socket.getaddrinfo(name, 80, socket.AF_INET)})})
    except OSError as e:
        out({"addrs": [], "error": str(e)})


def cmd_tlsinfo(ip, port, sni, cafile):
    """TLS handshake (no SNI when sni is "-"), verifying against cafile unless it is
    "-"; the leaf's subject and issuer."""
    ctx = ssl.create_default_context(cafile=None if cafile == "-" else cafile)
    if cafile == "-" or sni == "-":
        ctx.check_hostname = False
    if cafile == "-":
        ctx.verify_mode = ssl.CERT_NONE
    try:
        s = ctx.wrap_socket(socket.create_connection((ip, int(port)), timeout=5),
                            server_hostname=None if sni == "-" else sni)
        cert = s.getpeercert()
        der = s.getpeercert(binary_form=True)
        out({"ok": True, "cert": bool(der),
             "issuer": dict(x[0] for x in cert.get("issuer", ())) if cert else None})
    except (OSError, ssl.SSLError) as e:
        out({"ok": False, "error": "%s: %s" % (type(e).__name__, e)})


def icmp_echo(dst, ident):
    body = struct.pack("!BBHHH", 8, 0, 0, ident, 1) + b"netsec-probe"
    s = 0
    for i in range(0, len(body), 2):
        s += (body[i] << 8) + (body[i + 1] if i + 1 < len(body) else 0)
    s = (s & 0xFFFF) + (s >> 16)
    s = (s & 0xFFFF) + (s >> 16)
    return body[:2] + struct.pack("!H", ~s & 0xFFFF) + body[4:]


def cmd_icmp(dst, count="2"):
    """Raw ICMP echo requests; counts echo replies from dst within a second each."""
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    s.settimeout(1.0)
    replies = 0
    for _ in range(int(count)):
        s.sendto(icmp_echo(dst, os.getpid() & 0xFFFF), (dst, 0))
        end = time.time() + 1.0
        while time.time() < end:
            try:
                pkt, src = s.recvfrom(2048)
            except socket.timeout:
                break
            ihl = (pkt[0] & 0xF) * 4
            if src[0] == dst and pkt[ihl] == 0:
                replies += 1
                break
    out({"replies": replies})


def cmd_udp(ip, port, hexdata):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.sendto(bytes.fromhex(hexdata), (ip, int(port)))
    out({"sent": True})


def cmd_ipv6():
    """What IPv6 the guest has: its addresses, and whether anything answers a UDP
    datagram to all-nodes or a TCP connection to fe80::1 on eth0."""
    try:
        with open("/proc/net/if_inet6") as f:
            addrs = [l.split()[0] for l in f]
    except OSError:
        addrs = []
    res = {"addrs": addrs, "sent": False, "connected": False, "reply": False}
    try:
        s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        s.settimeout(1.0)
        s.sendto(b"x" * 64, ("ff02::1%eth0", 9, 0, 0))
        res["sent"] = True
        s.recvfrom(2048)
        res["reply"] = True
    except OSError as e:
        res["udp_error"] = str(e)
    try:
        socket.create_connection(("fe80::1%eth0", 80), timeout=2)
        res["connected"] = True
    except OSError as e:
        res["tcp_error"] = str(e)
    out(res)


def cmd_search(needle_hex, roots="/"):
    """Looks for a byte string (given in hex, so this process's argv does not hold it)
    in every regular file under roots (not /proc, /sys, /dev) and in every process's
    environment and command line; prints where it was found."""
    needle = bytes.fromhex(needle_hex)
    found, files = [], 0
    for root in roots.split(","):
        for d, subdirs, names in os.walk(root):
            if d in ("/proc", "/sys", "/dev"):
                subdirs[:] = []
                continue
            subdirs[:] = [x for x in subdirs if os.path.join(d, x) not in ("/proc", "/sys", "/dev")]
            for n in names:
                p = os.path.join(d, n)
                try:
                    if not os.path.isfile(p) or os.path.islink(p) or os.path.getsize(p) > 64 << 20:
                        continue
                    with open(p, "rb") as f:
                        files += 1
                        if needle in f.read():
                            found.append(p)
                except OSError:
                    pass
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) != os.getpid():
            for what in ("environ", "cmdline"):
                try:
                    with open("/proc/%s/%s" % (pid, what), "rb") as f:
                        if needle in f.read():
                            found.append("/proc/%s/%s" % (pid, what))
                except OSError:
                    pass
    out({"found": found, "files": files})


def run_calls(calls):
    """Runs several subcommands in this one process; returns each call's own JSON
    result. A call that raised gives {"exception": text}."""
    import io
    results = []
    for call in calls:
        buf, real = io.StringIO(), sys.stdout
        sys.stdout = buf
        try:
            globals()["cmd_" + call[0]](*call[1:])
            text = buf.getvalue().strip().splitlines()
            results.append(json.loads(text[-1]) if text else {})
        except Exception as e:  # one broken call must not hide the others' results
            results.append({"exception": "%s: %s" % (type(e).__name__, e)})
        finally:
            sys.stdout = real
    return results


def cmd_serve():
    """Reads one JSON list of calls per stdin line, prints one JSON list of results per
    line, until EOF: one long-lived process serves a whole test session."""
    for line in sys.stdin:
        if line.strip():
            out(run_calls(json.loads(line)))


if __name__ == "__main__":
    globals()["cmd_" + sys.argv[1]](*sys.argv[2:])
