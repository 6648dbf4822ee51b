"""pytest fixtures for the gateway attack suite: one lab (vmlab.py) for all of
tests/netsec: the fake internet, a real spaced whose space-gateway runs in the lab's
gateway namespace, and two `python` sandbox VMs the attacks run in. Skips, saying why,
when not root, when namespaces cannot be created or when the VM artifacts are missing.

The lab is torn down after the last netsec test (not at the end of the whole pytest
session, which `make e2e` shares with tests/e2e and tests/e2b), and the teardown fails
if the gateway was restarted (a crash) or its log holds a sanitizer report."""
import os

import pytest

import netlab
import vmlab

ALLOW = {"mode": "allowlist", "allow": ["allowed.test", "*.allowed.test", "api.test"]}
OPEN = {"mode": "open"}
CREDS = [{"host": "api.test", "header": "Authorization", "secret": "Bearer " + netlab.TOKEN},
         {"host": "badcert.allowed.test", "header": "Authorization", "secret": "Bearer " + netlab.TOKEN},
         # An echoing upstream with a credential: what it reflects must be scrubbed.
         {"host": "reflect.allowed.test", "header": "Authorization", "secret": "Bearer " + netlab.TOKEN}]

_live = {}  # "lab" and "gateway_pid" while the lab runs


def _finish():
    """Stops the lab if it runs; raises if the gateway crashed along the way."""
    lab = _live.pop("lab", None)
    if lab is None:
        return
    restarted = lab.gateway_pid() != _live.pop("gateway_pid")
    report = lab.stop()
    assert not report, "space-gateway sanitizer report:\n" + report
    # spaced restarts a gateway that died: a new pid means some attack crashed it.
    assert not restarted, "space-gateway was restarted during the suite"


@pytest.fixture(scope="session")
def lab():
    why = vmlab.missing()
    if why:
        pytest.skip("netsec lab unavailable: " + why)
    lab = vmlab.VMLab()
    try:
        lab.start_vms([ALLOW, OPEN])
        lab.sandboxes[0].set_creds(CREDS)
    except BaseException:
        lab.stop()
        raise
    _live.update(lab=lab, gateway_pid=lab.gateway_pid())
    yield lab
    _finish()


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem):
    if _live and (nextitem is None or not str(nextitem.fspath).startswith(netlab.HERE + os.sep)):
        _finish()


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
