"""Measured load, as opposed to allocation: the host's (GET /v1/nodes `host`, each node's
`load` from its heartbeat, the console's nodes page shows both: test_console.py) and a
sandbox's CPU use (the agent's `metrics`, read through the E2B metrics route the
console's chart polls).

An idle base sandbox must read well under 100 % CPU. Before the agent took a baseline at
its start, the first sample was the share since boot: for a sandbox restored from a
snapshot that is mostly the template VM's boot, ~90 % under TCG, and two samples less
than a tick apart fell back to it again."""
import time

import pytest

from spacedlib import GUEST, vm_missing
from test_api import tenant_key
from test_cluster import cluster, live_nodes  # noqa: F401 (fixture)
from test_store_pg import pg_server, pg_url  # noqa: F401 (fixtures)

HOST_KEYS = {"load1", "load5", "load15", "cpu_pct", "cpus", "mem_total", "mem_available", "sampled_at"}


def check_load(load):
    assert set(load) == HOST_KEYS, load
    assert 0 <= load["cpu_pct"] <= 100 and load["cpus"] >= 1, load
    assert 0 < load["mem_available"] <= load["mem_total"], load
    assert min(load["load1"], load["load5"], load["load15"]) >= 0, load


def test_nodes_route_reports_this_host(api_spaced):
    r = api_spaced.request("GET", "/v1/nodes")
    assert r.status == 200 and r.json["nodes"] == [], r
    check_load(r.json["host"])
    other = tenant_key(api_spaced, "not-an-operator-load")
    assert api_spaced.request("GET", "/v1/nodes", key=other).status == 403


def test_nodes_report_their_load(cluster):  # noqa: F811
    control, nodes, _, _ = cluster
    deadline = time.monotonic() + 60
    while set(live_nodes(control)) != {"node-a", "node-b"}:
        assert time.monotonic() < deadline, live_nodes(control)
        time.sleep(0.5)
    for n in live_nodes(control).values():
        check_load(n["load"])


def metrics(sp, sid):
    r = sp.request("GET", "/sandboxes/%s/metrics" % sid, key=None, headers={"X-API-Key": sp.admin_key})
    assert r.status == 200 and len(r.json) == 1, r
    return r.json[0]["cpuUsedPct"]


def test_idle_sandbox_cpu_is_well_under_100(spaced):
    r = spaced.create({"template": "base", "timeout": 0})
    sid = r["sandbox"]["id"]
    try:
        assert spaced.wait_op(r["operation"]["id"])["state"] == "succeeded"
        time.sleep(3)  # a few ticks of idling for the first window
        first = metrics(spaced, sid)
        # Back to back: no tick between them must not fall back to since-boot.
        quick = [metrics(spaced, sid) for _ in range(3)]
        time.sleep(3)
        later = metrics(spaced, sid)
        assert first < 50 and max(quick) < 50 and later < 25, (GUEST, first, quick, later)
    finally:
        spaced.request("DELETE", "/v1/sandboxes/" + sid)
