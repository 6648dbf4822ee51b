#!/usr/bin/env python3
"""Where a file transfer's time goes: the files API next to the pieces under it, all in
one sandbox in one run, each the median of --samples transfers of --mib MiB.

  files API, disk      PUT/GET /v1/sandboxes/{id}/files on /home/user (the guest's ext4
                       on its virtio-blk qcow2 overlay): what bench_api.py reports
  files API, tmpfs     the same on /dev/shm (guest RAM): no guest disk
  stream, stdin        a command session `cat > /dev/null` fed the bytes on its stdin:
                       spaced's HTTP, the agent channel (virtio-serial) and the agent's
                       relay, with no file code and no disk
  stream, stdout       `head -c N /dev/zero` read from its stdout: the same, other way
  guest disk only      `dd` inside the guest, no channel: write (with fsync) and read
                       (after dropping the guest's page cache)

Whichever row is close to the files API's own rate is what bounds it. Prints MiB/s per
row, labelled with the accelerator, and the ratios to the files API on disk. Not a test:
it asserts nothing beyond the bytes coming back intact.

Usage: python3 bench/bench_files.py [--mib N] [--samples K]  (as root, after `make
programs templates`)."""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from benchlib import Daemon, pct  # noqa: E402


def timed(fn):
    t0 = time.monotonic()
    fn()
    return time.monotonic() - t0


def rate(mib, secs):
    return mib / pct(secs, 50) if secs else 0.0


def must(res, what):
    if res.exit_code != 0:
        raise SystemExit("%s failed: %r" % (what, res))
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=32, help="MiB per transfer (default 32)")
    ap.add_argument("--samples", type=int, default=5, help="transfers per row (default 5)")
    a = ap.parse_args()
    blob = os.urandom(1 << 20) * a.mib
    rows = {}
    d = Daemon("bfiles")
    try:
        health = d.start(pool=0)
        acc = health.get("accel", "?")
        sbx = d.client.create(template="base", timeout=0)
        must(sbx.run("mountpoint -q /dev/shm || mount -t tmpfs tmpfs /dev/shm", user="root"),
             "/dev/shm")
        for name, path in (("disk", "/home/user/bench.bin"), ("tmpfs", "/dev/shm/bench.bin")):
            up, down = [], []
            for _ in range(a.samples):
                up.append(timed(lambda: sbx.write_file(path, blob)))
                got = []
                down.append(timed(lambda: got.append(sbx.read_file(path))))
                if got[0] != blob:
                    raise SystemExit("files API on %s: the bytes came back different" % name)
            rows["files API, %s" % name] = (rate(a.mib, up), rate(a.mib, down))
            must(sbx.run("rm -f " + path), "rm")
        up, down = [], []
        for _ in range(a.samples):
            up.append(timed(lambda: must(sbx.run("cat > /dev/null", stdin=blob), "cat")))
            out = []
            down.append(timed(lambda: out.append(
                must(sbx.run("head -c %d /dev/zero" % (a.mib << 20)), "head"))))
        rows["stream, stdin / stdout"] = (rate(a.mib, up), rate(a.mib, down))
        up, down = [], []
        for _ in range(a.samples):
            up.append(timed(lambda: must(sbx.run(
                "dd if=/dev/zero of=/home/user/dd.bin bs=1M count=%d conv=fsync status=none" % a.mib,
                user="root"), "dd write")))
            must(sbx.run("sync; echo 3 > /proc/sys/vm/drop_caches", user="root"), "drop caches")
            down.append(timed(lambda: must(sbx.run(
                "dd if=/home/user/dd.bin of=/dev/null bs=1M status=none", user="root"), "dd read")))
        rows["guest disk only (dd)"] = (rate(a.mib, up), rate(a.mib, down))
        sbx.delete()
    finally:
        d.stop()
        d.remove()

    base_up, base_down = rows["files API, disk"]
    print()
    print("%d MiB per transfer, p50 of %d, 1 vCPU / 256 MiB `base`, one sandbox:" % (a.mib, a.samples))
    print("%-26s %7s %12s %12s %9s %9s" % ("", "", "up MiB/s", "down MiB/s", "up/API", "down/API"))
    for name, (up, down) in rows.items():
        print("%-26s [%s] %12.1f %12.1f %8.2fx %8.2fx" %
              (name, acc, up, down, up / base_up if base_up else 0, down / base_down if base_down else 0))
    print("(the stream rows include a session's start and exit, about one round trip)")


if __name__ == "__main__":
    main()
