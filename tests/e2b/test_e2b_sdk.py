"""E2B compatibility: the unmodified `e2b` npm package against a real spaced.

Each tests/e2b/*.mjs script drives one area of the SDK and asserts results; this
driver starts spaced (the tests/e2e fixtures), points the SDK at it with the two
environment variables users set (E2B_API_URL, E2B_SANDBOX_URL) plus a key spaced
issued, runs the script with each SDK generation and checks that every step passed.

The E2B Python SDK (2.34.0 and 2.7.0, venvs made by tests/e2b/install.sh from a
wheelhouse: PyPI is not reachable here) runs tests/e2b/py/*.py the same way.

SDK versions (tests/e2b/package.json, installed by tests/e2b/install.sh):
  e2b        2.51.0  current: POST /v2/sandboxes, /v2/sandboxes/{id}/connect
  e2b-v2-7   2.7.0   older generation: POST /sandboxes, /sandboxes/{id}/connect
  e2b-v2-5   2.5.0   oldest with E2B_API_URL: connect via /timeout + /resume; no
                     E2B_SANDBOX_URL, so only control-plane scripts run with it
Skips (with the reason) when node, the installed SDKs, or VM artifacts are missing.

The VM spaced also runs the sandbox-port listener (SPACE_E2B_PORT_LISTEN on a free
port, told to the scripts as SPACE_TEST_PORT_LISTEN): ports.mjs drives getHost through
it (WebSocket) and through spaced's own port.
"""
import importlib.util
import os
import re
import shutil
import subprocess

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location(
    "e2e_spacedlib", os.path.join(HERE, "..", "e2e", "spacedlib.py"))
fx = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fx)

CURRENT, OLDER, OLDEST = "e2b", "e2b-v2-7", "e2b-v2-5"
SCRIPT_TIMEOUT_S = 1800  # TCG VMs are slow; this bounds a hung script, not a slow one


def node_missing():
    if not shutil.which("node"):
        return "node is not installed (apt-get install nodejs)"
    for m in (CURRENT, OLDER, OLDEST):
        if not os.path.exists(os.path.join(HERE, "node_modules", m, "package.json")):
            return "SDK %s not installed: run tests/e2b/install.sh" % m
    return None


@pytest.fixture(scope="module")
def api_spaced():
    why = node_missing()
    if why:
        pytest.skip(why)
    guest = fx.make_fake_guest()
    d = fx.Spaced(guest).start()
    yield d
    d.stop()
    shutil.rmtree(guest, ignore_errors=True)


@pytest.fixture(scope="module")
def vm_spaced():
    why = node_missing() or fx.vm_missing()
    if why:
        pytest.skip(why)
    listen = "127.0.0.1:%d" % fx.free_port()
    fx.SPACED_ENV["SPACE_E2B_PORT_LISTEN"] = listen
    try:
        d = fx.Spaced(fx.GUEST).start()
    finally:
        del fx.SPACED_ENV["SPACE_E2B_PORT_LISTEN"]
    d.port_listen = listen
    yield d
    d.stop()


def run_script(spaced, script, sdk, via_control=False):
    env = dict(os.environ, SPACE_TEST_VIA_CONTROL="1" if via_control else "",
               E2B_API_URL=spaced.url, E2B_SANDBOX_URL=spaced.url,
               E2B_API_KEY=spaced.admin_key, E2B_DOMAIN="localhost",
               SPACE_TEST_PORT_LISTEN=getattr(spaced, "port_listen", ""))
    env.pop("E2B_DEBUG", None)
    path = os.path.join(HERE, script)
    p = subprocess.run(["node", path, sdk], cwd=HERE, env=env, capture_output=True,
                       text=True, timeout=SCRIPT_TIMEOUT_S)
    out = p.stdout + p.stderr
    with open(path) as f:
        steps = len(re.findall(r"^\s*await step\(", f.read(), re.M))
    passed = len(re.findall(r"^ok ", p.stdout, re.M))
    assert p.returncode == 0 and passed == steps, (
        "%s with %s: %d/%d steps passed (exit %d)\n%s\n--- spaced log ---\n%s"
        % (script, sdk, passed, steps, p.returncode, out[-8000:], spaced.log()))


PY_SDKS = ["2.34.0", "2.7.0"]  # the Python SDK versions tests/e2b/install.sh puts in venvs


def py_sdk_missing(version):
    python = os.path.join(HERE, ".venv-" + version, "bin", "python")
    if not os.path.exists(python):
        return ("E2B Python SDK %s not installed: tests/e2b/install.sh puts it in a venv from "
                "the wheelhouse (../shared/e2b-py or $SPACE_E2B_PY_WHEELS)" % version)
    return None


def run_py_script(spaced, script, version):
    """The Python counterpart of run_script: tests/e2b/py/<script> with that SDK's venv."""
    python = os.path.join(HERE, ".venv-" + version, "bin", "python")
    key = spaced.admin_key
    env = dict(os.environ, E2B_API_URL=spaced.url, E2B_SANDBOX_URL=spaced.url,
               E2B_API_KEY="e2b_" + key[len("space_"):], E2B_DOMAIN="localhost",
               PYTHONPATH=os.path.join(HERE, "py"))
    env.pop("E2B_DEBUG", None)
    path = os.path.join(HERE, "py", script)
    p = subprocess.run([python, path], cwd=HERE, env=env, capture_output=True, text=True,
                       timeout=SCRIPT_TIMEOUT_S)
    with open(path) as f:
        steps = len(re.findall(r"^\s*@step\(", f.read(), re.M))
    passed = len(re.findall(r"^ok ", p.stdout, re.M))
    assert p.returncode == 0 and passed == steps, (
        "%s with Python e2b %s: %d/%d steps passed (exit %d)\n%s\n--- spaced log ---\n%s"
        % (script, version, passed, steps, p.returncode, (p.stdout + p.stderr)[-8000:], spaced.log()))


@pytest.mark.parametrize("version", PY_SDKS)
def test_python_sdk(vm_spaced, version):
    """The E2B Python SDK (sync API) on the JS scripts' surface plus envd's finer points."""
    why = py_sdk_missing(version)
    if why:
        pytest.skip(why)
    run_py_script(vm_spaced, "sdk_envd.py", version)


@pytest.mark.parametrize("sdk", [CURRENT, OLDER, OLDEST])
def test_api_errors(api_spaced, sdk):
    run_script(api_spaced, "api_errors.mjs", sdk)


@pytest.mark.parametrize("sdk", [CURRENT, OLDER])
@pytest.mark.parametrize("script", ["lifecycle.mjs", "commands.mjs", "files.mjs", "bad_input.mjs"])
def test_sdk(vm_spaced, script, sdk):
    run_script(vm_spaced, script, sdk)


def test_fork_and_snapshots(vm_spaced):
    """Sandbox.fork and the snapshot calls arrived in the current SDK only."""
    run_script(vm_spaced, "fork.mjs", CURRENT)


def test_legacy_control_plane(vm_spaced):
    run_script(vm_spaced, "legacy_control.mjs", OLDEST)


def test_ports(vm_spaced):
    """getHost: keep-alive, streamed bodies both ways, WebSocket (python template)."""
    if not os.path.exists(os.path.join(fx.GUEST, "templates", "python", "rootfs.ext4")):
        pytest.skip("the python template is not built (make templates builds it)")
    run_script(vm_spaced, "ports.mjs", CURRENT)
