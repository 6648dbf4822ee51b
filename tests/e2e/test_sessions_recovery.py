"""Sessions across a kill -9 of spaced (real VMs, base template): every acknowledged
session is still known after the restart; one never attached still starts on its first
attach; a running one is re-attached by pid and its remaining output arrives, with event
ids that never repeat (ids from before the crash are answered 410)."""
import time

from test_sessions import Stream, collect

SESS = "/v1/sandboxes/%s/sessions"


def attach_after_restart(sp, url, token):
    """The first attach after a restart: spaced answers 503 agent_unavailable (with
    Retry-After) until it has re-adopted the VM and its agent has said HELLO again."""
    deadline = time.monotonic() + 120
    while True:
        st = Stream(sp, url, token)
        if st.status != 503 or time.monotonic() > deadline:
            return st
        body = st.resp.read()
        assert b"agent_unavailable" in body, body
        assert st.resp.getheader("Retry-After") == "1"
        st.close()
        time.sleep(0.5)


def test_sessions_survive_kill9(need_vm, fresh_spaced):
    sp = fresh_spaced()
    r = sp.create({"template": "base", "timeout": 0})
    assert sp.wait_op(r["operation"]["id"])["state"] == "succeeded"
    sid = r["sandbox"]["id"]

    later = sp.request("POST", SESS % sid, {"cmd": "echo started-late"}).json
    running = sp.request("POST", SESS % sid, {
        "cmd": "echo before; while [ ! -e /tmp/go ]; do sleep 0.2; done; echo after; exit 7"}).json
    st = Stream(sp, running["attach_url"], running["attach_token"])
    seen = []
    for ev in st.events():
        seen.append(ev)
        if ev[1] == "stdout":
            break
    st.close()
    assert seen[-1][2] == b"before\n"
    before_id = seen[-1][0]

    sp.kill9()
    sp2 = fresh_spaced(data_dir=sp.data_dir)
    assert sp2.admin_key == sp.admin_key

    # Both sessions are still known, with their tokens.
    r = sp2.request("GET", SESS % sid)
    assert r.status == 200, r
    states = {x["id"]: x["state"] for x in r.json["sessions"]}
    assert states[later["id"]] == "created"
    assert states[running["id"]] in ("starting", "running")

    # The never-attached one starts now and loses nothing.
    st = attach_after_restart(sp2, later["attach_url"], later["attach_token"])
    assert st.status == 200, st.resp.read()
    res = collect(st.events())
    assert res["stdout"] == b"started-late\n" and res["exit"]["code"] == 0

    # The running one: ids from before the restart are gone (410), never reused.
    st = Stream(sp2, running["attach_url"], running["attach_token"], last_id=before_id)
    assert st.status == 410, st.resp.read()
    st.close()
    # Let the process finish, then read what is left.
    go = sp2.request("POST", SESS % sid, {"cmd": "touch /tmp/go"}).json
    st = Stream(sp2, go["attach_url"], go["attach_token"])
    assert collect(st.events())["exit"]["code"] == 0
    st = Stream(sp2, running["attach_url"], running["attach_token"])
    assert st.status == 200
    res = collect(st.events())
    assert res["stdout"] == b"after\n", res
    assert res["exit"] == {"code": 7, "signal": None}
    assert min(res["ids"]) > before_id
    info = sp2.request("GET", "%s/%s" % (SESS % sid, running["id"])).json["session"]
    assert info["state"] == "exited" and info["exit_code"] == 7

    op = sp2.request("DELETE", "/v1/sandboxes/" + sid).json["operation"]
    assert sp2.wait_op(op["id"])["state"] == "succeeded"


def _wait_verb(sp, sid, verb):
    r = sp.request("POST", "/v1/sandboxes/%s/%s" % (sid, verb))
    assert r.status == 202, r
    op = sp.wait_op(r.json["operation"]["id"])
    assert op["state"] == "succeeded", op


def test_sessions_across_pause_and_suspend(need_vm, spaced):
    """A process keeps running through pause/resume and suspend/restore; an attached
    reader of a paused sandbox keeps its stream, a suspended one is re-attached."""
    sp = spaced
    r = sp.create({"template": "base", "timeout": 0})
    assert sp.wait_op(r["operation"]["id"])["state"] == "succeeded"
    sid = r["sandbox"]["id"]
    s = sp.request("POST", SESS % sid, {
        "cmd": "i=0; while [ ! -e /tmp/stop ]; do echo tick$i; i=$((i+1)); sleep 0.3; done; echo bye",
    }).json
    st = Stream(sp, s["attach_url"], s["attach_token"])
    it = st.events()
    seen = []
    for ev in it:
        seen.append(ev)
        if ev[1] == "stdout":
            break
    _wait_verb(sp, sid, "pause")
    _wait_verb(sp, sid, "resume")
    # The same stream continues after a pause.
    for ev in it:
        seen.append(ev)
        if ev[1] == "stdout" and b"tick3" in ev[2]:
            break
    st.close()
    last = seen[-1][0]

    _wait_verb(sp, sid, "suspend")
    info = sp.request("GET", "%s/%s" % (SESS % sid, s["id"])).json["session"]
    assert info["state"] in ("starting", "running"), info  # detached, not lost
    _wait_verb(sp, sid, "restore")

    stop = sp.request("POST", SESS % sid, {"cmd": "touch /tmp/stop"}).json
    st2 = Stream(sp, stop["attach_url"], stop["attach_token"])
    assert collect(st2.events())["exit"]["code"] == 0

    st = Stream(sp, s["attach_url"], s["attach_token"], last_id=last)
    assert st.status == 200
    res = collect(st.events())
    assert res["stdout"].endswith(b"bye\n"), res
    assert res["exit"]["code"] == 0
    out = b"".join(d for _, n, d in seen if n == "stdout") + res["stdout"]
    ticks = [int(x[4:]) for x in out.split(b"\n") if x.startswith(b"tick")]
    assert ticks == list(range(len(ticks))), "output lost or repeated across pause/suspend"
    assert res["ids"] == list(range(last + 1, last + 1 + len(res["ids"])))

    op = sp.request("DELETE", "/v1/sandboxes/" + sid).json["operation"]
    assert sp.wait_op(op["id"])["state"] == "succeeded"


def test_sessions_end_when_the_sandbox_stops(need_vm, spaced):
    sp = spaced
    r = sp.create({"template": "base", "timeout": 0})
    assert sp.wait_op(r["operation"]["id"])["state"] == "succeeded"
    sid = r["sandbox"]["id"]
    s = sp.request("POST", SESS % sid, {"cmd": "echo up; exec sleep 1000"}).json
    st = Stream(sp, s["attach_url"], s["attach_token"])
    it = st.events()
    for ev in it:
        if ev[1] == "stdout":
            break
    _wait_verb(sp, sid, "stop")
    res = collect(it)  # the attached reader is told, then the stream ends
    assert res["error"]["code"] == "sandbox_stopped", res
    info = sp.request("GET", "%s/%s" % (SESS % sid, s["id"])).json["session"]
    assert info["state"] == "lost" and info["error"]["code"] == "sandbox_stopped"
    op = sp.request("DELETE", "/v1/sandboxes/" + sid).json["operation"]
    assert sp.wait_op(op["id"])["state"] == "succeeded"
