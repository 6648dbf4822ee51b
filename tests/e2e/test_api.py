"""Control-plane API without VMs: auth, keys, tenancy, validation, operations,
idempotency, illegal transitions, pagination. Runs against `api_spaced`, whose only
template ("fake") is accepted but cannot boot, so creates end in a failed sandbox."""
import json
import shutil
import socket
import time

import pytest

from spacedlib import Spaced, make_fake_guest


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


# ---- bad input (issue 4's list): every case gets its 4xx with a JSON error and spaced
# keeps serving. Rate limiting has its own file (test_ratelimit.py).

def raw_exchange(s, data, timeout=60):
    """Sends raw bytes, returns (status, headers dict, body bytes) of the first response;
    the server may close early (a refused body), so sending stops quietly then."""
    with socket.create_connection(("127.0.0.1", s.port), timeout=timeout) as c:
        try:
            c.sendall(data)
        except OSError:
            pass
        buf = b""
        while b"\r\n\r\n" not in buf:
            chunk = c.recv(65536)
            assert chunk, "connection closed without a response; got %r" % buf
            buf += chunk
        head, _, body = buf.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])}
        n = int(headers.get("content-length", "0"))
        while len(body) < n:
            chunk = c.recv(65536)
            if not chunk:
                break
            body += chunk
        return int(lines[0].split()[1]), headers, body


def assert_json_error(status, headers, body, want_status, want_code=None):
    assert status == want_status, (status, body)
    assert headers.get("content-type", "").startswith("application/json"), headers
    err = json.loads(body)["error"]
    assert err["message"], err
    if want_code:
        assert err["code"] == want_code, err


@pytest.fixture(scope="module")
def bad_sbx(api_spaced):
    return failed_sandbox(api_spaced)[0]


@pytest.mark.parametrize("method,path,raw,status,code", [
    ("POST", "/v1/keys", b"{", 400, "invalid_json"),
    ("POST", "/v1/keys", b"[1]", 400, "invalid_json"),
    ("POST", "/v1/keys", b'{"tenant":5}', 400, "invalid_request"),
    ("POST", "/v1/keys", b'{"tenant":"t","ttl_seconds":"10"}', 400, "invalid_request"),
    ("POST", "/v1/sandboxes/{sb}/timeout", b"nope", 400, "invalid_json"),
    ("POST", "/v1/sandboxes/{sb}/timeout", b'{"timeout":"5"}', 400, "invalid_request"),
    ("POST", "/v1/sandboxes/{sb}/timeout", b'{"timeout":5,"on_timeout":"explode"}', 400, "invalid_request"),
    ("POST", "/v1/sandboxes/{sb}/timeout", b'{"timeout":5,"timeuot":1}', 400, "unknown_field"),
    ("POST", "/v1/sandboxes/{sb}/start", b"nope", 400, "invalid_json"),
    ("POST", "/v1/sandboxes/{sb}/start", b'{"force":true}', 400, "unknown_field"),
    ("POST", "/v1/sandboxes", b'{"template":"fake","vcpus":"2"}', 400, "invalid_request"),
    ("POST", "/v1/sandboxes", b'{"template":"fake","vcpus":1.5}', 400, "invalid_request"),
    ("POST", "/v1/sandboxes", b'{"template":"fake","template":"fake"}', 400, "invalid_json"),
])
def test_malformed_json_wrong_types_unknown_fields(api_spaced, bad_sbx, method, path, raw, status, code):
    r = api_spaced.request(method, path.replace("{sb}", bad_sbx), raw=raw,
                           headers={"Content-Type": "application/json"})
    assert (r.status, r.error_code()) == (status, code), r
    assert r.json["error"]["message"]


@pytest.mark.parametrize("method,path", [
    ("POST", "/v1/keys"), ("POST", "/v1/sandboxes"), ("POST", "/v1/sandboxes/{sb}/timeout"),
    ("POST", "/v1/sandboxes/{sb}/stop"), ("POST", "/v1/sandboxes/{sb}/sessions"),
])
def test_huge_declared_body_is_413_before_reading(api_spaced, bad_sbx, method, path):
    """A Content-Length over the route's limit is refused from the head alone (the
    100 MB are never sent), with a JSON error; spaced keeps serving."""
    head = ("%s %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: "
            "application/json\r\nContent-Length: 100000000\r\n\r\n"
            % (method, path.replace("{sb}", bad_sbx), api_spaced.admin_key)).encode()
    assert_json_error(*raw_exchange(api_spaced, head), 413, "payload_too_large")
    assert api_spaced.request("GET", "/v1/sandboxes").status == 200


def test_huge_chunked_body_is_413(api_spaced):
    """Without a length up front the limit holds while the body streams in."""
    piece = b"x" * 65536
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(piece), piece) for _ in range(40))  # 2.5 MiB
    head = ("POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
            "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
            % api_spaced.admin_key).encode()
    assert_json_error(*raw_exchange(api_spaced, head + chunks + b"0\r\n\r\n"), 413,
                      "payload_too_large")
    assert api_spaced.request("GET", "/healthz", key=None).status == 200


@pytest.mark.parametrize("raw,status", [
    (b"GET /v1/sandboxes/" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414),
    (b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * 20000 + b"\r\n\r\n", 431),
    (b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
    (b"GET /healthz HTTP/9.9\r\nHost: x\r\n\r\n", 505),
])
def test_hostile_heads_get_json_errors(api_spaced, raw, status):
    assert_json_error(*raw_exchange(api_spaced, raw), status)
    assert api_spaced.request("GET", "/healthz", key=None).status == 200


@pytest.mark.parametrize("path", [
    "/v1/sandboxes/sb%00aaaaaaaaaaaaaaa", "/v1/sandboxes/%ZZ", "/v1/operations/op%2F..%2F..",
    "/v1/sandboxes/sb0123456789abcdef/sessions/ss%2F",
])
def test_invalid_ids_are_4xx(api_spaced, path):
    r = api_spaced.request("GET", path)
    assert r.status in (400, 404), r
    assert r.json["error"]["code"] and r.json["error"]["message"]


def test_slowloris_head_is_408_while_others_are_served(api_spaced):
    """A client that never finishes its head holds no request: others are served
    meanwhile and the slow one gets 408 once the head deadline (10 s) passes."""
    with socket.create_connection(("127.0.0.1", api_spaced.port), timeout=120) as slow:
        slow.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        for _ in range(3):
            assert api_spaced.request("GET", "/v1/sandboxes").status == 200
        slow.sendall(b"X-Drip: 1\r\n")
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = slow.recv(4096)
            assert chunk, "closed without a 408; got %r" % data
            data += chunk
        assert data.startswith(b"HTTP/1.1 408"), data
        assert b"request_timeout" in data
    assert api_spaced.request("GET", "/healthz", key=None).status == 200


def test_thousands_of_connections_get_503_and_spaced_recovers():
    """1100 idle connections against the 1024 allowed: the extra ones get an immediate
    503 with a JSON error and Retry-After; the idle ones are closed at the head deadline;
    then spaced serves normally again. (All from one address: the per-address cap, which
    test_proxy_limits.py covers, is lifted.)"""
    import select
    guest = make_fake_guest()
    s = Spaced(guest).start(extra=["--max-conns-per-client", "0"])
    try:
        socks = {}
        try:
            for _ in range(1100):
                c = socket.create_connection(("127.0.0.1", s.port), timeout=30)
                c.setblocking(False)
                socks[c.fileno()] = c
            got = {fd: b"" for fd in socks}
            done = {}  # fd -> everything received before the server closed
            poll = select.poll()
            for fd in socks:
                poll.register(fd, select.POLLIN)
            deadline = time.monotonic() + 120  # head deadline 10 s; generous on a busy host
            while len(done) < len(socks) and time.monotonic() < deadline:
                for fd, _ in poll.poll(1000):
                    try:
                        chunk = socks[fd].recv(65536)
                    except BlockingIOError:
                        continue
                    except ConnectionResetError:
                        chunk = b""
                    if chunk:
                        got[fd] += chunk
                    else:
                        done[fd] = got[fd]
                        poll.unregister(fd)
            assert len(done) == len(socks), "%d connections were never closed" % (len(socks) - len(done))
        finally:
            for c in socks.values():
                c.close()
        refused = [d for d in done.values() if d]
        assert len(refused) >= 1100 - 1024, len(refused)
        for d in refused:
            head, _, body = d.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 503") and b"Retry-After: 1" in head, d
            assert json.loads(body)["error"]["code"] == "unavailable"
        r = s.request("GET", "/v1/sandboxes")
        assert r.status == 200, r
    finally:
        s.stop()
        shutil.rmtree(guest, ignore_errors=True)
