"""Tenancy (docs/security.md "Quotas and tenancy") on a fake-guest daemon with two
tenants, A and B, each with its own key.

For every route that names one object (sandbox, its sub-resources, operation, template),
B asking for A's object gets exactly what it gets for an object that does not exist:
same status, same body once the name is substituted. Listings show B nothing of A.
A's template is unusable by B (as a sandbox template or a build base), B cannot delete
it, and built-in templates are shared read-only: nobody deletes, rebuilds or shadows
them. Template names shaped like generated ids ("sb" + 16 hex...) are refused, so a
template name never reads as a sandbox or operation id."""
import json
import shutil

import pytest

from spacedlib import Spaced, make_fake_guest

MISSING_SBX = "sb0123456789abcdef"
MISSING_OP = "op0123456789abcdef"
MISSING_TPL = "no-such-template"


@pytest.fixture(scope="module")
def two():
    guest = make_fake_guest()
    s = Spaced(guest).start()
    keys = {}
    for t in ("ten-a", "ten-b"):
        r = s.request("POST", "/v1/keys", {"tenant": t})
        assert r.status == 201, r
        keys[t] = r.json["secret"]
    a, b = keys["ten-a"], keys["ten-b"]
    r = s.request("POST", "/v1/sandboxes", {"template": "fake"}, key=a)
    assert r.status == 202, r
    sid, op = r.json["sandbox"]["id"], r.json["operation"]["id"]
    s.wait_op(op, key=a)
    r = s.request("POST", "/v1/templates", {"name": "a-private", "base": "fake"}, key=a)
    assert r.status == 202, r
    tpl_op = r.json["operation"]["id"]
    s.wait_op(tpl_op, key=a)
    yield s, a, b, sid, op, tpl_op
    s.stop()
    shutil.rmtree(guest, ignore_errors=True)


def same_as_missing(s, key, method, path, real, missing, body=None):
    """B's answer about A's object `real` equals its answer about `missing`."""
    got = s.request(method, path.format(real), body, key=key)
    ref = s.request(method, path.format(missing), body, key=key)
    assert got.status == ref.status and got.status in (400, 404), (path, got, ref)
    norm = got.body.decode().replace(real, missing)
    assert json.loads(norm) == json.loads(ref.body), (path, got, ref)


SANDBOX_ROUTES = [
    ("GET", "/v1/sandboxes/{}", None), ("DELETE", "/v1/sandboxes/{}", None),
    ("POST", "/v1/sandboxes/{}/start", None), ("POST", "/v1/sandboxes/{}/pause", None),
    ("POST", "/v1/sandboxes/{}/timeout", {"timeout": 5}),
    ("GET", "/v1/sandboxes/{}/network", None), ("PUT", "/v1/sandboxes/{}/network", {"mode": "none"}),
    ("GET", "/v1/sandboxes/{}/network/log", None), ("GET", "/v1/sandboxes/{}/credentials", None),
    ("GET", "/v1/sandboxes/{}/sessions", None), ("POST", "/v1/sandboxes/{}/sessions", {"cmd": "true"}),
    ("GET", "/v1/sandboxes/{}/files?path=/etc/hostname", None),
    ("GET", "/v1/sandboxes/{}/files/list?path=/", None),
    ("GET", "/v1/sandboxes/{}/ports/8080/", None),
    ("GET", "/sandboxes/{}", None), ("DELETE", "/sandboxes/{}", None),
    ("POST", "/sandboxes/{}/timeout", {"timeout": 5}),
]


@pytest.mark.parametrize("method,path,body", SANDBOX_ROUTES)
def test_other_tenants_sandbox_answers_as_missing(two, method, path, body):
    s, a, b, sid, _, _ = two
    if path.startswith("/sandboxes"):  # the E2B API reads X-API-Key
        got = s.request(method, path.format(sid), body, key=None, headers={"X-API-Key": b})
        ref = s.request(method, path.format(MISSING_SBX), body, key=None, headers={"X-API-Key": b})
        assert got.status == ref.status == 404, (got, ref)
        assert json.loads(got.body.decode().replace(sid, MISSING_SBX)) == json.loads(ref.body)
    else:
        same_as_missing(s, b, method, path, sid, MISSING_SBX, body)
    assert s.request("GET", "/v1/sandboxes/" + sid, key=a).status == 200  # still A's


@pytest.mark.parametrize("path", ["/v1/operations/{}", "/v1/operations/{}/events"])
def test_other_tenants_operation_answers_as_missing(two, path):
    s, _, b, _, op, tpl_op = two
    same_as_missing(s, b, "GET", path, op, MISSING_OP)
    same_as_missing(s, b, "GET", path, tpl_op, MISSING_OP)


def test_other_tenants_template_answers_as_missing(two):
    s, a, b, _, _, _ = two
    assert s.request("GET", "/v1/templates/a-private", key=a).status == 200
    same_as_missing(s, b, "GET", "/v1/templates/{}", "a-private", MISSING_TPL)
    same_as_missing(s, b, "DELETE", "/v1/templates/{}", "a-private", MISSING_TPL)
    same_as_missing(s, b, "POST", "/v1/sandboxes", "a-private", MISSING_TPL)
    for path, field in (("/v1/sandboxes", "template"),):
        got = s.request("POST", path, {field: "a-private"}, key=b)
        ref = s.request("POST", path, {field: MISSING_TPL}, key=b)
        assert got.status == ref.status == 400, (got, ref)
        assert json.loads(got.body.decode().replace("a-private", MISSING_TPL)) == json.loads(ref.body)
    got = s.request("POST", "/v1/templates", {"name": "b-on-a", "base": "a-private"}, key=b)
    ref = s.request("POST", "/v1/templates", {"name": "b-on-a", "base": MISSING_TPL}, key=b)
    assert got.status == ref.status == 400, (got, ref)
    assert json.loads(got.body.decode().replace("a-private", MISSING_TPL)) == json.loads(ref.body)
    assert s.request("GET", "/v1/templates/a-private", key=a).status == 200  # still there


def test_listings_show_nothing_of_other_tenants(two):
    s, a, b, sid, op, tpl_op = two
    for path in ("/v1/sandboxes", "/v1/operations", "/v1/templates", "/v1/credentials",
                 "/sandboxes", "/v2/sandboxes", "/v1/quota"):
        h = {"X-API-Key": b} if not path.startswith("/v1") else None
        r = s.request("GET", path, key=None if h else b, headers=h)
        assert r.status == 200, (path, r)
        text = r.body.decode()
        for secret in (sid, op, tpl_op, "a-private", "ten-a"):
            assert secret not in text, (path, secret, text)
    assert s.request("GET", "/v1/keys", key=b).status == 403  # keys: admins only
    names = [t["name"] for t in s.request("GET", "/v1/templates", key=b).json["templates"]]
    assert names == ["fake"], names  # built-ins only


def test_builtins_are_shared_read_only(two):
    s, a, b, _, _, _ = two
    for key in (a, b):
        r = s.request("DELETE", "/v1/templates/fake", key=key)
        assert r.status == 409 and "built in" in r.json["error"]["message"], r
        r = s.request("POST", "/v1/templates", {"name": "fake", "base": "fake"}, key=key)
        assert r.status == 409 and "built in" in r.json["error"]["message"], r
        assert s.request("GET", "/v1/templates/fake", key=key).status == 200


@pytest.mark.parametrize("name", ["sb0123456789abcdef", "op00000000000000ff", "ak0123456789abcdef"])
def test_id_shaped_template_names_refused(two, name):
    s, a, _, _, _, _ = two
    r = s.request("POST", "/v1/templates", {"name": name, "base": "fake"}, key=a)
    assert r.status == 400, r
    assert "id" in r.json["error"]["message"], r
