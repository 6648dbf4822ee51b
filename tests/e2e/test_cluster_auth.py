"""A control daemon authenticates before it places or forwards anything.

Placement and forwarding happen on the control (`--role control`, docs/multinode.md),
in front of the nodes. Nothing they reveal may reach a caller the control has not
authenticated, nor a tenant that does not own the sandbox: node names, their capacity,
their health, and whether a sandbox or operation id exists. Every such caller gets the
answer the control's own routes give: 401 without a valid key, and for another tenant's
sandbox or operation exactly the 404 of an id that does not exist.

No VM is needed: the nodes and the sandbox are rows written straight into the shared
PostgreSQL database (the control reads nothing else), one node live, one silent, so
every forwarding branch (live node, node down, unregistered node) is reached. PostgreSQL
comes from test_store_pg's fixtures (SPACE_TEST_PG or a throwaway server; skips, saying
why, without one)."""
import secrets
import time

import pytest

import spacedlib
from spacedlib import GUEST, Spaced
from test_cluster import sql
from test_store_pg import pg_server, pg_url  # noqa: F401 (fixtures)

NODES = ("node-live", "node-silent")


@pytest.fixture
def control(pg_url, monkeypatch):  # noqa: F811 (fixture from test_store_pg)
    monkeypatch.setitem(spacedlib.SPACED_ENV, "SPACE_NODE_TOKEN", secrets.token_hex(16))
    c = Spaced(GUEST)
    try:
        c.start(extra=["--store", pg_url, "--role", "control"])
        yield c
    finally:
        c.stop()


def seed(pg_url, control):
    """Two nodes (one live, listening nowhere; one silent for an hour), three sandboxes of
    a tenant `owner` (one per node, one on a node that is not registered), an operation on
    each; returns ({sandbox id: operation id}, the owner's API key)."""
    r = control.request("POST", "/v1/keys", {"tenant": "owner"})
    assert r.status == 201, r
    tenant, owner_key = r.json["key"]["tenant"], r.json["secret"]
    now = int(time.time() * 1000)
    port = spacedlib.free_port()  # nothing listens there: a forward would fail loudly
    sql(pg_url, "INSERT INTO nodes(id, url, vcpus, memory_mib, heartbeat_ms, started_ms) VALUES "
        "('node-live', 'http://127.0.0.1:%d', 64, 65536, %d, %d),"
        "('node-silent', 'http://127.0.0.1:%d', 64, 65536, %d, %d)"
        % (port, now + 3600 * 1000, now, port, now - 3600 * 1000, now))
    owned = {}
    for i, node in enumerate(NODES + ("node-gone",)):
        sid, oid = "sb%016x" % (0xabc0 + i), "op%016x" % (0xabc0 + i)
        sql(pg_url, "INSERT INTO sandboxes(id, tenant, template, vcpus, memory_mib, env, metadata, "
            "network, timeout_s, deadline_ms, on_timeout, desired, state, failure, run_dir, "
            "created_ms, updated_ms, node) VALUES ('%s', '%s', 'base', 1, 256, '{}', '{}', "
            "'{}', 0, 0, 'delete', 'running', 'running', NULL, '/nonexistent', %d, %d, '%s')"
            % (sid, tenant, now, now, node))
        sql(pg_url, "INSERT INTO operations(id, tenant, kind, target, state, error_code, "
            "error_message, progress, detail, idem_key, body_hash, created_ms, started_ms, "
            "finished_ms) VALUES ('%s', '%s', 'create', '%s', 'succeeded', '', NULL, 100, "
            "NULL, '', '', %d, %d, %d)" % (oid, tenant, sid, now, now, now))
        owned[sid] = oid
    return owned, owner_key


def tenant_key(control, tenant):
    r = control.request("POST", "/v1/keys", {"tenant": tenant})
    assert r.status == 201, r
    return r.json["secret"]


def assert_reveals_nothing(r, status, code):
    assert r.status == status, r
    assert r.json["error"]["code"] == code, r
    text = r.body.decode(errors="replace") + repr(r.headers)
    for word in NODES + ("node-gone", "127.0.0.1", "capacity", "vCPU", "MiB"):
        assert word not in text, (word, r)
    assert "x-space-node" not in r.headers, r


def test_unauthenticated_callers_learn_nothing_from_a_control(pg_url, control):  # noqa: F811
    owned, _ = seed(pg_url, control)
    missing_sb, missing_op = "sb%016x" % 0xdead, "op%016x" % 0xdead
    for headers in ({}, {"Authorization": "Bearer space_" + "0" * 48}, {"X-API-Key": "nope"}):
        # A create is placed only for an authenticated caller.
        r = control.request("POST", "/v1/sandboxes", {"template": "base", "memory_mib": 999999},
                            key=None, headers=headers)
        assert_reveals_nothing(r, 401, "unauthorized")
        for sid, oid in list(owned.items()) + [(missing_sb, missing_op)]:
            for path in ("/v1/sandboxes/" + sid, "/v1/sandboxes/%s/files?path=/etc/hostname" % sid,
                         "/v1/operations/" + oid):
                r = control.request("GET", path, key=None, headers=headers)
                assert_reveals_nothing(r, 401, "unauthorized")
            r = control.request("DELETE", "/v1/sandboxes/" + sid, key=None, headers=headers)
            assert_reveals_nothing(r, 401, "unauthorized")


def test_other_tenants_get_the_answer_of_a_missing_id(pg_url, control):  # noqa: F811
    owned, _ = seed(pg_url, control)
    other = tenant_key(control, "other")
    missing = {}
    for path in ("/v1/sandboxes/sb%016x" % 0xdead, "/v1/operations/op%016x" % 0xdead):
        r = control.request("GET", path, key=other)
        assert_reveals_nothing(r, 404, "not_found")
        missing[path.split("/")[2]] = r.json["error"]["message"].replace("%016x" % 0xdead, "<id>")
    for sid, oid in owned.items():
        for kind, obj in (("sandboxes", sid), ("operations", oid)):
            r = control.request("GET", "/v1/%s/%s" % (kind, obj), key=other)
            assert_reveals_nothing(r, 404, "not_found")
            assert r.json["error"]["message"].replace(obj[2:], "<id>") == missing[kind], r
        r = control.request("DELETE", "/v1/sandboxes/" + sid, key=other)
        assert_reveals_nothing(r, 404, "not_found")


def test_the_owner_is_still_forwarded(pg_url, control):  # noqa: F811
    """Control: the same requests with the owner's key do reach the forwarding (the live
    node is unreachable: 502; the silent one: 503 node_down), so the refusals above are
    the authentication's doing, not a broken seed."""
    owned, owner = seed(pg_url, control)
    codes = {}
    for sid in owned:
        r = control.request("GET", "/v1/sandboxes/" + sid, key=owner)
        codes[sid] = r.status
    assert sorted(codes.values()) == [502, 502, 503], codes
    # A session's attach token is the node's to check: forwarded without an API key.
    live = next(sid for sid, code in codes.items() if code == 502)
    for query, headers in (("?token=sat_x", {}), ("", {"Authorization": "Bearer sat_x"})):
        r = control.request("GET", "/v1/sandboxes/%s/sessions/ss1/attach%s" % (live, query),
                            key=None, headers=headers)
        assert r.status == 502, r
