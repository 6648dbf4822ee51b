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
  @e2b/code-interpreter 2.8.0  runCode and contexts against the code-interpreter-v1
                     template (its server on port 49999, reached through getHost routing)
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
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location(
    "e2e_spacedlib", os.path.join(HERE, "..", "e2e", "spacedlib.py"))
fx = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fx)

CURRENT, OLDER, OLDEST = "e2b", "e2b-v2-7", "e2b-v2-5"
INTERPRETER = "@e2b/code-interpreter"
SCRIPT_TIMEOUT_S = 1800  # TCG VMs are slow; this bounds a hung script, not a slow one


def node_missing():
    if not shutil.which("node"):
        return "node is not installed (apt-get install nodejs)"
    for m in (CURRENT, OLDER, OLDEST, INTERPRETER):
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


@pytest.fixture(scope="module")
def lab_spaced():
    """A VM spaced whose gateway runs in the network lab of tests/netsec (a fake internet
    in namespaces this test creates; egress reaches nothing else)."""
    why = node_missing() or fx.vm_missing()
    if why:
        pytest.skip(why)
    sys.path.insert(0, os.path.join(HERE, "..", "netsec"))
    import netlab
    import vmlab
    why = netlab.can_run()
    if why:
        pytest.skip("network lab unavailable: " + why)
    lab = netlab.Lab()
    try:
        lab.start(gateway=False)
        d = fx.Spaced(fx.GUEST)
        try:
            vmlab.start_spaced(lab, d)
            yield d
        finally:
            d.stop()
    finally:
        lab.stop()


def run_script(spaced, script, sdk, via_control=False, env_extra=None):
    """Runs tests/e2b/<script> with that SDK against spaced (env_extra: more variables);
    asserts every step passed and returns its stdout."""
    env = dict(os.environ, SPACE_TEST_VIA_CONTROL="1" if via_control else "",
               E2B_API_URL=spaced.url, E2B_SANDBOX_URL=spaced.url,
               E2B_API_KEY=spaced.admin_key, E2B_DOMAIN="localhost",
               E2B_VOLUME_API_URL=spaced.url,
               SPACE_TEST_PORT_LISTEN=getattr(spaced, "port_listen", ""), **(env_extra or {}))
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
    return p.stdout


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
@pytest.mark.parametrize("script", ["sdk_envd.py", "sdk_control.py"])
def test_python_sdk(vm_spaced, script, version):
    """The E2B Python SDK (sync API) on the JS scripts' surface: envd (commands, files and
    envd's finer points) and the control plane (pause/connect, auto-resume, fork,
    snapshots, network options, getHost)."""
    why = py_sdk_missing(version)
    if why:
        pytest.skip(why)
    run_py_script(vm_spaced, script, version)


@pytest.mark.parametrize("sdk", [CURRENT, OLDER, OLDEST])
def test_api_errors(api_spaced, sdk):
    run_script(api_spaced, "api_errors.mjs", sdk)


def test_volumes(api_spaced):
    """E2B's Volume API (SDK 2.51; older SDKs have none) over native volumes: no VM."""
    run_script(api_spaced, "volumes.mjs", CURRENT)


def test_volume_mounts(vm_spaced):
    """Sandbox.create({volumeMounts}) mounts E2B volumes (native mounts underneath)."""
    run_script(vm_spaced, "volume_mounts.mjs", CURRENT)


@pytest.mark.parametrize("sdk", [CURRENT, OLDER])
@pytest.mark.parametrize("script", ["lifecycle.mjs", "commands.mjs", "files.mjs", "bad_input.mjs"])
def test_sdk(vm_spaced, script, sdk):
    run_script(vm_spaced, script, sdk)


def test_autoresume(vm_spaced):
    """lifecycle.autoResume: a paused sandbox's command and file calls wake it."""
    run_script(vm_spaced, "autoresume.mjs", CURRENT)


def test_network_options(lab_spaced):
    """create({network: {allowOut, denyOut}}): the gateway's decisions seen from inside."""
    run_script(lab_spaced, "network.mjs", CURRENT)


def test_fork_and_snapshots(vm_spaced):
    """Sandbox.fork and the snapshot calls arrived in the current SDK only."""
    run_script(vm_spaced, "fork.mjs", CURRENT)


def test_legacy_control_plane(vm_spaced):
    run_script(vm_spaced, "legacy_control.mjs", OLDEST)


def test_template_builder(vm_spaced):
    """E2B's template builder (Template().fromTemplate(...).runCmd(...), Template.build
    with onBuildLogs, copy() through signed upload links, unpacked in the build VM)
    builds a space template a sandbox then starts from; Docker images, registries and
    glob copies are refused naming why."""
    run_script(vm_spaced, "template.mjs", CURRENT)


def test_ports(vm_spaced):
    """getHost: keep-alive, streamed bodies both ways, WebSocket (python template)."""
    if not os.path.exists(os.path.join(fx.GUEST, "templates", "python", "rootfs.ext4")):
        pytest.skip("the python template is not built (make templates builds it)")
    run_script(vm_spaced, "ports.mjs", CURRENT)


def test_code_interpreter(vm_spaced):
    """runCode, results, contexts, bash, env vars, timeouts (code-interpreter-v1 template)."""
    if not os.path.exists(os.path.join(fx.GUEST, "templates", "code-interpreter-v1", "rootfs.ext4")):
        pytest.skip("the code-interpreter-v1 template is not built (guest/build-template.sh "
                    "build/guest code-interpreter-v1, or make run RUN_TEMPLATES=\"base python "
                    "code-interpreter-v1\"; docs/templates.md)")
    run_script(vm_spaced, "code_interpreter.mjs", INTERPRETER)
