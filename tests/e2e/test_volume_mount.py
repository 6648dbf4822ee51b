"""Volumes mounted into real sandboxes (create field "volumes"; the agent's FUSE relay to a
jailed space-volfs): a file put through the volume files API is read in the guest, a
guest's writes are read back through the API, a second sandbox mounting the same volume
sees the first one's writes and the other way round (no caching), a command that
sendfile()s a volume file straight into its stdout pipe neither hangs nor stops the agent,
the agent refuses its own file ops inside a mount, a mounted volume cannot be deleted, the
data outlives the sandboxes, and no space-volfs is left behind; the tenant's byte quota
(volume_mib) holds inside a sandbox (ENOSPC). Needs a guest whose initramfs has fuse.ko
(guest/fetch-kernel.sh); skips (saying why) when guest artifacts are missing."""
import glob
import os
import threading
import urllib.parse

from spacedlib import procs_naming, session_output


def vfiles(name, path):
    return "/v1/volumes/%s/files?%s" % (name, urllib.parse.urlencode({"path": path}))


def run(s, sid, cmd):
    """Runs cmd in the sandbox; returns its stdout (text), asserting exit code 0."""
    out, code = session_output(s, sid, cmd)
    assert code == 0, (sid, cmd, out, s.log())
    return out.decode()


def output_within(s, sid, cmd, seconds):
    """session_output with a deadline on the whole run: the attach stream's keep-alive
    comments would keep a plain socket timeout from ever firing on a hung agent."""
    box = {}

    def work():
        try:
            box["out"] = session_output(s, sid, cmd, timeout=seconds)
        except Exception as e:  # noqa: BLE001 (reported below)
            box["err"] = e

    t = threading.Thread(target=work, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), "%r: no exit after %d s: the agent hangs (%s)" % (cmd, seconds, s.log())
    if "err" in box:
        raise box["err"]
    return box["out"]


def create_mounting(s, vols):
    r = s.create({"template": "base", "volumes": vols})
    op = s.wait_op(r["operation"]["id"])
    assert op["state"] == "succeeded", (op, s.log())
    return r["sandbox"]["id"]


def delete(s, sid):
    r = s.request("DELETE", "/v1/sandboxes/" + sid)
    assert s.wait_op(r.json["operation"]["id"])["state"] == "succeeded"


def test_volume_mounted_in_two_sandboxes(spaced):
    s = spaced
    assert s.request("POST", "/v1/volumes", {"name": "shared"}).status == 201
    r = s.request("PUT", vfiles("shared", "/hello.txt"), raw=b"from the api\n",
                  headers={"Content-Type": "application/octet-stream"})
    assert r.status == 200, r
    vdir = glob.glob(os.path.join(s.data_dir, "volumes", "*", "shared"))[0]

    a = create_mounting(s, [{"name": "shared", "path": "/mnt/data"}])
    assert run(s, a, "cat /mnt/data/hello.txt | cat") == "from the api\n"
    run(s, a, "echo from-a > /mnt/data/a.txt && mkdir -p /mnt/data/d/e && "
              "echo deep > /mnt/data/d/e/f && ln -s /etc/shadow /mnt/data/link && "
              "mount | grep -q ' /mnt/data type fuse' && sync")
    assert s.request("GET", vfiles("shared", "/a.txt")).body == b"from-a\n"
    assert s.request("GET", vfiles("shared", "/d/e/f")).body == b"deep\n"
    # the planted link is a link on the host too, and the host API does not follow it
    assert os.readlink(os.path.join(vdir, "link")) == "/etc/shadow"
    r = s.request("GET", vfiles("shared", "/link"))
    assert r.status == 400 and r.error_code() == "symlink", r
    # space-volfs did not write as root: the files belong to the VM's jail uid
    assert os.stat(os.path.join(vdir, "a.txt")).st_uid != 0
    # the agent's own file ops would wait on themselves inside a mount: refused
    r = s.request("GET", "/v1/sandboxes/%s/files?path=/mnt/data/a.txt" % a)
    assert r.status == 400, r

    b = create_mounting(s, [{"name": "shared", "path": "/data"}])
    assert run(s, b, "cat /data/a.txt | cat") == "from-a\n"
    run(s, b, "echo from-b > /data/b.txt && echo more >> /data/a.txt")
    assert run(s, a, "cat /mnt/data/b.txt /mnt/data/a.txt | cat") == "from-b\nfrom-a\nmore\n"
    # a large file crosses many frames and FUSE messages both ways
    run(s, a, "head -c 3000000 /dev/urandom > /tmp/big && cp /tmp/big /mnt/data/big && "
              "cmp /tmp/big /mnt/data/big")
    assert run(s, b, "md5sum < /data/big").split()[0] == run(s, a, "md5sum < /tmp/big").split()[0]
    assert os.path.getsize(os.path.join(vdir, "big")) == 3000000

    r = s.request("DELETE", "/v1/volumes/shared")
    assert r.status == 409 and r.error_code() == "volume_in_use", r
    volfs = [p for p in procs_naming(vdir) if p[1][0].endswith("space-volfs")]
    assert len(volfs) == 2, volfs  # one space-volfs per mount
    delete(s, a)
    delete(s, b)
    assert procs_naming(vdir) == []
    # the data outlives the sandboxes
    assert s.request("GET", vfiles("shared", "/b.txt")).body == b"from-b\n"
    assert s.request("DELETE", "/v1/volumes/shared").status == 204


def test_byte_quota_in_sandbox(spaced):
    """volume_mib inside a sandbox: the mount's space-volfs gets the bytes the tenant has
    left as its budget: a write past it fails with ENOSPC in the guest and the host file
    stays within the quota; deleting a file makes room again."""
    s = spaced
    r = s.request("PUT", "/v1/tenants/admin/quota", {"volume_mib": 1})
    assert r.status == 200, r
    try:
        assert s.request("POST", "/v1/volumes", {"name": "quota"}).status == 201
        vdir = glob.glob(os.path.join(s.data_dir, "volumes", "*", "quota"))[0]
        a = create_mounting(s, [{"name": "quota", "path": "/mnt/q"}])
        run(s, a, "head -c 700000 /dev/zero > /mnt/q/a")
        # dd, not head: busybox head reports any write error as "I/O error"
        out, code = session_output(s, a, "dd if=/dev/zero of=/mnt/q/b bs=100000 count=7 "
                                         "2>/tmp/err; echo rc=$?; cat /tmp/err")
        out = out.decode()
        assert code == 0 and "rc=0" not in out and "No space left" in out, (out, s.log())
        assert os.path.getsize(os.path.join(vdir, "b")) <= (1 << 20) - 700000
        run(s, a, "rm /mnt/q/b && head -c 300000 /dev/zero > /mnt/q/c")
        got = s.request("GET", "/v1/quota").json
        assert got["usage"]["volume_mib"] == 1, got
        delete(s, a)
        assert s.request("DELETE", "/v1/volumes/quota").status == 204
    finally:
        s.request("PUT", "/v1/tenants/admin/quota", {"volume_mib": None})


def test_mounts_of_a_tenant_share_its_quota(spaced):
    """Two volumes of one tenant mounted at once share what is left of its volume_mib
    (one budget for all its live mounts, vol_share.h), and an upload through the files
    API while they are mounted counts against it too: a guest cannot pass the quota by
    writing a little under it into each of several mounts (before, each mount had all of
    the quota left when it started)."""
    s = spaced
    r = s.request("PUT", "/v1/tenants/admin/quota", {"volume_mib": 1})
    assert r.status == 200, r
    try:
        for n in ("share-a", "share-b"):
            assert s.request("POST", "/v1/volumes", {"name": n}).status == 201
        bdir = glob.glob(os.path.join(s.data_dir, "volumes", "*", "share-b"))[0]
        sid = create_mounting(s, [{"name": "share-a", "path": "/mnt/a"}, {"name": "share-b", "path": "/mnt/b"}])
        r = s.request("PUT", vfiles("share-a", "/up"), raw=b"u" * 300000,
                      headers={"Content-Type": "application/octet-stream"})
        assert r.status == 200, r
        run(s, sid, "head -c 500000 /dev/zero > /mnt/a/x")
        out, code = session_output(s, sid, "dd if=/dev/zero of=/mnt/b/y bs=100000 count=7 "
                                           "2>/tmp/err; echo rc=$?; cat /tmp/err")
        out = out.decode()
        assert code == 0 and "rc=0" not in out and "No space left" in out, (out, s.log())
        assert os.path.getsize(os.path.join(bdir, "y")) <= (1 << 20) - 800000
        delete(s, sid)
        for n in ("share-a", "share-b"):
            assert s.request("DELETE", "/v1/volumes/" + n).status == 204
    finally:
        s.request("PUT", "/v1/tenants/admin/quota", {"volume_mib": None})


def test_sendfile_from_volume_into_stdout_pipe(spaced):
    """busybox cat (the base template's) sendfile()s the file into its stdout pipe: the
    kernel holds the pipe's lock while the FUSE read waits for the agent's relay, so an
    agent reading that pipe on the thread that relays FUSE would wait forever (issue 12).
    The output must arrive whole, and the agent must answer the next command. The
    bounded timeout makes a hang fail instead of blocking the run."""
    s = spaced
    assert s.request("POST", "/v1/volumes", {"name": "sendfile"}).status == 201
    data = os.urandom(3 * 1024 * 1024)
    r = s.request("PUT", vfiles("sendfile", "/bigfile"), raw=data,
                  headers={"Content-Type": "application/octet-stream"})
    assert r.status == 200, r
    sid = create_mounting(s, [{"name": "sendfile", "path": "/mnt/v"}])
    out, code = output_within(s, sid, "cat /mnt/v/bigfile", 180)
    assert code == 0 and len(out) == len(data), (code, len(out), s.log())
    assert out == data
    # straight to stderr too, twice over, then the agent still answers
    out, code = output_within(s, sid, "cat /mnt/v/bigfile /mnt/v/bigfile >&2; echo done", 180)
    assert (out, code) == (b"done\n", 0), (out, code)
    assert output_within(s, sid, "echo still-answering", 60) == (b"still-answering\n", 0)
    delete(s, sid)
    assert s.request("DELETE", "/v1/volumes/sendfile").status == 204


def test_files_api_through_links_into_a_mount(spaced):
    """The sandbox's own files API never enters a mount, whatever leads there: links the
    guest plants elsewhere (to the mount point, to a dir and a file inside, one in the
    middle of a path, a chain of links) are refused like a path inside the mount, and
    the sandbox's agent still answers. Before, such a request passed the lexical check
    and the agent waited for FUSE replies only its own loop relays: the request and the
    sandbox hung. A listing of the mount's parent leaves the mount point out; a stat of
    the link itself works. The bounded request timeout makes a hang fail instead of
    blocking the run."""
    s = spaced
    assert s.request("POST", "/v1/volumes", {"name": "linked"}).status == 201
    r = s.request("PUT", vfiles("linked", "/f.txt"), raw=b"volume file\n",
                  headers={"Content-Type": "application/octet-stream"})
    assert r.status == 200, r
    sid = create_mounting(s, [{"name": "linked", "path": "/mnt/v"}])
    run(s, sid, "mkdir -p /mnt/v/d && echo in > /mnt/v/d/g && ln -s /mnt/v /tmp/l && "
                "ln -s /mnt/v/d /tmp/ld && ln -s /mnt/v/f.txt /tmp/lf && mkdir /tmp/mid && "
                "ln -s ../../mnt /tmp/mid/up && ln -s /tmp/c2 /tmp/c1 && ln -s l /tmp/c2")
    files = "/v1/sandboxes/%s/files" % sid

    def call(method, path, body=None, raw=None):
        try:
            return s.request(method, path, body, raw=raw, timeout=60)
        except OSError as e:  # socket timeout: the agent waits on itself
            raise AssertionError("%s %s: no answer in 60 s (%s): the agent hangs" % (method, path, e))

    def refused(r, what):
        assert r.status == 400 and "volume mount" in r.body.decode(), (what, r)

    def q(p):
        return urllib.parse.urlencode({"path": p})

    for p in ("/tmp/l/f.txt", "/tmp/lf", "/tmp/ld/g", "/tmp/mid/up/v/f.txt", "/tmp/c1/f.txt"):
        refused(call("GET", files + "?" + q(p)), ("read", p))
        refused(call("GET", files + "/stat?" + q(p + "/x")), ("stat", p))
        refused(call("PUT", files + "?" + q(p), raw=b"x"), ("write", p))
        refused(call("DELETE", files + "?" + q(p + "/x")), ("remove", p))
        refused(call("POST", files + "/mkdir", {"path": p + "/x"}), ("mkdir", p))
        refused(call("POST", files + "/rename", {"from": p + "/x", "to": "/tmp/moved"}), ("rename", p))
    for p in ("/tmp/l", "/tmp/ld", "/tmp/c1", "/tmp/mid/up/v"):
        refused(call("GET", files + "/list?" + q(p)), ("list", p))
    r = call("GET", files + "/list?" + q("/mnt"))
    assert r.status == 200 and [e["name"] for e in r.json["entries"]] == [], r
    r = call("GET", files + "/stat?" + q("/tmp/lf"))
    assert r.status == 200 and r.json["file"]["type"] == "symlink", r
    # the agent still answers, and the guest's own view through the links is intact
    assert output_within(s, sid, "cat /tmp/lf /tmp/c1/d/g", 60) == (b"volume file\nin\n", 0)
    delete(s, sid)
    assert s.request("DELETE", "/v1/volumes/linked").status == 204
