"""Sandbox snapshots that travel between nodes (issue 14 item 6, docs/multinode.md
"Sandbox snapshots that travel"): PostgreSQL, one control and two nodes on one machine
(test_cluster's world).

A sandbox on one node writes a file and is snapshotted through the control: the holder
hashes every part of the snapshot (memory, device state, disk overlay, the layers under
it) and records them with itself in the snapshots row. With the holder drained, a create
from the snapshot lands on the other node, which fetches the parts over the node API,
verifies them and restores: the new sandbox sees the file (two creates at once on that
node share one fetch). The node API serves the parts
to nobody without the node token. A part altered on the holder's disk after it was hashed
is refused (the create fails with snapshot_digest_mismatch, no sandbox directory and no
fetched file left), and with the holder stopped a create fails at once with
snapshot_source_unavailable; restoring a sandbox suspended on the stopped node fails at
once with node_down, saying its files are on that node's local storage. Two sandbox VMs
in all (TCG)."""
import concurrent.futures
import json
import os
import subprocess
import time

import spacedlib
from test_cluster import BODY, cluster, live_nodes, sql, wait_live  # noqa: F401 (fixture)
from test_cluster_templates import full_log, raw_get
from test_sessions import run
from test_store_pg import pg_server, pg_url  # noqa: F401 (fixtures)


def snap_row(pg_url, sid):  # noqa: F811
    out = sql(pg_url, "SELECT state||'|'||node||'|'||parts FROM snapshots WHERE id='%s'" % sid)
    state, node, parts = out[0].split("|", 2)
    return state, node, json.loads(parts) if parts else None


def nothing_left(node, snap, sandbox):
    captures = os.path.join(node.data_dir, "captures")
    left = [e for e in (os.listdir(captures) if os.path.isdir(captures) else []) if snap in e]
    assert left == [], left
    assert not os.path.exists(os.path.join(node.data_dir, "sandboxes", sandbox)), "no disk, no VM"


def test_snapshot_taken_on_one_node_restores_on_the_other(cluster, pg_url):  # noqa: F811
    control, nodes, restart, _ = cluster
    wait_live(control)
    by_id = {n.node_id: n for n in nodes}

    # 1. A sandbox writes a file; its snapshot is taken through the control.
    r = control.request("POST", "/v1/sandboxes", BODY)
    assert r.status == 202, r
    src, holder = r.json["sandbox"]["id"], by_id[r.headers.get("x-space-node")]
    other = next(n for n in nodes if n is not holder)
    assert control.wait_op(r.json["operation"]["id"])["state"] == "succeeded", holder.log()
    _, res = run(control, src, {"cmd": "echo snapped-$((40+2)) > ~/snapfile && sync"})
    assert res["exit"] == {"code": 0, "signal": None}, res
    r = control.request("POST", "/v1/sandboxes/%s/snapshots" % src, {"name": "travelling"})
    assert r.status == 202, r
    snap = r.json["snapshot"]["id"]
    op = control.wait_op(r.json["operation"]["id"], timeout=600)
    assert op["state"] == "succeeded", (op, holder.log())

    # 2. Its parts: hashed on the holder, recorded with it in the row (the control lists
    # the snapshot from the store, with its holder).
    got = control.request("GET", "/v1/snapshots/travelling")
    assert got.status == 200 and got.json["snapshot"]["node"] == holder.node_id, got
    state, node, parts = snap_row(pg_url, snap)
    assert state == "ready" and node == holder.node_id, (state, node)
    names = {f["name"]: f for f in parts["files"]}
    assert {"snapshot.json", "state", "template"} <= set(names), names
    assert parts["chain"][0]["part"] in ("disk.qcow2", "disk.raw"), parts
    assert all(c["part"] in names for c in parts["chain"]), parts
    cap = os.path.join(holder.data_dir, "captures", snap)
    for f in parts["files"]:
        if not f["name"].startswith("layer"):
            assert os.path.getsize(os.path.join(cap, f["name"])) == f["size"], f

    # The node API gives a part to no one without the node token: the node's guard
    # (403), a wrong token (403), the control (404: no such route for clients).
    target = "/internal/snapshots/%s/parts/state" % snap
    token = spacedlib.SPACED_ENV["SPACE_NODE_TOKEN"]
    for port, headers, want in ((holder.port, {}, 403),
                                (holder.port, {"X-Space-Node-Token": "x" * 32}, 403),
                                (control.port, {"Authorization": "Bearer " + control.admin_key}, 404)):
        status, body = raw_get(port, target, headers)
        assert status == want and len(body) < 1024, (port, status, body[:200])
    # With the token: only this snapshot's listed parts, nothing else of the disk.
    for bad in ("../../etc/passwd", "layer99", "chain.json", "disk.qcow2.tmp"):
        status, _ = raw_get(holder.port, "/internal/snapshots/%s/parts/%s" % (snap, bad),
                            {"X-Space-Node-Token": token})
        assert status == 404, (bad, status)
    status, body = raw_get(holder.port, target, {"X-Space-Node-Token": token})
    assert status == 200 and len(body) == names["state"]["size"]

    # 3. The holder drained: the create from the snapshot lands on the other node, which
    # fetches, verifies and restores it; the file written before the snapshot is there.
    cli_env = dict(os.environ, SPACE_URL=control.url, SPACE_API_KEY=control.admin_key)
    out = subprocess.run([os.path.join(spacedlib.BUILD, "space"), "node", "drain", holder.node_id],
                         env=cli_env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out
    # Two creates at once share the node's one fetch of the snapshot.
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        replies = list(pool.map(lambda _: control.request("POST", "/v1/sandboxes", dict(BODY, template=snap)),
                                range(2)))
    for r in replies:
        assert r.status == 202 and r.headers.get("x-space-node") == other.node_id, r
        op = control.wait_op(r.json["operation"]["id"], timeout=600)
        assert op["state"] == "succeeded", (op, other.log())
        moved = r.json["sandbox"]["id"]
        _, res = run(control, moved, {"cmd": "cat ~/snapfile"})
        assert res["stdout"] == b"snapped-42\n", res
        d = control.request("DELETE", "/v1/sandboxes/" + moved)
        assert d.status == 202 and control.wait_op(d.json["operation"]["id"])["state"] == "succeeded"
    log = full_log(other)
    assert log.count("snapshot.fetch snapshot=%s source=%s parts=" % (snap, holder.node_id)) == 1, log
    line = next(x for x in log.splitlines() if "snapshot.fetch" in x and "result=verified" in x)
    print(line)  # parts, bytes and ms (TCG host, loopback)

    # 4. A part altered on the holder's disk after it was hashed (same size) is refused:
    # the other node forgets its copy, the holder's device state gets one byte flipped,
    # and the create fails, leaving nothing.
    subprocess.run(["rm", "-rf", os.path.join(other.data_dir, "captures", snap)], check=True)
    path, size = os.path.join(cap, "state"), names["state"]["size"]
    os.chmod(path, 0o644)
    with open(path, "r+b") as f:
        f.seek(size // 2)
        b = f.read(1)
        f.seek(size // 2)
        f.write(bytes([b[0] ^ 0xFF]))
    r = control.request("POST", "/v1/sandboxes", dict(BODY, template=snap))
    assert r.status == 202 and r.headers.get("x-space-node") == other.node_id, r
    bad = r.json["sandbox"]["id"]
    op = control.wait_op(r.json["operation"]["id"], timeout=600)
    assert op["state"] == "failed" and op["error"]["code"] == "snapshot_digest_mismatch", op
    assert "SHA-256" in op["error"]["message"], op
    nothing_left(other, snap, bad)
    assert "result=failed code=snapshot_digest_mismatch" in full_log(other)

    # 5. The holder gone: a create fails at once, naming it, and leaves nothing; a
    # sandbox suspended there cannot come back elsewhere (its memory image and disk are
    # on that node's disk): its restore fails at once, saying so.
    r = control.request("POST", "/v1/sandboxes/%s/suspend" % src)
    assert r.status == 202 and control.wait_op(r.json["operation"]["id"])["state"] == "succeeded", r
    holder.stop(cleanup=False)
    r = control.request("POST", "/v1/sandboxes/%s/restore" % src)
    assert r.status == 503 and r.error_code() == "node_down", r
    assert "local storage" in r.json["error"]["message"], r
    t0 = time.monotonic()
    r = control.request("POST", "/v1/sandboxes", dict(BODY, template=snap))
    assert r.status == 202 and r.headers.get("x-space-node") == other.node_id, r
    gone = r.json["sandbox"]["id"]
    op = control.wait_op(r.json["operation"]["id"], timeout=120)
    assert op["state"] == "failed" and op["error"]["code"] == "snapshot_source_unavailable", op
    assert holder.node_id in op["error"]["message"], op
    assert time.monotonic() - t0 < 60
    nothing_left(other, snap, gone)
