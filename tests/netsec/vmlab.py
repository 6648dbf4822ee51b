"""The attack lab with real sandboxes: netlab's fake internet and gateway namespace, a
real spaced (tests/e2e/spacedlib.py) whose own space-gateway runs in that gateway
namespace, and `python`-template sandbox VMs created through the API. Attacks run
inside the VMs, as root, through the sessions API: guestpy.py and frames.py are
uploaded with the files API to GUEST_TOOLS; one long-lived `guestpy.py serve` session
per VM takes each list of calls on stdin and answers one JSON line with each call's own
result (no Python start-up per call: under TCG that costs up to seconds). Commands
that must run beside others (a held connection during a policy change) get their own
session.

    fake internet (netlab)  DNS/HTTP/TLS servers, canary resolver, counters
    gateway namespace       spaced's space-gateway (SPACE_GATEWAY wrapper), canaries
    space-<id> namespaces   made by spaced for each VM: tap0 = 10.0.2.2, QEMU's tap
    VMs                     eth0 = 10.0.2.15, resolver 10.0.2.2 (agent_net)

The host-side checks the namespace version made (nftables counters, the far side's
event log, the sandbox namespace's neighbour and socket tables, the gateway's decision
log) are unchanged: only where the attack runs has moved.
"""
import base64
import http.client
import json
import os
import signal
import struct
import sys
import time
import urllib.parse

import netlab

sys.path.insert(0, os.path.join(netlab.ROOT, "tests", "e2e"))
import spacedlib  # noqa: E402

GUEST_TOOLS = "/opt/netsec"
GUEST_CA = GUEST_TOOLS + "/ca.pem"        # test CA + the deployment's egress CA
GUEST_SPACE_CA = GUEST_TOOLS + "/space-ca.pem"
GUEST_MAC = "02:5b:00:00:00:01"           # src/daemon/net/net.h NET_GUEST_MAC
TEMPLATE = "python"
# The image's /etc/hosts, restored after the case that forges it.
HOSTS = "127.0.0.1 localhost\n"


def missing():
    """Why VM attacks cannot run here, or None."""
    why = netlab.can_run() or spacedlib.vm_missing()
    if why:
        return why
    if not os.path.exists(os.path.join(spacedlib.GUEST, "templates", TEMPLATE, "rootfs.ext4")):
        return "the %s template is not built in %s (make templates)" % (TEMPLATE, spacedlib.GUEST)
    return None


class Result:
    """What subprocess.run returns, for a command run in a VM."""

    def __init__(self, code, out, err):
        self.returncode, self.stdout, self.stderr = code, out, err


class Session:
    """One command in a VM through the sessions API; output read as it comes."""

    def __init__(self, sp, sid, argv, timeout, stdin=False):
        r = sp.request("POST", "/v1/sandboxes/%s/sessions" % sid,
                       {"argv": argv, "user": "root", "timeout": int(timeout), "stdin": stdin})
        if r.status != 201:
            raise RuntimeError("session create: %r" % r)
        j = r.json
        self.sp, self.url, self.token = sp, j["attach_url"].rsplit("/", 1)[0], j["attach_token"]
        # Generous socket timeout: the machine is shared and guests run under TCG; the
        # session's own timeout (SIGKILL in the guest) bounds a hung command.
        self.conn = http.client.HTTPConnection("127.0.0.1", sp.port, timeout=(timeout or 600) + 120)
        self.conn.request("GET", j["attach_url"], headers={"Authorization": "Bearer " + j["attach_token"]})
        self.resp = self.conn.getresponse()
        if self.resp.status != 200:
            raise RuntimeError("attach: %d %s" % (self.resp.status, self.resp.read()[:300]))
        self.out, self.err, self.code, self.pending = b"", b"", None, b""

    def _pump(self):
        """Reads events until some stdout arrives or the process ends; False at the end."""
        for _, name, payload in spacedlib.sse_events(self.resp):
            if name == "stdout":
                self.pending += base64.b64decode(payload["data"])
                return True
            if name == "stderr":
                self.err += base64.b64decode(payload["data"])
            elif name == "exit":
                self.code = payload["code"] if payload.get("code") is not None else -payload["signal"]
            elif name == "error":
                self.err += json.dumps(payload).encode()
        return False

    def readline(self):
        while b"\n" not in self.pending:
            if not self._pump():
                line, self.pending = self.pending, b""
                return line.decode(errors="replace")
        line, _, self.pending = self.pending.partition(b"\n")
        return line.decode(errors="replace") + "\n"

    def wait(self):
        while self._pump():
            pass
        self.out, self.pending = self.pending, b""
        self.conn.close()
        return Result(self.code, self.out.decode(errors="replace"), self.err.decode(errors="replace"))

    def write(self, data):
        """Sends data to the process's stdin (a session created with stdin)."""
        r = self.sp.request("POST", self.url + "/stdin", raw=data, key=None,
                            headers={"Authorization": "Bearer " + self.token,
                                     "Content-Type": "application/octet-stream"})
        if r.status != 200:
            raise RuntimeError("stdin: %r" % r)


class VMSandbox:
    """One sandbox VM under attack. id is spaced's sandbox id; ns its namespace."""

    def __init__(self, lab, policy):
        self.lab, self.policy = lab, policy
        sp = lab.spaced
        r = sp.create({"template": TEMPLATE, "timeout": 0, "network": policy})
        self.id = r["sandbox"]["id"]
        op = sp.wait_op(r["operation"]["id"], timeout=900)
        if op["state"] != "succeeded":
            raise RuntimeError("sandbox create failed: %s" % op)
        self.ns = "space-" + self.id
        for name in ("guestpy.py", "frames.py"):
            with open(os.path.join(netlab.HERE, name), "rb") as f:
                self.put(GUEST_TOOLS + "/" + name, f.read())
        with open(os.path.join(lab.dir, "testca.crt"), "rb") as f:
            test_ca = f.read()
        with open(lab.space_ca, "rb") as f:
            space_ca = f.read()
        self.put(GUEST_CA, test_ca + space_ca)
        self.put(GUEST_SPACE_CA, space_ca)
        self.ca, self.space_ca = GUEST_CA, GUEST_SPACE_CA
        self.server = None  # the Session of `guestpy.py serve`, started on first use

    def put(self, path, data):
        q = "?" + urllib.parse.urlencode({"path": path, "user": "root"})
        r = self.lab.spaced.request("PUT", "/v1/sandboxes/%s/files%s" % (self.id, q), raw=data,
                                    headers={"Content-Type": "application/octet-stream"})
        if r.status != 200:
            raise RuntimeError("upload %s: %r" % (path, r))

    def spawn(self, *argv, timeout=120, stdin=False):
        return Session(self.lab.spaced, self.id, list(argv), timeout, stdin)

    def run(self, *argv, timeout=60):
        """Runs argv in the VM as root; returns a Result."""
        return self.spawn(*argv, timeout=timeout).wait()

    def py(self, *args):
        """Runs one guestpy.py subcommand in the VM; returns its JSON result."""
        res = self.batch([args])[0]
        if "exception" in res:
            raise RuntimeError("guestpy %s in %s: %s" % (args[0], self.id, res["exception"]))
        return res

    def batch(self, calls):
        """Several guestpy calls, run by the VM's one long-lived `guestpy.py serve`
        process (no Python start-up per call); one result per call, in order. A call
        that raised gives {"exception": text}. A call that hangs is bounded by the
        server session's socket timeout; the server is then started afresh."""
        if self.server is None:
            self.server = self.spawn("python3", GUEST_TOOLS + "/guestpy.py", "serve", timeout=0, stdin=True)
        srv = self.server
        try:
            srv.write((json.dumps([list(c) for c in calls]) + "\n").encode())
            line = srv.readline()
            if not line:
                raise RuntimeError("guestpy server in %s ended: %s" % (self.id, srv.err[-2000:]))
            return json.loads(line)
        except Exception:
            self.server = None
            srv.kill()
            raise

    def spawn_py(self, *args, timeout=120):
        return self.spawn("python3", GUEST_TOOLS + "/guestpy.py", *args, timeout=timeout)

    def log(self, since=0):
        return self.lab.ctl({"op": "log", "sandbox": self.id, "since": since})

    def set_policy(self, policy):
        r = self.lab.spaced.request("PUT", "/v1/sandboxes/%s/network" % self.id, policy)
        if r.status == 200:
            self.policy = policy
        return {"ok": r.status == 200, "status": r.status}

    def set_creds(self, rules):
        r = self.lab.spaced.request("PUT", "/v1/sandboxes/%s/credentials" % self.id, rules)
        if r.status != 200:
            raise RuntimeError("credentials: %r" % r)

    def qemu_pid(self):
        with open(os.path.join(self.lab.spaced.data_dir, "run", self.id, "qemu.pid")) as f:
            return int(f.read().strip())


def start_spaced(lab, sp):
    """Starts sp (a spacedlib.Spaced) with its space-gateway in the gateway namespace of
    lab (a started netlab.Lab, without its own gateway), through a wrapper script, with
    the fake internet's DNS as upstream and the lab's CA trusted. The caller stops sp,
    also when this raises."""
    wrapper = os.path.join(lab.dir, "gateway-in-lab")
    with open(wrapper, "w") as f:
        f.write("#!/bin/sh\nexec ip netns exec %s %s \"$@\"\n" % (lab.gwns, lab.gateway_bin))
    os.chmod(wrapper, 0o755)
    # spaced hands its own environment to the gateway it starts. Given to this daemon
    # only (other suites in the same pytest run must not inherit the wrapper), and kept
    # by sp for its restarts.
    sp.start(env={"SPACE_GATEWAY": wrapper,
                  "SPACE_GATEWAY_ARGS": "--upstream-dns 192.0.2.53 --trust %s/trust.pem" % lab.dir})


class VMLab(netlab.Lab):
    """netlab.Lab (fake internet, gateway namespace, canaries) with spaced in place of
    the lab's own gateway. ctl() talks to spaced's gateway."""

    def start_vms(self, policies):
        self.start(gateway=False)
        self.sandboxes = []
        self.spaced = spacedlib.Spaced(spacedlib.GUEST)
        start_spaced(self, self.spaced)
        gwdir = os.path.join(self.spaced.data_dir, "gateway")
        self.ctl_path = os.path.join(gwdir, "gateway.sock")
        self.space_ca = os.path.join(gwdir, "ca", "space-ca.crt")
        # The first networked create starts the gateway; later ones reuse it.
        for pol in policies:
            self.sandboxes.append(VMSandbox(self, pol))
        return self

    def gateway_pid(self):
        with open(os.path.join(self.spaced.data_dir, "gateway", "gateway.pid")) as f:
            return int(f.read().strip())

    def gateway_alive(self):
        try:
            os.kill(self.gateway_pid(), 0)
            return bool(self.ctl({"op": "ping"}).get("ok"))
        except (OSError, ValueError, json.JSONDecodeError):
            return False

    def stop(self):
        """Stops spaced (VMs, its gateway, namespaces) and the lab, whatever state a
        failed start left; returns sanitizer reports found in the gateway's log."""
        report = ""
        try:
            report = self._stop_spaced()
        finally:
            lab_report = super().stop()
        return lab_report or report

    def _stop_spaced(self):
        sp = getattr(self, "spaced", None)
        if not sp:
            return ""
        report = ""
        try:
            pid = self.gateway_pid()
            os.kill(pid, signal.SIGTERM)
            end = time.monotonic() + 20
            while time.monotonic() < end:
                with open("/proc/%d/stat" % pid) as f:
                    if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                        break  # exited; spaced has not reaped it yet
                time.sleep(0.1)
        except (OSError, ValueError):
            pass
        try:
            with open(os.path.join(sp.data_dir, "gateway", "gateway.log"), errors="replace") as f:
                report = netlab.sanitizer_report(f.read())
        except OSError:
            pass
        if sp.proc:
            sp.stop()
        return report


def gw_mac(sb):
    return netlab.sh("cat", "/sys/class/net/tap0/address", ns=sb.ns).stdout.strip()


def _present_runs(pagemap, lo, hi):
    """(start, end) address runs of the pages of [lo, hi) that are in RAM (bit 63 of
    their pagemap entry)."""
    start = end = None
    for base in range(lo, hi, 4096 * 4096):
        pagemap.seek(base // 4096 * 8)
        raw = pagemap.read(min(hi - base, 4096 * 4096) // 4096 * 8)
        for i, (entry,) in enumerate(struct.iter_unpack("<Q", raw)):
            if not entry >> 63:
                continue
            addr = base + i * 4096
            if end == addr:
                end += 4096
                continue
            if start is not None:
                yield start, end
            start, end = addr, addr + 4096
    if start is not None:
        yield start, end


def qemu_memory_contains(pid, needle):
    """True if needle is anywhere in the resident memory of process pid (for a QEMU
    process: the guest RAM it has touched plus QEMU's own buffers). Only pages already in
    RAM are read: faulting the rest in would charge them to the jailed QEMU's memory
    cgroup and can get it OOM-killed (seen in CI)."""
    needle = needle.encode()
    with open("/proc/%d/maps" % pid) as maps, open("/proc/%d/mem" % pid, "rb", 0) as mem, \
            open("/proc/%d/pagemap" % pid, "rb", 0) as pagemap:
        for line in maps:
            rng, perms = line.split()[:2]
            if "r" not in perms:
                continue
            lo, hi = (int(x, 16) for x in rng.split("-"))
            for start, end in _present_runs(pagemap, lo, hi):
                off, tail = start, b""
                while off < end:
                    n = min(end - off, 64 << 20)
                    try:
                        mem.seek(off)
                        chunk = mem.read(n)
                    except (OSError, ValueError, OverflowError):
                        break
                    if needle in tail + chunk:
                        return True
                    tail = chunk[-len(needle):]
                    off += n
    return False

