"""Shared helpers for the E2B Python SDK scripts (tests/e2b/py/*.py), the counterpart of
lib.mjs: each script is run by test_e2b_sdk.py with a venv's python (one per SDK
version), E2B_API_URL / E2B_SANDBOX_URL / E2B_API_KEY pointing at a spaced, prints one
"ok <step>" line per passed step and exits non-zero naming the failing step."""
import importlib.metadata
import os
import sys
import time
import traceback

from e2b import Sandbox

VERSION = importlib.metadata.version("e2b")
RUN_ID = "py%d%d" % (os.getpid(), int(time.time()) % 100000)
_cleanup = []
_current = ["(setup)"]


def kill_later(sbx):
    _cleanup.append(sbx)
    return sbx


def step(name):
    """Decorator: runs the function at once as a named step."""
    def run(fn):
        _current[0] = name
        t0 = time.monotonic()
        fn()
        print("ok %s (%d ms)" % (name, (time.monotonic() - t0) * 1000), flush=True)
        return fn
    return run


def eventually(check, timeout=30.0, what="condition"):
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError("%s not met within %.0f s" % (what, timeout))
        time.sleep(0.2)


def raises(exc_type, fn, *args, **kw):
    try:
        fn(*args, **kw)
    except exc_type as e:
        return e
    raise AssertionError("%s not raised" % exc_type.__name__)


def main(body):
    code = 0
    try:
        body()
    except BaseException:  # noqa: B902 (report every failure, then clean up)
        print("FAIL %s: %s" % (_current[0], traceback.format_exc()), file=sys.stderr, flush=True)
        code = 1
    for s in _cleanup:
        try:
            s.kill()
        except Exception:  # noqa: BLE001 (already gone)
            pass
    sys.exit(code)


__all__ = ["Sandbox", "VERSION", "RUN_ID", "kill_later", "step", "eventually", "raises", "main"]
