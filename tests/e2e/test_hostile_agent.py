"""A hostile guest agent cannot make spaced hold unbounded memory, and is cut off.

A real spaced runs real `base` VMs whose QEMU is tests/e2e/hostile_qemu.py: it relays
each VM's agent socket to the real guest agent until the test writes a trigger file,
then speaks the agent protocol to spaced on that same socket as a hostile guest would
(root in a VM can do anything the agent can). Two attacks, each on its own sandbox,
while another sandbox must keep serving commands:

  ping    PINGs as fast as the socket takes them, never reading the PONGs: before the
          bound (agentc.h AGENTC_PING_RATE) spaced queued a PONG for each and grew by
          tens of MB a second; now the sandbox fails with `agent_flood`
  stall   grants a file upload the largest input window (64 MiB), then never reads:
          before (AGENTC_OUTQ_SOFT) spaced pulled the client's body onto the agent's
          socket queue up to the window; now it stops reading the client

In both, spaced's resident memory grows by less than a fixed bound and the other
sandbox serves a command meanwhile.

spaced runs with --no-jail here (logged as a development flag): the stand-in is a
Python script, which the VM jail would not let run; the jail is not what this tests
(tests/e2e/test_jail.py is)."""
import http.client
import os
import stat
import sys
import threading
import time

import pytest

from spacedlib import GUEST, Spaced, poll, session_output, vm_missing

HERE = os.path.dirname(os.path.abspath(__file__))
RSS_GROWTH_MAX = 48 << 20  # ASan build; an unbounded queue passes this within a second
UPLOAD_MIB = 160           # offered to a stalled agent: far more than the bound
STALL_S = 20


def rss(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS for %d" % pid)


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    why = vm_missing()
    if why:
        pytest.skip(why)
    d = tmp_path_factory.mktemp("hostile")
    triggers = d / "triggers"
    triggers.mkdir()
    launcher = d / "qemu"
    real = "/usr/bin/qemu-system-x86_64"
    launcher.write_text("#!/bin/sh\nexec %s %s %s %s -- \"$@\"\n"
                        % (sys.executable, os.path.join(HERE, "hostile_qemu.py"), triggers, real))
    launcher.chmod(launcher.stat().st_mode | stat.S_IXUSR)
    sp = Spaced(GUEST)
    sp.start(extra=["--no-jail", "--qemu", str(launcher)])
    try:
        yield sp, triggers
    finally:
        sp.stop()


def make(sp):
    r = sp.create({"template": "base", "timeout": 0, "network": {"mode": "none"}})
    sid = r["sandbox"]["id"]
    op = sp.wait_op(r["operation"]["id"])
    assert op["state"] == "succeeded", (op, sp.log())
    return sid


def attack(sp, triggers, victim, bystander, mode, code):
    """Turns victim's agent hostile (mode); returns (peak RSS growth, victim's failure)
    after checking the bystander served a command during the attack."""
    pid = sp.proc.pid
    out, rc = session_output(sp, bystander, "echo before")
    assert (out, rc) == (b"before\n", 0)
    base = rss(pid)
    peak = [base]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], rss(pid))
            time.sleep(0.05)

    t = threading.Thread(target=sample)
    t.start()
    try:
        (triggers / victim).write_text(mode)

        def failed():
            sb = sp.request("GET", "/v1/sandboxes/" + victim).json["sandbox"]
            return sb if sb["state"] == "failed" else None

        sb = poll(failed, timeout=60, every=0.2)
        out, rc = session_output(sp, bystander, "echo during")
        assert (out, rc) == (b"during\n", 0)
    finally:
        done.set()
        t.join()
    if code not in sb["failure"]:
        print("\n".join(l for l in sp.log().splitlines() if "agent" in l), file=sys.stderr)
    assert code in sb["failure"], sb["failure"]
    return peak[0] - base, sb["failure"]


def test_ping_flood_is_cut_off(lab):
    sp, triggers = lab
    victim, bystander = make(sp), make(sp)
    growth, why = attack(sp, triggers, victim, bystander, "ping", "agent_flood")
    assert growth < RSS_GROWTH_MAX, (growth, why)


def test_agent_that_stops_reading_holds_no_upload(lab):
    """The guest grants an upload the protocol's largest window (64 MiB), then stops
    reading: spaced must not pull the client's body into memory for it."""
    sp, triggers = lab
    victim, bystander = make(sp), make(sp)
    pid = sp.proc.pid
    (triggers / victim).write_text("stall")
    base = rss(pid)
    body = b"\0" * (UPLOAD_MIB << 20)
    sent = []

    def upload():
        conn = http.client.HTTPConnection("127.0.0.1", sp.port, timeout=STALL_S)
        try:
            conn.putrequest("PUT", "/v1/sandboxes/%s/files?path=/tmp/big" % victim)
            conn.putheader("Authorization", "Bearer " + sp.admin_key)
            conn.putheader("Content-Length", str(len(body)))
            conn.endheaders()
            for i in range(0, len(body), 1 << 20):
                conn.send(body[i:i + (1 << 20)])
                sent.append(1)
        except OSError:
            pass  # the socket timed out: spaced stopped reading, as it should
        finally:
            conn.close()

    t = threading.Thread(target=upload, daemon=True)
    t.start()
    peak = base
    deadline = time.monotonic() + STALL_S
    while time.monotonic() < deadline:
        peak = max(peak, rss(pid))
        time.sleep(0.05)
    out, rc = session_output(sp, bystander, "echo during")
    assert (out, rc) == (b"during\n", 0)
    t.join(STALL_S)
    if peak - base >= RSS_GROWTH_MAX:
        print("\n".join(l for l in sp.log().splitlines() if "agent" in l or "files" in l or "PUT" in l)[-3000:], file=sys.stderr)
    assert peak - base < RSS_GROWTH_MAX, (peak - base, len(sent))
    assert len(sent) < UPLOAD_MIB, "spaced took the whole upload for an agent that reads nothing"
