"""Templates that travel between nodes (issue 14 item 6, docs/multinode.md): PostgreSQL,
one control and two nodes on one machine (test_cluster's world).

A custom template is built through the control daemon (placed on a node like a create);
its image's SHA-256, size and holder are recorded in the store. With the builder drained,
a create from the template lands on the other node, which fetches the image from the
builder over the node API, verifies it and boots from it: the sandbox sees the file the
build wrote. The node API serves the image to nobody without the node token. An image
altered on the builder's disk after its digest was recorded is refused by the fetching
node (two creates at once share that one fetch and both fail, no VM is booted from
it), and with the builder gone a create fails at once saying so. One build VM and one
sandbox VM in all (TCG)."""
import hashlib
import http.client
import json
import os
import subprocess
import time

import spacedlib
from test_cluster import cluster, live_nodes, sql, wait_live  # noqa: F401 (fixture)
from test_sessions import run
from test_store_pg import pg_server, pg_url  # noqa: F401 (fixtures)

NAME = "travel1"
SPEC = {"name": NAME, "base": "base", "description": "built on one node, run on another",
        "steps": [{"run": "echo traveled-$((40+2)) > /etc/travel-marker"}]}


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def row(pg_url, name):  # noqa: F811
    out = sql(pg_url, "SELECT state||'|'||nodes||'|'||digest||'|'||size_bytes FROM templates "
                      "WHERE name='%s'" % name)
    state, nodes, digest, size = out[0].split("|")
    return state, nodes.split(",") if nodes else [], digest, int(size)


def full_log(d):
    """The daemon's whole log (Spaced.log() gives only its tail)."""
    with open(d.log_path, errors="replace") as f:
        return f.read()


def raw_get(port, path, headers=None, limit=None):
    """(status, body) of a GET; at most `limit` bytes of the body (an event stream)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("GET", path, headers=headers or {})
    resp = conn.getresponse()
    body = resp.read(limit) if limit else resp.read()
    conn.close()
    return resp.status, body


def test_template_built_on_one_node_runs_on_the_other(cluster, pg_url):  # noqa: F811
    control, nodes, restart, _ = cluster
    wait_live(control)
    by_id = {n.node_id: n for n in nodes}

    # The control authenticates before placing a build.
    assert control.request("POST", "/v1/templates", SPEC, key=None).status == 401

    # 1. Built through the control, on a node chosen like a create.
    r = control.request("POST", "/v1/templates", SPEC)
    assert r.status == 202 and r.json["operation"]["kind"] == "template_build", r
    builder = by_id[r.headers.get("x-space-node")]
    other = next(n for n in nodes if n is not builder)
    op_id = r.json["operation"]["id"]
    op = control.wait_op(op_id, timeout=900)
    assert op["state"] == "succeeded", (op, builder.log())
    # Its build log is the builder's, reached through the control.
    status, body = raw_get(control.port, "/v1/operations/%s/logs" % op_id,
                           {"Authorization": "Bearer " + control.admin_key}, limit=256)
    assert status == 200 and body, (status, body)
    t = control.request("GET", "/v1/templates/" + NAME)
    assert t.status == 200 and t.json["template"]["state"] == "ready", t
    assert t.json["template"]["description"] == SPEC["description"], t

    # 2. Its digest: computed once on the builder, recorded in the row and template.json.
    image = os.path.join(builder.data_dir, "templates", NAME, "rootfs.ext4")
    state, holders, digest, size = row(pg_url, NAME)
    assert state == "ready" and holders == [builder.node_id], (state, holders)
    assert digest == sha256_file(image) and size == os.path.getsize(image)
    with open(os.path.join(builder.data_dir, "templates", NAME, "template.json")) as f:
        assert f'"sha256": "{digest}"' in f.read()

    # The node API gives the image to no one without the node token: the node's guard
    # (403), a wrong token (403), the control (404: no such route for clients).
    for port, headers, want in ((builder.port, {}, 403),
                                (builder.port, {"X-Space-Node-Token": "x" * 32}, 403),
                                (control.port, {"Authorization": "Bearer " + control.admin_key}, 404)):
        status, body = raw_get(port, "/internal/templates/%s/image" % NAME, headers)
        assert status == want and len(body) < 1024, (port, status, body[:200])

    # 3. With the builder drained, the create lands on the other node, which fetches the
    # image, verifies it and boots from it.
    cli_env = dict(os.environ, SPACE_URL=control.url, SPACE_API_KEY=control.admin_key)
    out = subprocess.run([os.path.join(spacedlib.BUILD, "space"), "node", "drain", builder.node_id],
                         env=cli_env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out

    # The fetch's disk side runs off the event loop: with its temporary file a FIFO no one
    # reads (a write that never returns), the fetching node still answers; the fetch then
    # refuses the FIFO (not a regular file) and the create fails, booting nothing.
    os.makedirs(os.path.join(other.data_dir, "images"), exist_ok=True)
    fifo = os.path.join(other.data_dir, "images", ".sha256-%s.ext4.fetch" % digest)
    os.mkfifo(fifo)
    try:
        r = control.request("POST", "/v1/sandboxes", {"template": NAME, "timeout": 0, "network": {"mode": "none"}})
        assert r.status == 202 and r.headers.get("x-space-node") == other.node_id, r
        deadline = time.monotonic() + 60
        while "template=%s source=%s" % (NAME, builder.node_id) not in full_log(other):
            assert time.monotonic() < deadline, other.log()
            time.sleep(0.2)
        for _ in range(3):  # a blocked loop never answers; these would time out
            status, _ = raw_get(other.port, "/healthz")
            assert status == 200
        assert control.request("GET", "/v1/operations/" + r.json["operation"]["id"]).json["operation"]["state"] \
            in ("pending", "running")
    finally:
        os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))  # lets the writer's open return
    op = control.wait_op(r.json["operation"]["id"], timeout=300)
    assert op["state"] == "failed" and op["error"]["code"] == "host_io", op
    assert "regular file" in op["error"]["message"], op
    assert not os.path.exists(fifo)  # nothing unverified stays
    r = control.request("POST", "/v1/sandboxes", {"template": NAME, "timeout": 0, "network": {"mode": "none"}})
    assert r.status == 202 and r.headers.get("x-space-node") == other.node_id, r
    sid = r.json["sandbox"]["id"]
    op = control.wait_op(r.json["operation"]["id"], timeout=600)
    assert op["state"] == "succeeded", (op, other.log())
    _, res = run(control, sid, {"cmd": "cat /etc/travel-marker"})
    assert res["stdout"] == b"traveled-42\n", res
    log = full_log(other)
    assert "template.fetch" in log and "result=verified" in log and digest in log, log[-3000:]
    print(next(line for line in log.splitlines() if "result=verified" in line))  # size and ms (TCG host)
    # Named by its digest (images never written over), not under the template's name.
    fetched = os.path.join(other.data_dir, "images", "sha256-%s.ext4" % digest)
    assert sha256_file(fetched) == digest
    assert not os.path.exists(os.path.join(other.data_dir, "templates", NAME, "rootfs.ext4"))
    assert row(pg_url, NAME)[1] == [builder.node_id, other.node_id]  # a holder now too
    d = control.request("DELETE", "/v1/sandboxes/" + sid)
    assert d.status == 202 and control.wait_op(d.json["operation"]["id"])["state"] == "succeeded"

    # 4. An image altered on the source's disk after its digest was recorded (same size)
    # is refused: the other node forgets its copy and the row its holding, the builder's
    # image gets one byte flipped, and a create on the other node fails, booting nothing.
    sql(pg_url, "UPDATE templates SET nodes='%s' WHERE name='%s'" % (builder.node_id, NAME))
    subprocess.run(["rm", "-rf", os.path.join(other.data_dir, "templates", NAME), fetched], check=True)
    with open(image, "r+b") as f:
        f.seek(size // 2)
        b = f.read(1)
        f.seek(size // 2)
        f.write(bytes([b[0] ^ 0xFF]))
    # Two creates at once share the one fetch (and its refusal).
    started_before = full_log(other).count("result=started")
    ops = {}
    for _ in range(2):
        r = control.request("POST", "/v1/sandboxes", {"template": NAME, "timeout": 0, "network": {"mode": "none"}})
        assert r.status == 202 and r.headers.get("x-space-node") == other.node_id, r
        ops[r.json["sandbox"]["id"]] = r.json["operation"]["id"]
    for bad, op_id in ops.items():
        op = control.wait_op(op_id, timeout=600)
        assert op["state"] == "failed" and op["error"]["code"] == "template_digest_mismatch", op
        assert "SHA-256" in op["error"]["message"], op
        assert not os.path.exists(os.path.join(other.data_dir, "sandboxes", bad)), "no disk, no VM"
    assert not os.path.exists(fetched)
    assert not [f for f in os.listdir(os.path.join(other.data_dir, "images")) if f.endswith(".fetch")]
    log = full_log(other)
    assert log.count("result=failed code=template_digest_mismatch") == 1, log[-3000:]
    assert log.count("result=started") - started_before == 1, log[-3000:]

    # 5. The only holder gone: the create fails at once, naming it.
    builder.stop(cleanup=False)
    r = control.request("POST", "/v1/sandboxes", {"template": NAME, "timeout": 0, "network": {"mode": "none"}})
    assert r.status == 202 and r.headers.get("x-space-node") == other.node_id, r
    op = control.wait_op(r.json["operation"]["id"], timeout=120)
    assert op["state"] == "failed" and op["error"]["code"] == "template_source_unavailable", op
    assert builder.node_id in op["error"]["message"], op


NAME2, NAME3 = "travel2", "travel3"


def spec2(marker):
    return {"name": NAME2, "base": "base", "steps": [{"run": "echo %s > /etc/m2" % marker}]}


def build(control, spec, want_node):
    r = control.request("POST", "/v1/templates", spec)
    assert r.status == 202 and r.headers.get("x-space-node") == want_node, r
    op = control.wait_op(r.json["operation"]["id"], timeout=900)
    assert op["state"] == "succeeded", op
    return row(control.pg_url, spec["name"])[2]


def drain(control, node_id, on):
    r = control.request("POST", "/v1/nodes/%s/%s" % (node_id, "drain" if on else "undrain"))
    assert r.status == 204, r


def create(control, template, node):
    r = control.request("POST", "/v1/sandboxes", {"template": template, "timeout": 0, "network": {"mode": "none"}})
    assert r.status == 202 and r.headers.get("x-space-node") == node.node_id, r
    op = control.wait_op(r.json["operation"]["id"], timeout=600)
    assert op["state"] == "succeeded", (op, node.log())
    return r.json["sandbox"]["id"]


def verb(control, sid, what):
    r = control.request(*(("DELETE", "/v1/sandboxes/" + sid) if what == "delete" else
                          ("POST", "/v1/sandboxes/%s/%s" % (sid, what))))
    assert r.status == 202, r
    assert control.wait_op(r.json["operation"]["id"], timeout=600)["state"] == "succeeded"


def base_image(node, sid):
    """The raw image at the bottom of a sandbox's disk chain (what it is backed by)."""
    with open(os.path.join(node.data_dir, "sandboxes", sid, "backing.json")) as f:
        return json.load(f)[-1]["path"]


def test_rebuilt_template_never_replaces_bytes_in_use(cluster, pg_url):  # noqa: F811
    """A template is built on X and a sandbox of it made on Y (fetched) and suspended.
    The template is deleted as a delete racing a create could before deletes were atomic
    (Y's sandbox unseen) and built again under the same name, with other bytes; Y gets the new image (a build FROM
    it placed on Y fetches it first). Y's suspended sandbox still stands on the exact bytes
    it was created from (images are named by SHA-256) and resumes on them. Deleting
    through the control is refused while any node has a sandbox of the template; once the
    last is gone it succeeds and every node's copies and images go."""
    control, nodes, _, _ = cluster
    control.pg_url = pg_url
    wait_live(control)
    x, y = nodes
    token = spacedlib.SPACED_ENV["SPACE_NODE_TOKEN"]

    drain(control, y.node_id, True)
    d1 = build(control, spec2("one"), x.node_id)
    drain(control, y.node_id, False)
    drain(control, x.node_id, True)
    s1 = create(control, NAME2, y)
    _, res = run(control, s1, {"cmd": "cat /etc/m2"})
    assert res["stdout"] == b"one\n", res
    # Its disk stands on the image named by its digest.
    assert base_image(y, s1) == os.path.join(y.data_dir, "images", "sha256-%s.ext4" % d1)
    verb(control, s1, "suspend")

    # Deleting through the control is refused while a node has a sandbox of it, even
    # one the delete would not reach (it goes to the builder, X).
    r = control.request("DELETE", "/v1/templates/" + NAME2)
    assert r.status == 409 and r.error_code() == "template_in_use", r
    assert y.node_id in r.json["error"]["message"], r

    # Reaching X alone (its node API) is refused too: X has no sandbox of it, but the
    # delete counts every node's in the store (test_cluster_tpldel.py).
    r = x.request("DELETE", "/v1/templates/" + NAME2, key=control.admin_key, headers={"X-Space-Node-Token": token})
    assert r.status == 409 and r.error_code() == "template_in_use" and y.node_id in r.json["error"]["message"], r
    # The state a delete racing a create left before deletes were atomic: S1's row is
    # hidden from the store for the moment of a delete reaching X, which then succeeds.
    # Then the name is built again on X with other bytes.
    sql(pg_url, "UPDATE sandboxes SET state='deleted' WHERE id='%s'" % s1)
    try:
        r = x.request("DELETE", "/v1/templates/" + NAME2, key=control.admin_key,
                      headers={"X-Space-Node-Token": token})
    finally:
        sql(pg_url, "UPDATE sandboxes SET state='suspended' WHERE id='%s'" % s1)
    assert r.status == 200, r
    drain(control, x.node_id, False)
    drain(control, y.node_id, True)
    d2 = build(control, spec2("two"), x.node_id)
    assert d2 != d1

    # A build FROM it placed on Y (X drained), which lacks it: Y fetches it, then builds.
    drain(control, y.node_id, False)
    drain(control, x.node_id, True)
    d3 = build(control, {"name": NAME3, "base": NAME2, "steps": [{"run": "cat /etc/m2 > /etc/m3"}]}, y.node_id)
    log = full_log(y)
    assert "the base is on another node: fetching it first" in log, log[-3000:]
    assert "template=%s source=%s result=verified sha256=%s" % (NAME2, x.node_id, d2) in log, log[-3000:]
    s2 = create(control, NAME3, y)
    _, res = run(control, s2, {"cmd": "cat /etc/m2 /etc/m3"})
    assert res["stdout"] == b"two\ntwo\n", res

    # The suspended sandbox's bytes are untouched, and it resumes on them.
    old = base_image(y, s1)
    assert old == os.path.join(y.data_dir, "images", "sha256-%s.ext4" % d1)
    assert sha256_file(old) == d1
    verb(control, s1, "restore")
    _, res = run(control, s1, {"cmd": "cat /etc/m2"})
    assert res["stdout"] == b"one\n", res

    # Deleting: NAME2 is refused while Y has a sandbox made from that name (S1, of its
    # earlier build), then done once it is gone.
    verb(control, s2, "delete")
    assert control.request("DELETE", "/v1/templates/" + NAME3).status == 200
    r = control.request("DELETE", "/v1/templates/" + NAME2)
    assert r.status == 409 and r.error_code() == "template_in_use", r
    verb(control, s1, "delete")
    r = control.request("DELETE", "/v1/templates/" + NAME2)
    assert r.status == 200, r

    # Every node's copies and digest-named images go (each node sweeps every 10 s).
    def leftovers():
        left = []
        for n in nodes:
            for name in (NAME2, NAME3):
                if os.path.exists(os.path.join(n.data_dir, "templates", name)):
                    left.append((n.node_id, name))
            images = os.path.join(n.data_dir, "images")
            left += [(n.node_id, f) for f in (os.listdir(images) if os.path.isdir(images) else [])
                     if any(d in f for d in (d1, d2, d3))]
        return left
    deadline = time.monotonic() + 90
    while leftovers():
        assert time.monotonic() < deadline, leftovers()
        time.sleep(1)
    for n in nodes:
        assert "copy=stale action=remove" in full_log(n) or n is x, full_log(n)[-3000:]
