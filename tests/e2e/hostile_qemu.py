#!/usr/bin/env python3
"""A QEMU stand-in that turns a VM's agent hostile on request (test_hostile_agent.py).

spaced starts it as its QEMU binary (`--qemu`, through a launcher the test writes). It
runs the real QEMU as its child with the same arguments and descriptors, except the
agent's listening socket (fd 4, `-chardev socket,id=agent,fd=4,server=on`): QEMU gets a
listener of ours instead, and every connection spaced makes to the sandbox's agent.sock
is relayed to the real guest agent through it. Until a trigger file appears the relay is
transparent (the VM boots, restores, snapshots and serves as usual). Once
`<trigger dir>/<vm id>` exists, this process speaks the agent's frame protocol to spaced
on that same socket as a hostile guest would, per the file's content:

  ping    PING frames as fast as the socket takes them, never reading spaced's PONGs
  stall   waits for spaced to open a request (a file upload), grants it the largest
          input window the protocol allows (64 MiB), then never reads again

The child QEMU dies with this process (PR_SET_PDEATHSIG), and this process exits with
the child's status, so spaced's supervision (pidfd, kill, QMP quit) sees one VM.
Invocations without `-name` (version probes) exec the real QEMU directly.

Usage (as the launcher runs it): hostile_qemu.py TRIGGER_DIR REAL_QEMU -- QEMU ARGS..."""
import ctypes
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

AGENT_FD = 4
HDR = struct.Struct("<IIBBH")  # payload_len, channel, type, stream, reserved (frame.h)
PING, OPEN, CREDIT = 2, 4, 7
STREAM_IN = 1


def pdeathsig():
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class Framer:
    """Cuts one direction's byte stream into whole frames (frame.h), so the relay only
    ever forwards whole frames and the hostile frames start on a frame boundary; on the
    host -> agent side it remembers the newest channel spaced opened (OPEN)."""

    def __init__(self):
        self.buf = b""
        self.newest = None

    def feed(self, data):
        """Returns the whole frames completed by data, as bytes to forward."""
        self.buf += data
        out = b""
        while len(self.buf) >= HDR.size:
            length, channel, ftype, _, _ = HDR.unpack_from(self.buf)
            if len(self.buf) < HDR.size + length:
                break
            if ftype == OPEN:
                self.newest = channel
            out += self.buf[:HDR.size + length]
            self.buf = self.buf[HDR.size + length:]
        return out


def hostile(down, mode, opens, child):
    """Acts on `down` per mode until spaced hangs up or QEMU exits."""
    if mode == "stall":
        # Read until spaced opens a request (a file upload), grant it the largest IN
        # window the protocol allows, then never read again.
        opens.newest = None
        while opens.newest is None and child.poll() is None:
            r, _, _ = select.select([down], [], [], 0.1)
            if r:
                data = down.recv(65536)
                if not data:
                    return
                opens.feed(data)
        if opens.newest is None:
            return
        # The window may reach 64 MiB (frame.h FRAME_MAX_CREDIT) counting the initial one.
        grant = (64 << 20) - 256 * 1024
        down.sendall(HDR.pack(4, opens.newest, CREDIT, STREAM_IN, 0) + struct.pack("<I", grant))
        while child.poll() is None:
            time.sleep(0.1)
        return
    down.setblocking(False)
    frame = HDR.pack(8, 0, PING, 0, 0) + b"hostile!"
    burst, pending = frame * 4096, b""
    while child.poll() is None:
        try:
            pending = pending or burst
            pending = pending[down.send(pending):]  # a partial send continues the frame
        except BlockingIOError:
            time.sleep(0.01)
        except OSError:
            return  # spaced cut the connection off: what the test waits for


def relay(down, up, trigger, child):
    """Relays one spaced connection until either side closes; turns hostile on trigger."""
    to_agent, to_host = Framer(), Framer()
    while child.poll() is None:
        if os.path.exists(trigger):
            with open(trigger) as f:
                mode = f.read().strip()
            return hostile(down, mode, to_agent, child)
        r, _, _ = select.select([down, up], [], [], 0.05)
        for s in r:
            data = s.recv(65536)
            if not data:
                return
            if s is down:
                up.sendall(to_agent.feed(data))
            else:
                down.sendall(to_host.feed(data))


def main():
    trigger_dir, real = sys.argv[1], sys.argv[2]
    qargs = sys.argv[sys.argv.index("--") + 1:]
    if "-name" not in qargs:
        os.execv(real, [real] + qargs)
    vm_id = qargs[qargs.index("-name") + 1].split(",")[0]
    spaced_listener = socket.socket(fileno=os.dup(AGENT_FD))
    path = os.path.join(tempfile.mkdtemp(prefix="hq-"), "agent.sock")
    ours = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    ours.bind(path)
    ours.listen(1)
    os.dup2(ours.fileno(), AGENT_FD)
    ours.close()
    fds = [fd for fd in (3, 4, 5, 6) if os.path.exists("/proc/self/fd/%d" % fd)]
    child = subprocess.Popen([real] + qargs, pass_fds=fds, preexec_fn=pdeathsig)
    os.close(AGENT_FD)
    trigger = os.path.join(trigger_dir, vm_id)
    while child.poll() is None:
        r, _, _ = select.select([spaced_listener], [], [], 0.2)
        if not r:
            continue
        down, _ = spaced_listener.accept()
        up = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            up.connect(path)
            relay(down, up, trigger, child)
        except OSError:
            pass
        finally:
            down.close()
            up.close()
    sys.exit(child.returncode if child.returncode >= 0 else 128 - child.returncode)


if __name__ == "__main__":
    main()
