"""Suspended sandboxes that move off a drained node (issue 14 item 6, docs/multinode.md
"Suspended sandboxes that move"): PostgreSQL, one control and two nodes on one machine
(test_cluster's world).

A sandbox on node A writes a file, starts a process and puts a value in /dev/shm (its
memory), then is suspended through the control: A hashes its files into the row. A
restore of a running sandbox on a drained node is not moved. With A drained, a restore
through the control moves the row to B, which fetches A's files over the node API,
verifies them and restores: the file, the value in memory and the process are there; the
row and the listing name B; A removes its copy once B has it. Suspended again on B, with
B drained and one byte of its saved state flipped, the move to A is refused by A's
digest check: the restore fails with sandbox_digest_mismatch, A keeps nothing, the row
names B again (without parts, so it is not moved again) and, the byte restored, the
sandbox comes back on B. Then kills between the steps: of the old node (the move stored,
its files unreachable) and of the new node mid-fetch; and a stopped sandbox whose row a
control moved just before it died. Credential rules (secrets included) move with the
sandbox, a change of them drops the record first, and the old node keeps them across a
restart until the new node has them (a hand back finds them). One sandbox VM per test (TCG)."""
import json
import os
import signal
import subprocess
import time

import spacedlib
from test_cluster import BODY, cluster, sql, wait_live  # noqa: F401 (fixture)
from test_cluster_templates import full_log, raw_get
from test_sessions import run
from test_store_pg import pg_server, pg_url  # noqa: F401 (fixtures)


# A file on the disk, a value in /dev/shm (memory only) and a process (its own session,
# so it outlives the command) that writes its pid.
SETUP = ("echo moved-$((40+2)) > ~/movefile && sync && echo mem-$((6*7)) > /dev/shm/val && "
         "(setsid sh -c 'echo $$ > /dev/shm/pid; exec sleep 100000' </dev/null >/dev/null 2>&1 &); "
         "while [ ! -s /dev/shm/pid ]; do sleep 0.1; done; cat /dev/shm/pid")
CHECK = "cat ~/movefile /dev/shm/val; kill -0 $(cat /dev/shm/pid) && echo alive"


def row(pg_url, sid):  # noqa: F811
    out = sql(pg_url, "SELECT state||'|'||node||'|'||COALESCE(parts,'') FROM sandboxes WHERE id='%s'" % sid)
    state, node, parts = out[0].split("|", 2)
    return state, node, json.loads(parts) if parts else None


def wait_for(what, fn, timeout=120):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = fn()
        if v:
            return v
        time.sleep(0.5)
    raise AssertionError("timed out waiting for " + what)


def space(control, *args):
    env = dict(os.environ, SPACE_URL=control.url, SPACE_API_KEY=control.admin_key)
    out = subprocess.run([os.path.join(spacedlib.BUILD, "space")] + list(args), env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out
    return out.stdout


def verb(control, sid, name, want="succeeded"):
    r = control.request("POST", "/v1/sandboxes/%s/%s" % (sid, name))
    assert r.status == 202, r
    op = control.wait_op(r.json["operation"]["id"], timeout=600)
    assert op["state"] == want, op
    return r, op


def flip(path, at):
    os.chmod(path, 0o644)
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0xFF]))


def sandbox_with_state(control, nodes):
    """A sandbox created through the control, running SETUP: (id, its node, the other)."""
    wait_live(control)
    by_id = {n.node_id: n for n in nodes}
    r = control.request("POST", "/v1/sandboxes", BODY)
    assert r.status == 202, r
    sid, a = r.json["sandbox"]["id"], by_id[r.headers.get("x-space-node")]
    assert control.wait_op(r.json["operation"]["id"])["state"] == "succeeded", a.log()
    _, res = run(control, sid, {"cmd": SETUP})
    assert res["exit"] == {"code": 0, "signal": None} and res["stdout"].strip().isdigit(), res
    return sid, a, next(n for n in nodes if n is not a)


def test_suspended_sandbox_moves_off_a_drained_node(cluster, pg_url):  # noqa: F811
    control, nodes, _, _ = cluster
    # 1. A sandbox on node A with a file on its disk and state in its memory.
    sid, a, b = sandbox_with_state(control, nodes)

    # 2. A running sandbox on a drained node is not moved: the verb reaches A, which
    # refuses it; the row still names A.
    space(control, "node", "drain", a.node_id)
    r = control.request("POST", "/v1/sandboxes/%s/restore" % sid)
    assert r.status == 409 and r.headers.get("x-space-node") == a.node_id, r
    assert row(pg_url, sid)[1] == a.node_id
    space(control, "node", "undrain", a.node_id)

    # 3. Suspended: A hashes its files into the row.
    verb(control, sid, "suspend")
    parts = wait_for("the suspended sandbox's parts", lambda: row(pg_url, sid)[2])
    names = {f["name"]: f for f in parts["files"]}
    assert parts["node"] == a.node_id, parts
    assert {"state", "snapshot.json", "disk.qcow2", "layer0"} <= set(names), names
    assert os.path.getsize(os.path.join(a.data_dir, "sandboxes", sid, "suspend", "state")) == names["state"]["size"]
    # The node API gives the files to no one without the node token.
    target = "/internal/sandboxes/%s/parts/state" % sid
    token = spacedlib.SPACED_ENV["SPACE_NODE_TOKEN"]
    for port, headers, want in ((a.port, {}, 403), (a.port, {"X-Space-Node-Token": "x" * 32}, 403),
                                (control.port, {"Authorization": "Bearer " + control.admin_key}, 404)):
        status, body = raw_get(port, target, headers)
        assert status == want and len(body) < 1024, (port, status, body[:200])
    for bad in ("../../etc/passwd", "layer9", "backing.json", "net.claimed"):
        status, _ = raw_get(a.port, "/internal/sandboxes/%s/parts/%s" % (sid, bad), {"X-Space-Node-Token": token})
        assert status == 404, (bad, status)

    # 4. A drained: the restore through the control moves the sandbox to B, which fetches
    # and verifies its files and restores it with its memory.
    space(control, "node", "drain", a.node_id)
    r, _ = verb(control, sid, "restore")
    assert r.headers.get("x-space-node") == b.node_id, r
    _, res = run(control, sid, {"cmd": CHECK})
    assert res["stdout"] == b"moved-42\nmem-42\nalive\n", (res, b.log())
    state, node, parts = row(pg_url, sid)
    assert (state, node, parts) == ("running", b.node_id, None), (state, node, parts)
    got = control.request("GET", "/v1/sandboxes/" + sid)
    assert got.status == 200 and got.json["sandbox"]["node"] == b.node_id, got
    listed = next(x for x in space(control, "ls").splitlines() if sid in x)
    assert b.node_id in listed and a.node_id not in listed, listed
    line = next(x for x in full_log(b).splitlines() if "sandbox.move" in x and "result=verified" in x)
    print(line)  # parts, bytes and ms (TCG host, loopback)
    # A lets go: the sandbox leaves its table and its files go, once B has them.
    wait_for("A to remove its copy", lambda: not os.path.exists(os.path.join(a.data_dir, "sandboxes", sid)))
    assert "event=moved_out" in full_log(a) and "event=files_removed" in full_log(a)

    # 5. Back the other way, with B's saved state altered after it was hashed: A refuses
    # the bytes, keeps nothing, and the sandbox stays on B (its row without parts, so it
    # is not moved again), where it comes back.
    verb(control, sid, "suspend")
    parts = wait_for("the parts on B", lambda: row(pg_url, sid)[2])
    assert parts["node"] == b.node_id, parts
    space(control, "node", "undrain", a.node_id)
    space(control, "node", "drain", b.node_id)
    state_path = os.path.join(b.data_dir, "sandboxes", sid, "suspend", "state")
    size = os.path.getsize(state_path)
    flip(state_path, size // 2)
    r, op = verb(control, sid, "restore", want="failed")
    assert r.headers.get("x-space-node") == a.node_id, r
    assert op["error"]["code"] == "sandbox_digest_mismatch" and "SHA-256" in op["error"]["message"], op
    assert row(pg_url, sid) == ("suspended", b.node_id, None)
    assert not os.path.exists(os.path.join(a.data_dir, "sandboxes", sid))
    assert not [e for e in os.listdir(os.path.join(a.data_dir, "sandboxes")) if sid in e]
    flip(state_path, size // 2)  # the node's own copy, repaired, restores where it is
    r, _ = verb(control, sid, "restore")
    assert r.headers.get("x-space-node") == b.node_id, r
    _, res = run(control, sid, {"cmd": "cat /dev/shm/val"})
    assert res["stdout"] == b"mem-42\n", res
    space(control, "node", "undrain", b.node_id)
    d = control.request("DELETE", "/v1/sandboxes/" + sid)
    assert d.status == 202 and control.wait_op(d.json["operation"]["id"])["state"] == "succeeded"


def node_get(node, control, path):
    """A GET straight to a node's API, as a control would send it (node token)."""
    return raw_get(node.port, path, {"X-Space-Node-Token": spacedlib.SPACED_ENV["SPACE_NODE_TOKEN"],
                                     "Authorization": "Bearer " + control.admin_key})


def fetch_mark(sid, a):
    """What B logs as it begins to fetch sid's files from A."""
    return "sandbox.move sandbox=%s source=%s" % (sid, a.node_id)


def move_as_the_old_node_dies(control, pg_url, restart, sid, a, b):  # noqa: F811
    """The sandbox suspended on A (its files recorded), A drained and stopped (SIGSTOP) so
    that the restore through the control moves the row to B and B's fetch waits on A,
    then A killed and started again. Returns the restore's operation once it ended."""
    verb(control, sid, "suspend")
    wait_for("the parts on A", lambda: row(pg_url, sid)[2])
    space(control, "node", "drain", a.node_id)
    a.proc.send_signal(signal.SIGSTOP)
    r = control.request("POST", "/v1/sandboxes/%s/restore" % sid)
    assert r.status == 202 and r.headers.get("x-space-node") == b.node_id, r
    wait_for("B's fetch", lambda: full_log(b).count(fetch_mark(sid, a) + " parts=") == 1)
    restart(a)  # SIGKILL, then started again
    return control.wait_op(r.json["operation"]["id"], timeout=600)


def test_kill9_of_either_node_during_a_move(cluster, pg_url):  # noqa: F811
    """A move interrupted by a kill -9 of the old node (its files unreachable, the move
    already stored) or of the new one (mid-fetch): nothing is lost, the old node coming
    back never adopts the sandbox (its row names the new one) and keeps the files until
    the new node has them, and the new node coming back finishes the move. The old node
    is stopped (SIGSTOP) before each fetch starts, so the kill always finds the fetch in
    progress."""
    control, nodes, restart, _ = cluster
    sid, a, b = sandbox_with_state(control, nodes)
    mark = fetch_mark(sid, a)

    # 1. A stops answering as the fetch begins, then is killed: the restore fails, the
    # sandbox stays on B, suspended, its files still recorded as A's.
    op = move_as_the_old_node_dies(control, pg_url, restart, sid, a, b)
    assert op["state"] == "failed" and op["error"]["code"] in (
        "sandbox_source_unavailable", "sandbox_fetch_failed"), op
    state, node, parts = row(pg_url, sid)
    assert (state, node, parts["node"]) == ("suspended", b.node_id, a.node_id), (state, node, parts)
    assert not [e for e in os.listdir(os.path.join(b.data_dir, "sandboxes")) if e.startswith(".move")]
    # Its credential rules come with A's files: a change on B is refused until B has them
    # (the fetch would otherwise bring back the older ones).
    r = control.request("PUT", "/v1/sandboxes/%s/credentials" % sid, [])
    assert r.status == 409 and r.json["error"]["code"] == "sandbox_moving", r
    # A, back, does not take the sandbox (its row names B) and keeps its files for B.
    assert os.path.exists(os.path.join(a.data_dir, "sandboxes", sid, "suspend", "state"))
    status, body = node_get(a, control, "/v1/sandboxes/" + sid)
    assert status == 404, (status, body[:300])

    # 2. B is killed mid-fetch (A stopped again so the fetch waits): B, back, runs the
    # restore again and finishes the move.
    a.proc.send_signal(signal.SIGSTOP)
    r = control.request("POST", "/v1/sandboxes/%s/restore" % sid)
    assert r.status == 202 and r.headers.get("x-space-node") == b.node_id, r
    wait_for("B's second fetch", lambda: full_log(b).count(mark + " parts=") == 2)
    restart(b, between=lambda: a.proc.send_signal(signal.SIGCONT))
    op = control.wait_op(r.json["operation"]["id"], timeout=600)
    assert op["state"] == "succeeded", (op, b.log())
    _, res = run(control, sid, {"cmd": CHECK})
    assert res["stdout"] == b"moved-42\nmem-42\nalive\n", (res, b.log())
    assert row(pg_url, sid) == ("running", b.node_id, None)
    wait_for("A to remove its copy", lambda: not os.path.exists(os.path.join(a.data_dir, "sandboxes", sid)))
    space(control, "node", "undrain", a.node_id)


def test_stopped_sandbox_moved_by_a_control_that_died(cluster, pg_url):  # noqa: F811
    """A stopped sandbox (its disk and chain recorded, no memory) whose row a control moved
    just before it was killed (the update done here as that control would, and no verb
    forwarded): the next start through any control goes to the node the row names, which
    loads the row, fetches the files from the old node and boots the disk there."""
    control, nodes, _, _ = cluster
    sid, a, b = sandbox_with_state(control, nodes)
    verb(control, sid, "stop")
    parts = wait_for("the stopped sandbox's parts", lambda: row(pg_url, sid)[2])
    assert {f["name"] for f in parts["files"]} == {"disk.qcow2"} | {c["part"] for c in parts["chain"]}, parts
    text = sql(pg_url, "SELECT parts FROM sandboxes WHERE id='%s'" % sid)[0]
    sql(pg_url, "UPDATE sandboxes SET node='%s' WHERE id='%s' AND node='%s' AND parts='%s' AND "
                "state IN ('suspended','stopped') AND desired=state" % (b.node_id, sid, a.node_id, text))
    assert row(pg_url, sid)[:2] == ("stopped", b.node_id)
    r, _ = verb(control, sid, "start")
    assert r.headers.get("x-space-node") == b.node_id, r
    _, res = run(control, sid, {"cmd": "cat ~/movefile"})
    assert res["stdout"] == b"moved-42\n", (res, b.log())
    assert row(pg_url, sid) == ("running", b.node_id, None)
    wait_for("A to remove its copy", lambda: not os.path.exists(os.path.join(a.data_dir, "sandboxes", sid)))


def net_record(node, sid):
    """The node's network record of the sandbox (secrets included) and its mode, or None."""
    path = os.path.join(node.data_dir, "net", sid + ".json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f), os.stat(path).st_mode & 0o777


def sandbox_with_rules(control, nodes, tag):
    """sandbox_with_state with one credential rule put through the control (a secret
    made of tag and random bytes): (id, its node, the other, the rules URL, the rules)."""
    sid, a, b = sandbox_with_state(control, nodes)
    url = "/v1/sandboxes/%s/credentials" % sid
    rules = [{"host": "api.test", "header": "Authorization", "secret": "Bearer %s-%s" % (tag, os.urandom(8).hex())}]
    r = control.request("PUT", url, rules)
    assert r.status == 200 and r.headers.get("x-space-node") == a.node_id, r
    return sid, a, b, url, rules


def test_credential_rules_move_with_the_sandbox(cluster, pg_url):  # noqa: F811
    """A sandbox's credential rules (secrets included) travel with it: suspended on A
    with a rule, moved to B by a restore through the control, B holds the same rule and
    secret in its own network record (0600) and A none; a change of the rules on B while
    its files are recorded drops that record first, so the move back to A carries the new
    rules, not the ones hashed before. No traffic: the sandbox has no NIC (policy none)
    and the rules are read back through the API and from the nodes' records. A secret
    is never logged."""
    control, nodes, _, _ = cluster
    sid, a, b, url, first = sandbox_with_rules(control, nodes, "one")
    verb(control, sid, "suspend")
    wait_for("the parts on A", lambda: row(pg_url, sid)[2])
    space(control, "node", "drain", a.node_id)
    r, _ = verb(control, sid, "restore")
    assert r.headers.get("x-space-node") == b.node_id, r
    got = control.request("GET", url)
    assert got.status == 200 and got.json["credentials"] == [{"host": "api.test", "header": "Authorization"}], got
    rec, mode = net_record(b, sid)
    assert rec["creds"] == first and mode == 0o600, (rec, mode)
    assert not os.path.exists(os.path.join(b.data_dir, "sandboxes", sid, "creds"))
    wait_for("A to release its record", lambda: net_record(a, sid) is None)
    _, res = run(control, sid, {"cmd": CHECK})
    assert res["stdout"] == b"moved-42\nmem-42\nalive\n", (res, b.log())

    # Back to A, the rules changed on B after its files were hashed: the record is
    # dropped and made again, so A gets the new rules.
    verb(control, sid, "suspend")
    hashed = wait_for("the parts on B", lambda: row(pg_url, sid)[2])
    assert "creds" in {f["name"] for f in hashed["files"]}, hashed
    second = [{"host": "other.test", "header": "X-Key", "secret": "two-" + os.urandom(8).hex()}]
    r = control.request("PUT", url, second)
    assert r.status == 200 and r.headers.get("x-space-node") == b.node_id, r

    def remade():
        parts = row(pg_url, sid)[2]
        return parts if parts and parts != hashed else None
    assert wait_for("the parts made again", remade)["node"] == b.node_id
    space(control, "node", "undrain", a.node_id)
    space(control, "node", "drain", b.node_id)
    r, _ = verb(control, sid, "restore")
    assert r.headers.get("x-space-node") == a.node_id, r
    rec, mode = net_record(a, sid)
    assert rec["creds"] == second and mode == 0o600, (rec, mode)
    wait_for("B to release its record", lambda: net_record(b, sid) is None)
    for n in (a, b, control):
        log = full_log(n)
        assert first[0]["secret"] not in log and second[0]["secret"] not in log, n.log_path
    space(control, "node", "undrain", b.node_id)
    d = control.request("DELETE", "/v1/sandboxes/" + sid)
    assert d.status == 202 and control.wait_op(d.json["operation"]["id"])["state"] == "succeeded"


def test_old_node_restarted_before_a_hand_back_keeps_the_rules(cluster, pg_url):  # noqa: F811
    """The old node A restarted while the sandbox's row names B and B has not fetched its
    files: A keeps the network record with the credential rules (they go with A's files,
    which B may still refuse), so when B's fetch finds a digest mismatch and hands the
    sandbox back, A restores it with its rules. A's startup sweep released the record of
    a sandbox not in its table, and the rules' secrets were gone for good."""
    control, nodes, restart, _ = cluster
    sid, a, b, url, rules = sandbox_with_rules(control, nodes, "kept")
    # The move stored, A stopped as B's fetch begins, then killed and started again.
    assert move_as_the_old_node_dies(control, pg_url, restart, sid, a, b)["state"] == "failed"
    assert row(pg_url, sid)[:2] == ("suspended", b.node_id)
    kept = net_record(a, sid)
    assert kept and kept[0]["creds"] == rules, ("A lost the rules at its restart", kept)

    # B's next fetch is refused (A's saved state altered after it was hashed): the
    # sandbox goes back to A, which restores it, rules included.
    state_path = os.path.join(a.data_dir, "sandboxes", sid, "suspend", "state")
    size = os.path.getsize(state_path)
    flip(state_path, size // 2)
    r, op = verb(control, sid, "restore", want="failed")
    assert op["error"]["code"] == "sandbox_digest_mismatch", op
    assert row(pg_url, sid) == ("suspended", a.node_id, None)
    flip(state_path, size // 2)
    r, _ = verb(control, sid, "restore")
    assert r.headers.get("x-space-node") == a.node_id, r
    got = control.request("GET", url)
    assert got.status == 200 and got.json["credentials"] == [{"host": "api.test", "header": "Authorization"}], got
    assert net_record(a, sid)[0]["creds"] == rules
    _, res = run(control, sid, {"cmd": CHECK})
    assert res["stdout"] == b"moved-42\nmem-42\nalive\n", (res, a.log())
    space(control, "node", "undrain", a.node_id)
    d = control.request("DELETE", "/v1/sandboxes/" + sid)
    assert d.status == 202 and control.wait_op(d.json["operation"]["id"])["state"] == "succeeded"
