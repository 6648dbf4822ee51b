"""Builds and tears down the fake internet of the attack lab and the gateway's
namespace (vmlab.py adds spaced and the sandbox VMs; tests/e2e/test_network.py uses it
with the lab's own gateway). Everything lives in namespaces this module created;
nothing has a route off the machine.

    inet   (fake internet)  192.0.2.1/24 on veth; on lo: 192.0.2.53 (DNS, zone test.),
                            198.51.100.53 (canary public resolver), 203.0.113.10/.20/.30
                            (web servers), 203.0.113.40 (Content-Length-only
                            legacy server), 203.0.113.50 (fake Debian mirror),
                            168.63.129.16 (stands for Azure's
                            WireServer: nothing listens); nft counters per destination
    gw     (gateway)        192.0.2.2/24, default via 192.0.2.1; space-gateway runs here,
                            with canary listeners on 127.0.0.1 and 192.0.2.2 (80, 443)
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
GW_IP = "10.0.2.2"
GW_UPLINK = "192.0.2.2"
TOKEN = "s3cret-token-7f1c9b"
# The interpreter running the tests (not a PATH lookup: version-manager shims are slow).
PY = sys.executable
COUNTED = ["192.0.2.53", "198.51.100.53", "203.0.113.10", "203.0.113.20", "203.0.113.30",
           "203.0.113.40", "203.0.113.50", "168.63.129.16"]


def sh(*cmd, ns=None, check=True, input=None, timeout=30):
    if ns:
        cmd = ("ip", "netns", "exec", ns) + cmd
    r = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError("%s failed: %s %s" % (" ".join(cmd), r.stdout, r.stderr))
    return r


def can_run():
    """None if the lab can be built here, else why not."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, nftables)"
    for tool in ("ip", "nft", "openssl", "curl", "dig"):
        if not shutil.which(tool):
            return "needs %s (Debian: iproute2 nftables openssl curl bind9-dnsutils)" % tool
    probe = "spnsprobe%d" % os.getpid()
    r = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if r.returncode != 0:
        return "cannot create a network namespace: " + r.stderr.strip()
    subprocess.run(["ip", "netns", "del", probe])
    return None


def sanitizer_report(text):
    """The first AddressSanitizer/LeakSanitizer/UBSan report in a log, or ""."""
    for marker in ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:"):
        if marker in text:
            at = text.index(marker)
            return text[max(at - 200, 0):][:6000]
    return ""


def wire(ns_a, dev_a, addr_a, ns_b, dev_b, addr_b, mac_b=None):
    """Two new namespaces joined by a veth pair (dev_a in ns_a, dev_b in ns_b), with
    their addresses, links up."""
    for ns in (ns_a, ns_b):
        sh("ip", "netns", "add", ns)
        sh("ip", "link", "set", "lo", "up", ns=ns)
    sh("ip", "link", "add", dev_a, "netns", ns_a, "type", "veth", "peer", "name", dev_b, "netns", ns_b)
    if mac_b:
        sh("ip", "link", "set", dev_b, "address", mac_b, ns=ns_b)
    for ns, dev, addr in ((ns_a, dev_a, addr_a), (ns_b, dev_b, addr_b)):
        sh("ip", "addr", "add", addr, "dev", dev, ns=ns)
        sh("ip", "link", "set", dev, "up", ns=ns)


def make_certs(d):
    def run(*a):
        subprocess.run(["openssl"] + list(a), check=True, capture_output=True)
    run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-keyout", d + "/testca.key", "-out", d + "/testca.crt", "-days", "2",
        "-subj", "/CN=space netsec test CA", "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign")
    for name, sans in (("allowed.test", "DNS:allowed.test,DNS:*.allowed.test"),
                       ("blocked.test", "DNS:blocked.test"), ("api.test", "DNS:api.test"),
                       ("evil.test", "DNS:evil.test,DNS:*.evil.test")):
        run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", "%s/%s.key" % (d, name), "-out", "%s/%s.csr" % (d, name), "-subj", "/CN=" + name)
        ext = "%s/%s.ext" % (d, name)
        with open(ext, "w") as f:
            f.write("subjectAltName=%s\nextendedKeyUsage=serverAuth\n" % sans)
        run("x509", "-req", "-in", "%s/%s.csr" % (d, name), "-CA", d + "/testca.crt",
            "-CAkey", d + "/testca.key", "-CAcreateserial", "-out", "%s/%s.crt" % (d, name),
            "-days", "2", "-extfile", ext)



def gateway_call(path, req):
    """One request on a gateway's control socket at path (one JSON line each way)."""
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(10)
    try:
        s.connect(path)
        s.sendall((json.dumps(req) + "\n").encode())
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    finally:
        s.close()
    return json.loads(buf)

class Lab:
    def __init__(self):
        self.prefix = "spn%d" % (os.getpid() % 100000)
        self.inet, self.gwns = self.prefix + "-inet", self.prefix + "-gw"
        self.dir = tempfile.mkdtemp(prefix="space-netsec-", dir=os.environ.get("SPACE_TEST_RUN_DIR"))
        self.events_path = os.path.join(self.dir, "events.jsonl")
        self.procs = []
        build = os.environ.get("SPACE_BUILD", os.path.join(ROOT, "build", "san"))
        self.gateway_bin = os.path.join(build, "space-gateway")

    # ---- building
    def start(self, policies=(), gateway=True):
        """Builds the fake internet and the gateway namespace, and with gateway runs a
        space-gateway of the lab's own there (tests that claim namespaces through net.c
        attach to it). Sandboxes are real VMs now (vmlab.py): policies must be empty."""
        if policies:
            raise ValueError("namespace stand-ins for sandboxes are gone: attacks run in VMs (vmlab.py)")
        if not os.path.exists(self.gateway_bin):
            raise RuntimeError("missing %s (make SAN=1 programs, or set SPACE_BUILD)" % self.gateway_bin)
        make_certs(self.dir)
        with open(os.path.join(self.dir, "trust.pem"), "w") as f:
            f.write(open(self.dir + "/testca.crt").read())
        wire(self.gwns, "up0", GW_UPLINK + "/24", self.inet, "inet0", "192.0.2.1/24")
        sh("ip", "route", "add", "default", "via", "192.0.2.1", ns=self.gwns)
        for a in COUNTED:
            sh("ip", "addr", "add", a + "/32", "dev", "lo", ns=self.inet)
        rules = ["table inet count {"]
        for a in COUNTED:
            rules.append(" counter c_%s { }" % a.replace(".", "_"))
        for port in (22, 25, 8443, 853):
            rules.append(" counter tcp_%d { }" % port)
        rules += [" counter udp_other { }", " counter icmp_in { }", " chain in {",
                  "  type filter hook input priority -10; policy accept;"]
        for a in COUNTED:
            rules.append("  ip daddr %s counter name c_%s" % (a, a.replace(".", "_")))
        for port in (22, 25, 8443, 853):
            rules.append("  tcp dport %d counter name tcp_%d" % (port, port))
        rules += ["  udp dport != 53 counter name udp_other", "  meta l4proto icmp counter name icmp_in",
                  " }", "}"]
        sh("nft", "-f", "-", ns=self.inet, input="\n".join(rules) + "\n")
        self._spawn(self.inet, [PY, os.path.join(HERE, "fakenet.py"), self.events_path,
                                self.dir, TOKEN], "fakenet")
        self._wait(lambda: any(e["kind"] == "ready" for e in self.events()), "fake internet")
        # Canary listeners on the gateway host's own addresses: must never be dialled.
        self._spawn(self.gwns, [PY, os.path.join(HERE, "guestpy.py"), "canary",
                                self.events_path, "127.0.0.1", GW_UPLINK], "canary")
        if not gateway:
            return self
        self.ctl_path = os.path.join(self.dir, "gateway.sock")
        env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=0")
        self.gw_log = open(os.path.join(self.dir, "gateway.log"), "w")
        self.gateway = subprocess.Popen(
            ["ip", "netns", "exec", self.gwns, self.gateway_bin, "--data-dir", self.dir,
             "--upstream-dns", "192.0.2.53", "--trust", self.dir + "/trust.pem"],
            stdout=self.gw_log, stderr=subprocess.STDOUT, env=env)
        self._wait(lambda: os.path.exists(self.ctl_path), "gateway control socket")
        return self

    def _spawn(self, ns, cmd, name):
        log = open(os.path.join(self.dir, name + ".log"), "w")
        p = subprocess.Popen(["ip", "netns", "exec", ns] + cmd, stdout=log, stderr=subprocess.STDOUT)
        self.procs.append(p)
        return p

    def spawn_canary(self, *ips):
        """More canary listeners (80, 443) in the gateway's namespace, e.g. on an
        address added there while the gateway runs; the caller kills the process."""
        return self._spawn(self.gwns, [PY, os.path.join(HERE, "guestpy.py"), "canary",
                                       self.events_path] + list(ips), "canary-" + "-".join(ips))

    def _wait(self, cond, what, secs=30):
        end = time.time() + secs
        while time.time() < end:
            if cond():
                return
            time.sleep(0.05)
        raise RuntimeError("timed out waiting for " + what)

    def stop(self):
        """Tears everything down; returns sanitizer reports found in the gateway's log
        (empty string if none), so the suite fails on a leak or a memory error."""
        report = ""
        if getattr(self, "gateway", None) and self.gateway.poll() is None:
            self.gateway.send_signal(signal.SIGTERM)
            try:
                self.gateway.wait(30)
            except subprocess.TimeoutExpired:
                self.gateway.kill()
        if getattr(self, "gw_log", None):
            self.gw_log.close()
            with open(self.gw_log.name) as f:
                report = sanitizer_report(f.read())
        for p in self.procs:
            p.kill()
            p.wait()
        for ns in (self.inet, self.gwns):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        if os.environ.get("SPACE_NETSEC_KEEP") is None:
            shutil.rmtree(self.dir, ignore_errors=True)
        return report

    # ---- observing
    def ctl(self, req):
        return gateway_call(self.ctl_path, req)

    def events(self):
        try:
            with open(self.events_path) as f:
                return [json.loads(l) for l in f if l.strip()]
        except FileNotFoundError:
            return []

    def mark(self):
        return len(self.events())

    def since(self, mark, kind=None):
        return [e for e in self.events()[mark:] if kind is None or e["kind"] == kind]

    def counters(self):
        out = json.loads(sh("nft", "-j", "list", "counters", ns=self.inet).stdout)
        return {c["counter"]["name"]: c["counter"]["packets"] for c in out["nftables"] if "counter" in c}

    def gateway_alive(self):
        return self.gateway.poll() is None and self.ctl({"op": "ping"}).get("ok")
