"""Sandbox networking end to end (spaced's net module + space-gateway + the guest's
agent_net code), against the fake internet of tests/netsec (netlab.py and
vmlab.start_spaced, imported).

Part 1, no VM: a namespace is claimed through net.c exactly as for a sandbox (the
`guest` fixture mode of build/san/tests/test_net: net_claim, gateway attach, then the
guest side configured by agent_net_configure on a tap in a namespace this test made,
frames copied between the two taps as QEMU would). A process in that guest namespace
resolves an allowed name through the gateway, is refused a blocked one, fetches over
HTTP, and loses the name after a live policy change.

Part 2, real VMs: spaced's own gateway runs in the lab's gateway namespace (SPACE_GATEWAY
wrapper, SPACE_GATEWAY_ARGS for the fake resolver); a `base` sandbox with an allowlist
resolves and fetches with busybox, is refused a blocked name, follows a live policy
change made through the API; the API serves the decision log and credential rules
without secrets; a sandbox with policy none has no NIC.

Everything runs in namespaces the tests create (TEST-NET addresses, no route off the
machine). Skips, saying why, without root, namespaces, the lab's tools or the builds."""
import json
import os
import subprocess
import sys
import time

import pytest

import spacedlib

sys.path.insert(0, os.path.join(spacedlib.ROOT, "tests", "netsec"))
import netlab  # noqa: E402
import vmlab  # noqa: E402

ALLOW = {"mode": "allowlist", "allow": ["allowed.test", "*.allowed.test"]}
FIXTURE = os.path.join(spacedlib.BUILD, "tests", "test_net")


@pytest.fixture(scope="module")
def lab():
    why = netlab.can_run()
    if why:
        pytest.skip("network lab unavailable: " + why)
    lab = netlab.Lab()
    try:
        lab.start([])
        yield lab
    finally:
        lab.stop()


class ClaimedGuest:
    """A namespace claimed through net.c, with a guest namespace wired like a VM."""

    def __init__(self, lab, sid, policy):
        self.lab, self.sid = lab, sid
        self.guest = lab.prefix + "-nguest"
        self.data = os.path.join(lab.dir, "net-" + sid)
        os.makedirs(self.data)
        netlab.sh("ip", "netns", "add", self.guest)
        netlab.sh("ip", "link", "set", "lo", "up", ns=self.guest)
        etc = "/etc/netns/" + self.guest
        os.makedirs(etc, exist_ok=True)
        with open(etc + "/resolv.conf", "w") as f:
            f.write("nameserver %s\noptions timeout:2 attempts:1\n" % netlab.GW_IP)
        self.proc = subprocess.Popen(
            [FIXTURE, "guest", self.data, lab.prefix + "-n", sid, lab.ctl_path, self.guest,
             json.dumps(policy)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if not line.startswith("ready "):
            self.proc.kill()
            raise AssertionError("fixture failed: %s %s" % (line, self.proc.stderr.read()))
        self.netns = line.split()[1]

    def run(self, *cmd):
        return netlab.sh(*cmd, ns=self.guest, check=False, timeout=60)

    def dns(self, name):
        r = self.run("python3", os.path.join(netlab.HERE, "guestpy.py"), "dns", netlab.GW_IP, name, "1")
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    def set_policy(self, policy):
        self.proc.stdin.write("policy %s\n" % json.dumps(policy))
        self.proc.stdin.flush()
        return self.proc.stdout.readline().strip()

    def close(self):
        self.proc.stdin.close()
        rc = self.proc.wait(30)
        netlab.sh("ip", "netns", "del", self.guest, check=False)
        subprocess.run(["rm", "-rf", "/etc/netns/" + self.guest])
        return rc


@pytest.fixture
def claimed(lab):
    if not os.access(FIXTURE, os.X_OK):
        pytest.skip("%s not built (make SAN=1 build/san/tests/test_net)" % FIXTURE)
    claimed.count = getattr(claimed, "count", 0) + 1
    g = ClaimedGuest(lab, "sbe2e%d" % claimed.count, ALLOW)
    yield g
    assert g.close() == 0, g.proc.stderr.read()
    assert not os.path.exists(g.netns), "release left the namespace mounted"


def test_claimed_namespace_is_mounted_and_attached(lab, claimed):
    assert os.path.exists(claimed.netns)
    log = lab.ctl({"op": "log", "sandbox": claimed.sid})
    assert log["ok"] and log["policy"]["mode"] == "allowlist", log


def test_allowed_name_resolves_blocked_does_not(lab, claimed):
    r = claimed.dns("allowed.test")
    assert r["rcode"] == 0 and r["answers"] == ["203.0.113.10"], r
    r = claimed.dns("blocked.test")
    assert r["answers"] == [] and r["rcode"] != 0, r
    entries = lab.ctl({"op": "log", "sandbox": claimed.sid})["entries"]
    assert any(e["kind"] == "dns" and e["name"] == "blocked.test" and not e["allowed"] for e in entries)


def test_http_through_the_gateway(claimed):
    r = claimed.run("curl", "-sS", "-m", "10", "http://allowed.test/x")
    assert r.returncode == 0, r.stderr
    assert '"host": "allowed.test"' in r.stdout
    r = claimed.run("curl", "-sS", "-m", "10", "http://203.0.113.20/x")  # no name: refused
    assert '"addr": "203.0.113.20"' not in r.stdout


def test_dns_over_tcp_and_truncation(claimed):
    """DNS over TCP to the gateway answers like UDP; a UDP answer too big for 512 bytes
    comes back truncated (TC, no records) and dig's retry over TCP gets all 32."""
    dig = ("dig", "@" + netlab.GW_IP, "+time=5", "+tries=1")
    r = claimed.run(*dig, "+tcp", "+short", "allowed.test")
    assert r.stdout.split() == ["203.0.113.10"], r.stdout + r.stderr
    r = claimed.run(*dig, "+tcp", "blocked.test")
    assert "status: NXDOMAIN" in r.stdout, r.stdout
    r = claimed.run(*dig, "+notcp", "+ignore", "many.allowed.test")
    assert " tc " in r.stdout.split("flags:")[1].split(";")[0] + " ", r.stdout
    assert "ANSWER: 0" in r.stdout, r.stdout
    r = claimed.run(*dig, "+short", "many.allowed.test")
    assert len(r.stdout.split()) == 32, r.stdout


def test_proxy_ports_only_through_the_redirect(claimed):
    probe = ("import socket, sys\n"
             "try:\n"
             "    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3).close()\n"
             "    print('connected')\n"
             "except OSError:\n"
             "    print('refused')\n")
    for port, want in (("80", "connected"), ("15080", "refused"), ("15443", "refused")):
        r = claimed.run(sys.executable, "-c", probe, netlab.GW_IP, port)
        assert r.stdout.strip() == want, (port, r.stdout, r.stderr)


def test_live_policy_change(claimed):
    assert claimed.dns("allowed.test")["answers"] == ["203.0.113.10"]
    assert claimed.set_policy({"mode": "allowlist", "allow": ["api.test"]}) == "ok"
    assert claimed.dns("allowed.test")["answers"] == []
    assert claimed.set_policy({"mode": "allowlist", "allow": ["bad name"]}).startswith("error")


# ---- part 2: real VMs ------------------------------------------------------------------

def guest_has_net_code():
    try:
        with open(os.path.join(spacedlib.GUEST, "initramfs.cpio"), "rb") as f:
            return b"the sandbox's only resolver" in f.read()
    except OSError:
        return False


def start_net_spaced(lab):
    """A spaced with the lab's gateway setup, started; skips (saying why) without VMs or
    a guest that brings its NIC up. The caller stops it."""
    why = spacedlib.vm_missing()
    if why:
        pytest.skip(why)
    if not guest_has_net_code():
        pytest.skip("the guest initramfs predates agent_net_up: rebuild it with `make guest`")
    sp = spacedlib.Spaced(spacedlib.GUEST)
    try:
        vmlab.start_spaced(lab, sp)
    except BaseException:
        sp.stop()
        raise
    return sp


@pytest.fixture(scope="module")
def net_spaced(lab):
    sp = start_net_spaced(lab)
    try:
        yield sp
    finally:
        sp.stop()  # also ends the gateway spaced leaves running for a successor


def create(sp, network):
    r = sp.create({"template": "base", "timeout": 0, "network": network})
    op = sp.wait_op(r["operation"]["id"])
    assert op["state"] == "succeeded", op
    return r["sandbox"]["id"]


def delete(sp, sid):
    r = sp.request("DELETE", "/v1/sandboxes/" + sid)
    if r.status == 202:
        sp.wait_op(r.json["operation"]["id"])


def sh_in(sp, sid, cmd):
    from test_sessions import run
    _, res = run(sp, sid, {"cmd": cmd, "user": "root"})  # root: the searches must see everything
    return res["exit"]["code"], res["stdout"].decode(errors="replace") + res["stderr"].decode(errors="replace")


@pytest.fixture(scope="module")
def vm_sbx(net_spaced):
    sid = create(net_spaced, ALLOW)
    yield sid
    delete(net_spaced, sid)
    assert not os.path.exists("/run/netns/space-" + sid), "delete left the namespace mounted"


def test_vm_resolves_and_fetches_allowed(net_spaced, vm_sbx):
    code, out = sh_in(net_spaced, vm_sbx, "nslookup allowed.test && wget -q -O - http://allowed.test/hello")
    assert code == 0, out
    assert "203.0.113.10" in out and '"host": "allowed.test"' in out


def test_vm_blocked_name_and_direct_address(net_spaced, vm_sbx):
    code, out = sh_in(net_spaced, vm_sbx, "nslookup blocked.test")
    assert code != 0 and "203.0.113" not in out, out
    code, out = sh_in(net_spaced, vm_sbx, "timeout 10 wget -q -O - http://203.0.113.20/x")
    assert code != 0 and '"addr"' not in out, out


def test_vm_network_api(net_spaced, vm_sbx):
    url = "/v1/sandboxes/%s/network" % vm_sbx
    r = net_spaced.request("GET", url)
    assert r.status == 200 and r.json["mode"] == "allowlist" and r.json["nic"] is True, r
    for bad in ({"mode": "everything"}, {"mode": "allowlist", "allow": ["a b"]},
                {"mode": "open", "allow": ["x.test"]}, {"mode": "allowlist", "extra": 1}):
        r = net_spaced.request("PUT", url, bad)
        assert r.status == 400, (bad, r)
    # Live change: the name that worked is refused at once, another becomes reachable.
    r = net_spaced.request("PUT", url, {"mode": "allowlist", "allow": ["api.test"]})
    assert r.status == 200 and r.json["allow"] == ["api.test"], r
    r = net_spaced.request("GET", "/v1/sandboxes/" + vm_sbx)
    assert r.status == 200 and r.json["sandbox"]["network"] == {"mode": "allowlist", "allow": ["api.test"]}, r
    code, out = sh_in(net_spaced, vm_sbx, "nslookup allowed.test")
    assert code != 0 and "203.0.113.10" not in out, out
    r = net_spaced.request("GET", url + "/log")
    assert r.status == 200
    assert any(e["kind"] == "dns" and e["name"] == "allowed.test" and not e["allowed"]
               for e in r.json["entries"]), r
    r = net_spaced.request("PUT", url, ALLOW)
    assert r.status == 200


def test_vm_credentials_never_come_back(net_spaced, vm_sbx):
    url = "/v1/sandboxes/%s/credentials" % vm_sbx
    secret = "Bearer " + netlab.TOKEN
    r = net_spaced.request("PUT", url, [{"host": "api.test", "header": "Authorization", "secret": secret}])
    assert r.status == 200, r
    assert netlab.TOKEN.encode() not in r.body
    r = net_spaced.request("GET", url)
    assert r.status == 200 and r.json["credentials"] == [{"host": "api.test", "header": "Authorization"}]
    assert netlab.TOKEN.encode() not in net_spaced.request("GET", "/v1/sandboxes/" + vm_sbx).body
    for bad in ([{"host": "api.test", "header": "X", "secret": "a\r\nb"}], {"host": "api.test"},
                [{"host": "*.test", "header": "X", "secret": "s"}]):
        r = net_spaced.request("PUT", url, bad)
        assert r.status == 400, (bad, r)


def test_vm_credential_injected_on_the_way_out(lab, net_spaced, vm_sbx):
    r = net_spaced.request("PUT", "/v1/sandboxes/%s/credentials" % vm_sbx,
                           [{"host": "api.test", "header": "Authorization", "secret": "Bearer " + netlab.TOKEN}])
    assert r.status == 200, r
    r = net_spaced.request("PUT", "/v1/sandboxes/%s/network" % vm_sbx,
                           {"mode": "allowlist", "allow": ALLOW["allow"] + ["api.test"]})
    assert r.status == 200, r
    mark = lab.mark()
    # busybox wget does not check certificates, so the gateway CA need not be installed.
    code, out = sh_in(net_spaced, vm_sbx, "wget -q -O - https://api.test/v1/thing")
    assert code == 0 and '"authorized": true' in out, out
    assert netlab.TOKEN not in out
    ev = [e for e in lab.since(mark) if e["kind"] == "api"]
    assert ev and ev[0]["authorized"], ev
    # Nowhere the guest can look: files, its environment, every process's environment
    # and command line. The command carries the token in two halves (its own command
    # line is under /proc too); the second run plants it to show the search finds it.
    half = len(netlab.TOKEN) // 2
    search = ("a='%s'; b='%s'; t=\"$a$b\"; grep -r -l -F \"$t\" /etc /root /tmp /run /var 2>/dev/null"
              " | sed 's/^/LEAK file /'; p=$(env; cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline"
              " 2>/dev/null | tr '\\0' '\\n'); case \"$p\" in *\"$t\"*) echo LEAK proc;; esac; echo searched"
              % (netlab.TOKEN[:half], netlab.TOKEN[half:]))
    code, out = sh_in(net_spaced, vm_sbx, search)
    assert code == 0 and "searched" in out and "LEAK" not in out, out
    code, out = sh_in(net_spaced, vm_sbx, search.replace("; grep", "; export PLANTED=\"$t\"; grep", 1))
    assert "LEAK proc" in out, out
    log = net_spaced.request("GET", "/v1/sandboxes/%s/network/log" % vm_sbx).json["entries"]
    assert any(e["kind"] == "mitm" and e["allowed"] and e["name"] == "api.test" for e in log), log


def test_vm_tenant_credential_applies_and_sandbox_rule_wins(lab, net_spaced, vm_sbx):
    """A tenant rule (PUT /v1/credentials) reaches every sandbox of the tenant; the
    sandbox's own rule for the same host wins; reads never show a secret."""
    base = "/v1/sandboxes/%s/credentials" % vm_sbx
    assert net_spaced.request("PUT", base, []).status == 200
    r = net_spaced.request("PUT", "/v1/sandboxes/%s/network" % vm_sbx,
                           {"mode": "allowlist", "allow": ALLOW["allow"] + ["api.test"]})
    assert r.status == 200, r
    try:
        r = net_spaced.request("PUT", "/v1/credentials",
                               [{"host": "api.test", "header": "Authorization", "secret": "Bearer " + netlab.TOKEN}])
        assert r.status == 200 and netlab.TOKEN.encode() not in r.body, r
        r = net_spaced.request("GET", "/v1/credentials")
        assert r.status == 200 and r.json == {"credentials": [{"host": "api.test", "header": "Authorization"}]}, r
        mark = lab.mark()
        code, out = sh_in(net_spaced, vm_sbx, "wget -q -O - https://api.test/v1/tenant")
        assert code == 0 and '"authorized": true' in out, out
        ev = [e for e in lab.since(mark) if e["kind"] == "api"]
        assert ev and ev[0]["authorized"] and ev[0]["n_auth"] == 1, ev
        # The sandbox's own (here wrong) value for the same host is the one sent.
        assert net_spaced.request("PUT", base, [{"host": "api.test", "header": "Authorization",
                                                 "secret": "Bearer not-the-token"}]).status == 200
        mark = lab.mark()
        code, out = sh_in(net_spaced, vm_sbx, "wget -q -O - https://api.test/v1/own; echo rc=$?")
        assert "rc=0" not in out, out
        ev = [e for e in lab.since(mark) if e["kind"] == "api"]
        assert ev and not ev[0]["authorized"], ev
        assert net_spaced.request("PUT", base, []).status == 200
    finally:
        r = net_spaced.request("DELETE", "/v1/credentials")
    assert r.status == 204, r
    assert net_spaced.request("GET", "/v1/credentials").json == {"credentials": []}
    mark = lab.mark()
    sh_in(net_spaced, vm_sbx, "wget -q -O - https://api.test/v1/none")
    ev = [e for e in lab.since(mark) if e["kind"] == "api"]
    assert not ev or not ev[0]["authorized"], ev


def test_vm_network_survives_a_gateway_crash(net_spaced, vm_sbx):
    """spaced restarts a dead gateway and attaches every sandbox again."""
    pidfile = os.path.join(net_spaced.data_dir, "gateway", "gateway.pid")
    old = open(pidfile).read().strip()
    os.kill(int(old), 9)
    r = net_spaced.request("PUT", "/v1/sandboxes/%s/network" % vm_sbx, ALLOW)
    assert r.status == 200, r
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        r = net_spaced.request("GET", "/v1/sandboxes/%s/network/log" % vm_sbx)
        if r.status == 200 and open(pidfile).read().strip() != old:
            break
        time.sleep(0.2)
    assert r.status == 200, r
    code, out = sh_in(net_spaced, vm_sbx, "nslookup allowed.test")
    assert code == 0 and "203.0.113.10" in out, out


def test_vm_tenant_credential_survives_a_gateway_crash(lab, net_spaced, vm_sbx):
    """The gateway keeps nothing across a restart: spaced sends the tenants' rules again
    (net_on_gateway_up) before the sandboxes, so a tenant credential still applies."""
    r = net_spaced.request("PUT", "/v1/sandboxes/%s/network" % vm_sbx,
                           {"mode": "allowlist", "allow": ALLOW["allow"] + ["api.test"]})
    assert r.status == 200, r
    pidfile = os.path.join(net_spaced.data_dir, "gateway", "gateway.pid")
    try:
        r = net_spaced.request("PUT", "/v1/credentials",
                               [{"host": "api.test", "header": "Authorization", "secret": "Bearer " + netlab.TOKEN}])
        assert r.status == 200, r
        old = open(pidfile).read().strip()
        os.kill(int(old), 9)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if open(pidfile).read().strip() != old:  # restarted; attached once DNS answers
                code, out = sh_in(net_spaced, vm_sbx, "nslookup allowed.test")
                if code == 0 and "203.0.113.10" in out:
                    break
            time.sleep(0.3)
        mark = lab.mark()
        code, out = sh_in(net_spaced, vm_sbx, "wget -q -O - https://api.test/v1/after-crash")
        assert code == 0 and '"authorized": true' in out, out
        ev = [e for e in lab.since(mark) if e["kind"] == "api"]
        assert ev and ev[0]["authorized"], ev
    finally:
        assert net_spaced.request("DELETE", "/v1/credentials").status == 204


def test_vm_policy_none_has_no_nic(net_spaced):
    sid = create(net_spaced, {"mode": "none"})
    try:
        code, out = sh_in(net_spaced, sid, "ls /sys/class/net")
        assert code == 0 and "eth0" not in out, out
        r = net_spaced.request("PUT", "/v1/sandboxes/%s/network" % sid, {"mode": "open"})
        assert r.status == 409, r
        r = net_spaced.request("GET", "/v1/sandboxes/" + sid)
        assert r.status == 200 and r.json["sandbox"]["network"] == {"mode": "none"}, r
    finally:
        delete(net_spaced, sid)


def test_vm_network_routes_need_a_key(net_spaced, vm_sbx):
    r = net_spaced.request("GET", "/v1/sandboxes/%s/network" % vm_sbx, key="sk_bogus")
    assert r.status == 401


# ---- E2B create options (network.allowOut/denyOut) through the real gateway ----------------

def e2b_create(sp, body):
    """POST /v2/sandboxes as the E2B SDK sends it (X-API-Key, E2B's body fields)."""
    return sp.request("POST", "/v2/sandboxes", dict({"templateID": "base", "timeout": 3600}, **body),
                      key=None, headers={"X-API-Key": sp.admin_key}, timeout=600)


def fetch(sp, sid, name):
    # `timeout`, not wget's -T: the guest's busybox wget dies of SIGSEGV with -T. The
    # token: api.test answers 401 without it.
    return sh_in(sp, sid, "timeout 10 wget -q --header 'Authorization: Bearer %s' -O - "
                 "http://%s/hello" % (netlab.TOKEN, name))


def test_e2b_deny_all_but_allow_out(net_spaced):
    """denyOut ["0.0.0.0/0"] + allowOut: the allowed name only."""
    r = e2b_create(net_spaced, {"network": {"denyOut": ["0.0.0.0/0"], "allowOut": ["allowed.test"]}})
    assert r.status == 201, r
    sid = r.json["sandboxID"]
    try:
        p = net_spaced.request("GET", "/v1/sandboxes/%s/network" % sid).json
        assert p["mode"] == "allowlist" and p["allow"] == ["allowed.test"], p
        code, out = fetch(net_spaced, sid, "allowed.test")
        assert code == 0 and '"host": "allowed.test"' in out, out
        for other in ("api.test", "evil.test"):
            code, out = sh_in(net_spaced, sid, "nslookup %s" % other)
            assert code != 0 and "203.0.113" not in out, out
            code, out = fetch(net_spaced, sid, other)
            assert code != 0 and '"host"' not in out, out
        # the SDK's updateNetwork replaces the policy live
        url = "/sandboxes/%s/network" % sid
        hdr = {"X-API-Key": net_spaced.admin_key}
        r = net_spaced.request("PUT", url, {"egressProxy": {"address": "p.test:1"}}, key=None, headers=hdr)
        assert r.status == 400 and r.json["code"] == 400 and "egressProxy" in r.json["message"], r
        r = net_spaced.request("PUT", url, {"denyOut": ["evil.test"]}, key=None, headers=hdr)
        assert r.status == 204, r
        code, out = fetch(net_spaced, sid, "api.test")
        assert code == 0 and '"authorized": true' in out, out
        code, out = fetch(net_spaced, sid, "evil.test")
        assert code != 0 and '"host"' not in out, out
        r = net_spaced.request("PUT", "/sandboxes/nosuchsandbox/network", {}, key=None, headers=hdr)
        assert r.status == 404 and r.json["code"] == 404, r
    finally:
        delete(net_spaced, sid)


def test_e2b_deny_out_names_and_addresses(net_spaced):
    """denyOut of names and a CIDR, the rest open: a denied name neither resolves nor is
    fetched; a CIDR deny also covers another name for that address (echo.allowed.test is
    evil.test's 203.0.113.20); a name deny covers that name only (blocked.test shares
    allowed.test's address)."""
    r = e2b_create(net_spaced, {"allow_internet_access": True, "network": {
        "denyOut": ["evil.test", "203.0.113.20/32", "blocked.test"]}})
    assert r.status == 201, r
    sid = r.json["sandboxID"]
    try:
        code, out = fetch(net_spaced, sid, "allowed.test")
        assert code == 0 and '"host": "allowed.test"' in out, out
        code, out = fetch(net_spaced, sid, "api.test")  # another address
        assert code == 0 and '"authorized": true' in out, out
        for denied in ("evil.test", "blocked.test"):
            code, out = sh_in(net_spaced, sid, "nslookup %s" % denied)
            assert code != 0 and "203.0.113" not in out, out
        for denied in ("evil.test", "echo.allowed.test", "blocked.test"):
            code, out = fetch(net_spaced, sid, denied)
            assert code != 0 and '"host"' not in out, (denied, out)
        # the gateway logged its refusals
        log = net_spaced.request("GET", "/v1/sandboxes/%s/network/log" % sid).json["entries"]
        assert any(e["name"] == "evil.test" and not e["allowed"] for e in log), log
    finally:
        delete(net_spaced, sid)


def test_e2b_network_options_refused(net_spaced):
    """Bad entries and options spaced cannot honour: 400 in E2B's shape, nothing created."""
    for body, needle in (
            ({"network": {"denyOut": ["evil.test", "bad name"]}}, "network.denyOut[1]"),
            ({"network": {"allowOut": ["10.0.0.1:80"]}}, "network.allowOut[0]"),
            ({"network": {"egressProxy": {"address": "proxy.test:1080"}}}, "network.egressProxy"),
            ({"mcp": {"x": {}}}, "mcp")):
        r = e2b_create(net_spaced, body)
        assert r.status == 400 and r.json["code"] == 400 and needle in r.json["message"], (body, r)
