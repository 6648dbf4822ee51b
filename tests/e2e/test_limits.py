"""spaced's own resource limits: every sandbox holds a few descriptors in spaced (QMP,
agent and console sockets, pidfd), so a soft RLIMIT_NOFILE of 1024 (a common default)
would stop it near 250 sandboxes; spaced raises its soft limit to the hard one."""
import resource

from spacedlib import Spaced, GUEST


def open_files_limits(pid):
    with open("/proc/%d/limits" % pid) as f:
        for line in f:
            if line.startswith("Max open files"):
                soft, hard = line.split()[3:5]
                return int(soft), int(hard)
    raise AssertionError("no 'Max open files' in /proc/%d/limits" % pid)


def test_soft_nofile_raised_to_hard():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert hard == resource.RLIM_INFINITY or hard > 1024, "the hard limit here is %d" % hard
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))
    try:
        s = Spaced(GUEST).start()  # inherits the low soft limit
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    try:
        got = open_files_limits(s.proc.pid)
        assert got[0] == got[1], "spaced kept a soft limit of %d (hard %d)" % got
    finally:
        s.stop()
