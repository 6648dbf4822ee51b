"""Auto-resume against real VMs (base template): a sandbox created with
"auto_resume": true that is paused or suspended, by a client or by its timeout, is woken by
the next call that needs its VM (a command, a file read, a port request), which then
proceeds as if the sandbox had been running; concurrent calls share one wake operation; a
sandbox without the flag still answers 409 not_running. The API-only checks (the field's
validation and representation) run on the fake-guest daemon."""
import threading
import urllib.parse

from spacedlib import poll, session_output

HTTPD = 8080


def sandbox(s, sid):
    r = s.request("GET", "/v1/sandboxes/" + sid)
    return r.json["sandbox"] if r.status == 200 else None


def verb(s, sid, name):
    r = s.request("POST", "/v1/sandboxes/%s/%s" % (sid, name))
    assert r.status == 202, (name, r)
    op = s.wait_op(r.json["operation"]["id"])
    assert op["state"] == "succeeded", (name, op)


def running(s, body):
    out = s.create(dict({"template": "base", "timeout": 0}, **body))
    op = s.wait_op(out["operation"]["id"])
    assert op["state"] == "succeeded", (op, s.log())
    return out["sandbox"]["id"]


def wakes(s, sid):
    ops = s.request("GET", "/v1/operations?sandbox_id=" + sid).json["operations"]
    return [o for o in ops if o["kind"] == "wake"]


def read_file(s, sid, path):
    return s.request("GET", "/v1/sandboxes/%s/files?%s" % (sid, urllib.parse.urlencode({"path": path})),
                     timeout=300)


def test_field_validated_and_shown(api_spaced):
    r = api_spaced.request("POST", "/v1/sandboxes", {"template": "fake", "auto_resume": "yes"})
    assert r.status == 400 and "auto_resume" in r.json["error"]["message"], r
    out = api_spaced.create({"template": "fake", "auto_resume": True})
    assert out["sandbox"]["auto_resume"] is True
    out = api_spaced.create({"template": "fake"})
    assert out["sandbox"]["auto_resume"] is False


def test_pause_then_exec(spaced):
    sid = running(spaced, {"auto_resume": True})
    verb(spaced, sid, "pause")
    assert sandbox(spaced, sid)["state"] == "paused"
    out, code = session_output(spaced, sid, "echo woke")
    assert (out, code) == (b"woke\n", 0)
    assert sandbox(spaced, sid)["state"] == "running"
    assert len(wakes(spaced, sid)) == 1
    spaced.request("DELETE", "/v1/sandboxes/" + sid)


def suspended_with(s, path, data):
    """An auto-resume sandbox holding data (a word) at path, suspended."""
    sid = running(s, {"auto_resume": True})
    out, code = session_output(s, sid, "printf %s > %s" % (data, path))
    assert code == 0, out
    verb(s, sid, "suspend")
    assert sandbox(s, sid)["state"] == "suspended"
    return sid


def test_suspend_then_file_read(spaced):
    sid = suspended_with(spaced, "/tmp/f", "kept")
    r = read_file(spaced, sid, "/tmp/f")
    assert r.status == 200 and r.body == b"kept", r
    assert sandbox(spaced, sid)["state"] == "running"
    spaced.request("DELETE", "/v1/sandboxes/" + sid)


def test_timeout_pause_then_port_request(spaced):
    sid = running(spaced, {"auto_resume": True, "timeout": 20, "on_timeout": "suspend"})
    out, code = session_output(spaced, sid, "mkdir -p /tmp/www && printf hi > /tmp/www/h.txt && "
                                            "busybox httpd -p 127.0.0.1:%d -h /tmp/www" % HTTPD)
    assert code == 0, out
    path = "/v1/sandboxes/%s/ports/%d/h.txt" % (sid, HTTPD)
    assert poll(lambda: spaced.request("GET", path).status == 200, timeout=60)
    poll(lambda: (sandbox(spaced, sid) or {}).get("state") == "suspended", timeout=300)
    r = spaced.request("GET", path, timeout=300)
    assert r.status == 200 and r.body == b"hi", r
    sb = sandbox(spaced, sid)
    assert sb["state"] == "running" and sb["expires_at"], sb  # the timeout runs again
    spaced.request("DELETE", "/v1/sandboxes/" + sid)


def test_concurrent_requests_share_one_wake(spaced):
    sid = suspended_with(spaced, "/tmp/g", "both")
    got = [None] * 4

    def read(i):
        got[i] = read_file(spaced, sid, "/tmp/g")
    threads = [threading.Thread(target=read, args=(i,)) for i in range(len(got))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r is not None and r.status == 200 and r.body == b"both" for r in got), got
    assert len(wakes(spaced, sid)) == 1, wakes(spaced, sid)
    spaced.request("DELETE", "/v1/sandboxes/" + sid)


def test_without_the_flag_409_as_before(spaced):
    sid = running(spaced, {})
    verb(spaced, sid, "pause")
    r = spaced.request("POST", "/v1/sandboxes/%s/sessions" % sid, {"cmd": "true"})
    assert r.status == 409 and r.error_code() == "not_running", r
    r = read_file(spaced, sid, "/etc/hostname")
    assert r.status == 409 and r.error_code() == "not_running", r
    assert sandbox(spaced, sid)["state"] == "paused"
    assert wakes(spaced, sid) == []
    spaced.request("DELETE", "/v1/sandboxes/" + sid)


def test_flag_survives_a_restart(fresh_spaced):
    """The flag is in the store: after spaced restarts, a suspended sandbox still wakes."""
    s = fresh_spaced()
    sid = suspended_with(s, "/tmp/h", "x")
    s.stop(cleanup=False)
    s.start()
    assert sandbox(s, sid)["auto_resume"] is True
    out, code = session_output(s, sid, "echo again")
    assert (out, code) == (b"again\n", 0)
    assert sandbox(s, sid)["state"] == "running"
    s.request("DELETE", "/v1/sandboxes/" + sid)
