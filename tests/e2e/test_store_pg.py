"""spaced on the PostgreSQL store (`--store URL`): a real `base` sandbox survives a kill -9
of spaced and a restart on the same database, with its operation history; nothing is
written to SQLite; a database that cannot be reached stops spaced with a clear message.

PostgreSQL: SPACE_TEST_PG (a libpq URL, as `make unit-pg` sets for the unit tests) if
set, else a throwaway server started here with scripts/pg-test-server.sh (needs Debian's
`postgresql` package and root or the postgres user). Each test gets its own database.
Without either, the tests skip and say why. The pg_url fixture is shared with
test_cluster.py."""
import os
import shutil
import subprocess
import tempfile
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
    r = subprocess.run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", url, "-c", sql],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, "psql %s: %s" % (sql, r.stderr)


@pytest.fixture(scope="module")
def pg_server():
    """A libpq URL of a server the tests may create databases in."""
    url = os.environ.get("SPACE_TEST_PG")
    if url:
        yield url
        return
    if not shutil.which("psql"):
        pytest.skip("PostgreSQL unavailable: psql not installed (apt-get install postgresql)")
    d = tempfile.mkdtemp(prefix="space-e2e-pg-")
    os.rmdir(d)  # the script creates it and hands it to the postgres user
    r = subprocess.run([PG_SCRIPT, "start", d], capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        subprocess.run([PG_SCRIPT, "stop", d], capture_output=True, timeout=120)
        pytest.skip("PostgreSQL unavailable: scripts/pg-test-server.sh start failed: %s"
                    % (r.stderr.strip() or r.stdout.strip()))
    try:
        yield r.stdout.strip()
    finally:
        subprocess.run([PG_SCRIPT, "stop", d], capture_output=True, timeout=120)


@pytest.fixture
def pg_url(pg_server):
    """A fresh, empty database for one test; dropped afterwards (its clients gone)."""
    db = "e2e_" + uuid.uuid4().hex[:12]
    _psql(pg_server, "CREATE DATABASE %s" % db)
    yield _with_dbname(pg_server, db)
    _psql(pg_server, "DROP DATABASE IF EXISTS %s WITH (FORCE)" % db)


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
    if not shutil.which("psql"):
        pytest.skip("PostgreSQL unavailable: psql not installed (apt-get install postgresql)")
    d = tempfile.mkdtemp(prefix="space-e2e-pgdown-")
    os.rmdir(d)
    r = subprocess.run([PG_SCRIPT, "start", d], capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        subprocess.run([PG_SCRIPT, "stop", d], capture_output=True, timeout=120)
        pytest.skip("PostgreSQL unavailable: scripts/pg-test-server.sh start failed: %s"
                    % (r.stderr.strip() or r.stdout.strip()))
    s = Spaced(GUEST)
    try:
        s.start(extra=["--store", r.stdout.strip()])
        key = s.admin_key
        h = s.request("GET", "/healthz", key=None)
        assert h.status == 200 and h.json["store"] == "ok", h
        assert s.request("GET", "/v1/sandboxes").status == 200

        subprocess.run([PG_SCRIPT, "pause", d], check=True, capture_output=True, timeout=120)
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

        subprocess.run([PG_SCRIPT, "resume", d], check=True, capture_output=True, timeout=120)
        deadline = time.monotonic() + 60
        while s.request("GET", "/v1/sandboxes").status != 200:
            assert time.monotonic() < deadline, s.log()
            time.sleep(0.5)
        assert s.request("GET", "/healthz", key=None).status == 200
    finally:
        s.stop()
        subprocess.run([PG_SCRIPT, "stop", d], capture_output=True, timeout=120)
