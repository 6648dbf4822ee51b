"""GET /v1/events (docs/api.md "Events"): the tenant's live stream of sandbox and
operation changes, on a fake-guest daemon (no VM: the fake template's create fails at
once, which is a state change like any other).

Covers: 401 without a key; a create and a delete of tenant A's sandbox arrive on A's
stream in order (the create op pending/running/ended, the sandbox failed, the delete op,
the sandbox deleted); tenant B's stream, open all along, gets nothing of A's and then
B's own change; the events hold only kind, ids, states and names; more than the cap of
streams per tenant is a 429, another tenant's are not counted, and closed streams
are given back."""
import http.client
import json
import queue
import shutil
import socket
import threading

import pytest

from spacedlib import Spaced, make_fake_guest, poll, sse_events

STREAMS_MAX = 8  # EVENTS_STREAMS_MAX in src/daemon/api/routes_events.c


@pytest.fixture(scope="module")
def two():
    guest = make_fake_guest()
    s = Spaced(guest).start()
    keys = {}
    for t in ("ev-a", "ev-b"):
        r = s.request("POST", "/v1/keys", {"tenant": t})
        assert r.status == 201, r
        keys[t] = r.json["secret"]
    yield s, keys["ev-a"], keys["ev-b"]
    s.stop()
    shutil.rmtree(guest, ignore_errors=True)


def full_log(s):
    with open(s.log_path, errors="replace") as f:
        return f.read()


class Stream:
    """An open /v1/events stream read by a thread into a queue of (event, data)."""

    def __init__(self, sp, key):
        self.conn = http.client.HTTPConnection("127.0.0.1", sp.port, timeout=120)
        self.conn.request("GET", "/v1/events", headers={"Authorization": "Bearer " + key})
        self.resp = self.conn.getresponse()
        self.q = queue.Queue()
        if self.resp.status == 200:
            threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        try:
            for _, name, data in sse_events(self.resp):
                self.q.put((name, data))
        except (OSError, ValueError, AttributeError):  # AttributeError: closed under it
            pass
        self.q.put(None)

    def until(self, pred, what, timeout=120):
        """Events up to and including the first for which pred is true."""
        seen = []
        while True:
            try:
                ev = self.q.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError("no %s within %d s; saw %r" % (what, timeout, seen))
            assert ev is not None, "the stream ended before %s; saw %r" % (what, seen)
            seen.append(ev)
            if pred(*ev):
                return seen

    def drained(self):
        out = []
        while not self.q.empty():
            out.append(self.q.get())
        return out

    def close(self):
        # Shut the socket down first: the reader thread's blocked read returns at once
        # (closing alone would wait for the lock that read holds, up to a keepalive).
        if self.conn.sock:
            try:
                self.conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.conn.close()


def test_needs_a_key(two):
    s, _, _ = two
    r = s.request("GET", "/v1/events", key=None)
    assert r.status == 401, r
    assert r.error_code() == "unauthorized"


def test_create_and_delete_arrive_in_order_and_stay_in_the_tenant(two):
    s, a, b = two
    sa, sb = Stream(s, a), Stream(s, b)
    try:
        assert sa.resp.status == 200 and sb.resp.status == 200
        assert sa.resp.getheader("Content-Type").startswith("text/event-stream")
        r = s.request("POST", "/v1/sandboxes", {"template": "fake"}, key=a)
        assert r.status == 202, r
        sid, op = r.json["sandbox"]["id"], r.json["operation"]["id"]
        created = sa.until(lambda n, d: n == "operation" and d["id"] == op and
                           d["state"] in ("succeeded", "failed"), "the create's end")
        mine = [(n, d["id"], d["state"]) for n, d in created if d["id"] in (sid, op)]
        # pending first (the enqueue), then running, then the sandbox fails, then the op ends
        assert mine[0] == ("operation", op, "pending"), mine
        assert ("operation", op, "running") in mine, mine
        assert ("sandbox", sid, "failed") in mine, mine
        assert mine.index(("operation", op, "running")) < mine.index(("sandbox", sid, "failed")), mine
        for n, d in created:
            assert set(d) == ({"kind", "id", "state"} if n == "sandbox" else
                              {"kind", "id", "op", "state", "target"}), d
            assert d["kind"] == n
        opd = [d for n, d in created if n == "operation" and d["id"] == op][0]
        assert opd["op"] == "create" and opd["target"] == sid

        r = s.request("DELETE", "/v1/sandboxes/" + sid, key=a)
        assert r.status == 202, r
        dop = r.json["operation"]["id"]
        deleted = sa.until(lambda n, d: n == "operation" and d["id"] == dop and
                           d["state"] == "succeeded", "the delete's end")
        mine = [(n, d["id"], d["state"]) for n, d in deleted if d["id"] in (sid, dop)]
        assert mine[0] == ("operation", dop, "pending"), mine
        assert ("sandbox", sid, "deleted") in mine, mine
        assert mine.index(("sandbox", sid, "deleted")) < len(mine) - 1, mine

        # B saw none of it; B's own create arrives on B's stream, and not on A's.
        r = s.request("POST", "/v1/sandboxes", {"template": "fake"}, key=b)
        assert r.status == 202, r
        bop = r.json["operation"]["id"]
        got = sb.until(lambda n, d: d["id"] == bop, "B's own operation")
        assert all(d["id"] in (bop, r.json["sandbox"]["id"]) for _, d in got), got
        s.wait_op(bop, key=b)
        leaked = [e for e in sa.drained() if e and e[1]["id"] in (bop, r.json["sandbox"]["id"])]
        assert leaked == []
    finally:
        sa.close()
        sb.close()


def test_streams_per_tenant_are_capped(two):
    s, _, b = two
    r = s.request("POST", "/v1/keys", {"tenant": "ev-c"})  # no stream of the tests above
    assert r.status == 201, r
    a = r.json["secret"]
    streams = []
    try:
        for _ in range(STREAMS_MAX):
            streams.append(Stream(s, a))
            assert streams[-1].resp.status == 200
        over = Stream(s, a)
        streams.append(over)
        assert over.resp.status == 429
        assert json.loads(over.resp.read())["error"]["code"] == "too_many_requests"
        # another tenant is not affected
        other = Stream(s, b)
        streams.append(other)
        assert other.resp.status == 200
    finally:
        for st in streams:
            st.close()
    # Closed streams are given back (at the latest when the next keepalive fails).
    def reopen():
        st = Stream(s, a)
        st.close()
        return st.resp.status == 200
    poll(reopen, timeout=40, every=1)


def test_a_client_that_does_not_read_is_cut_off(two):
    """A stream whose client stops reading does not hold spaced's memory without bound:
    once more than EVENTS_QUEUE_MAX (64 KiB) of events wait in spaced for it, it gets the
    `too_slow` error event and the stream ends; spaced and the tenant's other streams go
    on. The client's receive buffer is made small and nothing is read while its tenant's
    creates (each fails at once on the fake guest: four events) fill the queue."""
    s, _, _ = two
    r = s.request("POST", "/v1/keys", {"tenant": "ev-slow"})
    assert r.status == 201, r
    key = r.json["secret"]
    slow = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)  # before connect: a small window
    slow.connect(("127.0.0.1", s.port))
    slow.sendall(b"GET /v1/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + key.encode() + b"\r\n\r\n")
    fine = Stream(s, key)
    try:
        assert fine.resp.status == 200
        sids = []
        cut = False
        for i in range(1500):
            r = s.request("POST", "/v1/sandboxes", {"template": "fake"}, key=key)
            assert r.status == 202, r
            sids.append(r.json["sandbox"]["id"])
            if i % 25 == 24 and "event=events.slow" in full_log(s):
                cut = True
                break
        assert cut, "1500 creates (about 6000 events) never cut the stream that is not read"
        # Now read the slow stream: what was sent before the cut, then the error event, then the end.
        slow.settimeout(60)
        data = b""
        while True:
            chunk = slow.recv(65536)
            if not chunk:
                break
            data += chunk
        tail = data[-400:].decode(errors="replace")
        assert "event: error" in tail and '"code":"too_slow"' in tail, tail
        # The stream that is read saw every create, and spaced still answers.
        fine.until(lambda n, d: n == "sandbox" and d["id"] == sids[-1] and d["state"] == "failed",
                   "the last create's failure")
        assert s.request("GET", "/v1/sandboxes", key=key).status == 200
    finally:
        slow.close()
        fine.close()
