"""E2B's template builder through a control daemon (issue 14 item 5, docs/multinode.md):
PostgreSQL, one control and two nodes on one machine (test_cluster's world), driven by
the unmodified E2B JS SDK.

A build is several calls whose state lives on one node (its upload archives, its log):
the control places the first (POST /v3/templates) like a native build, records the node
in the store (template_routes) and forwards every later call there, the upload PUT
included (it carries no API key: routed by the tenant its link names). The upload link
the node hands out names the control (or its SPACE_PUBLIC_URL), since nodes refuse
clients. A caller without a key is refused (E2B's 401) before anything is placed; a
second control replica, and the first one after a SIGKILL and restart, route the same
build the same way; with the builder drained, a
create from the template through the control lands on the other node, which fetches the
image by digest, and a command there sees the files the build wrote; a snapshot of that
sandbox is deleted through the control (E2B's DELETE /templates/{id}, forwarded to the
snapshot's node). One build VM and one sandbox VM (TCG)."""
import os
import re
import subprocess
import urllib.parse

import pytest

import spacedlib
from test_cluster import _e2b_driver, cluster, sql, wait_live  # noqa: F401 (fixture)
from test_store_pg import pg_server, pg_url  # noqa: F401 (fixtures)

NAME = "e2bctl1"
HASH = "ab" * 32


def test_e2b_template_build_through_control(cluster, pg_url, monkeypatch):  # noqa: F811
    e2b = _e2b_driver()
    why = e2b.node_missing()
    if why:
        pytest.skip(why)
    control, nodes, restart, second_control = cluster
    wait_live(control)
    by_id = {n.node_id: n for n in nodes}
    key = {"X-API-KEY": control.admin_key}

    # 1. No key, no placement: E2B's 401 before anything is placed, no route recorded;
    # an upload PUT with no route is refused before its body is read.
    r = control.request("POST", "/v3/templates", {"name": NAME}, key=None)
    assert r.status == 401 and set(r.json) == {"code", "message"} and r.json["code"] == 401, r
    assert "x-space-node" not in r.headers, r
    r = control.request("GET", "/templates/%s/builds/v1m256-00/status" % NAME, key=None)
    assert r.status == 401 and "x-space-node" not in r.headers, r
    assert sql(pg_url, "SELECT count(*) FROM template_routes") == ["0"]
    r = control.request("PUT", "/templates/%s/files/%s?tenant=admin&token=1.00" % (NAME, HASH), key=None,
                        raw=b"x")
    assert r.status == 401 and r.json["code"] == 401 and "x-space-node" not in r.headers, r
    r = control.request("PUT", "/templates/%s/files/%s" % (NAME, HASH), key=None, raw=b"x")  # no tenant
    assert r.status == 401 and r.json["code"] == 401, r
    for bad in ("/templates/%s/files/%s" % ("a" * 100, HASH), "/templates//files/" + HASH, "/v2/templates/"):
        r = control.request("GET", bad, key=None, headers=key)
        assert r.status == 404 and r.json["code"] == 404 and "x-space-node" not in r.headers, (bad, r)
    # A snapshot the caller does not have (E2B's deleteSnapshot): E2B's 404, from the control.
    r = control.request("DELETE", "/templates/sn0123456789abcdef", key=None, headers=key)
    assert r.status == 404 and r.json["code"] == 404 and "x-space-node" not in r.headers, r
    # A template the caller never requested: E2B's 404, from the control.
    r = control.request("GET", "/templates/never-requested/files/" + HASH, key=None, headers=key)
    assert r.status == 404 and r.json["code"] == 404 and "x-space-node" not in r.headers, r

    # 2. The SDK builds through the control (copy() uploads through the link it is
    # handed, so that link names the control); the route names the builder.
    out = e2b.run_script(control, "control_template_build.mjs", e2b.CURRENT, via_control=True,
                         env_extra={"SPACE_TEST_TEMPLATE": NAME})
    build_id = re.search(r"^buildID=(\S+)$", out, re.M).group(1)
    routes = sql(pg_url, "SELECT tenant||'|'||node FROM template_routes WHERE name='%s'" % NAME)
    assert len(routes) == 1 and routes[0].split("|")[0] == "admin", routes
    builder = by_id[routes[0].split("|")[1]]
    other = next(n for n in nodes if n is not builder)
    holders = sql(pg_url, "SELECT state||'|'||nodes FROM templates WHERE name='%s'" % NAME)
    assert holders == ["ready|" + builder.node_id], holders
    assert os.path.isdir(os.path.join(builder.data_dir, "e2b-files", "admin"))  # the uploads
    assert not os.path.exists(os.path.join(other.data_dir, "e2b-files"))

    # 3. A second control replica (with its own SPACE_PUBLIC_URL) routes the same build
    # to the same node: its status, and upload links naming that replica's public URL.
    with monkeypatch.context() as m:
        m.setitem(spacedlib.SPACED_ENV, "SPACE_PUBLIC_URL", "https://space.example.test:8443")
        control2 = second_control()
    path = "/templates/%s/builds/%s/status" % (NAME, build_id)
    r = control2.request("GET", path, key=None, headers=key)
    assert r.status == 200 and r.json["status"] == "ready", r
    assert r.headers.get("x-space-node") == builder.node_id, r.headers
    assert any("copied-through-control" in line for line in r.json["logs"]), r.json
    r = control2.request("GET", "/templates/%s/files/%s" % (NAME, HASH), key=None, headers=key)
    assert r.status == 200 and r.json["present"] is False, r
    u = urllib.parse.urlsplit(r.json["url"])
    assert (u.scheme, u.netloc, u.path) == ("https", "space.example.test:8443",
                                            "/templates/%s/files/%s" % (NAME, HASH)), u
    # A client's own X-Space-Public-Url never reaches the node: the link is still the control's.
    r = control.request("GET", "/templates/%s/files/%s" % (NAME, HASH), key=None,
                        headers=dict(key, **{"X-Space-Public-Url": "http://evil.example.test"}))
    assert r.status == 200 and r.json["url"].startswith(control.url + "/templates/"), r
    # A control killed and started again routes it the same way (nothing was in its memory).
    restart(control)
    r = control.request("GET", path, key=None, headers=key)
    assert r.status == 200 and r.json["status"] == "ready", r
    assert r.headers.get("x-space-node") == builder.node_id, r.headers
    # Aliases are answered from the store by either replica.
    for c in (control, control2):
        assert c.request("GET", "/templates/aliases/" + NAME, key=None, headers=key).status == 200
        r = c.request("GET", "/templates/aliases/nope-" + NAME, key=None, headers=key)
        assert r.status == 404 and r.json["code"] == 404, r

    # 4. With the builder drained, the create lands on the other node, which fetches the
    # image by digest; a command there sees what the build wrote.
    cli_env = dict(os.environ, SPACE_URL=control.url, SPACE_API_KEY=control.admin_key)
    out = subprocess.run([os.path.join(spacedlib.BUILD, "space"), "node", "drain", builder.node_id],
                         env=cli_env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out
    out = e2b.run_script(control, "control_template_use.mjs", e2b.CURRENT, via_control=True,
                         env_extra={"SPACE_TEST_TEMPLATE": NAME})
    sid = re.search(r"^sandboxID=(\S+)$", out, re.M).group(1)
    assert sql(pg_url, "SELECT node FROM sandboxes WHERE id='%s'" % sid) == [other.node_id]
    holders = sql(pg_url, "SELECT nodes FROM templates WHERE name='%s'" % NAME)
    assert holders == ["%s,%s" % (builder.node_id, other.node_id)], holders
