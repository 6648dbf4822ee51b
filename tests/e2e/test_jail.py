"""End-to-end test of the QEMU jail (required unless --no-jail): every QEMU spaced starts
(sandboxes, pool fills, template builds, template snapshot VMs) runs under a uid of its
own from the jail range, in its own PID, mount, network and IPC namespaces, in a cgroup
with limits; clones map the template memory read-only; commands still run in the
sandbox."""
import glob
import hashlib
import os
import re
import stat
import threading
import time

import pytest

from spacedlib import vm_missing
from test_sessions import run


def jail_missing():
    if os.geteuid() != 0:
        return "the jail needs spaced to run as root"
    if not os.access("/sys/fs/cgroup", os.W_OK):
        return "/sys/fs/cgroup is not writable"
    return vm_missing()


def cgroup_dir(pid):
    """The cgroup v2 directory of pid, or the v1 memory hierarchy's."""
    with open("/proc/%d/cgroup" % pid) as f:
        lines = f.read().splitlines()
    for line in lines:
        _, ctrls, path = line.split(":", 2)
        if ctrls == "":
            return "/sys/fs/cgroup" + path, path
        if "memory" in ctrls.split(","):
            return "/sys/fs/cgroup/memory" + path, path
    raise AssertionError("no cgroup found for %d: %s" % (pid, lines))


def test_jailed_sandbox(fresh_spaced):
    why = jail_missing()
    if why:
        pytest.skip(why)
    sp = fresh_spaced()  # jailed by default where it can be (root, `nobody`)
    assert "event=jail state=on" in open(sp.log_path).read(), sp.log()
    r = sp.create({"template": "base", "timeout": 0, "memory_mib": 256})
    op = sp.wait_op(r["operation"]["id"])
    assert op["state"] == "succeeded", (op, sp.log())
    sid = r["sandbox"]["id"]
    _, res = run(sp, sid, {"cmd": "echo jailed"})
    assert res["stdout"] == b"jailed\n" and res["exit"]["code"] == 0, res

    pids = []
    for p in glob.glob(os.path.join(sp.data_dir, "run", "*", "qemu.pid")):
        with open(p) as f:
            pid = int(f.read().strip())
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            if sid.encode() in f.read():
                pids.append(pid)
    assert len(pids) == 1, pids
    pid = pids[0]
    with open("/proc/%d/status" % pid) as f:
        ids = {l.split()[0]: l.split()[1:] for l in f if l.startswith(("Uid:", "Gid:"))}
    assert all(int(u) != 0 for u in ids["Uid:"]), ids
    assert all(int(g) != 0 for g in ids["Gid:"]), ids
    for ns in ("pid", "mnt"):
        assert os.readlink("/proc/%d/ns/%s" % (pid, ns)) != os.readlink("/proc/self/ns/%s" % ns), ns
    d, path = cgroup_dir(pid)
    assert "space-" in path, path
    if os.path.exists(os.path.join(d, "memory.max")):  # cgroup v2
        for limit in ("memory.max", "pids.max"):
            with open(os.path.join(d, limit)) as f:
                assert f.read().strip() != "max", limit
        with open(os.path.join(d, "cpu.max")) as f:
            assert not f.read().startswith("max"), "cpu.max unlimited"
    else:
        with open(os.path.join(d, "memory.limit_in_bytes")) as f:
            assert int(f.read()) == (256 + 384) << 20  # guest RAM + QEMU's own (vm.h)
    assert sp.request("DELETE", "/v1/sandboxes/" + sid).status == 202


def _qemus():
    """(pid, argv) of every live QEMU on the host."""
    for d in glob.glob("/proc/[0-9]*"):
        try:
            with open(d + "/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if argv and os.path.basename(argv[0]).startswith(b"qemu-system"):
            yield int(d[6:]), argv


def _qemu_named(name):
    """Pids of QEMUs whose -name is exactly `name` (they are renamed space-<id> in comm)."""
    return [pid for pid, argv in _qemus()
            if b"-name" in argv and argv.index(b"-name") + 1 < len(argv) and
            argv[argv.index(b"-name") + 1].split(b",")[0] == name.encode()]


def test_template_build_vm_is_jailed(fresh_spaced):
    """A template build VM runs the tenant's steps: its QEMU is jailed like a sandbox's."""
    why = jail_missing()
    if why:
        pytest.skip(why)
    sp = fresh_spaced()
    r = sp.request("POST", "/v1/templates",
                   {"name": "jailbuild", "base": "base", "steps": [{"run": "sleep 20"}]})
    assert r.status == 202, r
    pids, deadline = [], time.monotonic() + 300
    while not pids and time.monotonic() < deadline:
        pids = _qemu_named("b-jailbuild")
        time.sleep(0.2)
    assert len(pids) == 1, ("no build VM seen", sp.log())
    with open("/proc/%d/status" % pids[0]) as f:
        uids = [l.split()[1:] for l in f if l.startswith("Uid:")][0]
    assert len(set(uids)) == 1 and 2000000000 <= int(uids[0]) < 2000000000 + 65536, uids
    assert os.readlink("/proc/%d/ns/mnt" % pids[0]) != os.readlink("/proc/self/ns/mnt")
    assert "space-b-jailbuild" in cgroup_dir(pids[0])[1]
    op = sp.wait_op(r.json["operation"]["id"], timeout=900)
    assert op["state"] == "succeeded", (op, sp.log())


class QemuWatch:
    """Polls /proc (every 50 ms, in a thread) for the QEMUs of one spaced (their command
    line names its data dir) and records, per process, what a jail must have changed:
    uids, gids, network and IPC namespaces, cgroup. Also records every moment at which two
    live QEMUs ran under one uid."""

    def __init__(self, data_dir):
        self.data_dir = data_dir
        self.seen = {}        # pid -> dict
        self.shared = []      # (uid, [names]) seen live at the same time
        self.host = {ns: os.readlink("/proc/self/ns/" + ns) for ns in ("net", "ipc", "mnt", "pid")}
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()

    def _one(self, pid):
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            argv = f.read().split(b"\0")
        if not argv or not os.path.basename(argv[0]).startswith(b"qemu-system") or \
                not any(self.data_dir.encode() + b"/" in a for a in argv):
            return None
        name = argv[argv.index(b"-name") + 1].split(b",")[0].decode() if b"-name" in argv else "?"
        with open("/proc/%d/status" % pid) as f:
            st = {l.split(":")[0]: l.split()[1:] for l in f if l.startswith(("Uid:", "Gid:"))}
        rec = {"name": name, "uids": [int(u) for u in st["Uid"]], "gids": [int(g) for g in st["Gid"]]}
        for ns in ("net", "ipc", "mnt", "pid"):
            rec[ns] = os.readlink("/proc/%d/ns/%s" % (pid, ns))
        rec["cgroup"] = cgroup_dir(pid)[1]
        return rec

    def _run(self):
        while not self._stop.is_set():
            live = {}
            for d in os.listdir("/proc"):
                if not d.isdigit():
                    continue
                try:
                    rec = self._one(int(d))
                except (OSError, ValueError, IndexError, AssertionError, KeyError):
                    continue  # gone meanwhile, or not yet past exec
                if rec:
                    self.seen.setdefault(int(d), rec)
                    live.setdefault(rec["uids"][0], []).append(rec["name"])
            self.shared += [(u, n) for u, n in live.items() if len(n) > 1]
            time.sleep(0.05)

    def names(self):
        return sorted({r["name"] for r in self.seen.values()})

    def check(self):
        """Every QEMU seen: no uid or gid 0, not in the host's namespaces, in its own cgroup;
        no uid shared by two live QEMUs."""
        bad = []
        for pid, r in self.seen.items():
            why = []
            if 0 in r["uids"] or 0 in r["gids"]:
                why.append("runs as root: uids %s gids %s" % (r["uids"], r["gids"]))
            for ns in ("net", "ipc", "mnt", "pid"):
                if r[ns] == self.host[ns]:
                    why.append("in the host's %s namespace" % ns)
            if "space-" + r["name"] not in r["cgroup"]:
                why.append("not in its cgroup (%s)" % r["cgroup"])
            if why:
                bad.append("%s (pid %d): %s" % (r["name"], pid, "; ".join(why)))
        assert not bad, "unjailed QEMUs:\n" + "\n".join(bad)
        assert not self.shared, "QEMUs sharing a uid: %s" % self.shared[:5]


def test_every_qemu_is_jailed(fresh_spaced):
    """Creates of a new shape (a template snapshot VM, cold), restores, pool fills and a
    template build: every QEMU spaced starts is jailed, none runs as root, none in the
    host's network or IPC namespace, no two live ones under one uid."""
    why = jail_missing()
    if why:
        pytest.skip(why)
    from test_pool import start_pool
    sp = fresh_spaced()
    sp.stop(cleanup=False)
    sp.start(extra=("--pool", "1"))
    with QemuWatch(sp.data_dir) as w:
        # 320 MiB: a shape no other test uses, so its template snapshot VM boots here.
        shape = {"template": "base", "timeout": 0, "memory_mib": 320}
        made, _ = start_pool(sp, 1, shape)
        # A claim moves the pooled VM's overlay to the sandbox's disk.qcow2; once the VM
        # is gone (suspended) that file is root's again.
        r = sp.create(shape)
        assert sp.wait_op(r["operation"]["id"])["state"] == "succeeded", sp.log()
        claimed = r["sandbox"]["id"]
        made.append(claimed)
        assert re.search(r"pool\.claim sandbox=%s " % claimed, open(sp.log_path).read()), sp.log()
        r = sp.request("POST", "/v1/sandboxes/%s/suspend" % claimed)
        assert sp.wait_op(r.json["operation"]["id"])["state"] == "succeeded", sp.log()
        st = os.stat(os.path.join(sp.data_dir, "sandboxes", claimed, "disk.qcow2"))
        assert (st.st_uid, st.st_gid) == (0, 0), st
        r = sp.request("POST", "/v1/templates",
                       {"name": "jailwatch", "base": "base", "steps": [{"run": "true"}]})
        assert r.status == 202, r
        op = sp.wait_op(r.json["operation"]["id"], timeout=900)
        assert op["state"] == "succeeded", (op, sp.log())
    names = w.names()
    print("QEMUs seen: %s" % names)
    for prefix in ("t-base-", "b-jailwatch", "pool-", "sb"):
        assert any(n.startswith(prefix) for n in names), (prefix, names)
    w.check()
    for sid in made:
        assert sp.request("DELETE", "/v1/sandboxes/" + sid).status == 202


def _qemu_of(sid):
    pids = [(pid, argv) for pid, argv in _qemus() if any(sid.encode() in a for a in argv)]
    assert len(pids) == 1, (sid, pids)
    return pids[0]


def _sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _ram_file_of(sid, expect=None):
    """The RAM file a clone's QEMU maps, checked: memory-backend-file share=off, the file
    root-owned 0444, every descriptor of it in the QEMU read-only (the shim), every mapping
    private copy-on-write. expect: the path it must be."""
    pid, argv = _qemu_of(sid)
    opt = [a for a in argv if a.startswith(b"memory-backend-file,")]
    assert opt, ("RAM not mapped from a file", argv)
    path = opt[0].split(b"mem-path=")[1].split(b",")[0].decode()
    assert b"share=off" in opt[0], opt
    assert expect is None or path == expect, (path, expect)
    st = os.stat(path)
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, 0, 0o444), (path, st)
    fds = [fd for fd in os.listdir("/proc/%d/fd" % pid)
           if os.readlink("/proc/%d/fd/%s" % (pid, fd)) == path]
    assert fds, "the clone's QEMU holds no descriptor of %s" % path
    for fd in fds:
        with open("/proc/%d/fdinfo/%s" % (pid, fd)) as f:
            flags = int([l.split()[1] for l in f if l.startswith("flags:")][0], 8)
        assert flags & os.O_ACCMODE == os.O_RDONLY, ("RAM file open for writing", oct(flags))
    with open("/proc/%d/maps" % pid) as f:
        maps = [l.split() for l in f if l.rstrip().endswith(path)]
    assert maps and all(m[1][3] == "p" for m in maps), maps  # private copy-on-write
    return path


def _write_guest_memory(sp, sid):
    """The guest writes its memory (page cache of a 24 MB file, a process's heap)."""
    _, res = run(sp, sid, {"cmd": "head -c 24000000 /dev/urandom > /tmp/fill && "
                                  "md5sum /tmp/fill >/dev/null && echo wrote"})
    assert res["stdout"] == b"wrote\n", res


def test_clone_maps_template_memory_read_only(fresh_spaced):
    """A clone's QEMU holds the template RAM file open read-only (the shim), the file is
    root-owned 0444 like the frozen template overlay, and its bytes do not change while
    clones run and write their memory."""
    why = jail_missing()
    if why:
        pytest.skip(why)
    sp = fresh_spaced()
    body = {"template": "base", "timeout": 0}
    first = sp.create(body)
    assert sp.wait_op(first["operation"]["id"])["state"] == "succeeded", sp.log()
    deadline = time.monotonic() + 600
    while sp.request("GET", "/v1/templates/base").json["template"]["snapshots"] < 1:
        assert time.monotonic() < deadline, "no template snapshot; log:\n" + sp.log()
        time.sleep(1)
    sids = [first["sandbox"]["id"]]
    mem = None
    for i in range(2):
        r = sp.create(body)
        assert sp.wait_op(r["operation"]["id"])["state"] == "succeeded", sp.log()
        sid = r["sandbox"]["id"]
        sids.append(sid)
        if mem is None:
            mem = _ram_file_of(sid)
            before = _sha256(mem)
            overlay = os.path.join(os.path.dirname(os.path.dirname(mem)), "disk.qcow2")
            st = os.stat(overlay)
            assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o444), (overlay, st)
        _ram_file_of(sid, mem)
        _write_guest_memory(sp, sid)
    assert _sha256(mem) == before, "the template RAM file changed while clones ran"
    for sid in sids:
        assert sp.request("DELETE", "/v1/sandboxes/" + sid).status == 202


def test_fork_maps_capture_memory_read_only(fresh_spaced):
    """A fork maps its capture's RAM file (captures/<id>/mem, full guest size) like a
    template clone maps the template's: root-owned 0444, open read-only, mapped private;
    its bytes do not change while the forks run and write their memory."""
    why = jail_missing()
    if why:
        pytest.skip(why)
    sp = fresh_spaced()
    r = sp.create({"template": "base", "timeout": 0})
    assert sp.wait_op(r["operation"]["id"])["state"] == "succeeded", sp.log()
    parent = r["sandbox"]["id"]
    f = sp.request("POST", "/v1/sandboxes/%s/fork" % parent, {"count": 2})
    assert f.status == 202, f
    op = sp.wait_op(f.json["operation"]["id"], timeout=600)
    assert op["state"] == "succeeded", (op, sp.log())
    forks = f.json["sandboxes"]
    mem = _ram_file_of(forks[0])
    assert mem.startswith(os.path.join(sp.data_dir, "captures") + "/") and mem.endswith("/mem"), mem
    assert os.stat(mem).st_size == 256 << 20, os.stat(mem)
    before = _sha256(mem)
    for sid in forks:
        _ram_file_of(sid, mem)
        _write_guest_memory(sp, sid)
    assert _sha256(mem) == before, "the capture's RAM file changed while forks ran"
    for sid in forks + [parent]:
        assert sp.request("DELETE", "/v1/sandboxes/" + sid).status == 202


def _uid(pid):
    with open("/proc/%d/status" % pid) as f:
        return [int(u) for l in f if l.startswith("Uid:") for u in l.split()[1:]]


def test_adopted_vm_keeps_its_uid(fresh_spaced):
    """After kill -9 of spaced, the adopted QEMU keeps its uid, no new VM gets it, and
    its overlay goes back to root once the VM is gone (suspended)."""
    why = jail_missing()
    if why:
        pytest.skip(why)
    from test_recovery import qemu_pid, settle
    sp = fresh_spaced()
    body = {"template": "base", "timeout": 0}
    r = sp.create(body)
    assert sp.wait_op(r["operation"]["id"])["state"] == "succeeded", sp.log()
    a = r["sandbox"]["id"]
    pid = qemu_pid(sp, a)
    uid = _uid(pid)
    assert len(set(uid)) == 1 and uid[0] >= 2000000000, uid
    disk = os.path.join(sp.data_dir, "sandboxes", a, "disk.qcow2")
    assert os.stat(disk).st_uid == uid[0]  # its overlay is its uid's while it runs
    sp.kill9()
    sp.start()
    settle(sp, a, "running")
    assert qemu_pid(sp, a) == pid and _uid(pid) == uid
    r = sp.create(body)
    assert sp.wait_op(r["operation"]["id"])["state"] == "succeeded", sp.log()
    b = r["sandbox"]["id"]
    assert _uid(qemu_pid(sp, b))[0] != uid[0]
    r = sp.request("POST", "/v1/sandboxes/%s/suspend" % a)
    assert sp.wait_op(r.json["operation"]["id"])["state"] == "succeeded", sp.log()
    st = os.stat(disk)
    assert (st.st_uid, st.st_gid) == (0, 0), "the suspended sandbox's overlay kept uid %d" % st.st_uid
    for sid in (a, b):
        assert sp.request("DELETE", "/v1/sandboxes/" + sid).status == 202
