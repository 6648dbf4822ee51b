"""A template build's output while it runs: GET /v1/operations/{id}/logs (SSE) and the
CLI's `space template build` that follows it.

  - a RUN step printing lines with sleeps in between: the first line reaches the client
    while the build still runs (the operation is not finished when it arrives), stdout
    and stderr apart, stages in order, one `end` last; Last-Event-ID resumes without
    repeats (VM)
  - the CLI prints the stages and the output as they come, on stderr (VM)
  - without VMs: a failed build's log ends with the failure; 404 for another tenant's
    operation or one that is not a build, 400 for a malformed or future Last-Event-ID."""
import json
import os
import subprocess
import time

import pytest

from spacedlib import BUILD
from test_api import tenant_key
from test_sessions import Stream, collect
from test_templates import unique

SPACE = os.path.join(BUILD, "space")
# Three lines 8 s apart: a build that only reported its output at the end would deliver
# the first one at least 16 s after it was printed.
SLOW = "echo first-line; sleep 8; echo to-stderr >&2; sleep 8; echo last-line"


def logs(sp, op_id, key="admin", last_id=None, query=""):
    token = sp.admin_key if key == "admin" else key
    return Stream(sp, "/v1/operations/%s/logs" % op_id, token, last_id=last_id, query=query)


def start_build(sp, name, steps, key="admin"):
    r = sp.request("POST", "/v1/templates", {"name": name, "base": "base", "steps": steps}, key=key)
    assert r.status == 202, r
    return r.json["operation"]["id"]


def test_first_line_arrives_while_the_build_runs(spaced):
    op_id = start_build(spaced, unique("slow"), [{"run": "true"}, {"run": SLOW}])
    st = logs(spaced, op_id)
    assert st.status == 200 and st.resp.getheader("content-type") == "text/event-stream", st.status
    seen, first_at_state, stdout = [], None, b""
    for ev_id, name, data in st.events():
        seen.append((ev_id, name, data))
        if name == "stdout":
            stdout += data
        if first_at_state is None and b"first-line" in stdout:
            first_at_state = spaced.request("GET", "/v1/operations/" + op_id).json["operation"]["state"]
    st.close()
    assert first_at_state == "running", (first_at_state, seen)
    names = [n for _, n, _ in seen]
    assert names[-1] == "end" and names.count("end") == 1, names
    assert seen[-1][2] == {"state": "succeeded", "error": None}, seen[-1]
    stages = [d["stage"] for _, n, d in seen if n == "stage"]
    assert stages[0] == "booting the build VM" and "step 2/2: run: " + SLOW[:40] in stages[2], stages
    assert stages[-2:] == ["flattening the disk image", "hashing the disk image (SHA-256)"], stages
    got = collect((i, n, d) for i, n, d in seen)
    assert got["stdout"] == b"first-line\nlast-line\n" and got["stderr"] == b"to-stderr\n", got
    ids = [i for i, _, _ in seen]
    assert ids == list(range(1, len(ids) + 1)), ids
    assert spaced.wait_op(op_id)["state"] == "succeeded"
    # A finished build's log stays readable; Last-Event-ID resumes after it, no repeats.
    st = logs(spaced, op_id, last_id=ids[-3])
    rest = list(st.events())
    st.close()
    assert [i for i, _, _ in rest] == ids[-2:] and rest[-1][1] == "end", rest
    st = logs(spaced, op_id, query="?last_event_id=%d" % ids[-1])
    assert list(st.events()) == []
    st.close()


def test_cli_prints_output_as_it_comes(spaced, tmp_path):
    """`space template build` shows each stage and the RUN output on stderr while the
    build runs: the first line is on stderr well before the command exits."""
    (tmp_path / "Spacefile").write_text("FROM base\nRUN " + SLOW + "\n")
    env = dict(os.environ, SPACE_URL=spaced.url, SPACE_API_KEY=spaced.admin_key)
    name = unique("clilog")
    p = subprocess.Popen([SPACE, "template", "build", name, "-f", str(tmp_path / "Spacefile")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    err, first_at = b"", None
    while True:
        chunk = os.read(p.stderr.fileno(), 4096)
        if not chunk:
            break
        err += chunk
        if first_at is None and b"first-line" in err:
            first_at = time.monotonic()
    out = p.stdout.read()
    assert p.wait(timeout=60) == 0, (out, err)
    ended = time.monotonic()
    assert out == b"%s\n" % name.encode(), (out, err)
    assert first_at is not None and ended - first_at > 10, (ended - (first_at or 0), err)
    text = err.decode()
    assert "==> booting the build VM (" in text and "==> step 1/1: run: echo first-line" in text, text
    assert text.index("first-line") < text.index("to-stderr") < text.index("last-line"), text
    assert "\033" not in text and "\r" not in text, text  # not a terminal: plain lines


# ---- without VMs -------------------------------------------------------------------------

def test_failed_build_log_and_errors(api_spaced):
    sp = api_spaced
    r = sp.request("POST", "/v1/templates", {"name": unique("nolog"), "from": "fake"})
    assert r.status == 202, r
    op_id = r.json["operation"]["id"]
    op = sp.wait_op(op_id)  # fails: the fake guest cannot boot
    assert op["state"] == "failed", op
    st = logs(sp, op_id)
    got = list(st.events())
    st.close()
    assert got and got[-1][1] == "end", got
    assert got[-1][2]["state"] == "failed" and got[-1][2]["error"]["code"] == op["error"]["code"], got
    last = got[-1][0]
    # Resuming beyond the newest id, or with a malformed id, is the client's error.
    for headers, query in (({"Last-Event-ID": str(last + 5)}, ""), ({}, "?last_event_id=x1")):
        st = logs(sp, op_id, last_id=headers.get("Last-Event-ID"), query=query)
        assert st.status == 400, st.status
        assert json.loads(st.resp.read())["error"]["code"] == "invalid_request"
        st.close()
    # Another tenant's build is not found; nor is an operation that is not a build.
    other = tenant_key(sp, unique("logs-b"))
    st = logs(sp, op_id, key=other)
    assert st.status == 404, st.status
    st.close()
    out = sp.create({"template": "fake"})
    sp.wait_op(out["operation"]["id"])
    st = logs(sp, out["operation"]["id"])
    assert st.status == 404 and b"no build output" in st.resp.read(), st.status
    st.close()
