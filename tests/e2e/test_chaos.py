"""Chaos: PostgreSQL, two control replicas and two nodes on one machine (docs/multinode.md)
while client threads create sandboxes, run commands, move files and delete through both
controls. In turns, node-a is killed (SIGKILL) and restarted, a control is killed and
restarted on its port, and PostgreSQL is stopped for a few seconds and started again.

Nothing is asserted about what happens during the chaos (calls may fail: 502, 503,
refused connections); afterwards, once every daemon is back:
- every operation that was accepted (got an id) is terminal, and so is every operation in
  the database (none left pending or running: nothing is stuck);
- every sandbox whose create was acknowledged is accounted for: listed, deleted by its
  client, or its create failed with a reason; every listed running sandbox runs a command
  and returns a file intact;
- the QEMU processes on each node are exactly the VMs its sandbox rows say it runs, and
  after everything is deleted none of this test's QEMUs is left;
- no daemon crashed and no log holds a sanitizer report.

Bounded: small counts and fixed pauses (a few minutes under TCG); no timing assertion.
With SPACE_TEST_KEEP set, the daemons' whole logs are kept in the run directory.
PostgreSQL: a server of its own (it is stopped here), as test_store_pg does; skips,
saying why, without one or without the guest."""
import os
import re
import threading
import time

import pytest

from spacedlib import RUN_DIR, procs_naming, vm_missing
from test_cluster import Cluster, sql
from test_sessions import run
from test_store_pg import own_pg_server, pg_ctl

BODY = {"template": "base", "timeout": 0, "network": {"mode": "none"}}
TERMINAL = ("succeeded", "failed", "canceled")
SANITIZER = re.compile(r"AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer|runtime error:")
THREADS = 3
ROUNDS = 8  # creates per client thread at most


def call(controls, i, method, path, body=None, raw=None, timeout=60):
    """One request through control i % 2; None when the control cannot be reached (it
    may be down right now)."""
    try:
        return controls[i % len(controls)].request(method, path, body, raw=raw, timeout=timeout)
    except OSError:
        return None


def wait_terminal(controls, op_id, deadline):
    """The operation once terminal, asking either control in turn; None past deadline."""
    i = 0
    while time.monotonic() < deadline:
        r = call(controls, i, "GET", "/v1/operations/%s?wait=10" % op_id)
        if r is not None and r.status == 200 and r.json["operation"]["state"] in TERMINAL:
            return r.json["operation"]
        i += 1
        if r is None or r.status != 200:
            time.sleep(1)
    return None


def exec_and_files(control, sid, tag):
    """A command and a file round trip in sid; raises on any failure."""
    _, res = run(control, sid, {"cmd": "echo chaos-%s" % tag})
    assert res["exit"] == {"code": 0, "signal": None} and res["stdout"] == ("chaos-%s\n" % tag).encode(), res
    data = os.urandom(64 << 10)
    r = control.request("PUT", "/v1/sandboxes/%s/files?path=/tmp/chaos.bin" % sid, raw=data,
                        headers={"Content-Type": "application/octet-stream"})
    assert r.status == 200, r
    r = control.request("GET", "/v1/sandboxes/%s/files?path=/tmp/chaos.bin" % sid)
    assert r.status == 200 and r.body == data, r


class Client(threading.Thread):
    """Creates up to ROUNDS sandboxes one after the other (until the chaos is over)
    through alternating controls; suspends and restores every second one; in each that
    comes up, runs a command and a file round trip; deletes every other one.
    Records every accepted operation and acknowledged create; failures only counted."""

    def __init__(self, n, controls, stop):
        super().__init__(daemon=True)
        self.n, self.controls, self.stop = n, controls, stop
        self.ops, self.created, self.deleted, self.errors = [], [], [], []

    def run(self):
        for k in range(ROUNDS):
            if self.stop.is_set():  # the chaos is over: leave the rest
                return
            i = self.n + k
            r = call(self.controls, i, "POST", "/v1/sandboxes", dict(BODY, metadata={"c": "%d-%d" % (self.n, k)}))
            if r is None or r.status != 202:
                self.errors.append(("create", r))
                continue
            sid, op_id = r.json["sandbox"]["id"], r.json["operation"]["id"]
            self.ops.append(op_id)
            self.created.append((sid, op_id))
            op = wait_terminal(self.controls, op_id, time.monotonic() + 240)
            if not op or op["state"] != "succeeded":
                self.errors.append(("create-op", op))
                continue
            if k % 2 == 1:  # suspended and restored (its VM leaves and comes back)
                for verb in ("suspend", "restore"):
                    v = call(self.controls, i, "POST", "/v1/sandboxes/%s/%s" % (sid, verb))
                    if v is None or v.status != 202:
                        self.errors.append((verb, v))
                        break
                    self.ops.append(v.json["operation"]["id"])
                    op = wait_terminal(self.controls, v.json["operation"]["id"], time.monotonic() + 240)
                    if not op or op["state"] != "succeeded":
                        self.errors.append((verb + "-op", op))
                        break
            try:
                exec_and_files(self.controls[(i + 1) % 2], sid, "%d-%d" % (self.n, k))
            except (AssertionError, OSError, KeyError, ValueError) as e:
                self.errors.append(("exec", repr(e)[:200]))
            if k % 2 == 0:
                d = call(self.controls, i + 1, "DELETE", "/v1/sandboxes/" + sid)
                if d is not None and d.status == 202:
                    self.ops.append(d.json["operation"]["id"])
                    self.deleted.append((sid, d.json["operation"]["id"]))
                else:
                    self.errors.append(("delete", d))


def full_log(d):
    with open(d.log_path, errors="replace") as f:
        return f.read()


def qemu_sids(node):
    """{sandbox id: pid} of the sandbox QEMUs running for node (their -name), plus the
    pids of any other QEMU naming its data directory under "other"."""
    found, other = {}, []
    for pid, argv in procs_naming(node.data_dir):
        if "qemu-system" not in os.path.basename(argv[0]):
            continue
        name = argv[argv.index("-name") + 1] if "-name" in argv else ""
        m = re.match(r"(sb[0-9a-f]{16}),", name)
        if m:
            found[m.group(1)] = pid
        else:
            other.append((pid, name))
    return found, other


def list_all(control):
    out, cursor = [], None
    while True:
        r = control.request("GET", "/v1/sandboxes?limit=100" + ("&cursor=" + cursor if cursor else ""))
        assert r.status == 200, r
        out += r.json["sandboxes"]
        cursor = r.json.get("next_cursor")
        if not cursor:
            return out


def test_chaos_nodes_controls_and_database_die_in_turns(monkeypatch):
    why = vm_missing()
    if why:
        pytest.skip(why)
    with own_pg_server("space-e2e-chaos-") as (pgdir, url):
        c = Cluster(url, monkeypatch)
        try:
            _chaos(c, pgdir, url)
        finally:
            if os.environ.get("SPACE_TEST_KEEP"):  # for reading: stop() removes data dirs
                for k, d in enumerate(c.made):
                    with open(os.path.join(RUN_DIR, "chaos-%d-%s.log" % (k, d.role_args[1])), "w") as f:
                        f.write(full_log(d))
            c.stop()


def _chaos(c, pgdir, url):
    controls = [c.add_control(), c.add_control()]
    node_a, node_b = c.add_node("node-a"), c.add_node("node-b")
    c.wait_live()
    daemons = controls + [node_a, node_b]
    # Each node starts its template snapshot first (the create cold-boots beside the
    # build), so that during the chaos most creates are restores and the clients get to
    # their commands and files; not waited for: a loaded machine may time a build out.
    warm = []
    for _ in range(2):  # one per node: the emptier node wins
        r = controls[0].request("POST", "/v1/sandboxes", BODY)
        assert r.status == 202, r
        warm.append((r.headers.get("x-space-node"), r.json))
    assert sorted(n for n, _ in warm) == ["node-a", "node-b"], warm
    for _, w in warm:  # a cold boot may outlast the agent's deadline on a loaded machine
        controls[0].wait_op(w["operation"]["id"])
        d = controls[1].request("DELETE", "/v1/sandboxes/" + w["sandbox"]["id"])
        assert d.status == 202 and controls[1].wait_op(d.json["operation"]["id"])["state"] == "succeeded", d

    stop = threading.Event()
    clients = [Client(n, controls, stop) for n in range(THREADS)]
    for t in clients:
        t.start()

    # The chaos: fixed pauses, so each outage lands while creates, commands and file
    # transfers run (which ones is not asserted); two rounds.
    def pg_outage():
        pg_ctl("pause", pgdir)
        time.sleep(5)
        pg_ctl("resume", pgdir)

    turns = [lambda: c.restart(node_a, between=lambda: time.sleep(3)),
             lambda: c.restart(controls[0], between=lambda: time.sleep(2)),
             pg_outage,
             lambda: c.restart(node_b, between=lambda: time.sleep(3)),
             lambda: c.restart(controls[1], between=lambda: time.sleep(2))]
    time.sleep(8)
    for turn in turns * 2:
        turn()
        time.sleep(6)
    stop.set()
    for t in clients:
        t.join(400)
        assert not t.is_alive(), "a client thread did not finish"
    for d in daemons:
        assert d.proc.poll() is None, ("a daemon died", d.role_args, d.log())
    c.wait_live(timeout=120)

    # Every accepted operation ends; so does every operation in the database (those of
    # creates whose reply was lost with a control included).
    accepted = [op for t in clients for op in t.ops]
    assert accepted, [t.errors for t in clients]
    deadline = time.monotonic() + 300
    ends = {op: wait_terminal(controls, op, deadline) for op in accepted}
    stuck = [op for op, end in ends.items() if end is None]
    assert not stuck, (stuck, sql(url, "SELECT id||':'||kind||':'||state FROM operations"),
                       node_a.log(), node_b.log())
    open_ops = sql(url, "SELECT id||':'||kind||':'||state FROM operations WHERE state NOT IN "
                        "('succeeded','failed','canceled')")
    assert not open_ops, open_ops
    for op, end in ends.items():
        if end["state"] != "succeeded":
            assert end["error"] and end["error"]["message"], end

    # Every acknowledged create is accounted for.
    listed = {s["id"]: s for s in list_all(controls[1])}
    deleted = {sid for t in clients for sid, op in t.deleted if ends[op]["state"] == "succeeded"}
    for t in clients:
        for sid, op in t.created:
            if ends[op]["state"] == "succeeded":
                assert sid in listed or sid in deleted, (sid, ends[op], listed.keys())
            else:
                assert sid in listed or ends[op]["error"]["message"], (sid, ends[op])
    for sid in deleted:
        assert sid not in listed, listed[sid]

    # The sandbox QEMUs are exactly the VMs the nodes' rows say they run (a template
    # snapshot may still be building: its VM ends on its own, checked below).
    for n in (node_a, node_b):
        running = set(sql(url, "SELECT id FROM sandboxes WHERE node='%s' AND state IN ('running','paused')"
                               % n.node_id))
        vms, _ = qemu_sids(n)
        assert set(vms) == running, (n.node_id, vms, running, n.log())

    # Every running sandbox works after all this.
    for k, (sid, s) in enumerate(sorted(listed.items())):
        if s["state"] == "running":
            exec_and_files(controls[k % 2], sid, "after-%d" % k)

    # Everything deleted: no QEMU of this test is left.
    for sid in listed:
        d = controls[0].request("DELETE", "/v1/sandboxes/" + sid)
        assert d.status == 202, d
        op = wait_terminal(controls, d.json["operation"]["id"], time.monotonic() + 120)
        assert op and op["state"] == "succeeded", (op, node_a.log(), node_b.log())
    for n in (node_a, node_b):
        vms, _ = qemu_sids(n)
        assert not vms, (n.node_id, vms)
        # A snapshot build ends by itself (a killed node's are ended by its next start).
        deadline = time.monotonic() + 300
        while qemu_sids(n)[1] and time.monotonic() < deadline:
            time.sleep(2)
        assert not qemu_sids(n)[1], (n.node_id, qemu_sids(n), n.log())

    # No crash, no sanitizer report, in any daemon's whole log (restarts append to it).
    for d in daemons:
        d.stop(cleanup=False)
        log = full_log(d)
        m = SANITIZER.search(log)
        assert not m, log[max(0, m.start() - 2000):m.start() + 4000]
    for t in clients:
        print("chaos client %d: %d creates acknowledged (%d succeeded), %d deletes, failed calls: %s"
              % (t.n, len(t.created), sum(ends[op]["state"] == "succeeded" for _, op in t.created),
                 len(t.deleted), [(what, repr(r)[:120]) for what, r in t.errors]))
