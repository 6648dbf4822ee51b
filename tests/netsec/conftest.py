"""pytest fixtures for the gateway attack suite: one lab per session (netlab.py).
Skips, saying why, when not root or when namespaces cannot be created."""
import pytest

import netlab

ALLOW = {"mode": "allowlist", "allow": ["allowed.test", "*.allowed.test", "api.test"]}
OPEN = {"mode": "open"}


@pytest.fixture(scope="session")
def lab():
    why = netlab.can_run()
    if why:
        pytest.skip("netsec lab unavailable: " + why)
    lab = netlab.Lab()
    try:
        lab.start([ALLOW, OPEN])
        r = lab.ctl({"op": "creds", "sandbox": "sb1", "rules": [
            {"host": "api.test", "header": "Authorization", "value": "Bearer " + netlab.TOKEN},
            {"host": "badcert.allowed.test", "header": "Authorization", "value": "Bearer " + netlab.TOKEN},
        ]})
        assert r["ok"], r
        yield lab
    finally:
        report = lab.stop()
    assert not report, "space-gateway sanitizer report:\n" + report


@pytest.fixture
def sb(lab):
    """Sandbox 1: allowlist allowed.test, *.allowed.test, api.test (+ credentials)."""
    s = lab.sandboxes[0]
    if s.policy != ALLOW:
        s.set_policy(ALLOW)
    return s


@pytest.fixture
def sb_open(lab):
    """Sandbox 2: policy open."""
    return lab.sandboxes[1]
