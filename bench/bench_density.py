#!/usr/bin/env python3
"""Density and load: N idle sandboxes on one host, made by P parallel clients through
spaced's HTTP API, and what each costs while it idles.

1. Starts its own release spaced (build/spaced, guest files from SPACE_GUEST; default
   settings: jail on where possible, no pool) on a free loopback port with a fresh data
   dir, makes the template's snapshot with a first create (not counted), then
2. creates N sandboxes of the template with P client threads, each create timed from
   POST /v1/sandboxes until its operation succeeded: creates/s (N / wall time) and
   latency p50/p95/max;
3. lets them settle (--settle s), then measures over a window (--window s):
   - idle CPU per sandbox: utime+stime of each sandbox's QEMU (/proc/<pid>/stat, all its
     threads, including threads that exited) over the window, in % of one core, with a
     split by thread (vCPU threads vs QEMU's main loop vs the rest);
   - memory per sandbox: PSS (template RAM pages shared through the page cache are
     divided between the clones mapping them) with its anonymous/file split, RSS (counts
     shared pages in full for each VM), the jail cgroup's memory.current (adds kernel
     memory such as page tables), and the drop of the host's MemAvailable since before
     the creates (noisy on a shared host);
   - spaced's own RSS, open file descriptors and CPU over the same window;
   and, read as soon as the creates are done, the CPU time per create (each QEMU's
   whole life so far plus spaced's CPU during the creates): the cores divided by it
   bound the creates/s the host can sustain, and unlike wall time it stays meaningful
   on a shared host;
4. counts errors (failed creates, sandboxes not running at the end, QEMUs gone): must be 0;
5. deletes everything it created (P clients), stops spaced, removes its data dir.

Prints each figure with the accelerator and the host's load average (during the creates
and the idle window), then one JSON line. Not a test: it asserts
nothing. --irqs adds the guest's interrupt counts over 10 idle seconds in one sandbox
(what wakes the guest).

--pool N runs spaced with a warm pool of N (add --spaced-arg=--pool-budget-mib=M for one
that follows demand) and starts the shape's pool before the creates, waiting until it is
full; it then also prints how many creates were claimed from the pool.

Usage: python3 bench/bench_density.py [-n N] [-p P] [--window S] [--settle S] [--irqs]
       [--pool N] [--spaced-arg ARG ...] [TEMPLATE]   (as root, after `make programs templates`)."""
import argparse
import json
import os
import re
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from benchlib import Daemon, pct, wait_snapshot  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")
MIB = 1024.0 * 1024.0


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def stat_fields(path):
    """Fields after the command name of a /proc stat file (the name may hold anything)."""
    s = read(path)
    return s[s.rfind(")") + 2:].split() if s else []


def cpu_ticks(path):
    f = stat_fields(path)
    return int(f[11]) + int(f[12]) if len(f) > 12 else 0


def qemu_by_sandbox(spaced_pid):
    """{sandbox id: QEMU pid} for spaced's QEMU children (their -name starts with the id)."""
    out = {}
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        f = stat_fields("/proc/%s/stat" % p)
        if len(f) < 2 or int(f[1]) != spaced_pid:
            continue
        argv = read("/proc/%s/cmdline" % p).split("\0")
        if not argv or "qemu" not in os.path.basename(argv[0]) or "-name" not in argv:
            continue
        name = argv[argv.index("-name") + 1] if argv.index("-name") + 1 < len(argv) else ""
        out[name.split(",")[0]] = int(p)
    return out


def pool_claims(d):
    """{pooled VM id: sandbox id} from spaced's log: a claimed clone keeps its pool name."""
    out = {}
    with open(os.path.join(d.data, "spaced.log"), errors="replace") as f:
        for line in f:
            m = re.search(r"event=pool\.claim sandbox=(\S+) id=(\S+) left=", line)
            if m:
                out[m.group(2)] = m.group(1)
    return out


def thread_ticks(pid):
    """{"main"|"vcpu"|"other": ticks} over the live threads of pid: its main loop, its
    vCPU threads (named "CPU n/TCG|KVM" with debug-threads=on), the rest (QMP monitor
    iothread, RCU, workers)."""
    out = {"main": 0, "vcpu": 0, "other": 0}
    try:
        tids = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return out
    for t in tids:
        base = "/proc/%d/task/%s/" % (pid, t)
        kind = "main" if int(t) == pid else \
            "vcpu" if read(base + "comm").startswith("CPU ") else "other"
        out[kind] += cpu_ticks(base + "stat")
    return out


def wakeups(pid):
    """{tid: voluntary context switches} of pid's live threads: each is a thread going
    to sleep, so the rate counts wakeups (load-independent, unlike CPU time)."""
    out = {}
    try:
        tids = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return out
    for t in tids:
        m = re.search(r"^voluntary_ctxt_switches:\s+(\d+)", read("/proc/%d/task/%s/status" % (pid, t)), re.M)
        if m:
            out[t] = int(m.group(1))
    return out


def wakeups_between(w0, w1):
    """Wakeups from snapshot w0 to w1 of one process (threads born in between count from
    0; threads that exited are lost, which undercounts a little)."""
    return sum(n - w0.get(t, 0) for t, n in w1.items())


def rollup(pid):
    """smaps_rollup of pid in bytes, e.g. {"Rss": .., "Pss": .., "Pss_Anon": ..}."""
    out = {}
    for line in read("/proc/%d/smaps_rollup" % pid).splitlines():
        m = re.match(r"(\w+):\s+(\d+) kB", line)
        if m:
            out[m.group(1)] = int(m.group(2)) * 1024
    return out


def cgroup_mem(pid):
    """Memory charged to pid's cgroup (v2 memory.current, v1 memory.usage_in_bytes), or
    None when it has no memory cgroup of its own."""
    for line in read("/proc/%d/cgroup" % pid).splitlines():
        _, ctrl, path = line.split(":", 2)
        if path == "/":
            continue
        if ctrl == "":
            v = read("/sys/fs/cgroup%s/memory.current" % path).strip()
        elif "memory" in ctrl.split(","):
            v = read("/sys/fs/cgroup/memory%s/memory.usage_in_bytes" % path).strip()
        else:
            continue
        return int(v) if v.isdigit() else None
    return None


def mem_available():
    m = re.search(r"MemAvailable:\s+(\d+) kB", read("/proc/meminfo"))
    return int(m.group(1)) * 1024 if m else 0


def loadavg():
    """The host's 1-minute load average (other work on a shared host inflates CPU times
    and latencies; per-process CPU deltas and wakeups are less affected)."""
    f = read("/proc/loadavg").split()
    return float(f[0]) if f else 0.0


def status_field(pid, name):
    m = re.search(r"^%s:\s+(\d+) kB" % name, read("/proc/%d/status" % pid), re.M)
    return int(m.group(1)) * 1024 if m else 0


def fd_limit(pid):
    """The soft RLIMIT_NOFILE of pid (0 when unknown)."""
    m = re.search(r"^Max open files\s+(\d+)", read("/proc/%d/limits" % pid), re.M)
    return int(m.group(1)) if m else 0


def run_parallel(n, p, fn):
    """Calls fn(i) for i in 0..n-1 from p threads; returns [(i, result or exception)]."""
    lock = threading.Lock()
    todo = list(range(n))
    done = []

    def worker():
        while True:
            with lock:
                if not todo:
                    return
                i = todo.pop(0)
            try:
                r = fn(i)
            except Exception as e:  # counted as an error by the caller
                r = e
            with lock:
                done.append((i, r))

    threads = [threading.Thread(target=worker) for _ in range(max(1, p))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return done


def guest_irqs(sbx, secs=10):
    """Interrupt counts in the guest over secs idle seconds: {line label: count}."""
    r = sbx.run("cat /proc/interrupts; sleep %d; echo ====; cat /proc/interrupts" % secs)
    before, _, after = r.stdout.partition("====")

    def parse(text):
        out = {}
        for line in text.splitlines():
            parts = line.split()
            if len(parts) >= 2 and parts[0].endswith(":") and parts[1].isdigit():
                label = parts[0][:-1] + " " + " ".join(parts[2:])
                out[label.strip()] = int(parts[1])
        return out
    b, a = parse(before), parse(after)
    return {k: a[k] - b.get(k, 0) for k in a if a[k] - b.get(k, 0) > 0}


def measure(d, sbx_pids, window):
    """CPU and memory of the sandboxes' QEMUs and of spaced over window seconds."""
    spid = d.proc.pid
    t0 = time.monotonic()
    cpu0 = {s: cpu_ticks("/proc/%d/stat" % p) for s, p in sbx_pids.items()}
    th0 = {s: thread_ticks(p) for s, p in sbx_pids.items()}
    wk0 = {s: wakeups(p) for s, p in sbx_pids.items()}
    sp0 = cpu_ticks("/proc/%d/stat" % spid)
    load0 = loadavg()
    time.sleep(window)
    secs = time.monotonic() - t0
    cpu1 = {s: cpu_ticks("/proc/%d/stat" % p) for s, p in sbx_pids.items()}
    th1 = {s: thread_ticks(p) for s, p in sbx_pids.items()}
    wk1 = {s: wakeups(p) for s, p in sbx_pids.items()}
    sp1 = cpu_ticks("/proc/%d/stat" % spid)
    alive = [s for s, p in sbx_pids.items() if os.path.exists("/proc/%d" % p)]
    n = max(1, len(alive))

    def pct_core(ticks):
        return 100.0 * ticks / CLK_TCK / secs / n

    per_vm = [100.0 * (cpu1[s] - cpu0[s]) / CLK_TCK / secs for s in alive]
    split = {k: pct_core(sum(th1[s][k] - th0[s][k] for s in alive)) for k in ("main", "vcpu", "other")}
    mem = [rollup(sbx_pids[s]) for s in alive]
    cg = [cgroup_mem(sbx_pids[s]) for s in alive]
    avg = lambda key: sum(m.get(key, 0) for m in mem) / n / MIB  # noqa: E731
    return {
        "window_s": round(secs, 1), "alive": len(alive),
        "load_window": [load0, loadavg()],
        "cpu_pct": pct_core(sum(cpu1[s] - cpu0[s] for s in alive)),
        "cpu_pct_max": max(per_vm) if per_vm else 0.0, "cpu_pct_per_vm": per_vm,
        "cpu_split_pct": split,
        "wakeups_per_s": sum(wakeups_between(wk0[s], wk1[s]) for s in alive) / secs / n,
        "pss_mib": avg("Pss"), "pss_anon_mib": avg("Pss_Anon"), "pss_file_mib": avg("Pss_File"),
        "rss_mib": avg("Rss"),
        "cgroup_mib": (sum(cg) / n / MIB) if cg and None not in cg else None,
        "spaced_cpu_pct": 100.0 * (sp1 - sp0) / CLK_TCK / secs,
        "spaced_rss_mib": status_field(spid, "VmRSS") / MIB,
        "spaced_hwm_mib": status_field(spid, "VmHWM") / MIB,
        "spaced_fds": len(os.listdir("/proc/%d/fd" % spid)), "spaced_fd_limit": fd_limit(spid),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=10, help="sandboxes (default 10)")
    ap.add_argument("-p", type=int, default=2, help="parallel clients (default 2)")
    ap.add_argument("--window", type=float, default=30, help="idle measuring window, s (default 30)")
    ap.add_argument("--settle", type=float, default=15,
                    help="wait after the last create before measuring, s (default 15)")
    ap.add_argument("--irqs", action="store_true",
                    help="print the guest's interrupts over 10 idle s in one sandbox")
    ap.add_argument("--spaced-arg", action="append", default=[],
                    help="extra spaced argument (repeatable), e.g. --spaced-arg=--no-jail")
    ap.add_argument("--pool", type=int, default=0, help="warm pool size (default 0: none)")
    ap.add_argument("template", nargs="?", default="base")
    a = ap.parse_args()
    claimed = 0

    d = Daemon("bdens")
    made, pids, errors = [], {}, []
    try:
        health = d.start(pool=a.pool, extra=a.spaced_arg)
        acc = health.get("accel", "?")
        c = d.client
        c.create(template=a.template, timeout=0).delete()  # cold boot + snapshot: not counted
        wait_snapshot(c, a.template)
        if a.pool:  # this create starts the shape's pool; the burst starts with it full
            c.create(template=a.template, timeout=0).delete()
            deadline = time.monotonic() + 600
            while d.metric("space_pool_ready") < a.pool and time.monotonic() < deadline:
                time.sleep(0.5)
        avail0 = mem_available()
        load_creates = loadavg()
        spaced_rss0 = status_field(d.proc.pid, "VmRSS") / MIB
        spaced_fds0 = len(os.listdir("/proc/%d/fd" % d.proc.pid))

        def create(i):
            t0 = time.monotonic()
            sbx = c.create(template=a.template, timeout=0)
            return sbx, (time.monotonic() - t0) * 1000

        sp_cpu0 = cpu_ticks("/proc/%d/stat" % d.proc.pid)
        t0 = time.monotonic()
        res = run_parallel(a.n, a.p, create)
        wall = time.monotonic() - t0
        sp_cpu1 = cpu_ticks("/proc/%d/stat" % d.proc.pid)
        load_creates = [load_creates, loadavg()]
        lat = []
        for _, r in res:
            if isinstance(r, Exception):
                errors.append("create: %s" % r)
            else:
                made.append(r[0])
                lat.append(r[1])
        by_id = qemu_by_sandbox(d.proc.pid)
        for vm_name, sid in pool_claims(d).items():
            if vm_name in by_id:
                by_id[sid] = by_id.pop(vm_name)
        for s in made:
            if s.id in by_id:
                pids[s.id] = by_id[s.id]
            else:
                errors.append("no QEMU process for %s" % s.id)
        # CPU per create, read at once: each QEMU's whole life so far (restore, HELLO,
        # refresh; a pooled clone's warm-up too) plus spaced's CPU during the creates.
        # CPU time, unlike wall time, stays meaningful on a shared host; cores divided by
        # it bound the creates/s this host can sustain.
        qemu_ms = [cpu_ticks("/proc/%d/stat" % p) * 1000.0 / CLK_TCK for p in pids.values()]
        cpu_create = {"qemu_ms": sum(qemu_ms) / max(1, len(qemu_ms)),
                      "spaced_ms": (sp_cpu1 - sp_cpu0) * 1000.0 / CLK_TCK / max(1, len(made))}
        print("created %d of %d in %.1f s; settling %.0f s" % (len(made), a.n, wall, a.settle),
              flush=True)
        time.sleep(a.settle)
        m = measure(d, pids, a.window)
        host_mib = (avail0 - mem_available()) / max(1, len(made)) / MIB
        states = {s.id: s.state for s in c.list()}
        for s in made:
            if states.get(s.id) != "running":
                errors.append("%s is %s after the window" % (s.id, states.get(s.id)))
        if m["alive"] != len(pids):
            errors.append("%d QEMUs exited during the window" % (len(pids) - m["alive"]))
        irqs = guest_irqs(made[0]) if a.irqs and made else None

        t0 = time.monotonic()
        dres = run_parallel(len(made), a.p, lambda i: made[i].delete())
        del_s = time.monotonic() - t0
        errors += ["delete: %s" % r for _, r in dres if isinstance(r, Exception)]
        made = [made[i] for i, r in dres if isinstance(r, Exception)]
    finally:
        for s in made:  # an interrupted run: take down what is left
            try:
                s.delete()
            except Exception:
                pass
        d.stop()
        claimed = len(pool_claims(d))
        for p in pids.values():  # a QEMU that outlived its sandbox or spaced
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        d.remove()

    n_ok = len(lat)
    print()
    print("spaced density (release build, jail %s, `%s`), N=%d, P=%d, idle window %.0f s:" %
          ("on" if "--no-jail" not in a.spaced_arg and os.geteuid() == 0 else "off",
           a.template, a.n, a.p, m["window_s"]))
    print("host load average (1 min)          %8.2f -> %.2f during the creates, %.2f -> %.2f "
          "in the idle window (%d cores)" % (load_creates[0], load_creates[1],
                                             m["load_window"][0], m["load_window"][1],
                                             os.cpu_count() or 0))
    print("creates/s                          [%s] %8.2f" % (acc, n_ok / wall if wall else 0))
    if a.pool:
        print("claimed from the warm pool         %8d of %d (pool %d at the start)" %
              (claimed, a.n, a.pool))
    print("create latency p50 / p95 / max     [%s] %8.1f / %.1f / %.1f ms" %
          (acc, pct(lat, 50), pct(lat, 95), max(lat) if lat else 0))
    per_create = cpu_create["qemu_ms"] + cpu_create["spaced_ms"]
    print("CPU per create (QEMU + spaced)     [%s] %8.1f ms (%.1f + %.1f): at most %.1f "
          "creates/s on %d cores" % (acc, per_create, cpu_create["qemu_ms"],
                                     cpu_create["spaced_ms"],
                                     1000.0 * (os.cpu_count() or 1) / per_create if per_create else 0,
                                     os.cpu_count() or 0))
    print("idle CPU per sandbox (mean / max)  [%s] %8.3f / %.3f %% of a core" %
          (acc, m["cpu_pct"], m["cpu_pct_max"]))
    sp = m["cpu_split_pct"]
    print("  of which QEMU main loop / vCPU / other threads: %.3f / %.3f / %.3f %%" %
          (sp["main"], sp["vcpu"], sp["other"]))
    print("QEMU thread wakeups per sandbox    [%s] %8.1f /s" % (acc, m["wakeups_per_s"]))
    print("memory per sandbox: PSS            [%s] %8.1f MiB (anon %.1f, file %.1f)" %
          (acc, m["pss_mib"], m["pss_anon_mib"], m["pss_file_mib"]))
    print("memory per sandbox: RSS            [%s] %8.1f MiB" % (acc, m["rss_mib"]))
    if m["cgroup_mib"] is not None:
        print("memory per sandbox: jail cgroup    [%s] %8.1f MiB (memory.current)" %
              (acc, m["cgroup_mib"]))
    print("host MemAvailable drop / sandbox   [%s] %8.1f MiB (noisy on a shared host)" %
          (acc, host_mib))
    print("spaced RSS / HWM / fds             %8.1f / %.1f MiB / %d of %d (before the creates: %.1f MiB, %d fds)" %
          (m["spaced_rss_mib"], m["spaced_hwm_mib"], m["spaced_fds"], m["spaced_fd_limit"],
           spaced_rss0, spaced_fds0))
    print("spaced CPU while idle              %8.3f %% of a core (%.4f %% per sandbox)" %
          (m["spaced_cpu_pct"], m["spaced_cpu_pct"] / max(1, m["alive"])))
    print("deletes/s                          %8.2f" % (len(dres) / del_s if del_s else 0))
    if irqs is not None:
        print("guest interrupts over 10 idle s:   %s" %
              ", ".join("%s: %d" % kv for kv in sorted(irqs.items(), key=lambda kv: -kv[1])))
    print("errors                             %8d" % len(errors))
    for e in errors[:20]:
        print("  " + e)
    out = {"accel": acc, "template": a.template, "n": a.n, "p": a.p, "pool": a.pool,
           "pool_claims": claimed,
           "creates_per_s": round(n_ok / wall, 2) if wall else 0,
           "create_p50_ms": round(pct(lat, 50), 1), "create_p95_ms": round(pct(lat, 95), 1),
           "create_max_ms": round(max(lat) if lat else 0, 1),
           "host_mem_avail_drop_mib": round(host_mib, 1), "errors": len(errors),
           "spaced_rss_before_mib": round(spaced_rss0, 1), "spaced_fds_before": spaced_fds0,
           "load_creates": load_creates, "cores": os.cpu_count(),
           "cpu_per_create_ms": {k: round(v, 1) for k, v in cpu_create.items()}}
    out.update({k: (round(v, 4) if isinstance(v, float) else v) for k, v in m.items()
                if k not in ("cpu_split_pct", "cpu_pct_per_vm")})
    out["cpu_split_pct"] = {k: round(v, 4) for k, v in sp.items()}
    if irqs is not None:
        out["guest_irqs_10s"] = irqs
    print(json.dumps(out))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
