"""End-to-end tests of command sessions against a real spaced and a real VM (base).

Covers: output and exit codes, binary output, env/cwd/user, signals, stdin, PTY resize,
reattach with Last-Event-ID (no loss, no duplicates), backpressure with no reader, 410
for evicted events, token isolation and expiry, deleting a session (process killed,
token dead, other tenants 404), 100 concurrent sessions, and every error path a client
can reach.
"""
import base64
import http.client
import json
import os
import threading
import time

import pytest

from spacedlib import sse_events

URL_SESS = "/v1/sandboxes/%s/sessions"


class Stream:
    """A raw SSE connection to a session's attach URL."""

    def __init__(self, sp, url, token, last_id=None, query=""):
        # Generous: a loaded machine runs TCG guests slowly; a hang still ends the test.
        self.conn = http.client.HTTPConnection("127.0.0.1", sp.port, timeout=600)
        headers = {"Authorization": "Bearer " + token} if token else {}
        if last_id is not None:
            headers["Last-Event-ID"] = str(last_id)
        self.conn.request("GET", url + query, headers=headers)
        self.resp = self.conn.getresponse()
        self.status = self.resp.status

    def events(self):
        """Yields (id, event, data) until the server ends the stream; stdout and stderr
        data decoded to bytes."""
        for ev_id, name, payload in sse_events(self.resp):
            if name in ("stdout", "stderr"):
                payload = base64.b64decode(payload["data"])
            yield ev_id, name, payload

    def close(self):
        self.conn.close()


def collect(events):
    """Folds events into {"ids", "stdout", "stderr", "exit", "start", "error"}."""
    out = {"ids": [], "stdout": bytearray(), "stderr": bytearray(), "exit": None, "start": None,
           "error": None}
    for ev_id, name, data in events:
        if ev_id is not None:
            out["ids"].append(ev_id)
        if name in ("stdout", "stderr"):
            out[name] += data
        else:
            out[name] = data
    out["stdout"], out["stderr"] = bytes(out["stdout"]), bytes(out["stderr"])
    return out


@pytest.fixture(scope="module")
def sbx(spaced):
    """A running base sandbox shared by this module's tests."""
    r = spaced.create({"template": "base", "timeout": 0})
    op = spaced.wait_op(r["operation"]["id"])
    assert op["state"] == "succeeded", op
    sid = r["sandbox"]["id"]
    yield sid
    spaced.request("DELETE", "/v1/sandboxes/" + sid)


def new_session(sp, sid, body, key="admin"):
    r = sp.request("POST", URL_SESS % sid, body, key=key)
    assert r.status == 201, r
    j = r.json
    assert j["state"] == "created" and j["attach_token"].startswith("sat_")
    assert j["attach_url"] == "/v1/sandboxes/%s/sessions/%s/attach" % (sid, j["id"])
    assert r.headers["location"] == "/v1/sandboxes/%s/sessions/%s" % (sid, j["id"])
    return j


def run(sp, sid, body):
    s = new_session(sp, sid, body)
    st = Stream(sp, s["attach_url"], s["attach_token"])
    assert st.status == 200, st.resp.read()
    res = collect(st.events())
    st.close()
    return s, res


def status(sp, sid, sess, key="admin"):
    r = sp.request("GET", "%s/%s" % (URL_SESS % sid, sess["id"]), key=key)
    assert r.status == 200, r
    return r.json["session"]


def test_output_exit_code_and_ids(spaced, sbx):
    s, res = run(spaced, sbx, {"cmd": "echo hello; echo oops >&2; exit 3"})
    assert res["start"]["pid"] > 0
    assert res["stdout"] == b"hello\n"
    assert res["stderr"] == b"oops\n"
    assert res["exit"] == {"code": 3, "signal": None}
    assert res["ids"] == list(range(1, len(res["ids"]) + 1))
    st = status(spaced, sbx, s)
    assert st["state"] == "exited" and st["exit_code"] == 3 and st["exit_signal"] is None
    assert st["pid"] == res["start"]["pid"] and st["last_event_id"] == res["ids"][-1]
    assert st["cmd"] == "echo hello; echo oops >&2; exit 3"


@pytest.mark.parametrize("code", [0, 1, 42, 255])
def test_exit_codes(spaced, sbx, code):
    _, res = run(spaced, sbx, {"argv": ["sh", "-c", "exit %d" % code]})
    assert res["exit"] == {"code": code, "signal": None}


def test_killed_by_signal_reports_signal(spaced, sbx):
    _, res = run(spaced, sbx, {"cmd": "kill -9 $$"})
    assert res["exit"] == {"code": None, "signal": 9}


def test_argv_env_cwd_user(spaced, sbx):
    _, res = run(spaced, sbx, {"argv": ["sh", "-c", "echo $FOO; pwd; id -u"],
                               "env": {"FOO": "bar baz"}, "cwd": "/tmp", "user": "root"})
    assert res["stdout"] == b"bar baz\n/tmp\n0\n"


def test_binary_output_is_exact(spaced, sbx):
    # Every byte value, twice, through printf octal escapes.
    script = "printf '%s'; printf '%s' >&2" % ("".join("\\%03o" % b for b in range(256)),
                                               "\\000\\377\\n")
    _, res = run(spaced, sbx, {"cmd": script})
    assert res["stdout"] == bytes(range(256))
    assert res["stderr"] == b"\x00\xff\n"


def test_exec_failure_is_an_error_event(spaced, sbx):
    s, res = run(spaced, sbx, {"argv": ["/no/such/binary"]})
    assert res["exit"] is None
    assert res["error"]["code"] == "not_found", res
    st = status(spaced, sbx, s)
    assert st["state"] == "failed" and st["error"]["code"] == "not_found"


def test_process_starts_only_on_attach(spaced, sbx):
    # Output written immediately at start must all arrive, however late the attach.
    s = new_session(spaced, sbx, {"cmd": "echo first; echo second >&2"})
    time.sleep(2)
    assert status(spaced, sbx, s)["state"] == "created"
    st = Stream(spaced, s["attach_url"], s["attach_token"])
    res = collect(st.events())
    assert res["stdout"] == b"first\n" and res["stderr"] == b"second\n"
    info = status(spaced, sbx, s)
    # started_at/created_at are both spaced's clock: the start followed the attach.
    assert info["started_at"] > info["created_at"]
    assert info["finished_at"] >= info["started_at"]


def test_signal_terminates(spaced, sbx):
    s = new_session(spaced, sbx, {"cmd": "echo ready; exec sleep 1000"})
    st = Stream(spaced, s["attach_url"], s["attach_token"])
    it = st.events()
    seen = []
    for ev in it:
        seen.append(ev)
        if ev[1] == "stdout":
            break
    r = spaced.request("POST", "%s/%s/signal" % (URL_SESS % sbx, s["id"]), {"signal": "TERM"},
                       key=None, headers={"Authorization": "Bearer " + s["attach_token"]})
    assert r.status == 200, r
    res = collect(it)
    assert res["exit"] == {"code": None, "signal": 15}


def test_stdin_streams_and_closes(spaced, sbx):
    s = new_session(spaced, sbx, {"cmd": "cat; echo done", "stdin": True})
    tok = {"Authorization": "Bearer " + s["attach_token"]}
    base = "%s/%s" % (URL_SESS % sbx, s["id"])
    # Before the first attach nothing runs: stdin is refused with a clear message.
    r = spaced.request("POST", base + "/stdin", raw=b"x", key=None, headers=tok)
    assert r.status == 409 and r.error_code() == "not_started"
    st = Stream(spaced, s["attach_url"], s["attach_token"])
    payload = bytes(range(256)) * 4096  # 1 MiB, every byte value
    r = spaced.request("POST", base + "/stdin", raw=payload, key=None, headers=tok)
    assert r.status == 200 and r.json == {"bytes": len(payload)}, r
    r = spaced.request("POST", base + "/close-stdin", key=None, headers=tok)
    assert r.status == 200, r
    res = collect(st.events())
    assert res["stdout"] == payload + b"done\n"
    assert res["exit"]["code"] == 0
    # After close, more stdin is refused.
    r = spaced.request("POST", base + "/stdin", raw=b"late", key=None, headers=tok)
    assert r.status == 409, r


def test_pty_resize(spaced, sbx):
    s = new_session(spaced, sbx, {"cmd": "stty size; read x; stty size", "stdin": True,
                                  "pty": {"rows": 24, "cols": 80}})
    base = "%s/%s" % (URL_SESS % sbx, s["id"])
    st = Stream(spaced, s["attach_url"], s["attach_token"])
    it = st.events()
    out = b""
    for _, name, data in it:
        if name == "stdout":
            out += data
            if b"24 80" in out:
                break
    assert b"24 80" in out
    r = spaced.request("POST", base + "/resize", {"rows": 50, "cols": 132})
    assert r.status == 200, r
    r = spaced.request("POST", base + "/stdin", raw=b"\n")
    assert r.status == 200, r
    res = collect(it)
    assert b"50 132" in out + res["stdout"], out + res["stdout"]
    assert res["exit"]["code"] == 0


def test_reattach_with_last_event_id_no_loss_no_dup(spaced, sbx):
    n = 300
    s = new_session(spaced, sbx, {"cmd": "i=1; while [ $i -le %d ]; do echo line$i; i=$((i+1)); "
                                         "if [ $((i %% 20)) = 0 ]; then sleep 0.1; fi; done" % n})
    want = b"".join(b"line%d\n" % i for i in range(1, n + 1))
    got, ids, last = b"", [], None
    # Drop the connection after every few events, each time resuming from the last id.
    for attempt in range(1000):
        st = Stream(spaced, s["attach_url"], s["attach_token"], last_id=last)
        assert st.status == 200
        done = False
        for k, (ev_id, name, data) in enumerate(st.events()):
            ids.append(ev_id)
            last = ev_id
            if name == "stdout":
                got += data
            if name == "exit":
                done = True
                break
            if k == 2:
                break
        st.close()
        if done:
            break
    assert got == want
    assert ids == list(range(1, len(ids) + 1)), "ids repeated or skipped"
    # Attaching after the end with the last id gives nothing new; from 0 replays all.
    st = Stream(spaced, s["attach_url"], s["attach_token"], last_id=last)
    assert collect(st.events())["ids"] == []
    st = Stream(spaced, s["attach_url"], s["attach_token"], last_id=0)
    res = collect(st.events())
    assert res["stdout"] == want and res["exit"]["code"] == 0


def test_survives_client_disconnect_and_backpressure(spaced, sbx):
    # 12 MB of output (3x the 4 MiB buffer) with the reader gone: the process must block,
    # not lose output, and finish once someone reads again.
    size = 12 * 1000 * 1000
    s = new_session(spaced, sbx, {"cmd": "head -c %d /dev/zero | tr '\\000' a; echo; echo end >&2"
                                         % size})
    st = Stream(spaced, s["attach_url"], s["attach_token"])
    last, got = None, 0
    for ev_id, name, data in st.events():
        last = ev_id
        if name == "stdout":
            got += len(data)
            break
    st.close()
    time.sleep(3)
    info = status(spaced, sbx, s)
    assert info["state"] == "running", info  # blocked on its pipe, not dead, not finished
    st = Stream(spaced, s["attach_url"], s["attach_token"], last_id=last)
    res = collect(st.events())
    got += len(res["stdout"])
    assert got == size + 1
    assert set(res["stdout"][:-1]) <= {ord("a")}
    assert res["stderr"] == b"end\n" and res["exit"]["code"] == 0


def test_evicted_events_are_410(spaced, sbx):
    s = new_session(spaced, sbx, {"cmd": "head -c 6000000 /dev/zero"})
    st = Stream(spaced, s["attach_url"], s["attach_token"])
    res = collect(st.events())
    assert len(res["stdout"]) == 6000000 and res["exit"]["code"] == 0
    st = Stream(spaced, s["attach_url"], s["attach_token"], last_id=1)
    assert st.status == 410
    err = json.loads(st.resp.read())["error"]
    assert err["code"] == "events_gone" and "no longer buffered" in err["message"]
    # Beyond the newest id: 400.
    st = Stream(spaced, s["attach_url"], s["attach_token"], last_id=res["ids"][-1] + 5)
    assert st.status == 400
    st = Stream(spaced, s["attach_url"], s["attach_token"], query="?last_event_id=abc")
    assert st.status == 400


def test_token_isolation(spaced, sbx):
    a = new_session(spaced, sbx, {"cmd": "echo a"})
    b = new_session(spaced, sbx, {"cmd": "echo b"})
    ta = {"Authorization": "Bearer " + a["attach_token"]}
    base_b = "%s/%s" % (URL_SESS % sbx, b["id"])
    # A's token opens nothing of B's.
    for method, path, body in [("GET", base_b, None), ("GET", base_b + "/attach", None),
                               ("POST", base_b + "/signal", {"signal": 9}),
                               ("POST", base_b + "/resize", {"rows": 1, "cols": 1}),
                               ("POST", base_b + "/close-stdin", None),
                               ("POST", base_b + "/stdin", None)]:
        r = spaced.request(method, path, body, key=None, headers=ta)
        assert r.status == 403, (path, r)
        assert r.error_code() == "forbidden" and b["id"] in r.json["error"]["message"]
    # Nor the collection routes, nor a token via ?token= on the wrong session.
    r = spaced.request("GET", URL_SESS % sbx, key=None, headers=ta)
    assert r.status == 403
    r = spaced.request("POST", URL_SESS % sbx, {"cmd": "true"}, key=None, headers=ta)
    assert r.status == 403
    st = Stream(spaced, b["attach_url"], None, query="?token=" + a["attach_token"])
    assert st.status == 403
    # Nor another sandbox (even with A's own session id in the path).
    other = "sb" + "0" * 16
    r = spaced.request("GET", "%s/%s" % (URL_SESS % other, a["id"]), key=None, headers=ta)
    assert r.status == 403
    # Nor the sandbox or files API (it is not an API key).
    r = spaced.request("GET", "/v1/sandboxes/" + sbx, key=None, headers=ta)
    assert r.status == 401
    r = spaced.request("GET", "/v1/sandboxes/%s/files/stat?path=/" % sbx, key=None, headers=ta)
    assert r.status == 401
    # A forged token of the right shape is refused too.
    r = spaced.request("GET", "%s/%s" % (URL_SESS % sbx, a["id"]), key=None,
                       headers={"Authorization": "Bearer sat_" + "A" * 43})
    assert r.status == 403
    # The right token works, via header and via ?token=.
    r = spaced.request("GET", "%s/%s" % (URL_SESS % sbx, a["id"]), key=None, headers=ta)
    assert r.status == 200 and r.json["session"]["id"] == a["id"]
    st = Stream(spaced, a["attach_url"], None, query="?token=" + a["attach_token"])
    assert st.status == 200 and collect(st.events())["stdout"] == b"a\n"


def test_token_expiry_and_renewal(spaced, sbx):
    s = new_session(spaced, sbx, {"cmd": "echo late", "token_ttl": 1})
    time.sleep(2.5)
    st = Stream(spaced, s["attach_url"], s["attach_token"])
    assert st.status == 401
    assert json.loads(st.resp.read())["error"]["code"] == "token_expired"
    # The API key mints a new token; the old one stays dead.
    r = spaced.request("POST", "%s/%s/token?ttl=60" % (URL_SESS % sbx, s["id"]))
    assert r.status == 200, r
    tok = r.json["attach_token"]
    assert tok != s["attach_token"]
    st = Stream(spaced, s["attach_url"], tok)
    assert st.status == 200 and collect(st.events())["stdout"] == b"late\n"
    r = spaced.request("GET", "%s/%s" % (URL_SESS % sbx, s["id"]), key=None,
                       headers={"Authorization": "Bearer " + s["attach_token"]})
    assert r.status in (401, 403)


def test_other_tenant_sees_nothing(spaced, sbx):
    r = spaced.request("POST", "/v1/keys", {"tenant": "sess-other"})
    assert r.status == 201, r
    other = r.json["secret"]
    s = new_session(spaced, sbx, {"cmd": "true"})
    r = spaced.request("GET", "%s/%s" % (URL_SESS % sbx, s["id"]), key=other)
    assert r.status == 404
    r = spaced.request("POST", URL_SESS % sbx, {"cmd": "true"}, key=other)
    assert r.status == 404
    r = spaced.request("GET", URL_SESS % sbx, key=other)
    assert r.status == 404


def test_list_and_status(spaced, sbx):
    s = new_session(spaced, sbx, {"argv": ["true"]})
    r = spaced.request("GET", URL_SESS % sbx)
    assert r.status == 200
    mine = [x for x in r.json["sessions"] if x["id"] == s["id"]]
    assert len(mine) == 1 and mine[0]["state"] == "created" and mine[0]["argv"] == ["true"]
    assert mine[0]["pid"] is None and mine[0]["exit_code"] is None


def test_error_paths(spaced, sbx):
    base = URL_SESS % sbx
    s = new_session(spaced, sbx, {"cmd": "sleep 1000"})
    one = "%s/%s" % (base, s["id"])
    cases = [
        ("POST", base, b"not json", 400, "invalid_json"),
        ("POST", base, b"{}", 400, "invalid_request"),
        ("POST", base, b'{"cmd":"x","bogus":1}', 400, "unknown_field"),
        ("POST", base, b'{"argv":[1]}', 400, "invalid_request"),
        ("POST", base, b'{"cmd":"x","pty":{"rows":0,"cols":1}}', 400, "invalid_request"),
        ("GET", "/v1/sandboxes/nope/sessions", None, 400, "invalid_id"),
        ("GET", "/v1/sandboxes/sb%s/sessions" % ("0" * 16), None, 404, "not_found"),
        ("GET", base + "/bad", None, 400, "invalid_id"),
        ("GET", base + "/ss" + "0" * 24, None, 404, "not_found"),
        ("POST", one + "/signal", b'{"signal":"NOPE"}', 400, "invalid_request"),
        ("POST", one + "/signal", b'{"signal":9}', 409, "not_started"),
        ("POST", one + "/resize", b'{"rows":5,"cols":5}', 409, "no_pty"),
        ("POST", one + "/stdin", b"x", 409, "no_stdin"),
        ("POST", one + "/close-stdin", None, 409, "no_stdin"),
        ("POST", one + "/token?ttl=0", None, 400, "invalid_request"),
    ]
    for method, path, raw, want, code in cases:
        r = spaced.request(method, path, raw=raw)
        assert (r.status, r.error_code()) == (want, code), (method, path, r)
    r = spaced.request("GET", base, key=None)
    assert r.status == 401
    r = spaced.request("GET", base, key="space_" + "0" * 48)
    assert r.status == 401
    # Kill the sleeper so the module's sandbox stays tidy.
    st = Stream(spaced, s["attach_url"], s["attach_token"])
    it = st.events()
    next(it)
    assert spaced.request("POST", one + "/signal", {"signal": "KILL"}).status == 200
    assert collect(it)["exit"]["signal"] == 9


def guest_has(spaced, sbx, needle, want, tries=60):
    """Polls `ps` in the guest until `needle` is (want=True) or is not in it."""
    for _ in range(tries):
        _, res = run(spaced, sbx, {"cmd": "ps -o args 2>/dev/null || ps"})
        if (needle in res["stdout"]) == want:
            return True
        time.sleep(0.5)
    return False


def test_delete_session(spaced, sbx):
    base = URL_SESS % sbx
    r = spaced.request("POST", "/v1/keys", {"tenant": "sess-del-other"})
    assert r.status == 201, r
    other = r.json["secret"]
    s = new_session(spaced, sbx, {"cmd": "echo up; exec sleep 4242"})
    one = "%s/%s" % (base, s["id"])
    tok = {"Authorization": "Bearer " + s["attach_token"]}
    st = Stream(spaced, s["attach_url"], s["attach_token"])
    it = st.events()
    assert [name for _, name, _ in [next(it), next(it)]] == ["start", "stdout"]
    assert guest_has(spaced, sbx, b"sleep 4242", True)
    # Another tenant gets 404; the session's own token may not delete it.
    r = spaced.request("DELETE", one, key=other)
    assert r.status == 404 and r.error_code() == "not_found", r
    r = spaced.request("DELETE", one, key=None, headers=tok)
    assert r.status == 403 and r.error_code() == "forbidden", r
    r = spaced.request("DELETE", base + "/bad")
    assert r.status == 400 and r.error_code() == "invalid_id", r
    # The owner deletes it: the attached stream ends, the process dies.
    r = spaced.request("DELETE", one)
    assert r.status == 204 and r.body == b"", r
    rest = collect(it)
    assert rest["exit"] is None or rest["exit"]["signal"] == 9, rest
    st.close()
    assert guest_has(spaced, sbx, b"sleep 4242", False), "the deleted session's process still runs"
    # Gone for every route: 404 with the key, the attach token opens nothing.
    assert spaced.request("GET", one).status == 404
    assert spaced.request("DELETE", one).status == 404
    assert s["id"] not in [x["id"] for x in spaced.request("GET", base).json["sessions"]]
    for method, path in [("GET", one), ("GET", one + "/attach"), ("POST", one + "/signal")]:
        r = spaced.request(method, path, {"signal": 9} if method == "POST" else None, key=None,
                           headers=tok)
        assert r.status == 403 and r.error_code() == "forbidden", (path, r)
    # A session never attached is deleted just as well.
    s2 = new_session(spaced, sbx, {"cmd": "true"})
    assert spaced.request("DELETE", "%s/%s" % (base, s2["id"])).status == 204
    assert spaced.request("GET", "%s/%s" % (base, s2["id"])).status == 404


def test_session_timeout_kills(spaced, sbx):
    s, res = run(spaced, sbx, {"cmd": "sleep 100", "timeout": 1})
    assert res["exit"]["signal"] == 9
    assert status(spaced, sbx, s)["timed_out"] is True


def test_hundred_concurrent_sessions(spaced, sbx):
    n = 100
    sessions = [new_session(spaced, sbx, {"cmd": "echo session-%d; sleep 1; echo bye-%d" % (i, i)})
                for i in range(n)]
    results = [None] * n

    def attach(i):
        try:
            st = Stream(spaced, sessions[i]["attach_url"], sessions[i]["attach_token"])
            results[i] = collect(st.events())
            st.close()
        except Exception as e:  # reported by the assertion below
            results[i] = e

    threads = [threading.Thread(target=attach, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(900)
    for i, res in enumerate(results):
        assert isinstance(res, dict), "session %d: %r" % (i, res)
        assert res["stdout"] == b"session-%d\nbye-%d\n" % (i, i), res
        assert res["exit"] == {"code": 0, "signal": None}


def test_sessions_need_a_running_sandbox(spaced):
    r = spaced.create({"template": "base", "timeout": 0})
    sid = r["sandbox"]["id"]
    assert spaced.wait_op(r["operation"]["id"])["state"] == "succeeded"
    s = new_session(spaced, sid, {"cmd": "echo x"})
    op = spaced.request("POST", "/v1/sandboxes/%s/pause" % sid).json["operation"]
    assert spaced.wait_op(op["id"])["state"] == "succeeded"
    r = spaced.request("POST", URL_SESS % sid, {"cmd": "true"})
    assert r.status == 409 and r.error_code() == "not_running"
    st = Stream(spaced, s["attach_url"], s["attach_token"])
    assert st.status == 409
    op = spaced.request("DELETE", "/v1/sandboxes/" + sid).json["operation"]
    assert spaced.wait_op(op["id"])["state"] == "succeeded"
    r = spaced.request("GET", "%s/%s" % (URL_SESS % sid, s["id"]))
    assert r.status == 404


def test_delete_refused_while_the_process_is_unreachable(spaced):
    """A suspended sandbox's process cannot be killed now: deleting its session is
    refused (and changes nothing) rather than leaving a process nobody can stop."""
    r = spaced.create({"template": "base", "timeout": 0})
    sid = r["sandbox"]["id"]
    assert spaced.wait_op(r["operation"]["id"])["state"] == "succeeded"
    try:
        s = new_session(spaced, sid, {"cmd": "sleep 1000"})
        one = "%s/%s" % (URL_SESS % sid, s["id"])
        st = Stream(spaced, s["attach_url"], s["attach_token"])
        assert next(st.events())[1] == "start"
        st.close()
        op = spaced.request("POST", "/v1/sandboxes/%s/suspend" % sid).json["operation"]
        assert spaced.wait_op(op["id"])["state"] == "succeeded"
        r = spaced.request("DELETE", one)
        assert r.status == 409 and r.error_code() == "not_running", r
        assert "cannot be killed" in r.json["error"]["message"]
        r = spaced.request("GET", one)
        assert r.status == 200 and r.json["session"]["state"] in ("starting", "running"), r
    finally:
        op = spaced.request("DELETE", "/v1/sandboxes/" + sid).json["operation"]
        assert spaced.wait_op(op["id"])["state"] == "succeeded"


def test_validation_without_a_vm(api_spaced):
    """Paths that never reach a guest: they run even where VMs cannot."""
    sp = api_spaced
    fake = "sb" + "1" * 16
    ss = "ss" + "2" * 24
    cases = [
        ("GET", "/v1/sandboxes/x/sessions", "admin", None, 400, "invalid_id"),
        ("GET", "/v1/sandboxes/%s/sessions/zz" % fake, "admin", None, 400, "invalid_id"),
        ("GET", "/v1/sandboxes/%s/sessions" % fake, "admin", None, 404, "not_found"),
        ("POST", "/v1/sandboxes/%s/sessions" % fake, "admin", b'{"cmd":"x"}', 404, "not_found"),
        ("GET", "/v1/sandboxes/%s/sessions/%s" % (fake, ss), "admin", None, 404, "not_found"),
        ("DELETE", "/v1/sandboxes/%s/sessions/%s" % (fake, ss), "admin", None, 404, "not_found"),
        ("DELETE", "/v1/sandboxes/%s/sessions/%s" % (fake, ss), None, None, 401, "unauthorized"),
        ("GET", "/v1/sandboxes/%s/sessions" % fake, None, None, 401, "unauthorized"),
        ("GET", "/v1/sandboxes/%s/files/stat?path=/" % fake, "admin", None, 404, "not_found"),
        ("GET", "/v1/sandboxes/%s/files/stat?path=/" % fake, None, None, 401, "unauthorized"),
    ]
    for method, path, key, raw, want, code in cases:
        r = sp.request(method, path, raw=raw, key=key)
        assert (r.status, r.error_code()) == (want, code), (method, path, r)
    # An attach token for a session that does not exist opens nothing.
    r = sp.request("GET", "/v1/sandboxes/%s/sessions/%s/attach" % (fake, ss), key=None,
                   headers={"Authorization": "Bearer sat_" + "x" * 43})
    assert r.status == 403 and r.error_code() == "forbidden"
    # A sandbox that is not running (the fake template cannot boot) refuses sessions.
    created = sp.create({"template": "fake"})
    sp.wait_op(created["operation"]["id"])
    sid = created["sandbox"]["id"]
    r = sp.request("POST", "/v1/sandboxes/%s/sessions" % sid, {"cmd": "true"})
    assert r.status == 409 and r.error_code() == "not_running", r
    r = sp.request("GET", "/v1/sandboxes/%s/files?path=/etc/hostname" % sid)
    assert r.status == 409 and r.error_code() == "not_running", r
    r = sp.request("GET", "/v1/sandboxes/%s/sessions" % sid)
    assert r.status == 200 and r.json == {"sessions": []}
