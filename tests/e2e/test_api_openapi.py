"""docs/openapi.yaml against the server: every documented route exists and answers a
basic request with a documented status; every route the server registers (found in
the sources' router_add calls and route tables) is documented. The E2B-compatible
routes in src/daemon/e2b follow E2B's own API and are excluded (docs/e2b.md).

Every response checked here must match the document strictly (check_response): its
status is documented for that route; its Content-Type is the documented one; a status
documented without a body has none; a JSON body's top-level keys are all documented
properties of the response schema and include every required one (errors: exactly
{"error": {"code", "message"}}). Without VMs every route is called once against a
sandbox that cannot boot (mostly error paths); with VMs, test_data_plane_matches_spec
drives the session and file routes through their success paths too."""
import http.client
import json
import os
import re

import pytest

from spacedlib import ROOT, Response

try:
    import yaml
except ImportError:  # python3-yaml is in scripts/install-deps.sh
    yaml = None

METHODS = ("get", "post", "put", "delete", "patch")
VERBS = ("start", "stop", "pause", "resume", "suspend", "restore", "wake")


_SPEC = []


def load_spec():
    if yaml is None:
        pytest.fail("python3-yaml is not installed: run scripts/install-deps.sh")
    if not _SPEC:
        with open(os.path.join(ROOT, "docs", "openapi.yaml")) as f:
            _SPEC.append(yaml.safe_load(f))
    return _SPEC[0]


def resolve(node):
    spec = load_spec()
    while isinstance(node, dict) and "$ref" in node:
        target = spec
        for part in node["$ref"].lstrip("#/").split("/"):
            target = target[part]
        node = target
    return node


def operation(method, path):
    item = load_spec()["paths"][path]
    return resolve(item[method.lower()])


def check_response(method, path, r, what=""):
    """Asserts that response r of METHOD path (the documented template) matches the spec."""
    op = operation(method, path)
    where = "%s %s%s -> %r" % (method, path, what, r)
    doc = op["responses"].get(str(r.status))
    assert doc is not None, "%s: status not documented (documented: %s)" % (where, sorted(op["responses"]))
    doc = resolve(doc)
    content = doc.get("content")
    ctype = r.headers.get("content-type", "").split(";")[0].strip()
    if not content:
        assert r.body == b"", "%s: documented without a body" % where
        return
    assert ctype in content, "%s: Content-Type %r, documented %s" % (where, ctype, sorted(content))
    if ctype != "application/json":
        return
    schema = resolve(content[ctype]["schema"])
    body = json.loads(r.body)
    props = schema.get("properties")
    assert schema.get("type") == "object" and props, \
        "%s: the documented JSON body has no properties to check against" % where
    extra = sorted(set(body) - set(props))
    assert not extra, "%s: undocumented top-level keys %s" % (where, extra)
    missing = sorted(set(schema.get("required", [])) - set(body))
    assert not missing, "%s: documented required keys missing: %s" % (where, missing)
    if r.status >= 400:
        assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}, where


def documented():
    spec = load_spec()
    out = []
    for path, item in spec["paths"].items():
        for m in METHODS:
            if m in item:
                out.append((m.upper(), path, resolve(item[m])))
    return out


def served_in_source():
    """(METHOD, pattern) pairs registered by the control plane, sessions and files."""
    found = set()
    add = re.compile(r'router_add\(\s*\w+,\s*"([A-Z]+)",\s*"(/[^"]*)"')
    table = re.compile(r'\{\s*"([A-Z]+)",\s*"(/[^"]*)"')
    for base, _, files in os.walk(os.path.join(ROOT, "src", "daemon")):
        if os.sep + "e2b" in base:
            continue
        for name in files:
            if name.endswith(".c"):
                with open(os.path.join(base, name), errors="replace") as f:
                    text = f.read()
                found |= set(add.findall(text)) | set(table.findall(text))
    # A rest-of-path parameter ("{path...}", router.h) is one path parameter in OpenAPI.
    found = {(m, re.sub(r"\{(\w+)\.\.\.\}", r"{\1}", p)) for m, p in found}
    # routes_sandboxes.c registers the lifecycle verbs in a loop
    found |= {("POST", "/v1/sandboxes/{id}/" + v) for v in VERBS}
    return found


def test_every_served_route_is_documented():
    docs = {(m, p) for m, p, _ in documented()}
    missing = sorted(served_in_source() - docs)
    assert not missing, "routes served but not in docs/openapi.yaml: %s" % missing


@pytest.fixture(scope="module")
def ids(api_spaced):
    s = api_spaced
    out = s.create({"template": "fake"})
    s.wait_op(out["operation"]["id"])
    return {"sandbox": out["sandbox"]["id"], "op": out["operation"]["id"]}


def concrete(path, ids, s):
    if "/v1/keys/{id}" in path:
        key = s.request("POST", "/v1/keys", {"tenant": "openapi"}).json["key"]["id"]
        return path.replace("{id}", key)
    if path.startswith("/v1/operations/"):
        return path.replace("{id}", ids["op"])
    return path.replace("{id}", ids["sandbox"]).replace("{sid}", "ss" + "0" * 24).replace("{name}", "fake")


@pytest.mark.parametrize("method,path,op", documented(), ids=lambda v: v if isinstance(v, str) else "")
def test_documented_route_answers_documented_status(api_spaced, ids, method, path, op):
    s = api_spaced
    url = concrete(path, ids, s)
    params = op.get("parameters", []) + load_spec()["paths"][path].get("parameters", [])
    query = [p["name"] for p in params if p.get("in") == "query" and p.get("required")]
    if query:
        url += "?" + "&".join("%s=/tmp/x" % q for q in query)
    if path == "/v1/operations/{id}":
        url += "?wait=0"
    body = None
    if method in ("POST", "PUT") and path not in ("/v1/sandboxes",):
        body = {}
    if path == "/v1/sandboxes":
        body = {"template": "fake"}
    r = head_only(s, url) if path == "/v1/events" else s.request(method, url, body)
    assert r.status != 405
    check_response(method, path, r, " (%s)" % url)


def head_only(s, url):
    """GET url and only its head: a stream that never ends by itself (GET /v1/events)."""
    conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=90)
    try:
        conn.request("GET", url, headers={"Authorization": "Bearer " + s.admin_key})
        r = conn.getresponse()
        return Response(r.status, {k.lower(): v for k, v in r.getheaders()}, b"")
    finally:
        conn.close()


def test_every_json_reply_documents_its_keys():
    """A success reply documented as JSON names its top-level keys, so check_response has
    something to hold the server to (routes only VMs reach included)."""
    vague = []
    for method, path, op in documented():
        for status, doc in op["responses"].items():
            content = resolve(doc).get("content") or {}
            if not status.startswith("2") or "application/json" not in content:
                continue
            schema = resolve(content["application/json"]["schema"])
            if not (schema.get("type") == "object" and schema.get("properties")):
                vague.append("%s %s %s" % (method, path, status))
    assert not vague, "JSON replies without documented keys: %s" % vague


class _Attach:
    """An open SSE attach: the head is checked, the connection kept until close()."""

    def __init__(self, s, url, token):
        self.conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=600)
        self.conn.request("GET", url, headers={"Authorization": "Bearer " + token})
        resp = self.conn.getresponse()
        self.resp = resp
        headers = {k.lower(): v for k, v in resp.getheaders()}
        body = b"" if resp.status == 200 else resp.read()
        self.r = type("R", (), {"status": resp.status, "headers": headers, "body": body,
                                "__repr__": lambda self: "<%d %s>" % (self.status, self.body[:200])})()

    def read_until(self, needle):
        seen = b""
        while needle not in seen:
            line = self.resp.readline()
            assert line, "stream ended before %r; got %r" % (needle, seen)
            seen += line
        return seen

    def close(self):
        self.conn.close()


def test_data_plane_matches_spec(spaced, need_vm):
    """Session and file routes through their success paths, every reply checked."""
    s = spaced
    out = s.create({"template": "base", "timeout": 0})
    assert s.wait_op(out["operation"]["id"])["state"] == "succeeded"
    sid = out["sandbox"]["id"]
    SB = "/v1/sandboxes/{id}"
    SS = SB + "/sessions/{sid}"

    def call(method, tmpl, url, body=None, raw=None, key="admin", headers=None, want=None):
        r = s.request(method, url, body, raw=raw, key=key, headers=headers)
        check_response(method, tmpl, r, " (%s)" % url)
        if want is not None:
            assert r.status == want, (method, url, r)
        return r

    base = "/v1/sandboxes/%s/sessions" % sid
    try:
        # A cat with stdin: create, list, status, attach, stdin, close-stdin.
        r = call("POST", SB + "/sessions", base, {"cmd": "cat", "stdin": True}, want=201)
        cat = r.json
        one = "%s/%s" % (base, cat["id"])
        call("GET", SB + "/sessions", base, want=200)
        call("GET", SS, one, want=200)
        call("GET", SS, one, key=None, headers={"Authorization": "Bearer " + cat["attach_token"]},
             want=200)
        att = _Attach(s, cat["attach_url"], cat["attach_token"])
        check_response("GET", SS + "/attach", att.r)
        assert att.r.status == 200
        r = call("POST", SS + "/stdin", one + "/stdin", raw=b"ping\n",
                 headers={"Content-Type": "application/octet-stream"}, want=200)
        assert r.json == {"bytes": 5}
        att.read_until(b"event: stdout")
        call("POST", SS + "/close-stdin", one + "/close-stdin", want=200)
        att.read_until(b"event: exit")
        att.close()
        # Replaying from an id that was never issued is a client error, documented.
        call("GET", SS + "/attach", one + "/attach?last_event_id=abc", want=400)
        # Signals on a finished process: a documented conflict.
        r = call("POST", SS + "/signal", one + "/signal", {"signal": "TERM"})
        assert r.status == 409, r
        # A PTY sleeper: resize, signal, new token, delete.
        r = call("POST", SB + "/sessions", base,
                 {"cmd": "sleep 1000", "pty": {"rows": 24, "cols": 80}}, want=201)
        pty = r.json
        two = "%s/%s" % (base, pty["id"])
        att = _Attach(s, pty["attach_url"], pty["attach_token"])
        att.read_until(b"event: start")
        call("POST", SS + "/resize", two + "/resize", {"rows": 40, "cols": 100}, want=200)
        call("POST", SS + "/token", two + "/token?ttl=60", want=200)
        call("POST", SS + "/signal", two + "/signal", {"signal": "TERM"}, want=200)
        att.read_until(b"event: exit")
        att.close()
        call("DELETE", SS, two, want=204)
        call("GET", SS, two, want=404)
        call("DELETE", SS, one, want=204)

        # Files: upload, download, stat, list, mkdir, rename, remove.
        F = "/v1/sandboxes/%s/files" % sid
        FT = SB + "/files"
        call("PUT", FT, F + "?path=/tmp/oa/a.txt", raw=b"hello",
             headers={"Content-Type": "application/octet-stream"}, want=200)
        r = call("GET", FT, F + "?path=/tmp/oa/a.txt", want=200)
        assert r.body == b"hello"
        call("GET", FT + "/stat", F + "/stat?path=/tmp/oa/a.txt", want=200)
        call("GET", FT + "/list", F + "/list?path=/tmp/oa", want=200)
        call("POST", FT + "/mkdir", F + "/mkdir", {"path": "/tmp/oa/d"}, want=201)
        call("POST", FT + "/rename", F + "/rename", {"from": "/tmp/oa/a.txt", "to": "/tmp/oa/d/b.txt"},
             want=200)
        call("GET", FT + "/stat", F + "/stat?path=/tmp/oa/a.txt", want=404)
        call("DELETE", FT, F + "?path=/tmp/oa&recursive=true", want=204)
        call("GET", FT, F + "?path=/tmp", want=400)  # a directory

        # Network routes answer in their documented shapes (503 if networking is off here).
        call("GET", SB + "/network", "/v1/sandboxes/%s/network" % sid)
        call("GET", SB + "/credentials", "/v1/sandboxes/%s/credentials" % sid)
        call("GET", SB + "/network/log", "/v1/sandboxes/%s/network/log" % sid)
    finally:
        s.request("DELETE", "/v1/sandboxes/" + sid)
