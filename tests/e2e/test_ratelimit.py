"""Per-client rate limiting (src/daemon/api/routes_ratelimit.c) against a real spaced
started with a tiny budget: --rate 0.01 (one token per 100 s, so nothing refills while
the test runs and no assertion depends on timing) and --burst 5.

Covers: a key over its budget gets 429 + JSON error + Retry-After while another
tenant's key is still served; a flood of bad keys from one address is limited as that
address (and the valid keys keep working); /healthz and /metrics are exempt; 429s are
counted in /metrics; behind a control daemon (the shared node secret present) the
forwarded client address is the client, and without the secret X-Forwarded-For is
ignored; bad option values are refused at start."""
import os
import shutil
import subprocess

import pytest

from spacedlib import SPACED, Spaced, make_fake_guest

BURST = 5


@pytest.fixture
def limited():
    guest = make_fake_guest()
    s = Spaced(guest).start(extra=["--rate", "0.01", "--burst", str(BURST)])
    yield s
    s.stop()
    shutil.rmtree(guest, ignore_errors=True)


def assert_limited(r):
    assert r.status == 429, r
    err = r.json["error"]
    assert err["code"] == "rate_limited" and "retry in" in err["message"], err
    after = int(r.headers["retry-after"])
    assert 1 <= after <= 101, r.headers  # one token per 100 s


def test_key_over_budget_gets_429_others_still_served(limited):
    s = limited
    r = s.request("POST", "/v1/keys", {"tenant": "rl-other"})  # admin token 1
    assert r.status == 201, r
    other = r.json["secret"]
    for i in range(BURST - 1):  # tokens 2..5
        assert s.request("GET", "/v1/sandboxes").status == 200, i
    assert_limited(s.request("GET", "/v1/sandboxes"))
    # Every route costs a token, whatever it is; the admin key stays limited.
    assert_limited(s.request("POST", "/v1/sandboxes", {"template": "fake"}))
    # Another key, from the same address, has its own bucket.
    r = s.request("GET", "/v1/sandboxes", key=other)
    assert r.status == 200, r
    # The same key sent as X-API-Key is the same client.
    r = s.request("GET", "/v1/sandboxes", key=None, headers={"X-API-Key": s.admin_key})
    assert_limited(r)
    # Probes are exempt.
    for _ in range(BURST + 2):
        assert s.request("GET", "/healthz", key=None).status == 200
    m = s.request("GET", "/metrics", key=None)
    assert m.status == 200
    assert 'space_http_errors_total{status="429"} 3' in m.body.decode(), m.body.decode()


def test_bad_key_flood_is_limited_per_address(limited):
    s = limited
    for i in range(BURST):
        bad = "space_" + ("%048x" % (0xbad0 + i))
        r = s.request("GET", "/v1/sandboxes", key=bad)
        assert r.status == 401, r
    # The address's budget is spent: new bad keys, no key and malformed keys get 429
    # before any key lookup would tell them apart.
    assert_limited(s.request("GET", "/v1/sandboxes", key="space_" + "f" * 48))
    assert_limited(s.request("GET", "/v1/sandboxes", key=None))
    assert_limited(s.request("GET", "/v1/sandboxes", key="nonsense"))
    assert_limited(s.request("GET", "/nowhere", key=None))
    # A valid key from the same address is its own client and still served.
    r = s.request("GET", "/v1/sandboxes")
    assert r.status == 200, r


NODE_TOKEN = "rl-test-node-secret-0123456789"


@pytest.fixture
def limited_node():
    guest = make_fake_guest()
    s = Spaced(guest).start(extra=["--rate", "0.01", "--burst", "2"],
                            env={"SPACE_NODE_TOKEN": NODE_TOKEN})
    yield s
    s.stop()
    shutil.rmtree(guest, ignore_errors=True)


def test_forwarded_client_address_needs_the_node_secret(limited_node):
    s = limited_node

    def keyless(fwd, secret):
        h = {"X-Forwarded-For": fwd}
        if secret:
            h["X-Space-Node-Token"] = secret
        return s.request("GET", "/v1/sandboxes", key=None, headers=h)

    # Through a "control daemon": each forwarded client has its own budget of 2.
    for _ in range(2):
        assert keyless("192.0.2.10:5000", NODE_TOKEN).status == 401
    assert_limited(keyless("192.0.2.10:5001", NODE_TOKEN))
    assert keyless("192.0.2.11:5000", NODE_TOKEN).status == 401
    # In a list only the last element (the proxy's) counts, not the client's claim before it.
    assert_limited(keyless("203.0.113.9:1, 192.0.2.10:7", NODE_TOKEN))
    # Without the secret (or with a wrong one) the header is ignored: the real address
    # (127.0.0.1) is charged, whatever it claims.
    assert keyless("198.51.100.1:1", None).status == 401
    assert keyless("198.51.100.2:1", "x" * len(NODE_TOKEN)).status == 401
    assert_limited(keyless("198.51.100.3:1", None))


@pytest.mark.parametrize("opt,value", [("--rate", "abc"), ("--rate", "-1"), ("--burst", "0"),
                                       ("--burst", "")])
def test_bad_options_refused(opt, value, tmp_path):
    if not os.access(SPACED, os.X_OK):
        pytest.fail("spaced binary %s is missing: build it with `make SAN=1 programs`" % SPACED)
    p = subprocess.run([SPACED, "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path), opt, value],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, p
    assert opt in p.stderr, p.stderr
