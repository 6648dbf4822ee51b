"""docs/openapi.yaml against the server: every documented route exists and answers a
basic request with a documented status; every route the server registers (found in
the sources' router_add calls and route tables) is documented. The E2B-compatible
routes in src/daemon/e2b follow E2B's own API and are excluded (docs/e2b.md)."""
import os
import re

import pytest

from spacedlib import ROOT

try:
    import yaml
except ImportError:  # python3-yaml is in scripts/install-deps.sh
    yaml = None

METHODS = ("get", "post", "put", "delete", "patch")
VERBS = ("start", "stop", "pause", "resume", "suspend", "restore", "wake")


def load_spec():
    if yaml is None:
        pytest.fail("python3-yaml is not installed: run scripts/install-deps.sh")
    with open(os.path.join(ROOT, "docs", "openapi.yaml")) as f:
        return yaml.safe_load(f)


def documented():
    spec = load_spec()
    out = []
    for path, item in spec["paths"].items():
        for m in METHODS:
            if m in item:
                op = item[m]
                if "$ref" in op:  # x-verb entries
                    name = op["$ref"].rsplit("/", 1)[1]
                    op = spec["components"]["x-verb"][name]
                out.append((m.upper(), path, op))
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
    r = s.request(method, url, body)
    allowed = {int(code) for code in op["responses"]}
    assert r.status in allowed, "%s %s -> %s, documented %s" % (method, url, r, sorted(allowed))
    assert r.status != 405
    if r.status >= 400:
        assert r.json["error"]["code"] and r.json["error"]["message"]
