#!/usr/bin/env python3
"""The platform's own overhead, end to end: what a client sees through spaced's HTTP API
next to what the VM runtime alone takes for the same work, measured in one run.

1. build/bench_vm (the VM runtime without spaced, see bench_vm.c) gives the runtime's
   snapshot restore -> agent ready and warm-pool claim -> agent ready (p50).
2. A real spaced (release build, default settings: jail on where possible) on a free
   loopback port and a fresh data dir, without a pool: N creates of `base`, each timed
   from POST /v1/sandboxes until its operation succeeded (restore from the template
   snapshot + the agent's refresh), then deleted (timed the same way).
3. The same spaced restarted with --pool 2: N creates claimed from the warm pool (each
   waits until the pool is full again, as a client spreading its creates would see),
   each followed by its first command (`true`), timed on its own.
4. In one sandbox: command round trips (session create + attach + `true` to its exit
   event) and a 64 MiB file upload and download through the files API.

It prints each figure with the accelerator, then the ratios: API create vs runtime
restore, API create from the pool vs the runtime's claim. Not a test: it asserts nothing.

Usage: python3 bench/bench_api.py [-n CREATES] [--rounds ROUNDS]  (as root, after `make
programs templates`; `make build/bench_vm` is run when the binary is missing)."""
import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from benchlib import BUILD, GUEST, ROOT, Daemon, pct, wait_snapshot  # noqa: E402

FILE_MIB = 64


def ensure_built():
    for target in ("programs", "build/bench_vm"):
        want = os.path.join(BUILD, "spaced" if target == "programs" else "bench_vm")
        if not os.path.exists(want):
            subprocess.run(["make", "-C", ROOT, target], check=True, stdout=subprocess.DEVNULL)


def runtime_figures(n, claims):
    """bench_vm's JSON line: the runtime's own restore and pool claim times."""
    env = dict(os.environ, SPACE_GUEST=GUEST)
    r = subprocess.run([os.path.join(BUILD, "bench_vm"), "-n", str(n), "-c", str(claims), "-j"],
                       cwd=ROOT, env=env, capture_output=True, text=True)
    sys.stdout.write(r.stdout)
    if r.returncode != 0:
        sys.stderr.write(r.stderr)
        raise SystemExit("bench_vm failed")
    return json.loads([l for l in r.stdout.splitlines() if l.startswith("{")][-1])


def timed_create(c):
    t0 = time.monotonic()
    sbx = c.create(template="base", timeout=0)
    return sbx, (time.monotonic() - t0) * 1000


def timed_delete(sbx):
    t0 = time.monotonic()
    sbx.delete()
    return (time.monotonic() - t0) * 1000


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=10, help="creates per mode (default 10)")
    ap.add_argument("--rounds", type=int, default=20, help="command round trips (default 20)")
    a = ap.parse_args()
    ensure_built()
    rt = runtime_figures(max(3, a.n // 2), 20)
    acc = rt["accel"]
    d = Daemon("bapi")
    try:
        health = d.start(pool=0)
        acc_api = health.get("accel", "?")
        c = d.client
        first, first_ms = timed_create(c)  # may cold boot: not counted
        timed_delete(first)
        wait_snapshot(c)
        restore_ms, delete_ms = [], []
        for _ in range(a.n):
            sbx, ms = timed_create(c)
            restore_ms.append(ms)
            delete_ms.append(timed_delete(sbx))

        sbx, _ = timed_create(c)
        rtt = []
        for _ in range(a.rounds):
            t0 = time.monotonic()
            res = sbx.run("true")
            rtt.append((time.monotonic() - t0) * 1000)
            assert res.exit_code == 0, res
        blob = os.urandom(1 << 20) * FILE_MIB
        t0 = time.monotonic()
        sbx.write_file("/home/user/bench.bin", blob)
        up_s = time.monotonic() - t0
        t0 = time.monotonic()
        back = sbx.read_file("/home/user/bench.bin")
        down_s = time.monotonic() - t0
        assert back == blob, "downloaded bytes differ"
        sbx.delete()

        d.stop()
        d.start(pool=2)
        c = d.client
        pooled_ms, first_cmd_ms = [], []
        for _ in range(a.n):
            deadline = time.monotonic() + 300
            while d.metric("space_pool_ready") < 2 and time.monotonic() < deadline:
                time.sleep(0.2)
            sbx, ms = timed_create(c)
            pooled_ms.append(ms)
            t0 = time.monotonic()
            sbx.run("true")
            first_cmd_ms.append((time.monotonic() - t0) * 1000)
            timed_delete(sbx)
    finally:
        d.stop()
        d.remove()

    api50, pool50 = pct(restore_ms, 50), pct(pooled_ms, 50)
    print()
    print("spaced API (release build, jail %s, 1 vCPU / 256 MiB `base`), n=%d each:" %
          ("on" if os.geteuid() == 0 else "off", a.n))
    print("create by snapshot restore           [%s] p50 %8.1f ms  p95 %8.1f ms" %
          (acc_api, api50, pct(restore_ms, 95)))
    print("create from the warm pool            [%s] p50 %8.1f ms  p95 %8.1f ms" %
          (acc_api, pool50, pct(pooled_ms, 95)))
    print("first command in a pooled sandbox    [%s] p50 %8.1f ms" % (acc_api, pct(first_cmd_ms, 50)))
    print("delete                               [%s] p50 %8.1f ms" % (acc_api, pct(delete_ms, 50)))
    print("command round trip (`true`)          [%s] p50 %8.1f ms  p95 %8.1f ms" %
          (acc_api, pct(rtt, 50), pct(rtt, 95)))
    print("files API %d MiB                     [%s] upload %.1f MiB/s, download %.1f MiB/s" %
          (FILE_MIB, acc_api, FILE_MIB / up_s, FILE_MIB / down_s))
    print("first create (cold boot + snapshot)  [%s] %8.1f ms" % (acc_api, first_ms))
    print()
    print("side by side, same run:")
    print("API create vs runtime restore        [%s] %8.1f ms vs %8.1f ms: platform %+.1f ms (%+.0f%%)" %
          (acc, api50, rt["restore_ms"], api50 - rt["restore_ms"],
           100.0 * (api50 - rt["restore_ms"]) / rt["restore_ms"]))
    print("API pooled create vs runtime claim   [%s] %8.1f ms vs %8.1f ms: platform %+.1f ms" %
          (acc, pool50, rt["pool_p50_ms"], pool50 - rt["pool_p50_ms"]))
    print("API create vs bare QEMU restore      [%s] %8.1f ms vs %8.1f ms: %.2fx" %
          (acc, api50, rt["bare_restore_ms"], api50 / rt["bare_restore_ms"]))
    print(json.dumps({"accel": acc_api, "api_create_restore_p50_ms": round(api50, 1),
                      "api_create_pool_p50_ms": round(pool50, 1),
                      "api_delete_p50_ms": round(pct(delete_ms, 50), 1),
                      "first_cmd_pooled_p50_ms": round(pct(first_cmd_ms, 50), 1),
                      "exec_rtt_p50_ms": round(pct(rtt, 50), 1),
                      "upload_mib_s": round(FILE_MIB / up_s, 1),
                      "download_mib_s": round(FILE_MIB / down_s, 1), "runtime": rt}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
