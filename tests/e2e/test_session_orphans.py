"""A session whose start spaced never recorded leaves no process behind in the guest.

spaced records a session's pid when the agent's "started" arrives; a session whose
"started" is lost (the agent connection ends first, or spaced is killed first) has no pid
to re-attach by, so it ends `lost`, and its process, if the guest started it after all,
could be reached by nobody. The agent kills such a process (exec "confirm": it is the
agent's to kill until spaced confirms it has stored the pid; docs/agent-protocol.md exec).

The window is made wide and certain, not hit by luck: the command's default cwd is root's
home, a volume mount, and that mount's space-volfs is stopped, so the spawn waits in the
guest (off the agent's loop) for a FUSE reply; spaced is killed while it waits. The
agent's connection ends, the mount is detached, the spawn goes on from "/", and the
process starts with nobody to report it to. Before, it ran on (sleep 1000, unseen,
unkillable through the API) and the restarted spaced even had the session as `created`,
ready to run the command a second time on the next attach."""
import glob
import http.client
import os
import signal
import subprocess
import threading
import time

from spacedlib import procs_naming, session_output
from test_volume_mount import create_mounting

MARKER = "orphan-marker-7d1f"


def volfs_waiting(pid):
    """Whether the (stopped) space-volfs `pid` has bytes queued on a socket: the FUSE
    request of the spawn's stat of the cwd, relayed by spaced."""
    out = subprocess.run(["ss", "-xpn"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        if "pid=%d," % pid in line:
            cols = line.split()
            if len(cols) > 2 and cols[2].isdigit() and int(cols[2]) > 0:
                return True
    return False


def wait_for(fn, what, timeout=120, last=None):
    """A bound on a wait for a condition (a hang guard, not a timing assertion)."""
    deadline = time.monotonic() + timeout
    while not fn():
        assert time.monotonic() < deadline, "still waiting for %s (last: %r)" % (what, last)
        time.sleep(0.1)


def test_unrecorded_start_leaves_no_process(fresh_spaced):
    s = fresh_spaced()
    assert s.request("POST", "/v1/volumes", {"name": "roothome"}).status == 201
    vdir = glob.glob(os.path.join(s.data_dir, "volumes", "*", "roothome"))[0]
    sid = create_mounting(s, [{"name": "roothome", "path": "/root"}])
    assert session_output(s, sid, {"cmd": "ls /root", "user": "root"}) == (b"", 0)
    (volfs,) = [p for p, argv in procs_naming(vdir) if argv[0].endswith("space-volfs")]

    os.kill(volfs, signal.SIGSTOP)
    try:
        r = s.request("POST", "/v1/sandboxes/%s/sessions" % sid,
                      {"argv": ["sh", "-c", "sleep 1000; echo " + MARKER], "user": "root"})
        assert r.status == 201, r
        sess = r.json
        # the first attach sends the exec; it never gets an answer from this spaced
        threading.Thread(target=lambda: _attach_quietly(s, sess["attach_url"]), daemon=True).start()
        wait_for(lambda: volfs_waiting(volfs), "the spawn's FUSE request at space-volfs")
        s.kill9()
    finally:
        os.kill(volfs, signal.SIGCONT)
    s.start()

    def listed():
        r = s.request("GET", "/v1/sandboxes/%s/sessions/%s" % (sid, sess["id"]))
        return r.json["session"] if r.status == 200 else None

    # The process is gone once the agent is reachable again (a bound, not a timing:
    # before, it ran for 1000 s).
    count = "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done | grep -c '[o]rphan-marker'"

    last = {}

    def gone():
        try:
            last["ps"] = session_output(s, sid, {"cmd": count, "user": "root"})
        except AssertionError as e:
            last["ps"] = e  # the restarted spaced has not reached the agent yet
            return False
        return last["ps"] == (b"0\n", 1)

    wait_for(gone, "no process with the marker in the guest", timeout=60, last=last)
    got = listed()
    assert got and got["state"] == "lost", got  # never `created`: it must not run twice
    r = s.request("DELETE", "/v1/sandboxes/" + sid)
    assert s.wait_op(r.json["operation"]["id"])["state"] == "succeeded"


def _attach_quietly(s, url):
    try:
        s.request("GET", url, timeout=600)
    except (OSError, http.client.HTTPException):
        pass  # spaced was killed under it
