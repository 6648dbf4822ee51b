"""Multi-node roles on one machine: one `spaced --role=control` and two `--role=node`
daemons sharing one PostgreSQL database (docs/multinode.md).

Two real `base` sandboxes created through the control daemon land on different nodes
(most free capacity first; a sandbox that fits nowhere is refused), commands run in them through the control daemon (session
create and the attach event stream are forwarded to the owning node), listings come from
the shared store, a node refuses requests without the shared secret, and deletes through
the control daemon finish on the nodes. PostgreSQL comes from test_store_pg's fixtures
(SPACE_TEST_PG or a throwaway server; skips, saying why, without one)."""
import hashlib
import http.client
import os
import secrets
import subprocess
import time

import pytest

import spacedlib
from spacedlib import GUEST, Spaced, poll, stop_all, vm_missing
from test_sessions import run
from test_store_pg import pg_server, pg_url, run_after_restart  # noqa: F401 (fixtures)

BODY = {"template": "base", "timeout": 0, "network": {"mode": "none"}}
# Sandbox states that hold no VM on their node (capacity accounting, cluster.h).
NO_VM = "('suspended','stopped','deleted','failed')"


def wait_live(control, want=("node-a", "node-b"), timeout=60):
    """Returns once exactly the nodes `want` are live on the control; fails after timeout s."""
    seen = []

    def check():
        seen[:] = live_nodes(control)
        return set(seen) == set(want)
    try:
        poll(check, timeout=timeout)
    except AssertionError:
        raise AssertionError("live nodes %r after %d s, want %r" % (seen, timeout, list(want)))


def live_nodes(control):
    r = control.request("GET", "/v1/nodes")
    assert r.status == 200, r
    return {n["id"]: n for n in r.json["nodes"] if n["live"]}


def sql(url, query):
    r = subprocess.run(["psql", "-X", "-At", "-d", url, "-c", query], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()  # one row a line (a value may hold spaces: a runtime)


class Cluster:
    """Control and node daemons on one database (docs/multinode.md), each restartable on
    the port it first got (a node must advertise the port it listens on; a client of a
    control finds it again after its restart). Each node offers `vcpus` vCPUs and 4096
    MiB. stop() stops every daemon started."""

    def __init__(self, store_url, monkeypatch, vcpus=4):
        self.store = ["--store", store_url]
        self.vcpus = str(vcpus)
        self.monkeypatch = monkeypatch
        self.made = []
        self.controls, self.nodes = [], []
        monkeypatch.setitem(spacedlib.SPACED_ENV, "SPACE_NODE_TOKEN", secrets.token_hex(16))

    def _start(self, d):
        with self.monkeypatch.context() as m:
            m.setattr(spacedlib, "free_port", lambda: d.fixed_port)
            d.start(extra=self.store + d.role_args)

    def _new(self, role_args):
        d = Spaced(GUEST)
        self.made.append(d)
        d.fixed_port = spacedlib.free_port()
        d.role_args = role_args
        return d

    def add_control(self):
        """Another control replica (the admin key was written by the first daemon; a
        later one finds it in the store and writes none)."""
        c = self._new(["--role", "control"])
        self._start(c)
        if self.controls:
            with open(os.path.join(c.data_dir, "admin.key"), "w") as f:
                f.write(self.controls[0].admin_key)
        self.controls.append(c)
        return c

    def add_node(self, name):
        n = self._new([])
        n.node_id = name
        n.role_args = ["--role", "node", "--node-id", name, "--advertise", "http://127.0.0.1:%d" % n.fixed_port,
                       "--capacity-vcpus", self.vcpus, "--capacity-mem", "4096"]
        self._start(n)
        self.nodes.append(n)
        return n

    def restart(self, d, graceful=False, between=None):
        """Stops d (SIGKILL, or SIGTERM when graceful: a node's sandboxes keep running for
        its next start), calls between() and starts it again with the same options."""
        if graceful:
            d.stop(cleanup=False)
        else:
            d.kill9()
        if between:
            between()
        self._start(d)

    def wait_live(self, timeout=60):
        wait_live(self.controls[0], [n.node_id for n in self.nodes], timeout)

    def stop(self):
        stop_all(self.made)


@pytest.fixture
def cluster(pg_url, monkeypatch, request):  # noqa: F811 (fixture from test_store_pg)
    """(control, [node-a, node-b], restart, second_control) on one fresh database, all
    stopped afterwards (Cluster: restart(daemon, graceful, between); second_control()
    starts another control replica). Each node offers 4 vCPUs and 4096 MiB, or the
    "vcpus" of an indirect parameter."""
    why = vm_missing()
    if why:
        pytest.skip(why)
    c = Cluster(pg_url, monkeypatch, getattr(request, "param", {}).get("vcpus", 4))
    try:
        control = c.add_control()
        for name in ("node-a", "node-b"):
            c.add_node(name)
        yield control, c.nodes, c.restart, c.add_control
    finally:
        c.stop()


def test_two_nodes_place_exec_delete_through_control(cluster, pg_url):  # noqa: F811
    control, nodes, restart, second_control = cluster
    wait_live(control)

    # Nothing is placed where it does not fit (each node offers 4096 MiB).
    r = control.request("POST", "/v1/sandboxes", dict(BODY, memory_mib=8192))
    assert r.status == 503 and r.error_code() == "no_capacity", r

    placed = {}
    for i in range(2):
        r = control.request("POST", "/v1/sandboxes", dict(BODY, metadata={"i": str(i)}))
        assert r.status == 202, r
        placed[r.json["sandbox"]["id"]] = (r.headers.get("x-space-node"), r.json["operation"]["id"])
    assert sorted(n for n, _ in placed.values()) == ["node-a", "node-b"], placed
    for sid, (node, op_id) in placed.items():
        op = control.wait_op(op_id)
        assert op["state"] == "succeeded", (op, nodes[0].log(), nodes[1].log())
    rows = dict(line.split("|") for line in sql(pg_url, "SELECT id||'|'||node FROM sandboxes"))
    assert rows == {sid: node for sid, (node, _) in placed.items()}

    # Listing comes from the shared store, with each sandbox's node and whether it is
    # live; per-sandbox reads are answered by the owner.
    listed = {s["id"]: s for s in control.request("GET", "/v1/sandboxes").json["sandboxes"]}
    assert set(listed) == set(placed)
    for sid, (node, _) in placed.items():
        assert listed[sid]["node"] == node and listed[sid]["node_state"] == "live", listed[sid]
    cli_env = dict(os.environ, SPACE_URL=control.url, SPACE_API_KEY=control.admin_key)
    out = subprocess.run([os.path.join(spacedlib.BUILD, "space"), "nodes"], env=cli_env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "node-a" in out.stdout and "node-b" in out.stdout, out
    out = subprocess.run([os.path.join(spacedlib.BUILD, "space"), "ls"], env=cli_env,
                         capture_output=True, text=True, timeout=60)
    rows = {line.split()[0]: line.split()[-1] for line in out.stdout.splitlines()[1:]}
    assert out.stdout.split("\n")[0].split()[-1] == "NODE", out.stdout
    assert rows == {sid: node for sid, (node, _) in placed.items()}, out.stdout
    for sid, (node, _) in placed.items():
        r = control.request("GET", "/v1/sandboxes/" + sid)
        assert r.status == 200 and r.json["sandbox"]["state"] == "running", r
        assert r.headers.get("x-space-node") == node
        _, res = run(control, sid, {"cmd": "echo hello-from-$((40+2))"})
        assert res["exit"] == {"code": 0, "signal": None} and res["stdout"] == b"hello-from-42\n", res

    # Files through the control daemon: a 16 MiB upload (body forwarded), then a download
    # read only after a pause, so the control daemon has to stop reading from the node
    # until this client catches up; the bytes and Content-Length arrive intact.
    sid = next(iter(placed))
    data = os.urandom(16 << 20)
    r = control.request("PUT", "/v1/sandboxes/%s/files?path=/tmp/big.bin" % sid, raw=data,
                        headers={"Content-Type": "application/octet-stream"}, timeout=600)
    assert r.status == 200 and r.json["file"]["size"] == len(data), r
    conn = http.client.HTTPConnection("127.0.0.1", control.port, timeout=600)
    conn.request("GET", "/v1/sandboxes/%s/files?path=/tmp/big.bin" % sid,
                 headers={"Authorization": "Bearer " + control.admin_key})
    resp = conn.getresponse()
    time.sleep(2)  # not a timing assertion: only lets the node run ahead of this reader
    got = resp.read()
    conn.close()
    assert resp.status == 200 and resp.getheader("content-length") == str(len(data))
    assert hashlib.sha256(got).digest() == hashlib.sha256(data).digest()

    used = live_nodes(control)
    assert used["node-a"]["used"]["vcpus"] == 1 and used["node-b"]["used"]["vcpus"] == 1, used

    # A second control replica keeps no state of its own: it finds and reaches both.
    control2 = second_control()
    for sid, (node, _) in placed.items():
        r = control2.request("GET", "/v1/sandboxes/" + sid)
        assert r.status == 200 and r.headers.get("x-space-node") == node, r
    _, res = run(control2, next(iter(placed)), {"cmd": "echo via-replica"})
    assert res["stdout"] == b"via-replica\n", res

    # A node restarted after SIGKILL adopts its own sandbox again (and only its own).
    restart(nodes[0])
    sid_a = next(sid for sid, (node, _) in placed.items() if node == "node-a")
    res = run_after_restart(control, sid_a, {"cmd": "echo still-here"})
    assert res["exit"] == {"code": 0, "signal": None} and res["stdout"] == b"still-here\n", res
    log_a = nodes[0].log()
    other = next(sid for sid in placed if sid != sid_a)
    assert "sandbox=%s" % other not in log_a, log_a

    # A node stopped on purpose is at once not live: no placement there, and its
    # sandboxes answer node_down (they keep running and are adopted at its next start).
    sid_b = next(sid for sid, (node, _) in placed.items() if node == "node-b")

    def while_b_is_down():
        assert "node-b" not in live_nodes(control)
        r = control.request("GET", "/v1/sandboxes/" + sid_b)
        assert r.status == 503 and r.error_code() == "node_down", r
        states = {s["id"]: s["node_state"] for s in control.request("GET", "/v1/sandboxes").json["sandboxes"]}
        assert states == {sid_b: "down", sid_a: "live"}, states

    restart(nodes[1], graceful=True, between=while_b_is_down)
    res = run_after_restart(control, sid_b, {"cmd": "echo back"})
    assert res["stdout"] == b"back\n", res

    # A node answers only the control daemon (shared secret), except health checks.
    r = nodes[0].request("GET", "/v1/sandboxes", key=control.admin_key)
    assert r.status == 403 and r.error_code() == "forbidden", r
    assert nodes[0].request("GET", "/healthz", key=None).status == 200

    for sid in placed:
        d = control.request("DELETE", "/v1/sandboxes/" + sid)
        assert d.status == 202, d
        assert control.wait_op(d.json["operation"]["id"])["state"] == "succeeded"
        assert control.request("GET", "/v1/sandboxes/" + sid).status == 404
    for n in nodes:  # no sandbox run dir left (template snapshot builders aside)
        left = [d for d in os.listdir(os.path.join(n.data_dir, "run")) if d.startswith("sb")]
        assert not left, (left, n.log())


def test_port_proxy_through_control_keeps_secrets_from_the_guest(cluster):
    """Control -> node -> guest: the control forwards the client's API key (the node
    authenticates it) and adds the node token; the node's port proxy strips both, and
    every other credential form, before the request reaches the sandbox's server
    (test_port_secrets.py covers the single-daemon routes)."""
    from test_port_secrets import PORT, assert_nothing_leaked, exchange, secret_headers, start_recorder
    control, nodes, _, _ = cluster
    wait_live(control)
    r = control.request("POST", "/v1/sandboxes", dict(BODY, template="python"))
    assert r.status == 202, r
    sid = r.json["sandbox"]["id"]
    op = control.wait_op(r.json["operation"]["id"])
    assert op["state"] == "succeeded", op
    start_recorder(control, sid)
    node_token = spacedlib.SPACED_ENV["SPACE_NODE_TOKEN"]
    sec, values = secret_headers(control.admin_key, node_token)
    target = "/v1/sandboxes/%s/ports/%d/" % (sid, PORT)
    reqs = [("GET", target + "via-control", [("Host", "control"), ("X-Probe", "via-control")] + sec, b""),
            ("POST", target + "via-control-xkey",
             [("Host", "control"), ("X-Probe", "via-control-xkey")] + sec[1:], b"body")]
    assert exchange(("127.0.0.1", control.port), reqs) == [200, 200]
    assert_nothing_leaked(control, sid, ["via-control", "via-control-xkey"], values)


def _e2b_driver():
    """tests/e2b/test_e2b_sdk.py, loaded by path (tests/e2b is not a package): its
    script runner and SDK check."""
    import importlib.util
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2b", "test_e2b_sdk.py")
    spec = importlib.util.spec_from_file_location("e2b_sdk_driver", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_e2b_through_control(cluster):
    """The unmodified E2B SDK against a control daemon: its control plane (create placed
    on a node, list from the store, getInfo, timeout, pause/resume, connect, kill), envd
    (commands, files, watches) and host routing all forwarded to each sandbox's node.
    Errors the control answers itself come in E2B's shape, after authentication."""
    e2b = _e2b_driver()
    why = e2b.node_missing()
    if why:
        pytest.skip(why)
    control, nodes, _, _ = cluster
    wait_live(control)
    e2b_key = {"X-API-KEY": control.admin_key}
    # Nothing is placed or looked up for a caller without a key: E2B's 401, no node name.
    r = control.request("POST", "/v2/sandboxes", {"templateID": "base"}, key=None)
    assert r.status == 401 and set(r.json) == {"code", "message"}, r
    r = control.request("GET", "/sandboxes/sb0123456789abcdef", key=None)
    assert r.status == 401 and "x-space-node" not in r.headers, r
    r = control.request("GET", "/sandboxes/sb0123456789abcdef", key=None, headers=e2b_key)
    assert r.status == 404 and r.json["code"] == 404, r
    r = control.request("GET", "/v2/sandboxes", key=None, headers=e2b_key)
    assert r.status == 200 and r.json == [], r
    r = control.request("POST", "/process.Process/List", {}, key=None,
                        headers={"E2b-Sandbox-Id": "sb0123456789abcdef"})
    assert r.status == 502 and "not found" in r.json["message"], r
    for script in ("lifecycle.mjs", "commands.mjs", "files.mjs"):
        e2b.run_script(control, script, e2b.CURRENT, via_control=True)
    # Every sandbox the scripts made was killed through the control, on its node.
    r = control.request("GET", "/v2/sandboxes", key=None, headers=e2b_key)
    assert r.status == 200 and r.json == [], r


def test_drain_and_remove_nodes(cluster):
    """An operator drains a node (creates go elsewhere, `space node drain`), undrains it,
    and removes a node: refused while it runs (409 node_live) or holds a sandbox (409
    node_not_empty, its disks are there), done when it is down and empty; a removed node
    whose daemon starts again registers again."""
    control, nodes, restart, _ = cluster
    wait_live(control)
    cli_env = dict(os.environ, SPACE_URL=control.url, SPACE_API_KEY=control.admin_key)

    def space(*args):
        return subprocess.run([os.path.join(spacedlib.BUILD, "space"), *args], env=cli_env,
                              capture_output=True, text=True, timeout=60)

    out = space("node", "drain", "node-a")
    assert out.returncode == 0 and "draining" in out.stdout, out
    assert live_nodes(control)["node-a"]["draining"] is True
    assert "live,draining" in space("nodes").stdout
    placed = []
    for _ in range(2):
        r = control.request("POST", "/v1/sandboxes", BODY)
        assert r.status == 202 and r.headers.get("x-space-node") == "node-b", r
        placed.append(r.json["sandbox"]["id"])
        assert control.wait_op(r.json["operation"]["id"])["state"] == "succeeded", nodes[1].log()
    r = control.request("DELETE", "/v1/nodes/node-a")
    assert r.status == 409 and r.error_code() == "node_live", r
    assert control.request("DELETE", "/v1/nodes/node-zz").status == 404
    assert control.request("POST", "/v1/nodes/node-a/undrain").status == 204
    assert live_nodes(control)["node-a"]["draining"] is False
    r = control.request("POST", "/v1/keys", {"tenant": "not-an-operator"})
    assert r.status == 201, r
    assert control.request("POST", "/v1/nodes/node-a/drain", key=r.json["secret"]).status == 403

    def b_is_down():
        r = control.request("DELETE", "/v1/nodes/node-b")
        assert r.status == 409 and r.error_code() == "node_not_empty", r
        assert "2 sandboxes" in r.json["error"]["message"], r

    restart(nodes[1], graceful=True, between=b_is_down)

    def a_is_down():
        out = space("node", "rm", "node-a")
        assert out.returncode == 0 and "removed" in out.stdout, out
        r = control.request("GET", "/v1/nodes")
        assert "node-a" not in {n["id"] for n in r.json["nodes"]}, r

    restart(nodes[0], graceful=True, between=a_is_down)
    deadline = time.monotonic() + 60
    while "node-a" not in live_nodes(control):  # its heartbeat registers it again
        assert time.monotonic() < deadline, nodes[0].log()
        time.sleep(0.5)
    for sid in placed:
        d = control.request("DELETE", "/v1/sandboxes/" + sid)
        if d.status == 503:  # node-b may not have reported since its restart yet
            time.sleep(3)
            d = control.request("DELETE", "/v1/sandboxes/" + sid)
        assert d.status == 202, d
        assert control.wait_op(d.json["operation"]["id"])["state"] == "succeeded"


def at_once(n, call):
    """call(i) for i in 0..n-1 from n threads released together; their results (None for
    a thread still stuck after 120 s)."""
    import threading
    start, results = threading.Barrier(n), [None] * n

    def run_one(i):
        start.wait()
        results[i] = call(i)

    threads = [threading.Thread(target=run_one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return results


@pytest.mark.parametrize("cluster", [{"vcpus": 1}], indirect=True)
def test_concurrent_creates_on_two_controls_never_overcommit(cluster, pg_url):  # noqa: F811
    """Two control replicas each get four creates at the same moment, against two nodes
    that offer 1 vCPU each: capacity is reserved in the database before a create is
    forwarded, so exactly two are accepted (one per node) and the six others get 503
    no_capacity naming the largest free shape; no node ever holds more vCPUs than it
    offers, and no reservation outlives its create."""
    control, nodes, _, second_control = cluster
    wait_live(control)
    control2 = second_control()
    results = at_once(8, lambda i: (control if i % 2 else control2).request(
        "POST", "/v1/sandboxes", dict(BODY, metadata={"i": str(i)})))
    accepted = [r for r in results if r is not None and r.status == 202]
    refused = [r for r in results if r is not None and r.status != 202]
    assert len(accepted) + len(refused) == 8, results
    assert sorted(r.headers.get("x-space-node") for r in accepted) == ["node-a", "node-b"], results
    for r in refused:
        assert r.status == 503 and r.error_code() == "no_capacity", r
        assert "largest free shape: 0 vCPUs" in r.json["error"]["message"], r
    held = sql(pg_url, "SELECT node||'='||SUM(vcpus) FROM sandboxes WHERE state NOT IN %s GROUP BY node "
                       "ORDER BY node" % NO_VM)
    assert held == ["node-a=1", "node-b=1"], held
    assert sql(pg_url, "SELECT COUNT(*) FROM node_reservations") == ["0"]
    for r in accepted:
        assert control.wait_op(r.json["operation"]["id"])["state"] == "succeeded", (nodes[0].log(), nodes[1].log())
    # Once one is deleted its vCPU is free again: a create through either control fits.
    d = control.request("DELETE", "/v1/sandboxes/" + accepted[0].json["sandbox"]["id"])
    assert d.status == 202 and control.wait_op(d.json["operation"]["id"])["state"] == "succeeded", d
    r = control2.request("POST", "/v1/sandboxes", BODY)
    assert r.status == 202 and r.headers.get("x-space-node") == accepted[0].headers.get("x-space-node"), r
    assert control.wait_op(r.json["operation"]["id"])["state"] == "succeeded"
    for sid in (accepted[1].json["sandbox"]["id"], r.json["sandbox"]["id"]):
        d = control.request("DELETE", "/v1/sandboxes/" + sid)
        assert d.status == 202 and control.wait_op(d.json["operation"]["id"])["state"] == "succeeded", d


@pytest.mark.parametrize("cluster", [{"vcpus": 1}], indirect=True)
def test_concurrent_resumes_and_creates_never_overcommit(cluster, pg_url):  # noqa: F811
    """Two nodes of 1 vCPU, each holding one suspended sandbox (a suspended sandbox holds
    no capacity). At the same moment both are restored and four creates are sent, spread
    over two control replicas: a restore reserves its size on its node like a create
    (store_resv_take), so exactly two of the six are accepted whichever wins, the others
    get 503 no_capacity, no node holds more vCPUs than it offers, and no reservation is
    left. Before restores reserved, both restores and two creates were accepted."""
    control, nodes, _, second_control = cluster
    wait_live(control)
    control2 = second_control()
    sids = []
    for i in range(2):
        r = control.request("POST", "/v1/sandboxes", BODY)
        assert r.status == 202, r
        assert control.wait_op(r.json["operation"]["id"])["state"] == "succeeded", (nodes[0].log(), nodes[1].log())
        sids.append(r.json["sandbox"]["id"])
    for sid in sids:
        r = control.request("POST", "/v1/sandboxes/%s/suspend" % sid)
        assert r.status == 202 and control.wait_op(r.json["operation"]["id"])["state"] == "succeeded", r
    assert sql(pg_url, "SELECT COUNT(*) FROM sandboxes WHERE state NOT IN %s" % NO_VM) == ["0"]

    def go(i):
        c = control if i % 2 else control2
        if i < 2:
            return c.request("POST", "/v1/sandboxes/%s/restore" % sids[i])
        return c.request("POST", "/v1/sandboxes", dict(BODY, metadata={"i": str(i)}))

    results = at_once(6, go)
    assert None not in results, results
    accepted = [r for r in results if r.status == 202]
    assert len(accepted) == 2, results
    for r in results:
        if r.status != 202:
            assert r.status == 503 and r.error_code() == "no_capacity", r
    for r in accepted:
        assert control.wait_op(r.json["operation"]["id"])["state"] == "succeeded", (nodes[0].log(), nodes[1].log())
    held = sql(pg_url, "SELECT node||'='||SUM(vcpus) FROM sandboxes WHERE state NOT IN %s GROUP BY node "
                       "ORDER BY node" % NO_VM)
    assert held == ["node-a=1", "node-b=1"], held
    assert sql(pg_url, "SELECT COUNT(*) FROM node_reservations") == ["0"]
    # A refused restore left its sandbox suspended; once room is made it comes back.
    for sid in sids:
        got = control.request("GET", "/v1/sandboxes/" + sid).json["sandbox"]
        assert got["state"] in ("running", "suspended"), got
    for r in accepted:
        if "sandbox" in r.json and r.json["operation"]["kind"] == "create":
            d = control.request("DELETE", "/v1/sandboxes/" + r.json["sandbox"]["id"])
            assert d.status == 202 and control.wait_op(d.json["operation"]["id"])["state"] == "succeeded", d
    for sid in sids:
        r = control.request("POST", "/v1/sandboxes/%s/wake" % sid)
        assert r.status == 202 and control.wait_op(r.json["operation"]["id"])["state"] == "succeeded", r
        d = control.request("DELETE", "/v1/sandboxes/" + sid)
        assert d.status == 202 and control.wait_op(d.json["operation"]["id"])["state"] == "succeeded", d
