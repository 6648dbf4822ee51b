"""Attack tools run *as the guest* (inside the guest namespace) by the netsec tests;
python standard library only. Each subcommand prints one JSON object.

  dns SERVER NAME QTYPE [tcp]        one query; rcode and A answers, or timeout
  dnsraw SERVER HEX                  sends raw bytes as a UDP query; the reply, if any
  dnsflood SERVER COUNT NAME         COUNT queries as fast as possible; answers counted
  tcp IP PORT HEX [WAIT]             connect, send, read until close/timeout
  hello IP PORT SPEC_JSON            hand-built TLS ClientHello (see client_hello)
  tlsget IP PORT SNI HOST PATH CAFILE [SPLIT] [EXTRA_HEADER]
                                     full TLS request; SPLIT>0 cuts the ClientHello into
                                     records of SPLIT bytes, each sent in two segments
  http IP PORT TEXT                  raw HTTP bytes (\\r\\n escapes), all replies read
  hold IP PORT HOST SECS             keep-alive request, then waits for the gateway to
                                     close the connection (prints a line when ready)
  frame IFACE HEX                    sends one raw Ethernet frame
  connflood IP PORT COUNT            COUNT connection attempts; outcomes counted
  garbage IP DNS COUNT               random bytes to IP:443, IP:80 and DNS:53, COUNT rounds
  canary EVENTS IP...                (gateway side) listens on IP:80/443, records connections
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
    ips = []
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
        off += ln
    return {"rcode": rcode, "answers": ips, "ancount": an}


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
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setblocking(False)
    count, answered = int(count), 0
    for i in range(count):
        try:
            s.sendto(dns_query("%d.%s" % (i, name), 1, i & 0xFFFF), (server, 53))
        except BlockingIOError:
            pass
        while True:
            try:
                s.recvfrom(4096)
                answered += 1
            except BlockingIOError:
                break
    end = time.time() + 3
    while time.time() < end:
        r, _, _ = select.select([s], [], [], 0.5)
        if not r:
            break
        s.recvfrom(4096)
        answered += 1
    out({"sent": count, "answered": answered})


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


def cmd_tlsget(ip, port, sni, host, path, cafile, split="0", extra=""):
    ctx = ssl.create_default_context(cafile=cafile)
    ctx.set_alpn_protocols(["http/1.1"])
    inc, outb = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(inc, outb, server_hostname=sni)
    res = {"ok": False}
    try:
        s = socket.create_connection((ip, int(port)), timeout=5)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        first = True
        while True:
            try:
                obj.do_handshake()
                break
            except ssl.SSLWantReadError:
                data = outb.read()
                if data and first and int(split):
                    for part in resplit(data, int(split)):
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
        req = "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n%s\r\n" % (
            path, host, extra.replace("\\r\\n", "\r\n"))
        obj.write(req.encode())
        s.sendall(outb.read())
        buf = b""
        while True:
            try:
                buf += obj.read(65536)
                continue
            except ssl.SSLWantReadError:
                pass
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                break
            r = s.recv(65536)
            if not r:
                break
            inc.write(r)
        text = buf.decode("latin-1")
        head, _, body = text.partition("\r\n\r\n")
        res = {"ok": True, "status": int(head.split(" ")[1]) if head else 0, "body": body,
               "head": head}
    except (OSError, ssl.SSLError, ConnectionError) as e:
        res["error"] = "%s: %s" % (type(e).__name__, e)
    out(res)


def cmd_http(ip, port, text):
    out(talk(ip, port, [text.encode().decode("unicode_escape").encode("latin-1")], 3.0))


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


if __name__ == "__main__":
    globals()["cmd_" + sys.argv[1]](*sys.argv[2:])
