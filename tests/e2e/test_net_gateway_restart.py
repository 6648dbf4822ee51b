"""A VM start that needs the egress gateway waits while spaced restarts it.

spaced supervises space-gateway (pidfd) and restarts it when it dies; the new gateway
gets every sandbox's attach again. Before: while the gateway was down or restarting, a
create (start, restore...) did not wait for it: it succeeded with the sandbox attached
to nothing, and a command run right after the create found DNS refused until the resync.

Here the gateway is killed (SIGKILL) and its restart held: spaced starts it through this
test's wrapper, which waits while a hold file exists (a slow start, made deterministic;
the hold is given up after 60 s so nothing hangs). Then:
  - a create made meanwhile does not succeed while the gateway cannot answer; once the
    hold is released it succeeds, and its first DNS query is answered;
  - held past spaced's bound (10 s), the create fails with gateway_unavailable and
    leaves no namespace, no network record and no VM; the next create works;
  - a start of a stopped sandbox and a restore of a suspended one wait the same way; a
    restore held past the bound fails and leaves the sandbox suspended, restorable;
  - measured (printed, not asserted): from the SIGKILL until the gateway's DNS socket is
    back in a running sandbox's namespace and the guest resolves again.
Runs in the network lab (tests/netsec's fake internet, as test_network.py); skips, saying
why, without it."""
import contextlib
import os
import re
import signal
import subprocess
import sys
import time

import pytest

import spacedlib
from test_network import ALLOW, create, delete, guest_has_net_code, lab, sh_in  # noqa: F401 (fixtures)

BODY = {"template": "base", "timeout": 0, "network": ALLOW}


@pytest.fixture(scope="module")
def held(lab):
    """(spaced, hold file): spaced whose gateway runs in the lab's gateway namespace
    through a wrapper that holds each start while the hold file exists."""
    why = spacedlib.vm_missing()
    if why:
        pytest.skip(why)
    if not guest_has_net_code():
        pytest.skip("the guest initramfs predates agent_net_up: rebuild it with `make guest`")
    hold = os.path.join(lab.dir, "hold-gateway")
    wrapper = os.path.join(lab.dir, "gateway-held")
    with open(wrapper, "w") as f:
        f.write("#!/bin/sh\ni=0\nwhile [ -e %s ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done\n"
                "exec ip netns exec %s %s \"$@\"\n" % (hold, lab.gwns, lab.gateway_bin))
    os.chmod(wrapper, 0o755)
    sp = spacedlib.Spaced(spacedlib.GUEST)
    try:
        sp.start(env={"SPACE_GATEWAY": wrapper,
                      "SPACE_GATEWAY_ARGS": "--upstream-dns 192.0.2.53 --trust %s/trust.pem" % lab.dir})
        # The gateway up and the template's snapshot made before any case kills it.
        created_and_answering(sp)
        yield sp, hold
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(hold)
        sp.stop()  # also ends the gateway spaced leaves running for a successor


@contextlib.contextmanager
def gateway_held(hold):
    open(hold, "w").close()
    try:
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(hold)


def gateway_pid(sp):
    with open(os.path.join(sp.data_dir, "gateway", "gateway.pid")) as f:
        return int(f.read().strip())


def kill_gateway(sp):
    os.kill(gateway_pid(sp), signal.SIGKILL)


def resolves(sp, sid):
    code, out = sh_in(sp, sid, "nslookup allowed.test")
    return code == 0 and "203.0.113.10" in out, out


def created_and_answering(sp):
    """A create whose first DNS query, right after it reports success, is answered."""
    sid = create(sp, ALLOW)
    ok, out = resolves(sp, sid)
    assert ok, out
    delete(sp, sid)


def op_if_done(sp, op_id):
    r = sp.request("GET", "/v1/operations/%s" % op_id)
    assert r.status == 200, r
    op = r.json["operation"]
    return op if op["state"] in ("succeeded", "failed", "canceled") else None


def full_log(sp):
    with open(sp.log_path, errors="replace") as f:  # sp.log() is only the tail
        return f.read()


def waits_logged(sp, sid):
    return re.search(r"sandbox\.gateway_wait.*sandbox=%s.*result=waiting" % sid, full_log(sp)) is not None


def wait_while_held(sp, sid, op_id, hold):
    """With the gateway held: polls until the operation ends or spaced logs that it
    waits for the gateway. An operation that succeeded while the gateway could not run
    must have a sandbox that resolves (before: it did not); returns whether it waits."""
    state = spacedlib.poll(lambda: op_if_done(sp, op_id) or (waits_logged(sp, sid) and "waiting"),
                           timeout=300, every=0.1)
    if state == "waiting":
        return True
    assert os.path.exists(hold), "the hold ended early"
    assert state["state"] == "succeeded", state
    ok, out = resolves(sp, sid)  # the gateway is still held: nothing can answer
    assert ok, "%s succeeded while the gateway was down; DNS right after: %s" % (state["kind"], out)
    return False


def test_create_while_the_gateway_restarts_waits_then_resolves(held):
    sp, hold = held
    with gateway_held(hold):
        kill_gateway(sp)
        r = sp.create(BODY)  # at once: spaced may not even have seen the exit yet
        sid, op_id = r["sandbox"]["id"], r["operation"]["id"]
        wait_while_held(sp, sid, op_id, hold)
    op = sp.wait_op(op_id)
    assert op["state"] == "succeeded", (op, sp.log())
    ok, out = resolves(sp, sid)
    assert ok, out
    delete(sp, sid)


def test_create_fails_cleanly_when_the_gateway_stays_down(held):
    sp, hold = held
    with gateway_held(hold):
        kill_gateway(sp)
        r = sp.create(BODY)
        sid, op_id = r["sandbox"]["id"], r["operation"]["id"]
        op = sp.wait_op(op_id)  # spaced's bound (10 s) ends it, the hold lasts 60 s
        assert op["state"] == "failed", (op, sp.log())
        assert op["error"]["code"] == "gateway_unavailable", op
        assert "gateway" in op["error"]["message"] and "try again" in op["error"]["message"], op
        # Nothing behind: no namespace, no network record, no VM.
        assert not os.path.exists("/run/netns/space-" + sid)
        assert not os.path.exists(os.path.join(sp.data_dir, "net", sid + ".json"))
        assert not [p for p, argv in spacedlib.procs_naming(sp.data_dir) if any(sid in a for a in argv)]
        r = sp.request("GET", "/v1/sandboxes/" + sid)
        assert r.status == 200 and r.json["sandbox"]["state"] == "failed", r
    created_and_answering(sp)  # the gateway is back: creates work again
    delete(sp, sid)


@pytest.mark.parametrize("down,up", [("stop", "start"), ("suspend", "restore")])
def test_start_and_restore_wait_for_the_gateway(held, down, up):
    sp, hold = held
    sid = create(sp, ALLOW)
    r = sp.request("POST", "/v1/sandboxes/%s/%s" % (sid, down))
    assert r.status == 202, r
    assert sp.wait_op(r.json["operation"]["id"])["state"] == "succeeded"
    with gateway_held(hold):
        kill_gateway(sp)
        r = sp.request("POST", "/v1/sandboxes/%s/%s" % (sid, up))
        assert r.status == 202, r
        op_id = r.json["operation"]["id"]
        wait_while_held(sp, sid, op_id, hold)
    op = sp.wait_op(op_id)
    assert op["state"] == "succeeded", (op, sp.log())
    ok, out = resolves(sp, sid)
    assert ok, out
    delete(sp, sid)


def test_restore_stays_suspended_when_the_gateway_stays_down(held):
    """Past the bound a restore fails with gateway_unavailable and starts no VM; the
    sandbox is still suspended (its image kept: a failed sandbox could not be restored)
    and restores once the gateway is back."""
    sp, hold = held
    sid = create(sp, ALLOW)
    r = sp.request("POST", "/v1/sandboxes/%s/suspend" % sid)
    assert sp.wait_op(r.json["operation"]["id"])["state"] == "succeeded"
    with gateway_held(hold):
        kill_gateway(sp)
        r = sp.request("POST", "/v1/sandboxes/%s/restore" % sid)
        op = sp.wait_op(r.json["operation"]["id"])
        assert op["state"] == "failed" and op["error"]["code"] == "gateway_unavailable", (op, sp.log())
        assert not [p for p, argv in spacedlib.procs_naming(sp.data_dir) if any(sid in a for a in argv)]
        assert sp.request("GET", "/v1/sandboxes/" + sid).json["sandbox"]["state"] == "suspended"
    r = sp.request("POST", "/v1/sandboxes/%s/restore" % sid)
    assert sp.wait_op(r.json["operation"]["id"])["state"] == "succeeded", sp.log()
    ok, out = resolves(sp, sid)
    assert ok, out
    delete(sp, sid)


PROBE = r"""
import sys, time
def present():  # the gateway's DNS socket, 10.0.2.2:53, in this namespace
    with open("/proc/net/udp") as f:
        return any(l.split()[1] == "0202000A:0035" for l in f.readlines()[1:])
assert present()
print("ready", flush=True)
end = time.monotonic() + 60
while present() and time.monotonic() < end:
    time.sleep(0.002)
gone = time.monotonic()
while not present() and time.monotonic() < end:
    time.sleep(0.002)
print(gone, time.monotonic(), flush=True)
"""


def test_restart_time_until_dns_answers(held):
    """Measured, not asserted: SIGKILL of the gateway until its DNS socket is back in a
    running sandbox's namespace (the gateway restarted, answered, resynced)."""
    sp, _ = held
    sid = create(sp, ALLOW)
    times = []
    for _ in range(5):
        probe = subprocess.Popen(["ip", "netns", "exec", "space-" + sid, sys.executable, "-c", PROBE],
                                 stdout=subprocess.PIPE, text=True)
        try:
            assert probe.stdout.readline().strip() == "ready"
            t_kill = time.monotonic()
            kill_gateway(sp)
            gone, back = map(float, probe.stdout.readline().split())
        finally:
            probe.kill()
            probe.wait()
        times.append((back - t_kill) * 1000)
        ok, out = resolves(sp, sid)
        assert ok, out
        time.sleep(3)  # served for a while: the next death is a crash, not a failed start
    up = re.findall(r"gateway\.up.*start_ms=(\d+)", full_log(sp))
    resync = re.findall(r"net\.resync.*ms=(\d+)", full_log(sp))
    print("\ngateway SIGKILL -> DNS socket back in the sandbox: %s ms; gateway start %s ms, "
          "resync %s ms (spaced's log)" % (", ".join("%.0f" % t for t in times), up[-5:], resync[-5:]))
    delete(sp, sid)


def test_pool_claim_while_the_gateway_restarts(held):
    """A warm-pool claim would answer at once: with the gateway down the create does not
    take a pooled VM (nothing would attach it), it restores and waits like the others.
    Last: spaced runs with a pool from here on."""
    from test_pool import start_pool, wait_pool
    sp, hold = held
    sp.stop(cleanup=False)
    sp.start(extra=("--pool", "1"))  # the wrapper environment is kept
    made, _ = start_pool(sp, 1, BODY)
    wait_pool(sp, 1)
    with gateway_held(hold):
        kill_gateway(sp)
        r = sp.create(BODY)
        sid, op_id = r["sandbox"]["id"], r["operation"]["id"]
        wait_while_held(sp, sid, op_id, hold)
    op = sp.wait_op(op_id)
    assert op["state"] == "succeeded", (op, sp.log())
    ok, out = resolves(sp, sid)
    assert ok, out
    # With the gateway back, a create is claimed from the pool again and resolves at once.
    wait_pool(sp, 1)
    created_and_answering(sp)
    for s in made + [sid]:
        delete(sp, s)
