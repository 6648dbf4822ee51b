"""Runs the real spaced with the arguments the Kubernetes manifests give it, on this
machine (no cluster): the node DaemonSet's init container command and spaced arguments,
and the control Deployment's arguments under its runAsUser, against a throwaway
PostgreSQL. Only what a cluster would provide is substituted: the downward API values
($(NODE_NAME), $(NODE_IP) -> 127.0.0.1), the Secrets (generated), the host paths
(/var/lib/space, the image's /usr/local/share/space/guest -> temporary directories) and
the ports (0.0.0.0:7070/7071 -> free loopback ports).

Checks: the node registers under its node name and advertised URL; a `base` sandbox
created through the control runs a command; the template image is pinned by hard link
(the reason for the init container); after a second sync with a changed image the
running sandbox still works and its pinned image is untouched.

    SPACE_BUILD=build/san SPACE_GUEST=build/guest /usr/bin/python3 -m pytest -q -p no:cacheprovider \\
        deploy/test_deploy_roles.py

Skips, saying why, without root, PostgreSQL server binaries, the programs or the guest.
"""
import json
import os
import pathlib
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

import pytest
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BUILD = os.path.abspath(os.environ.get("SPACE_BUILD", os.path.join(ROOT, "build")))
GUEST = os.path.abspath(os.environ.get("SPACE_GUEST", os.path.join(ROOT, "build", "guest")))
IMAGE_GUEST = "/usr/local/share/space/guest"  # where the Dockerfile puts the guest files
HOST_DATA = "/var/lib/space"                  # the node's hostPath


def spaced_container(name):
    with open(os.path.join(HERE, "kubernetes", name), encoding="utf-8") as f:
        doc = next(d for d in yaml.safe_load_all(f) if d and d["kind"] in ("Deployment", "DaemonSet"))
    pod = doc["spec"]["template"]["spec"]
    return pod, next(c for c in pod["containers"] if c["name"] == "spaced")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def substitute(args, repl):
    out = []
    for a in args:
        for old, new in repl:
            a = a.replace(old, new)
        out.append(a)
    return out


def call(base, key, method, path, body=None, logs=None):
    """One API call; an error status fails the test with the daemons' logs (a directory)."""
    req = urllib.request.Request(base + path, method=method, data=None if body is None else json.dumps(body).encode(),
                                 headers={"Authorization": "Bearer " + key, "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return json.load(r)
    except urllib.error.HTTPError as e:
        pytest.fail(f"{method} {path}: {e.code} {e.read()[:500]!r}{logs_text(logs)}")


def logs_text(logs):
    return "".join("\n--- %s ---\n%s" % (f.name, log_excerpt(f)) for f in sorted(logs.glob("*.log"))) \
        if logs else ""


def log_excerpt(f):
    """A daemon log's first lines (a start-up refusal is said there) and its last lines
    without sanitizer leak traces (a daemon that exited early ends with only those)."""
    lines = f.read_text(errors="replace").splitlines()
    tail = [l for l in lines if not l.lstrip().startswith("#") and "leak of" not in l
            and "allocated from" not in l and l.strip()]
    return "\n".join(lines[:15] + ["..."] + tail[-25:])


def wait_for(what, fn, timeout=300, logs=None):
    """fn() until truthy; on timeout fails with the daemons' logs (a directory)."""
    end = time.monotonic() + timeout
    while True:
        try:
            v = fn()
            if v:
                return v
        except OSError:
            pass
        if time.monotonic() > end:
            pytest.fail(f"timed out waiting for {what}{logs_text(logs)}")
        time.sleep(0.2)


def missing():
    if os.geteuid() != 0:
        return "needs root (the node role runs VMs, the control role is started as its runAsUser)"
    for p in ("spaced", "space-gateway", "space"):
        if not os.access(os.path.join(BUILD, p), os.X_OK):
            return f"{BUILD}/{p} missing: make SAN=1 programs (and set SPACE_BUILD=build/san)"
    for p in ("vmlinux", "initramfs.cpio", "templates/base/rootfs.ext4"):
        if not os.path.exists(os.path.join(GUEST, p)):
            return f"{GUEST}/{p} missing: make TEMPLATES=base templates"
    if not any(os.path.exists(f"/usr/lib/postgresql/{v}/bin/initdb") for v in range(10, 20)):
        return "PostgreSQL server binaries missing (apt-get install postgresql)"
    return None


@pytest.fixture
def world():
    why = missing()
    if why:
        pytest.skip(why)
    # Not pytest's tmp_path: its parents are private to root, and both the postgres user
    # (the database) and the control's runAsUser must reach into this directory.
    tmp_path = pathlib.Path(tempfile.mkdtemp(prefix="space-deploy-"))
    tmp_path.chmod(0o755)
    procs, pg = [], tmp_path / "pg"
    r = subprocess.run([os.path.join(ROOT, "scripts", "pg-test-server.sh"), "start", str(pg)],
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    # The control runs unprivileged, as in the manifest: let it reach the socket.
    for sock in pg.glob(".s.PGSQL.*"):
        if not sock.name.endswith(".lock"):
            sock.chmod(0o777)
    pg.chmod(0o755)
    try:
        yield tmp_path, r.stdout.strip(), procs
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        # A node stopped with SIGTERM leaves its VMs running (for adoption): after a
        # failure, end what runs from this test's directories, and only that.
        ps = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True).stdout
        for line in ps.splitlines():
            pid, _, args = line.strip().partition(" ")
            if str(tmp_path / "host-var-lib-space") in args:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
        subprocess.run([os.path.join(ROOT, "scripts", "pg-test-server.sh"), "stop", str(pg)], timeout=120)
        shutil.rmtree(tmp_path, ignore_errors=True)


def test_manifest_arguments_run_the_roles(world):
    tmp, url, procs = world
    env = dict(os.environ, SPACE_STORE_URL=url, SPACE_NODE_TOKEN=secrets.token_hex(24), SPACE_GATEWAY=f"{BUILD}/space-gateway")
    # The image's guest files, as the Dockerfile copies them (only the base template).
    image = tmp / "image-guest"
    (image / "templates").mkdir(parents=True)
    for f in ("vmlinux", "initramfs.cpio"):
        shutil.copy(os.path.join(GUEST, f), image / f)
    shutil.copytree(os.path.join(GUEST, "templates", "base"), image / "templates" / "base")

    node_pod, node = spaced_container("node.yaml")
    host = tmp / "host-var-lib-space"
    node_port = free_port()
    paths = [(IMAGE_GUEST, str(image)), (HOST_DATA, str(host))]
    init = next(c for c in node_pod["initContainers"] if c["name"] == "sync-guest")
    sync = substitute(init["command"], [("/usr/local/bin/space-sync-guest", os.path.join(HERE, "image", "sync-guest.sh"))] + paths)
    subprocess.run(sync, check=True, timeout=300)
    node_args = substitute(node["args"], [("$(NODE_NAME)", "kind-worker"), ("$(NODE_IP)", "127.0.0.1"),
                                          ("0.0.0.0:", "127.0.0.1:"), (":7071", f":{node_port}")] + paths)
    assert "--role=node" in node_args and f"--advertise=http://127.0.0.1:{node_port}" in node_args
    logs = tmp / "logs"
    logs.mkdir()
    procs.append(subprocess.Popen([f"{BUILD}/spaced"] + node_args, env=env, stdout=open(logs / "node.log", "w"),
                                  stderr=subprocess.STDOUT))

    _, control = spaced_container("control.yaml")
    uid = control["securityContext"]["runAsUser"]
    cdata = tmp / "control-emptydir"
    cdata.mkdir()
    os.chown(cdata, uid, uid)
    cport = free_port()
    control_args = substitute(control["args"], [("0.0.0.0:7070", f"127.0.0.1:{cport}"), (HOST_DATA, str(cdata)),
                                                (IMAGE_GUEST, GUEST)])
    assert "--role=control" in control_args
    procs.append(subprocess.Popen(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                                   f"{BUILD}/spaced"] + control_args, env=env,
                                  stdout=open(logs / "control.log", "w"), stderr=subprocess.STDOUT))
    base = f"http://127.0.0.1:{cport}"
    # The admin key lands with whichever daemon found none in the store first.
    keyfile = wait_for("the admin key", lambda: next((p for p in (cdata / "admin.key", host / "admin.key") if p.exists()), None),
                       logs=logs)
    key = keyfile.read_text().strip()
    nodes = wait_for("the node to register", lambda: [n for n in call(base, key, "GET", "/v1/nodes")["nodes"] if n["live"]],
                     logs=logs)
    assert [(n["id"], n["url"]) for n in nodes] == [("kind-worker", f"http://127.0.0.1:{node_port}")]

    r = call(base, key, "POST", "/v1/sandboxes", {"template": "base", "timeout": 0, "network": {"mode": "none"}},
             logs=logs)
    sid = r["sandbox"]["id"]
    op = call(base, key, "GET", f"/v1/operations/{r['operation']['id']}?wait=60", logs=logs)["operation"]
    while op["state"] in ("pending", "running"):
        op = call(base, key, "GET", f"/v1/operations/{op['id']}?wait=60", logs=logs)["operation"]
    assert op["state"] == "succeeded", op
    cli = dict(env, SPACE_URL=base, SPACE_API_KEY=key)

    def exec_ok():
        out = subprocess.run([f"{BUILD}/space", "exec", sid, "--", "echo", "hello-from-node"], env=cli,
                             capture_output=True, text=True, timeout=180)
        assert out.returncode == 0 and "hello-from-node" in out.stdout, out

    exec_ok()
    pins = list((host / "images").glob("base-*.ext4"))
    synced = host / "guest" / "templates" / "base" / "rootfs.ext4"
    assert len(pins) == 1 and pins[0].stat().st_ino == synced.stat().st_ino, "template image not pinned by hard link"

    # A newer image (a changed rootfs) rolled out: the init container runs again.
    with open(image / "templates" / "base" / "rootfs.ext4", "r+b") as f:
        f.seek(200 << 20)
        f.write(b"new image")
    subprocess.run(sync, check=True, timeout=300)
    assert pins[0].stat().st_ino != synced.stat().st_ino, "sync-guest overwrote the pinned inode"
    exec_ok()
    op = call(base, key, "DELETE", f"/v1/sandboxes/{sid}")["operation"]
    while op["state"] in ("pending", "running"):
        op = call(base, key, "GET", f"/v1/operations/{op['id']}?wait=60")["operation"]
    assert op["state"] == "succeeded", op
