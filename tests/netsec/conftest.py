"""pytest fixtures for the gateway attack suite: one lab per session (vmlab.py): the
fake internet, a real spaced whose space-gateway runs in the lab's gateway namespace,
and two `python` sandbox VMs the attacks run in. Skips, saying why, when not root,
when namespaces cannot be created or when the VM artifacts are missing."""
import pytest

import netlab
import vmlab

ALLOW = {"mode": "allowlist", "allow": ["allowed.test", "*.allowed.test", "api.test"]}
OPEN = {"mode": "open"}
CREDS = [{"host": "api.test", "header": "Authorization", "secret": "Bearer " + netlab.TOKEN},
         {"host": "badcert.allowed.test", "header": "Authorization", "secret": "Bearer " + netlab.TOKEN}]


@pytest.fixture(scope="session")
def lab():
    why = vmlab.missing()
    if why:
        pytest.skip("netsec lab unavailable: " + why)
    lab = vmlab.VMLab()
    try:
        lab.start_vms([ALLOW, OPEN])
        lab.sandboxes[0].set_creds(CREDS)
        first_pid = lab.gateway_pid()
        yield lab
        # spaced restarts a gateway that died: a new pid means some attack crashed it.
        assert lab.gateway_pid() == first_pid, "space-gateway was restarted during the suite"
    finally:
        report = lab.stop()
    assert not report, "space-gateway sanitizer report:\n" + report


@pytest.fixture
def sb(lab):
    """VM 1: allowlist allowed.test, *.allowed.test, api.test (+ credentials)."""
    s = lab.sandboxes[0]
    if s.policy != ALLOW:
        assert s.set_policy(ALLOW)["ok"]
    return s


@pytest.fixture
def sb_open(lab):
    """VM 2: policy open."""
    return lab.sandboxes[1]


def pytest_sessionfinish(session):
    vmlab.spacedlib.check_leftovers(session)
