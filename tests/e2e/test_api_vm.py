"""Sandbox lifecycle against real VMs on the `base` template: every verb, illegal
transitions from live states, queued operations, SSE following, timeouts, template
snapshots and a crashed VM. Skips (saying why) when guest artifacts are missing."""
import json
import os
import signal
import time

import pytest

from spacedlib import poll, session_output


def sandbox(s, sid):
    r = s.request("GET", "/v1/sandboxes/" + sid)
    return r.json["sandbox"] if r.status == 200 else None


def verb(s, sid, name, want="succeeded"):
    r = s.request("POST", "/v1/sandboxes/%s/%s" % (sid, name))
    assert r.status == 202, (name, r)
    op = s.wait_op(r.json["operation"]["id"])
    assert op["state"] == want, (name, op)
    return op


def running_sandbox(s, body=None):
    out = s.create(dict({"template": "base"}, **(body or {})))
    op = s.wait_op(out["operation"]["id"])
    assert op["state"] == "succeeded", (op, s.log())
    return out["sandbox"]["id"]


def test_full_lifecycle(spaced):
    s = spaced
    sid = running_sandbox(s, {"metadata": {"t": "lifecycle"}})
    assert sandbox(s, sid)["state"] == "running"
    r = s.request("POST", "/v1/sandboxes/%s/resume" % sid)
    assert r.status == 409 and "running" in r.json["error"]["message"]
    assert s.request("POST", "/v1/sandboxes/%s/start" % sid).status == 409
    verb(s, sid, "pause")
    assert sandbox(s, sid)["state"] == "paused"
    r = s.request("POST", "/v1/sandboxes/%s/restore" % sid)
    assert r.status == 409 and "paused" in r.json["error"]["message"]
    verb(s, sid, "resume")
    verb(s, sid, "suspend")
    assert sandbox(s, sid)["state"] == "suspended"
    r = s.request("POST", "/v1/sandboxes/%s/resume" % sid)
    assert r.status == 409 and "suspended" in r.json["error"]["message"]
    verb(s, sid, "restore")
    assert sandbox(s, sid)["state"] == "running"
    verb(s, sid, "stop")
    assert sandbox(s, sid)["state"] == "stopped"
    r = s.request("POST", "/v1/sandboxes/%s/resume" % sid)
    assert r.status == 409 and "stopped" in r.json["error"]["message"]
    verb(s, sid, "start")
    verb(s, sid, "wake")  # no-op when running
    verb(s, sid, "pause")
    verb(s, sid, "wake")  # resume path
    assert sandbox(s, sid)["state"] == "running"
    verb(s, sid, "suspend")
    verb(s, sid, "wake")  # restore path
    assert sandbox(s, sid)["state"] == "running"
    r = s.request("DELETE", "/v1/sandboxes/" + sid)
    assert r.status == 202
    assert s.wait_op(r.json["operation"]["id"])["state"] == "succeeded"
    assert s.request("GET", "/v1/sandboxes/" + sid).status == 404
    assert not os.path.exists(os.path.join(s.data_dir, "sandboxes", sid))


def test_queued_operations_run_in_order(spaced):
    s = spaced
    out = s.create({"template": "base"})
    sid = out["sandbox"]["id"]
    ops = [s.request("POST", "/v1/sandboxes/%s/%s" % (sid, v)).json["operation"]["id"]
           for v in ("pause", "resume", "suspend")]
    assert s.request("POST", "/v1/sandboxes/%s/pause" % sid).status == 409  # heading to suspended
    results = [s.wait_op(o) for o in [out["operation"]["id"]] + ops]
    assert [o["state"] for o in results] == ["succeeded"] * 4, results
    starts = [o["started_at"] for o in results]
    assert starts == sorted(starts)
    assert sandbox(s, sid)["state"] == "suspended"
    r = s.request("DELETE", "/v1/sandboxes/" + sid)
    assert s.wait_op(r.json["operation"]["id"])["state"] == "succeeded"


def test_follow_create_over_sse(spaced):
    s = spaced
    out = s.create({"template": "base"})
    r = s.request("GET", "/v1/operations/%s/events" % out["operation"]["id"], timeout=300)
    assert r.status == 200
    events = [json.loads(l[5:]) for l in r.body.decode().splitlines() if l.startswith("data:")]
    assert events[-1]["state"] == "succeeded", events
    assert len(events) >= 2
    s.request("DELETE", "/v1/sandboxes/" + out["sandbox"]["id"])


def test_template_snapshot_is_used(spaced):
    s = spaced
    running_sandbox(s)
    poll(lambda: s.request("GET", "/v1/templates/base").json["template"]["snapshots"] >= 1, timeout=300)
    out = s.create({"template": "base"})
    op = s.wait_op(out["operation"]["id"])
    assert op["state"] == "succeeded" and "snapshot" in (op["detail"] or ""), op
    assert "not built" not in op["detail"]
    # The template VM was warmed up before its snapshot (tpl_warm.c): the refresh and the
    # command each clone would otherwise run first, with the disk reads they cost.
    with open(s.log_path, errors="replace") as f:
        warm = [l for l in f if "event=template.warm" in l and "snapshot=base/" in l]
    assert warm and "result=ok steps=2 failed=0" in warm[0], warm


@pytest.mark.parametrize("action,final", [("suspend", "suspended"), ("delete", None)])
def test_timeout_fires(spaced, action, final):
    s = spaced
    sid = running_sandbox(s, {"timeout": 3, "on_timeout": action})
    if final:
        poll(lambda: (sandbox(s, sid) or {}).get("state") == final)
        ops = s.request("GET", "/v1/operations?sandbox_id=" + sid).json["operations"]
        assert ops[0]["kind"] == "suspend"
        s.request("DELETE", "/v1/sandboxes/" + sid)
    else:
        poll(lambda: s.request("GET", "/v1/sandboxes/" + sid).status == 404)


def test_crashed_vm_marks_failed(spaced):
    s = spaced
    sid = running_sandbox(s)
    with open(os.path.join(s.data_dir, "run", sid, "qemu.pid")) as f:
        os.kill(int(f.read()), signal.SIGKILL)
    sb = poll(lambda: (sandbox(s, sid) or {}).get("state") == "failed" and sandbox(s, sid))
    assert sb["failure"]
    # failed: pause is illegal, start brings it back on its kept disk
    assert s.request("POST", "/v1/sandboxes/%s/pause" % sid).status == 409
    verb(s, sid, "start")
    assert sandbox(s, sid)["state"] == "running"
    r = s.request("DELETE", "/v1/sandboxes/" + sid)
    assert s.wait_op(r.json["operation"]["id"])["state"] == "succeeded"


def test_refresh_sets_identity_and_env(spaced):
    s = spaced
    sid = running_sandbox(s, {"env": {"GREETING": "hello-space"}})
    out, code = session_output(s, sid,
                               "hostname; echo $GREETING; head -c 16 /dev/urandom | od -An -tx1")
    assert code == 0, out
    lines = out.decode().split("\n")
    assert lines[0] == sid and lines[1] == "hello-space"
    t0 = time.time()
    other = running_sandbox(s)
    out2, _ = session_output(s, other, "head -c 16 /dev/urandom | od -An -tx1; date +%s")
    t1 = time.time()
    rnd, guest_now = out2.decode().strip().split("\n")
    assert rnd.strip() != lines[2].strip()  # clones never share random state
    # The refresh set the host's clock (the agent adds the time since the request's bytes
    # arrived): never the template snapshot's, never ahead.
    assert int(t0) - 1 <= int(guest_now) <= int(t1) + 1, (t0, guest_now, t1)
    for x in (sid, other):
        s.request("DELETE", "/v1/sandboxes/" + x)


def test_template_build_and_use(spaced):
    s = spaced
    name = "t%d" % int(time.time() * 1000 % 1e9)
    r = s.request("POST", "/v1/templates", {"name": name, "from": "base",
                                            "steps": [{"run": "echo from-build > /etc/built"},
                                                      {"run": "mkdir -p /opt/tool"}]})
    assert r.status == 202, r
    op = s.wait_op(r.json["operation"]["id"])
    assert op["state"] == "succeeded" and op["progress"] == 100, op
    t = s.request("GET", "/v1/templates/" + name).json["template"]
    assert t["state"] == "ready" and t["builtin"] is False
    sid = running_sandbox(s, {"template": name})
    out, code = session_output(s, sid, "cat /etc/built; test -d /opt/tool && echo dir")
    assert code == 0 and out.decode().split() == ["from-build", "dir"]
    s.request("DELETE", "/v1/sandboxes/" + sid)
    # a failing step fails the build with its output, and leaves no template
    r = s.request("POST", "/v1/templates", {"name": name + "x", "from": "base",
                                            "steps": [{"run": "echo oops >&2; exit 3"}]})
    op = s.wait_op(r.json["operation"]["id"])
    assert op["state"] == "failed" and "exited with 3" in op["error"]["message"] and "oops" in op["error"]["message"]
    t = s.request("GET", "/v1/templates/%sx" % name).json["template"]
    assert t["state"] == "failed"
    assert s.request("POST", "/v1/sandboxes", {"template": name + "x"}).status == 400
