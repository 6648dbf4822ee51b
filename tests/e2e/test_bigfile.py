"""A 1 GiB file through the files API end to end, with memory that stays bounded.

The upload is streamed from a generator (never held in memory here), checked in the
guest by size and by busybox sha256sum, then streamed back and hashed on the host.
Around the transfer the test reads spaced's peak RSS (VmHWM in /proc/<pid>/status) and,
in the guest, the agent's peak RSS (PID 1) and MemAvailable: a spaced or an agent that
held the file, or a large part of it, would exceed the bounds below by far.

The disk: `base` is a 256 MiB image, too small for a 1 GiB file, and a tmpfs target
would put the file in guest RAM. So this module gives spaced a guest dir whose `base`
is the same image grown to 1536 MiB (sparse copy + resize2fs, as a template spec's
`size_mib` does), and the file goes to the sandbox's disk (its qcow2 overlay).

spaced runs with ASan's quarantine capped (quarantine_size_mb=16): by default ASan keeps
up to 256 MiB of freed blocks alive, which is the sanitizer's memory, not spaced's.
Under TCG this takes minutes; the timeouts bound a hang, not a slow machine. The
throughputs are printed (-s to see them)."""
import hashlib
import http.client
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.parse

import pytest

from spacedlib import GUEST, RUN_DIR, Spaced, vm_missing
from test_sessions import run

MIB = 1 << 20
SIZE = 1024 * MIB
BLOCK = MIB
DISK_MIB = 1536
PATH = "/home/user/big.bin"
IO_TIMEOUT_S = 3600
SPACED_GROWTH_MAX = 128 * MIB  # peak RSS growth of spaced over the whole transfer
AGENT_PEAK_MAX = 64 * MIB      # the guest agent's peak RSS (the guest has 256 MiB)
F = "/v1/sandboxes/%s/files"


def block(i):
    """Block i of the file: 1 MiB derived from i (cheap, and no two blocks alike)."""
    return hashlib.sha256(b"bigfile-%d" % i).digest() * (BLOCK // 32)


def grown_guest():
    """A guest dir sharing build/guest's kernel and initramfs whose `base` image is grown
    to DISK_MIB."""
    for tool in ("e2fsck", "resize2fs"):
        if not shutil.which(tool) and not os.path.exists("/sbin/" + tool):
            pytest.skip("%s is missing (e2fsprogs): needed to grow the base image" % tool)
    d = tempfile.mkdtemp(prefix="spg", dir=RUN_DIR)
    for f in ("vmlinux", "initramfs.cpio"):
        os.symlink(os.path.join(GUEST, f), os.path.join(d, f))
    src = os.path.join(GUEST, "templates", "base")
    dst = os.path.join(d, "templates", "base")
    os.makedirs(dst)
    img = os.path.join(dst, "rootfs.ext4")
    subprocess.run(["cp", "--sparse=always", os.path.join(src, "rootfs.ext4"), img], check=True)
    os.truncate(img, DISK_MIB * MIB)
    env = dict(os.environ, PATH=os.environ.get("PATH", "") + ":/sbin:/usr/sbin")
    r = subprocess.run(["e2fsck", "-fy", img], capture_output=True, text=True, env=env)
    assert r.returncode in (0, 1), r.stdout + r.stderr  # 1: "errors corrected" (none expected)
    subprocess.run(["resize2fs", img], check=True, capture_output=True, env=env)
    with open(os.path.join(src, "template.json")) as f:
        meta = json.load(f)
    meta["description"] = "base grown to %d MiB for the 1 GiB transfer test" % DISK_MIB
    meta.setdefault("image", {})["size_bytes"] = DISK_MIB * MIB
    with open(os.path.join(dst, "template.json"), "w") as f:
        json.dump(meta, f)
    return d


@pytest.fixture(scope="module")
def big():
    why = vm_missing()
    if why:
        pytest.skip(why)
    guest = grown_guest()
    asan = os.environ.get("ASAN_OPTIONS", "")
    sp = Spaced(guest)
    try:
        sp.start(env={"ASAN_OPTIONS": (asan + ":" if asan else "") + "quarantine_size_mb=16"})
        r = sp.create({"template": "base", "timeout": 0})
        op = sp.wait_op(r["operation"]["id"], timeout=900)
        assert op["state"] == "succeeded", (op, sp.log())
        yield sp, r["sandbox"]["id"]
    finally:
        sp.stop()


def peak_rss(pid):
    with open("/proc/%d/status" % pid) as f:
        return int(re.search(r"^VmHWM:\s+(\d+) kB", f.read(), re.M).group(1)) * 1024


def guest_memory(sp, sid):
    """(agent peak RSS, MemAvailable) in bytes, read in the guest."""
    _, res = run(sp, sid, {"cmd": "grep VmHWM /proc/1/status; grep MemAvailable /proc/meminfo"})
    assert res["exit"]["code"] == 0, res
    out = res["stdout"].decode()
    hwm = int(re.search(r"VmHWM:\s+(\d+) kB", out).group(1)) * 1024
    avail = int(re.search(r"MemAvailable:\s+(\d+) kB", out).group(1)) * 1024
    return hwm, avail


def rate(nbytes, secs):
    return "%.1f MiB/s (%.0f s)" % (nbytes / MIB / max(secs, 1e-9), secs)


def test_one_gib_round_trip(big):
    sp, sid = big
    q = "?" + urllib.parse.urlencode({"path": PATH})
    auth = {"Authorization": "Bearer " + sp.admin_key}
    spaced_before = peak_rss(sp.proc.pid)
    agent_before, avail_before = guest_memory(sp, sid)

    want = hashlib.sha256()

    def body():
        for i in range(SIZE // BLOCK):
            b = block(i)
            want.update(b)
            yield b

    t0 = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", sp.port, timeout=IO_TIMEOUT_S)
    conn.request("PUT", F % sid + q, body=body(), encode_chunked=True,
                 headers=dict(auth, **{"Transfer-Encoding": "chunked",
                                       "Content-Type": "application/octet-stream"}))
    r = conn.getresponse()
    reply = r.read()
    conn.close()
    up_s = time.monotonic() - t0
    assert r.status == 200, reply
    assert json.loads(reply)["file"]["size"] == SIZE

    st = sp.request("GET", F % sid + "/stat" + q)
    assert st.status == 200 and st.json["file"]["size"] == SIZE, st
    t0 = time.monotonic()
    _, res = run(sp, sid, {"cmd": "sha256sum " + PATH})
    sum_s = time.monotonic() - t0
    assert res["exit"]["code"] == 0, res
    assert res["stdout"].split()[0].decode() == want.hexdigest(), res

    t0 = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", sp.port, timeout=IO_TIMEOUT_S)
    conn.request("GET", F % sid + q, headers=auth)
    r = conn.getresponse()
    assert r.status == 200 and int(r.getheader("Content-Length")) == SIZE
    got, n = hashlib.sha256(), 0
    while True:
        b = r.read(BLOCK)
        if not b:
            break
        got.update(b)
        n += len(b)
    conn.close()
    down_s = time.monotonic() - t0
    assert n == SIZE
    assert got.hexdigest() == want.hexdigest()

    spaced_after = peak_rss(sp.proc.pid)
    agent_after, avail_after = guest_memory(sp, sid)
    print("\n1 GiB upload %s, guest sha256sum %s, download %s" % (
        rate(SIZE, up_s), rate(SIZE, sum_s), rate(SIZE, down_s)))
    print("spaced peak RSS %d -> %d MiB; agent peak RSS %d -> %d KiB; guest MemAvailable %d -> %d MiB"
          % (spaced_before // MIB, spaced_after // MIB, agent_before // 1024, agent_after // 1024,
             avail_before // MIB, avail_after // MIB))
    assert spaced_after - spaced_before < SPACED_GROWTH_MAX, (spaced_before, spaced_after)
    assert agent_after < AGENT_PEAK_MAX, (agent_before, agent_after)
    # The page cache the file went through is reclaimable; the agent's own memory is not.
    assert avail_after > avail_before - 64 * MIB, (avail_before, avail_after)
    assert sp.request("DELETE", F % sid + q).status == 204
