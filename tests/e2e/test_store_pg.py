"""spaced on the PostgreSQL store (`--store URL`): a real `base` sandbox survives a kill -9
of spaced and a restart on the same database, with its operation history; nothing is
written to SQLite; a database that cannot be reached stops spaced with a clear message;
an outage answers 503, never 401; a create whose VM comes up during an outage ends
`succeeded` once the database is back.

PostgreSQL: SPACE_TEST_PG (a libpq URL, as `make unit-pg` sets for the unit tests) if
set, else a throwaway server started here with scripts/pg-test-server.sh (needs Debian's
`postgresql` package and root or the postgres user). Each test gets its own database.
Without either, the tests skip and say why. The pg_url fixture is shared with
test_cluster.py."""
import contextlib
import os
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.parse
import uuid

import pytest

from spacedlib import GUEST, ROOT, SPACED, SPACED_ENV, Spaced, vm_missing
from test_sessions import URL_SESS, Stream, collect, run

PG_SCRIPT = os.path.join(ROOT, "scripts", "pg-test-server.sh")


def _with_dbname(url, db):
    """The libpq connection string `url` pointed at database `db` instead."""
    if url.startswith(("postgres://", "postgresql://")):
        u = urllib.parse.urlsplit(url)
        return "%s://%s/%s%s" % (u.scheme, u.netloc, db, "?" + u.query if u.query else "")
    return "%s dbname=%s" % (url, db)  # key=value form: a later keyword wins


def _psql(url, sql):
    """Runs sql; returns what it printed, unaligned, without headers."""
    r = subprocess.run(["psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", url, "-c", sql],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, "psql %s: %s" % (sql, r.stderr)
    return r.stdout.strip()


@pytest.fixture(scope="module")
def pg_server():
    """A libpq URL of a server the tests may create databases in."""
    url = os.environ.get("SPACE_TEST_PG")
    if url:
        yield url
        return
    with own_pg_server("space-e2e-pg-") as (_, started):
        yield started


@pytest.fixture
def pg_url(pg_server):
    """A fresh, empty database for one test; dropped afterwards (its clients gone)."""
    db = "e2e_" + uuid.uuid4().hex[:12]
    _psql(pg_server, "CREATE DATABASE %s" % db)
    yield _with_dbname(pg_server, db)
    _psql(pg_server, "DROP DATABASE IF EXISTS %s WITH (FORCE)" % db)


@contextlib.contextmanager
def own_pg_server(prefix):
    """A server of its own, for a test that stops it (the outage must not hit the other
    tests' databases). Yields (dir, libpq URL); pass dir to pg_ctl."""
    if not shutil.which("psql"):
        pytest.skip("PostgreSQL unavailable: psql not installed (apt-get install postgresql)")
    d = tempfile.mkdtemp(prefix=prefix)
    os.rmdir(d)  # the script creates it and hands it to the postgres user
    r = subprocess.run([PG_SCRIPT, "start", d], capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        subprocess.run([PG_SCRIPT, "stop", d], capture_output=True, timeout=120)
        pytest.skip("PostgreSQL unavailable: scripts/pg-test-server.sh start failed: %s"
                    % (r.stderr.strip() or r.stdout.strip()))
    try:
        yield d, r.stdout.strip()
    finally:
        subprocess.run([PG_SCRIPT, "stop", d], capture_output=True, timeout=120)


def pg_ctl(cmd, d):
    """pause (stop the server, keep its data) or resume the server of own_pg_server."""
    subprocess.run([PG_SCRIPT, cmd, d], check=True, capture_output=True, timeout=120)


def run_after_restart(s, sid, body, timeout=120):
    """Runs a command once the restarted spaced has reattached to the guest agent (until
    then session creation answers 503: agent_unavailable, or node_down through a control)."""
    deadline = time.monotonic() + timeout
    while True:
        r = s.request("POST", URL_SESS % sid, body)
        if r.status != 503 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert r.status == 201, (r, s.log())
    st = Stream(s, r.json["attach_url"], r.json["attach_token"])
    assert st.status == 200, st.resp.read()
    res = collect(st.events())
    st.close()
    return res


def test_unreachable_database_is_a_clear_start_error():
    d = tempfile.mkdtemp(prefix="spd")
    try:
        r = subprocess.run(
            [SPACED, "--listen", "127.0.0.1:0", "--data-dir", d, "--guest-dir", GUEST, "--store",
             "postgresql:///space?host=/nonexistent-space-pg&connect_timeout=2"],
            capture_output=True, text=True, timeout=60, env=SPACED_ENV)
        assert r.returncode == 1, r
        assert "spaced: cannot connect to PostgreSQL:" in r.stderr, r.stderr
        assert "/nonexistent-space-pg" in r.stderr, r.stderr
        assert not os.path.exists(os.path.join(d, "space.db"))
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_sandbox_survives_kill9_on_postgres(pg_url):
    why = vm_missing()
    if why:
        pytest.skip(why)
    store = ["--store", pg_url]
    s = Spaced(GUEST)
    try:
        s.start(extra=store)
        assert "backend=postgresql" in s.log()
        r = s.create({"template": "base", "timeout": 0, "metadata": {"store": "pg"}})
        sid, op_id = r["sandbox"]["id"], r["operation"]["id"]
        op = s.wait_op(op_id)
        assert op["state"] == "succeeded", (op, s.log())
        _, res = run(s, sid, {"cmd": "echo before-$((6*7))"})
        assert res["exit"] == {"code": 0, "signal": None} and res["stdout"] == b"before-42\n", res
        before = s.request("GET", "/v1/sandboxes/" + sid).json["sandbox"]

        s.kill9()
        s.start(extra=store)
        after = s.request("GET", "/v1/sandboxes/" + sid)
        assert after.status == 200, after
        a = after.json["sandbox"]
        for k in ("id", "template", "state", "metadata", "vcpus", "memory_mib", "created_at"):
            assert a.get(k) == before.get(k), (k, before, a)
        assert a["state"] == "running", a
        again = s.request("GET", "/v1/operations/" + op_id)
        assert again.status == 200 and again.json["operation"]["state"] == "succeeded", again
        res = run_after_restart(s, sid, {"cmd": "echo after"})
        assert res["exit"] == {"code": 0, "signal": None} and res["stdout"] == b"after\n", res
        # Everything durable went to PostgreSQL: no SQLite file appeared.
        assert not os.path.exists(os.path.join(s.data_dir, "space.db"))

        d = s.request("DELETE", "/v1/sandboxes/" + sid)
        assert d.status == 202, d
        assert s.wait_op(d.json["operation"]["id"])["state"] == "succeeded"
        assert s.request("GET", "/v1/sandboxes/" + sid).status == 404
    finally:
        s.stop()


def test_database_outage_is_503_never_401():
    """PostgreSQL stopped under a running spaced: /healthz says the store is down (503),
    authenticated calls get 503 store_unavailable with Retry-After (native and E2B
    routes), never a 401 that would make a client drop a valid key; once the database is
    back, the same key works again without restarting spaced. Needs its own server (the
    outage would hit the other tests' databases)."""
    with own_pg_server("space-e2e-pgdown-") as (d, url):
        _outage_is_503(d, url)


def _outage_is_503(d, url):
    s = Spaced(GUEST)
    try:
        s.start(extra=["--store", url])
        key = s.admin_key
        h = s.request("GET", "/healthz", key=None)
        assert h.status == 200 and h.json["store"] == "ok", h
        assert s.request("GET", "/v1/sandboxes").status == 200

        pg_ctl("pause", d)
        h = s.request("GET", "/healthz", key=None)
        assert h.status == 503 and h.json["status"] == "degraded", h
        for path in ("/v1/sandboxes", "/v1/operations", "/v1/templates"):
            r2 = s.request("GET", path)
            assert r2.status == 503, r2
            assert r2.json["error"]["code"] == "store_unavailable", r2
            assert r2.headers.get("retry-after") == "1", r2
            assert key not in r2.body.decode(), r2
        r2 = s.request("GET", "/v2/sandboxes", key=None, headers={"X-API-Key": key})
        assert r2.status == 503, r2
        # A key that is malformed is still refused as such: no store is needed to know.
        assert s.request("GET", "/v1/sandboxes", key="nope").status == 401

        pg_ctl("resume", d)
        deadline = time.monotonic() + 60
        while s.request("GET", "/v1/sandboxes").status != 200:
            assert time.monotonic() < deadline, s.log()
            time.sleep(0.5)
        assert s.request("GET", "/healthz", key=None).status == 200
    finally:
        s.stop()


def _full_log(s):
    with open(s.log_path, errors="replace") as f:
        return f.read()


def test_create_during_database_outage_ends_once_it_is_back():
    """PostgreSQL stopped for ~10 s right after a create was accepted: the VM comes up
    while the database is away, so neither the sandbox's `running` nor the operation's
    `succeeded` can be stored. Once the database is back both are written (no restart of
    spaced): the operation ends succeeded, the sandbox is running in the database too,
    runs a command, and a delete after it completes (it waited its turn, not forever)."""
    why = vm_missing()
    if why:
        pytest.skip(why)
    with own_pg_server("space-e2e-pgcreate-") as (d, url):
        s = Spaced(GUEST)
        try:
            s.start(extra=["--store", url])
            r = s.create({"template": "base", "timeout": 0})
            sid, op_id = r["sandbox"]["id"], r["operation"]["id"]
            pg_ctl("pause", d)
            down = time.monotonic()
            # The VM must come up while the database is away, or this test proves nothing.
            ready = "event=sandbox.agent sandbox=%s event=ready" % sid
            assert ready not in _full_log(s), ("the VM came up before the database stopped", s.log())
            while ready not in _full_log(s):
                assert time.monotonic() < down + 180, ("the VM did not come up", s.log())
                time.sleep(0.5)
            # Down ~10 s in all, and a while after the outcome came (its first write failed).
            time.sleep(max(3.0, down + 10 - time.monotonic()))
            assert s.request("GET", "/v1/operations/" + op_id).status == 503
            pg_ctl("resume", d)

            deadline = time.monotonic() + 60
            while s.request("GET", "/v1/operations/" + op_id).status != 200:
                assert time.monotonic() < deadline, s.log()
                time.sleep(0.5)
            op = s.wait_op(op_id, timeout=60)
            assert op["state"] == "succeeded", (op, s.log())
            # Logged once when refused and once when stored, not on every retry.
            log = _full_log(s)
            assert log.count("event=operation.unsaved op=%s " % op_id) == 1, log
            assert log.count("event=operation.saved op=%s state=succeeded" % op_id) == 1, log
            assert log.count("event=store.error sandbox=%s op=persist" % sid) == 1, log
            got = s.request("GET", "/v1/sandboxes/" + sid)
            assert got.status == 200 and got.json["sandbox"]["state"] == "running", got
            # What the database holds, not only what this spaced remembers: the sandbox's
            # state is stored before its operation's outcome (an outcome read as succeeded
            # next to a `creating` row is the bug CI found at the stop of session 7).
            assert _psql(url, "SELECT state FROM sandboxes WHERE id='%s'" % sid) == "running", \
                _full_log(s)
            assert _psql(url, "SELECT state FROM operations WHERE id='%s'" % op_id) == "succeeded"
            _, res = run(s, sid, {"cmd": "echo back-$((6*7))"})
            assert res["exit"] == {"code": 0, "signal": None} and res["stdout"] == b"back-42\n", res

            dl = s.request("DELETE", "/v1/sandboxes/" + sid)
            assert dl.status == 202, dl
            assert s.wait_op(dl.json["operation"]["id"], timeout=120)["state"] == "succeeded", s.log()
            assert s.request("GET", "/v1/sandboxes/" + sid).status == 404
            assert _psql(url, "SELECT state FROM sandboxes WHERE id='%s'" % sid) == "deleted"
        finally:
            s.stop()


def test_daemons_starting_together_on_an_empty_database(pg_url):
    """Three daemons started together on a database without tenants (a control and its
    nodes rolled out at once) all start: each finds no admin tenant, all try to create it,
    and the ones that lose the insert use the winner's row instead of exiting with
    "creating tenant: already exists" (stop 20's CI: a node died so, and never registered).
    The race is made certain: a transaction holds the tenants table while the daemons
    start, so every lookup waits and all see "none" when it ends. Each daemon gets an
    admin key of its own, written to its own data dir, and every key works on every daemon."""
    first = Spaced(GUEST)
    first.start(extra=["--store", pg_url])
    first.stop()
    _psql(pg_url, "DELETE FROM api_keys; DELETE FROM tenants")
    holder = subprocess.Popen(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", pg_url],
                              stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    daemons = [Spaced(GUEST) for _ in range(3)]
    errors = []

    def start(s):
        try:
            s.start(extra=["--store", pg_url])
        except BaseException as e:  # pytest.fail raises an exception that is not an Exception
            errors.append("%s" % e)

    threads = []
    try:
        holder.stdin.write("BEGIN; LOCK TABLE tenants IN ACCESS EXCLUSIVE MODE; SELECT 1;\n")
        holder.stdin.flush()
        deadline = time.monotonic() + 10
        while _psql(pg_url, "SELECT count(*) FROM pg_locks WHERE relation = 'tenants'::regclass"
                            " AND mode = 'AccessExclusiveLock' AND granted") != "1":
            assert time.monotonic() < deadline, "the lock was not taken"
            time.sleep(0.05)
        threads = [threading.Thread(target=start, args=(s,)) for s in daemons]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 60
        waiting = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%tenants%'"
        while int(_psql(pg_url, waiting)) < len(daemons):
            assert time.monotonic() < deadline and not errors, (errors, [s.log() for s in daemons])
            time.sleep(0.05)
        holder.stdin.write("COMMIT;\n")
        holder.stdin.close()
        holder.wait(timeout=30)
        for t in threads:
            t.join(timeout=60)
        assert not errors, errors
        assert _psql(pg_url, "SELECT id || ' ' || name FROM tenants") == "admin admin"
        keys = [s.admin_key for s in daemons]
        assert len(set(keys)) == len(daemons)
        for s in daemons:
            for k in keys:
                assert s.request("GET", "/v1/sandboxes", key=k).status == 200
    finally:
        if holder.poll() is None:
            holder.kill()
        for t in threads:
            t.join(timeout=60)
        for s in daemons:
            if s in Spaced.live:
                s.stop()
