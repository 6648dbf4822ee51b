"""Hand-built Ethernet frames for the spoofing and other-protocol cases."""
import socket
import struct

BCAST = "ff:ff:ff:ff:ff:ff"


def mac(s):
    return bytes(int(x, 16) for x in s.split(":"))


def csum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return (~s) & 0xFFFF


def ipv4(src, dst, proto, payload):
    hdr = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), 0x1234, 0, 64, proto, 0,
                      socket.inet_aton(src), socket.inet_aton(dst))
    hdr = hdr[:10] + struct.pack("!H", csum(hdr)) + hdr[12:]
    return hdr + payload


def udp(sport, dport, payload):
    return struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload


def tcp_syn(src, dst, sport, dport):
    h = struct.pack("!HHIIBBHHH", sport, dport, 1000, 0, 5 << 4, 0x02, 64240, 0, 0)
    pseudo = socket.inet_aton(src) + socket.inet_aton(dst) + struct.pack("!BBH", 0, 6, len(h))
    return h[:16] + struct.pack("!H", csum(pseudo + h)) + h[18:]


def eth(dst, src, ethertype, payload):
    return mac(dst) + mac(src) + struct.pack("!H", ethertype) + payload


def arp(op, smac, sip, tmac, tip):
    return struct.pack("!HHBBH6s4s6s4s", 1, 0x0800, 6, 4, op, mac(smac), socket.inet_aton(sip),
                       mac(tmac), socket.inet_aton(tip))


def ipv6_ra(src_mac):
    """A router advertisement from fe80::1 to all nodes (ICMPv6 type 134), checksum
    left zero: it only has to reach the filter, which must drop it by ethertype."""
    icmp = struct.pack("!BBHBBHII", 134, 0, 0, 64, 0, 1800, 0, 0)
    src = bytes.fromhex("fe800000000000000000000000000001")
    dst = bytes.fromhex("ff020000000000000000000000000001")
    hdr = struct.pack("!IHBB", 0x60000000, len(icmp), 58, 255) + src + dst
    return eth("33:33:00:00:00:01", src_mac, 0x86DD, hdr + icmp)
