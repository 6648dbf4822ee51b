"""Saved VM states go only to nodes running the VM runtime that saved them (docs/
multinode.md "Rolling upgrades", src/daemon/vm/vm_sig.h): PostgreSQL, one control and two
nodes on one machine (test_cluster's world).

Node B is restarted with SPACE_TEST_VM_SIG, the test double for another QEMU release
(two cannot be installed side by side here): its heartbeat reports that runtime. A
sandbox on node A keeps a value in memory and is suspended: its parts record A's
runtime. With A drained, a restore through the control is not moved to B (no node runs
the runtime) and A restores it itself. A snapshot taken on A cannot be created from with
A drained: the control answers 409 snapshot_incompatible naming the runtime, and B asked
directly refuses it before fetching. A row moved to B anyway (as by a control that read
B's row before its QEMU changed) is refused by B before it fetches anything: the sandbox
goes back to A, which restores it with its memory. One sandbox VM (TCG)."""
import os

import spacedlib
from test_cluster import BODY, cluster, live_nodes, sql, wait_live  # noqa: F401 (fixture)
from test_cluster_move import row, space, verb, wait_for
from test_cluster_snapshots import snap_row
from test_cluster_templates import full_log
from test_sessions import run
from test_store_pg import pg_server, pg_url  # noqa: F401 (fixtures)

OTHER = "QEMU 0.1/tcg/max"


def entries(node, sub):
    d = os.path.join(node.data_dir, sub)
    return os.listdir(d) if os.path.isdir(d) else []


def refused(r, saved):
    assert r.status == 409 and r.error_code() == "snapshot_incompatible", r
    assert "saved by %s" % saved in r.json["error"]["message"], r


def test_saved_states_go_only_to_nodes_of_their_runtime(cluster, pg_url):  # noqa: F811
    control, nodes, restart, _ = cluster
    a, b = sorted(nodes, key=lambda n: n.node_id)
    b.env = {"SPACE_TEST_VM_SIG": OTHER}
    restart(b, graceful=True)
    wait_live(control)
    listed = live_nodes(control)
    ours = listed[a.node_id]["runtime"]
    assert ours and ours.startswith("QEMU ") and ours != OTHER, listed
    assert listed[b.node_id]["runtime"] == OTHER, listed

    # 1. A sandbox on A (B drained while it is placed) with a value in memory, suspended:
    # its parts name A's runtime.
    space(control, "node", "drain", b.node_id)
    r = control.request("POST", "/v1/sandboxes", BODY)
    assert r.status == 202 and r.headers.get("x-space-node") == a.node_id, r
    sid = r.json["sandbox"]["id"]
    assert control.wait_op(r.json["operation"]["id"], timeout=600)["state"] == "succeeded", a.log()
    space(control, "node", "undrain", b.node_id)
    _, res = run(control, sid, {"cmd": "echo mem-$((6*7)) > /dev/shm/val"})
    assert res["exit"] == {"code": 0, "signal": None}, res
    verb(control, sid, "suspend")
    parts = wait_for("the suspended sandbox's parts", lambda: row(pg_url, sid)[2])
    assert parts["node"] == a.node_id and parts["runtime"] == ours, parts

    # 2. A drained: B is live, undrained and has room, but runs another runtime, so the
    # sandbox is not moved and A restores it itself.
    space(control, "node", "drain", a.node_id)
    r, _ = verb(control, sid, "restore")
    assert r.headers.get("x-space-node") == a.node_id, r
    assert "sandbox=%s from=%s result=not_moved reason=no_node_with_runtime" % (sid, a.node_id) in full_log(control)
    _, res = run(control, sid, {"cmd": "cat /dev/shm/val"})
    assert res["stdout"] == b"mem-42\n", res
    assert row(pg_url, sid)[:2] == ("running", a.node_id)

    # 3. A snapshot taken on A (drained): only B could take a create from it, and B runs
    # another runtime: 409 at the control, naming the runtime needed; B itself, asked
    # directly (as by a control that resolved the snapshot by name), refuses before it
    # fetches anything.
    r = control.request("POST", "/v1/sandboxes/%s/snapshots" % sid, {"name": "rt"})
    assert r.status == 202, r
    snap = r.json["snapshot"]["id"]
    assert control.wait_op(r.json["operation"]["id"], timeout=600)["state"] == "succeeded", a.log()
    assert snap_row(pg_url, snap)[2]["runtime"] == ours
    refused(control.request("POST", "/v1/sandboxes", dict(BODY, template=snap)), ours)
    token = {"X-Space-Node-Token": spacedlib.SPACED_ENV["SPACE_NODE_TOKEN"]}
    r = b.request("POST", "/v1/sandboxes", dict(BODY, template=snap), key=control.admin_key, headers=token)
    refused(r, ours)
    assert OTHER in r.json["error"]["message"], r
    assert not [e for e in entries(b, "captures") if snap in e]

    # 4. Suspended again, its row moved to B as a control that read B's row before B's
    # QEMU changed would: B refuses the record before fetching and hands the sandbox back
    # to A, which brings it back with its memory.
    verb(control, sid, "suspend")
    parts = wait_for("the parts on A", lambda: row(pg_url, sid)[2])
    text = sql(pg_url, "SELECT parts FROM sandboxes WHERE id='%s'" % sid)[0]
    sql(pg_url, "UPDATE sandboxes SET node='%s' WHERE id='%s' AND node='%s' AND parts='%s' AND "
                "state='suspended' AND desired=state" % (b.node_id, sid, a.node_id, text))
    assert row(pg_url, sid)[1] == b.node_id
    r, op = verb(control, sid, "restore", want="failed")
    assert r.headers.get("x-space-node") == b.node_id, r
    assert op["error"]["code"] == "snapshot_incompatible" and "saved by %s" % ours in op["error"]["message"], op
    assert "stays on the node it came from" in op["error"]["message"], op
    assert row(pg_url, sid) == ("suspended", a.node_id, None)
    log = full_log(b)
    assert "sandbox.move sandbox=%s source=%s result=refused code=snapshot_incompatible" % (sid, a.node_id) in log
    assert "sandbox.move sandbox=%s source=%s parts=" % (sid, a.node_id) not in log  # no fetch began
    assert not [e for e in entries(b, "sandboxes") if sid in e]
    r, _ = verb(control, sid, "restore")
    assert r.headers.get("x-space-node") == a.node_id, r
    _, res = run(control, sid, {"cmd": "cat /dev/shm/val"})
    assert res["stdout"] == b"mem-42\n", (res, a.log())
    space(control, "node", "undrain", a.node_id)
    d = control.request("DELETE", "/v1/sandboxes/" + sid)
    assert d.status == 202 and control.wait_op(d.json["operation"]["id"])["state"] == "succeeded"
