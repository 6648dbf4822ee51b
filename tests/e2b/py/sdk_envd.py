"""The E2B Python SDK against spaced: lifecycle, commands and files as the JS scripts
drive them, plus where envd's behaviour is easy to get subtly wrong (each step below
failed against spaced before it matched envd): listing order, removing a missing path,
symlinks, uploads in place, expired signed URLs, setTimeout(0), newest-first lists."""
import urllib.error
import urllib.request

from e2b import CommandExitException, FileType, PtySize, SandboxQuery
from e2b.sandbox.filesystem.filesystem import WriteEntry
from lib import RUN_ID, Sandbox, eventually, kill_later, main, raises, step


def fetch(url):
    try:
        with urllib.request.urlopen(url, timeout=60) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def body():
    a = b = None

    @step("create with template, timeout, metadata and envs; getInfo")
    def _():
        nonlocal a, b
        a = kill_later(Sandbox.create("base", timeout=300, metadata={"run": RUN_ID, "n": "1"},
                                      envs={"GREETING": "hello py"}))
        b = kill_later(Sandbox.create("base", timeout=300, metadata={"run": RUN_ID, "n": "2"}))
        info = a.get_info()
        assert info.sandbox_id == a.sandbox_id and info.template_id == "base", info
        assert info.metadata == {"run": RUN_ID, "n": "1"}, info.metadata

    @step("list is newest first")
    def _():
        got = Sandbox.list(query=SandboxQuery(metadata={"run": RUN_ID})).next_items()
        assert [s.sandbox_id for s in got] == [b.sandbox_id, a.sandbox_id], got

    @step("commands: envs, exit codes, background and kill")
    def _():
        assert a.commands.run('echo "$GREETING"').stdout == "hello py\n"
        e = raises(CommandExitException, a.commands.run, "echo out; exit 3")
        assert e.exit_code == 3 and e.stdout == "out\n", e
        h = a.commands.run("sleep 60", background=True)
        assert a.commands.kill(h.pid) is True

    @step("files: write, read, exists, getInfo, makeDir, rename, remove")
    def _():
        a.files.write("/tmp/f/t.txt", "text")
        assert a.files.read("/tmp/f/t.txt") == "text"
        a.files.write("/tmp/f/b.bin", b"\x00\xffbin")
        assert bytes(a.files.read("/tmp/f/b.bin", format="bytes")) == b"\x00\xffbin"
        assert a.files.exists("/tmp/f/t.txt") and not a.files.exists("/tmp/f/none")
        assert a.files.get_info("/tmp/f/t.txt").type == FileType.FILE
        assert a.files.make_dir("/tmp/f/d") is True and a.files.make_dir("/tmp/f/d") is False
        a.files.rename("/tmp/f/t.txt", "/tmp/f/d/t.txt")
        assert a.files.read("/tmp/f/d/t.txt") == "text"
        a.files.remove("/tmp/f/d")
        assert not a.files.exists("/tmp/f/d")

    @step("removing a path that is not there succeeds (envd: RemoveAll)")
    def _():
        a.files.remove("/tmp/f/never-was")

    @step("listings in envd's order: by name")
    def _():
        a.commands.run("mkdir -p /tmp/o && cd /tmp/o && touch c a B && mkdir z y && touch y/in")
        assert [e.name for e in a.files.list("/tmp/o")] == ["B", "a", "c", "y", "z"]
        assert [e.path for e in a.files.list("/tmp/o", depth=2)] == [
            "/tmp/o/B", "/tmp/o/a", "/tmp/o/c", "/tmp/o/y", "/tmp/o/y/in", "/tmp/o/z"]

    @step("symlinks: the target's type and absolute path; a dangling one has no type")
    def _():
        a.commands.run("cd /tmp/o && ln -s /etc/hostname lnk && ln -s y dlnk && ln -s gone broken")
        by = {e.name: e for e in a.files.list("/tmp/o")}
        assert by["lnk"].type == FileType.FILE and by["lnk"].symlink_target == "/etc/hostname", by["lnk"]
        assert by["dlnk"].type == FileType.DIR and by["dlnk"].symlink_target == "/tmp/o/y", by["dlnk"]
        assert "broken" not in by, by  # no type: the SDK leaves it out, as with envd
        assert a.files.get_info("/tmp/o/broken").type is None
        info = a.files.get_info("/tmp/o/dlnk")
        assert info.type == FileType.DIR and info.permissions == "Lrwxrwxrwx", info

    @step("an upload writes the file in place: same inode, hard links see it, a watcher sees a write")
    def _():
        a.commands.run("mkdir -p /tmp/w && echo one > /tmp/w/h && ln /tmp/w/h /tmp/w/h2")
        inode = a.commands.run("stat -c %i /tmp/w/h").stdout
        w = a.files.watch_dir("/tmp/w")
        a.files.write("/tmp/w/h", "two")
        events = eventually(lambda: w.get_new_events(), what="a watch event")
        w.stop()
        assert {e.name for e in events} == {"h"}, events  # no temporary name ever appears
        assert "write" in {e.type.value.lower() for e in events}, events
        assert a.commands.run("stat -c %i /tmp/w/h").stdout == inode
        assert a.commands.run("cat /tmp/w/h2").stdout == "two"

    @step("signed URLs: download works; an expired one is 401 with envd's message")
    def _():
        a.files.write("/tmp/s.txt", "signed")
        status, data = fetch(a.download_url("/tmp/s.txt", use_signature_expiration=120))
        assert (status, data) == (200, b"signed"), (status, data)
        old = a.download_url("/tmp/s.txt", use_signature_expiration=1)
        eventually(lambda: fetch(old)[0] != 200, timeout=10, what="the URL expiring")
        status, data = fetch(old)
        assert status == 401 and b"signature is already expired" in data, (status, data)

    @step("connect, getHost, uploadUrl, metrics, stdin, process list, PTY, writeFiles")
    def _():
        c = Sandbox.connect(a.sandbox_id)
        assert c.sandbox_id == a.sandbox_id and c.is_running()
        assert a.get_host(8080).startswith("8080-" + a.sandbox_id + "."), a.get_host(8080)
        up = a.upload_url("/tmp/up.txt")
        assert "signature=v1_" in up, up
        form = (b'--sb\r\nContent-Disposition: form-data; name="file"; filename="/tmp/up.txt"\r\n'
                b"\r\nsigned upload\r\n--sb--\r\n")
        req = urllib.request.Request(up, data=form, method="POST",
                                     headers={"Content-Type": "multipart/form-data; boundary=sb"})
        with urllib.request.urlopen(req, timeout=60) as r:
            assert r.status == 200, r.status
        assert a.files.read("/tmp/up.txt") == "signed upload"
        assert isinstance(a.get_metrics(), list)
        h = a.commands.run("cat", background=True, stdin=True)
        assert h.pid in [p.pid for p in a.commands.list()]
        a.commands.send_stdin(h.pid, "piped\n")
        if hasattr(a.commands, "close_stdin"):  # closeStdin arrived in later 2.x SDKs
            a.commands.close_stdin(h.pid)
            assert h.wait().stdout == "piped\n"
        else:
            a.commands.kill(h.pid)
        out = []
        t = a.pty.create(PtySize(rows=24, cols=80))
        a.pty.resize(t.pid, PtySize(rows=30, cols=100))
        a.pty.send_stdin(t.pid, b"stty size; exit\n")
        t.wait(on_pty=lambda data: out.append(data))
        assert b"30 100" in b"".join(out), out
        assert a.pty.kill(t.pid) is False  # already ended
        infos = a.files.write_files([WriteEntry(path="/tmp/wf/1", data="one"),
                                     WriteEntry(path="/tmp/wf/2", data="two")])
        assert sorted(i.path for i in infos) == ["/tmp/wf/1", "/tmp/wf/2"], infos
        assert a.files.read("/tmp/wf/2") == "two"

    @step("setTimeout(0) ends the sandbox now")
    def _():
        b.set_timeout(0)
        eventually(lambda: not b.is_running(), timeout=60, what="the sandbox ending")


if __name__ == "__main__":
    main(body)
