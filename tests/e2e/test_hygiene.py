"""Nothing outlives its owner: a template VM left by a spaced killed mid-build is ended by
the next spaced on that data dir (found by its command line, so also when its pid file
was never written or was overwritten), and the harness's own cleanup finds every process
of a data dir by command line."""
import os
import time

import pytest

from spacedlib import procs_naming, vm_missing


def template_vms(data_dir):
    return [pid for pid, argv in procs_naming(data_dir)
            if "-name" in argv and argv[argv.index("-name") + 1].startswith("t-")]


def wait_for(cond, what, timeout=120):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out waiting for " + what
        time.sleep(0.05)


def test_template_vm_of_killed_spaced_is_ended_at_restart(fresh_spaced):
    why = vm_missing()
    if why:
        pytest.skip(why)
    s = fresh_spaced()
    made = s.create({"template": "base", "timeout": 0})  # the first create starts the snapshot build
    wait_for(lambda: template_vms(s.data_dir), "the template VM to start")
    s.kill9()
    stale = template_vms(s.data_dir)
    if not stale:
        pytest.skip("the template VM finished before spaced could be killed (fast machine)")
    # As if spaced had died before writing it: the restart must not need the pid file.
    for d in os.listdir(os.path.join(s.data_dir, "run")):
        if d.startswith("t-"):
            try:
                os.unlink(os.path.join(s.data_dir, "run", d, "qemu.pid"))
            except FileNotFoundError:
                pass
    s.start()
    wait_for(lambda: not any(p in stale for p in template_vms(s.data_dir)),
             "the stale template VM to be killed", timeout=30)
    assert "template.stale" in open(s.log_path).read(), s.log()
    # The create cut by the kill still completes (and spaced is not stopped mid-create).
    assert s.wait_op(made["operation"]["id"], timeout=600)["state"] == "succeeded", s.log()
