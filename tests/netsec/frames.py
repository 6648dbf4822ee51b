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


def ipv6_icmp(src_mac, dst_mac, src, dst, icmp_type, body, hop=255):
    """A well-formed ICMPv6 packet (checksum over the pseudo-header): the kind a host with
    IPv6 on acts upon, so only a filter can make it vanish."""
    s6, d6 = socket.inet_pton(socket.AF_INET6, src), socket.inet_pton(socket.AF_INET6, dst)
    msg = struct.pack("!BBH", icmp_type, 0, 0) + body
    pseudo = s6 + d6 + struct.pack("!IxxxB", len(msg), 58)
    msg = msg[:2] + struct.pack("!H", csum(pseudo + msg)) + msg[4:]
    hdr = struct.pack("!IHBB", 0x60000000, len(msg), 58, hop) + s6 + d6
    return eth(dst_mac, src_mac, 0x86DD, hdr + msg)


def ipv6_valid_set(src_mac, src_ll, dst_mac, dst_ll):
    """Echo request and neighbour solicitation for dst_ll (each makes the receiver learn
    src_ll as a neighbour), and a router advertisement from fe80::1 (makes a default
    route), all well-formed."""
    lladdr = struct.pack("!BB", 1, 1) + mac(src_mac)
    echo = ipv6_icmp(src_mac, dst_mac, src_ll, dst_ll, 128, struct.pack("!HH", 0x5b, 1) + b"v6" * 16, 64)
    ns = ipv6_icmp(src_mac, dst_mac, src_ll, dst_ll, 135,
                   b"\0" * 4 + socket.inet_pton(socket.AF_INET6, dst_ll) + lladdr)
    ra = ipv6_icmp(src_mac, "33:33:00:00:00:01", "fe80::1", "ff02::1", 134,
                   struct.pack("!BBHII", 64, 0, 1800, 0, 0) + lladdr)
    return [echo, ns, ra]
