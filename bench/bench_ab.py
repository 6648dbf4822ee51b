#!/usr/bin/env python3
"""Two builds of spaced side by side, interleaved, for before/after comparisons on a
shared or busy host.

bench_api.py measures one build; two of its runs minutes apart on a host whose load
moves (helpers, CI, other VMs) differ by 2-3x for the same code. Here both builds run at
once (each a release spaced with its own data dir, jail on, no pool unless --pool), and
every sample alternates between them - A then B, then B then A - so load that comes and goes falls on
both alike and the ratio B/A stays meaningful even when the absolute figures do not.
Per sample: a create by snapshot restore (POST until the operation succeeded), command
round trips (`true`), a delete; then files API uploads and downloads. With --pool N both
run with a warm pool of N and each create is a pooled one: a sample first waits until
both sides' pools are full again (as bench_api.py does for one), so it measures the
claim path and not a refill.

Each side is a checkout: ROOT/build/spaced (`make programs`) and ROOT/build/guest (its
own initramfs: the agent must match its spaced; templates may be copies). Prints p50 per
side, the ratio B/A per figure, the accelerator and the load average before and after,
then the median of each create stage (spaced's `sandbox.create.stages` log line: queued,
template, disk, vm, spawn, net, refresh, persist, total) of the measured creates on both
sides, so where a difference comes from is read in the same run.
Not a test: it asserts nothing.

Usage: python3 bench/bench_ab.py A_ROOT B_ROOT [-n SAMPLES] [--rounds R] [--file-mib M]
                                [--pool N]
  e.g. python3 bench/bench_ab.py /work/before . -n 20   (as root)"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from benchlib import Daemon, pct, wait_snapshot  # noqa: E402
from space import SpaceError  # noqa: E402


STAGES = ("queued", "template", "disk", "vm", "spawn", "net", "refresh", "persist", "total")


def create_stages(log_path, ids):
    """{stage: [ms...]} from the `sandbox.create.stages` lines of the sandboxes in ids
    (the measured creates; the first, snapshot-making create is not among them)."""
    out = {k: [] for k in STAGES}
    with open(log_path, errors="replace") as f:
        for line in f:
            if "event=sandbox.create.stages" not in line:
                continue
            kv = dict(w.split("=", 1) for w in line.split() if "=" in w)
            if kv.get("sandbox") not in ids or kv.get("result") != "ok":
                continue
            for k in STAGES:
                v = kv.get(k + "_ms")
                if v is not None and v.lstrip("-").isdigit():
                    out[k].append(int(v))
    return out


def ms_since(t0):
    return (time.monotonic() - t0) * 1000


def pool_full(d, size):
    """Waits (up to 5 min) until d's warm pool holds `size` ready VMs."""
    deadline = time.monotonic() + 300
    while d.metric("space_pool_ready") < size and time.monotonic() < deadline:
        time.sleep(0.2)


def sample(d, rounds, out, pool, daemons):
    """One create, `rounds` command round trips, one delete; appended to out. With a pool,
    both sides' pools are full first: the other side's refill (a CPU-bound restore) must
    not run during this side's create."""
    c = d.client
    for other in daemons if pool else ():
        pool_full(other, pool)
    t0 = time.monotonic()
    sbx = c.create(template="base", timeout=0)
    out["create"].append(ms_since(t0))
    out["ids"].add(sbx.id)
    for _ in range(rounds):
        t0 = time.monotonic()
        assert sbx.run("true").exit_code == 0
        out["rtt"].append(ms_since(t0))
    t0 = time.monotonic()
    sbx.delete()
    out["delete"].append(ms_since(t0))


def files(c, mib, out):
    sbx = c.create(template="base", timeout=0)
    blob = os.urandom(1 << 20) * mib
    t0 = time.monotonic()
    sbx.write_file("/tmp/ab.bin", blob)
    out["upload"].append(mib / (time.monotonic() - t0))
    t0 = time.monotonic()
    assert sbx.read_file("/tmp/ab.bin") == blob, "downloaded bytes differ"
    out["download"].append(mib / (time.monotonic() - t0))
    sbx.delete()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a_root")
    ap.add_argument("b_root")
    ap.add_argument("-n", type=int, default=12, help="create samples per side (default 12)")
    ap.add_argument("--rounds", type=int, default=5, help="command round trips per sample")
    ap.add_argument("--file-mib", type=int, default=16, help="files API transfer size")
    ap.add_argument("--file-samples", type=int, default=3)
    ap.add_argument("--pool", type=int, default=0, help="warm pool size: pooled creates")
    a = ap.parse_args()
    roots = [os.path.abspath(a.a_root), os.path.abspath(a.b_root)]
    load0 = os.getloadavg()
    daemons, acc = [], "?"
    try:
        for i, root in enumerate(roots):
            d = Daemon("bab%d" % i, build=os.path.join(root, "build"),
                       guest=os.path.join(root, "build", "guest"))
            acc = d.start(pool=a.pool).get("accel", "?")
            daemons.append(d)
        for d in daemons:  # the first create of the shape makes the snapshot: not counted
            try:
                d.client.create(template="base", timeout=0).delete()
            except SpaceError as e:  # a cold boot may miss its deadline on a loaded host;
                print("first create (not counted) failed: %s" % e)  # the snapshot goes on
            wait_snapshot(d.client)
            if a.pool:  # this create starts the shape's pool (made on first demand)
                d.client.create(template="base", timeout=0).delete()
        res = [{k: [] for k in ("create", "rtt", "delete", "upload", "download")} for _ in roots]
        for r in res:
            r["ids"] = set()
        for i in range(a.n):
            order = (0, 1) if i % 2 == 0 else (1, 0)
            for side in order:
                sample(daemons[side], a.rounds, res[side], a.pool, daemons)
        for i in range(a.file_samples):
            for side in ((0, 1) if i % 2 == 0 else (1, 0)):
                files(daemons[side].client, a.file_mib, res[side])
        for d, r in zip(daemons, res):  # read before remove() deletes the data dir
            d.stop()
            r["stages"] = create_stages(os.path.join(d.data, "spaced.log"), r["ids"])
    finally:
        for d in daemons:
            d.stop()
            d.remove()
    load1 = os.getloadavg()
    print("A = %s\nB = %s" % tuple(roots))
    print("accelerator %s; load average %.1f before, %.1f after (interleaved: load falls on both)%s"
          % (acc, load0[0], load1[0], "; pooled creates (pool %d)" % a.pool if a.pool else ""))
    print("%-28s %12s %12s %8s" % ("p50", "A", "B", "B/A"))
    summary = {"accel": acc, "load": [load0[0], load1[0]], "n": a.n, "pool": a.pool}
    for key, unit in (("create", "ms"), ("rtt", "ms"), ("delete", "ms"),
                      ("upload", "MiB/s"), ("download", "MiB/s")):
        va, vb = pct(res[0][key], 50), pct(res[1][key], 50)
        ratio = vb / va if va else 0.0
        print("%-28s %9.1f %-2s %9.1f %-2s %7.2fx" % ("%s [%s]" % (key, acc), va, unit[:2], vb,
                                                     unit[:2], ratio))
        summary[key] = {"a": va, "b": vb, "b_over_a": round(ratio, 3),
                        "a_p95": pct(res[0][key], 95), "b_p95": pct(res[1][key], 95)}
    print("create p95 [%s]: A %.1f ms, B %.1f ms" % (acc, summary["create"]["a_p95"],
                                                   summary["create"]["b_p95"]))
    print("%-28s %12s %12s %8s" % ("create stage p50 (spaced log)", "A", "B", "B/A"))
    summary["stages"] = {}
    for k in STAGES:
        va, vb = pct(res[0]["stages"][k], 50), pct(res[1]["stages"][k], 50)
        print("%-28s %9.1f ms %9.1f ms %7.2fx" % ("%s [%s]" % (k, acc), va, vb,
                                                 vb / va if va else 0.0))
        summary["stages"][k] = {"a": va, "b": vb}
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
