"""The E2B Python SDK against spaced, the control-plane surface of the JS scripts
lifecycle.mjs, fork.mjs, autoresume.mjs, network.mjs and ports.mjs: pause and connect,
auto-resume, fork, snapshots, network options and getHost traffic. Calls an SDK version
does not have (2.7.0 has no fork, snapshots, lifecycle or update_network) are reported
as skipped in the step's line, naming the version."""
import os
import urllib.request

from lib import VERSION, Sandbox, eventually, kill_later, main, step

PROC_SLEEP = 'grep -l "^sleep$" /proc/[0-9]*/comm >/dev/null 2>&1 && echo yes'


def has(name):
    return hasattr(Sandbox, name)


def skipped(what):
    print("   skipped: e2b %s has no %s" % (VERSION, what), flush=True)


def body():
    a = None

    @step("pause keeps memory and processes; connect resumes")
    def _():
        nonlocal a
        a = kill_later(Sandbox.create("base", timeout=300))
        a.commands.run("echo from-parent > ~/f")
        a.commands.run("sleep 1000", background=True)
        if has("pause"):
            assert a.pause() is True
        else:
            a.beta_pause()  # 2.7.0: returns nothing
        assert a.get_info().state.value == "paused", a.get_info()
        assert Sandbox.connect(a.sandbox_id).sandbox_id == a.sandbox_id
        assert a.get_info().state.value == "running"
        assert a.commands.run(PROC_SLEEP).stdout == "yes\n"
        assert a.commands.run("cat ~/f").stdout == "from-parent\n"

    @step("lifecycle auto_resume: a command wakes a paused sandbox without connect")
    def _():
        if "lifecycle" not in Sandbox.create.__code__.co_varnames:
            return skipped("lifecycle")
        b = kill_later(Sandbox.create("base", timeout=300,
                                      lifecycle={"on_timeout": "pause", "auto_resume": True}))
        b.commands.run("echo kept > ~/k")
        assert b.pause() is True
        assert b.commands.run("cat ~/k").stdout == "kept\n"
        assert b.get_info().state.value == "running"

    @step("fork: files and processes carried over, writes stay apart")
    def _():
        if not has("fork"):
            return skipped("Sandbox.fork")
        forks = a.fork(count=1, timeout=120)
        assert len(forks) == 1 and isinstance(forks[0], Sandbox), forks
        f = kill_later(forks[0])
        assert f.sandbox_id != a.sandbox_id
        assert f.commands.run("cat ~/f").stdout == "from-parent\n"
        assert f.commands.run(PROC_SLEEP).stdout == "yes\n"
        f.commands.run("echo changed > ~/f")
        assert a.commands.run("cat ~/f").stdout == "from-parent\n"

    @step("snapshots: create, list, create a sandbox from one, delete")
    def _():
        if not has("create_snapshot"):
            return skipped("Sandbox.create_snapshot")
        snap = a.create_snapshot(name="py-snap")
        assert snap.snapshot_id.startswith("sn") and snap.names == ["py-snap"], snap
        assert snap.snapshot_id in [s.snapshot_id for s in a.list_snapshots().next_items()]
        b = kill_later(Sandbox.create(snap.snapshot_id, timeout=300))
        assert b.commands.run("cat ~/f").stdout == "from-parent\n"
        b.kill()
        assert Sandbox.delete_snapshot(snap.snapshot_id) is True
        assert Sandbox.delete_snapshot(snap.snapshot_id) is False

    @step("network options: no internet access = no network device; update_network")
    def _():
        c = kill_later(Sandbox.create("base", timeout=300, allow_internet_access=False))
        assert c.commands.run("ls /sys/class/net").stdout.split() == ["lo"]
        assert "eth0" in a.commands.run("ls /sys/class/net").stdout.split()
        if not has("update_network"):
            return skipped("Sandbox.update_network")
        a.update_network({"deny_out": ["0.0.0.0/0"], "allow_out": ["example.com"]})
        c.kill()

    @step("getHost: an HTTP server in the sandbox answers through spaced")
    def _():
        a.commands.run("mkdir -p /tmp/www && echo served > /tmp/www/index.html")
        a.commands.run("busybox httpd -f -p 8080 -h /tmp/www", background=True)
        host = a.get_host(8080)
        req = urllib.request.Request(os.environ["E2B_API_URL"] + "/index.html", headers={"Host": host})

        def fetch():
            try:
                with urllib.request.urlopen(req, timeout=30) as r:
                    return r.read()
            except OSError:
                return None
        assert eventually(fetch, timeout=30, what="the server answering") == b"served\n"


if __name__ == "__main__":
    main(body)
