#!/usr/bin/env python3
"""Where a command's round trip goes: the guest's own cost of starting a process,
measured inside a sandbox and on the host in one run.

A `run("true")` through spaced is spaced and the client, plus one agent round trip, plus
one process spawn in the guest, plus the exit path. This prints each part it can measure
separately, side by side:
  - the round trip of `true` through the API (what clients see);
  - an agent round trip that starts no process (`stat` of a file through the files API);
  - bench/probe/spawn_probe (built statically into build/spawn_probe) run inside the
    sandbox and on the host: fork+exec and vfork+exec of /bin/true, vfork+exec of
    `sh -c true`, and the agent's per-command pipes alone; guest / host is what the
    accelerator adds to process work (TCG here makes it dearer; a KVM guest runs it at
    about the host's speed).
Labelled with the accelerator spaced reports and the load average before and after.
Not a test: it asserts nothing but that the commands ran.

Usage: python3 bench/bench_spawn.py [-n SPAWNS] [--rounds R] [--template base]"""
import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from benchlib import Daemon, ROOT, pct, wait_snapshot  # noqa: E402

PROBE_SRC = os.path.join(ROOT, "bench", "probe", "spawn_probe.c")
PROBE_BIN = os.path.join(ROOT, "build", "spawn_probe")
WAYS = ("fork_exec_true", "vfork_exec_true", "vfork_exec_sh", "pipes")


def build_probe():
    """Static, so it runs whatever libc the template has; rebuilt when the source is newer."""
    if os.path.exists(PROBE_BIN) and os.path.getmtime(PROBE_BIN) >= os.path.getmtime(PROBE_SRC):
        return
    os.makedirs(os.path.dirname(PROBE_BIN), exist_ok=True)
    subprocess.run(["cc", "-static", "-O2", "-Wall", "-Wextra", "-Werror", "-D_GNU_SOURCE",
                    "-o", PROBE_BIN, PROBE_SRC], check=True)


def timed(fn, rounds):
    out = []
    for _ in range(rounds):
        t0 = time.monotonic()
        fn()
        out.append((time.monotonic() - t0) * 1000)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=30, help="spawns per way in the probe (default 30)")
    ap.add_argument("--rounds", type=int, default=30, help="API round trips (default 30)")
    ap.add_argument("--template", default="base")
    a = ap.parse_args()
    build_probe()
    with open(PROBE_BIN, "rb") as f:
        probe = f.read()
    load0 = os.getloadavg()[0]
    host = json.loads(subprocess.run([PROBE_BIN, str(a.n)], check=True, capture_output=True,
                                     text=True).stdout)
    d = Daemon("bspawn")
    try:
        acc = d.start(pool=0).get("accel", "?")
        c = d.client
        c.create(template=a.template, timeout=0).delete()  # the first may cold boot
        wait_snapshot(c, a.template)
        sbx = c.create(template=a.template, timeout=0)
        sbx.write_file("/tmp/spawn_probe", probe, mode=0o755)
        rtt = timed(lambda: sbx.run("true").exit_code == 0 or sys.exit("`true` failed"), a.rounds)
        stat = timed(lambda: sbx.stat("/tmp/spawn_probe"), a.rounds)
        res = sbx.run("/tmp/spawn_probe %d" % a.n)
        if res.exit_code != 0:
            sys.exit("probe failed in the guest: " + res.stderr)
        guest = json.loads(res.stdout)
        sbx.delete()
    finally:
        d.stop()
        d.remove()
    load1 = os.getloadavg()[0]

    print()
    print("one process spawn, guest (`%s`, 1 vCPU) vs host, p50 of %d each; load %.1f -> %.1f:"
          % (a.template, a.n, load0, load1))
    for w in WAYS:
        g, h = guest[w]["p50"], host[w]["p50"]
        print("  %-22s [%s] guest %7.2f ms   host %7.2f ms   guest/host %5.2fx"
              % (w, acc, g, h, g / h if h else 0.0))
    print("through the API, p50 of %d:" % a.rounds)
    print("  command round trip (`true`)  [%s] %7.2f ms  p95 %7.2f ms" % (acc, pct(rtt, 50), pct(rtt, 95)))
    print("  agent round trip (files stat)[%s] %7.2f ms  p95 %7.2f ms" % (acc, pct(stat, 50), pct(stat, 95)))
    print("  of a round trip: agent %.0f %%, one vfork+exec of sh %.0f %%, the rest (spaced, "
          "client, exit path) %.0f %%" % (
              100 * pct(stat, 50) / pct(rtt, 50), 100 * guest["vfork_exec_sh"]["p50"] / pct(rtt, 50),
              100 * (pct(rtt, 50) - pct(stat, 50) - guest["vfork_exec_sh"]["p50"]) / pct(rtt, 50)))
    print(json.dumps({"accel": acc, "load": [round(load0, 2), round(load1, 2)],
                      "rtt_p50_ms": round(pct(rtt, 50), 2), "stat_p50_ms": round(pct(stat, 50), 2),
                      "guest": guest, "host": host}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
