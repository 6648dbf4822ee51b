#!/usr/bin/env python3
"""spaced's loop latency while a large sandbox is forked (the capture's stream split).

A spaced (bench/lib/benchlib.py; --build picks the build directory, so two checkouts'
builds can be compared) makes one `base` sandbox of --mem MiB, fills --fill MiB of its
memory with random bytes (tmpfs: pages that are neither zero nor shared, all in the
migration stream), then forks it once while a thread asks GET /healthz every 5 ms. The
figure is how long /healthz took: its worst and p99 during the fork against the same
before it. A split of the stream that runs on the loop shows as one /healthz stalled for
the whole split; run on a worker thread it does not. Not a test.

Usage: python3 bench/bench_capture_loop.py [--build DIR] [--mem MiB] [--fill MiB]
(as root; SPACE_GUEST as for the other benchmarks)."""
import argparse
import json
import os
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from benchlib import Daemon, pct  # noqa: E402


def probe(url, stop, out):
    """Appends (start, seconds) of each GET /healthz until stop is set."""
    while not stop.is_set():
        t0 = time.monotonic()
        with urllib.request.urlopen(url + "/healthz", timeout=60) as r:
            r.read()
        out.append((t0, time.monotonic() - t0))
        time.sleep(0.005)


def window(samples, a, b):
    """Latencies (ms) of the probes that started in [a, b) or were still running at a."""
    return [s * 1000 for t, s in samples if a <= t < b or (t < a and t + s > a)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=None, help="build directory holding spaced")
    ap.add_argument("--mem", type=int, default=1024, help="sandbox memory in MiB (1024)")
    ap.add_argument("--fill", type=int, default=400, help="MiB of random data in RAM (400)")
    args = ap.parse_args()
    d = Daemon("bcaploop", build=args.build)
    health = d.start()
    c = d.client
    try:
        sbx = c.create(template="base", timeout=0, memory_mib=args.mem)
        sbx.run("dd if=/dev/urandom of=/dev/shm/fill bs=1M count=%d 2>/dev/null; sync" % args.fill)
        url = "http://127.0.0.1:%d" % d.port
        samples, stop = [], threading.Event()
        th = threading.Thread(target=probe, args=(url, stop, samples))
        th.start()
        time.sleep(3)
        t0 = time.monotonic()
        forks = sbx.fork(1)
        t1 = time.monotonic()
        time.sleep(1)
        stop.set()
        th.join()
        before, during = window(samples, 0, t0), window(samples, t0, t1)
        for x in [sbx] + forks:
            x.delete()
    finally:
        d.stop()
        d.remove()
    res = {"accel": health.get("accel", "?"), "build": args.build or "default",
           "mem_mib": args.mem, "fill_mib": args.fill, "fork_ms": round((t1 - t0) * 1000),
           "healthz_before_max_ms": round(max(before), 1),
           "healthz_during_max_ms": round(max(during), 1),
           "healthz_during_p99_ms": round(pct(during, 99), 1), "probes_during": len(during)}
    print(json.dumps(res))


if __name__ == "__main__":
    main()
