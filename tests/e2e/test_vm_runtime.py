"""Saved VM states and the VM runtime that can load them (src/daemon/vm/vm_sig.h): a QEMU
migration stream loads only into the same QEMU release, accelerator and (KVM) CPU. Each
save records spaced's runtime signature in snapshot.json ("runtime"); a state of another
runtime is refused before any QEMU starts.

Two QEMU releases cannot be installed side by side on the test machine: spaced started
with SPACE_TEST_VM_SIG (a test double, main.c) takes that string as its runtime, as a
node whose QEMU was upgraded would compute another one.

- A suspended sandbox whose snapshot.json names another runtime (edited, then spaced
  restarted under another runtime): its restore is refused at once with 409
  snapshot_incompatible naming both runtimes, so is a create from its snapshot, and it
  stays suspended; spaced back under the right runtime restores it with its memory.
- A template memory snapshot made under another runtime: creates still work, cold booting
  while a snapshot version of this runtime is built beside the old one.
One sandbox VM per test (TCG)."""
import json
import os

import pytest

from spacedlib import poll, session_output, vm_missing

BODY = {"template": "base", "timeout": 0, "network": {"mode": "none"}}
OTHER = "QEMU 0.1/tcg/max"  # what an upgraded node could compute: another release series


@pytest.fixture(autouse=True)
def _need_vm():
    why = vm_missing()
    if why:
        pytest.skip(why)


def runtime_of(sp):
    r = sp.request("GET", "/healthz", key=None)
    assert r.status == 200, r
    return r.json["runtime"]


def create(sp, body=BODY):
    r = sp.request("POST", "/v1/sandboxes", body)
    assert r.status == 202, r
    op = sp.wait_op(r.json["operation"]["id"], timeout=600)
    assert op["state"] == "succeeded", (op, sp.log())
    return r.json["sandbox"]["id"]


def verb(sp, sid, name):
    r = sp.request("POST", "/v1/sandboxes/%s/%s" % (sid, name))
    assert r.status == 202, r
    op = sp.wait_op(r.json["operation"]["id"], timeout=600)
    assert op["state"] == "succeeded", (op, sp.log())


def state(sp, sid):
    return sp.request("GET", "/v1/sandboxes/" + sid).json["sandbox"]["state"]


def refused(r, saved, ours):
    assert r.status == 409 and r.error_code() == "snapshot_incompatible", r
    msg = r.json["error"]["message"]
    assert "was saved by %s; this node runs %s" % (saved, ours) in msg, msg


def test_suspended_sandbox_of_another_runtime_stays_suspended(fresh_spaced):
    sp = fresh_spaced()
    ours = runtime_of(sp)
    assert ours and ours.startswith("QEMU ") and ours != OTHER, ours
    sid = create(sp)
    out, code = session_output(sp, sid, "echo mem-$((6*7)) > /dev/shm/val && cat /dev/shm/val")
    assert (out, code) == (b"mem-42\n", 0), (out, code)
    r = sp.request("POST", "/v1/sandboxes/%s/snapshots" % sid, {"name": "rt"})
    assert r.status == 202, r
    snap = r.json["snapshot"]["id"]
    assert sp.wait_op(r.json["operation"]["id"], timeout=600)["state"] == "succeeded", sp.log()
    verb(sp, sid, "suspend")
    # Both saves record the runtime that wrote them.
    meta = os.path.join(sp.data_dir, "sandboxes", sid, "suspend", "snapshot.json")
    with open(meta) as f:
        original = f.read()
    assert json.loads(original)["runtime"] == ours, original
    with open(os.path.join(sp.data_dir, "captures", snap, "snapshot.json")) as f:
        assert json.load(f)["runtime"] == ours

    # 1. snapshot.json names another runtime: refused before any QEMU starts, and the
    # sandbox stays suspended with its image.
    with open(meta, "w") as f:
        json.dump(dict(json.loads(original), runtime=OTHER), f)
    refused(sp.request("POST", "/v1/sandboxes/%s/restore" % sid), OTHER, ours)
    assert state(sp, sid) == "suspended"
    with open(meta, "w") as f:
        f.write(original)

    # 2. spaced restarted under another runtime (its QEMU "upgraded"): the restore and a
    # create from the snapshot are refused, naming the runtime each needs.
    sp.stop(cleanup=False)
    sp.start(env={"SPACE_TEST_VM_SIG": OTHER})
    assert runtime_of(sp) == OTHER
    refused(sp.request("POST", "/v1/sandboxes/%s/restore" % sid), ours, OTHER)
    refused(sp.request("POST", "/v1/sandboxes", dict(BODY, template="rt")), ours, OTHER)
    assert state(sp, sid) == "suspended"
    assert os.path.exists(meta)

    # 3. Back under the runtime that saved it: restored, memory intact.
    sp.stop(cleanup=False)
    sp.start(env={})
    assert runtime_of(sp) == ours
    verb(sp, sid, "restore")
    out, code = session_output(sp, sid, "cat /dev/shm/val")
    assert (out, code) == (b"mem-42\n", 0), (out, code, sp.log())
    d = sp.request("DELETE", "/v1/sandboxes/" + sid)
    assert d.status == 202 and sp.wait_op(d.json["operation"]["id"])["state"] == "succeeded"


def versions(sp):
    r = sp.request("GET", "/v1/templates/base")
    assert r.status == 200, r
    return r.json["template"]["versions"]


def test_template_snapshot_of_another_runtime_cold_boots(fresh_spaced):
    sp = fresh_spaced()
    ours = runtime_of(sp)
    sid = create(sp)  # cold boot; the snapshot of this shape is built meanwhile
    poll(lambda: [v for v in versions(sp) if v["state"] == "ready" and v["current"]], timeout=600)
    old = next(v for v in versions(sp) if v["state"] == "ready")
    snapdir = os.path.join(sp.data_dir, "templates", "base", "snapshots", old["dir"], "snap")
    with open(os.path.join(snapdir, "snapshot.json")) as f:
        assert json.load(f)["runtime"] == ours
    d = sp.request("DELETE", "/v1/sandboxes/" + sid)
    assert d.status == 202 and sp.wait_op(d.json["operation"]["id"])["state"] == "succeeded"

    # Under another runtime the old version is not current: the create boots cold and a
    # version for this runtime is made beside it.
    sp.stop(cleanup=False)
    sp.start(env={"SPACE_TEST_VM_SIG": OTHER})
    sid = create(sp)
    with open(sp.log_path, errors="replace") as f:
        log = f.read()
    line = next(x for x in log.splitlines() if "sandbox.create.stages sandbox=%s " % sid in x)
    assert "result=ok how=boot" in line, line
    assert "sandbox=%s event=restore_failed" % sid not in log  # not tried, then fallen back
    out, code = session_output(sp, sid, "echo ok")
    assert (out, code) == (b"ok\n", 0)
    now = {v["dir"]: v for v in versions(sp)}
    assert old["dir"] not in now or not now[old["dir"]]["current"], now  # (or swept already)
    assert [v for d_, v in now.items() if d_ != old["dir"] and v["current"]], now
    d = sp.request("DELETE", "/v1/sandboxes/" + sid)
    assert d.status == 202 and sp.wait_op(d.json["operation"]["id"])["state"] == "succeeded"
