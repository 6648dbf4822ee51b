"""E2B suite session check: the e2e harness (tests/e2e/spacedlib.py, loaded by path
because tests/e2e is not a package) fails the run and kills what is left if any
process of this test run (QEMU, space-gateway, spaced) outlived its fixture."""
import importlib.util
import os

_spec = importlib.util.spec_from_file_location(
    "e2e_spacedlib_check", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e", "spacedlib.py"))
_lib = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_lib)


def pytest_sessionfinish(session, exitstatus):
    _lib.check_leftovers(session)
