"""End-to-end fixtures (helpers: spacedlib.py).

Fixtures:
  spaced        module-scoped daemon using the real guest dir (VM tests; use `need_vm`)
  api_spaced    module-scoped daemon on a fake guest dir with one template "fake" whose
                VMs cannot boot: every API path (auth, validation, tenancy, ops,
                idempotency, illegal transitions) runs without VMs or guest artifacts
  fresh_spaced  function-scoped factory for tests that kill and restart spaced
  need_vm       skips, saying what is missing, unless real VMs can run here

At the end of the session, any process of this test run still alive (spacedlib.RUN_DIR
on its command line: QEMU, space-gateway, spaced) fails the run and is killed.
"""
import shutil

import pytest

from spacedlib import GUEST, Spaced, check_leftovers, make_fake_guest, stop_all, vm_missing


def pytest_sessionfinish(session, exitstatus):
    check_leftovers(session)


@pytest.fixture
def need_vm():
    why = vm_missing()
    if why:
        pytest.skip(why)


@pytest.fixture(scope="module")
def api_spaced():
    guest = make_fake_guest()
    s = Spaced(guest).start()
    yield s
    s.stop()
    shutil.rmtree(guest, ignore_errors=True)


@pytest.fixture(scope="module")
def spaced():
    why = vm_missing()
    if why:
        pytest.skip(why)
    s = Spaced(GUEST).start()
    yield s
    s.stop()


@pytest.fixture
def fresh_spaced():
    """Factory: fresh_spaced(guest_dir=None, data_dir=None, env=None) -> started Spaced
    (env: Spaced.start's); all stopped at teardown."""
    made = []

    def make(guest_dir=None, data_dir=None, env=None):
        s = Spaced(guest_dir or GUEST, data_dir)
        made.append(s)
        return s.start(env=env)

    yield make
    stop_all(made)

