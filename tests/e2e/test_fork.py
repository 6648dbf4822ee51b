"""Forks of a running sandbox (POST /v1/sandboxes/{id}/fork) against real VMs on the
`base` template: memory, a running process and files carried over, independence of
parent and forks afterwards, a distinct identity per fork, the parent kept running, chain
depth bounded, and the API's refusals (count, unknown or other tenant's sandbox, a
sandbox that is not running). Skips (saying why) when guest artifacts are missing."""
import json
import os
import time

import pytest

from spacedlib import session_output

COUNTER = ("setsid sh -c 'i=0; while :; do i=$((i+1)); echo $i > /tmp/counter; sleep 0.2; done' "
           "</dev/null >/dev/null 2>&1 & echo $!")


def run(s, sid, cmd):
    out, code = session_output(s, sid, cmd)
    assert code == 0, (sid, cmd, out)
    return out.decode().strip()


def running_sandbox(s):
    out = s.create({"template": "base"})
    op = s.wait_op(out["operation"]["id"])
    assert op["state"] == "succeeded", (op, s.log())
    return out["sandbox"]["id"]


def fork(s, sid, count=None, key="admin"):
    r = s.request("POST", "/v1/sandboxes/%s/fork" % sid, {} if count is None else {"count": count},
                  key=key)
    assert r.status == 202, r
    ids = r.json["sandboxes"]
    assert len(ids) == (count or 1) and len(set(ids)) == len(ids)
    op = s.wait_op(r.json["operation"]["id"], timeout=600, key=key)
    assert op["state"] == "succeeded", (op, s.log())
    assert op["kind"] == "fork" and op["sandbox_id"] == sid
    return ids


def delete(s, *ids):
    for i in ids:
        r = s.request("DELETE", "/v1/sandboxes/" + i)
        assert s.wait_op(r.json["operation"]["id"])["state"] == "succeeded"


@pytest.mark.parametrize("count", [1, 4])
def test_fork_carries_memory_processes_and_files(spaced, count):
    s = spaced
    parent = running_sandbox(s)
    pid = run(s, parent, COUNTER)
    run(s, parent, "mkdir -p ~/t; echo before > ~/t/shared; echo tmpfs > /tmp/mem; sleep 1")
    forks = fork(s, parent, count)
    for f in forks:
        sb = s.request("GET", "/v1/sandboxes/" + f).json["sandbox"]
        assert sb["state"] == "running" and sb["template"] == "base"
        # the process started before the fork runs on in each fork, counting further
        c1 = int(run(s, f, "kill -0 %s && cat /tmp/counter" % pid))
        time.sleep(1)
        c2 = int(run(s, f, "cat /tmp/counter"))
        assert c2 > c1 > 0, (f, c1, c2)
        assert run(s, f, "cat ~/t/shared /tmp/mem") == "before\ntmpfs"
        assert run(s, f, "hostname") == f  # its own identity
    # the parent kept running, with its own identity
    assert s.request("GET", "/v1/sandboxes/" + parent).json["sandbox"]["state"] == "running"
    assert run(s, parent, "hostname") == parent
    assert int(run(s, parent, "kill -0 %s && cat /tmp/counter" % pid)) > 0
    # independence: writes after the fork stay where they were made
    run(s, parent, "echo parent > ~/t/after; sync")
    run(s, forks[0], "echo fork > ~/t/after; echo only-here > ~/t/mine; sync")
    assert run(s, parent, "cat ~/t/after; ls ~/t") == "parent\nafter\nshared"
    assert run(s, forks[0], "cat ~/t/after") == "fork"
    for f in forks[1:]:
        assert run(s, f, "ls ~/t") == "shared"
    # fresh entropy: the kernel RNG of each fork gives different bytes
    rnd = {run(s, x, "head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \\n'") for x in [parent] + forks}
    assert len(rnd) == 1 + count
    delete(s, parent)
    # a fork outlives its parent
    assert run(s, forks[0], "cat ~/t/mine") == "only-here"
    delete(s, *forks)
    poll_captures_gone(s)


def poll_captures_gone(s, timeout=30):
    d = os.path.join(s.data_dir, "captures")
    deadline = time.monotonic() + timeout
    while os.path.isdir(d) and os.listdir(d):
        assert time.monotonic() < deadline, ("captures left behind", os.listdir(d))
        time.sleep(1)


def layers(s, sid):
    with open(os.path.join(s.data_dir, "sandboxes", sid, "backing.json")) as f:
        return len(json.load(f))


def test_fork_of_fork_and_chain_bound(spaced):
    s = spaced
    line = [running_sandbox(s)]
    run(s, line[0], "echo 0 > ~/gen")
    # each generation stands on one more layer, until the bound (4) refuses the next
    while True:
        r = s.request("POST", "/v1/sandboxes/%s/fork" % line[-1], {"count": 1})
        if r.status == 409:
            assert r.json["error"]["code"] == "chain_too_deep", r
            assert layers(s, line[-1]) == 4
            break
        assert r.status == 202 and len(line) < 4, r
        assert s.wait_op(r.json["operation"]["id"], timeout=600)["state"] == "succeeded"
        line.append(r.json["sandboxes"][0])
        assert layers(s, line[-1]) == layers(s, line[-2]) + 1
        run(s, line[-1], "echo %d >> ~/gen" % (len(line) - 1))
    want = "\n".join(str(i) for i in range(len(line)))
    # the ancestors' captures stay while the last generation's disk stands on them
    delete(s, *line[:-1])
    assert run(s, line[-1], "cat ~/gen") == want
    delete(s, line[-1])
    poll_captures_gone(s)


def test_fork_refusals(spaced):
    s = spaced
    sid = running_sandbox(s)
    for body in ({"count": 0}, {"count": 17}, {"count": 10 ** 12}, {"count": "2"},
                 {"count": 1.5}, {"count": None}):
        r = s.request("POST", "/v1/sandboxes/%s/fork" % sid, body)
        assert r.status == 400 and r.json["error"]["code"] == "invalid_request", (body, r)
        assert "count must be an integer in 1..16" in r.json["error"]["message"]
    r = s.request("POST", "/v1/sandboxes/%s/fork" % sid, {"what": 1})
    assert r.status == 400 and r.json["error"]["code"] == "unknown_field", r
    r = s.request("POST", "/v1/sandboxes/sb0123456789abcdef/fork", {"count": 1})
    assert r.status == 404, r
    r = s.request("POST", "/v1/sandboxes/not-an-id/fork", {"count": 1})
    assert r.status == 404, r
    r = s.request("POST", "/v1/keys", {"tenant": "fork-other"})
    other = r.json["secret"]
    r = s.request("POST", "/v1/sandboxes/%s/fork" % sid, {"count": 1}, key=other)
    assert r.status == 404 and r.json["error"]["code"] == "not_found", r
    r = s.request("POST", "/v1/sandboxes/%s/pause" % sid)
    s.wait_op(r.json["operation"]["id"])
    r = s.request("POST", "/v1/sandboxes/%s/fork" % sid, {"count": 1})
    assert r.status == 409 and "paused" in r.json["error"]["message"], r
    delete(s, sid)
