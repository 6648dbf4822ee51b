"""Templates built through the API (POST /v1/templates) in a build VM on top of `base`:
every step kind and its effect in a sandbox, start command and ready check, failing
steps, tenancy, deletion, hostile specs, and snapshot versions that follow the guest.

The VM tests skip (saying why) when guest artifacts are missing; the validation tests
run on the fake-guest daemon without VMs."""
import base64
import json
import os
import shutil
import subprocess
import time
import urllib.parse

import pytest

from spacedlib import GUEST, RUN_DIR, poll, vm_missing
from test_api import tenant_key
from test_sessions import Stream, collect, new_session

# Binary-safe: every byte value, NUL and CR/LF included, not a multiple of 3 long.
BLOB = bytes(range(256)) * 40 + b"\0\r\n\xff" + os.urandom(1001)
# The start command marks itself, records who and where it runs, then becomes ready
# only after a delay long enough that a snapshot taken before the ready check passed
# would show no ready marker in a clone.
START = ("id -un > /tmp/start-user; pwd > /tmp/start-pwd; echo \"$GREETING\" > /tmp/start-env; "
         "sleep 20; touch /tmp/ready-marker; exec sleep 100000")
READY = "test -f /tmp/ready-marker"


def b64(data):
    return base64.b64encode(data).decode()


def unique(prefix):
    return "%s%d" % (prefix, int(time.time() * 1000) % 10 ** 9)


def run(sp, sid, cmd, key="admin"):
    """Runs cmd in the sandbox; returns (stdout text, exit code)."""
    s = new_session(sp, sid, {"cmd": cmd}, key=key)
    st = Stream(sp, s["attach_url"], s["attach_token"])
    assert st.status == 200, st.resp.read()
    res = collect(st.events())
    st.close()
    return res["stdout"].decode(errors="replace"), res["exit"]["code"]


def build(sp, spec, key="admin"):
    r = sp.request("POST", "/v1/templates", spec, key=key)
    assert r.status == 202, r
    assert r.json["operation"]["kind"] == "template_build"
    return sp.wait_op(r.json["operation"]["id"], timeout=900, key=key)


def create(sp, template, key="admin"):
    out = sp.create({"template": template}, key=key)
    op = sp.wait_op(out["operation"]["id"], key=key)
    assert op["state"] == "succeeded", (op, sp.log())
    return out["sandbox"]["id"]


def delete(sp, sid, key="admin"):
    r = sp.request("DELETE", "/v1/sandboxes/" + sid, key=key)
    assert r.status == 202, r
    assert sp.wait_op(r.json["operation"]["id"], key=key)["state"] == "succeeded"


def template(sp, name, key="admin"):
    r = sp.request("GET", "/v1/templates/" + name, key=key)
    return r.json["template"] if r.status == 200 else None


# ---- a template's shape --------------------------------------------------------------

def test_template_shape_is_the_default(spaced):
    """A create that names no size gets the one template.json gives (python: 512 MiB; a
    template made for pandas needs more than the 256 MiB default); a size in the body
    still wins."""
    with open(os.path.join(spaced.guest_dir, "templates", "python", "template.json")) as f:
        want = json.load(f)["memory_mib"]
    assert want != 256  # else this test could not tell the template's size from the default
    sid = create(spaced, "python")
    try:
        r = spaced.request("GET", "/v1/sandboxes/" + sid)
        assert r.status == 200 and r.json["sandbox"]["memory_mib"] == want, r
        out, code = run(spaced, sid, "awk '/MemTotal/ {print int($2 / 1024)}' /proc/meminfo")
        assert code == 0 and int(out) > 256, out  # the guest has it, not only the record
    finally:
        delete(spaced, sid)
    out = spaced.create({"template": "python", "memory_mib": 256})
    sid = out["sandbox"]["id"]
    try:
        assert spaced.wait_op(out["operation"]["id"])["state"] == "succeeded"
        r = spaced.request("GET", "/v1/sandboxes/" + sid)
        assert r.json["sandbox"]["memory_mib"] == 256, r
    finally:
        delete(spaced, sid)


# ---- a template with every step kind ---------------------------------------------------

@pytest.fixture(scope="module")
def tenant_a(spaced):
    return tenant_key(spaced, unique("tpl-a"))


@pytest.fixture(scope="module")
def built(spaced, tenant_a):
    """A template built by tenant A with every step kind, start and ready."""
    name = unique("every")
    spec = {
        "name": name, "base": "base", "description": "every step kind",
        "steps": [
            # Debian's busybox has no adduser applet: a user is two lines
            {"run": "echo 'svc:x:1500:1500::/srv:/bin/sh' >> /etc/passwd; "
                    "echo 'svc:x:1500:' >> /etc/group"},
            {"copy": {"dst": "/opt/data/blob.bin", "content": b64(BLOB), "mode": 0o640, "owner": "svc"}},
            {"env": {"GREETING": "hello templates", "LANG": "C"}},
            {"user": "svc"},
            {"workdir": "/srv/app"},
            {"copy": {"dst": "rel.txt", "content": b64(b"relative\n")}},
            {"run": "id -u > build-uid; pwd > build-pwd; echo \"$GREETING\" > build-env"},
        ],
        "start": START,
        "ready": READY,
    }
    op = build(spaced, spec, key=tenant_a)
    assert op["state"] == "succeeded" and op["progress"] == 100, (op, spaced.log())
    return name


def test_build_records_defaults(spaced, tenant_a, built):
    t = template(spaced, built, key=tenant_a)
    assert t["state"] == "ready" and t["builtin"] is False and t["description"] == "every step kind"
    # base's defaults (LANG, /home/user, user) changed by the steps
    assert t["defaults"] == {"env": {"LANG": "C", "GREETING": "hello templates"},
                             "workdir": "/srv/app", "user": "svc"}
    assert t["start"] == START and t["ready"] == READY
    with open(os.path.join(spaced.data_dir, "templates", built, "template.json")) as f:
        meta = json.load(f)
    assert meta["base"] == "base" and meta["defaults"] == t["defaults"]
    # copy contents are not kept in the metadata, only a hash of them
    copy = meta["spec"]["steps"][1]["copy"]
    assert "content" not in copy and len(copy["content_sha256_of_base64"]) == 64


def test_steps_take_effect_in_a_sandbox(spaced, tenant_a, built):
    sid = create(spaced, built, key=tenant_a)
    try:
        q = urllib.parse.urlencode({"path": "/opt/data/blob.bin"})
        r = spaced.request("GET", "/v1/sandboxes/%s/files?%s" % (sid, q), key=tenant_a)
        assert r.status == 200 and r.body == BLOB
        out, code = run(spaced, sid, "stat -c '%U %a' /opt/data/blob.bin /srv/app/rel.txt /srv/app; "
                                     "cat /srv/app/build-uid /srv/app/build-pwd /srv/app/build-env "
                                     "/srv/app/rel.txt", key=tenant_a)
        assert code == 0, out
        assert out.split("\n")[:7] == ["svc 640", "root 644", "svc 755", "1500", "/srv/app",
                                       "hello templates", "relative"], out
        # the template's env is every sandbox command's default env
        out, code = run(spaced, sid, "echo \"$GREETING|$LANG\"", key=tenant_a)
        assert (out, code) == ("hello templates|C\n", 0)
        # the start command runs (cold boot: started after the agent's refresh) as the
        # default user, in the default workdir, with the default env
        poll(lambda: run(spaced, sid, "cat /tmp/start-user /tmp/start-pwd /tmp/start-env",
                         key=tenant_a)[0] == "svc\n/srv/app\nhello templates\n", timeout=120)
    finally:
        delete(spaced, sid, key=tenant_a)


def test_default_user_and_workdir_for_commands_and_files(spaced, tenant_a, built):
    """Requests that name no user act as the template's default user: commands start in
    its workdir, files are written as that user; naming another user still works, and
    that user starts at home (the workdir goes with the default user)."""
    sid = create(spaced, built, key=tenant_a)
    try:
        assert run(spaced, sid, "id -un; pwd", key=tenant_a) == ("svc\n/srv/app\n", 0)
        s = new_session(spaced, sid, {"cmd": "id -un; pwd", "user": "root"}, key=tenant_a)
        st = Stream(spaced, s["attach_url"], s["attach_token"])
        assert collect(st.events())["stdout"] == b"root\n/root\n"
        st.close()
        q = urllib.parse.urlencode({"path": "/srv/app/by-default.txt"})
        r = spaced.request("PUT", "/v1/sandboxes/%s/files?%s" % (sid, q), raw=b"x", key=tenant_a,
                           headers={"Content-Type": "application/octet-stream"})
        assert r.status == 200 and r.json["file"]["owner"] == "svc", r
        # a relative path is under the default user's home (svc's is /srv)
        q = urllib.parse.urlencode({"path": "rel-default.txt"})
        r = spaced.request("PUT", "/v1/sandboxes/%s/files?%s" % (sid, q), raw=b"y", key=tenant_a,
                           headers={"Content-Type": "application/octet-stream"})
        assert r.status == 200 and r.json["file"]["path"] == "/srv/rel-default.txt", r
        assert r.json["file"]["owner"] == "svc", r
    finally:
        delete(spaced, sid, key=tenant_a)


def test_snapshot_waits_for_ready_and_keeps_start_running(spaced, tenant_a, built):
    # Any create asks for the snapshot; it is taken only once the ready check passed.
    first = create(spaced, built, key=tenant_a)
    delete(spaced, first, key=tenant_a)
    poll(lambda: template(spaced, built, key=tenant_a)["snapshots"] >= 1, timeout=600)
    sid = create(spaced, built, key=tenant_a)
    try:
        # A restored clone: the ready marker (written 20 s after the start command began)
        # is already there, and the start command is still running, started only once.
        out, code = run(spaced, sid, "test -f /tmp/ready-marker && echo ready; "
                                     "ps -o args | grep -c '^sleep 100000'", key=tenant_a)
        assert (out, code) == ("ready\n1\n", 0)
    finally:
        delete(spaced, sid, key=tenant_a)


# ---- failing builds ----------------------------------------------------------------------

@pytest.mark.parametrize("steps,index,words", [
    ([{"run": "true"}, {"run": "echo bad-output; exit 7"}], 2, ["exited with 7", "bad-output"]),
    ([{"copy": {"dst": "/etc/passwd/x", "content": b64(b"x")}}], 1, ["copy: /etc/passwd/x"]),
    ([{"env": {"A": "b"}}, {"user": "nobody-here"}], 2, ["nobody-here", "does not exist"]),
    ([{"copy": {"dst": "/x", "content": b64(b"x"), "owner": "ghost"}}], 1, ["exited with"]),
])
def test_failing_step_fails_the_build(spaced, steps, index, words):
    name = unique("fail")
    op = build(spaced, {"name": name, "base": "base", "steps": steps})
    assert op["state"] == "failed", op
    msg = op["error"]["message"]
    assert op["error"]["code"] == "build_step_failed" and ("step %d " % index) in msg, msg
    for w in words:
        assert w in msg, msg
    t = template(spaced, name)
    assert t["state"] == "failed" and t["failure"] == msg
    assert spaced.request("POST", "/v1/sandboxes", {"template": name}).json["error"]["code"] == "unknown_template"


# ---- tenancy and deletion ------------------------------------------------------------------

def test_other_tenants_do_not_see_or_use_it(spaced, tenant_a, built):
    b = tenant_key(spaced, unique("tpl-b"))
    names = [t["name"] for t in spaced.request("GET", "/v1/templates", key=b).json["templates"]]
    assert "base" in names and built not in names
    assert built in [t["name"] for t in spaced.request("GET", "/v1/templates", key=tenant_a).json["templates"]]
    for key in (b, "admin"):  # admins are a tenant like any other here
        assert spaced.request("GET", "/v1/templates/" + built, key=key).status == 404
        assert spaced.request("DELETE", "/v1/templates/" + built, key=key).status == 404
        r = spaced.request("POST", "/v1/sandboxes", {"template": built}, key=key)
        assert r.status == 400 and r.error_code() == "unknown_template", r
        r = spaced.request("POST", "/v1/templates", {"name": unique("on"), "base": built}, key=key)
        assert r.status == 400 and r.error_code() == "unknown_template", r
    # names are one namespace: B cannot take A's name
    r = spaced.request("POST", "/v1/templates", {"name": built, "base": "base"}, key=b)
    assert r.status == 409, r
    r = spaced.request("POST", "/v1/templates", {"name": "base", "base": "base"}, key=b)
    assert r.status == 409, r


def test_delete(spaced, tenant_a):
    name = unique("del")
    assert build(spaced, {"name": name, "base": "base", "steps": [{"run": "echo x > /x"}]},
                 key=tenant_a)["state"] == "succeeded"
    sid = create(spaced, name, key=tenant_a)
    r = spaced.request("DELETE", "/v1/templates/" + name, key=tenant_a)
    assert r.status == 409 and r.error_code() == "template_in_use", r
    delete(spaced, sid, key=tenant_a)
    poll(lambda: spaced.request("DELETE", "/v1/templates/" + name, key=tenant_a).status == 200, timeout=300)
    assert spaced.request("GET", "/v1/templates/" + name, key=tenant_a).status == 404
    assert not os.path.exists(os.path.join(spaced.data_dir, "templates", name))
    assert spaced.request("DELETE", "/v1/templates/base", key=tenant_a).status == 409
    # the name is free again
    r = spaced.request("POST", "/v1/templates", {"name": name, "base": "base"}, key=tenant_a)
    assert r.status == 202, r
    spaced.wait_op(r.json["operation"]["id"], timeout=900, key=tenant_a)


# ---- hostile specs (no VM needed) ------------------------------------------------------------

def copy(**kw):
    c = {"dst": "/f", "content": b64(b"x")}
    c.update(kw)
    return {"name": "h1", "base": "fake", "steps": [{"copy": c}]}


def steps(*s):
    return {"name": "h1", "base": "fake", "steps": list(s)}


@pytest.mark.parametrize("spec,words", [
    (copy(dst="/a/../etc/shadow"), "'..'"),
    (copy(dst="../x"), "'..'"),
    (copy(dst="/a\u0000b"), "NUL"),
    (copy(dst="/dir/"), "trailing"),
    (copy(dst="/a\nb"), "control"),
    (copy(content="not base64!"), "base64"),
    (copy(content="eA = ="), "base64"),
    (copy(mode=0o10000), "mode"),
    (copy(mode=-1), "mode"),
    (copy(mode="0644"), "mode"),
    (copy(owner="-rf"), "owner"),
    (copy(owner="root;reboot"), "owner"),
    (copy(owner="a:b:c"), "owner"),
    (copy(src="files/app.py"), "content"),
    (copy(extra=1), "unknown field"),
    ({"name": "h1", "base": "fake", "steps": [{"copy": {"dst": "/f"}}]}, "content"),
    (steps({"workdir": "relative"}), "absolute"),
    (steps({"workdir": "/a/../b"}), "'..'"),
    (steps({"user": "bad name"}), "user"),
    (steps({"user": "-x"}), "user"),
    (steps({"env": {"1X": "v"}}), "1X"),
    (steps({"env": {"X": "a\nb"}}), "newline"),
    (steps({"env": {"X": 1}}), "string"),
    (steps({"run": "a\u0000b"}), "NUL"),
    (steps({"run": ""}), "run"),
    (steps({"frobnicate": "x"}), "unknown step"),
    (steps({"run": "a", "user": "b"}), "exactly one"),
    (steps(*[{"run": "true"}] * 65), "at most 64"),
    ({"name": "h1", "base": "fake", "size_mib": 512}, "size_mib"),
    ({"name": "h1", "base": "fake", "packages": ["curl"]}, "packages"),
    ({"name": "h1", "base": "scratch-busybox"}, "build-template.sh"),
    ({"name": "h1", "base": "fake", "from": "other"}, "not both"),
    ({"name": "h1", "base": "fake", "start": 3}, "start"),
    ({"name": "h1", "base": "fake", "vcpus": 99}, "vcpus"),
    ({"name": "../x", "base": "fake"}, "name"),
])
def test_hostile_spec_rejected(api_spaced, spec, words):
    r = api_spaced.request("POST", "/v1/templates", spec)
    assert r.status == 400, r
    assert words in r.json["error"]["message"], r


def test_copy_size_limits(api_spaced):
    r = api_spaced.request("POST", "/v1/templates", copy(content=b64(b"\0" * (8 * 1024 * 1024 + 1))))
    assert r.status == 400 and r.error_code() == "too_large", r
    five = b64(b"\1" * (5 * 1024 * 1024))
    spec = steps({"copy": {"dst": "/a", "content": five}}, {"copy": {"dst": "/b", "content": five}},
                 {"copy": {"dst": "/c", "content": b64(b"x")}})
    r = api_spaced.request("POST", "/v1/templates", spec)
    assert r.status == 400 and r.error_code() == "too_large" and "in total" in r.json["error"]["message"], r
    r = api_spaced.request("POST", "/v1/templates", raw=b"{" + b" " * (16 * 1024 * 1024) + b"}")
    assert r.status == 413, r


def test_from_is_an_alias_of_base(api_spaced):
    r = api_spaced.request("POST", "/v1/templates", {"name": "alias", "from": "fake"})
    assert r.status == 202, r
    api_spaced.wait_op(r.json["operation"]["id"])  # fails: the fake guest cannot boot
    with_spec = api_spaced.request("GET", "/v1/templates/alias").json["template"]
    assert with_spec["state"] == "failed"


# ---- snapshot versions follow the guest ------------------------------------------------------

def versions(sp):
    return {v["version"]: v for v in template(sp, "base")["versions"]}


def chain(sp, sid):
    with open(os.path.join(sp.data_dir, "sandboxes", sid, "backing.json")) as f:
        return [layer["path"] for layer in json.load(f)]


def test_snapshot_version_follows_the_guest(fresh_spaced):
    why = vm_missing()
    if why:
        pytest.skip(why)
    # A private copy of the guest dir, so changing its initramfs touches nobody else.
    guest = os.path.join(RUN_DIR, unique("guest"))
    os.makedirs(os.path.join(guest, "templates"))
    for f in ("vmlinux", "initramfs.cpio"):
        shutil.copy2(os.path.join(GUEST, f), os.path.join(guest, f))
    os.symlink(os.path.join(GUEST, "templates", "base"), os.path.join(guest, "templates", "base"))
    sp = fresh_spaced(guest)
    try:
        delete(sp, create(sp, "base"))  # cold boot; starts the first snapshot version
        v1 = poll(lambda: [k for k, v in versions(sp).items() if v["state"] == "ready"], timeout=600)[0]
        old = create(sp, "base")  # restored from v1: its disk chain names v1
        assert any("-" + v1 + "/" in p for p in chain(sp, old)), chain(sp, old)

        # "Rebuild" the guest: a new initramfs file (same bytes, new identity).
        init = os.path.join(guest, "initramfs.cpio")
        shutil.copy2(init, init + ".new")
        os.replace(init + ".new", init)
        now = time.time() + 5
        os.utime(init, (now, now))

        fresh = create(sp, "base")  # must not restore v1: cold boot, new version building
        assert not any("-" + v1 + "/" in p for p in chain(sp, fresh)), chain(sp, fresh)
        vs = poll(lambda: [k for k, v in versions(sp).items() if k != v1 and v["state"] == "ready"], timeout=600)
        v2 = vs[0]
        assert versions(sp)[v2]["current"] is True and versions(sp)[v1]["current"] is False
        # v1 stays while a sandbox (of any state: here a stopped one) still uses it
        r = sp.request("POST", "/v1/sandboxes/%s/stop" % old)
        assert sp.wait_op(r.json["operation"]["id"])["state"] == "succeeded"
        assert versions(sp)[v1]["in_use"] == 1
        newer = create(sp, "base")
        assert any("-" + v2 + "/" in p for p in chain(sp, newer)), chain(sp, newer)
        assert v1 in versions(sp)
        for sid in (old, fresh, newer):
            delete(sp, sid)
        poll(lambda: v1 not in versions(sp), timeout=60)
        assert v2 in versions(sp)
    finally:
        shutil.rmtree(guest, ignore_errors=True)


def test_builtin_image_rebuild_keeps_old_disks(fresh_spaced):
    """A rebuilt built-in image (guest/build-template.sh renames a new rootfs.ext4 into
    place) never changes the disk existing sandboxes back onto: spaced uses a hard link
    of the image it pinned, and makes a new pin for the new image."""
    why = vm_missing()
    if why:
        pytest.skip(why)
    guest = os.path.join(RUN_DIR, unique("guest"))
    tdir = os.path.join(guest, "templates", "base")
    os.makedirs(tdir)
    for f in ("vmlinux", "initramfs.cpio"):
        os.symlink(os.path.join(GUEST, f), os.path.join(guest, f))
    src = os.path.join(GUEST, "templates", "base")
    subprocess.run(["cp", "--sparse=always", os.path.join(src, "rootfs.ext4"), tdir], check=True)
    shutil.copy(os.path.join(src, "template.json"), tdir)
    sp = fresh_spaced(guest)
    try:
        old = create(sp, "base")
        p1 = chain(sp, old)[-1]
        assert p1.startswith(os.path.join(sp.data_dir, "images") + "/"), chain(sp, old)
        ino1 = os.stat(p1).st_ino
        assert ino1 == os.stat(os.path.join(tdir, "rootfs.ext4")).st_ino

        # The rebuild: a new file renamed over the old one, a new build_key.
        img = os.path.join(tdir, "rootfs.ext4")
        subprocess.run(["cp", "--sparse=always", img, img + ".new"], check=True)
        os.replace(img + ".new", img)
        with open(os.path.join(tdir, "template.json")) as f:
            meta = json.load(f)
        meta["build_key"] = "f" * 64
        with open(os.path.join(tdir, "template.json"), "w") as f:
            json.dump(meta, f)

        new = create(sp, "base")
        p2 = chain(sp, new)[-1]
        assert p2 != p1 and os.path.basename(p2) == "base-" + "f" * 16 + ".ext4", chain(sp, new)
        assert os.stat(p1).st_ino == ino1  # the old sandbox's disk is untouched
        r = sp.request("POST", "/v1/sandboxes/%s/stop" % old)
        assert sp.wait_op(r.json["operation"]["id"])["state"] == "succeeded"
        r = sp.request("POST", "/v1/sandboxes/%s/start" % old)
        assert sp.wait_op(r.json["operation"]["id"])["state"] == "succeeded"
        assert run(sp, old, "echo alive") == ("alive\n", 0)
        for sid in (old, new):
            delete(sp, sid)
        # unused, not current: swept (after the snapshot version made from it)
        poll(lambda: not os.path.exists(p1), timeout=600)
        assert os.path.exists(p2)
    finally:
        shutil.rmtree(guest, ignore_errors=True)


def test_data_dir_from_before_images_by_digest(fresh_spaced):
    """A built template's image is used under its digest name (images/sha256-<hex>.ext4,
    a hard link of the build's rootfs.ext4). A data dir from before that (sandbox chains
    naming templates/<name>/rootfs.ext4, no digest-named file) still starts, and its
    suspended sandbox resumes on the chain it recorded; new sandboxes get the digest
    name (the link is made on first use)."""
    why = vm_missing()
    if why:
        pytest.skip(why)
    sp = fresh_spaced()
    name = unique("legacy")
    op = build(sp, {"name": name, "base": "base", "steps": [{"run": "echo old-layout > /etc/legacy"}]})
    assert op["state"] == "succeeded", (op, sp.log())
    tdir = os.path.join(sp.data_dir, "templates", name)
    with open(os.path.join(tdir, "template.json")) as f:
        digest = json.load(f)["sha256"]
    cas = os.path.join(sp.data_dir, "images", "sha256-%s.ext4" % digest)
    old = create(sp, name)
    assert chain(sp, old)[-1] == cas, chain(sp, old)
    assert os.stat(cas).st_ino == os.stat(os.path.join(tdir, "rootfs.ext4")).st_ino
    r = sp.request("POST", "/v1/sandboxes/%s/suspend" % old)
    assert sp.wait_op(r.json["operation"]["id"])["state"] == "succeeded"

    # The data dir as the spaced before images by digest left it.
    sp.stop(cleanup=False)
    backing = os.path.join(sp.data_dir, "sandboxes", old, "backing.json")
    with open(backing) as f:
        layers = json.load(f)
    layers[-1]["path"] = os.path.join(tdir, "rootfs.ext4")
    with open(backing, "w") as f:
        json.dump(layers, f)
    os.unlink(cas)
    sp.start()

    r = sp.request("POST", "/v1/sandboxes/%s/restore" % old)
    assert r.status == 202, r
    assert sp.wait_op(r.json["operation"]["id"])["state"] == "succeeded", sp.log()
    assert run(sp, old, "cat /etc/legacy") == ("old-layout\n", 0)
    assert chain(sp, old)[-1] == os.path.join(tdir, "rootfs.ext4")  # its recorded chain, kept
    new = create(sp, name)
    assert chain(sp, new)[-1] == cas and os.path.exists(cas), chain(sp, new)
    assert run(sp, new, "cat /etc/legacy") == ("old-layout\n", 0)
    for sid in (old, new):
        delete(sp, sid)
    # (409 conflict while a snapshot of it the creates started is still being made)
    poll(lambda: sp.request("DELETE", "/v1/templates/" + name).status == 200, timeout=600)
    poll(lambda: not os.path.exists(cas), timeout=120)  # unused: swept
