"""Control-plane API without VMs: auth, keys, tenancy, validation, operations,
idempotency, illegal transitions, pagination. Runs against `api_spaced`, whose only
template ("fake") is accepted but cannot boot, so creates end in a failed sandbox."""
import json
import socket
import time

import pytest


def tenant_key(s, name):
    r = s.request("POST", "/v1/keys", {"tenant": name})
    assert r.status == 201, r
    return r.json["secret"]


def failed_sandbox(s, key="admin", body=None):
    """Creates a sandbox on the fake template and waits for its create op to fail."""
    out = s.create(dict({"template": "fake"}, **(body or {})), key=key)
    op = s.wait_op(out["operation"]["id"], key=key)
    assert op["state"] == "failed", op
    return out["sandbox"]["id"], op


# ---- health and metrics ---------------------------------------------------------------

def test_healthz_needs_no_key(api_spaced):
    r = api_spaced.request("GET", "/healthz", key=None)
    assert r.status == 200
    assert r.json["status"] == "ok" and r.json["accel"] in ("kvm", "tcg")


def test_metrics_prometheus_text(api_spaced):
    failed_sandbox(api_spaced)
    r = api_spaced.request("GET", "/metrics", key=None)
    assert r.status == 200
    text = r.body.decode()
    assert 'space_sandboxes{state="failed"}' in text
    assert 'space_operations_total{kind="create",state="failed"}' in text
    assert "space_operation_duration_seconds_bucket" in text
    assert "space_sessions" in text


# ---- authentication -------------------------------------------------------------------

@pytest.mark.parametrize("headers", [
    {},
    {"Authorization": "Bearer space_" + "0" * 48},
    {"Authorization": "Bearer nope"},
    {"Authorization": "Basic YWRtaW46YWRtaW4="},
    {"X-API-Key": "space_" + "1" * 48},
])
def test_bad_or_missing_key_is_401(api_spaced, headers):
    r = api_spaced.request("GET", "/v1/sandboxes", key=None, headers=headers)
    assert r.status == 401, r
    assert r.error_code() == "unauthorized"
    assert "space_" + "0" * 48 not in r.body.decode()


def test_x_api_key_header_accepted(api_spaced):
    r = api_spaced.request("GET", "/v1/sandboxes", key=None, headers={"X-API-Key": api_spaced.admin_key})
    assert r.status == 200


def test_admin_key_file_is_private(api_spaced):
    import os
    import stat
    st = os.stat(os.path.join(api_spaced.data_dir, "admin.key"))
    assert stat.S_IMODE(st.st_mode) == 0o600


# ---- keys -----------------------------------------------------------------------------

def test_key_lifecycle(api_spaced):
    s = api_spaced
    r = s.request("POST", "/v1/keys", {"tenant": "team-keys"})
    assert r.status == 201, r
    key, secret = r.json["key"], r.json["secret"]
    assert secret.startswith("space_") and key["admin"] is False
    assert s.request("GET", "/v1/sandboxes", key=secret).status == 200
    listed = s.request("GET", "/v1/keys").json["keys"]
    assert any(k["id"] == key["id"] for k in listed)
    assert all("secret" not in k and "hash" not in k for k in listed)
    # a tenant key cannot manage keys
    assert s.request("GET", "/v1/keys", key=secret).status == 403
    assert s.request("POST", "/v1/keys", {"tenant": "x"}, key=secret).status == 403
    r = s.request("DELETE", "/v1/keys/" + key["id"])
    assert r.status == 200 and r.json["key"]["revoked_at"]
    r = s.request("GET", "/v1/sandboxes", key=secret)
    assert r.status == 401 and "revoked" in r.json["error"]["message"]
    assert s.request("DELETE", "/v1/keys/aknotakey").status == 404


def test_expired_key_is_refused(api_spaced):
    r = api_spaced.request("POST", "/v1/keys", {"tenant": "team-ttl", "ttl_seconds": 1})
    assert r.status == 201 and r.json["key"]["expires_at"]
    time.sleep(2.2)
    r = api_spaced.request("GET", "/v1/sandboxes", key=r.json["secret"])
    assert r.status == 401 and "expired" in r.json["error"]["message"]


@pytest.mark.parametrize("body", [
    {}, {"tenant": ""}, {"tenant": "a b"}, {"tenant": 5}, {"tenant": "x" * 65},
    {"tenant": "t", "admin": "yes"}, {"tenant": "t", "admin": True},
    {"tenant": "t", "ttl_seconds": -1}, {"tenant": "t", "color": "red"},
])
def test_key_create_validation(api_spaced, body):
    r = api_spaced.request("POST", "/v1/keys", body)
    assert r.status == 400, r
    assert r.error_code() in ("invalid_request", "unknown_field")


# ---- tenancy --------------------------------------------------------------------------

def test_other_tenants_sandbox_is_404(api_spaced):
    s = api_spaced
    a, b = tenant_key(s, "tenant-a"), tenant_key(s, "tenant-b")
    sid, op = failed_sandbox(s, key=a)
    assert s.request("GET", "/v1/sandboxes/" + sid, key=a).status == 200
    for method, path in [("GET", "/v1/sandboxes/" + sid), ("DELETE", "/v1/sandboxes/" + sid),
                         ("POST", "/v1/sandboxes/%s/start" % sid),
                         ("POST", "/v1/sandboxes/%s/timeout" % sid),
                         ("GET", "/v1/operations/" + op["id"]),
                         ("GET", "/v1/operations/%s/events" % op["id"])]:
        body = {"timeout": 5} if path.endswith("timeout") else None
        r = s.request(method, path, body, key=b)
        assert r.status == 404, (method, path, r)
        assert r.error_code() == "not_found"
    assert sid not in [x["id"] for x in s.request("GET", "/v1/sandboxes", key=b).json["sandboxes"]]
    assert op["id"] not in [x["id"] for x in s.request("GET", "/v1/operations", key=b).json["operations"]]


# ---- create validation ----------------------------------------------------------------

@pytest.mark.parametrize("raw,code", [
    (b"{", "invalid_json"),
    (b"[]", "invalid_json"),
    (b"\"x\"", "invalid_json"),
    (b"{} trailing", "invalid_json"),
    (b'{"template":"fake","template":"fake"}', "invalid_json"),
    (b'{"templat":"fake"}', "unknown_field"),
    (b'{"template":5}', "invalid_request"),
    (b'{"template":"fake","vcpus":"2"}', "invalid_request"),
    (b'{"template":"fake","vcpus":0}', "invalid_request"),
    (b'{"template":"fake","vcpus":17}', "invalid_request"),
    (b'{"template":"fake","vcpus":1.5}', "invalid_request"),
    (b'{"template":"fake","memory_mib":64}', "invalid_request"),
    (b'{"template":"fake","timeout":-1}', "invalid_request"),
    (b'{"template":"fake","on_timeout":"explode"}', "invalid_request"),
    (b'{"template":"fake","env":{"1BAD":"x"}}', "invalid_request"),
    (b'{"template":"fake","env":{"A":1}}', "invalid_request"),
    (b'{"template":"fake","env":[]}', "invalid_request"),
    (b'{"template":"fake","metadata":{"k":{"x":1}}}', "invalid_request"),
    (b'{"template":"fake","network":{"mode":"everything"}}', "invalid_request"),
    (b'{"template":"fake","network":{"mode":"none","allow":["a.com"]}}', "invalid_request"),
    (b'{"template":"fake","network":{"mode":"allowlist","allow":["bad host"]}}', "invalid_request"),
    (b'{"template":"fake","network":{"mode":"open","proxy":"x"}}', "unknown_field"),
    (b'{"template":"nope"}', "unknown_template"),
    (b'{"template":"../etc"}', "unknown_template"),
    (b'{"template":"fake","env":{"A":"\\u0000"}}', "invalid_json"),
])
def test_create_rejects_bad_bodies(api_spaced, raw, code):
    r = api_spaced.request("POST", "/v1/sandboxes", raw=raw, headers={"Content-Type": "application/json"})
    assert r.status == 400, r
    assert r.error_code() == code, r


def test_create_huge_body_is_413(api_spaced):
    big = json.dumps({"template": "fake", "metadata": {"k": "x" * (2 * 1024 * 1024)}}).encode()
    r = api_spaced.request("POST", "/v1/sandboxes", raw=big)
    assert r.status == 413, r
    assert r.json["error"]["code"]
    assert api_spaced.request("GET", "/healthz", key=None).status == 200


def test_create_defaults_and_fields(api_spaced):
    out = api_spaced.create({"template": "fake", "vcpus": 2, "memory_mib": 512, "env": {"A": "1"},
                             "metadata": {"owner": "me"}, "timeout": 60, "on_timeout": "delete",
                             "network": {"mode": "allowlist", "allow": ["example.com", "*.pypi.org", "203.0.113.0/24"]}})
    sb, op = out["sandbox"], out["operation"]
    assert sb["id"].startswith("sb") and len(sb["id"]) == 18
    assert (sb["vcpus"], sb["memory_mib"], sb["env"], sb["metadata"]) == (2, 512, {"A": "1"}, {"owner": "me"})
    assert sb["timeout"] == 60 and sb["on_timeout"] == "delete" and sb["expires_at"]
    assert sb["network"]["mode"] == "allowlist" and sb["desired_state"] == "running"
    assert op["kind"] == "create" and op["sandbox_id"] == sb["id"] and op["state"] in ("pending", "running", "failed")
    done = api_spaced.wait_op(op["id"])
    assert done["state"] == "failed" and done["error"]["code"] and done["error"]["message"]
    got = api_spaced.request("GET", "/v1/sandboxes/" + sb["id"]).json["sandbox"]
    assert got["state"] == "failed" and got["failure"]


def test_create_location_header(api_spaced):
    r = api_spaced.request("POST", "/v1/sandboxes", {"template": "fake"})
    assert r.status == 202
    assert r.headers["location"] == "/v1/operations/" + r.json["operation"]["id"]


# ---- idempotency ----------------------------------------------------------------------

def test_idempotency_key_replays_and_rejects_other_body(api_spaced):
    s = api_spaced
    h = {"Idempotency-Key": "idem-%f" % time.time()}
    first = s.create({"template": "fake", "metadata": {"n": "1"}}, headers=h)
    again = s.create({"template": "fake", "metadata": {"n": "1"}}, headers=h)
    assert again["operation"]["id"] == first["operation"]["id"]
    assert again["sandbox"]["id"] == first["sandbox"]["id"]
    r = s.request("POST", "/v1/sandboxes", {"template": "fake", "metadata": {"n": "2"}}, headers=h)
    assert r.status == 422 and r.error_code() == "idempotency_mismatch"
    # another tenant with the same key gets its own sandbox
    other = s.create({"template": "fake", "metadata": {"n": "1"}}, key=tenant_key(s, "idem-other"), headers=h)
    assert other["sandbox"]["id"] != first["sandbox"]["id"]


# ---- operations -----------------------------------------------------------------------

def test_operation_get_wait_and_events(api_spaced):
    s = api_spaced
    out = s.create({"template": "fake"})
    op_id = out["operation"]["id"]
    r = s.request("GET", "/v1/operations/%s?wait=30" % op_id)
    assert r.status == 200 and r.json["operation"]["state"] == "failed"
    r = s.request("GET", "/v1/operations/%s/events" % op_id)
    assert r.status == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = [json.loads(line[5:]) for line in r.body.decode().splitlines() if line.startswith("data:")]
    assert events and events[-1]["state"] == "failed"
    assert "event: operation" in r.body.decode() and "id: 1" in r.body.decode()
    ops = s.request("GET", "/v1/operations?sandbox_id=" + out["sandbox"]["id"]).json["operations"]
    assert [o["id"] for o in ops] == [op_id]


@pytest.mark.parametrize("query", ["wait=-1", "wait=61", "wait=abc", "wait="])
def test_operation_bad_wait(api_spaced, query):
    _, op = failed_sandbox(api_spaced)
    r = api_spaced.request("GET", "/v1/operations/%s?%s" % (op["id"], query))
    assert r.status == 400 and r.error_code() == "invalid_request"


@pytest.mark.parametrize("path", ["/v1/operations/nope", "/v1/operations/op0000000000000000",
                                  "/v1/operations/%2e%2e", "/v1/operations/" + "x" * 300,
                                  "/v1/operations/nope/events"])
def test_unknown_operation_404(api_spaced, path):
    r = api_spaced.request("GET", path)
    assert r.status == 404 and r.error_code() == "not_found"


# ---- sandboxes: ids, transitions, delete, timeout -------------------------------------

@pytest.mark.parametrize("sid", ["nope", "sb0000000000000000", "SB0123456789ABCDEF", "sb%2F..", "x" * 500])
def test_unknown_sandbox_404(api_spaced, sid):
    for method, path in [("GET", "/v1/sandboxes/" + sid), ("DELETE", "/v1/sandboxes/" + sid),
                         ("POST", "/v1/sandboxes/%s/pause" % sid)]:
        r = api_spaced.request(method, path)
        assert r.status == 404, (method, path, r)
        assert r.error_code() == "not_found"


@pytest.mark.parametrize("verb", ["pause", "resume", "suspend", "restore", "stop"])
def test_illegal_transition_is_409_naming_state(api_spaced, verb):
    sid, _ = failed_sandbox(api_spaced)
    r = api_spaced.request("POST", "/v1/sandboxes/%s/%s" % (sid, verb))
    assert r.status == 409, r
    assert r.error_code() == "invalid_state"
    assert "failed" in r.json["error"]["message"] and verb in r.json["error"]["message"]


def test_verb_rejects_unknown_body_fields(api_spaced):
    sid, _ = failed_sandbox(api_spaced)
    r = api_spaced.request("POST", "/v1/sandboxes/%s/start" % sid, {"force": True})
    assert r.status == 400 and r.error_code() == "unknown_field"
    r = api_spaced.request("POST", "/v1/sandboxes/%s/start" % sid, raw=b"{oops")
    assert r.status == 400 and r.error_code() == "invalid_json"


def test_start_on_failed_is_accepted(api_spaced):
    sid, _ = failed_sandbox(api_spaced)
    r = api_spaced.request("POST", "/v1/sandboxes/%s/start" % sid)
    assert r.status == 202, r
    assert r.json["operation"]["kind"] == "start"
    assert api_spaced.wait_op(r.json["operation"]["id"])["state"] == "failed"


def test_delete_then_gone(api_spaced):
    s = api_spaced
    sid, _ = failed_sandbox(s)
    r = s.request("DELETE", "/v1/sandboxes/" + sid)
    assert r.status == 202 and r.json["operation"]["kind"] == "delete"
    assert s.wait_op(r.json["operation"]["id"])["state"] == "succeeded"
    assert s.request("GET", "/v1/sandboxes/" + sid).status == 404
    r = s.request("DELETE", "/v1/sandboxes/" + sid)
    assert r.status == 404
    assert sid not in [x["id"] for x in s.request("GET", "/v1/sandboxes?limit=1000").json["sandboxes"]]


def test_create_then_immediate_delete_is_queued(api_spaced):
    s = api_spaced
    out = s.create({"template": "fake"})
    r = s.request("DELETE", "/v1/sandboxes/" + out["sandbox"]["id"])
    assert r.status == 202, r
    assert s.wait_op(r.json["operation"]["id"])["state"] == "succeeded"
    assert s.wait_op(out["operation"]["id"])["state"] in ("failed", "canceled", "succeeded")


def test_set_timeout(api_spaced):
    s = api_spaced
    sid, _ = failed_sandbox(s)
    r = s.request("POST", "/v1/sandboxes/%s/timeout" % sid, {"timeout": 120, "on_timeout": "delete"})
    assert r.status == 200, r
    assert r.json["sandbox"]["timeout"] == 120 and r.json["sandbox"]["on_timeout"] == "delete"
    r = s.request("POST", "/v1/sandboxes/%s/timeout" % sid, {"timeout": 0})
    assert r.status == 200 and r.json["sandbox"]["expires_at"] is None
    for body in [{}, {"timeout": "5"}, {"timeout": -5}, {"timeout": 5, "on_timeout": "x"},
                 {"timeout": 5, "extra": 1}]:
        r = s.request("POST", "/v1/sandboxes/%s/timeout" % sid, body)
        assert r.status == 400, (body, r)


# ---- listing --------------------------------------------------------------------------

def test_list_filters_and_pagination(api_spaced):
    s = api_spaced
    key = tenant_key(s, "lister")
    ids = sorted(failed_sandbox(s, key=key, body={"metadata": {"grp": "a" if i % 2 else "b", "n": str(i)}})[0]
                 for i in range(5))
    seen, cursor = [], None
    while True:
        r = s.request("GET", "/v1/sandboxes?limit=2" + ("&cursor=" + cursor if cursor else ""), key=key)
        assert r.status == 200
        page = r.json
        assert len(page["sandboxes"]) <= 2
        seen += [x["id"] for x in page["sandboxes"]]
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert seen == ids
    grp_a = s.request("GET", "/v1/sandboxes?metadata.grp=a", key=key).json["sandboxes"]
    assert len(grp_a) == 2 and all(x["metadata"]["grp"] == "a" for x in grp_a)
    both = s.request("GET", "/v1/sandboxes?metadata.grp=a&metadata.n=1", key=key).json["sandboxes"]
    assert [x["metadata"]["n"] for x in both] == ["1"]
    assert len(s.request("GET", "/v1/sandboxes?state=failed&template=fake", key=key).json["sandboxes"]) == 5
    assert s.request("GET", "/v1/sandboxes?state=running", key=key).json["sandboxes"] == []
    assert s.request("GET", "/v1/sandboxes?template=base", key=key).json["sandboxes"] == []


@pytest.mark.parametrize("query", ["limit=0", "limit=1001", "limit=x", "state=sleepy", "cursor=bogus",
                                   "metadata.=x", "metadata.k=%zz"])
def test_list_bad_query(api_spaced, query):
    r = api_spaced.request("GET", "/v1/sandboxes?" + query)
    assert r.status == 400, r
    # malformed percent-encoding is refused by the HTTP layer itself
    assert r.error_code() in ("invalid_request", "bad_request")


# ---- templates ------------------------------------------------------------------------

def test_templates(api_spaced):
    r = api_spaced.request("GET", "/v1/templates")
    assert r.status == 200
    names = [t["name"] for t in r.json["templates"]]
    assert names == ["fake"]
    assert api_spaced.request("GET", "/v1/templates/fake").json["template"]["state"] == "ready"
    assert api_spaced.request("GET", "/v1/templates/nope").status == 404


@pytest.mark.parametrize("body,status", [
    ({}, 400), ({"name": "x"}, 400), ({"name": "x", "from": "nope"}, 400),
    ({"name": "fake", "from": "fake"}, 409), ({"name": "x", "from": "fake", "steps": "ls"}, 400),
    ({"name": "x", "from": "fake", "steps": [{"copy": "a"}]}, 400), ({"name": "x", "from": "fake", "z": 1}, 400),
])
def test_template_build_validation(api_spaced, body, status):
    r = api_spaced.request("POST", "/v1/templates", body)
    assert r.status == status, r


# ---- protocol-level abuse -------------------------------------------------------------

def test_method_not_allowed_and_unknown_path(api_spaced):
    r = api_spaced.request("PUT", "/v1/sandboxes")
    assert r.status == 405 and "allow" in r.headers
    r = api_spaced.request("GET", "/v1/nothing-here")
    assert r.status == 404 and r.error_code() == "not_found"


def test_garbage_request_line_keeps_server_up(api_spaced):
    with socket.create_connection(("127.0.0.1", api_spaced.port), timeout=10) as c:
        c.sendall(b"\x00\x01GARBAGE\r\n\r\n")
        data = c.recv(4096)
        assert data.startswith(b"HTTP/1.1 4")
    assert api_spaced.request("GET", "/healthz", key=None).status == 200
