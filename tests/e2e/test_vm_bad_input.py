"""Bad input to the VM runtime, end to end (issue 3, "Bad input"): a missing kernel or
template image, QEMU failing to start, a corrupt suspend snapshot, a full disk (while
suspending, under the store, under a writing guest), and a template whose guest never
becomes ready. Each must end in a failed
operation with a clear error, and nothing of the sandbox (QEMU process, files, network
namespace) may be left once it is deleted.

Builds its own guest directories next to the real one (symlinks plus what the case
breaks). Skips, saying why, without the guest artifacts, QEMU, root or busybox."""
import json
import os
import shutil
import stat
import subprocess
import tempfile
import threading
import time
import urllib.request

import pytest

from spacedlib import GUEST, RUN_DIR, procs_naming, session_output, vm_missing

BASE = {"template": "base", "timeout": 0, "network": {"mode": "none"}}


@pytest.fixture(autouse=True)
def _need_vm():
    why = vm_missing()
    if why:
        pytest.skip(why)


def guest_copy(skip=(), initramfs=None):
    """A guest dir whose entries link to the real one, without the names in skip;
    initramfs: a path used as initramfs.cpio instead."""
    d = tempfile.mkdtemp(prefix="gst", dir=RUN_DIR)
    for name in os.listdir(GUEST):
        if name not in skip and not (initramfs and name == "initramfs.cpio"):
            os.symlink(os.path.join(GUEST, name), os.path.join(d, name))
    if initramfs:
        shutil.copy(initramfs, os.path.join(d, "initramfs.cpio"))
    return d


def qemu_of(sp, sid):
    return [p for p in procs_naming(sp.data_dir) if any(sid in a for a in p[1])]


def create_op(sp, body=BASE):
    r = sp.create(body)
    return r["sandbox"]["id"], sp.wait_op(r["operation"]["id"], timeout=600)


def state(sp, sid):
    return sp.request("GET", "/v1/sandboxes/" + sid).json["sandbox"]


def delete_clean(sp, sid):
    """Deletes the sandbox and checks that nothing of it is left."""
    r = sp.request("DELETE", "/v1/sandboxes/" + sid)
    assert r.status == 202, r
    assert sp.wait_op(r.json["operation"]["id"])["state"] == "succeeded"
    assert not qemu_of(sp, sid), qemu_of(sp, sid)
    for p in (os.path.join(sp.data_dir, "sandboxes", sid), os.path.join(sp.data_dir, "run", sid),
              "/run/netns/space-" + sid):
        assert not os.path.exists(p), "delete left %s" % p


def test_missing_kernel(fresh_spaced):
    sp = fresh_spaced(guest_dir=guest_copy(skip=("vmlinux",)))
    sid, op = create_op(sp)
    assert op["state"] == "failed", op
    print("missing kernel:", op["error"])
    assert "vmlinux" in op["error"]["message"] or "kernel" in op["error"]["message"], op
    assert state(sp, sid)["state"] == "failed"
    assert not qemu_of(sp, sid)
    delete_clean(sp, sid)


def test_missing_template_image(fresh_spaced):
    g = guest_copy(skip=("templates",))
    os.makedirs(os.path.join(g, "templates", "noimg"))
    with open(os.path.join(g, "templates", "noimg", "template.json"), "w") as f:
        f.write('{"name": "noimg", "description": "its rootfs.ext4 is missing"}')
    sp = fresh_spaced(guest_dir=g)
    r = sp.request("POST", "/v1/sandboxes", dict(BASE, template="noimg"))
    print("missing image:", r)
    if r.status == 202:
        op = sp.wait_op(r.json["operation"]["id"])
        assert op["state"] == "failed" and "noimg" in op["error"]["message"], op
        delete_clean(sp, r.json["sandbox"]["id"])
    else:
        assert r.status == 400 and r.error_code() == "unknown_template", r
        assert "noimg" in r.json["error"]["message"]


def test_qemu_fails_to_start(fresh_spaced):
    """A QEMU that exits at once with an error: the create fails with QEMU's own words,
    also for a sandbox with a network (whose namespace is claimed before QEMU starts)."""
    fake = os.path.join(RUN_DIR, "qemu-that-fails")
    with open(fake, "w") as f:
        f.write("#!/bin/sh\necho 'qemu: simulated failure: cannot set up guest memory' >&2\nexit 1\n")
    os.chmod(fake, stat.S_IRWXU | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)
    sp = fresh_spaced()
    sp.stop(cleanup=False)
    sp.start(extra=("--qemu", fake))
    for body in (BASE, dict(BASE, network={"mode": "allowlist", "allow": ["example.test"]})):
        sid, op = create_op(sp, body)
        assert op["state"] == "failed", op
        print("qemu fails (%s): %s" % (body["network"]["mode"], op["error"]))
        msg = op["error"]["message"]
        # Unjailed QEMU speaks for itself; a jailed one cannot even exec a script in /tmp.
        assert "simulated failure" in msg or fake in msg, op
        assert not qemu_of(sp, sid)
        delete_clean(sp, sid)


def running(sp):
    sid, op = create_op(sp)
    assert op["state"] == "succeeded", (op, sp.log())
    return sid


def test_corrupt_suspend_snapshot(fresh_spaced):
    sp = fresh_spaced()
    sid = running(sp)
    r = sp.request("POST", "/v1/sandboxes/%s/suspend" % sid)
    assert sp.wait_op(r.json["operation"]["id"])["state"] == "succeeded"
    st = os.path.join(sp.data_dir, "sandboxes", sid, "suspend", "state")
    size = os.path.getsize(st)
    with open(st, "r+b") as f:  # same size, garbage from the start
        f.write(os.urandom(min(size, 1 << 20)))
    r = sp.request("POST", "/v1/sandboxes/%s/restore" % sid)
    op = sp.wait_op(r.json["operation"]["id"])
    assert op["state"] == "failed", op
    print("corrupt snapshot:", op["error"])
    assert "snapshot" in op["error"]["message"], op
    assert state(sp, sid)["state"] == "failed"
    assert not qemu_of(sp, sid)
    delete_clean(sp, sid)


def fill_up(mnt, leave):
    """Fills the file system at mnt but about `leave` bytes with filler files (returned).
    The sandbox writes there too (its overlay, logs), so a fill that fails because free
    space shrank in between is tried again with what is free then."""
    fillers = []
    for i in range(10):
        st = os.statvfs(mnt)
        free = st.f_bavail * st.f_frsize
        if free <= 2 * leave:
            return fillers
        path = os.path.join(mnt, "filler%d" % i)
        if subprocess.run(["fallocate", "-l", str(free - leave), path], capture_output=True).returncode == 0:
            fillers.append(path)
        elif os.path.exists(path):
            os.unlink(path)
    raise AssertionError("could not fill %s (free: %d bytes)" % (mnt, os.statvfs(mnt).f_bavail))


@pytest.fixture
def small_disk():
    """A data dir on a 1200 MiB tmpfs of its own: a disk the test can fill without
    touching the host's. Unmounted at the end (spaced, started after it by the test's
    fresh_spaced, is stopped first)."""
    mnt = tempfile.mkdtemp(prefix="full", dir=RUN_DIR)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1200m", "tmpfs", mnt], capture_output=True)
    if r.returncode != 0:
        pytest.skip("cannot mount a tmpfs for the data dir: %s" % r.stderr.decode().strip())
    yield mnt
    subprocess.run(["umount", "-l", mnt])


def test_full_disk_while_suspending(small_disk, fresh_spaced):
    """The data dir on a small tmpfs, filled up: the suspend fails saying so, the sandbox
    keeps running, and no partial snapshot is left; once there is room it works."""
    sp = fresh_spaced(data_dir=small_disk)
    sid = running(sp)
    fillers = fill_up(small_disk, leave=8 << 20)
    r = sp.request("POST", "/v1/sandboxes/%s/suspend" % sid)
    assert r.status == 202, r
    op = sp.wait_op(r.json["operation"]["id"], timeout=60)
    assert op["state"] == "failed", op
    print("full disk:", op["error"])
    assert op["error"]["code"] == "no_space", op
    assert "No space left" in op["error"]["message"], op
    assert state(sp, sid)["state"] == "running", state(sp, sid)
    assert not os.path.exists(os.path.join(small_disk, "sandboxes", sid, "suspend", "state")), \
        "a partial snapshot was left"
    for f in fillers:
        os.unlink(f)
    r = sp.request("POST", "/v1/sandboxes/%s/suspend" % sid)
    assert sp.wait_op(r.json["operation"]["id"])["state"] == "succeeded"
    delete_clean(sp, sid)
    sp.stop()


def test_full_disk_while_forking(small_disk, fresh_spaced):
    """A fork with no room for its capture (the parent's memory and disk overlay, and 64
    MiB kept free) fails at once saying what it needs and what is free; the parent runs
    on and nothing of the capture or the children is left."""
    sp = fresh_spaced(data_dir=small_disk)
    sid = running(sp)
    fillers = fill_up(small_disk, leave=100 << 20)
    r = sp.request("POST", "/v1/sandboxes/%s/fork" % sid, {"count": 2})
    assert r.status == 202, r
    op = sp.wait_op(r.json["operation"]["id"], timeout=60)
    print("fork on a full disk:", op["error"])
    assert op["state"] == "failed" and "No space left" in op["error"]["message"], op
    assert "MiB are free" in op["error"]["message"], op
    assert state(sp, sid)["state"] == "running", state(sp, sid)
    for child in r.json["sandboxes"]:
        assert state(sp, child)["state"] in ("failed", "deleted"), state(sp, child)
        assert not qemu_of(sp, child)
    caps = os.path.join(small_disk, "captures")
    assert not os.path.isdir(caps) or not os.listdir(caps), os.listdir(caps)
    out, code = session_output(sp, sid, "echo still-here")
    assert (out, code) == (b"still-here\n", 0)
    for f in fillers:
        os.unlink(f)
    delete_clean(sp, sid)
    sp.stop()


def healthz(sp):
    return json.loads(urllib.request.urlopen(sp.url + "/healthz", timeout=10).read())


def test_full_disk_store_keeps_its_word(small_disk, fresh_spaced):
    """The data dir filled to the last byte: the API still takes a suspend and the store
    records how it ended (the store's reserve file, given up when the disk is full, makes
    room for it); /healthz says the disk is full; once there is room again the reserve
    comes back and the suspend works. On a store without a reserve the suspend was either
    refused outright or its operation stayed `running` for good."""
    sp = fresh_spaced(data_dir=small_disk)
    reserve = os.path.join(small_disk, "space.db-reserve")
    assert os.path.getsize(reserve) == 16 << 20, "the store keeps no reserve"
    sid = running(sp)
    # paused: a guest writing its disk while the host's is full would stop on an I/O
    # error, which is not what this test is about
    r = sp.request("POST", "/v1/sandboxes/%s/pause" % sid)
    assert sp.wait_op(r.json["operation"]["id"])["state"] == "succeeded"
    fillers = fill_up(small_disk, leave=0)
    assert os.statvfs(small_disk).f_bavail == 0
    r = sp.request("POST", "/v1/sandboxes/%s/suspend" % sid)
    assert r.status == 202, r
    op = sp.wait_op(r.json["operation"]["id"], timeout=60)
    assert op["state"] == "failed", op
    assert op["error"]["code"] == "no_space", op
    assert not os.path.exists(reserve), "the reserve was not given to the store"
    h = healthz(sp)
    assert h["status"] == "degraded" and "full" in h["disk"], h
    assert state(sp, sid)["state"] == "paused", state(sp, sid)
    for f in fillers:
        os.unlink(f)
    deadline = time.monotonic() + 30
    while healthz(sp)["status"] != "ok":
        assert time.monotonic() < deadline, ("the reserve did not come back", healthz(sp))
        time.sleep(0.5)
    assert os.path.getsize(reserve) == 16 << 20
    r = sp.request("POST", "/v1/sandboxes/%s/suspend" % sid)
    assert sp.wait_op(r.json["operation"]["id"])["state"] == "succeeded"
    delete_clean(sp, sid)
    sp.stop()


def test_full_disk_while_the_guest_writes(small_disk, fresh_spaced):
    """The host's disk fills while the guest writes to its own disk: QEMU stops the guest
    on the refused write. The sandbox stays running (it was marked failed: "crashed:
    io-error"), and once there is room the guest continues where it was and its write
    completes whole."""
    sp = fresh_spaced(data_dir=small_disk)
    sid = running(sp)
    fillers = fill_up(small_disk, leave=0)
    out = {}
    cmd = "cd && dd if=/dev/urandom of=big bs=1M count=48 conv=fsync 2>/dev/null && stat -c %s big"
    t = threading.Thread(target=lambda: out.update(r=session_output(sp, sid, cmd)))
    t.start()
    # Asked of the API, not of spaced's log: the log is on the full disk too.
    deadline = time.monotonic() + 60
    while "stalled" not in state(sp, sid):
        assert time.monotonic() < deadline, ("the guest's write never met the full disk", state(sp, sid))
        assert t.is_alive(), ("the write finished on a full disk", out, state(sp, sid))
        time.sleep(0.2)
    time.sleep(3)  # a few supervision ticks (2 s) with the guest stopped
    st = state(sp, sid)
    assert st["state"] == "running" and "disk is full" in st.get("stalled", ""), st
    assert t.is_alive(), ("the write ended while the disk was full", out)
    for f in fillers:
        os.unlink(f)
    t.join(120)
    assert not t.is_alive(), "the guest did not continue once there was room"
    assert out["r"] == (b"%d\n" % (48 << 20), 0), out
    assert "event=continued" in sp.log()
    st = state(sp, sid)
    assert st["state"] == "running" and "stalled" not in st, st
    delete_clean(sp, sid)
    sp.stop()


def busybox_init_cpio():
    """An initramfs whose /init never starts the agent (it sleeps)."""
    bb = shutil.which("busybox") or "/bin/busybox"
    if not os.path.exists(bb):
        pytest.skip("busybox missing (apt-get install busybox-static)")
    root = tempfile.mkdtemp(prefix="ird", dir=RUN_DIR)
    os.makedirs(os.path.join(root, "bin"))
    shutil.copy(bb, os.path.join(root, "bin", "busybox"))
    with open(os.path.join(root, "init"), "w") as f:
        f.write("#!/bin/busybox sh\necho 'test init: the agent is never started'\nexec /bin/busybox sleep 100000\n")
    os.chmod(os.path.join(root, "init"), 0o755)
    out = os.path.join(root, "..", os.path.basename(root) + ".cpio")
    files = subprocess.run(["find", ".", "-print"], cwd=root, capture_output=True, check=True).stdout
    with open(out, "wb") as f:
        subprocess.run(["cpio", "-o", "-H", "newc", "--quiet"], cwd=root, input=files, stdout=f, check=True)
    return out


def test_guest_never_ready(fresh_spaced):
    """The guest boots but its agent never answers: the create fails with agent_timeout
    after its limit (120 s), the VM is gone, and the console tail says what the guest
    printed."""
    sp = fresh_spaced(guest_dir=guest_copy(initramfs=busybox_init_cpio()))
    t0 = time.monotonic()
    sid, op = create_op(sp)
    print("never ready: failed after %.0f s: %s" % (time.monotonic() - t0, op["error"]))
    assert op["state"] == "failed", op
    assert op["error"]["code"] == "agent_timeout", op
    assert "the agent is never started" in op["error"]["message"], op  # the console tail
    deadline = time.monotonic() + 30
    while qemu_of(sp, sid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not qemu_of(sp, sid)
    delete_clean(sp, sid)
