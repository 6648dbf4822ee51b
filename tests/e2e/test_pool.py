"""End-to-end test of the warm pool (`spaced --pool N`): creates are served from paused
clones, each claimed clone gets its own identity and entropy (agent refresh), and the pool
refills in the background. Only network-less shapes are pooled."""
import re
import time

import pytest

from spacedlib import vm_missing
from test_sessions import run

POOL = 2
BODY = {"template": "base", "timeout": 0, "network": {"mode": "none"}}


def metric(sp, name):
    r = sp.request("GET", "/metrics", key=None)
    assert r.status == 200, r
    m = re.search(r"^%s (\d+)$" % name, r.body.decode(), re.M)
    assert m, "metric %s missing" % name
    return int(m.group(1))


def wait_pool(sp, want, timeout=900):
    deadline = time.monotonic() + timeout
    while metric(sp, "space_pool_ready") < want:
        if time.monotonic() > deadline:
            raise AssertionError("pool has %d ready VMs after %d s, want %d; log:\n%s"
                                 % (metric(sp, "space_pool_ready"), timeout, want, sp.log()))
        time.sleep(1)


def create(sp):
    t0 = time.monotonic()
    r = sp.create(BODY)
    op = sp.wait_op(r["operation"]["id"])
    assert op["state"] == "succeeded", (op, sp.log())
    return r["sandbox"]["id"], time.monotonic() - t0


def identity(sp, sid):
    _, res = run(sp, sid, {"cmd": "hostname; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n'"})
    assert res["exit"] == {"code": 0, "signal": None}, res
    host, rnd = res["stdout"].decode().split("\n", 1)
    return host, rnd.strip()


def test_creates_claim_from_pool_and_pool_refills(fresh_spaced):
    why = vm_missing()
    if why:
        pytest.skip(why)
    sp = fresh_spaced()
    sp.stop(cleanup=False)
    sp.start(extra=("--pool", str(POOL)))
    # The first creates build the template snapshot (cold boot) and then restore from it;
    # the shape's pool starts at the first create that finds the snapshot ready.
    made = []
    sid, _ = create(sp)
    made.append(sid)
    deadline = time.monotonic() + 900
    while "pool.start" not in open(sp.log_path).read():
        assert time.monotonic() < deadline, "no pool started; log:\n" + sp.log()
        time.sleep(5)
        sid, restore_s = create(sp)
        made.append(sid)
    wait_pool(sp, POOL)
    pooled = []
    for _ in range(POOL):
        sid, took = create(sp)
        pooled.append(sid)
        assert re.search(r"pool\.claim sandbox=%s " % sid, open(sp.log_path).read()), sp.log()
        print("create from pool: %.2f s" % took)
    print("create by restore (last non-pooled): %.2f s" % restore_s)
    (h1, r1), (h2, r2) = identity(sp, pooled[0]), identity(sp, pooled[1])
    assert h1 == pooled[0] and h2 == pooled[1]
    assert len(r1) == 64 and len(r2) == 64 and r1 != r2
    wait_pool(sp, POOL)  # refilled in the background
    for sid in made + pooled:
        r = sp.request("DELETE", "/v1/sandboxes/" + sid)
        assert r.status == 202, r
