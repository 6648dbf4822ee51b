"""Commands whose program, PATH directory or cwd is on a FUSE volume mount.

The kernel's exec (and chdir) of such a path sends FUSE requests that only the agent's
loop relays. The agent spawns with clone(CLONE_VM | CLONE_VFORK), which suspends the
spawning thread until the child has exec'd: spawned from the loop thread itself, the
exec waited for the loop and the loop for the exec, and the agent and the sandbox hung.
Each command here must end with its own exit code within a bounded time, and the agent
must answer the next one. Needs a guest whose initramfs has fuse.ko; skips (saying why)
when guest artifacts are missing."""
from test_volume_mount import create_mounting, delete, output_within, vfiles

SCRIPT = b"#!/bin/sh\necho ran-$(basename $0)\nexit 7\n"
NOSHEBANG = b"echo no-shebang\nexit 9\n"  # ENOEXEC: the spawner runs it with /bin/sh


def test_exec_from_volume(spaced):
    s = spaced
    assert s.request("POST", "/v1/volumes", {"name": "execvol"}).status == 201
    for path, data in (("/bin/code7", SCRIPT), ("/bin/plain9", NOSHEBANG)):
        r = s.request("PUT", vfiles("execvol", path), raw=data,
                      headers={"Content-Type": "application/octet-stream"})
        assert r.status == 200, r
    sid = create_mounting(s, [{"name": "execvol", "path": "/mnt/v"}])
    # chmod and cp run from the root filesystem: the loop is free to relay their FUSE
    out, code = output_within(s, sid, "chmod +x /mnt/v/bin/code7 /mnt/v/bin/plain9 && "
                                      "cp -L /bin/true /mnt/v/bin/true && echo ok", 120)
    assert (out, code) == (b"ok\n", 0), (out, code)
    path = "/mnt/v/bin:/usr/local/bin:/usr/bin:/bin"
    cases = [
        ({"argv": ["/mnt/v/bin/code7"]}, b"ran-code7\n", 7),           # by absolute path
        ({"argv": ["code7"], "env": {"PATH": path}}, b"ran-code7\n", 7),  # by PATH
        ({"argv": ["/mnt/v/bin/plain9"]}, b"no-shebang\n", 9),         # ENOEXEC -> /bin/sh
        ({"argv": ["/mnt/v/bin/true"]}, b"", 0),                      # a binary
        ({"argv": ["true"], "env": {"PATH": path}}, b"", 0),
        ({"argv": ["/bin/pwd"], "cwd": "/mnt/v/bin"}, b"/mnt/v/bin\n", 0),  # cwd on the mount
        ({"argv": ["./code7"], "cwd": "/mnt/v/bin"}, b"ran-code7\n", 7),
        ({"argv": ["/mnt/v/bin/missing"]}, b"", None),  # fails at exec: an error event
    ]
    for body, want_out, want_code in cases:
        out, code = output_within(s, sid, body, 90)
        assert (out, code) == (want_out, want_code), (body, out, code, s.log())
    assert output_within(s, sid, "echo still-answering", 60) == (b"still-answering\n", 0)
    delete(s, sid)
    assert s.request("DELETE", "/v1/volumes/execvol").status == 204
