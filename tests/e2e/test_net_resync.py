"""spaced keeps serving while it re-attaches its sandboxes to a restarted gateway.

When space-gateway (re)starts, spaced sends it every sandbox's attach, policy and
credentials again (net_gateway_resync). Before: one event-loop callback sent them all
with synchronous control-socket calls, each making the gateway run `nft` (40-200 ms), so
with N sandboxes spaced's loop stood still for N times that and every API call, health
probe included, waited for the whole resync. Now the resync runs on the loop, one request
in flight at a time (src/daemon/net/net_resync.c).

N sandboxes hold a NIC: three of them run, the others are stopped (a stopped sandbox
keeps its namespace and is re-attached like a running one, and costs no CPU here).
  - The gateway is killed (SIGKILL); from just before the kill until spaced logs the end
    of the resync, /healthz is polled on one keep-alive connection every few ms: no
    request may take longer than MAX_STALL_MS (figures printed). Afterwards every
    sandbox is attached again: the running ones resolve, the stopped ones are in the
    gateway's table with their policy.
  - Killed again, and while the resync runs: a running sandbox's policy is changed, a
    stopped one is deleted, another stopped one is started. The policy change must land
    before the resync ends (the loop serves meanwhile). After the resync: the deleted
    sandbox is not attached and its namespace is gone, the changed one has the new
    policy in the gateway and its guest is refused the name it had, the started one
    resolves, the others are as above.
Runs in the network lab (tests/netsec's fake internet, as test_network.py); skips, saying
why, without it."""
import http.client
import os
import re
import signal
import sys
import time

import pytest

import spacedlib
from test_network import ALLOW, lab, sh_in, start_net_spaced  # noqa: F401 (fixtures)

sys.path.insert(0, os.path.join(spacedlib.ROOT, "tests", "netsec"))
import netlab  # noqa: E402

N = 16          # sandboxes with a NIC
RUNNING_AT = (0, 2, 3)  # which of them (creation order) run a VM; the rest are stopped
MAX_STALL_MS = 150
POLL_EVERY_S = 0.004
NEW_POLICY = {"mode": "allowlist", "allow": ["api.test"]}


class Fleet:
    def __init__(self, sp):
        self.sp = sp
        self.ids = []       # in creation order: the resync walks the newest first
        self.running = set()

    @property
    def stopped(self):
        return [s for s in self.ids if s not in self.running]


def wait_ops(sp, op_ids):
    for op_id in op_ids:
        op = sp.wait_op(op_id)
        assert op["state"] == "succeeded", (op, sp.log())


@pytest.fixture(scope="module")
def fleet(lab):
    sp = start_net_spaced(lab)
    try:
        f = Fleet(sp)
        # One at a time first (the template's snapshot), then in small batches.
        while len(f.ids) < N:
            batch = [sp.create({"template": "base", "timeout": 0, "network": ALLOW})
                     for _ in range(1 if not f.ids else min(4, N - len(f.ids)))]
            wait_ops(sp, [r["operation"]["id"] for r in batch])
            f.ids += [r["sandbox"]["id"] for r in batch]
        # The oldest runs: the resync reaches it last, the policy change's target.
        f.running = {f.ids[i] for i in RUNNING_AT}
        stops = []
        for sid in f.stopped:
            r = sp.request("POST", "/v1/sandboxes/%s/stop" % sid)
            assert r.status == 202, r
            stops.append(r.json["operation"]["id"])
        wait_ops(sp, stops)
        yield f
    finally:
        sp.stop()  # also ends the gateway and unmounts the namespaces


def gw_ctl(sp, req):
    """One request on spaced's gateway's control socket."""
    return netlab.gateway_call(os.path.join(sp.data_dir, "gateway", "gateway.sock"), req)


def kill_gateway(sp):
    with open(os.path.join(sp.data_dir, "gateway", "gateway.pid")) as f:
        os.kill(int(f.read().strip()), signal.SIGKILL)


class LogTail:
    """spaced's log from the current end on: lines matching a pattern, read as they come."""

    def __init__(self, sp):
        self.path = sp.log_path
        self.pos = os.path.getsize(self.path)
        self.text = ""

    def find(self, pattern):
        with open(self.path, errors="replace") as f:
            f.seek(self.pos)
            more = f.read()
        # Only whole lines count; a partial last line is read again next time.
        cut = more.rfind("\n") + 1
        self.text += more[:cut]
        self.pos += len(more[:cut].encode(errors="replace"))
        return re.search(pattern, self.text, re.M)


RESYNC_DONE = r"event=net\.resync\b.*attached=(\d+).*"


def resolves(sp, sid, name="allowed.test"):
    code, out = sh_in(sp, sid, "nslookup %s" % name)
    return code == 0 and "203.0.113.10" in out, out


def wait_settled(sp):
    """The gateway up and served long enough that its next death is a crash (restarted
    at once, net_gw.c STABLE_MS), and no resync running."""
    spacedlib.poll(lambda: sp.request("GET", "/healthz", key=None).status == 200, timeout=60, every=0.1)
    time.sleep(3)


def check_attached(f, skip=()):
    for sid in f.ids:
        if sid in skip:
            continue
        rep = gw_ctl(f.sp, {"op": "log", "sandbox": sid})
        assert rep.get("ok") and rep["policy"]["mode"] == "allowlist", (sid, rep)
        assert sorted(rep["policy"]["allow"]) == sorted(ALLOW["allow"]), (sid, rep)
    for sid in sorted(f.running - set(skip)):
        ok, out = resolves(f.sp, sid)
        assert ok, (sid, out)


def test_loop_serves_during_the_resync(fleet):
    sp = fleet.sp
    wait_settled(sp)
    tail = LogTail(sp)
    conn = http.client.HTTPConnection("127.0.0.1", sp.port, timeout=60)
    samples = []  # (ms since the kill, latency ms)
    t_kill = time.monotonic()
    kill_gateway(sp)
    done, t_done = None, None
    deadline = t_kill + 120
    while time.monotonic() < deadline:
        t0 = time.monotonic()
        conn.request("GET", "/healthz")
        r = conn.getresponse()
        r.read()
        t1 = time.monotonic()
        assert r.status == 200, r.status
        samples.append(((t0 - t_kill) * 1000, (t1 - t0) * 1000))
        if done is None:
            done = tail.find(RESYNC_DONE)
            t_done = t1 if done else None
        elif t1 - t_done > 0.3:  # a little past the end, for the callback that logged it
            break
        time.sleep(POLL_EVERY_S)
    conn.close()
    assert done, "no net.resync line within 120 s of the kill:\n" + sp.log()
    lat = sorted(x for _, x in samples)
    worst = max(samples, key=lambda s: s[1])
    resync_ms = re.search(r"ms=(\d+)", done.group(0)).group(1)
    print("\nresync of %s sandboxes (%s ms in spaced's log): %d /healthz requests, latency max "
          "%.0f ms (sent %.0f ms after the kill), p99 %.0f, p50 %.1f ms; bound %d ms"
          % (done.group(1), resync_ms, len(lat), worst[1], worst[0], lat[int(len(lat) * 0.99)],
             lat[len(lat) // 2], MAX_STALL_MS))
    assert int(done.group(1)) == N, done.group(0)
    assert worst[1] < MAX_STALL_MS, "spaced's loop stood still %.0f ms during the resync" % worst[1]
    check_attached(fleet)


def test_changes_during_the_resync_win(fleet):
    sp = fleet.sp
    target = fleet.ids[0]          # running, reached last by the resync
    gone = fleet.stopped[0]        # stopped, deleted
    started = fleet.stopped[1]     # stopped, started (its claim attaches it itself)
    wait_settled(sp)
    tail = LogTail(sp)
    kill_gateway(sp)
    spacedlib.poll(lambda: tail.find(r"event=gateway\.up\b"), timeout=60, every=0.005)
    t_up = time.monotonic()
    r = sp.request("PUT", "/v1/sandboxes/%s/network" % target, NEW_POLICY)
    assert r.status == 200, r
    put_ms = (time.monotonic() - t_up) * 1000
    during = not tail.find(RESYNC_DONE)
    r = sp.request("DELETE", "/v1/sandboxes/" + gone)
    assert r.status == 202, r
    ops = [r.json["operation"]["id"]]
    r = sp.request("POST", "/v1/sandboxes/%s/start" % started)
    assert r.status == 202, r
    ops.append(r.json["operation"]["id"])
    done = spacedlib.poll(lambda: tail.find(RESYNC_DONE), timeout=120, every=0.02)
    print("\npolicy change answered %.0f ms after gateway.up, %s the resync's end (%s)"
          % (put_ms, "before" if during else "after", done.group(0).split("event=")[1]))
    assert during, "the policy change was served only after the resync: the loop was blocked"
    wait_ops(sp, ops)
    fleet.ids.remove(gone)
    fleet.running.add(started)
    # The deleted sandbox: not attached, no namespace, no record.
    rep = gw_ctl(sp, {"op": "log", "sandbox": gone})
    assert not rep.get("ok") and rep["error"]["code"] == "not_found", rep
    assert not os.path.exists("/run/netns/space-" + gone)
    assert not os.path.exists(os.path.join(sp.data_dir, "net", gone + ".json"))
    # The changed one: the new policy in the gateway, enforced.
    rep = gw_ctl(sp, {"op": "log", "sandbox": target})
    assert rep.get("ok") and rep["policy"]["allow"] == NEW_POLICY["allow"], rep
    ok, out = resolves(sp, target)
    assert not ok, "the old policy came back after the resync: %s" % out
    # The others, the started one included.
    check_attached(fleet, skip=(target,))
    r = sp.request("PUT", "/v1/sandboxes/%s/network" % target, ALLOW)
    assert r.status == 200, r
