"""Volumes without a sandbox (/v1/volumes and their files API) on the fake-guest daemon:
create, list, get, delete, name rules, tenancy; files up and down, listings, removal;
escape attempts: "..", absolute paths through a link, and symlinks planted in the volume
directory as a guest (or a second sandbox mounting the volume) would plant them, to
/etc/shadow, to /etc and to a host directory outside: no request reads, writes, lists or
deletes anything outside the volume; the tenant's byte quota (volume_mib) on uploads;
data survives a spaced restart.

The create field "volumes" is checked here (API only); mounting them into real VMs is
tests/e2e/test_volume_mount.py."""
import glob
import os
import shutil
import stat
import subprocess
import urllib.parse

import pytest

from spacedlib import BUILD, Spaced, make_fake_guest, poll


def files(name, path, sub=""):
    return "/v1/volumes/%s/files%s?%s" % (name, sub, urllib.parse.urlencode({"path": path}))


def put(s, name, path, data, key="admin"):
    return s.request("PUT", files(name, path), raw=data, key=key,
                     headers={"Content-Type": "application/octet-stream"})


@pytest.fixture(scope="module")
def vs():
    guest = make_fake_guest()
    s = Spaced(guest).start()
    r = s.request("POST", "/v1/keys", {"tenant": "vol-other"})
    assert r.status == 201, r
    s.other = r.json["secret"]
    yield s
    s.stop()
    shutil.rmtree(guest, ignore_errors=True)


def voldir(s, name):
    """The volume's directory on the host (where a guest's writes would land)."""
    found = glob.glob(os.path.join(s.data_dir, "volumes", "*", name))
    assert len(found) == 1, found
    return found[0]


def test_create_list_get_delete(vs):
    s = vs
    r = s.request("POST", "/v1/volumes", {"name": "data-1"})
    assert r.status == 201 and r.json["volume"]["name"] == "data-1", r
    assert r.json["volume"]["created_at"]
    assert s.request("POST", "/v1/volumes", {"name": "data-1"}).status == 409
    for bad in ("", "Up", "-x", ".", "..", "a/b", "x" * 64, ".hidden"):
        r = s.request("POST", "/v1/volumes", {"name": bad})
        assert r.status == 400 and r.error_code() == "invalid_name", (bad, r)
    assert s.request("POST", "/v1/volumes", {"name": 7}).status == 400
    assert s.request("POST", "/v1/volumes", {"name": "a", "size": 1}).status == 400
    names = [v["name"] for v in s.request("GET", "/v1/volumes").json["volumes"]]
    assert "data-1" in names
    assert s.request("GET", "/v1/volumes/data-1").json["volume"]["name"] == "data-1"
    assert s.request("GET", "/v1/volumes/nope").status == 404
    # another tenant: nothing to see, same answer as a missing volume
    assert s.request("GET", "/v1/volumes", key=s.other).json["volumes"] == []
    r = s.request("GET", "/v1/volumes/data-1", key=s.other)
    assert r.status == 404 and r.error_code() == "not_found"
    assert put(s, "data-1", "/x", b"y", key=s.other).status == 404
    assert s.request("DELETE", "/v1/volumes/data-1", key=s.other).status == 404
    assert s.request("GET", "/v1/volumes", key=None).status == 401
    assert s.request("DELETE", "/v1/volumes/data-1").status == 204
    assert s.request("GET", "/v1/volumes/data-1").status == 404


def test_files_round_trip(vs):
    s = vs
    assert s.request("POST", "/v1/volumes", {"name": "f"}).status == 201
    data = bytes(range(256)) * 4096 + b"tail"  # 1 MiB + 4
    r = put(s, "f", "/deep/er/blob.bin", data)
    assert r.status == 200 and r.json["file"]["size"] == len(data), r
    r = s.request("GET", files("f", "/deep/er/blob.bin"))
    assert r.status == 200 and r.body == data
    assert put(s, "f", "/deep/small", b"v1").status == 200
    assert put(s, "f", "/deep/small", b"2").status == 200  # replaced, not appended
    assert s.request("GET", files("f", "/deep/small")).body == b"2"
    r = s.request("GET", files("f", "/deep", "/list"))
    assert [(e["name"], e["type"]) for e in r.json["entries"]] == [("er", "dir"), ("small", "file")]
    assert s.request("GET", files("f", "/missing")).status == 404
    assert s.request("GET", files("f", "/deep")).status == 409  # a directory
    assert s.request("DELETE", files("f", "/deep")).status == 409  # not empty (no recursive=true)
    assert s.request("DELETE", files("f", "/deep/small")).status == 204
    assert s.request("DELETE", files("f", "/deep/small")).status == 404
    assert s.request("DELETE", files("f", "/")).status == 400
    r = s.request("GET", "/v1/volumes/f/files")  # no path
    assert r.status == 400 and r.error_code() == "invalid_path"
    # the data is on the host, in the volume's directory
    with open(os.path.join(voldir(s, "f"), "deep", "er", "blob.bin"), "rb") as f:
        assert f.read() == data


def test_escapes_refused(vs, tmp_path):
    s = vs
    assert s.request("POST", "/v1/volumes", {"name": "esc"}).status == 201
    d = voldir(s, "esc")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"host secret")
    # planted as a guest would: links to host files and directories
    os.symlink("/etc/shadow", os.path.join(d, "shadow"))
    os.symlink("/etc", os.path.join(d, "etc"))
    os.symlink(str(outside), os.path.join(d, "out"))
    os.symlink("../../../..", os.path.join(d, "up"))
    for path in ("/shadow", "/etc/passwd", "/etc/shadow", "/out/secret", "/up/etc/passwd",
                 "/../../etc/passwd", "/a/../../etc/passwd", "/.."):
        r = s.request("GET", files("esc", path))
        assert r.status in (400, 404) and b"root:" not in r.body and b"host secret" not in r.body, (path, r)
    r = s.request("GET", files("esc", "/shadow"))
    assert r.status == 400 and r.error_code() == "symlink", r
    r = s.request("GET", files("esc", "/../x"))
    assert r.status == 400 and r.error_code() == "invalid_path", r
    for path in ("/etc", "/out", "/up"):
        r = s.request("GET", files("esc", path, "/list"))
        assert r.status == 400, (path, r)
    # writes through a link fail and leave the target alone
    assert put(s, "esc", "/out/secret", b"overwritten").status == 400
    assert put(s, "esc", "/out/new", b"x").status == 400
    assert put(s, "esc", "/shadow", b"x").status == 400
    assert put(s, "esc", "/../escaped", b"x").status == 400
    assert (outside / "secret").read_bytes() == b"host secret"
    assert not (outside / "new").exists() and not (tmp_path / "escaped").exists()
    # the listing shows the links as links
    r = s.request("GET", files("esc", "/", "/list"))
    types = {e["name"]: e["type"] for e in r.json["entries"]}
    assert types == {"shadow": "symlink", "etc": "symlink", "out": "symlink", "up": "symlink"}
    # deleting a link removes the link, and deleting the volume never follows one
    assert s.request("DELETE", files("esc", "/out/secret")).status == 400
    assert s.request("DELETE", files("esc", "/out")).status == 204
    assert (outside / "secret").read_bytes() == b"host secret"
    os.symlink(str(outside), os.path.join(d, "out2"))
    assert s.request("DELETE", "/v1/volumes/esc").status == 204
    assert (outside / "secret").read_bytes() == b"host secret"
    assert os.path.exists("/etc/passwd")


def test_special_files_refused_without_blocking(vs):
    """A FIFO or a device node a guest leaves in a volume is refused at once (409
    not_a_file), for reads and writes: opening a FIFO for reading blocks until a writer
    comes, which stalled spaced's whole event loop before (and every other client)."""
    s = vs
    assert s.request("POST", "/v1/volumes", {"name": "fifo"}).status == 201
    d = voldir(s, "fifo")
    os.mkfifo(os.path.join(d, "pipe"))
    os.mknod(os.path.join(d, "null"), 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    for path in ("/pipe", "/null"):
        r = s.request("GET", files("fifo", path), timeout=10)
        assert r.status == 409 and r.error_code() == "not_a_file", (path, r)
        r = put(s, "fifo", path, b"data")
        assert r.status == 409 and r.error_code() == "not_a_file", (path, r)
    assert s.request("GET", "/healthz").status == 200  # the loop still answers


def test_cli(vs, tmp_path):
    env = dict(os.environ, SPACE_URL=vs.url, SPACE_API_KEY=vs.admin_key)

    def space(*args, input=None):
        return subprocess.run([os.path.join(BUILD, "space"), *args], input=input, env=env,
                              capture_output=True, timeout=60)
    assert space("volume", "create", "cli-v").stdout == b"cli-v\n"
    assert space("volume", "put", "-", "cli-v:dir/a.txt", input=b"from stdin").returncode == 0
    local = tmp_path / "a.txt"
    assert space("volume", "get", "cli-v:/dir/a.txt", str(local)).returncode == 0
    assert local.read_bytes() == b"from stdin"
    assert b"cli-v" in space("volume", "ls").stdout
    r = space("volume", "get", "cli-v:/nope", "-")
    assert r.returncode == 1 and b"no such file" in r.stderr, r
    assert space("volume", "bogus").returncode == 2
    # create --volume NAME:/PATH: a malformed one is refused before any request; a
    # well-formed one reaches the API (which says the volume does not exist)
    r = space("create", "--template", "fake", "--volume", "cli-v/mnt")
    assert r.returncode == 2 and b"NAME:/PATH" in r.stderr, r
    r = space("create", "--template", "fake", "--volume", "nope:/mnt/v")
    assert r.returncode == 1 and b"volume nope not found" in r.stderr, r
    assert space("volume", "rm", "cli-v").returncode == 0
    assert b"cli-v" not in space("volume", "ls").stdout


def test_byte_quota(vs):
    """volume_mib: uploads that would take the tenant's volumes past it get 507
    quota_exceeded (by Content-Length before the file is touched, or mid-stream for a
    chunked body); a replaced file's bytes count back; usage shows in /v1/quota; other
    tenants are unaffected."""
    s = vs
    r = s.request("POST", "/v1/keys", {"tenant": "vol-quota"})
    assert r.status == 201, r
    k = r.json["secret"]
    r = s.request("PUT", "/v1/tenants/vol-quota/quota", {"volume_mib": 1})
    assert r.status == 200 and r.json["limits"]["volume_mib"] == 1, r
    assert s.request("POST", "/v1/volumes", {"name": "q1"}, key=k).status == 201
    assert s.request("POST", "/v1/volumes", {"name": "q2"}, key=k).status == 201
    kib = 1024
    assert put(s, "q1", "/a", b"a" * 600 * kib, key=k).status == 200
    r = put(s, "q2", "/b", b"b" * 600 * kib, key=k)  # the quota spans all its volumes
    assert r.status == 507 and r.error_code() == "quota_exceeded", r
    assert "volume_mib" in r.json["error"]["message"], r
    # refused by its length: the existing file is not touched
    r = put(s, "q1", "/a", b"A" * 2048 * kib, key=k)
    assert r.status == 507, r
    assert s.request("GET", files("q1", "/a"), key=k).body == b"a" * 600 * kib
    # replacing /a frees its 600 KiB first
    assert put(s, "q1", "/a", b"c" * 900 * kib, key=k).status == 200
    # a chunked body (no length) is cut when it passes the quota
    r = s.request("PUT", files("q2", "/chunked"), key=k,
                  raw=iter([b"d" * 64 * kib] * 4),
                  headers={"Content-Type": "application/octet-stream"})
    assert r.status == 507 and r.error_code() == "quota_exceeded", r
    assert s.request("GET", files("q2", "/chunked"), key=k).body == b""  # left empty
    got = s.request("GET", "/v1/quota", key=k).json
    assert got["limits"]["volume_mib"] == 1 and got["usage"]["volume_mib"] == 1, got
    # other tenants: no limit
    assert s.request("POST", "/v1/volumes", {"name": "q-admin"}).status == 201
    assert put(s, "q-admin", "/big", b"x" * 2048 * kib).status == 200
    assert s.request("DELETE", files("q-admin", "/big")).status == 204
    # deleting makes room again
    assert s.request("DELETE", files("q1", "/a"), key=k).status == 204
    assert put(s, "q2", "/b", b"b" * 900 * kib, key=k).status == 200
    r = s.request("PUT", "/v1/tenants/vol-quota/quota", {"volume_mib": None})
    assert r.status == 200 and r.json["limits"]["volume_mib"] == 0, r
    assert put(s, "q2", "/c", b"c" * 900 * kib, key=k).status == 200


def test_sandbox_volumes_field(vs):
    """The create field "volumes": shape, paths and ownership are checked before anything
    runs; a volume a sandbox mounts cannot be deleted (409 naming the sandbox)."""
    s = vs
    assert s.request("POST", "/v1/volumes", {"name": "m1"}).status == 201
    assert s.request("POST", "/v1/volumes", {"name": "m2"}).status == 201

    def create(vols, key="admin"):
        return s.request("POST", "/v1/sandboxes", {"template": "fake", "volumes": vols}, key=key)

    bad = [
        "m1", [{"name": "m1"}], [{"name": "m1", "path": "/mnt/a", "x": 1}],
        [{"name": "M!", "path": "/mnt/a"}], [{"name": "m1", "path": "mnt"}],
        [{"name": "m1", "path": "/"}], [{"name": "m1", "path": "/proc/x"}],
        [{"name": "m1", "path": "/sys"}], [{"name": "m1", "path": "/dev/shm"}],
        [{"name": "m1", "path": "/mnt/../etc"}], [{"name": "m1", "path": "/mnt/a/"}],
        [{"name": "m1", "path": "/mnt//a"}], [{"name": "m1", "path": "/mnt/a,b"}],
        [{"name": "m1", "path": "/mnt/a"}, {"name": "m2", "path": "/mnt/a"}],
        [{"name": "m1", "path": "/mnt/a"}, {"name": "m2", "path": "/mnt/a/b"}],
        [{"name": "m1", "path": "/mnt/%d" % i} for i in range(9)],
    ]
    for vols in bad:
        r = create(vols)
        assert r.status == 400 and r.error_code() == "invalid_request", (vols, r)
    # a missing volume, and another tenant's, are the same 404
    r = create([{"name": "nope", "path": "/mnt/a"}])
    assert r.status == 404 and r.error_code() == "not_found", r
    r = create([{"name": "m1", "path": "/mnt/a"}], key=s.other)
    assert r.status == 404 and r.error_code() == "not_found", r

    r = create([{"name": "m1", "path": "/mnt/a"}, {"name": "m2", "path": "/mnt/b"}])
    assert r.status == 202, r
    sid = r.json["sandbox"]["id"]
    got = s.request("GET", "/v1/sandboxes/" + sid).json["sandbox"]["volumes"]
    assert got == [{"name": "m1", "path": "/mnt/a"}, {"name": "m2", "path": "/mnt/b"}]
    r = s.request("DELETE", "/v1/volumes/m1")
    assert r.status == 409 and r.error_code() == "volume_in_use" and sid in r.json["error"]["message"], r
    r = s.request("DELETE", "/v1/sandboxes/" + sid)
    assert s.wait_op(r.json["operation"]["id"])["state"] in ("succeeded", "failed")
    assert s.request("DELETE", "/v1/volumes/m1").status == 204
    assert s.request("DELETE", "/v1/volumes/m2").status == 204


def test_data_survives_restart(fresh_spaced):
    guest = make_fake_guest()
    try:
        s = fresh_spaced(guest)
        assert s.request("POST", "/v1/volumes", {"name": "keep"}).status == 201
        assert put(s, "keep", "/a.txt", b"kept").status == 200
        s.stop(cleanup=False)
        s.start()
        assert [v["name"] for v in s.request("GET", "/v1/volumes").json["volumes"]] == ["keep"]
        assert s.request("GET", files("keep", "/a.txt")).body == b"kept"
    finally:
        shutil.rmtree(guest, ignore_errors=True)


def trash_empty(s):
    vols = os.path.join(s.data_dir, "volumes")
    left = [n for n in os.listdir(vols) if n.startswith(".trash")]
    return all(not os.listdir(os.path.join(vols, n)) for n in left if os.path.isdir(os.path.join(vols, n)))


def test_recursive_remove_at_once_and_never_through_links(vs, tmp_path):
    """A directory with files in it goes only with recursive=true (409 not_empty
    without), all at once: the 204 comes when the tree is renamed away, its files are
    deleted in the background (the trash empties), its bytes stop counting for the
    quota at once, and links in it are removed, never followed (a host directory a guest
    linked to keeps its files)."""
    s = vs
    r = s.request("POST", "/v1/keys", {"tenant": "vol-rm"})
    assert r.status == 201, r
    k = r.json["secret"]
    assert s.request("PUT", "/v1/tenants/vol-rm/quota", {"volume_mib": 1}).status == 200
    assert s.request("POST", "/v1/volumes", {"name": "tree"}, key=k).status == 201
    for i in range(200):
        assert put(s, "tree", "/t/d%d/f%d" % (i % 7, i), b"x" * 4096, key=k).status == 200
    assert put(s, "tree", "/keep", b"kept", key=k).status == 200
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"host secret")
    os.symlink(str(outside), os.path.join(voldir(s, "tree"), "t", "d0", "out"))
    r = s.request("DELETE", files("tree", "/t"), key=k)
    assert r.status == 409 and r.error_code() == "not_empty", r
    r = s.request("DELETE", files("tree", "/t") + "&recursive=maybe", key=k)
    assert r.status == 400, r
    assert put(s, "tree", "/big", b"y" * 900 * 1024, key=k).status == 507  # 800 KiB in /t
    assert s.request("DELETE", files("tree", "/t") + "&recursive=true", key=k).status == 204
    assert s.request("GET", files("tree", "/t", "/list"), key=k).status == 404
    r = s.request("GET", files("tree", "/", "/list"), key=k)
    assert [e["name"] for e in r.json["entries"]] == ["keep"], r
    assert put(s, "tree", "/big", b"y" * 900 * 1024, key=k).status == 200  # room at once
    poll(lambda: trash_empty(s), timeout=60, every=0.1)
    assert (outside / "secret").read_bytes() == b"host secret"
    # a whole volume goes the same way
    assert s.request("DELETE", "/v1/volumes/tree", key=k).status == 204
    assert s.request("GET", "/v1/volumes/tree", key=k).status == 404
    poll(lambda: trash_empty(s), timeout=60, every=0.1)
    assert (outside / "secret").read_bytes() == b"host secret"


def test_trash_left_by_a_killed_spaced_is_deleted_at_start(fresh_spaced):
    """A removal renamed into the trash whose deletion a kill interrupted (and a sweep
    interrupted the same way) is finished by the next start; volumes are untouched."""
    guest = make_fake_guest()
    try:
        s = fresh_spaced(guest)
        assert s.request("POST", "/v1/volumes", {"name": "stay"}).status == 201
        assert put(s, "stay", "/a", b"still here").status == 200
        s.kill9()
        vols = os.path.join(s.data_dir, "volumes")
        for d in (".trash/rm0/sub", ".trash-123/rm1"):
            os.makedirs(os.path.join(vols, d))
            with open(os.path.join(vols, d, "f"), "wb") as f:
                f.write(b"junk")
        s.start()
        poll(lambda: not [n for n in os.listdir(vols) if n.startswith(".trash")], timeout=60, every=0.1)
        assert s.request("GET", files("stay", "/a")).body == b"still here"
        assert [v["name"] for v in s.request("GET", "/v1/volumes").json["volumes"]] == ["stay"]
    finally:
        shutil.rmtree(guest, ignore_errors=True)
